//! Reference data: accounts, tokens and entitlements, from Redis or from the
//! config file.
//!
//! Contract for the gateway: [`RefData::lookup_from`] never blocks on
//! I/O. It reads an in-memory cache (a read lock, two short mutexes, one
//! `try_send` on a doorbell channel) and answers at once:
//! [`Lookup::Found`], [`Lookup::NotFound`] (a positive absence only), or
//! [`Lookup::Unavailable`] with a jittered retry-after while the account is
//! not known yet, its record is unreadable, the data set is lost, or Redis
//! has been down longer than the staleness limit. A background refresher
//! thread owns all Redis I/O: it fills misses taken from the bounded
//! request queue (`queue`-ordered: waiting logons first, a flood of
//! unknown names bounded per client address), refreshes entries early per
//! XFetch, and waits for the breaker's trial while it is open. Cached
//! entries keep serving while Redis fails, or its data set is lost, for up
//! to `max_stale_ms` past their expiry.
//!
//! An empty or stale Redis is a dependency fault, never a revocation: every
//! account read carries the data set's generation marker and index
//! ([`dataset`]), and an absence revokes only when they vouch for the data
//! set; a revocation is positive (the record deleted while the data set is
//! trusted, or `revoked 1`). A record fault (another type, a bad field, a
//! reply over the limits) fails that key only.
//!
//! Bounded: cache entries (`entries_max`), pending requests
//! (`request_queue_max` misses and as many refreshes,
//! `misses_per_source_max` unknown misses per address), pooled connections
//! (`pool_size_max`), every Redis call (connect, I/O and checkout
//! timeouts), each reply ([`resp::REPLY_BYTES_MAX`]), the prefetch
//! (`prefetch_max`). Without `--redis` the accounts of the config file are
//! served from an immutable map ([`RefData::from_accounts`]).
//!
//! The breaker opens on a dead or silent Redis within
//! [`RefDataConfig::open_bound_ms`] (consecutive failures, and a probe when
//! every logon is served from the cache); after Redis is healthy the first
//! uncached logon is served within [`RefDataConfig::recovery_bound_ms`];
//! the backlog after an outage is paced. Live sessions are re-checked by
//! the gateway with [`RefData::recheck`] (revocation). Every random draw is
//! seeded from the OS's entropy in [`RefData::start_redis`].
//!
//! Layout: [`resp`] (RESP2 client) → [`pool`] → [`source`] (key layout,
//! record resolution) → `guarded` (breaker, data-set rule) → `refresher`
//! (thread) → `queue` and `cache` (what lookups read); [`settings`] and the config file's `[refdata]`
//! table ([`RefDataFile`]); [`metrics`] (/metrics). Counters:
//! [`RefDataStats`], plus the breaker's and the pool's own. Key layout,
//! settings and bounds: `docs/refdata.md`.

mod cache;
pub mod dataset;
mod file;
mod guarded;
pub mod metrics;
pub mod pool;
mod queue;
mod refresher;
pub mod resp;
pub mod settings;
pub mod source;
mod stats;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::SeedableRng;

pub use file::RefDataFile;
pub use guarded::{Backend, GuardedStore};
pub use pool::{Pool, PoolConfig, PoolError, PoolStats};
pub use refresher::Refresher;
pub use resp::{RedisError, RespConn, Value};
pub use settings::{CacheConfig, RedisConfig, RefDataConfig};
pub use source::{
    classify, AccountFetch, AccountStore, FetchError, FetchResult, Listing, Record, RecordRead,
};
pub use stats::{RefDataSnapshot, RefDataStats};

use crate::clock::Clock;
use crate::config::Account;
use crate::model::InstrumentTable;
use crate::resilience::BreakerStats;
use dataset::DataSetStats;

/// Reference-data errors (configuration and start-up only; lookups do not
/// fail, they answer [`Lookup::Unavailable`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefDataError {
    /// A setting refused: `key` as written in `[refdata]` (or `redis` for
    /// the URL), and why.
    #[error("reference data setting `{key}`: {reason}")]
    Config {
        /// The setting (`refdata.io_timeout_ms`).
        key: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// The breaker settings refused (the breaker's own key names).
    #[error("reference data breaker: {0}")]
    Breaker(#[from] crate::resilience::ConfigError),
    /// The refresher thread could not be started.
    #[error("cannot start the reference-data refresher: {0}")]
    Spawn(String),
}

/// The answer to a logon's account lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The account and its entitlements.
    Found(Arc<Account>),
    /// No such account (Redis said so, or the config file has none).
    NotFound,
    /// Not known right now; ask again after `retry_after_ms` (jittered).
    Unavailable {
        /// The floor for the client's retry (ms), jittered.
        retry_after_ms: u64,
    },
}

