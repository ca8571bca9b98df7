//! The fault drill switch: planted panics, to prove that no stage dies
//! unseen and that one connection's fault stays in that connection.
//!
//! `PRICEWIRE_FAULT_PANIC=<target>[:after_ms]` is read once, by `serve` at
//! start-up ([`arm_from_env`]); unset, nothing is armed and every drill
//! point is one load of a never-set `OnceLock` and a branch. Drill points
//! sit on cold paths only (a stage's timer sweep or idle turn, a job, a
//! logon), never per tick or per price. Targets:
//!
//! - a stage kind, optionally with its index: `shard`, `shard1`,
//!   `acceptor`, `engine`, `feed`, `ingest`, `dispatch`, `request`,
//!   `auth`, `provauth`, `refdata`, `bus`, `recorder`, `ops-accept`,
//!   `ops-http`, `signals`, `sink` ([`STAGES`]): that stage panics at its
//!   first drill point at least `after_ms` (default 0) after start-up —
//!   the supervisor must then fail `/livez` and exit the process;
//! - `conn`: every connection that names [`DRILL_NAME`] panics inside its
//!   own processing — a subscriber Logon with that account, a Subscribe
//!   entry with that symbol name (after the entries before it were
//!   added), a ProviderLogon with that token — or sends a PROXY v2 header
//!   whose client source port is [`DRILL_PROXY_PORT`], and the connection
//!   boundary must close that connection alone.
//!
//! `PRICEWIRE_FAULT_STALL=<stage>[:after_ms[:for_ms]]` (read once too,
//! [`arm_stall_from_env`]) stalls instead of panicking: the targeted
//! stage's thread sleeps `for_ms` (default 1,000) once, at its first
//! drill point at least `after_ms` after start-up — a stage the host does
//! not run for a while, while every other stage goes on (an engine
//! descheduled beside running shards: its prices must be flagged stale,
//! never shown as live; `gateway::behind`).
//!
//! A drill switch, not a feature: never set it in production.

use std::sync::OnceLock;

use crate::clock::{monotonic_ns, NS_PER_MS};

/// The environment variable.
pub const ENV: &str = "PRICEWIRE_FAULT_PANIC";

/// The environment variable of the stall drill.
pub const STALL_ENV: &str = "PRICEWIRE_FAULT_STALL";

/// Longest `for_ms` of the stall drill (ms).
pub const STALL_MS_MAX: u64 = 600_000;

/// Account (subscriber Logon), symbol name (Subscribe entry) or token
/// (ProviderLogon) whose connection panics under the `conn` drill (at
/// most 16 bytes: it fits a symbol name).
pub const DRILL_NAME: &str = "pw-drill-panic";

/// Client source port in a PROXY v2 header that panics the acceptor's
/// work on that connection under the `conn` drill.
pub const DRILL_PROXY_PORT: u16 = 9;

/// The stage kinds a drill may target.
pub const STAGES: [&str; 17] = [
    "shard",
    "acceptor",
    "engine",
    "feed",
    "ingest",
    "dispatch",
    "request",
    "auth",
    "provauth",
    "refdata",
    "bus",
    "recorder",
    "ops-accept",
    "ops-http",
    "signals",
    "sink",
    "reload",
];

/// What is armed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A stage of this kind (one of [`STAGES`]), any index or only this one.
    Stage(&'static str, Option<u32>),
    /// Connections that name [`DRILL_NAME`].
    Connection,
}

/// A parsed switch: the target and its delay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drill {
    /// What panics.
    pub target: Target,
    /// Not before this long after arming (ms).
    pub after_ms: u64,
}

struct Armed {
    drill: Drill,
    due_ns: u64,
}

static ARMED: OnceLock<Armed> = OnceLock::new();

/// A parsed stall drill: where, from when, and how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    /// The stage that stalls and its delay (a [`Target::Stage`]).
    pub drill: Drill,
    /// How long its thread sleeps (ms).
    pub for_ms: u64,
}

struct ArmedStall {
    stall: Stall,
    due_ns: u64,
    fired: std::sync::atomic::AtomicBool,
}

static STALL: OnceLock<ArmedStall> = OnceLock::new();

