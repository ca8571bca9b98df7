//! Where and how stage threads run: stage-to-core mapping (`--cpus
//! feed=0,engine=1,shard0=1`), pinning, and real-time priority
//! (`--rt-priority N`).
//!
//! Both are opt-in: with no map every stage floats and runs at normal
//! priority, which is the right default on a small shared machine. When a
//! stage is mapped to a core or asked to run at real-time priority and the
//! OS refuses, start-up fails loudly instead of running otherwise while the
//! operator believes the setting holds.
//!
//! Real-time priority (`SCHED_FIFO`) is for the stages that carry prices:
//! feeds, the engine and the gateway shards (which host the engine and the
//! provider ingest with `--threading shared`). A woken stage then preempts
//! any normal-priority thread at once instead of queueing behind it; on a
//! kernel without preemption and a 250 Hz tick that queueing is what the
//! millisecond tail is made of (BENCHMARKS.md, run 16). The request workers and dispatcher, the recorder, the
//! acceptor and the ops endpoints stay at normal priority: answering
//! requests and accepting connections must not take CPU from the price
//! stream at real-time priority. (Sessions' logons and subscriptions are
//! read by the shards, which are real-time; admission limits bound them.)

use std::fmt;
use std::str::FromStr;

/// A pipeline stage that runs on its own thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// The provider feed thread.
    Feed,
    /// The engine thread.
    Engine,
    /// Gateway shard by index.
    Shard(u16),
    /// The capture recorder thread (not real-time).
    Recorder,
    /// The request-worker thread (not real-time).
    Requests,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stage::Feed => f.write_str("feed"),
            Stage::Engine => f.write_str("engine"),
            Stage::Shard(i) => write!(f, "shard{i}"),
            Stage::Recorder => f.write_str("recorder"),
            Stage::Requests => f.write_str("requests"),
        }
    }
}

impl FromStr for Stage {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "feed" => Ok(Stage::Feed),
            "engine" => Ok(Stage::Engine),
            "recorder" => Ok(Stage::Recorder),
            "requests" => Ok(Stage::Requests),
            "shard" => Ok(Stage::Shard(u16::MAX)),
            _ => s
                .strip_prefix("shard")
                .and_then(|n| n.parse::<u16>().ok())
                .map(Stage::Shard)
                .ok_or_else(|| {
                    format!("unknown stage `{s}` (feed, engine, shard, shardN, recorder, requests)")
                }),
        }
    }
}

/// Which core each stage is pinned to. `shard=N` (no index) applies to every
/// shard without its own entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuMap {
    entries: Vec<(Stage, usize)>,
    /// `SCHED_FIFO` priority for the stages that carry prices.
    rt_priority: Option<u8>,
}

impl FromStr for CpuMap {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut entries = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (stage, core) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected stage=core"))?;
            let stage: Stage = stage.trim().parse()?;
            let core: usize = core
                .trim()
                .parse()
                .map_err(|_| format!("`{part}`: core must be a number"))?;
            if entries.iter().any(|(s, _)| *s == stage) {
                return Err(format!("stage {stage} mapped twice"));
            }
            entries.push((stage, core));
        }
        Ok(CpuMap {
            entries,
            rt_priority: None,
        })
    }
}

impl CpuMap {
    /// The core for `stage`, if mapped.
    pub fn core_for(&self, stage: Stage) -> Option<usize> {
        let exact = self.entries.iter().find(|(s, _)| *s == stage);
        let any_shard = || {
            matches!(stage, Stage::Shard(_))
                .then(|| {
                    self.entries
                        .iter()
                        .find(|(s, _)| *s == Stage::Shard(u16::MAX))
                })
                .flatten()
        };
        exact.or_else(any_shard).map(|&(_, c)| c)
    }

    /// Runs the stages that carry prices at `SCHED_FIFO` `priority`, or at
    /// normal priority with `None`.
    pub fn with_rt_priority(mut self, priority: Option<RtPriority>) -> Self {
        self.rt_priority = priority.map(|p| p.0);
        self
    }

    /// The real-time priority asked for, if any.
    pub fn rt_priority(&self) -> Option<u8> {
        self.rt_priority
    }

    /// Checks every mapped core exists on this machine and, with a
    /// real-time priority, that this process may use it.
    pub fn validate(&self) -> Result<(), PlacementError> {
        let available = available_cores();
        for &(stage, core) in &self.entries {
            if !available.contains(&core) {
                return Err(PlacementError::NoSuchCore {
                    stage,
                    core,
                    available,
                });
            }
        }
        if let Some(p) = self.rt_priority {
            probe_rt_priority(p)?;
        }
        Ok(())
    }

    /// True when no stage is mapped to a core.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Core ids the process may run on.
pub fn available_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

/// Pins the calling thread to `core`. Errors if the OS refused.
fn pin_current(stage: Stage, core: usize) -> Result<(), PlacementError> {
    if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        Ok(())
    } else {
        Err(PlacementError::Pin { stage, core })
    }
}