/// What a live session's account is now ([`RefData::recheck`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recheck {
    /// Unchanged (or not known right now: Redis unreachable or its data
    /// set lost past the staleness limit, or the record unreadable, keeps
    /// what the session has).
    Same,
    /// The record changed: the session's entitlements are now these.
    Changed(Arc<Account>),
    /// The account is revoked, positively (deleted while the data set is
    /// trusted, or `revoked 1`): the session must end with
    /// Disconnect(auth).
    Gone,
}

#[derive(Debug)]
enum Source {
    Static(HashMap<String, Arc<Account>>),
    Cached(Arc<cache::Shared>),
}

// The gateway shares one `RefData` between its shard threads.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<RefData>();
};

/// Account reference data for the gateway. Share it as `Arc<RefData>`;
/// dropping the last reference stops and joins the refresher.
#[derive(Debug)]
pub struct RefData {
    source: Source,
    stats: Arc<RefDataStats>,
    breaker_stats: Option<Arc<BreakerStats>>,
    pool_stats: Option<Arc<PoolStats>>,
    data_set_stats: Option<Arc<DataSetStats>>,
    stop: Arc<AtomicBool>,
    thread: Option<crate::runtime::Supervised<()>>,
}

impl RefData {
    /// The config file's accounts, immutable (no `--redis`).
    pub fn from_accounts(accounts: &[Account]) -> RefData {
        let map = accounts
            .iter()
            .map(|a| (a.name.clone(), Arc::new(a.clone())))
            .collect();
        RefData::with_source(Source::Static(map))
    }

    fn with_source(source: Source) -> RefData {
        RefData {
            source,
            stats: Arc::new(RefDataStats::default()),
            breaker_stats: None,
            pool_stats: None,
            data_set_stats: None,
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        }
    }

    /// Accounts from Redis: validates `cfg`, builds the pool and breaker
    /// and starts the refresher thread (`refdata-refresh`). Returns at
    /// once; the cache fills in the background (prefetching the index
    /// set). `table` resolves symbol and tier names.
    ///
    /// Every random draw (TTL jitter, backoff, retry-after, XFetch) is
    /// seeded from the operating system's entropy, so no two processes of
    /// a fleet expire, refresh or retry in step. Errors: a refused setting
    /// (named) or a failed thread spawn.
    pub fn start_redis(
        cfg: &RefDataConfig,
        table: InstrumentTable,
        clock: Arc<dyn Clock>,
        supervisor: &crate::runtime::Supervisor,
    ) -> Result<RefData, RefDataError> {
        let seed = rand::random::<u64>();
        cfg.validate()?;
        let stats = Arc::new(RefDataStats::default());
        let store = GuardedStore::new(&cfg.redis, table, Arc::clone(&stats))?;
        let breaker_stats = store.breaker_stats();
        let pool_stats = store.store().pool().stats();
        let data_set_stats = store.data_set_stats();
        let (mut refdata, refresher) = RefData::with_fetcher(cfg.cache, store, seed, stats)?;
        refdata.breaker_stats = Some(breaker_stats);
        refdata.pool_stats = Some(pool_stats);
        refdata.data_set_stats = Some(data_set_stats);
        let stop = Arc::clone(&refdata.stop);
        let permanent = crate::runtime::Policy::Permanent;
        let handle = supervisor
            .spawn("refdata-refresh", permanent, move || {
                refresher.run(clock, stop)
            })
            .map_err(|e| RefDataError::Spawn(e.to_string()))?;
        refdata.thread = Some(handle);
        Ok(refdata)
    }

    /// A cache over any source, with the refresher handed back to the
    /// caller to drive (`step` with a manual clock in tests, or `run` on a
    /// thread of the caller's choosing).
    pub fn manual<S: AccountFetch>(
        cfg: CacheConfig,
        source: S,
        seed: u64,
    ) -> Result<(RefData, Refresher<S>), RefDataError> {
        RefData::with_fetcher(cfg, source, seed, Arc::new(RefDataStats::default()))
    }

    fn with_fetcher<S: AccountFetch>(
        cfg: CacheConfig,
        source: S,
        seed: u64,
        stats: Arc<RefDataStats>,
    ) -> Result<(RefData, Refresher<S>), RefDataError> {
        cfg.validate()?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let readers_rng = SmallRng::seed_from_u64(seed);
        let shared = Arc::new(cache::Shared::new(cfg, tx, readers_rng, Arc::clone(&stats)));
        let refresher_rng = SmallRng::seed_from_u64(seed ^ 0x5eed_0fda_7a00);
        let refresher = Refresher::new(Arc::clone(&shared), rx, source, refresher_rng);
        let mut refdata = RefData::with_source(Source::Cached(shared));
        refdata.stats = stats;
        Ok((refdata, refresher))
    }