/// Why [`ENV`] was refused; the value is kept whole (it names no secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrillError {
    /// The delay is not a number of milliseconds in 0..=3600000.
    #[error("{ENV}={0:?}: after_ms must be 0..=3600000")]
    AfterMs(String),
    /// The target is not `conn` nor one of [`STAGES`].
    #[error("{ENV}={0:?}: unknown target (conn, {stages})", stages = STAGES.join(", "))]
    UnknownTarget(String),
    /// The stage's index is not a number.
    #[error("{ENV}={0:?}: bad index")]
    BadIndex(String),
    /// The variable is not UTF-8.
    #[error("{ENV}: not UTF-8")]
    NotUtf8,
    /// The stall drill's value does not parse (the reason follows).
    #[error("{STALL_ENV}={0:?}: {1}")]
    Stall(String, String),
}

/// Parses `<stage>[:after_ms[:for_ms]]`; the error names what is wrong.
pub fn parse_stall(s: &str) -> Result<Stall, DrillError> {
    let bad = |why: &str| DrillError::Stall(s.to_string(), why.to_string());
    let (head, for_ms) = match s.splitn(3, ':').collect::<Vec<_>>()[..] {
        [t] => (t.to_string(), "1000"),
        [t, a] => (format!("{t}:{a}"), "1000"),
        [t, a, f] => (format!("{t}:{a}"), f),
        _ => return Err(bad("empty")),
    };
    let for_ms = for_ms
        .parse::<u64>()
        .ok()
        .filter(|ms| (1..=STALL_MS_MAX).contains(ms))
        .ok_or_else(|| bad(&format!("for_ms must be 1..={STALL_MS_MAX}")))?;
    let drill = parse(&head).map_err(|e| bad(&e.to_string()))?;
    if drill.target == Target::Connection {
        return Err(bad("a stall targets a stage, not conn"));
    }
    Ok(Stall { drill, for_ms })
}

/// Reads [`STALL_ENV`] once and arms it, as [`arm_from_env`] does.
pub fn arm_stall_from_env() -> Result<Option<Stall>, DrillError> {
    let Some(value) = std::env::var_os(STALL_ENV) else {
        return Ok(None);
    };
    let value = value.into_string().map_err(|_| DrillError::NotUtf8)?;
    let stall = parse_stall(&value)?;
    let due_ns = monotonic_ns().saturating_add(stall.drill.after_ms.saturating_mul(NS_PER_MS));
    let _ = STALL.set(ArmedStall {
        stall: stall.clone(),
        due_ns,
        fired: std::sync::atomic::AtomicBool::new(false),
    });
    Ok(Some(stall))
}

/// Parses `<target>[:after_ms]`; the error names what is wrong.
pub fn parse(s: &str) -> Result<Drill, DrillError> {
    let (target, after) = s.split_once(':').unwrap_or((s, "0"));
    let after_ms = after
        .parse::<u64>()
        .ok()
        .filter(|&ms| ms <= 3_600_000)
        .ok_or_else(|| DrillError::AfterMs(s.to_string()))?;
    if target == "conn" {
        return Ok(Drill {
            target: Target::Connection,
            after_ms,
        });
    }
    let digits = target.len() - target.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (kind, index) = target.split_at(target.len() - digits);
    let kind = STAGES
        .iter()
        .copied()
        .find(|&k| k == kind)
        .ok_or_else(|| DrillError::UnknownTarget(s.to_string()))?;
    let index = (!index.is_empty())
        .then(|| {
            index
                .parse::<u32>()
                .map_err(|_| DrillError::BadIndex(s.to_string()))
        })
        .transpose()?;
    Ok(Drill {
        target: Target::Stage(kind, index),
        after_ms,
    })
}

/// Reads [`ENV`] once and arms it. `Ok(None)` when unset; `Err` for a
/// value that does not parse (start-up refuses it).
pub fn arm_from_env() -> Result<Option<Drill>, DrillError> {
    let Some(value) = std::env::var_os(ENV) else {
        return Ok(None);
    };
    let value = value.into_string().map_err(|_| DrillError::NotUtf8)?;
    let drill = parse(&value)?;
    let due_ns = monotonic_ns().saturating_add(drill.after_ms.saturating_mul(NS_PER_MS));
    let _ = ARMED.set(Armed {
        drill: drill.clone(),
        due_ns,
    });
    Ok(Some(drill))
}