/// Why a stage could not be placed as `--cpus` and `--rt-priority` ask.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// `--cpus` maps a stage to a core this machine does not have.
    #[error("stage {stage} mapped to core {core}, but this machine has cores {available:?}")]
    NoSuchCore {
        /// The stage mapped.
        stage: Stage,
        /// The core it was mapped to.
        core: usize,
        /// The cores the process may run on.
        available: Vec<usize>,
    },
    /// The OS refused to pin the thread.
    #[error("pinning {stage} to core {core} failed")]
    Pin {
        /// The stage.
        stage: Stage,
        /// The core.
        core: usize,
    },
    /// The OS refused the stage's real-time priority.
    #[error("real-time priority {priority} for {stage}: {source}")]
    StagePriority {
        /// The stage.
        stage: Stage,
        /// The `SCHED_FIFO` priority asked for.
        priority: u8,
        /// The kernel's refusal.
        source: FifoError,
    },
    /// The start-up probe found the real-time priority refused.
    #[error("real-time priority {priority}: {source}")]
    Priority {
        /// The `SCHED_FIFO` priority asked for.
        priority: u8,
        /// The kernel's refusal.
        source: FifoError,
    },
    /// The start-up probe's thread panicked.
    #[error("real-time priority {priority}: probe thread panicked")]
    ProbePanicked {
        /// The `SCHED_FIFO` priority asked for.
        priority: u8,
    },
}

/// Lowest `SCHED_FIFO` priority Linux accepts.
pub const RT_PRIORITY_MIN: u8 = 1;
/// Highest `SCHED_FIFO` priority Linux accepts.
pub const RT_PRIORITY_MAX: u8 = 99;

/// A `SCHED_FIFO` priority, 1..=99 (`--rt-priority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtPriority(u8);

impl RtPriority {
    /// The priority, in 1..=99.
    pub fn get(self) -> u8 {
        self.0
    }
}

impl FromStr for RtPriority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().parse::<u8>() {
            Ok(p) if (RT_PRIORITY_MIN..=RT_PRIORITY_MAX).contains(&p) => Ok(RtPriority(p)),
            _ => Err(format!(
                "`{s}`: a SCHED_FIFO priority is {RT_PRIORITY_MIN}..={RT_PRIORITY_MAX}"
            )),
        }
    }
}

impl fmt::Display for RtPriority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Whether `stage` runs at the real-time priority when one is asked for:
/// the stages prices pass through.
pub fn rt_stage(stage: Stage) -> bool {
    matches!(stage, Stage::Feed | Stage::Engine | Stage::Shard(_))
}

/// What the calling stage thread was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Placement {
    /// The core the thread was pinned to; `None` when its stage is not mapped.
    pub core: Option<usize>,
    /// The `SCHED_FIFO` priority set; `None` when none was asked for or the
    /// stage carries no prices.
    pub rt_priority: Option<u8>,
}

/// Applies `cpus` to the calling thread, which runs `stage`: pins it when
/// its stage is mapped and sets `SCHED_FIFO` when a real-time priority is
/// asked for and the stage carries prices, and logs what it applied.
/// Errors if the OS refused either.
pub fn place_current(stage: Stage, cpus: &CpuMap) -> Result<Placement, PlacementError> {
    let core = cpus.core_for(stage);
    if let Some(c) = core {
        pin_current(stage, c)?;
    }
    let rt_priority = cpus.rt_priority.filter(|_| rt_stage(stage));
    if let Some(p) = rt_priority {
        set_current_fifo(p).map_err(|source| PlacementError::StagePriority {
            stage,
            priority: p,
            source,
        })?;
    }
    if core.is_some() || rt_priority.is_some() {
        tracing::info!(%stage, ?core, ?rt_priority, "stage placed");
    }
    Ok(Placement { core, rt_priority })
}

pub use super::sys::{current_policy, set_current_fifo, FifoError};

/// (name, policy, rt_priority) of every thread under `task_dir`
/// (`/proc/self/task`, `/proc/<pid>/task`), as the kernel reports them
/// now, sorted by name; empty where it cannot be read. Policy 0 is
/// `SCHED_OTHER` (rt_priority 0), 1 `SCHED_FIFO`.
pub fn thread_schedules(task_dir: &std::path::Path) -> Vec<(String, i64, i64)> {
    let Ok(dir) = std::fs::read_dir(task_dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, i64, i64)> = dir
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.ok()?.path().join("stat")).ok()?;
            // The name (field 2) is in parentheses and may hold spaces;
            // fields after it start at field 3: rt_priority is field 40,
            // policy field 41.
            let (open, close) = (stat.find('(')?, stat.rfind(')')?);
            let name = stat.get(open + 1..close)?.to_string();
            let mut rest = stat.get(close + 2..)?.split_whitespace().skip(37);
            let rt_priority = rest.next()?.parse().ok()?;
            let policy = rest.next()?.parse().ok()?;
            Some((name, policy, rt_priority))
        })
        .collect();
    out.sort();
    out
}

