//! The bounded request queue between the gateways and the request workers:
//! per-request deadlines, CoDel overload detection, adaptive LIFO, shedding
//! with a jittered retry-after, and per-account fairness.
//!
//! # Contract
//!
//! - **Allocation**: every slot, list head, per-account table and the sojourn
//!   histogram is allocated in [`RequestQueue::new`]. `push` and `pop`
//!   allocate nothing (the caller's `T` is moved into a preallocated slot and
//!   moved out again); `tests/overload_zero_alloc.rs` proves it.
//! - **Bounded**: at most `capacity` requests, `accounts_max` accounts. A
//!   push into a full queue evicts the oldest entry of the account holding the
//!   most entries and hands it back; one `pop` sheds at most the requests it
//!   walks past plus `shed_per_pop_max` from the old end.
//! - **Never blocks, sans-IO**: the queue reads no clock and sends nothing.
//!   Time comes in as `now_ns` (monotonic ns); everything removed without
//!   being served comes back to the caller as a [`Shed`] (request, reason,
//!   jittered `retry_after_ms`) so the caller writes the reject frame.
//! - **Not synchronised**: methods take `&mut self`. One owner drives it
//!   (e.g. a dispatcher thread, or a `Mutex` whose critical section is these
//!   O(1) calls); counters go to a shared [`OverloadStats`].
//!
//! # Mechanisms
//!
//! - **Deadlines**: a request's relative budget (µs, from the client) becomes
//!   `deadline_ns = now_ns + budget` on arrival. `pop` never returns a request
//!   with `now_ns >= deadline_ns`: those go to `on_shed` with
//!   [`ShedReason::Expired`] (counted as expired, not as a failure; no
//!   retry-after, since the client's own deadline has passed).
//! - **Overload (CoDel)**: every request that leaves the queue in `pop`
//!   (served, or shed on the way) is a sample: its sojourn, or the wait of
//!   the oldest request still queued if that is longer (in FIFO order the
//!   same thing; under LIFO or account rotation the oldest keeps the signal
//!   honest). At the end of an interval the queue is *overloaded* iff the
//!   interval's minimum sample exceeds `target_ns`, or a push found the
//!   queue full and no worker found it empty in the interval. A worker
//!   finding the queue empty samples 0, so a burst that drains within an
//!   interval never trips it; a standing backlog (or a full queue under a
//!   steady flood) does within two intervals. An interval without any
//!   sample keeps the previous verdict unless the queue is empty
//!   (`requests::codel`).
//! - **Under overload**: dequeue LIFO (each account's newest first: those
//!   still have budget left), and shed non-critical requests that waited more than
//!   `2 * target_ns` with [`ShedReason::Overloaded`] and a retry-after drawn
//!   uniformly from `retry_after`. The first request served in each interval
//!   is never shed, so the queue always makes progress and yields a fresh
//!   sample. A request is shed for overload only if its account holds
//!   more than one and at least 1/`FAR_BELOW_HEAVIEST` (1/16) of what the
//!   heaviest account holds; single requests only when every account
//!   holds one, and then only while more than `SINGLES_STANDING_MIN` are
//!   queued. LIFO ends (FIFO
//!   again) once the queue has been empty within the last interval; a
//!   worker finding it empty also clears the overloaded verdict at once.
//! - **Critical lane**: a request is critical only if the client flagged it
//!   *and* the caller says the account is entitled. Critical requests are
//!   served before any normal one, are never shed for overload, and are evicted
//!   only from an account that has no normal entries left.
//! - **Fairness**: each account has a token bucket (`account_rate_per_s`,
//!   `account_burst`); a push over budget is refused with
//!   [`ShedReason::RateLimited`] and a retry-after of one to two of the
//!   bucket's refills (`admission::refill_retry_ms`: 10–20 ms at 100/s),
//!   not the shed window: a client that honours it loses no more than
//!   the rate it was over. Within a lane, accounts with queued
//!   requests are served in turn (`requests::rotation`), one request each
//!   per round, so a quiet account waits for one request of each other
//!   account, not for a flooding account's backlog. When the queue is
//!   full, the account holding the most entries (the pusher itself on a
//!   tie) loses its oldest entry ([`ShedReason::QueueFull`]); a quiet
//!   account is never the victim while a noisy one holds more.
//!
//! # Data structure
//!
//! A slab of preallocated slots with two intrusive doubly linked chains per
//! slot: its *lane* (normal or critical, in arrival order) and its *account
//! lane* (the same account and lane, in arrival order). Push, pop at either
//! end, and evict-oldest-of-account are O(1). The account with the most
//! entries is found in O(1) by bucketing accounts by count
//! (`requests::heaviest`), not by an O(accounts) scan.

