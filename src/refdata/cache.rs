//! The in-memory account cache that event loops read.
//!
//! Contract: [`Shared::lookup`] reads only memory — a read lock on the map,
//! a short mutex on the request queue and one `try_send` on a doorbell
//! channel of one slot. It never waits for Redis, never blocks on a full
//! queue (the request is dropped or displaces an older one, counted) and
//! allocates only the key of a queued request. The map holds at most
//! `entries_max` entries (eviction counted); the queue is bounded
//! ([`super::queue`]).
//!
//! What an entry holds ([`Cached`]): an account; a positive absence (Redis
//! said "no such record", or `revoked`, while its data set was trusted);
//! a record fault (the record is unreadable: another type, a bad field);
//! or an undecided absence (absent while the data set was not trusted).
//! Only an account logs on, only a positive absence is `NotFound` (and
//! revokes a live session); the other two answer `Unavailable` with a
//! retry-after, as a Redis outage does, so a fault of our own dependency
//! never turns into an authentication failure.
//!
//! Freshness: each entry carries its expiry (TTL jittered ±`ttl_jitter_pct`
//! when written, so entries filled together do not expire together) and the
//! measured fetch time Δ. A reader of a fresh entry asks for an early
//! refresh when XFetch says so (`now − Δ·β·ln(u) ≥ expiry`); an expired
//! account keeps serving for `max_stale_ms` (stale-while-error) while a
//! refresh is requested; beyond that, or for an unknown account, the
//! answer is `Unavailable` with a jittered retry-after.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crossbeam_channel::Sender;
use rand::rngs::SmallRng;
use rand::Rng;

use super::queue::{Class, Offered, Pending, SourceKey, Taken};
use super::settings::{CacheConfig, RETRY_SPREAD_MAX_MS};
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

/// What a cache entry says about its name (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cached {
    /// A valid record.
    Account(Arc<Account>),
    /// No such account, positively (`NotFound`).
    Absent,
    /// The record is unreadable (`Unavailable` until it expires).
    Faulty,
    /// Absent while the data set was not trusted (`Unavailable`).
    Undecided,
}

/// A cache entry: its value and until when no refresh of it is asked for
/// (a record fault, or an undecided refresh, holds requests back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Value {
    pub(crate) cached: Cached,
    pub(crate) hold_until_ns: u64,
}

pub(crate) type Entry = CacheEntry<Value>;

/// State shared by the readers and the refresher.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) cfg: CacheConfig,
    entries: RwLock<HashMap<String, Entry>>,
    pending: Mutex<Pending>,
    doorbell: Sender<()>,
    rng: Mutex<SmallRng>,
    /// Until when the refresher will not call Redis (backoff, open
    /// breaker, next data-set check); 0 when it is calling. Feeds the
    /// retry-after of misses.
    pub(crate) unavailable_until_ns: AtomicU64,
    pub(crate) stats: Arc<RefDataStats>,
}

impl Shared {
    pub(crate) fn new(
        cfg: CacheConfig,
        doorbell: Sender<()>,
        rng: SmallRng,
        stats: Arc<RefDataStats>,
    ) -> Shared {
        let pending = Pending::new(
            cfg.request_queue_max,
            cfg.request_queue_max,
            cfg.misses_per_source_max,
        );
        Shared {
            entries: RwLock::new(HashMap::with_capacity(cfg.entries_max.min(1 << 16))),
            pending: Mutex::new(pending),
            cfg,
            doorbell,
            rng: Mutex::new(rng),
            unavailable_until_ns: AtomicU64::new(0),
            stats,
        }
    }

