//! Reference-data settings, their defaults (named constants) and checks.

use std::net::{SocketAddr, ToSocketAddrs};

use super::RefDataError;
use crate::resilience::{Backoff, BreakerConfig};

/// TCP connect plus `AUTH`/`SELECT` on a local network.
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 500;
/// Total budget of one Redis command. An account hash answers in well under
/// a millisecond on a healthy server; 250 ms is generous and still short
/// enough that a stalled server is noticed in one refresh.
pub const IO_TIMEOUT_MS_DEFAULT: u64 = 250;
/// Slow-call threshold, below the I/O timeout so slowness is seen before
/// timeouts turn it into failures.
pub const SLOW_CALL_MS_DEFAULT: u64 = 100;
/// Longest wait for a pooled connection.
pub const CHECKOUT_TIMEOUT_MS_DEFAULT: u64 = 100;
/// Pooled connections: the refresher uses one at a time.
pub const POOL_SIZE_DEFAULT: usize = 2;
/// Largest pool accepted.
pub const POOL_SIZE_MAX: usize = 64;
/// Longest timeout accepted (ms).
pub const TIMEOUT_MS_MAX: u64 = 60_000;
/// Prefix of every key.
pub const KEY_PREFIX_DEFAULT: &str = "pricewire:";
/// Lifetime of a cached account before jitter; also the main part of
/// the revocation bound (`docs/refdata.md`).
pub const TTL_MS_DEFAULT: u64 = 60_000;
/// Missing accounts are remembered for less time, so one added to Redis
/// can log on soon.
pub const NEGATIVE_TTL_MS_DEFAULT: u64 = 5_000;
/// TTLs move by a uniform amount within ± this percent.
pub const TTL_JITTER_PCT_DEFAULT: u32 = 20;
/// How long past expiry a cached entry keeps serving while Redis fails.
pub const MAX_STALE_MS_DEFAULT: u64 = 15 * 60_000;
/// Cached entries at most.
pub const ENTRIES_MAX_DEFAULT: usize = 100_000;
/// Largest `entries_max` accepted.
pub const ENTRIES_MAX_MAX: usize = 10_000_000;
/// Pending fills and refreshes at most (one per key).
pub const REQUEST_QUEUE_MAX_DEFAULT: usize = 1_024;
/// Base retry-after for an account not yet in the cache.
pub const MISS_RETRY_AFTER_MS_DEFAULT: u64 = 100;
/// Redis calls the refresher makes per step before it looks at the queue
/// and the clock again.
pub const REFRESH_BATCH_MAX_DEFAULT: usize = 256;
/// The refresher's idle wake-up period.
pub const IDLE_TICK_MS_DEFAULT: u64 = 100;
/// Accounts prefetched from the index set at start; an index with more
/// names is loaded up to this bound and the rest counted and logged.
pub const PREFETCH_MAX_DEFAULT: usize = 10_000;
/// Pending lookups of unknown names one client address (IPv6: its /64)
/// may hold; its next one displaces its oldest.
pub const MISSES_PER_SOURCE_MAX_DEFAULT: usize = 64;
/// The Redis breaker's open wait: short, because a trial is one cheap
/// read and recovery waits for it ([`RefDataConfig::recovery_bound_ms`]).
pub const BREAKER_OPEN_WAIT_MS_DEFAULT: u64 = 3_000;
/// Each open wait is moved within ± this percent, so the trials of
/// processes that opened together drift apart.
pub const BREAKER_OPEN_WAIT_JITTER_PCT_DEFAULT: u32 = 20;
/// Failed Redis calls in a row that open the breaker at once. The
/// refresher backs off after each failure, so under an outage it makes a
/// few calls per window, too few for the rate rule's `minimum_calls`; five
/// in a row take at most [`RefDataConfig::open_bound_ms`] (6.85 s on
/// defaults) and a single blip (a failover, a restart) stays below it.
pub const BREAKER_CONSECUTIVE_FAILURES_DEFAULT: u32 = 5;
/// With no other call for this long, the refresher sends `PING`, so an
/// outage is seen while every logon is served from the cache.
pub const PROBE_INTERVAL_MS_DEFAULT: u64 = 1_000;
/// Calls per second the refresher makes while it works off what queued up
/// during an outage (paced recovery), so a recovering Redis is not hit
/// with every queued request back to back.
pub const RECOVERY_RATE_PER_S_DEFAULT: u32 = 200;
/// The most a retry-after is spread above its base (ms): clients told
/// together come back over up to this much, and never later.
pub const RETRY_SPREAD_MAX_MS: u64 = 1_000;
/// Calls the recovery pace lets through at once.
pub const RECOVERY_BURST: u32 = 10;

