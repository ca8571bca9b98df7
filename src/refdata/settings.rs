//! Reference-data settings, their defaults (named constants) and checks.

use std::net::{SocketAddr, ToSocketAddrs};

use super::RefDataError;
use crate::resilience::{Backoff, BreakerConfig};

pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 500;
/// Total budget of one Redis command. An account hash answers in well under
/// a millisecond on a healthy server; 250 ms is generous and still short
/// enough that a stalled server is noticed in one refresh.
pub const IO_TIMEOUT_MS_DEFAULT: u64 = 250;
/// Slow-call threshold, below the I/O timeout so slowness is seen before
/// timeouts turn it into failures.
pub const SLOW_CALL_MS_DEFAULT: u64 = 100;
pub const CHECKOUT_TIMEOUT_MS_DEFAULT: u64 = 100;
pub const POOL_SIZE_DEFAULT: usize = 2;
pub const POOL_SIZE_MAX: usize = 64;
pub const TIMEOUT_MS_MAX: u64 = 60_000;
pub const KEY_PREFIX_DEFAULT: &str = "pricewire:";
pub const TTL_MS_DEFAULT: u64 = 60_000;
/// Missing accounts are remembered for less time, so one added to Redis
/// can log on soon.
pub const NEGATIVE_TTL_MS_DEFAULT: u64 = 5_000;
pub const TTL_JITTER_PCT_DEFAULT: u32 = 20;
/// How long past expiry a cached entry keeps serving while Redis fails.
pub const MAX_STALE_MS_DEFAULT: u64 = 15 * 60_000;
pub const ENTRIES_MAX_DEFAULT: usize = 100_000;
pub const ENTRIES_MAX_MAX: usize = 10_000_000;
pub const REQUEST_QUEUE_MAX_DEFAULT: usize = 1_024;
/// Base retry-after for an account not yet in the cache.
pub const MISS_RETRY_AFTER_MS_DEFAULT: u64 = 100;
/// Redis calls the refresher makes per step before it looks at the queue
/// and the clock again.
pub const REFRESH_BATCH_MAX_DEFAULT: usize = 256;
/// The refresher's idle wake-up period.
pub const IDLE_TICK_MS_DEFAULT: u64 = 100;
/// Accounts prefetched from the index set at start.
pub const PREFETCH_MAX_DEFAULT: usize = 10_000;

/// Where Redis is and how calls to it are bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    pub addr: SocketAddr,
    pub password: Option<String>,
    pub db: u32,
    /// Prefix of every key (`<prefix>account:<name>`, `<prefix>accounts`).
    pub key_prefix: String,
    pub connect_timeout_ms: u64,
    pub io_timeout_ms: u64,
    pub checkout_timeout_ms: u64,
    pub pool_size_max: usize,
    /// Breaker settings; `call_timeout_ms` is taken from `io_timeout_ms`
    /// and the slow threshold from `slow_call_ms`.
    pub breaker: BreakerConfig,
    pub slow_call_ms: u64,
}

impl RedisConfig {
    /// Defaults for a server at `redis://[:password@]host[:port][/db]`.
    pub fn from_url(url: &str) -> Result<RedisConfig, RefDataError> {
        let bad = |reason: &str| RefDataError::Config {
            key: "redis",
            reason: format!("{url}: {reason}"),
        };
        let rest = url.strip_prefix("redis://").unwrap_or(url);
        let (auth, hostpart) = match rest.rsplit_once('@') {
            Some((a, h)) => (Some(a), h),
            None => (None, rest),
        };
        let password = auth.map(|a| a.split_once(':').map_or(a, |(_, p)| p).to_string());
        let (hostport, db) = match hostpart.split_once('/') {
            Some((h, "")) => (h, 0),
            Some((h, d)) => (h, d.parse().map_err(|_| bad("db is not a number"))?),
            None => (hostpart, 0),
        };
        let hostport = if hostport.contains(':') {
            hostport.to_string()
        } else {
            format!("{hostport}:6379")
        };
        let addr = hostport
            .to_socket_addrs()
            .map_err(|e| bad(&e.to_string()))?
            .next()
            .ok_or_else(|| bad("host resolves to no address"))?;
        Ok(RedisConfig::new(addr).with_auth(password, db))
    }

    /// Defaults for a server at `addr`.
    pub fn new(addr: SocketAddr) -> RedisConfig {
        RedisConfig {
            addr,
            password: None,
            db: 0,
            key_prefix: KEY_PREFIX_DEFAULT.to_string(),
            connect_timeout_ms: CONNECT_TIMEOUT_MS_DEFAULT,
            io_timeout_ms: IO_TIMEOUT_MS_DEFAULT,
            checkout_timeout_ms: CHECKOUT_TIMEOUT_MS_DEFAULT,
            pool_size_max: POOL_SIZE_DEFAULT,
            breaker: BreakerConfig::default(),
            slow_call_ms: SLOW_CALL_MS_DEFAULT,
        }
    }

    fn with_auth(mut self, password: Option<String>, db: u32) -> Self {
        self.password = password.filter(|p| !p.is_empty());
        self.db = db;
        self
    }

    /// The breaker settings in force: the I/O timeout is the call timeout.
    pub fn breaker_config(&self) -> BreakerConfig {
        BreakerConfig {
            call_timeout_ms: self.io_timeout_ms,
            slow_call_duration_ms: self.slow_call_ms,
            half_open_max_wait_ms: self.breaker.half_open_max_wait_ms.max(self.io_timeout_ms),
            ..self.breaker
        }
    }

