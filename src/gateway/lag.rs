//! Loop lag: how late a shard's loop serves what is due, and what the shard
//! sheds while it lags.
//!
//! Two samples feed the detector, both on the shard's own clock:
//!
//! - **timer lateness**: at each timer sweep (due every
//!   [`super::sweep::SWEEP_NS`]), how far past its due time the turn that
//!   runs it comes — a starved thread or a turn spent on thousands of
//!   sockets shows up here;
//! - **ring age**: the age of the oldest unserved price in the shard's ring
//!   when the turn takes it (now minus the engine's publish time) — the
//!   readiness-to-service delay of the price path.
//!
//! Samples fall into windows of [`LAG_WINDOW_NS`]; a window's value is its
//! largest sample. [`ENGAGE_WINDOWS`] windows in a row above the target
//! make the shard *lagging*; [`RELEASE_WINDOWS`] windows in a row at or
//! below the target end it (hysteresis in time, so it does not flap, and a
//! single stall does not shed). The release level is the target itself,
//! not a lower one: a host that stays busy just under the target (a CPU
//! hog beside a herd) must take sessions again, or the last clients of a
//! herd are refused for as long as the hog runs. Admitting them may push
//! the lag back over the target, which engages again after
//! [`ENGAGE_WINDOWS`]: the herd then comes in as a paced trickle.
//!
//! While a shard lags its subscribers get the latest price per symbol,
//! flagged conflated, instead of every queued update. What else it does
//! depends on why it lags ([`cause`]):
//!
//! - **its own work** (it *sheds*): the acceptor places no new connection
//!   on it (when every shard sheds, it admits [`LAG_ADMIT_PER_S`] per
//!   shard and refuses the rest with Disconnect(busy)); logons on it are
//!   admitted at [`LAG_ADMIT_PER_S`] and the rest get LogonRejected(busy);
//!   requests of its heaviest accounts get Reject(overloaded) while the
//!   quiet ones are served ([`shares`]); all with the jittered busy
//!   retry-after. A refused herd is therefore in within about
//!   `herd / (LAG_ADMIT_PER_S × shards)` seconds plus its retry windows,
//!   and the refusals cannot hold the lag (and so the release) off for
//!   ever;
//! - **a host that starves it** (its thread waits for a CPU a quarter of
//!   the time or more): shedding would not give it the CPU back, so it
//!   refuses nobody for lag and only conflates.
//!
//! See `docs/overload.md`, "Loop lag".

pub mod cause;
pub mod shares;

use std::sync::atomic::AtomicU64;

use hdrhistogram::Histogram;
use rtrb::Consumer;

use super::conns::Conns;
use crate::model::Price;
use crate::ops::HistogramSnapshot;
use crate::overload::{ShedReason, Stage};
use crate::runtime::counter::{Counter, Gauge};
use crate::wire::{LogonRejectReason, RejectReason};

/// Default of `--loop-lag-target-ms`.
pub const LOOP_LAG_TARGET_MS_DEFAULT: u64 = 100;
/// Length of one detector window.
pub const LAG_WINDOW_NS: u64 = 100_000_000;
/// Windows in a row above the target that make a shard lagging.
pub const ENGAGE_WINDOWS: u32 = 3;
/// Windows in a row at or below the target that end lagging.
pub const RELEASE_WINDOWS: u32 = 10;
/// Upper bounds (seconds) of the lag histogram's buckets.
pub const LAG_BUCKETS_S: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Most prices a lagging shard takes off its ring in one turn (it sends
/// only the latest of each symbol, so it can take many).
pub const CONFLATE_BATCH: usize = 65_536;
/// Logons a shedding shard admits per second (and, when every shard
/// sheds, connections the acceptor admits per second per shard): a herd
/// refused for lag comes in as a paced trickle in bounded time (3,000
/// clients on 2 shards: 7.5 s plus their retry windows) instead of being
/// refused for as long as its own retries keep the loop late.
pub const LAG_ADMIT_PER_S: u32 = 200;

/// A change of the lagging state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LagChange {
    /// The shard started lagging.
    Engaged,
    /// The shard stopped lagging.
    Released,
}

/// The loop-lag detector of one shard: windowed maximum with hysteresis.
/// Pure: every call takes the time (ns, the shard's monotonic clock).
#[derive(Debug, Clone)]
pub struct LagDetector {
    target_ns: u64,
    window_start: u64,
    window_max: u64,
    last_window_ns: u64,
    above: u32,
    below: u32,
    lagging: bool,
}

impl LagDetector {
    /// A detector that lags above `target_ns` (0: never), first window from `now`.
    pub fn new(target_ns: u64, now: u64) -> LagDetector {
        LagDetector {
            target_ns,
            window_start: now,
            window_max: 0,
            last_window_ns: 0,
            above: 0,
            below: 0,
            lagging: false,
        }
    }