/// Where Redis is and how calls to it are bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// The server (or the proxy in front of it).
    pub addr: SocketAddr,
    /// `AUTH` password from the URL, if any (never logged).
    pub password: Option<String>,
    /// Database number from the URL.
    pub db: u32,
    /// Prefix of every key (`<prefix>account:<name>`, `<prefix>accounts`).
    pub key_prefix: String,
    /// TCP connect plus handshake (ms).
    pub connect_timeout_ms: u64,
    /// Total budget of one command (ms).
    pub io_timeout_ms: u64,
    /// Longest wait for a pooled connection (ms).
    pub checkout_timeout_ms: u64,
    /// Most pooled connections.
    pub pool_size_max: usize,
    /// Breaker settings; `call_timeout_ms` is taken from `io_timeout_ms`
    /// and the slow threshold from `slow_call_ms`.
    pub breaker: BreakerConfig,
    /// Slow-call threshold of the breaker (ms), below `io_timeout_ms`.
    pub slow_call_ms: u64,
    /// Failed calls in a row that open the breaker (0 = only the rate
    /// rule, which the config check then requires to be able to open).
    pub breaker_consecutive_failures: u32,
}

impl RedisConfig {
    /// Defaults for a server at `redis://[:password@]host[:port][/db]`.
    pub fn from_url(url: &str) -> Result<RedisConfig, RefDataError> {
        let shown = redact_url(url);
        let bad = |reason: &str| RefDataError::Config {
            key: "redis",
            reason: format!("{shown}: {reason}"),
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
            breaker: BreakerConfig {
                open_wait_ms: BREAKER_OPEN_WAIT_MS_DEFAULT,
                open_wait_jitter_pct: BREAKER_OPEN_WAIT_JITTER_PCT_DEFAULT,
                // One call at a time: each trial's verdict counts at once.
                half_open_fail_fast: true,
                ..BreakerConfig::default()
            },
            slow_call_ms: SLOW_CALL_MS_DEFAULT,
            breaker_consecutive_failures: BREAKER_CONSECUTIVE_FAILURES_DEFAULT,
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
            ("refdata.connect_timeout_ms", self.connect_timeout_ms),
            ("refdata.io_timeout_ms", self.io_timeout_ms),
            ("refdata.checkout_timeout_ms", self.checkout_timeout_ms),
        ] {
            range(key, v, 1, TIMEOUT_MS_MAX)?;
        }
        range(
            "refdata.pool_size",
            self.pool_size_max as u64,
            1,
            POOL_SIZE_MAX as u64,
        )?;
        if self.key_prefix.is_empty() || self.key_prefix.len() > 64 {
            return Err(invalid("refdata.key_prefix", "must be 1..=64 bytes"));
        }
        range(
            "refdata.breaker_consecutive_failures",
            self.breaker_consecutive_failures.into(),
            0,
            1_000,
        )?;
        self.breaker_config().validate()?;
        Ok(())
    }

    /// Longest time one failed call can take: a checkout, a connect and the
    /// command, each to its timeout.
    pub fn attempt_max_ms(&self) -> u64 {
        self.checkout_timeout_ms + self.connect_timeout_ms + self.io_timeout_ms
    }
}

/// `url` with any password replaced by `***`, for logs and errors.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (format!("{s}://"), r),
        None => (String::new(), url),
    };
    match rest.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}***@{host}"),
        None => url.to_string(),
    }
}

