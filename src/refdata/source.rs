//! Accounts read from Redis, behind the dependency's circuit breaker.
//!
//! Key layout (documented in `docs/refdata.md`): hash
//! `<prefix>account:<name>` with fields `token`, `symbols`, `tiers`,
//! `max_sessions`, `critical`, `max_update_hz`; set `<prefix>accounts` lists the names to
//! prefetch. Records are resolved against the instrument table with the
//! same rules as the config file's `[[accounts]]`.
//!
//! Breaker classification ([`classify`]), from what the client really
//! returns for each fault (asserted in `tests/refdata_breaker.rs`):
//! connect errors, timeouts, resets, closes, protocol and server errors
//! are failures; a missing key (`HGETALL` answers an empty array) and a
//! malformed record are ignored — Redis answered, the data is the
//! problem; a pool checkout timeout is ignored too, like a full bulkhead.
//! Every call that returns is timed with the real clock (the I/O is real)
//! while the breaker's windows run on the injected clock.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use super::pool::{Pool, PoolConfig, PoolError};
use super::resp::{RedisError, Value};
use super::settings::RedisConfig;
use super::stats::RefDataStats;
use super::RefDataError;
use crate::config::{Account, ACCOUNT_SESSIONS_DEFAULT};
use crate::model::instruments::{INSTRUMENTS_MAX, TIERS_MAX};
use crate::model::InstrumentTable;
use crate::resilience::{BreakerState, BreakerStats, CircuitBreaker, NotPermitted, Outcome};

/// Longest account name (as in the config file).
pub const ACCOUNT_NAME_LEN_MAX: usize = 32;
/// Longest stored token field (an argon2id PHC string; see
/// [`crate::auth::hash`]).
pub const TOKEN_LEN_MAX: usize = crate::auth::hash::STORED_LEN_MAX;

/// Why one account fetch gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The breaker refused the call (not made).
    #[error(transparent)]
    NotPermitted(NotPermitted),
    /// No connection: checkout timeout or connect failure.
    #[error("pool: {0}")]
    Pool(PoolError),
    /// The command failed (timeout, closed, protocol, server error).
    #[error("redis: {0}")]
    Redis(RedisError),
    /// The record exists but cannot be used (a bad field, another type,
    /// a reply over the limits): the account is refused, Redis is fine.
    #[error("account record field `{field}`: {reason}")]
    Invalid {
        /// The field at fault (`record` for the whole reply).
        field: &'static str,
        /// Why.
        reason: String,
    },
}

/// What a fetch found: an account, or none under that name.
pub type FetchResult = Result<Option<Account>, FetchError>;

/// The breaker outcome of one fetch that was permitted.
pub fn classify(result: &FetchResult, duration_ns: u64) -> Outcome {
    match result {
        Ok(Some(_)) => Outcome::Success { duration_ns },
        Ok(None) | Err(FetchError::Invalid { .. }) => Outcome::Ignored,
        Err(FetchError::Pool(PoolError::CheckoutTimeout { .. })) => Outcome::Ignored,
        Err(FetchError::Pool(PoolError::Connect(_)) | FetchError::Redis(_)) => {
            Outcome::Failure { duration_ns }
        }
        Err(FetchError::NotPermitted(_)) => Outcome::Ignored,
    }
}

/// Where the refresher gets accounts. `fetch` returns the result and how
/// long it took (ns); the cache stores that as the XFetch recompute time.
pub trait AccountFetch: Send {
    /// One account by name, at `now_ns` (injected time for the breaker).
    fn fetch(&mut self, name: &str, now_ns: u64) -> (FetchResult, u64);
    /// Names to load at start (bounded by `max`); empty by default.
    fn list(&mut self, _max: usize, _now_ns: u64) -> Result<Vec<String>, FetchError> {
        Ok(Vec::new())
    }
    /// A cheap health call (Redis `PING`) the refresher makes when it has
    /// made no other call for `probe_interval_ms`, so an outage is seen
    /// (and the breaker opens) while every logon is served from the cache.
    /// `Ok` by default (a source with nothing to probe).
    fn probe(&mut self, _now_ns: u64) -> Result<(), FetchError> {
        Ok(())
    }
    /// Whether a probe is wanted now regardless of the interval (the
    /// breaker is half-open and waits for trial calls). False by default.
    fn wants_probe(&mut self, _now_ns: u64) -> bool {
        false
    }
}