    fn with_rng<T>(&self, f: impl FnOnce(&mut SmallRng) -> T) -> T {
        f(&mut self.rng.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn queue(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn entry(&self, name: &str) -> Option<Entry> {
        let map = self.entries.read().unwrap_or_else(|e| e.into_inner());
        map.get(name).cloned()
    }

    pub(crate) fn lookup(&self, name: &str, source: SourceKey, now_ns: u64) -> Lookup {
        if name.is_empty() || name.len() > ACCOUNT_NAME_LEN_MAX {
            self.stats.lookups_not_found.fetch_add(1, Relaxed);
            return Lookup::NotFound;
        }
        let Some(e) = self.entry(name) else {
            return self.miss(name, Class::UnknownMiss, source, 0, now_ns);
        };
        let held = now_ns < e.value.hold_until_ns;
        let max_stale_ns = self.cfg.max_stale_ms.saturating_mul(NS_PER_MS);
        let fresh = !e.is_expired(now_ns);
        match &e.value.cached {
            Cached::Account(a) if fresh => {
                self.stats.cache_hits.fetch_add(1, Relaxed);
                let beta = self.cfg.xfetch_beta;
                if !held && self.with_rng(|rng| e.should_refresh(now_ns, beta, rng)) {
                    self.request(name, RequestKind::Early, Class::Refresh, source);
                }
                self.found(a)
            }
            Cached::Account(a) if now_ns - e.expiry_ns <= max_stale_ns => {
                self.stats.stale_served.fetch_add(1, Relaxed);
                if !held {
                    self.request(name, RequestKind::Expired, Class::Refresh, source);
                }
                self.found(a)
            }
            Cached::Account(_) if held => self.unavailable(now_ns, e.value.hold_until_ns),
            Cached::Account(_) => self.miss(name, Class::KnownMiss, source, 0, now_ns),
            Cached::Absent if !e.is_expired(now_ns) => {
                self.stats.cache_hits.fetch_add(1, Relaxed);
                self.stats.lookups_not_found.fetch_add(1, Relaxed);
                Lookup::NotFound
            }
            Cached::Faulty | Cached::Undecided if !e.is_expired(now_ns) => {
                self.stats.cache_hits.fetch_add(1, Relaxed);
                self.unavailable(now_ns, e.expiry_ns.max(e.value.hold_until_ns))
            }
            _ => self.miss(name, Class::UnknownMiss, source, 0, now_ns),
        }
    }

    fn miss(&self, name: &str, class: Class, source: SourceKey, floor: u64, now_ns: u64) -> Lookup {
        self.stats.cache_misses.fetch_add(1, Relaxed);
        self.request(name, RequestKind::Miss, class, source);
        self.unavailable(now_ns, floor)
    }

    /// The current cached value of a live session's account, for the
    /// gateway's re-check: `Some(Some(a))` an account, `Some(None)` a
    /// positive absence, `None` nothing to act on (no entry, a record
    /// fault, an undecided absence, or past `max_stale_ms`). Asks for a
    /// refresh as a lookup would (XFetch early, or expired), so a live
    /// session keeps its account refreshed, but counts no lookup.
    pub(crate) fn current(&self, name: &str, now_ns: u64) -> Option<Option<Arc<Account>>> {
        let e = self.entry(name)?;
        let held = now_ns < e.value.hold_until_ns;
        let max_stale_ns = self.cfg.max_stale_ms.saturating_mul(NS_PER_MS);
        let any = SourceKey::ANY;
        let fresh = !e.is_expired(now_ns);
        match &e.value.cached {
            Cached::Account(a) if fresh => {
                let beta = self.cfg.xfetch_beta;
                if !held && self.with_rng(|rng| e.should_refresh(now_ns, beta, rng)) {
                    self.request(name, RequestKind::Early, Class::Refresh, any);
                }
                Some(Some(Arc::clone(a)))
            }
            Cached::Account(a) if now_ns - e.expiry_ns <= max_stale_ns => {
                if !held {
                    self.request(name, RequestKind::Expired, Class::Refresh, any);
                }
                Some(Some(Arc::clone(a)))
            }
            Cached::Account(_) => {
                if !held {
                    self.request(name, RequestKind::Miss, Class::KnownMiss, any);
                }
                None
            }
            Cached::Absent if now_ns.saturating_sub(e.expiry_ns) <= max_stale_ns => Some(None),
            _ => None,
        }
    }

    fn found(&self, a: &Arc<Account>) -> Lookup {
        self.stats.lookups_found.fetch_add(1, Relaxed);
        Lookup::Found(Arc::clone(a))
    }

    /// Retry-after: the latest of the miss base, the refresher's next
    /// attempt and `floor_ns`, spread uniformly over
    /// `[v, v + min(v, RETRY_SPREAD_MAX_MS)]` so clients told together do
    /// not come back together, nor much later than needed.
    fn unavailable(&self, now_ns: u64, floor_ns: u64) -> Lookup {
        self.stats.lookups_unavailable.fetch_add(1, Relaxed);
        let until = self.unavailable_until_ns.load(Relaxed).max(floor_ns);
        let wait_ms = until.saturating_sub(now_ns).div_ceil(NS_PER_MS);
        let base_ms = wait_ms.max(self.cfg.miss_retry_after_ms);
        let spread = base_ms.min(RETRY_SPREAD_MAX_MS);
        let retry_after_ms = base_ms + self.with_rng(|rng| rng.gen_range(0..=spread));
        Lookup::Unavailable { retry_after_ms }
    }

    /// Queues a fetch of `name` (see [`super::queue`]); never blocks.
    pub(crate) fn request(&self, name: &str, kind: RequestKind, class: Class, source: SourceKey) {
        let offered = self.queue().offer(name, kind, class, source);
        let s = &self.stats;
        match offered {
            Offered::Coalesced => {
                s.requests_coalesced.fetch_add(1, Relaxed);
                return;
            }
            Offered::Dropped => {
                s.requests_dropped.fetch_add(1, Relaxed);
                return;
            }
            Offered::Displaced => s.requests_displaced.fetch_add(1, Relaxed),
            Offered::SourceLimited => s.requests_source_limited.fetch_add(1, Relaxed),
            Offered::Queued => 0,
        };
        let counter = match kind {
            RequestKind::Miss | RequestKind::Prefetch => &s.fill_requests,
            RequestKind::Early => &s.refresh_requests_early,
            RequestKind::Expired => &s.refresh_requests_expired,
        };
        counter.fetch_add(1, Relaxed);
        let _ = self.doorbell.try_send(());
    }

    /// Whether `name` has an account entry (any age).
    pub(crate) fn has_account(&self, name: &str) -> bool {
        let map = self.entries.read().unwrap_or_else(|e| e.into_inner());
        map.get(name)
            .is_some_and(|e| matches!(e.value.cached, Cached::Account(_)))
    }

    /// Writes a fetched value: TTL jittered (`ttl_ms` for an account,
    /// `negative_ttl_ms` otherwise), Δ = the fetch's duration.
    pub(crate) fn install(
        &self,
        name: &str,
        cached: Cached,
        now_ns: u64,
        delta_ns: u64,
        rng: &mut SmallRng,
    ) {
        let ttl_ms = match cached {
            Cached::Account(_) => self.cfg.ttl_ms,
            _ => self.cfg.negative_ttl_ms,
        };
        let ttl_ns = jittered_ttl_ns(ttl_ms * NS_PER_MS, self.cfg.ttl_jitter_pct, rng);
        let entry = CacheEntry {
            value: Value {
                cached,
                hold_until_ns: 0,
            },
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
    }

    /// Keeps an account entry as it is but asks for no refresh of it
    /// before `until_ns` (its record is faulty, or its data set not
    /// trusted). False when `name` holds no account.
    pub(crate) fn hold(&self, name: &str, until_ns: u64) -> bool {
        let mut map = self.entries.write().unwrap_or_else(|e| e.into_inner());
        match map.get_mut(name) {
            Some(e) if matches!(e.value.cached, Cached::Account(_)) => {
                e.value.hold_until_ns = until_ns;
                true
            }
            _ => false,
        }
    }

    /// Forgets every undecided absence and every hold (the data set is
    /// trusted again: ask Redis anew). O(entries), once per change.
    pub(crate) fn data_set_trusted_again(&self) {
        let mut map = self.entries.write().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, e| e.value.cached != Cached::Undecided);
        for e in map.values_mut() {
            e.value.hold_until_ns = 0;
        }
    }

    /// The fetch of `name` is over: it may be requested again.
    pub(crate) fn done(&self, name: &str) {
        self.queue().done(name);
    }

    /// The fetch of `t` could not be made: back in the queue.
    pub(crate) fn requeue(&self, t: Taken) {
        let displaced = self.queue().requeue(t);
        self.stats
            .requests_displaced
            .fetch_add(displaced as u64, Relaxed);
    }

    /// The expiry and Δ of an entry, for tests and diagnostics.
    pub(crate) fn entry_times(&self, name: &str) -> Option<(u64, u64)> {
        self.entry(name).map(|e| (e.expiry_ns, e.delta_ns))
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Removes a non-account entry if there is one, else the entry that
/// expires first. O(n) over a bounded map, on the refresher thread only.
fn evict_one(map: &mut HashMap<String, Entry>) {
    let victim = map
        .iter()
        .min_by_key(|(_, e)| (matches!(e.value.cached, Cached::Account(_)), e.expiry_ns))
        .map(|(k, _)| k.clone());
    if let Some(k) = victim {
        map.remove(&k);
    }
}

/// The per-source key of a lookup's client address.
pub(crate) fn source_of(ip: Option<IpAddr>) -> SourceKey {
    ip.map_or(SourceKey::ANY, SourceKey::of)
}