/// Cache and refresher settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheConfig {
    /// Lifetime of a cached account (ms), before jitter.
    pub ttl_ms: u64,
    /// Lifetime of a cached "no such account" (ms).
    pub negative_ttl_ms: u64,
    /// TTLs are moved by a uniform amount within ±this percent.
    pub ttl_jitter_pct: u32,
    /// XFetch eagerness (1 = the paper's optimum).
    pub xfetch_beta: f64,
    /// How long past expiry an entry serves while Redis fails (ms).
    pub max_stale_ms: u64,
    /// Cached entries at most.
    pub entries_max: usize,
    /// Pending requests at most.
    pub request_queue_max: usize,
    /// Base retry-after of a miss (ms).
    pub miss_retry_after_ms: u64,
    /// Refresher backoff while Redis fails (full jitter).
    pub backoff: Backoff,
    /// Redis calls per refresher step at most.
    pub refresh_batch_max: usize,
    /// The refresher's idle wake-up period (ms).
    pub idle_tick_ms: u64,
    /// Names loaded from the index set at start at most (0 = no prefetch).
    pub prefetch_max: usize,
    /// Probe Redis (a data-set read) after this long without a call
    /// (0 = never); also the pace of data-set checks while it is lost.
    pub probe_interval_ms: u64,
    /// Pending lookups of unknown names per client address.
    pub misses_per_source_max: usize,
    /// Calls per second while working off a backlog after a failure.
    pub recovery_rate_per_s: u32,
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
            probe_interval_ms: PROBE_INTERVAL_MS_DEFAULT,
            misses_per_source_max: MISSES_PER_SOURCE_MAX_DEFAULT,
            recovery_rate_per_s: RECOVERY_RATE_PER_S_DEFAULT,
        }
    }
}

impl CacheConfig {
    /// Refuses zero or absurd values; errors name the `[refdata]` key.
    pub fn validate(&self) -> Result<(), RefDataError> {
        let day_ms = 86_400_000;
        range("refdata.ttl_ms", self.ttl_ms, 1, day_ms)?;
        range("refdata.negative_ttl_ms", self.negative_ttl_ms, 1, day_ms)?;
        range("refdata.ttl_jitter_pct", self.ttl_jitter_pct.into(), 0, 50)?;
        if !(0.0..=10.0).contains(&self.xfetch_beta) {
            return Err(invalid("refdata.xfetch_beta", "must be 0..=10"));
        }
        range("refdata.max_stale_ms", self.max_stale_ms, 0, 7 * day_ms)?;
        range(
            "refdata.entries_max",
            self.entries_max as u64,
            1,
            ENTRIES_MAX_MAX as u64,
        )?;
        range(
            "refdata.request_queue_max",
            self.request_queue_max as u64,
            1,
            1 << 20,
        )?;
        self.validate_refresher()
    }

    /// The refresher's and the queue's settings.
    fn validate_refresher(&self) -> Result<(), RefDataError> {
        range(
            "refdata.miss_retry_after_ms",
            self.miss_retry_after_ms,
            1,
            TIMEOUT_MS_MAX,
        )?;
        range(
            "refdata.backoff_base_ms",
            self.backoff.base_ms,
            1,
            TIMEOUT_MS_MAX,
        )?;
        range(
            "refdata.backoff_cap_ms",
            self.backoff.cap_ms,
            self.backoff.base_ms,
            600_000,
        )?;
        range(
            "refdata.refresh_batch_max",
            self.refresh_batch_max as u64,
            1,
            1 << 16,
        )?;
        range("refdata.idle_tick_ms", self.idle_tick_ms, 1, 10_000)?;
        range(
            "refdata.prefetch_max",
            self.prefetch_max as u64,
            0,
            ENTRIES_MAX_MAX as u64,
        )?;
        range(
            "refdata.probe_interval_ms",
            self.probe_interval_ms,
            0,
            600_000,
        )?;
        range(
            "refdata.misses_per_source_max",
            self.misses_per_source_max as u64,
            1,
            1 << 20,
        )?;
        range(
            "refdata.recovery_rate_per_s",
            self.recovery_rate_per_s.into(),
            1,
            1_000_000,
        )?;
        Ok(())
    }
}

/// Everything the Redis-backed reference data needs.
#[derive(Debug, Clone, PartialEq)]
pub struct RefDataConfig {
    /// Server, timeouts, pool and breaker.
    pub redis: RedisConfig,
    /// Cache and refresher.
    pub cache: CacheConfig,
}

