//! Renamed metric families. A family renamed to follow the conventions
//! (base units, `_ratio`) keeps its old name for one release: the old
//! family stays in the catalogue with help "Deprecated, removed in ...",
//! and every scrape writes the new family's samples under the old name too,
//! scaled back to the old unit, so a dashboard or alert on the old name
//! reads what it read before.

use super::catalogue::{
    ADAPTIVE_RTT_LONG, ADAPTIVE_RTT_SHORT, BREAKER_FAILURE_RATE, BREAKER_SLOW_CALL_RATE,
    REQUEST_SOJOURN_MAX, REQUEST_SOJOURN_MIN, REQUEST_SOJOURN_P99, SHARD_BUSY,
};

/// One rename: `old` reads `new`'s value times `scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Renamed {
    /// The deprecated name, still exposed.
    pub old: &'static str,
    /// The name to use.
    pub new: &'static str,
    /// Old value = new value × `scale` (1e9 for nanoseconds → seconds).
    pub scale: f64,
}

/// Deprecated name of `SHARD_BUSY` (removed in 0.4.0).
pub const SHARD_BUSY_OLD: &str = "pricewire_shard_busy_rate";
/// Deprecated name of `BREAKER_FAILURE_RATE` (removed in 0.4.0).
pub const BREAKER_FAILURE_RATE_OLD: &str = "pricewire_breaker_failure_rate";
/// Deprecated name of `BREAKER_SLOW_CALL_RATE` (removed in 0.4.0).
pub const BREAKER_SLOW_CALL_RATE_OLD: &str = "pricewire_breaker_slow_call_rate";
/// Deprecated nanosecond form of `REQUEST_SOJOURN_MIN` (removed in 0.4.0).
pub const REQUEST_SOJOURN_MIN_NS: &str = "pricewire_request_sojourn_min_interval_ns";
/// Deprecated nanosecond form of `REQUEST_SOJOURN_P99` (removed in 0.4.0).
pub const REQUEST_SOJOURN_P99_NS: &str = "pricewire_request_sojourn_p99_interval_ns";
/// Deprecated nanosecond form of `REQUEST_SOJOURN_MAX` (removed in 0.4.0).
pub const REQUEST_SOJOURN_MAX_NS: &str = "pricewire_request_sojourn_max_interval_ns";
/// Deprecated nanosecond form of `ADAPTIVE_RTT_SHORT` (removed in 0.4.0).
pub const ADAPTIVE_RTT_SHORT_NS: &str = "pricewire_adaptive_rtt_short_ns";
/// Deprecated nanosecond form of `ADAPTIVE_RTT_LONG` (removed in 0.4.0).
pub const ADAPTIVE_RTT_LONG_NS: &str = "pricewire_adaptive_rtt_long_ns";

const fn same(old: &'static str, new: &'static str) -> Renamed {
    Renamed {
        old,
        new,
        scale: 1.0,
    }
}

const fn ns(old: &'static str, new: &'static str) -> Renamed {
    Renamed {
        old,
        new,
        scale: 1e9,
    }
}

/// Every rename in force (renamed in 0.3.0, old names removed in 0.4.0).
pub const DEPRECATED: &[Renamed] = &[
    same(SHARD_BUSY_OLD, SHARD_BUSY),
    same(BREAKER_FAILURE_RATE_OLD, BREAKER_FAILURE_RATE),
    same(BREAKER_SLOW_CALL_RATE_OLD, BREAKER_SLOW_CALL_RATE),
    ns(REQUEST_SOJOURN_MIN_NS, REQUEST_SOJOURN_MIN),
    ns(REQUEST_SOJOURN_P99_NS, REQUEST_SOJOURN_P99),
    ns(REQUEST_SOJOURN_MAX_NS, REQUEST_SOJOURN_MAX),
    ns(ADAPTIVE_RTT_SHORT_NS, ADAPTIVE_RTT_SHORT),
    ns(ADAPTIVE_RTT_LONG_NS, ADAPTIVE_RTT_LONG),
];
