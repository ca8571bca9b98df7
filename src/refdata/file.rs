//! The `[refdata]` table of the config file: every reference-data setting
//! an operator may change (TTLs, timeouts, pool, breaker, pacing), each
//! optional (absent keeps the default of [`super::settings`]).
//!
//! Contract: [`RefDataFile::from_table`] reads the table the config file
//! holds (unknown keys and wrong types refused, named);
//! [`RefDataFile::apply`] writes the present keys over a [`RefDataConfig`]
//! and validates the result; an error names the key as written in the file
//! (`refdata.io_timeout_ms`). `pricewire serve` checks the table at start
//! ([`RefDataFile::check`]), with or without `--redis`.

use std::net::SocketAddr;

use serde::Deserialize;

use super::settings::RefDataConfig;
use super::RefDataError;
use crate::resilience::breaker::WindowKind;
use crate::resilience::{Backoff, ConfigError};

/// `[refdata]` as written; every key optional. Units are in the names.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefDataFile {
    /// Lifetime of a cached account (ms), before jitter.
    pub ttl_ms: Option<u64>,
    /// Lifetime of a cached "no such account" (ms).
    pub negative_ttl_ms: Option<u64>,
    /// TTLs move by a uniform amount within ± this percent (0..=50).
    pub ttl_jitter_pct: Option<u32>,
    /// How long past expiry an entry serves while Redis fails (ms).
    pub max_stale_ms: Option<u64>,
    /// Most cached accounts.
    pub entries_max: Option<usize>,
    /// Most requests waiting for the refresher.
    pub request_queue_max: Option<usize>,
    /// Base retry-after (ms) told to a logon whose account is not cached.
    pub miss_retry_after_ms: Option<u64>,
    /// Refresher backoff after a failure: first window and cap (ms).
    pub backoff_base_ms: Option<u64>,
    /// See `backoff_base_ms`.
    pub backoff_cap_ms: Option<u64>,
    /// `PING` after this long without a call (ms; 0 = never).
    pub probe_interval_ms: Option<u64>,
    /// Calls per second while working off a backlog after a failure.
    pub recovery_rate_per_s: Option<u32>,
    /// Accounts prefetched from the index set at start.
    pub prefetch_max: Option<usize>,
    /// Pending lookups of unknown names per client address (IPv6: /64).
    pub misses_per_source_max: Option<usize>,
    /// TCP connect plus handshake budget (ms).
    pub connect_timeout_ms: Option<u64>,
    /// Total budget of one command (ms).
    pub io_timeout_ms: Option<u64>,
    /// Longest wait for a pooled connection (ms).
    pub checkout_timeout_ms: Option<u64>,
    /// Most pooled connections.
    pub pool_size: Option<usize>,
    /// Prefix of every key.
    pub key_prefix: Option<String>,
    /// A call longer than this is slow (ms), below `io_timeout_ms`.
    pub slow_call_ms: Option<u64>,
    /// Breaker time window (s).
    pub breaker_window_s: Option<u32>,
    /// Calls the window must hold before the rate rule decides.
    pub breaker_minimum_calls: Option<u32>,
    /// Failure rate (percent) that opens the breaker.
    pub breaker_failure_rate_pct: Option<u32>,
    /// Slow-call rate (percent) that opens the breaker.
    pub breaker_slow_call_rate_pct: Option<u32>,
    /// Time open before half-open (ms).
    pub breaker_open_wait_ms: Option<u64>,
    /// Trial calls in half-open.
    pub breaker_half_open_calls: Option<u32>,
    /// Spread of each open wait, ± percent.
    pub breaker_open_wait_jitter_pct: Option<u32>,
    /// Failed calls in a row that open the breaker (0 = rate rule only).
    pub breaker_consecutive_failures: Option<u32>,
}

