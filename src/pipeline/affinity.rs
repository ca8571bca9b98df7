//! Stage-to-core mapping (`--cpus feed=0,engine=1,shard0=1`) and pinning.
//!
//! Pinning is opt-in: with no map every stage floats, which is the right
//! default on a small shared machine. When a stage is mapped to a core and
//! pinning fails, start-up fails loudly instead of running unpinned while
//! the operator believes otherwise.

use std::fmt;
use std::str::FromStr;

/// A pipeline stage that runs on its own thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    Feed,
    Engine,
    /// Gateway shard by index.
    Shard(u16),
    Recorder,
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
        Ok(CpuMap { entries })
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

    /// Checks every mapped core exists on this machine.
    pub fn validate(&self) -> Result<(), String> {
        let available = available_cores();
        for &(stage, core) in &self.entries {
            if !available.contains(&core) {
                return Err(format!(
                    "stage {stage} mapped to core {core}, but this machine has cores {available:?}"
                ));
            }
        }
        Ok(())
    }

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
pub fn pin_current(stage: Stage, core: usize) -> Result<(), String> {
    if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        Ok(())
    } else {
        Err(format!("pinning {stage} to core {core} failed"))
    }
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
        assert!(far.validate().unwrap_err().contains("core 4096"));
    }
}
