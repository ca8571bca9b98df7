//! Accounts read from Redis, behind the dependency's circuit breaker.
//!
//! Key layout (documented in `docs/refdata.md`): hash
//! `<prefix>account:<name>` with fields `token`, `symbols`, `tiers`,
//! `max_sessions`, `critical`, `max_update_hz`; set `<prefix>accounts` lists the names to
//! prefetch. Records are resolved against the instrument table with the
//! same rules as the config file's `[[accounts]]`.
//!
//! Breaker classification ([`classify`]), from what the client really
//! returns for each fault (asserted in `tests/it/refdata_breaker.rs`):
//! connect errors, timeouts, resets, closes, protocol and server errors
//! are failures; a missing key (`HGETALL` answers an empty array) and a
//! malformed record are ignored — Redis answered, the data is the
//! problem; a pool checkout timeout is ignored too, like a full bulkhead.
//! Every call that returns is timed with the real clock (the I/O is real)
//! while the breaker's windows run on the injected clock.

use super::dataset::{DataSetFault, Index, Marker, Observation};
use super::pool::{Pool, PoolConfig, PoolError};
use super::resp::{RedisError, Value};
use super::settings::RedisConfig;
use crate::config::{Account, ACCOUNT_SESSIONS_DEFAULT};
use crate::model::instruments::{INSTRUMENTS_MAX, TIERS_MAX};
use crate::model::InstrumentTable;
use crate::resilience::{NotPermitted, Outcome};

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
    /// Redis answered, but the data set is not trusted (empty, stale,
    /// or its index unreadable): no verdict on this account.
    #[error("data set not trusted: {0}")]
    DataSet(DataSetFault),
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

/// An account record as read (before any judgement of the data set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// No such key (`HGETALL` answered an empty array).
    Absent,
    /// The record says `revoked 1`: a positive revocation, whatever the
    /// other fields hold.
    Revoked,
    /// A valid record, resolved.
    Account(Account),
}

/// A record and the data set read with it ([`AccountStore::read`]): the
/// outer error is the call's, the inner one the record's own.
pub type RecordRead = Result<(Result<Record, FetchError>, Observation), FetchError>;

/// What a fetch found: an account, or none under that name.
pub type FetchResult = Result<Option<Account>, FetchError>;

/// The breaker outcome of one fetch that was permitted.
pub fn classify(result: &FetchResult, duration_ns: u64) -> Outcome {
    match result {
        Ok(Some(_)) => Outcome::Success { duration_ns },
        Ok(None) | Err(FetchError::Invalid { .. } | FetchError::DataSet(_)) => Outcome::Ignored,
        Err(FetchError::Pool(PoolError::CheckoutTimeout { .. })) => Outcome::Ignored,
        Err(FetchError::Pool(PoolError::Connect(_)) | FetchError::Redis(_)) => {
            Outcome::Failure { duration_ns }
        }
        Err(FetchError::NotPermitted(_)) => Outcome::Ignored,
    }
}

/// Where the refresher gets accounts. `fetch` returns the result and how
/// long it took (ns); the cache stores that as the XFetch recompute time.
/// `Ok(None)` is a positive absence (deleted or revoked while the data set
/// is trusted); a source that cannot vouch for an absence answers
/// [`FetchError::DataSet`].
pub trait AccountFetch: Send {
    /// One account by name, at `now_ns` (injected time for the breaker).
    fn fetch(&mut self, name: &str, now_ns: u64) -> (FetchResult, u64);
    /// Names to load at start (bounded by `max`); none by default.
    fn list(&mut self, _max: usize, _now_ns: u64) -> Result<Listing, FetchError> {
        Ok(Listing::default())
    }
    /// A cheap health call (for Redis, a read of the data-set marker) the
    /// refresher makes when it has made no other call for
    /// `probe_interval_ms`, so an outage is seen (and the breaker opens)
    /// while every logon is served from the cache. `Ok` by default.
    fn probe(&mut self, _now_ns: u64) -> Result<(), FetchError> {
        Ok(())
    }
    /// Whether a probe is wanted now regardless of the interval (the
    /// breaker is half-open and waits for trial calls). False by default.
    fn wants_probe(&mut self, _now_ns: u64) -> bool {
        false
    }
    /// Whether absences are trusted now (the data set is intact), as of
    /// the last call. True by default (a source with no data-set notion).
    fn data_set_trusted(&self) -> bool {
        true
    }
    /// While the source's breaker is open: the time until its next trial
    /// (the refresher waits exactly that long). `None` by default.
    fn open_wait_left_ns(&mut self, _now_ns: u64) -> Option<u64> {
        None
    }
    /// Called on every refresher wake-up, so timed state changes (the
    /// breaker's open → half-open) are applied, logged and published
    /// without waiting for a call.
    fn tick(&mut self, _now_ns: u64) {}
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