use std::sync::Arc;

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::Rng;

use crate::admission::{RetryWindow, TokenBucket};
use crate::clock::{NS_PER_MS, NS_PER_US};
use crate::overload::stats::{inc, set};
use crate::overload::OverloadStats;
pub use crate::overload::ShedReason;
use crate::requests::codel::Codel;
use crate::requests::heaviest::Heaviest;
use crate::requests::rotation::Rotation;
use slab::{push_back, unlink, Chain, Links, List, Slot, EMPTY_LIST, UNLINKED};

mod slab;

/// Queued requests above which accounts holding one request each count as
/// a standing queue (many tenants, one request each) and are shed for
/// overload alike; at or below it they are served (see `shed_for_overload`).
pub(crate) const SINGLES_STANDING_MIN: usize = 8;

/// An account holding fewer than 1/this of the heaviest account's queued
/// requests is not shed for overload (see `shed_for_overload`): 16 keeps
/// near-equal backlogs shed alike (each down to its last request) while a
/// quiet tenant's few requests behind a flood of hundreds are served.
pub(crate) const FAR_BELOW_HEAVIEST: u32 = 16;

/// Default queue capacity: a few seconds of request work at the rates one
/// instance serves, small enough that a full queue is still fresh.
pub const QUEUE_CAPACITY_DEFAULT: usize = 4096;
/// Default number of dense account ids the queue tracks.
pub const QUEUE_ACCOUNTS_MAX_DEFAULT: usize = 4096;
/// CoDel target: a standing delay above 5 ms is a queue, not a burst.
pub const SOJOURN_TARGET_NS_DEFAULT: u64 = 5 * NS_PER_MS;
/// CoDel interval: the minimum is taken over 100 ms windows.
pub const SOJOURN_INTERVAL_NS_DEFAULT: u64 = 100 * NS_PER_MS;
/// Retry-after window for shed requests (ms).
pub const SHED_RETRY_WINDOW_DEFAULT: RetryWindow = RetryWindow::new(2000, 5000);
/// Per-account request rate: a terminal asks for snapshots or lists a few
/// times a second at most; 100/s with a burst of 200 covers an account with
/// dozens of terminals and stops a retry loop.
pub const ACCOUNT_RATE_PER_S_DEFAULT: u32 = 100;
/// Per-account burst: requests one account may send back to back.
pub const ACCOUNT_BURST_DEFAULT: u32 = 200;
/// Requests one `pop` may shed from the old end besides the ones it walks
/// past: each push adds one, so shedding up to 16 per pop keeps up.
pub const SHED_PER_POP_MAX_DEFAULT: u32 = 16;
/// Upper bound of the sojourn histogram; longer waits saturate into it.
pub const SOJOURN_HISTOGRAM_MAX_NS_DEFAULT: u64 = 60_000 * NS_PER_MS;
/// Accounts [`RequestQueue::pop_eligible`] passes over at most per
/// candidate: more than the accounts that can be at the dispatcher's
/// in-flight cap at once (see `requests::inflight`).
pub const ELIGIBLE_SKIP_MAX: usize = 64;
/// Pass as `budget_us` for a request without a deadline.
pub const NO_DEADLINE_BUDGET_US: u64 = u64::MAX;

const NIL: u32 = u32::MAX;
const NORMAL: usize = 0;
const CRITICAL: usize = 1;

/// A request queue configuration problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestsError {
    /// `validate` refused a value.
    #[error("request config `{key}`: {reason}")]
    Config {
        /// The offending field, e.g. `capacity`.
        key: &'static str,
        /// What the value must be.
        reason: &'static str,
    },
}

fn config_err(key: &'static str, reason: &'static str) -> RequestsError {
    RequestsError::Config { key, reason }
}

