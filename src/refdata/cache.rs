//! The in-memory account cache that event loops read.
//!
//! Contract: [`Shared::lookup`] reads only memory — a read lock on the map,
//! a short mutex on the request set and one `try_send` on a bounded
//! channel. It never waits for Redis, never blocks on a full queue (the
//! request is dropped and counted) and allocates only the key of a queued
//! request. The map holds at most `entries_max` entries (eviction counted);
//! at most `request_queue_max` requests are pending, one per key.
//!
//! Freshness: each entry carries its expiry (TTL jittered ±`ttl_jitter_pct`
//! when written, so entries filled together do not expire together) and the
//! measured fetch time Δ. A reader of a fresh entry asks for an early
//! refresh when XFetch says so (`now − Δ·β·ln(u) ≥ expiry`); an expired
//! entry keeps serving for `max_stale_ms` (stale-while-error) while a
//! refresh is requested; beyond that, or for an unknown account, the
//! answer is `Unavailable` with a jittered retry-after.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use crossbeam_channel::{Sender, TrySendError};
use rand::rngs::SmallRng;
use rand::Rng;

use super::settings::CacheConfig;
use super::source::ACCOUNT_NAME_LEN_MAX;
use super::stats::RefDataStats;
use super::Lookup;
use crate::clock::NS_PER_MS;
use crate::config::Account;
use crate::resilience::xfetch::{jittered_ttl_ns, CacheEntry};

/// Why a key was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestKind {
    /// A lookup found no usable entry.
    Miss,
    /// XFetch chose to refresh a fresh entry before it expires.
    Early,
    /// A lookup served an expired entry (stale-while-error).
    Expired,
    /// Listed in the index set at start.
    Prefetch,
}

/// A request to the refresher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    /// The account name.
    pub(crate) name: String,
    /// Why it was asked for (which counter its fetch goes to).
    pub(crate) kind: RequestKind,
}

/// `None` caches "no such account" (a negative entry).
pub(crate) type Entry = CacheEntry<Option<Arc<Account>>>;

/// State shared by the readers and the refresher.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) cfg: CacheConfig,
    entries: RwLock<HashMap<String, Entry>>,
    pending: Mutex<HashSet<String>>,
    tx: Sender<Request>,
    rng: Mutex<SmallRng>,
    /// Until when the refresher will not call Redis (backoff or open
    /// breaker); 0 when it is calling. Feeds the retry-after of misses.
    pub(crate) unavailable_until_ns: AtomicU64,
    pub(crate) stats: Arc<RefDataStats>,
}

impl Shared {
    pub(crate) fn new(
        cfg: CacheConfig,
        tx: Sender<Request>,
        rng: SmallRng,
        stats: Arc<RefDataStats>,
    ) -> Shared {
        Shared {
            entries: RwLock::new(HashMap::with_capacity(cfg.entries_max.min(1 << 16))),
            pending: Mutex::new(HashSet::with_capacity(cfg.request_queue_max.min(1 << 16))),
            cfg,
            tx,
            rng: Mutex::new(rng),
            unavailable_until_ns: AtomicU64::new(0),
            stats,
        }
    }