impl RefDataFile {
    /// Reads the `[refdata]` table of the config file (empty: all defaults).
    /// Errors: an unknown key or a value of the wrong type, named.
    pub fn from_table(table: &toml::Table) -> Result<RefDataFile, RefDataError> {
        RefDataFile::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
            RefDataError::Config {
                key: "refdata",
                reason: e.to_string(),
            }
        })
    }

    /// Writes the present keys over `cfg` and validates the whole.
    /// Errors name the file's key (`refdata.<key>`).
    pub fn apply(&self, cfg: &mut RefDataConfig) -> Result<(), RefDataError> {
        self.apply_cache(cfg);
        self.apply_redis(cfg);
        cfg.validate().map_err(file_key)
    }

    /// Validates the table against the defaults (no server needed).
    pub fn check(&self) -> Result<(), RefDataError> {
        let addr = SocketAddr::from(([127, 0, 0, 1], 6379));
        let mut cfg = RefDataConfig {
            redis: super::RedisConfig::new(addr),
            cache: super::CacheConfig::default(),
        };
        self.apply(&mut cfg)
    }

    fn apply_cache(&self, cfg: &mut RefDataConfig) {
        let c = &mut cfg.cache;
        set(&mut c.ttl_ms, self.ttl_ms);
        set(&mut c.negative_ttl_ms, self.negative_ttl_ms);
        set(&mut c.ttl_jitter_pct, self.ttl_jitter_pct);
        set(&mut c.max_stale_ms, self.max_stale_ms);
        set(&mut c.entries_max, self.entries_max);
        set(&mut c.request_queue_max, self.request_queue_max);
        set(&mut c.miss_retry_after_ms, self.miss_retry_after_ms);
        c.backoff = Backoff::new(
            self.backoff_base_ms.unwrap_or(c.backoff.base_ms),
            self.backoff_cap_ms.unwrap_or(c.backoff.cap_ms),
        );
        set(&mut c.probe_interval_ms, self.probe_interval_ms);
        set(&mut c.recovery_rate_per_s, self.recovery_rate_per_s);
        set(&mut c.prefetch_max, self.prefetch_max);
        set(&mut c.misses_per_source_max, self.misses_per_source_max);
    }

    fn apply_redis(&self, cfg: &mut RefDataConfig) {
        let r = &mut cfg.redis;
        set(&mut r.connect_timeout_ms, self.connect_timeout_ms);
        set(&mut r.io_timeout_ms, self.io_timeout_ms);
        set(&mut r.checkout_timeout_ms, self.checkout_timeout_ms);
        set(&mut r.pool_size_max, self.pool_size);
        set(&mut r.key_prefix, self.key_prefix.clone());
        set(&mut r.slow_call_ms, self.slow_call_ms);
        let b = &mut r.breaker;
        if let Some(window_s) = self.breaker_window_s {
            b.window = WindowKind::Time { window_s };
        }
        set(&mut b.minimum_calls, self.breaker_minimum_calls);
        set(
            &mut b.failure_rate_threshold_pct,
            self.breaker_failure_rate_pct,
        );
        set(
            &mut b.slow_call_rate_threshold_pct,
            self.breaker_slow_call_rate_pct,
        );
        set(&mut b.open_wait_ms, self.breaker_open_wait_ms);
        set(
            &mut b.open_wait_jitter_pct,
            self.breaker_open_wait_jitter_pct,
        );
        set(
            &mut b.half_open_permitted_calls,
            self.breaker_half_open_calls,
        );
        set(
            &mut r.breaker_consecutive_failures,
            self.breaker_consecutive_failures,
        );
    }
}

fn set<T>(slot: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *slot = v;
    }
}