    /// Adds one lag sample (ns) taken at `now`; closes the window first if
    /// it is over. Returns a change of state, if one happened.
    pub fn sample(&mut self, lag_ns: u64, now: u64) -> Option<LagChange> {
        let change = self.tick(now);
        self.window_max = self.window_max.max(lag_ns);
        change
    }

    /// Closes the current window if `now` is past its end (call at least
    /// once per window, with or without samples).
    pub fn tick(&mut self, now: u64) -> Option<LagChange> {
        if now.saturating_sub(self.window_start) < LAG_WINDOW_NS {
            return None;
        }
        // A gap of several windows (a stall) closes one window: its lateness
        // is one sample, judged once.
        let value = std::mem::take(&mut self.window_max);
        self.window_start = now;
        self.last_window_ns = value;
        if self.target_ns == 0 {
            return None;
        }
        if !self.lagging {
            self.above = if value > self.target_ns {
                self.above + 1
            } else {
                0
            };
            if self.above >= ENGAGE_WINDOWS {
                self.lagging = true;
                self.below = 0;
                return Some(LagChange::Engaged);
            }
        } else {
            self.below = if value <= self.target_ns {
                self.below + 1
            } else {
                0
            };
            if self.below >= RELEASE_WINDOWS {
                self.lagging = false;
                self.above = 0;
                return Some(LagChange::Released);
            }
        }
        None
    }

    /// Whether the shard is lagging now.
    pub fn is_lagging(&self) -> bool {
        self.lagging
    }

    /// The largest sample of the last closed window, ns.
    pub fn windowed_ns(&self) -> u64 {
        self.last_window_ns
    }
}

/// A shard's lag metrics. The histogram, sum, count and gauges have one
/// writer (the shard thread); the refusal counters are also written by the
/// acceptor, so they are atomic adds.
#[derive(Debug, Default)]
pub struct LagStats {
    buckets: [Counter; LAG_BUCKETS_S.len()],
    count: Counter,
    sum_ns: Counter,
    /// Gauge: the largest lag of the last closed window, ns.
    pub windowed_ns: Gauge,
    /// Gauge: 1 while the shard is lagging.
    pub lagging: Gauge,
    /// Gauge: 1 while it lags from its own work and sheds (0 when it lags
    /// because the host starves it: it only conflates then).
    pub shedding: Gauge,
    /// Gauge: CPU time the shard's thread ran in the last cause window,
    /// per-mille of wall time.
    pub cpu_permille: Gauge,
    /// Gauge: time it waited for a CPU in the last cause window (run-queue
    /// delay), per-mille of wall time.
    pub wait_permille: Gauge,
    /// Logons admitted by the paced budget while shedding.
    pub logons_paced: Counter,
    /// Times the shard started lagging.
    pub episodes: Counter,
    /// Prices taken off the ring and not sent because a newer price of the
    /// same symbol was sent instead (lagging shard).
    pub conflated: Counter,
    /// Connections not placed on this shard because it lagged (atomic add).
    pub refused_connections: AtomicU64,
}

impl LagStats {
    /// Records one sample (shard thread only).
    pub fn record(&self, lag_ns: u64) {
        let s = lag_ns as f64 * 1e-9;
        let i = LAG_BUCKETS_S.partition_point(|&b| b < s);
        if let Some(b) = self.buckets.get(i) {
            b.inc();
        }
        self.count.inc();
        self.sum_ns.add(lag_ns);
    }

    /// Whether the shard lags now (any thread).
    pub fn is_lagging(&self) -> bool {
        self.lagging.get() != 0
    }

    /// Whether the shard sheds now: it lags from its own work (any thread).
    pub fn is_shedding(&self) -> bool {
        self.shedding.get() != 0
    }

    /// The histogram for the exposition, in seconds.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0;
        let buckets = LAG_BUCKETS_S
            .iter()
            .zip(&self.buckets)
            .map(|(&b, n)| {
                cumulative += n.get();
                (b, cumulative)
            })
            .collect();
        HistogramSnapshot {
            buckets,
            count: self.count.get(),
            sum: self.sum_ns.get() as f64 * 1e-9,
        }
    }
}

/// The shard's lag state: the detector, why it lags, what its accounts
/// send, the paced logon budget and the symbols owed a conflated price
/// (sized at start; nothing allocates per turn).
pub(super) struct LagState {
    pub(super) detector: LagDetector,
    cause: cause::CauseMeter,
    /// The last closed cause window's verdict.
    why: cause::Cause,
    load: shares::AccountLoad,
    /// Logons admitted while shedding ([`LAG_ADMIT_PER_S`]).
    admit: crate::admission::TokenBucket,
    owed: Box<[bool]>,
    owed_list: Vec<u16>,
}