/// Plain Redis access (no breaker): pool plus key layout plus resolution.
#[derive(Debug)]
pub struct AccountStore {
    pool: Pool,
    prefix: String,
    table: InstrumentTable,
}

impl AccountStore {
    /// A store over a new pool (no connection made yet).
    pub fn new(cfg: &RedisConfig, table: InstrumentTable) -> AccountStore {
        AccountStore {
            pool: Pool::new(PoolConfig {
                addr: cfg.addr,
                password: cfg.password.clone(),
                db: cfg.db,
                connect_timeout_ms: cfg.connect_timeout_ms,
                io_timeout_ms: cfg.io_timeout_ms,
                checkout_timeout_ms: cfg.checkout_timeout_ms,
                size_max: cfg.pool_size_max,
            }),
            prefix: cfg.key_prefix.clone(),
            table,
        }
    }

    /// The connection pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The hash key of an account.
    pub fn account_key(&self, name: &str) -> String {
        format!("{}account:{name}", self.prefix)
    }

    /// The set of account names to prefetch.
    pub fn index_key(&self) -> String {
        format!("{}accounts", self.prefix)
    }

    /// One command on a pooled connection.
    pub fn command(&self, args: &[&[u8]]) -> Result<Value, FetchError> {
        let mut conn = self.pool.checkout().map_err(FetchError::Pool)?;
        conn.command(args).map_err(FetchError::Redis)
    }

    /// `HGETALL` of the account's hash, resolved.
    pub fn fetch(&self, name: &str) -> FetchResult {
        let key = self.account_key(name);
        let reply = self.command(&[b"HGETALL", key.as_bytes()]);
        let reply = match reply {
            Err(FetchError::Redis(e)) if e.is_wrong_type() => {
                return Err(invalid("key", "not a hash"));
            }
            // The server answered; the record is too big to be an account.
            // An invalid record for this account, not an unhealthy Redis.
            Err(FetchError::Redis(RedisError::TooLarge(what))) => {
                return Err(invalid("record", format!("reply over the limits: {what}")));
            }
            other => other?,
        };
        let Value::Array(items) = reply else {
            return Err(FetchError::Redis(RedisError::Protocol(
                "HGETALL did not answer an array",
            )));
        };
        if items.is_empty() {
            return Ok(None);
        }
        resolve(name, &fields(&items)?, &self.table).map(Some)
    }

    /// The names in the index set, at most `max`, read with `SSCAN` in
    /// pages of [`SCAN_PAGE`] so a large set never meets the reply limits.
    /// Names that are not UTF-8 or too long are skipped.
    pub fn list(&self, max: usize) -> Result<Vec<String>, FetchError> {
        let key = self.index_key();
        let page = SCAN_PAGE.to_string();
        let mut names = Vec::new();
        let mut cursor = b"0".to_vec();
        loop {
            let args: [&[u8]; 5] = [b"SSCAN", key.as_bytes(), &cursor, b"COUNT", page.as_bytes()];
            let (next, items) = match self.command(&args)? {
                Value::Array(mut v) if v.len() == 2 => match (v.pop(), v.pop()) {
                    (Some(Value::Array(items)), Some(Value::Bulk(next))) => (next, items),
                    _ => return Err(scan_protocol()),
                },
                _ => return Err(scan_protocol()),
            };
            for v in items {
                if let Value::Bulk(b) = v {
                    match String::from_utf8(b) {
                        Ok(n) if !n.is_empty() && n.len() <= ACCOUNT_NAME_LEN_MAX => names.push(n),
                        _ => {}
                    }
                }
            }
            if next == b"0" || names.len() >= max {
                names.sort_unstable();
                names.dedup();
                names.truncate(max);
                return Ok(names);
            }
            cursor = next;
        }
    }
}

/// Names asked for per `SSCAN` page of the index set.
pub const SCAN_PAGE: usize = 512;

fn scan_protocol() -> FetchError {
    FetchError::Redis(RedisError::Protocol("SSCAN did not answer [cursor, names]"))
}

