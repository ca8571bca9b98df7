//! Why a FIX provider's settings were refused. The message follows the
//! provider's key (`providers[2].fix: heartbeat_s: must be 1..=60`);
//! tests and docs match it, so each variant renders what the check said
//! before it was typed.

use crate::resilience::ConfigError;

/// A FIX session setting refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FixConfigError {
    /// One key (or keys named together) out of range:
    /// `heartbeat_s: must be 1..=60`.
    #[error("{key}: {why}")]
    Key {
        /// The key, as the file spells it.
        key: &'static str,
        /// What it must be.
        why: String,
    },
    /// Keys that must hold together and do not:
    /// `connect_ms and logon_ms must be at least 1`.
    #[error("{0}")]
    Rule(String),
    /// The breaker's own settings refused.
    #[error("{0}")]
    Breaker(#[source] ConfigError),
    /// Without the consecutive-failures rule, a hung provider could never
    /// open the breaker.
    #[error(
        "breaker_minimum_calls: on a hung provider (one failure per up to {cycle_ms} ms: \
         reconnect_cap_ms + the longest timeout) {source}; set \
         breaker_consecutive_failures or widen breaker_window_s"
    )]
    BreakerCannotOpen {
        /// Slowest time from one failure to the next, in ms.
        cycle_ms: u64,
        /// The breaker's own check.
        source: ConfigError,
    },
}

/// `{key}: {why}`.
pub(super) fn key(key: &'static str, why: impl Into<String>) -> FixConfigError {
    FixConfigError::Key {
        key,
        why: why.into(),
    }
}

/// A rule over several keys, as written.
pub(super) fn rule(what: impl Into<String>) -> FixConfigError {
    FixConfigError::Rule(what.into())
}