impl LagState {
    pub(super) fn new(target_ns: u64, symbols: usize, now: u64) -> LagState {
        let burst = (LAG_ADMIT_PER_S / 10).max(1);
        LagState {
            detector: LagDetector::new(target_ns, now),
            cause: cause::CauseMeter::new(),
            why: cause::Cause::Own,
            load: shares::AccountLoad::new(),
            admit: crate::admission::TokenBucket::new(LAG_ADMIT_PER_S, burst, now),
            owed: vec![false; symbols].into_boxed_slice(),
            owed_list: Vec::with_capacity(symbols),
        }
    }

    /// Lagging from its own work: it sheds (see the module docs).
    pub(super) fn is_shedding(&self) -> bool {
        self.detector.is_lagging() && self.why == cause::Cause::Own
    }
}

impl LagState {
    /// Feeds one sample to the detector and publishes what changed.
    pub(super) fn sample(&mut self, conns: &Conns, lag_ns: u64, now: u64) {
        conns.stats.lag.record(lag_ns);
        let change = self.detector.sample(lag_ns, now);
        self.publish(conns, change);
    }

    /// At a due sweep (due at `due_ns`; 0: the first): the sweep's
    /// lateness is a sample.
    pub(super) fn on_sweep(&mut self, conns: &Conns, due_ns: u64, now: u64) {
        if due_ns != 0 {
            self.sample(conns, now.saturating_sub(due_ns), now);
        }
        if let Some(w) = self.cause.roll(now, LAG_WINDOW_NS) {
            self.why = cause::classify(w);
            self.load.roll();
            let stats = &conns.stats.lag;
            stats.cpu_permille.set(w.cpu_permille);
            stats.wait_permille.set(w.wait_permille.unwrap_or(0));
        }
        let shedding = self.is_shedding();
        conns.stats.lag.shedding.set(u64::from(shedding));
    }

    fn publish(&mut self, conns: &Conns, change: Option<LagChange>) {
        let stats = &conns.stats.lag;
        stats.windowed_ns.set(self.detector.windowed_ns());
        match change {
            Some(LagChange::Engaged) => {
                stats.lagging.set(1);
                stats.episodes.inc();
                tracing::warn!(
                    shard = conns.index(),
                    lag_ms = self.detector.windowed_ns() / 1_000_000,
                    "shard loop lagging: shedding new sessions and requests, conflating"
                );
            }
            Some(LagChange::Released) => {
                stats.lagging.set(0);
                tracing::info!(shard = conns.index(), "shard loop lag back under target");
            }
            None => {}
        }
    }

    /// A logon on a shedding shard beyond the paced budget
    /// ([`LAG_ADMIT_PER_S`]): LogonRejected(busy) with the jittered busy
    /// retry-after, counted as an admission reject at `loop_lag`; returns
    /// true if so.
    pub(super) fn refuse_logon(&mut self, conns: &mut Conns, i: usize, now: u64) -> bool {
        if !self.is_shedding() {
            return false;
        }
        if self.admit.try_take(now) {
            conns.stats.lag.logons_paced.inc();
            return false;
        }
        conns.shared.overload.record_reject(Stage::LoopLag);
        let retry = conns.jitter(conns.shared.cfg.admission.retry_after);
        let busy = LogonRejectReason::BUSY;
        conns.with_session(i, now, |s, ctx| s.logon_rejected(busy, retry, ctx));
        true
    }

    /// A request on the shard: counted for its account; on a shedding
    /// shard, a request of one of the heaviest accounts ([`shares`]) gets
    /// Reject(overloaded), counted as a `loop_lag` shed; returns true if so.
    pub(super) fn shed_request(
        &mut self,
        conns: &mut Conns,
        i: usize,
        request_id: u64,
        template: u16,
    ) -> bool {
        let Some(account) = conns.slab.conns[i].as_ref().and_then(|c| c.account()) else {
            return false;
        };
        self.load.note(account);
        if !self.is_shedding() || !self.load.heavy(account) {
            return false;
        }
        conns.shared.overload.record_shed(ShedReason::LoopLag);
        let retry = conns.jitter(conns.shared.cfg.admission.retry_after);
        let reason = RejectReason::OVERLOADED;
        conns.reject(i, request_id, template, reason, retry, "loop lag");
        true
    }