/// Queue settings; [`Default`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// Requests queued at most, all accounts together; 1..2^32-1. A push to
    /// a full queue evicts the oldest entry of the heaviest account.
    pub capacity: usize,
    /// Dense account ids tracked (0..accounts_max); 1..2^32-1.
    pub accounts_max: usize,
    /// CoDel target, ns: a minimum sojourn above this for an interval is a
    /// standing queue (overload). Above 0 and below `interval_ns`.
    pub target_ns: u64,
    /// CoDel interval, ns: the window the minimum sojourn is taken over.
    pub interval_ns: u64,
    /// Window the retry-after of a shed request is drawn from.
    pub retry_after: RetryWindow,
    /// Requests per second one account may push; more are shed as
    /// `rate_limited` at push.
    pub account_rate_per_s: u32,
    /// Requests one account may push back to back; at least 1.
    pub account_burst: u32,
    /// Requests one `pop` may shed from the old end besides the ones it walks
    /// past; at least 1.
    pub shed_per_pop_max: u32,
    /// Largest sojourn the histogram keeps, ns (longer ones saturate); at
    /// least 2 µs.
    pub sojourn_histogram_max_ns: u64,
}

impl Default for QueueConfig {
    fn default() -> QueueConfig {
        QueueConfig {
            capacity: QUEUE_CAPACITY_DEFAULT,
            accounts_max: QUEUE_ACCOUNTS_MAX_DEFAULT,
            target_ns: SOJOURN_TARGET_NS_DEFAULT,
            interval_ns: SOJOURN_INTERVAL_NS_DEFAULT,
            retry_after: SHED_RETRY_WINDOW_DEFAULT,
            account_rate_per_s: ACCOUNT_RATE_PER_S_DEFAULT,
            account_burst: ACCOUNT_BURST_DEFAULT,
            shed_per_pop_max: SHED_PER_POP_MAX_DEFAULT,
            sojourn_histogram_max_ns: SOJOURN_HISTOGRAM_MAX_NS_DEFAULT,
        }
    }
}

impl QueueConfig {
    /// Refuses values the queue cannot work with, naming the key.
    pub fn validate(&self) -> Result<(), RequestsError> {
        let slots_max = (NIL - 1) as usize;
        if self.capacity == 0 || self.capacity > slots_max {
            return Err(config_err("capacity", "must be in 1..2^32-1"));
        }
        if self.accounts_max == 0 || self.accounts_max > slots_max {
            return Err(config_err("accounts_max", "must be in 1..2^32-1"));
        }
        if self.target_ns == 0 || self.target_ns >= self.interval_ns {
            return Err(config_err("target_ns", "must be > 0 and below interval_ns"));
        }
        if !self.retry_after.is_valid() {
            return Err(config_err(
                "retry_after",
                "needs 0 <= min_ms <= max_ms, max_ms > 0",
            ));
        }
        if self.account_burst == 0 {
            return Err(config_err("account_burst", "must be at least 1"));
        }
        if self.shed_per_pop_max == 0 {
            return Err(config_err("shed_per_pop_max", "must be at least 1"));
        }
        if self.sojourn_histogram_max_ns < 2 * NS_PER_US {
            return Err(config_err(
                "sojourn_histogram_max_ns",
                "must be at least 2 µs",
            ));
        }
        Ok(())
    }
}

/// What the gateway knows about a request when it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Dense account index, below `accounts_max`.
    pub account: u32,
    /// Remaining-time budget from the client, µs
    /// ([`NO_DEADLINE_BUDGET_US`] for none).
    pub budget_us: u64,
    /// The client flagged the request critical.
    pub critical: bool,
    /// The account is entitled to critical requests (from its config);
    /// without it the flag is ignored.
    pub critical_entitled: bool,
}

/// A request removed or refused without service; the caller rejects it.
#[derive(Debug, PartialEq, Eq)]
pub struct Shed<T> {
    /// The request as pushed, handed back so the caller can answer it.
    pub request: T,
    /// The account it was pushed for.
    pub account: u32,
    /// Why it was not served (counted in `shed`).
    pub reason: ShedReason,
    /// Jittered retry-after drawn from the configured window; 0 for
    /// [`ShedReason::Expired`] (the client's deadline has passed already).
    pub retry_after_ms: u32,
}