fn invalid(field: &'static str, reason: impl Into<String>) -> FetchError {
    FetchError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// The fields of an account record.
#[derive(Debug, Default)]
struct Fields {
    token: Option<String>,
    symbols: Option<String>,
    tiers: Option<String>,
    max_sessions: Option<String>,
    critical: Option<String>,
    max_update_hz: Option<String>,
}

fn fields(items: &[Value]) -> Result<Fields, FetchError> {
    let mut f = Fields::default();
    for pair in items.chunks(2) {
        let [Value::Bulk(k), Value::Bulk(v)] = pair else {
            return Err(invalid("hash", "not field/value pairs"));
        };
        let v = String::from_utf8(v.clone()).map_err(|_| invalid("hash", "value not UTF-8"))?;
        match k.as_slice() {
            b"token" => f.token = Some(v),
            b"symbols" => f.symbols = Some(v),
            b"tiers" => f.tiers = Some(v),
            b"max_sessions" => f.max_sessions = Some(v),
            b"critical" => f.critical = Some(v),
            b"max_update_hz" => f.max_update_hz = Some(v),
            _ => {} // unknown fields are left for newer versions
        }
    }
    Ok(f)
}

fn list_of(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Resolves a record with the config file's rules (see `src/config.rs`).
fn resolve(name: &str, f: &Fields, table: &InstrumentTable) -> Result<Account, FetchError> {
    if name.is_empty() || name.len() > ACCOUNT_NAME_LEN_MAX {
        return Err(invalid("name", "must be 1..=32 bytes"));
    }
    // Redis records always hold the hash: a clear token is a malformed
    // record (there is no insecure switch for a shared store).
    let token = f.token.clone().unwrap_or_default();
    crate::auth::hash::check_hash(&token).map_err(|why| invalid("token", why))?;
    let symbols = resolve_symbols(f.symbols.as_deref().unwrap_or("*"), table)?;
    let tiers = resolve_tiers(f.tiers.as_deref().unwrap_or(""), table)?;
    let max_sessions = match f.max_sessions.as_deref() {
        None => ACCOUNT_SESSIONS_DEFAULT,
        Some(s) => s
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| invalid("max_sessions", "must be an integer >= 1"))?,
    };
    let critical = match f.critical.as_deref().map(str::trim) {
        None | Some("0" | "false" | "") => false,
        Some("1" | "true") => true,
        Some(_) => return Err(invalid("critical", "must be 0, 1, true or false")),
    };
    let max_update_hz = match f.max_update_hz.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(s) => {
            let hz = s
                .parse::<u32>()
                .map_err(|_| invalid("max_update_hz", "must be an integer (0 = unlimited)"))?;
            crate::config::check_max_update_hz(hz).map_err(|r| invalid("max_update_hz", r))?;
            Some(hz)
        }
    };
    Ok(Account {
        name: name.to_string(),
        token,
        symbols,
        tiers,
        max_sessions,
        critical,
        max_update_hz,
    })
}

fn resolve_symbols(text: &str, table: &InstrumentTable) -> Result<Option<Vec<u16>>, FetchError> {
    if list_of(text).any(|s| s == "*") {
        return Ok(None);
    }
    let mut ids = Vec::new();
    for s in list_of(text) {
        if ids.len() >= INSTRUMENTS_MAX {
            return Err(invalid("symbols", "too many symbols"));
        }
        let inst = table
            .by_name(s)
            .ok_or_else(|| invalid("symbols", format!("unknown instrument {s}")))?;
        ids.push(inst.id);
    }
    Ok(Some(ids))
}

fn resolve_tiers(text: &str, table: &InstrumentTable) -> Result<Vec<u8>, FetchError> {
    let mut ids = Vec::new();
    for t in list_of(text) {
        if ids.len() >= TIERS_MAX {
            return Err(invalid("tiers", "too many tiers"));
        }
        let tier = table
            .tier_by_name(t)
            .ok_or_else(|| invalid("tiers", format!("unknown tier {t}")))?;
        ids.push(tier.id);
    }
    if ids.is_empty() {
        return Err(invalid("tiers", "at least one tier"));
    }
    Ok(ids)
}

/// [`AccountStore`] behind the Redis circuit breaker: what the refresher
/// uses in production. Single owner (the refresher thread).
///
/// Besides the breaker's rate rule, `breaker_consecutive_failures` failed
/// calls in a row (no success between) open it at once
/// ([`CircuitBreaker::trip`]): the refresher backs off after each failure,
/// so under a dead or blackholed Redis it makes too few calls for the rate
/// rule's `minimum_calls` to fill its window (see `docs/refdata.md`).
/// Every breaker transition is logged.
#[derive(Debug)]
pub struct GuardedStore {
    store: AccountStore,
    breaker: CircuitBreaker,
    stats: Arc<RefDataStats>,
    consecutive_max: u32,
    consecutive: u32,
}