impl RefDataConfig {
    /// Defaults for the server at `url` (see [`RedisConfig::from_url`]).
    pub fn from_url(url: &str) -> Result<RefDataConfig, RefDataError> {
        Ok(RefDataConfig {
            redis: RedisConfig::from_url(url)?,
            cache: CacheConfig::default(),
        })
    }

    /// Checks both parts, then that the breaker can open: with the
    /// consecutive-failures rule off, the rate rule's `minimum_calls` must
    /// fit its window at the refresher's slowest failing rate (one call per
    /// backoff cap plus the longest attempt), else it could never open.
    pub fn validate(&self) -> Result<(), RefDataError> {
        self.redis.validate()?;
        self.cache.validate()?;
        if self.redis.breaker_consecutive_failures == 0 {
            let cycle_ms = self.cache.backoff.cap_ms + self.redis.attempt_max_ms();
            self.redis.breaker_config().check_can_open(cycle_ms)?;
        }
        Ok(())
    }

    /// Worst case from the moment Redis dies or goes silent until the
    /// consecutive-failures rule opens the breaker, with no logon traffic
    /// at all: the probe interval (plus one idle tick, the refresher's
    /// wake-up granularity when idle), then `k` attempts each to its
    /// longest timeout with the longest backoff before each retry. `None` when the
    /// rule or the probe is off. With logon traffic the first failure
    /// comes sooner.
    pub fn open_bound_ms(&self) -> Option<u64> {
        let k = self.redis.breaker_consecutive_failures;
        if k == 0 || self.cache.probe_interval_ms == 0 {
            return None;
        }
        let backoffs: u64 = (0..k - 1).map(|n| self.cache.backoff.window_ms(n)).sum();
        let attempts = u64::from(k) * self.redis.attempt_max_ms();
        let first = self.cache.probe_interval_ms + self.cache.idle_tick_ms;
        Some(first + attempts + backoffs)
    }
}

impl RefDataConfig {
    /// Worst case from the moment Redis is healthy again (every call
    /// answers within `io_timeout_ms`) until the first logon of an account
    /// that is not cached is served, for a client that comes back when its
    /// retry-after says: a failing call already under way (its timeouts,
    /// [`RedisConfig::attempt_max_ms`]), then the longest wait before the
    /// next attempt (the breaker's longest open wait, or with the breaker
    /// still closed the refresher's backoff window before the
    /// consecutive-failures rule trips; the backoff cap when that rule is
    /// off), then the attempt itself (the first trial is the waiting
    /// logon's own fetch: misses come first), then the client's return —
    /// at most [`RETRY_SPREAD_MAX_MS`] after the attempt it was told
    /// about, plus one miss retry if it came back while the fetch ran.
    /// `docs/refdata.md`, "Recovery".
    pub fn recovery_bound_ms(&self) -> u64 {
        let k = self.redis.breaker_consecutive_failures;
        let closed_wait_ms = match k {
            0 => self.cache.backoff.cap_ms,
            _ => self.cache.backoff.window_ms(k.saturating_sub(2)),
        };
        let open_wait_ms = self.redis.breaker_config().open_wait_max_ms();
        self.redis.attempt_max_ms()
            + open_wait_ms.max(closed_wait_ms)
            + self.redis.io_timeout_ms
            + self.client_return_ms()
    }

    /// Worst case from the data set trusted again in Redis (the marker
    /// restored or raised, or the index refilled) until the first logon
    /// refused meanwhile is served: the next data-set check (the probe
    /// interval plus one idle tick), one call, and the client's return.
    /// `None` with the probe off.
    pub fn trust_bound_ms(&self) -> Option<u64> {
        let interval = self.cache.probe_interval_ms;
        (interval > 0).then(|| {
            interval + self.cache.idle_tick_ms + self.redis.io_timeout_ms + self.client_return_ms()
        })
    }

    /// A client told to come back returns at most the spread after the
    /// time it was given, and may need one more miss retry (at most twice
    /// the miss base) if it returned while the fill ran.
    fn client_return_ms(&self) -> u64 {
        RETRY_SPREAD_MAX_MS + 2 * self.cache.miss_retry_after_ms
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