/// A request handed to a worker.
#[derive(Debug, PartialEq, Eq)]
pub struct Dequeued<T> {
    /// The request as pushed.
    pub request: T,
    /// The account it was pushed for.
    pub account: u32,
    /// Served from the critical lane (flagged critical and entitled to it).
    pub critical: bool,
    /// When it was pushed (monotonic ns).
    pub arrival_ns: u64,
    /// Arrival plus its budget (monotonic ns); `u64::MAX` saturated for no
    /// deadline. Always after the pop's `now_ns`.
    pub deadline_ns: u64,
    /// Time spent queued, ns.
    pub sojourn_ns: u64,
}

impl<T> Dequeued<T> {
    /// Budget left at `now_ns`, µs, to pass on to the next hop (deadlines
    /// travel as relative budgets).
    pub fn remaining_budget_us(&self, now_ns: u64) -> u64 {
        self.deadline_ns.saturating_sub(now_ns) / NS_PER_US
    }
}

/// The bounded request queue. `T` is the caller's request (moved in and
/// out, never cloned); `R` draws the retry-after jitter.
pub struct RequestQueue<T, R: Rng = SmallRng> {
    cfg: QueueConfig,
    slots: Box<[Slot<T>]>,
    free_head: u32,
    len: u32,
    lanes: [List; 2],
    account_lanes: Box<[[List; 2]]>,
    heaviest: Heaviest,
    /// Per lane: the accounts with entries, served in turn.
    rotations: [Rotation; 2],
    account_buckets: Box<[TokenBucket]>,
    rng: R,
    stats: Arc<OverloadStats>,
    codel: Codel,
}

impl<T, R: Rng> RequestQueue<T, R> {
    /// Allocates everything the queue will ever use. The queue starts empty
    /// (so FIFO, not overloaded) and its first interval starts at `now_ns`.
    pub fn new(
        cfg: QueueConfig,
        rng: R,
        stats: Arc<OverloadStats>,
        now_ns: u64,
    ) -> Result<Self, RequestsError> {
        cfg.validate()?;
        let slots: Box<[Slot<T>]> = (0..cfg.capacity)
            .map(|i| Slot {
                request: None,
                account: 0,
                critical: false,
                arrival_ns: 0,
                deadline_ns: 0,
                lane: Links {
                    prev: NIL,
                    next: if i + 1 < cfg.capacity {
                        i as u32 + 1
                    } else {
                        NIL
                    },
                },
                account_lane: UNLINKED,
            })
            .collect();
        let histogram_max_us = cfg.sojourn_histogram_max_ns / NS_PER_US;
        let sojourn_us = Histogram::new_with_bounds(1, histogram_max_us, 2)
            .map_err(|_| config_err("sojourn_histogram_max_ns", "histogram bounds refused"))?;
        let bucket = TokenBucket::new(cfg.account_rate_per_s, cfg.account_burst, now_ns);
        Ok(RequestQueue {
            slots,
            free_head: 0,
            len: 0,
            lanes: [EMPTY_LIST; 2],
            account_lanes: vec![[EMPTY_LIST; 2]; cfg.accounts_max].into_boxed_slice(),
            heaviest: Heaviest::new(cfg.accounts_max, cfg.capacity),
            rotations: [
                Rotation::new(cfg.accounts_max),
                Rotation::new(cfg.accounts_max),
            ],
            account_buckets: vec![bucket; cfg.accounts_max].into_boxed_slice(),
            rng,
            stats,
            codel: Codel::new(cfg.target_ns, cfg.interval_ns, sojourn_us, now_ns),
            cfg,
        })
    }

