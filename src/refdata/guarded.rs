//! [`AccountStore`] behind the Redis circuit breaker and the data-set
//! check: what the refresher calls in production.
//!
//! Contract: one owner (the refresher thread); every Redis call goes
//! through the breaker; every account read carries its data-set
//! observation ([`super::dataset`]) and an absence is returned as `Ok(None)`
//! only when that observation trusts the data set, else as
//! [`FetchError::DataSet`]. Breaker transitions, timed ones included
//! ([`AccountFetch::tick`]), and data-set changes are logged, at most
//! [`TRANSITION_LOGS_MAX`] lines per [`TRANSITION_LOG_WINDOW_NS`] (the next
//! line names how many were held back).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use super::dataset::{Change, DataSet, DataSetFault, DataSetStats, Observation};
use super::settings::RedisConfig;
use super::source::{
    classify, AccountFetch, AccountStore, FetchError, FetchResult, Listing, Record, RecordRead,
};
use super::stats::RefDataStats;
use super::RefDataError;
use crate::clock::NS_PER_MS;
use crate::model::InstrumentTable;
use crate::resilience::{BreakerState, BreakerStats, CircuitBreaker, Outcome, Transition};

/// Transition lines logged per window at most.
pub(crate) const TRANSITION_LOGS_MAX: u32 = 10;
/// The transition log's window.
pub(crate) const TRANSITION_LOG_WINDOW_NS: u64 = 60_000_000_000;

/// What [`GuardedStore`] calls: Redis ([`AccountStore`]) in production, a
/// scripted store in tests that drive the breaker, the data-set rule and
/// the refresher by injected time.
pub trait Backend: Send {
    /// An account record and the data set, read together
    /// ([`AccountStore::read`]).
    fn read(&self, name: &str) -> RecordRead;
    /// The index set's names ([`AccountStore::list`]).
    fn list(&self, max: usize) -> Result<Listing, FetchError>;
    /// The data set alone ([`AccountStore::observe`]).
    fn observe(&self) -> Result<Observation, FetchError>;
}

impl Backend for AccountStore {
    fn read(&self, name: &str) -> RecordRead {
        AccountStore::read(self, name)
    }
    fn list(&self, max: usize) -> Result<Listing, FetchError> {
        AccountStore::list(self, max)
    }
    fn observe(&self) -> Result<Observation, FetchError> {
        AccountStore::observe(self)
    }
}

/// [`AccountStore`] (or another [`Backend`]) behind the Redis circuit
/// breaker: what the refresher uses in production. Single owner (the
/// refresher thread).
///
/// Besides the breaker's rate rule, `breaker_consecutive_failures` failed
/// calls in a row (no success between) open it at once
/// ([`CircuitBreaker::trip`]): the refresher backs off after each failure,
/// so under a dead or blackholed Redis it makes too few calls for the rate
/// rule's `minimum_calls` to fill its window (see `docs/refdata.md`).
#[derive(Debug)]
pub struct GuardedStore<B = AccountStore> {
    store: B,
    breaker: CircuitBreaker,
    stats: Arc<RefDataStats>,
    data_set: DataSet,
    consecutive_max: u32,
    consecutive: u32,
    log: LogLimit,
}

impl GuardedStore {
    /// Validates `cfg` and builds the pool (no connection yet) and the
    /// breaker (its open-wait jitter seeded from the OS's entropy).
    /// Errors: the setting that is refused.
    pub fn new(
        cfg: &RedisConfig,
        table: InstrumentTable,
        stats: Arc<RefDataStats>,
    ) -> Result<GuardedStore, RefDataError> {
        let seed = rand::random();
        GuardedStore::with_backend(cfg, AccountStore::new(cfg, table), stats, seed)
    }
}