    /// Refuses unlimited (zero) or absurd timeouts, a slow threshold at or
    /// above the timeout, and an empty or oversize pool.
    pub fn validate(&self) -> Result<(), RefDataError> {
        for (key, v) in [
            ("redis.connect_timeout_ms", self.connect_timeout_ms),
            ("redis.io_timeout_ms", self.io_timeout_ms),
            ("redis.checkout_timeout_ms", self.checkout_timeout_ms),
        ] {
            range(key, v, 1, TIMEOUT_MS_MAX)?;
        }
        range(
            "redis.pool_size_max",
            self.pool_size_max as u64,
            1,
            POOL_SIZE_MAX as u64,
        )?;
        if self.key_prefix.is_empty() || self.key_prefix.len() > 64 {
            return Err(invalid("redis.key_prefix", "must be 1..=64 bytes"));
        }
        self.breaker_config().validate()?;
        Ok(())
    }
}

/// Cache and refresher settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheConfig {
    pub ttl_ms: u64,
    pub negative_ttl_ms: u64,
    /// TTLs are moved by a uniform amount within ±this percent.
    pub ttl_jitter_pct: u32,
    /// XFetch eagerness (1 = the paper's optimum).
    pub xfetch_beta: f64,
    pub max_stale_ms: u64,
    pub entries_max: usize,
    pub request_queue_max: usize,
    pub miss_retry_after_ms: u64,
    /// Refresher backoff while Redis fails (full jitter).
    pub backoff: Backoff,
    pub refresh_batch_max: usize,
    pub idle_tick_ms: u64,
    pub prefetch_max: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            ttl_ms: TTL_MS_DEFAULT,
            negative_ttl_ms: NEGATIVE_TTL_MS_DEFAULT,
            ttl_jitter_pct: TTL_JITTER_PCT_DEFAULT,
            xfetch_beta: crate::resilience::xfetch::BETA_DEFAULT,
            max_stale_ms: MAX_STALE_MS_DEFAULT,
            entries_max: ENTRIES_MAX_DEFAULT,
            request_queue_max: REQUEST_QUEUE_MAX_DEFAULT,
            miss_retry_after_ms: MISS_RETRY_AFTER_MS_DEFAULT,
            backoff: Backoff::new(100, 10_000),
            refresh_batch_max: REFRESH_BATCH_MAX_DEFAULT,
            idle_tick_ms: IDLE_TICK_MS_DEFAULT,
            prefetch_max: PREFETCH_MAX_DEFAULT,
        }
    }
}

impl CacheConfig {
    pub fn validate(&self) -> Result<(), RefDataError> {
        let day_ms = 86_400_000;
        range("cache.ttl_ms", self.ttl_ms, 1, day_ms)?;
        range("cache.negative_ttl_ms", self.negative_ttl_ms, 1, day_ms)?;
        range("cache.ttl_jitter_pct", self.ttl_jitter_pct.into(), 0, 50)?;
        if !(0.0..=10.0).contains(&self.xfetch_beta) {
            return Err(invalid("cache.xfetch_beta", "must be 0..=10"));
        }
        range("cache.max_stale_ms", self.max_stale_ms, 0, 7 * day_ms)?;
        range(
            "cache.entries_max",
            self.entries_max as u64,
            1,
            ENTRIES_MAX_MAX as u64,
        )?;
        range(
            "cache.request_queue_max",
            self.request_queue_max as u64,
            1,
            1 << 20,
        )?;
        range(
            "cache.miss_retry_after_ms",
            self.miss_retry_after_ms,
            1,
            TIMEOUT_MS_MAX,
        )?;
        range(
            "cache.backoff.base_ms",
            self.backoff.base_ms,
            1,
            TIMEOUT_MS_MAX,
        )?;
        range(
            "cache.backoff.cap_ms",
            self.backoff.cap_ms,
            self.backoff.base_ms,
            600_000,
        )?;
        range(
            "cache.refresh_batch_max",
            self.refresh_batch_max as u64,
            1,
            1 << 16,
        )?;
        range("cache.idle_tick_ms", self.idle_tick_ms, 1, 10_000)?;
        range(
            "cache.prefetch_max",
            self.prefetch_max as u64,
            0,
            ENTRIES_MAX_MAX as u64,
        )?;
        Ok(())
    }
}

/// Everything the Redis-backed reference data needs.
#[derive(Debug, Clone, PartialEq)]
pub struct RefDataConfig {
    pub redis: RedisConfig,
    pub cache: CacheConfig,
}

impl RefDataConfig {
    pub fn from_url(url: &str) -> Result<RefDataConfig, RefDataError> {
        Ok(RefDataConfig {
            redis: RedisConfig::from_url(url)?,
            cache: CacheConfig::default(),
        })
    }

    pub fn validate(&self) -> Result<(), RefDataError> {
        self.redis.validate()?;
        self.cache.validate()
    }
}

fn invalid(key: &'static str, reason: impl Into<String>) -> RefDataError {
    RefDataError::Config {
        key,
        reason: reason.into(),
    }
}

fn range(key: &'static str, v: u64, lo: u64, hi: u64) -> Result<(), RefDataError> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(invalid(key, format!("{v} not in {lo}..={hi}")))
    }
}