    /// Queues a request arriving at `now_ns`.
    ///
    /// - `Ok(None)`: queued.
    /// - `Ok(Some(evicted))`: queued, and the queue was full, so `evicted`
    ///   (the oldest entry of the heaviest account, possibly the pusher's
    ///   own) was removed; reject it.
    /// - `Err(shed)`: refused (rate limit or bad account); reject it.
    pub fn push(
        &mut self,
        request: T,
        arrival: Arrival,
        now_ns: u64,
    ) -> Result<Option<Shed<T>>, Shed<T>> {
        self.roll_interval(now_ns);
        let account = arrival.account;
        if account as usize >= self.cfg.accounts_max {
            return Err(self.refuse(request, account, ShedReason::BadAccount));
        }
        let bucket = &mut self.account_buckets[account as usize];
        if !bucket.try_take(now_ns) {
            // The retry-after of a rate is the refill it needs, not the
            // shed window: honouring it costs one or two refills.
            let retry = crate::admission::refill_retry_ms(bucket.token_ns(), &mut self.rng);
            self.stats.record_shed(ShedReason::RateLimited);
            return Err(Shed {
                request,
                account,
                reason: ShedReason::RateLimited,
                retry_after_ms: retry,
            });
        }
        let full = self.free_head == NIL;
        if full {
            self.codel.on_full();
        }
        let evicted = full.then(|| self.evict_for(account));
        let critical = arrival.critical && arrival.critical_entitled;
        let deadline_ns = now_ns.saturating_add(arrival.budget_us.saturating_mul(NS_PER_US));
        self.insert(request, account, critical, now_ns, deadline_ns);
        Ok(evicted)
    }

    /// Takes the next request to serve at `now_ns`, or `None` if nothing
    /// servable is queued. Requests removed on the way (expired, or shed
    /// for overload) are passed to `on_shed` before this returns; a
    /// returned request is never past its deadline.
    pub fn pop(&mut self, now_ns: u64, on_shed: impl FnMut(Shed<T>)) -> Option<Dequeued<T>> {
        self.pop_eligible(now_ns, |_| true, on_shed)
    }

    /// [`RequestQueue::pop`], serving only accounts `eligible` accepts
    /// (the dispatcher's per-account in-flight cap): an account passed
    /// over loses its turn in this round, at most [`ELIGIBLE_SKIP_MAX`]
    /// are passed over per candidate, and its requests still age, expire
    /// and are shed from the old end as everyone's.
    pub fn pop_eligible(
        &mut self,
        now_ns: u64,
        mut eligible: impl FnMut(u32) -> bool,
        mut on_shed: impl FnMut(Shed<T>),
    ) -> Option<Dequeued<T>> {
        self.roll_interval(now_ns);
        if self.len == 0 {
            self.codel.on_idle(now_ns, &self.stats);
            return None;
        }
        self.purge_old_end(now_ns, &mut on_shed);
        while let Some(idx) = self.next_candidate(&mut eligible) {
            let slot = &self.slots[idx as usize];
            let reason = if now_ns >= slot.deadline_ns {
                ShedReason::Expired
            } else if !slot.critical
                && self.shed_for_overload(slot.account, slot.arrival_ns, now_ns)
            {
                ShedReason::Overloaded
            } else {
                return Some(self.serve(idx, now_ns));
            };
            let shed = self.shed_dequeued(idx, reason, now_ns);
            on_shed(shed);
        }
        None
    }

    /// Closes the current interval if it is due, without pushing or
    /// popping: call it from an idle worker loop or before a metrics scrape
    /// so the verdict and the sojourn gauges do not go stale while traffic
    /// is quiet. Allocation-free like `push` and `pop`.
    pub fn poll(&mut self, now_ns: u64) {
        self.roll_interval(now_ns);
    }

    /// Requests queued now.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when no request is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most requests queued at once ([`QueueConfig::capacity`]).
    pub fn capacity(&self) -> usize {
        self.cfg.capacity
    }

    /// Entries `account` holds now (0 for an unknown account).
    pub fn queued_of(&self, account: u32) -> u32 {
        if account as usize >= self.cfg.accounts_max {
            return 0;
        }
        self.heaviest.count(account)
    }

    /// Whether the last completed interval found a standing queue.
    pub fn is_overloaded(&self) -> bool {
        self.codel.overloaded()
    }

    /// Whether `pop` serves newest first.
    pub fn is_lifo(&self) -> bool {
        self.codel.lifo()
    }

    /// The validated settings this queue runs with.
    pub fn config(&self) -> &QueueConfig {
        &self.cfg
    }

    /// The shared counters the queue updates.
    pub fn stats(&self) -> &Arc<OverloadStats> {
        &self.stats
    }