    /// Non-blocking lookup (see the module docs), with no source address:
    /// only the queue's global bounds apply to its miss.
    pub fn lookup(&self, account: &str, now_ns: u64) -> Lookup {
        self.lookup_inner(account, None, now_ns)
    }

    /// Non-blocking lookup for the gateway's logon from the client at
    /// `peer`: a miss for an unknown name counts against that address's
    /// `misses_per_source_max` (IPv6: its /64). The caller compares the
    /// token and checks entitlements on the returned account.
    pub fn lookup_from(&self, account: &str, peer: IpAddr, now_ns: u64) -> Lookup {
        self.lookup_inner(account, Some(peer), now_ns)
    }

    fn lookup_inner(&self, account: &str, peer: Option<IpAddr>, now_ns: u64) -> Lookup {
        match &self.source {
            Source::Static(map) => match map.get(account) {
                Some(a) => {
                    self.stats.lookups_found.fetch_add(1, Relaxed);
                    Lookup::Found(Arc::clone(a))
                }
                None => {
                    self.stats.lookups_not_found.fetch_add(1, Relaxed);
                    Lookup::NotFound
                }
            },
            Source::Cached(shared) => shared.lookup(account, cache::source_of(peer), now_ns),
        }
    }

    /// Re-checks a logged-on session's account against the cache, for the
    /// gateway's periodic revalidation; never blocks on I/O (as
    /// [`RefData::lookup`]) and counts no lookup. It asks for the entry's
    /// refresh when due, so a change in Redis reaches the cache within the
    /// entry's jittered TTL (`docs/refdata.md`, "Revocation"). The config
    /// file's accounts never change: always [`Recheck::Same`].
    pub fn recheck(&self, held: &Arc<Account>, now_ns: u64) -> Recheck {
        let Source::Cached(shared) = &self.source else {
            return Recheck::Same;
        };
        match shared.current(&held.name, now_ns) {
            None => Recheck::Same,
            Some(None) => Recheck::Gone,
            Some(Some(a)) if Arc::ptr_eq(&a, held) => Recheck::Same,
            Some(Some(a)) => Recheck::Changed(a),
        }
    }

    /// Whether accounts come from Redis (true) or the config file.
    pub fn is_redis(&self) -> bool {
        matches!(self.source, Source::Cached(_))
    }

    /// The cache's and the Redis calls' counters (shared with /metrics
    /// and with the gateway, which counts revocations in them).
    pub fn stats(&self) -> Arc<RefDataStats> {
        Arc::clone(&self.stats)
    }

    /// The Redis breaker's counters and state (`None` without Redis).
    pub fn breaker_stats(&self) -> Option<Arc<BreakerStats>> {
        self.breaker_stats.clone()
    }

    /// The Redis data set's gauges and counters (`None` without Redis).
    pub fn data_set_stats(&self) -> Option<Arc<DataSetStats>> {
        self.data_set_stats.clone()
    }

    /// The Redis pool's counters (`None` without Redis).
    pub fn pool_stats(&self) -> Option<Arc<PoolStats>> {
        self.pool_stats.clone()
    }

    /// Cached entries (0 for the config-file source).
    pub fn cached_entries(&self) -> usize {
        match &self.source {
            Source::Static(_) => 0,
            Source::Cached(s) => s.len(),
        }
    }

    /// Requests pending for the refresher: (misses, refreshes); (0, 0)
    /// for the config-file source.
    pub fn pending(&self) -> (usize, usize) {
        match &self.source {
            Source::Static(_) => (0, 0),
            Source::Cached(s) => {
                let q = s.queue();
                (q.misses(), q.refreshes())
            }
        }
    }

    /// Expiry and stored fetch time Δ of a cached entry, in ns.
    pub fn entry_times(&self, account: &str) -> Option<(u64, u64)> {
        match &self.source {
            Source::Static(_) => None,
            Source::Cached(s) => s.entry_times(account),
        }
    }

    /// Asks the refresher to stop and joins it (bounded by `idle_tick_ms`
    /// plus one Redis call's timeouts). Lookups keep answering from the
    /// cache afterwards.
    pub fn shutdown(&mut self) {
        if let Some(h) = &self.thread {
            h.request_stop();
        }
        self.stop.store(true, Relaxed);
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

impl Drop for RefData {
    fn drop(&mut self) {
        self.shutdown();
    }
}