/// A drill point of stage `kind` (one of [`STAGES`]) with index `index`:
/// panics if the drill targets it and is due. Call on cold paths only.
#[inline]
pub fn point(kind: &'static str, index: u32) {
    if let Some(a) = STALL.get() {
        stall_point(a, kind, index);
    }
    if let Some(a) = ARMED.get() {
        if let Target::Stage(k, i) = a.drill.target {
            if k == kind && i.is_none_or(|i| i == index) && monotonic_ns() >= a.due_ns {
                panic!("drill: planted panic in stage {kind}{index} ({ENV})");
            }
        }
    }
}

/// The stall drill's point: sleeps once if it targets this stage and is
/// due (the first thread of the stage to get here sleeps).
#[cold]
fn stall_point(a: &ArmedStall, kind: &'static str, index: u32) {
    use std::sync::atomic::Ordering;
    let Target::Stage(k, i) = a.stall.drill.target else {
        return;
    };
    if k != kind || i.is_some_and(|i| i != index) || monotonic_ns() < a.due_ns {
        return;
    }
    if a.fired.swap(true, Ordering::AcqRel) {
        return;
    }
    tracing::warn!(
        stage = kind,
        index,
        ms = a.stall.for_ms,
        "drill: stage stalls"
    );
    // The drill itself: this thread is not run for a while.
    std::thread::sleep(std::time::Duration::from_millis(a.stall.for_ms));
    tracing::warn!(stage = kind, index, "drill: stall over");
}

/// A per-connection drill point: panics if the `conn` drill is armed and
/// `name` (an account or provider from the peer) is [`DRILL_NAME`].
#[inline]
pub fn connection_point(name: &[u8], what: &'static str) {
    if let Some(a) = ARMED.get() {
        if a.drill.target == Target::Connection && name == DRILL_NAME.as_bytes() {
            panic!("drill: planted panic in a connection's {what} ({ENV})");
        }
    }
}

/// Whether the `conn` drill is armed (the acceptor's PROXY-header point
/// compares the port itself).
#[inline]
pub fn connection_armed() -> bool {
    ARMED
        .get()
        .is_some_and(|a| a.drill.target == Target::Connection)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_and_without_index_and_delay() {
        assert_eq!(
            parse("shard0:1500").unwrap(),
            Drill {
                target: Target::Stage("shard", Some(0)),
                after_ms: 1500
            }
        );
        assert_eq!(
            parse("engine").unwrap().target,
            Target::Stage("engine", None)
        );
        assert_eq!(
            parse("ops-http").unwrap().target,
            Target::Stage("ops-http", None)
        );
        assert_eq!(parse("conn").unwrap().target, Target::Connection);
        for k in STAGES {
            assert_eq!(parse(k).unwrap().target, Target::Stage(k, None), "{k}");
        }
    }

    #[test]
    fn bad_values_are_refused_with_the_reason() {
        let e = parse("shrad").unwrap_err();
        assert_eq!(e, DrillError::UnknownTarget("shrad".into()));
        assert!(e.to_string().contains("unknown target (conn, "), "{e}");
        assert!(parse("shard:x")
            .unwrap_err()
            .to_string()
            .contains("after_ms"));
        assert_eq!(
            parse("shard:99999999").unwrap_err().to_string(),
            format!("{ENV}=\"shard:99999999\": after_ms must be 0..=3600000")
        );
        assert!(parse("").is_err());
    }

    #[test]
    fn stalls_parse_with_their_length_and_refuse_what_is_not_a_stage() {
        let s = parse_stall("engine:1500:800").unwrap();
        assert_eq!(s.drill.target, Target::Stage("engine", None));
        assert_eq!((s.drill.after_ms, s.for_ms), (1500, 800));
        assert_eq!(parse_stall("shard1").unwrap().for_ms, 1000);
        assert_eq!(parse_stall("shard1:20").unwrap().drill.after_ms, 20);
        for bad in ["conn:0:10", "engine:0:0", "engine:0:x", "engnie", ""] {
            let e = parse_stall(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{STALL_ENV}=")), "{bad}: {e}");
        }
    }

    #[test]
    fn unarmed_points_do_nothing() {
        // The test binary never arms the switch.
        point("shard", 0);
        connection_point(DRILL_NAME.as_bytes(), "logon");
        assert!(!connection_armed());
    }
}