    fn insert(&mut self, request: T, account: u32, critical: bool, now_ns: u64, deadline_ns: u64) {
        let idx = self.free_head;
        assert!(idx != NIL, "insert into a full slab");
        let slot = &mut self.slots[idx as usize];
        self.free_head = slot.lane.next;
        debug_assert!(slot.request.is_none());
        slot.request = Some(request);
        slot.account = account;
        slot.critical = critical;
        slot.arrival_ns = now_ns;
        slot.deadline_ns = deadline_ns;
        let lane = usize::from(critical);
        push_back(&mut self.slots, &mut self.lanes[lane], idx, Chain::Lane);
        let account_lane = &mut self.account_lanes[account as usize][lane];
        push_back(&mut self.slots, account_lane, idx, Chain::Account);
        if account_lane.len == 1 {
            self.rotations[lane].add(account);
        }
        self.heaviest.inc(account);
        self.len += 1;
        inc(&self.stats.enqueued);
        set(&self.stats.queue_depth, u64::from(self.len));
    }

    /// Unlinks slot `idx` from every chain, frees it and returns its request.
    fn remove(&mut self, idx: u32) -> T {
        let (account, lane) = {
            let slot = &self.slots[idx as usize];
            (slot.account, usize::from(slot.critical))
        };
        unlink(&mut self.slots, &mut self.lanes[lane], idx, Chain::Lane);
        let account_lane = &mut self.account_lanes[account as usize][lane];
        unlink(&mut self.slots, account_lane, idx, Chain::Account);
        if account_lane.len == 0 {
            self.rotations[lane].remove(account);
        }
        self.heaviest.dec(account);
        let slot = &mut self.slots[idx as usize];
        slot.lane.next = self.free_head;
        self.free_head = idx;
        self.len -= 1;
        set(&self.stats.queue_depth, u64::from(self.len));
        slot.request.take().expect("a linked slot holds a request")
    }

    /// Sheds slot `idx` from `pop`: the request was dequeued, so its wait
    /// is a CoDel sample like a served one's.
    fn shed_dequeued(&mut self, idx: u32, reason: ShedReason, now_ns: u64) -> Shed<T> {
        let arrival_ns = self.slots[idx as usize].arrival_ns;
        let shed = self.shed(idx, reason);
        self.sample(now_ns.saturating_sub(arrival_ns), now_ns);
        shed
    }

    /// CoDel sample of one dequeue: the larger of the dequeued request's
    /// sojourn and the wait of the oldest request still queued.
    fn sample(&mut self, sojourn_ns: u64, now_ns: u64) {
        let waiting_ns = self.oldest_wait_ns(now_ns);
        self.codel.on_dequeue(sojourn_ns.max(waiting_ns));
        if self.len == 0 {
            self.codel.on_emptied(now_ns);
        }
    }

    fn shed(&mut self, idx: u32, reason: ShedReason) -> Shed<T> {
        let account = self.slots[idx as usize].account;
        let request = self.remove(idx);
        self.refuse(request, account, reason)
    }

    fn refuse(&mut self, request: T, account: u32, reason: ShedReason) -> Shed<T> {
        self.stats.record_shed(reason);
        let retry_after_ms = match reason {
            ShedReason::Expired => 0,
            _ => self.cfg.retry_after.draw(&mut self.rng),
        };
        Shed {
            request,
            account,
            reason,
            retry_after_ms,
        }
    }

    fn serve(&mut self, idx: u32, now_ns: u64) -> Dequeued<T> {
        let slot = &self.slots[idx as usize];
        let (account, critical) = (slot.account, slot.critical);
        let (arrival_ns, deadline_ns) = (slot.arrival_ns, slot.deadline_ns);
        let request = self.remove(idx);
        self.rotations[usize::from(critical)].served(account);
        let sojourn_ns = now_ns.saturating_sub(arrival_ns);
        self.codel.on_served(sojourn_ns);
        self.sample(sojourn_ns, now_ns);
        inc(&self.stats.served);
        Dequeued {
            request,
            account,
            critical,
            arrival_ns,
            deadline_ns,
            sojourn_ns,
        }
    }

    /// Frees a slot for `account`'s push by evicting the oldest entry of the
    /// account holding the most (normal entries before critical ones).
    fn evict_for(&mut self, account: u32) -> Shed<T> {
        let top = self
            .heaviest
            .heaviest()
            .expect("a full queue holds entries");
        let pusher_count = self.heaviest.count(account);
        let victim = if pusher_count >= self.heaviest.count(top) {
            account
        } else {
            top
        };
        let lanes = self.account_lanes[victim as usize];
        let idx = if lanes[NORMAL].head != NIL {
            lanes[NORMAL].head
        } else {
            lanes[CRITICAL].head
        };
        debug_assert!(idx != NIL, "the heaviest account holds an entry");
        self.shed(idx, ShedReason::QueueFull)
    }