impl GuardedStore {
    /// Validates `cfg` and builds the pool (no connection yet) and the
    /// breaker. Errors: the setting that is refused.
    pub fn new(
        cfg: &RedisConfig,
        table: InstrumentTable,
        stats: Arc<RefDataStats>,
    ) -> Result<GuardedStore, RefDataError> {
        cfg.validate()?;
        Ok(GuardedStore {
            store: AccountStore::new(cfg, table),
            breaker: CircuitBreaker::new(cfg.breaker_config())?,
            stats,
            consecutive_max: cfg.breaker_consecutive_failures,
            consecutive: 0,
        })
    }

    /// The plain store (pool and key layout).
    pub fn store(&self) -> &AccountStore {
        &self.store
    }

    /// The breaker, for operator actions and tests.
    pub fn breaker(&mut self) -> &mut CircuitBreaker {
        &mut self.breaker
    }

    /// The breaker's counters, for /metrics.
    pub fn breaker_stats(&self) -> Arc<BreakerStats> {
        self.breaker.stats()
    }

    /// One breaker-guarded call; `op` runs only when permitted.
    fn guarded<T>(
        &mut self,
        now_ns: u64,
        op: impl FnOnce(&AccountStore) -> Result<T, FetchError>,
        outcome: impl FnOnce(&Result<T, FetchError>, u64) -> Outcome,
    ) -> (Result<T, FetchError>, u64) {
        let before = self.breaker.state(now_ns);
        let permit = match self.breaker.try_acquire(now_ns) {
            Ok(p) => p,
            Err(refused) => {
                self.stats.redis_not_permitted.fetch_add(1, Relaxed);
                self.log_transition(before, now_ns);
                return (Err(FetchError::NotPermitted(refused)), 0);
            }
        };
        let started = Instant::now();
        let result = op(&self.store);
        let duration_ns = started.elapsed().as_nanos() as u64;
        let o = outcome(&result, duration_ns);
        self.stats.count_redis(o, &result);
        // Recorded at the injected `now_ns` (tests drive the breaker's
        // windows with a manual clock while the I/O takes real time).
        self.breaker.record(permit, o, now_ns);
        self.count_consecutive(o, now_ns);
        self.log_transition(before, now_ns);
        (result, duration_ns)
    }

    /// The consecutive-failures rule (0 = off).
    fn count_consecutive(&mut self, o: Outcome, now_ns: u64) {
        match o {
            Outcome::Success { .. } => self.consecutive = 0,
            Outcome::Failure { .. } => {
                self.consecutive = self.consecutive.saturating_add(1);
                let k = self.consecutive_max;
                if k > 0 && self.consecutive >= k && self.breaker.trip(now_ns) {
                    self.consecutive = 0;
                }
            }
            Outcome::Ignored => {}
        }
    }

    fn log_transition(&mut self, before: BreakerState, now_ns: u64) {
        let after = self.breaker.state(now_ns);
        if after == before {
            return;
        }
        if after == BreakerState::Open {
            tracing::warn!(
                from = before.name(),
                to = after.name(),
                "reference data: Redis breaker opened; cached accounts keep serving"
            );
        } else {
            tracing::info!(
                from = before.name(),
                to = after.name(),
                "reference data: Redis breaker changed state"
            );
        }
    }
}

impl AccountFetch for GuardedStore {
    fn fetch(&mut self, name: &str, now_ns: u64) -> (FetchResult, u64) {
        self.guarded(now_ns, |s| s.fetch(name), classify)
    }

    fn list(&mut self, max: usize, now_ns: u64) -> Result<Vec<String>, FetchError> {
        let outcome = |r: &Result<Vec<String>, FetchError>, d| match r {
            Ok(_) => Outcome::Success { duration_ns: d },
            Err(e) => classify(&Err(e.clone()), d),
        };
        self.guarded(now_ns, |s| s.list(max), outcome).0
    }

    fn probe(&mut self, now_ns: u64) -> Result<(), FetchError> {
        let outcome = |r: &Result<(), FetchError>, d| match r {
            Ok(()) => Outcome::Success { duration_ns: d },
            Err(e) => classify(&Err(e.clone()), d),
        };
        let ping = |s: &AccountStore| s.command(&[b"PING"]).map(|_| ());
        self.guarded(now_ns, ping, outcome).0
    }

    fn wants_probe(&mut self, now_ns: u64) -> bool {
        self.breaker.state(now_ns) == BreakerState::HalfOpen
    }
}