    fn with_rng<T>(&self, f: impl FnOnce(&mut SmallRng) -> T) -> T {
        f(&mut self.rng.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn lookup(&self, name: &str, now_ns: u64) -> Lookup {
        if name.is_empty() || name.len() > ACCOUNT_NAME_LEN_MAX {
            self.stats.lookups_not_found.fetch_add(1, Relaxed);
            return Lookup::NotFound;
        }
        let entry = {
            let map = self.entries.read().unwrap_or_else(|e| e.into_inner());
            map.get(name).cloned()
        };
        let max_stale_ns = self.cfg.max_stale_ms.saturating_mul(NS_PER_MS);
        match entry {
            Some(e) if !e.is_expired(now_ns) => {
                self.stats.cache_hits.fetch_add(1, Relaxed);
                let beta = self.cfg.xfetch_beta;
                if self.with_rng(|rng| e.should_refresh(now_ns, beta, rng)) {
                    self.request(name, RequestKind::Early);
                }
                self.answer(e.value)
            }
            Some(e) if now_ns - e.expiry_ns <= max_stale_ns => {
                self.stats.stale_served.fetch_add(1, Relaxed);
                self.request(name, RequestKind::Expired);
                self.answer(e.value)
            }
            _ => {
                self.stats.cache_misses.fetch_add(1, Relaxed);
                self.request(name, RequestKind::Miss);
                self.unavailable(now_ns)
            }
        }
    }

    /// The current cached value of a live session's account, for the
    /// gateway's re-check: `Some(Some(a))` cached, `Some(None)` cached as
    /// absent, `None` not known (no entry, or past `max_stale_ms`). Asks
    /// for a refresh as a lookup would (XFetch early, or expired), so a
    /// live session keeps its account refreshed, but counts no lookup.
    pub(crate) fn current(&self, name: &str, now_ns: u64) -> Option<Option<Arc<Account>>> {
        let entry = {
            let map = self.entries.read().unwrap_or_else(|e| e.into_inner());
            map.get(name).cloned()
        }?;
        let max_stale_ns = self.cfg.max_stale_ms.saturating_mul(NS_PER_MS);
        if !entry.is_expired(now_ns) {
            let beta = self.cfg.xfetch_beta;
            if self.with_rng(|rng| entry.should_refresh(now_ns, beta, rng)) {
                self.request(name, RequestKind::Early);
            }
            Some(entry.value)
        } else if now_ns - entry.expiry_ns <= max_stale_ns {
            self.request(name, RequestKind::Expired);
            Some(entry.value)
        } else {
            self.request(name, RequestKind::Miss);
            None
        }
    }

    fn answer(&self, value: Option<Arc<Account>>) -> Lookup {
        match value {
            Some(a) => {
                self.stats.lookups_found.fetch_add(1, Relaxed);
                Lookup::Found(a)
            }
            None => {
                self.stats.lookups_not_found.fetch_add(1, Relaxed);
                Lookup::NotFound
            }
        }
    }

    /// Retry-after: the refresher's remaining backoff or the miss base,
    /// whichever is later, spread uniformly over `[v, 2v]` so the clients
    /// told together do not come back together.
    fn unavailable(&self, now_ns: u64) -> Lookup {
        self.stats.lookups_unavailable.fetch_add(1, Relaxed);
        let until = self.unavailable_until_ns.load(Relaxed);
        let backoff_ms = until.saturating_sub(now_ns).div_ceil(NS_PER_MS);
        let base_ms = backoff_ms.max(self.cfg.miss_retry_after_ms);
        let retry_after_ms = base_ms + self.with_rng(|rng| rng.gen_range(0..=base_ms));
        Lookup::Unavailable { retry_after_ms }
    }

    /// Queues a fetch of `name` unless one is pending; never blocks.
    pub(crate) fn request(&self, name: &str, kind: RequestKind) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.contains(name) {
            self.stats.requests_coalesced.fetch_add(1, Relaxed);
            return;
        }
        if pending.len() >= self.cfg.request_queue_max {
            self.stats.requests_dropped.fetch_add(1, Relaxed);
            return;
        }
        let req = Request {
            name: name.to_string(),
            kind,
        };
        match self.tx.try_send(req) {
            Ok(()) => {
                pending.insert(name.to_string());
                let counter = match kind {
                    RequestKind::Miss | RequestKind::Prefetch => &self.stats.fill_requests,
                    RequestKind::Early => &self.stats.refresh_requests_early,
                    RequestKind::Expired => &self.stats.refresh_requests_expired,
                };
                counter.fetch_add(1, Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.stats.requests_dropped.fetch_add(1, Relaxed);
            }
        }
    }

    /// Whether `name` has an entry (fresh or not).
    pub(crate) fn contains(&self, name: &str) -> bool {
        let map = self.entries.read().unwrap_or_else(|e| e.into_inner());
        map.contains_key(name)
    }

    /// Writes a fetched value: TTL jittered, Δ = the fetch's duration.
    /// Clears the pending mark so the key can be requested again.
    pub(crate) fn install(
        &self,
        name: &str,
        value: Option<Arc<Account>>,
        now_ns: u64,
        delta_ns: u64,
        rng: &mut SmallRng,
    ) {
        let ttl_ms = if value.is_some() {
            self.cfg.ttl_ms
        } else {
            self.cfg.negative_ttl_ms
        };
        let ttl_ns = jittered_ttl_ns(ttl_ms * NS_PER_MS, self.cfg.ttl_jitter_pct, rng);
        let entry = CacheEntry {
            value,
            expiry_ns: now_ns.saturating_add(ttl_ns),
            delta_ns,
        };
        {
            let mut map = self.entries.write().unwrap_or_else(|e| e.into_inner());
            if !map.contains_key(name) && map.len() >= self.cfg.entries_max {
                evict_one(&mut map);
                self.stats.evictions.fetch_add(1, Relaxed);
            }
            map.insert(name.to_string(), entry);
        }
        self.stats.entries_written.fetch_add(1, Relaxed);
        self.done(name);
    }

    /// Forgets the pending mark of `name`.
    pub(crate) fn done(&self, name: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.remove(name);
    }

    /// The expiry and Δ of an entry, for tests and diagnostics.
    pub(crate) fn entry_times(&self, name: &str) -> Option<(u64, u64)> {
        let map = self.entries.read().unwrap_or_else(|e| e.into_inner());
        map.get(name).map(|e| (e.expiry_ns, e.delta_ns))
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Removes a negative entry if there is one, else the entry that expires
/// first. O(n) over a bounded map, on the refresher thread only.
fn evict_one(map: &mut HashMap<String, Entry>) {
    let victim = map
        .iter()
        .min_by_key(|(_, e)| (e.value.is_some(), e.expiry_ns))
        .map(|(k, _)| k.clone());
    if let Some(k) = victim {
        map.remove(&k);
    }
}