    /// Critical lane first; within a lane the account whose turn it is, and
    /// of its requests the newest under LIFO, the oldest otherwise.
    fn next_candidate(&mut self, eligible: &mut impl FnMut(u32) -> bool) -> Option<u32> {
        let lane = [CRITICAL, NORMAL]
            .into_iter()
            .find(|&lane| self.lanes[lane].len > 0)?;
        let account = self.rotations[lane].next_eligible(&mut *eligible, ELIGIBLE_SKIP_MAX)?;
        let list = self.account_lanes[account as usize][lane];
        Some(if self.codel.lifo() {
            list.tail
        } else {
            list.head
        })
    }

    /// Whether a normal request of `account` that arrived at `arrival_ns`
    /// is shed for overload now: overdue (see `Codel::overdue`), and its
    /// account holds more than one queued request and at least
    /// 1/[`FAR_BELOW_HEAVIEST`] of what the heaviest account holds. An
    /// account holding less is not what built the standing queue: a quiet
    /// tenant whose few requests wait behind a flooding neighbour's
    /// thousands (its own pile up while the host starves the path) is
    /// served in its turn (its deadline still applies). When every account holds one, all are
    /// shed alike, but only while more than [`SINGLES_STANDING_MIN`] are
    /// queued: a few single requests left overdue (a worker or the host
    /// stalled; the flood's backlog already gone) are no standing queue,
    /// and shedding them relieves nothing.
    fn shed_for_overload(&self, account: u32, arrival_ns: u64, now_ns: u64) -> bool {
        if !self.codel.overdue(arrival_ns, now_ns) {
            return false;
        }
        let top = self
            .heaviest
            .heaviest()
            .map_or(0, |a| self.heaviest.count(a));
        let mine = self.heaviest.count(account);
        // An account far below the heaviest did not build the queue.
        (mine > 1 && mine.saturating_mul(FAR_BELOW_HEAVIEST) >= top)
            || (top <= 1 && self.len as usize > SINGLES_STANDING_MIN)
    }

    /// Removes, from the old end of the lanes, requests past their deadline
    /// and (under overload) normal requests past twice the target — at most
    /// `shed_per_pop_max` per call. Under LIFO the old end is never walked by
    /// the serving path, so without this it would hold capacity until
    /// evicted. Deadlines are not ordered by arrival, so this is a bounded
    /// sweep, not a guarantee; the guarantee is the check in `pop`.
    fn purge_old_end(&mut self, now_ns: u64, on_shed: &mut impl FnMut(Shed<T>)) {
        let mut budget = self.cfg.shed_per_pop_max;
        for lane in [NORMAL, CRITICAL] {
            while budget > 0 {
                let head = self.lanes[lane].head;
                if head == NIL {
                    break;
                }
                let slot = &self.slots[head as usize];
                let reason = if now_ns >= slot.deadline_ns {
                    ShedReason::Expired
                } else if lane == NORMAL
                    && self.shed_for_overload(slot.account, slot.arrival_ns, now_ns)
                {
                    ShedReason::Overloaded
                } else {
                    break;
                };
                let shed = self.shed_dequeued(head, reason, now_ns);
                on_shed(shed);
                budget -= 1;
            }
        }
    }

    /// How long the oldest request still queued has waited (0: none).
    fn oldest_wait_ns(&self, now_ns: u64) -> u64 {
        let oldest_ns = [NORMAL, CRITICAL]
            .into_iter()
            .map(|lane| self.lanes[lane].head)
            .filter(|&idx| idx != NIL)
            .map(|idx| self.slots[idx as usize].arrival_ns)
            .min();
        oldest_ns.map_or(0, |arrival| now_ns.saturating_sub(arrival))
    }

    /// Closes the current CoDel interval if it is due.
    fn roll_interval(&mut self, now_ns: u64) {
        let oldest_wait_ns = self.oldest_wait_ns(now_ns);
        self.codel
            .roll(now_ns, self.len as usize, oldest_wait_ns, &self.stats);
    }
}

#[cfg(test)]
mod tests;