/// A breaker error named by its `[refdata]` key.
fn file_key(e: RefDataError) -> RefDataError {
    let (key, reason) = match e {
        RefDataError::Breaker(ConfigError::Invalid { key, reason }) => {
            let key = match key {
                "window_s" => "refdata.breaker_window_s",
                "minimum_calls" => "refdata.breaker_minimum_calls",
                "failure_rate_threshold_pct" => "refdata.breaker_failure_rate_pct",
                "slow_call_rate_threshold_pct" => "refdata.breaker_slow_call_rate_pct",
                "open_wait_ms" => "refdata.breaker_open_wait_ms",
                "open_wait_jitter_pct" => "refdata.breaker_open_wait_jitter_pct",
                "half_open_permitted_calls" => "refdata.breaker_half_open_calls",
                "slow_call_duration_ms" => "refdata.slow_call_ms",
                "call_timeout_ms" => "refdata.io_timeout_ms",
                _ => "refdata.breaker",
            };
            (key, reason)
        }
        RefDataError::Breaker(e @ ConfigError::SlowThresholdNotBelowTimeout { .. }) => {
            ("refdata.slow_call_ms", e.to_string())
        }
        other => return other,
    };
    RefDataError::Config { key, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> RefDataFile {
        toml::from_str(text).unwrap()
    }

    fn key_of(text: &str) -> &'static str {
        match parse(text).check() {
            Err(RefDataError::Config { key, .. }) => key,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn present_keys_override_the_defaults() {
        let f = parse("ttl_ms = 2000\nio_timeout_ms = 300\nbreaker_consecutive_failures = 3\nrecovery_rate_per_s = 50\npool_size = 4");
        let mut cfg = RefDataConfig::from_url("redis://127.0.0.1:6379").unwrap();
        f.apply(&mut cfg).unwrap();
        assert_eq!(cfg.cache.ttl_ms, 2_000);
        assert_eq!(cfg.redis.io_timeout_ms, 300);
        assert_eq!(cfg.redis.breaker_consecutive_failures, 3);
        assert_eq!(cfg.cache.recovery_rate_per_s, 50);
        assert_eq!(cfg.redis.pool_size_max, 4);
        // Untouched keys keep their defaults.
        assert_eq!(
            cfg.cache.negative_ttl_ms,
            super::super::settings::NEGATIVE_TTL_MS_DEFAULT
        );
    }

    #[test]
    fn refusals_name_the_file_key() {
        assert_eq!(key_of("ttl_ms = 0"), "refdata.ttl_ms");
        assert_eq!(key_of("io_timeout_ms = 0"), "refdata.io_timeout_ms");
        assert_eq!(key_of("pool_size = 0"), "refdata.pool_size");
        assert_eq!(key_of("slow_call_ms = 250"), "refdata.slow_call_ms");
        assert_eq!(key_of("breaker_window_s = 0"), "refdata.breaker_window_s");
        assert_eq!(
            key_of("breaker_open_wait_jitter_pct = 51"),
            "refdata.breaker_open_wait_jitter_pct"
        );
        assert_eq!(
            key_of("misses_per_source_max = 0"),
            "refdata.misses_per_source_max"
        );
        assert_eq!(
            key_of("recovery_rate_per_s = 0"),
            "refdata.recovery_rate_per_s"
        );
        // The rate rule alone, with a window the refresher cannot fill at
        // its slowest failing rate (cap 10 s + 850 ms per call).
        assert_eq!(
            key_of("breaker_consecutive_failures = 0"),
            "refdata.breaker_minimum_calls"
        );
        // ... but it can open with a window that fits 20 such calls.
        parse("breaker_consecutive_failures = 0\nbreaker_window_s = 300")
            .check()
            .unwrap();
        assert!(
            toml::from_str::<RefDataFile>("ttl = 5").is_err(),
            "unknown key"
        );
    }

    #[test]
    fn the_config_file_takes_the_table_and_names_a_bad_key() {
        use crate::config::Config;
        let from = |text: &str| RefDataFile::from_table(&Config::parse(text, 2).unwrap().refdata);
        let f = from("[refdata]\nttl_ms = 2000\n").unwrap();
        assert_eq!(f.ttl_ms, Some(2_000));
        assert_eq!(from("").unwrap(), RefDataFile::default());
        let bad = from("[refdata]\nio_timeout_ms = 0\n").unwrap().check();
        assert!(matches!(
            bad,
            Err(RefDataError::Config {
                key: "refdata.io_timeout_ms",
                ..
            })
        ));
        let unknown = from("[refdata]\nttl = 1\n");
        assert!(
            matches!(&unknown, Err(RefDataError::Config { key: "refdata", reason }) if reason.contains("ttl")),
            "{unknown:?}"
        );
        assert!(from("[refdata]\nttl_ms = \"soon\"\n").is_err());
    }
}