impl<B: Backend> GuardedStore<B> {
    /// Over any backend, the breaker's jitter seeded with `seed`; `cfg`
    /// gives the breaker and the consecutive-failures rule.
    pub fn with_backend(
        cfg: &RedisConfig,
        store: B,
        stats: Arc<RefDataStats>,
        seed: u64,
    ) -> Result<GuardedStore<B>, RefDataError> {
        cfg.validate()?;
        Ok(GuardedStore {
            store,
            breaker: CircuitBreaker::with_seed(cfg.breaker_config(), seed)?,
            stats,
            data_set: DataSet::new(Arc::default()),
            consecutive_max: cfg.breaker_consecutive_failures,
            consecutive: 0,
            log: LogLimit::default(),
        })
    }

    /// The plain store (pool and key layout).
    pub fn store(&self) -> &B {
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

    /// The data set's gauges and counters, for /metrics.
    pub fn data_set_stats(&self) -> Arc<DataSetStats> {
        self.data_set.stats()
    }

    /// One breaker-guarded call; `op` runs only when permitted.
    fn guarded<T>(
        &mut self,
        now_ns: u64,
        op: impl FnOnce(&B) -> Result<T, FetchError>,
        outcome: impl FnOnce(&Result<T, FetchError>, u64) -> Outcome,
    ) -> (Result<T, FetchError>, u64, Option<Outcome>) {
        let permit = match self.breaker.try_acquire(now_ns) {
            Ok(p) => p,
            Err(refused) => {
                self.stats.redis_not_permitted.fetch_add(1, Relaxed);
                self.log_transitions(now_ns);
                return (Err(FetchError::NotPermitted(refused)), 0, None);
            }
        };
        let started = Instant::now();
        let result = op(&self.store);
        let duration_ns = started.elapsed().as_nanos() as u64;
        let o = outcome(&result, duration_ns);
        // Recorded at the injected `now_ns` (tests drive the breaker's
        // windows with a manual clock while the I/O takes real time).
        self.breaker.record(permit, o, now_ns);
        self.count_consecutive(o, now_ns);
        self.log_transitions(now_ns);
        (result, duration_ns, Some(o))
    }

    /// A guarded call counted by what came back.
    fn counted<T>(
        &mut self,
        now_ns: u64,
        op: impl FnOnce(&B) -> Result<T, FetchError>,
    ) -> Result<T, FetchError> {
        let outcome = |r: &Result<T, FetchError>, d| match r {
            Ok(_) => Outcome::Success { duration_ns: d },
            Err(e) => classify(&Err(e.clone()), d),
        };
        let (r, _, o) = self.guarded(now_ns, op, outcome);
        if let Some(o) = o {
            self.stats.count_redis(o, &r);
        }
        r
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

    fn log_transitions(&mut self, now_ns: u64) {
        while let Some(t) = self.breaker.pop_transition() {
            if let Some(held) = self.log.admit(now_ns) {
                log_breaker(&t, held);
            }
        }
    }

    fn log_data_set(&mut self, change: Change, now_ns: u64) {
        if let Some(held) = self.log.admit(now_ns) {
            log_data_set(&change, held);
        }
    }

    /// Judges the read's data set; the record's answer as the refresher
    /// takes it (see the module docs).
    fn judged(&mut self, read: RecordRead, now_ns: u64) -> FetchResult {
        let (record, obs) = read?;
        let (verdict, change) = self.data_set.observe(obs);
        if let Some(c) = change {
            self.log_data_set(c, now_ns);
        }
        match record? {
            // A marker that went backwards is a stale replica: its records
            // may be older than the ones deleted since; none is used.
            Record::Account(_) if verdict.fault == Some(DataSetFault::GenerationBehind) => {
                Err(FetchError::DataSet(DataSetFault::GenerationBehind))
            }
            Record::Account(a) => Ok(Some(a)),
            Record::Revoked => Ok(None),
            Record::Absent if verdict.trusted => Ok(None),
            Record::Absent => Err(FetchError::DataSet(
                verdict.fault.expect("an untrusted verdict names its fault"),
            )),
        }
    }
}

/// A fetch's breaker outcome: the data set's faults are not Redis's.
fn fetch_outcome(r: &RecordRead, d: u64) -> Outcome {
    match r {
        Ok((Ok(Record::Account(_)), _)) => Outcome::Success { duration_ns: d },
        // Redis answered: an absent or revoked record, or a record of its
        // own fault, says nothing about Redis's health.
        Ok(_) => Outcome::Ignored,
        Err(e) => classify(&Err(e.clone()), d),
    }
}

fn log_breaker(t: &Transition, held: u64) {
    let (from, to, reason) = (t.from.name(), t.to.name(), t.reason.name());
    let open_wait_ms = t.open_wait_ns / NS_PER_MS;
    if t.to == BreakerState::Open {
        tracing::warn!(
            from,
            to,
            reason,
            open_wait_ms,
            not_logged_since_last = held,
            "reference data: Redis breaker opened; cached accounts keep serving"
        );
    } else {
        tracing::info!(
            from,
            to,
            reason,
            not_logged_since_last = held,
            "reference data: Redis breaker changed state"
        );
    }
}

fn log_data_set(c: &Change, held: u64) {
    let fault = c.now.fault.map_or("none", |f| f.name());
    let high_water = c.high_water.map_or(-1, |g| g as i64);
    if c.now.trusted {
        tracing::info!(
            fault,
            high_water,
            not_logged_since_last = held,
            "reference data: the Redis data set is trusted; deletions revoke again"
        );
    } else {
        tracing::warn!(
            fault,
            high_water,
            not_logged_since_last = held,
            "reference data: the Redis data set is lost or stale; cached accounts keep serving, \
             absent records are not revocations"
        );
    }
}

/// At most [`TRANSITION_LOGS_MAX`] lines per window.
#[derive(Debug, Default)]
struct LogLimit {
    window_start_ns: Option<u64>,
    in_window: u32,
    held: u64,
}

impl LogLimit {
    /// `Some(held back since the last line)` when a line may be logged.
    fn admit(&mut self, now_ns: u64) -> Option<u64> {
        let fresh = self
            .window_start_ns
            .is_none_or(|t| now_ns.saturating_sub(t) >= TRANSITION_LOG_WINDOW_NS);
        if fresh {
            self.window_start_ns = Some(now_ns);
            self.in_window = 0;
        }
        if self.in_window >= TRANSITION_LOGS_MAX {
            self.held += 1;
            return None;
        }
        self.in_window += 1;
        Some(std::mem::take(&mut self.held))
    }
}

impl<B: Backend> AccountFetch for GuardedStore<B> {
    fn fetch(&mut self, name: &str, now_ns: u64) -> (FetchResult, u64) {
        let (read, d, o) = self.guarded(now_ns, |s| s.read(name), fetch_outcome);
        let r = self.judged(read, now_ns);
        if let Some(o) = o {
            self.stats.count_redis(o, &r);
        }
        (r, d)
    }

    fn list(&mut self, max: usize, now_ns: u64) -> Result<Listing, FetchError> {
        self.counted(now_ns, |s| s.list(max))
    }

    fn probe(&mut self, now_ns: u64) -> Result<(), FetchError> {
        let obs = self.counted(now_ns, |s| s.observe())?;
        let (_, change) = self.data_set.observe(obs);
        if let Some(c) = change {
            self.log_data_set(c, now_ns);
        }
        Ok(())
    }

    fn wants_probe(&mut self, now_ns: u64) -> bool {
        self.breaker.state(now_ns) == BreakerState::HalfOpen
    }

    fn data_set_trusted(&self) -> bool {
        self.data_set.trusted()
    }

    fn open_wait_left_ns(&mut self, now_ns: u64) -> Option<u64> {
        let left = self.breaker.open_wait_left_ns(now_ns);
        self.log_transitions(now_ns);
        left
    }

    fn tick(&mut self, now_ns: u64) {
        self.breaker.state(now_ns);
        self.log_transitions(now_ns);
    }
}