    /// The generation marker (`docs/refdata.md`, "The data set").
    pub fn generation_key(&self) -> String {
        format!("{}generation", self.prefix)
    }

    /// `HGETALL` of the account's hash, resolved, with no judgement of the
    /// data set (a deleted and a revoked account are both `None`).
    pub fn fetch(&self, name: &str) -> FetchResult {
        match self.read(name)?.0? {
            Record::Account(a) => Ok(Some(a)),
            Record::Absent | Record::Revoked => Ok(None),
        }
    }

    /// The account's record and the data set, read in one `MULTI`/`EXEC`
    /// transaction (the same instant): `HGETALL` of the record, `GET` of
    /// the generation marker, `SCARD` of the index. The outer error is the
    /// call's (Redis unreachable, timed out); the record's own fault (a
    /// key of another type, a bad field, a reply over the limits) is the
    /// inner [`FetchError::Invalid`] and fails this record only.
    pub fn read(&self, name: &str) -> RecordRead {
        let key = self.account_key(name);
        let (gen, idx) = (self.generation_key(), self.index_key());
        let cmds: [&[&[u8]]; 3] = [
            &[b"GET", gen.as_bytes()],
            &[b"SCARD", idx.as_bytes()],
            &[b"HGETALL", key.as_bytes()],
        ];
        let replies = match self.transaction(&cmds) {
            // The server answered; the record is too big to be an account.
            // An invalid record for this account, not an unhealthy Redis.
            Err(FetchError::Redis(RedisError::TooLarge(what))) => {
                return Err(invalid("record", format!("reply over the limits: {what}")));
            }
            other => other?,
        };
        let [g, i, h] = <[_; 3]>::try_from(replies).map_err(|_| exec_protocol())?;
        let record = match h {
            Err(m) if m.starts_with("WRONGTYPE") => Err(invalid("key", "not a hash")),
            Err(m) => return Err(FetchError::Redis(RedisError::Server(m))),
            Ok(Value::Array(items)) if items.is_empty() => Ok(Record::Absent),
            Ok(Value::Array(items)) => self.record(name, &items),
            Ok(_) => return Err(exec_protocol()),
        };
        Ok((record, observation(g, i)))
    }

    /// The data set alone (`GET` of the marker, `SCARD` of the index, in
    /// one transaction): the refresher's probe.
    pub fn observe(&self) -> Result<Observation, FetchError> {
        let (gen, idx) = (self.generation_key(), self.index_key());
        let cmds: [&[&[u8]]; 2] = [&[b"GET", gen.as_bytes()], &[b"SCARD", idx.as_bytes()]];
        let replies = self.transaction(&cmds)?;
        let [g, i] = <[_; 2]>::try_from(replies).map_err(|_| exec_protocol())?;
        Ok(observation(g, i))
    }

    fn transaction(&self, cmds: &[&[&[u8]]]) -> Result<Vec<Result<Value, String>>, FetchError> {
        let mut conn = self.pool.checkout().map_err(FetchError::Pool)?;
        conn.transaction(cmds).map_err(FetchError::Redis)
    }

    /// A non-empty hash: revoked, or resolved to an account.
    fn record(&self, name: &str, items: &[Value]) -> Result<Record, FetchError> {
        let f = fields(items)?;
        match f.revoked.as_deref().map(str::trim) {
            None | Some("0" | "false" | "") => {}
            Some("1" | "true") => return Ok(Record::Revoked),
            Some(_) => return Err(invalid("revoked", "must be 0, 1, true or false")),
        }
        resolve(name, &f, &self.table).map(Record::Account)
    }

