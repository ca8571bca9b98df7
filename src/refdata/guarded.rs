//! [`AccountStore`] behind the Redis circuit breaker: what the refresher
//! calls in production.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use super::settings::RedisConfig;
use super::source::{classify, AccountFetch, AccountStore, FetchError, FetchResult};
use super::stats::RefDataStats;
use super::RefDataError;
use crate::model::InstrumentTable;
use crate::resilience::{BreakerState, BreakerStats, CircuitBreaker, Outcome};

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
