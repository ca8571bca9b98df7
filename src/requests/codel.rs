//! CoDel-style overload detection of the request queue, per interval.
//!
//! Every request that leaves the queue through `pop` (served, or shed on
//! the way) gives a sample: its own sojourn, or the wait of the oldest
//! request still queued if that is longer. In FIFO order the two are the
//! same (CoDel's sojourn of the dequeued packet); once LIFO or per-account
//! rotation serves newer requests first, the oldest one still waiting keeps
//! the signal honest. The interval's verdict is *overloaded* iff the
//! minimum sample exceeded the target, or a push found the queue full and
//! the queue was never seen idle in the interval (a full queue under a
//! steady flood is a standing queue whatever the samples say). A worker
//! that asks for work from an empty queue samples 0: a burst that drains
//! within an interval never trips it.
//!
//! Sans-IO: time is the `now_ns` argument; nothing allocates after `new`.

use hdrhistogram::Histogram;

use crate::clock::NS_PER_US;
use crate::overload::stats::{inc, set, OverloadStats};

/// Interval state and verdict.
pub(crate) struct Codel {
    target_ns: u64,
    interval_ns: u64,
    /// Sojourn of requests served in the current interval, µs.
    sojourn_us: Histogram<u64>,
    interval_start_ns: u64,
    /// Minimum sample this interval; `u64::MAX` = no sample yet.
    interval_min_ns: u64,
    /// A push found the queue full in this interval.
    full_in_interval: bool,
    /// A pop found the queue empty in this interval.
    idle_in_interval: bool,
    served_in_interval: bool,
    overloaded: bool,
    lifo: bool,
    last_empty_ns: u64,
}

impl Codel {
    pub(crate) fn new(
        target_ns: u64,
        interval_ns: u64,
        histogram: Histogram<u64>,
        now: u64,
    ) -> Self {
        Codel {
            target_ns,
            interval_ns,
            sojourn_us: histogram,
            interval_start_ns: now,
            interval_min_ns: u64::MAX,
            full_in_interval: false,
            idle_in_interval: false,
            served_in_interval: false,
            overloaded: false,
            lifo: false,
            last_empty_ns: now,
        }
    }

    pub(crate) fn overloaded(&self) -> bool {
        self.overloaded
    }

    pub(crate) fn lifo(&self) -> bool {
        self.lifo
    }

    /// Whether a normal request that arrived at `arrival_ns` is shed now:
    /// only under overload, never before the interval's first service.
    pub(crate) fn overdue(&self, arrival_ns: u64, now_ns: u64) -> bool {
        self.overloaded
            && self.served_in_interval
            && now_ns.saturating_sub(arrival_ns) > 2 * self.target_ns
    }

    /// One request left the queue (served or shed in `pop`): `sample_ns` is
    /// the larger of its sojourn and the oldest remaining request's wait.
    pub(crate) fn on_dequeue(&mut self, sample_ns: u64) {
        self.interval_min_ns = self.interval_min_ns.min(sample_ns);
    }

    /// A request was served after `sojourn_ns` in the queue.
    pub(crate) fn on_served(&mut self, sojourn_ns: u64) {
        self.sojourn_us.saturating_record(sojourn_ns / NS_PER_US);
        self.served_in_interval = true;
    }

    /// A push found every slot taken.
    pub(crate) fn on_full(&mut self) {
        self.full_in_interval = true;
    }

    /// The queue has no request left (the last one was served or shed).
    pub(crate) fn on_emptied(&mut self, now_ns: u64) {
        self.last_empty_ns = now_ns;
    }

    /// A worker asked for work and the queue was empty: no standing delay,
    /// not overloaded, FIFO from now on.
    pub(crate) fn on_idle(&mut self, now_ns: u64, stats: &OverloadStats) {
        self.last_empty_ns = now_ns;
        self.interval_min_ns = 0;
        self.idle_in_interval = true;
        self.set_mode(false, false, stats);
    }

    /// Closes the interval if `interval_ns` has passed: decides overload,
    /// publishes the sojourn figures, starts anew. `queued` is the depth
    /// now, `oldest_wait_ns` how long the oldest of them has waited.
    ///
    /// An interval with no dequeue has no sojourn sample, but a request
    /// that has waited longer than the interval plus the target was queued
    /// through the whole interval at more than the target: a standing
    /// queue (workers held or stuck, no new arrivals to find it full).
    pub(crate) fn roll(
        &mut self,
        now_ns: u64,
        queued: usize,
        oldest_wait_ns: u64,
        stats: &OverloadStats,
    ) {
        if now_ns.saturating_sub(self.interval_start_ns) < self.interval_ns {
            return;
        }
        let min_ns = self.interval_min_ns;
        let standing_full = self.full_in_interval && !self.idle_in_interval;
        let standing_unserved =
            queued > 0 && oldest_wait_ns > self.interval_ns.saturating_add(self.target_ns);
        let overloaded = match min_ns {
            u64::MAX => standing_full || standing_unserved || (self.overloaded && queued > 0),
            min => min > self.target_ns || standing_full,
        };
        let emptied_recently = now_ns.saturating_sub(self.last_empty_ns) <= self.interval_ns;
        let lifo = overloaded || (self.lifo && !emptied_recently);
        self.set_mode(overloaded, lifo, stats);
        self.publish(if min_ns == u64::MAX { 0 } else { min_ns }, stats);
        self.interval_start_ns = now_ns;
        self.interval_min_ns = u64::MAX;
        self.full_in_interval = false;
        self.idle_in_interval = false;
        self.served_in_interval = false;
    }

    fn set_mode(&mut self, overloaded: bool, lifo: bool, stats: &OverloadStats) {
        if overloaded && !self.overloaded {
            inc(&stats.overload_episodes);
        }
        self.overloaded = overloaded;
        self.lifo = lifo;
        set(&stats.overloaded, u64::from(overloaded));
        set(&stats.lifo, u64::from(lifo));
    }

    fn publish(&mut self, min_ns: u64, stats: &OverloadStats) {
        set(&stats.sojourn_min_last_interval_ns, min_ns);
        let p99_us = self.sojourn_us.value_at_quantile(0.99);
        set(&stats.sojourn_p99_last_interval_ns, p99_us * NS_PER_US);
        let max_us = self.sojourn_us.max();
        set(&stats.sojourn_max_last_interval_ns, max_us * NS_PER_US);
        self.sojourn_us.reset();
    }
}