    /// The names in the index set, at most `max`, read with `SSCAN` in
    /// pages of [`SCAN_PAGE`] so a large set never meets the reply limits;
    /// `complete` is false when the set holds more (the rest are left
    /// out). Names that are not UTF-8 or too long are skipped. An index of
    /// another type is [`FetchError::DataSet`] (`index_unreadable`): the
    /// data is at fault, not Redis.
    pub fn list(&self, max: usize) -> Result<Listing, FetchError> {
        let key = self.index_key();
        let page = SCAN_PAGE.to_string();
        let mut names = std::collections::BTreeSet::new();
        let mut cursor = b"0".to_vec();
        loop {
            let args: [&[u8]; 5] = [b"SSCAN", key.as_bytes(), &cursor, b"COUNT", page.as_bytes()];
            let (next, items) = match self.command(&args) {
                Ok(Value::Array(mut v)) if v.len() == 2 => match (v.pop(), v.pop()) {
                    (Some(Value::Array(items)), Some(Value::Bulk(next))) => (next, items),
                    _ => return Err(scan_protocol()),
                },
                Err(FetchError::Redis(e)) if e.is_wrong_type() => {
                    return Err(FetchError::DataSet(DataSetFault::IndexUnreadable));
                }
                Err(e) => return Err(e),
                Ok(_) => return Err(scan_protocol()),
            };
            for v in items {
                if let Value::Bulk(b) = v {
                    match String::from_utf8(b) {
                        Ok(n) if !n.is_empty() && n.len() <= ACCOUNT_NAME_LEN_MAX => {
                            names.insert(n);
                        }
                        _ => {}
                    }
                }
            }
            let done = next == b"0";
            if done || names.len() > max {
                let complete = done && names.len() <= max;
                let total = match complete {
                    true => names.len() as u64,
                    false => self.index_len()?,
                };
                let names = names.into_iter().take(max).collect();
                return Ok(Listing {
                    names,
                    complete,
                    total,
                });
            }
            cursor = next;
        }
    }
}

impl Default for Listing {
    /// No names, nothing left out.
    fn default() -> Self {
        Listing {
            names: Vec::new(),
            complete: true,
            total: 0,
        }
    }
}

impl AccountStore {
    fn index_len(&self) -> Result<u64, FetchError> {
        match self.command(&[b"SCARD", self.index_key().as_bytes()])? {
            Value::Int(n) => Ok(u64::try_from(n).unwrap_or(0)),
            _ => Err(FetchError::Redis(RedisError::Protocol(
                "SCARD did not answer an integer",
            ))),
        }
    }
}

/// The names read from the index set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// At most the bound asked for, sorted.
    pub names: Vec<String>,
    /// False when the set holds more names than the bound.
    pub complete: bool,
    /// The names the set holds (`SCARD`).
    pub total: u64,
}

/// Names asked for per `SSCAN` page of the index set.
pub const SCAN_PAGE: usize = 512;

fn exec_protocol() -> FetchError {
    FetchError::Redis(RedisError::Protocol(
        "EXEC answered the wrong number of replies",
    ))
}

/// The marker and the index from their replies inside a transaction.
fn observation(gen: Result<Value, String>, index: Result<Value, String>) -> Observation {
    let marker = match gen {
        Ok(Value::Nil) => Marker::Absent,
        Ok(Value::Bulk(b)) => std::str::from_utf8(&b)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .map_or(Marker::Unreadable, Marker::Value),
        _ => Marker::Unreadable,
    };
    let index = match index {
        Ok(Value::Int(n)) => Index::Names(u64::try_from(n).unwrap_or(0)),
        _ => Index::Unreadable,
    };
    Observation { marker, index }
}

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
    revoked: Option<String>,
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
            b"revoked" => f.revoked = Some(v),
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
    crate::auth::hash::check_hash(&token).map_err(|why| invalid("token", why.to_string()))?;
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
            crate::config::check_max_update_hz(hz)
                .map_err(|r| invalid("max_update_hz", r.to_string()))?;
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