/// Checks, on a short-lived thread, that this process may run threads at
/// `SCHED_FIFO` `priority`, so a refusal fails start-up before any stage
/// runs rather than in the middle of it.
pub fn probe_rt_priority(priority: u8) -> Result<(), PlacementError> {
    std::thread::scope(|s| match s.spawn(|| set_current_fifo(priority)).join() {
        Ok(set) => set.map_err(|source| PlacementError::Priority { priority, source }),
        Err(_) => Err(PlacementError::ProbePanicked { priority }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stage_maps() {
        let m: CpuMap = "feed=0, engine=1,shard=1,shard2=0".parse().unwrap();
        assert_eq!(m.core_for(Stage::Feed), Some(0));
        assert_eq!(m.core_for(Stage::Engine), Some(1));
        assert_eq!(m.core_for(Stage::Shard(0)), Some(1));
        assert_eq!(m.core_for(Stage::Shard(2)), Some(0));
        assert_eq!(m.core_for(Stage::Recorder), None);
        assert!("".parse::<CpuMap>().unwrap().is_empty());
    }

    #[test]
    fn refuses_bad_maps() {
        assert!("feed".parse::<CpuMap>().is_err());
        assert!("feed=x".parse::<CpuMap>().is_err());
        assert!("gpu=1".parse::<CpuMap>().is_err());
        assert!("feed=0,feed=1".parse::<CpuMap>().is_err());
        let far: CpuMap = "feed=4096".parse().unwrap();
        let e = far.validate().unwrap_err();
        assert!(
            matches!(e, PlacementError::NoSuchCore { core: 4096, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("core 4096"), "{e}");
    }

    #[test]
    fn rt_priorities_are_1_to_99() {
        assert_eq!("1".parse::<RtPriority>().unwrap().get(), 1);
        assert_eq!(" 99".parse::<RtPriority>().unwrap().get(), 99);
        for bad in ["0", "100", "-1", "x", ""] {
            let e = bad.parse::<RtPriority>().unwrap_err();
            assert!(e.contains("1..=99"), "{bad}: {e}");
        }
        let m = CpuMap::default().with_rt_priority(Some("7".parse().unwrap()));
        assert_eq!(m.rt_priority(), Some(7));
        assert_eq!(CpuMap::default().rt_priority(), None);
    }

    #[test]
    fn only_price_stages_are_real_time() {
        assert!(rt_stage(Stage::Feed));
        assert!(rt_stage(Stage::Engine));
        assert!(rt_stage(Stage::Shard(3)));
        assert!(!rt_stage(Stage::Requests));
        assert!(!rt_stage(Stage::Recorder));
    }

    /// On a fresh thread (the policy sticks to it): either the kernel now
    /// reports SCHED_FIFO at the priority, or placing failed with the
    /// syscall's reason, and the probe agrees with what happened.
    #[test]
    fn placing_a_stage_sets_fifo_or_says_why_not() {
        let map = CpuMap::default().with_rt_priority(Some("5".parse().unwrap()));
        let probe = probe_rt_priority(5);
        let (placed, policy) = std::thread::spawn(move || {
            let placed = place_current(Stage::Shard(0), &map);
            (placed, current_policy())
        })
        .join()
        .unwrap();
        match placed {
            Ok(p) => {
                assert!(probe.is_ok(), "probe refused but placing worked: {probe:?}");
                assert_eq!(
                    p,
                    Placement {
                        core: None,
                        rt_priority: Some(5)
                    }
                );
                assert_eq!(policy, (libc::SCHED_FIFO, 5));
            }
            Err(e) => {
                let (e, probe) = (e.to_string(), probe.unwrap_err().to_string());
                assert!(e.contains("real-time priority 5 for shard0"), "{e}");
                assert!(e.contains("sched_setscheduler"), "{e}");
                assert!(probe.contains("real-time priority 5"), "{probe}");
                assert_eq!(policy.0, libc::SCHED_OTHER);
            }
        }
    }

    #[test]
    fn a_refused_priority_says_which_call_and_why() {
        // Priority 0 is not a SCHED_FIFO priority: the kernel says EINVAL,
        // for root and everyone else alike.
        let e = std::thread::spawn(|| set_current_fifo(0))
            .join()
            .unwrap()
            .unwrap_err();
        assert_eq!(e.source.raw_os_error(), Some(libc::EINVAL));
        let e = e.to_string();
        assert!(e.starts_with("sched_setscheduler(SCHED_FIFO): "), "{e}");
        assert!(e.contains("Invalid argument"), "{e}");
    }

    #[test]
    fn stages_off_the_price_path_keep_normal_priority() {
        let map = CpuMap::default().with_rt_priority(Some("5".parse().unwrap()));
        let (placed, policy) =
            std::thread::spawn(move || (place_current(Stage::Requests, &map), current_policy()))
                .join()
                .unwrap();
        assert_eq!(placed.unwrap(), Placement::default());
        assert_eq!(policy, (libc::SCHED_OTHER, 0));
    }
}