    /// A lagging shard's price path: takes `n` prices off the ring (the
    /// caller read its fill, at most [`CONFLATE_BATCH`]) and sends each
    /// symbol's latest price from the price table once, flagged
    /// conflated; `hist` records each price's receive → shard latency.
    /// Returns the prices taken.
    pub(super) fn drain_conflated(
        &mut self,
        conns: &mut Conns,
        ring: &mut Consumer<Price>,
        hist: &mut Histogram<u64>,
        n: usize,
        now: u64,
    ) -> usize {
        let mut first = true;
        for _ in 0..n {
            let Ok(p) = ring.pop() else {
                break;
            };
            hist.saturating_record(now.saturating_sub(p.receive_time_ns).max(1));
            if std::mem::take(&mut first) {
                self.sample(conns, now.saturating_sub(p.engine_time_ns), now);
            }
            let s = p.symbol as usize;
            match self.owed.get_mut(s) {
                Some(owed) if !*owed => {
                    *owed = true;
                    self.owed_list.push(p.symbol);
                }
                _ => conns.stats.lag.conflated.inc(),
            }
        }
        for k in 0..self.owed_list.len() {
            let symbol = self.owed_list[k];
            self.owed[symbol as usize] = false;
            conns
                .fanout
                .on_latest(symbol, &mut conns.slab, &conns.stats, now);
        }
        self.owed_list.clear();
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const W: u64 = LAG_WINDOW_NS;

    /// Feeds one sample of `lag_ms` into each of `windows` windows from
    /// `*t` and closes each, returning the changes seen.
    fn run(d: &mut LagDetector, t: &mut u64, windows: u32, lag_ms: u64) -> Vec<LagChange> {
        let mut out = Vec::new();
        for _ in 0..windows {
            out.extend(d.sample(lag_ms * MS, *t + 1));
            *t += W;
            out.extend(d.tick(*t));
        }
        out
    }

    #[test]
    fn engages_after_three_windows_above_target_and_not_on_two() {
        let mut t = 0;
        let mut d = LagDetector::new(100 * MS, t);
        assert!(run(&mut d, &mut t, 5, 20).is_empty());
        // One window above (a stall), or two, then below: no shedding.
        assert!(run(&mut d, &mut t, 1, 4_000).is_empty());
        assert!(run(&mut d, &mut t, 2, 20).is_empty());
        assert!(run(&mut d, &mut t, 2, 150).is_empty());
        assert!(run(&mut d, &mut t, 1, 20).is_empty());
        assert!(!d.is_lagging());
        assert_eq!(run(&mut d, &mut t, 3, 150), vec![LagChange::Engaged]);
        assert!(d.is_lagging());
    }

    #[test]
    fn releases_only_after_ten_windows_at_or_below_target() {
        let mut t = 0;
        let mut d = LagDetector::new(100 * MS, t);
        run(&mut d, &mut t, 3, 300);
        assert!(d.is_lagging());
        // Above the target: still lagging, however long.
        assert!(run(&mut d, &mut t, 20, 130).is_empty());
        // Just under it (a busy host): released after ten windows.
        assert!(run(&mut d, &mut t, 9, 90).is_empty());
        // One window back above restarts the count.
        assert!(run(&mut d, &mut t, 1, 101).is_empty());
        assert!(run(&mut d, &mut t, 9, 100).is_empty());
        assert_eq!(run(&mut d, &mut t, 1, 100), vec![LagChange::Released]);
        assert!(!d.is_lagging());
    }

    #[test]
    fn window_value_is_the_largest_sample_and_windows_close_on_tick() {
        let mut d = LagDetector::new(100 * MS, 0);
        d.sample(5 * MS, 10 * MS);
        d.sample(40 * MS, 20 * MS);
        d.sample(7 * MS, 30 * MS);
        assert_eq!(d.windowed_ns(), 0, "window still open");
        assert_eq!(d.tick(W + MS), None);
        assert_eq!(d.windowed_ns(), 40 * MS);
        // An empty window closes at 0.
        d.tick(2 * W + 2 * MS);
        assert_eq!(d.windowed_ns(), 0);
    }

    #[test]
    fn target_zero_never_lags() {
        let mut t = 0;
        let mut d = LagDetector::new(0, t);
        assert!(run(&mut d, &mut t, 50, 10_000).is_empty());
        assert!(!d.is_lagging());
        assert_eq!(d.windowed_ns(), 10_000 * MS);
    }

    #[test]
    fn histogram_buckets_are_cumulative_in_seconds() {
        let s = LagStats::default();
        for ms in [0, 3, 3, 80, 700, 20_000] {
            s.record(ms * MS);
        }
        let h = s.snapshot();
        assert_eq!(h.count, 6);
        let at = |le: f64| h.buckets.iter().find(|b| b.0 == le).map(|b| b.1);
        assert_eq!(at(0.001), Some(1));
        assert_eq!(at(0.005), Some(3));
        assert_eq!(at(0.1), Some(4));
        assert_eq!(at(1.0), Some(5));
        assert_eq!(at(10.0), Some(5), "20 s is only in +Inf");
        assert!((h.sum - 20.786).abs() < 1e-6);
    }
}
