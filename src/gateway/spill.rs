//! Moving sessions off a busy shard 0 (`--threading shared`).
//!
//! With shared threading shard 0 also runs the ingest listener and the
//! engine. Its own sessions get each price without a cross-thread wake-up,
//! which is why the acceptor fills it first (`--shard0-fill`): at 10k
//! ticks/s that is worth a few per cent of p50. Under a heavy feed the
//! same thread becomes the bottleneck while the other shard idles: the
//! saturation sweep reached 706k ticks/s with the fill against 1.23M with
//! sessions spread from the first (BENCHMARKS.md, run 24).
//!
//! A session's placement is decided at accept, before anyone knows the
//! load, so the fill alone cannot be right for both. Each shard measures
//! the share of wall time its loop spends working ([`BusyMeter`]); while
//! shard 0's share is at or above `--shard0-spill-pct`, it moves one
//! session per window to the shard with the fewest until its sessions are
//! even with the others' ([`SpillPolicy`]), and the acceptor places new
//! sessions as if `--shard0-fill` were 0: the layout that measured best
//! under a heavy feed, reached once the feed is heavy.
//! A session with request answers in flight is not moved by the spill;
//! request-heavy sessions are drained instead (`drain.rs`), and go first.
//! Sessions are not moved back when the load falls: a move costs the
//! session nothing it can see, but moving back and forth on a load that
//! swings around the mark would.
//!
//! The move itself (`moves.rs`, `Shard::spill_one` and `Mover::adopt`) keeps
//! every update in sequence: the receiving shard's [`SymbolInterest`]
//! holds the session's symbols before shard 0 lets go of it, shard 0
//! drains its own ring first, and the receiver attaches the session before
//! it takes any price published after the hand-over.
//!
//! [`SymbolInterest`]: crate::engine::SymbolInterest

/// Share of wall time a shard's loop spends on turns that did work,
/// measured over windows of at least `window_ns`, and the share of that
/// work spent on request work (reading sessions' input, copying answers).
/// Time is given, never read, so the arithmetic is tested without a clock.
///
/// A turn's wall time includes any time its thread was not running (other
/// processes on the host, a stop): one turn preempted for 45 ms read as a
/// window 90 % busy, and the spill moved the price subscriber off the
/// engine's shard on a loaded host with nothing to do. So the busy time of
/// a window is capped by the CPU time the shard's thread ran in it
/// (`CLOCK_THREAD_CPUTIME_ID`, given to [`BusyMeter::roll`]); a thread that
/// spins idle (spinning wait strategies) runs without working turns, so the
/// worked time caps the CPU time in turn.
#[derive(Debug, Clone)]
pub struct BusyMeter {
    window_ns: u64,
    start_ns: u64,
    start_cpu_ns: u64,
    busy_ns: u64,
    request_ns: u64,
    request_permille: u32,
}

impl BusyMeter {
    /// A meter whose first window of `window_ns` starts at `now_ns`, when
    /// the shard's thread had run `cpu_ns`.
    pub fn new(window_ns: u64, now_ns: u64, cpu_ns: u64) -> Self {
        BusyMeter {
            window_ns: window_ns.max(1),
            start_ns: now_ns,
            start_cpu_ns: cpu_ns,
            busy_ns: 0,
            request_ns: 0,
            request_permille: 0,
        }
    }

    /// Request work inside a turn, from `from_ns` to `to_ns` (counted in
    /// [`BusyMeter::request_share`] only if the turn is counted as worked).
    #[inline]
    pub fn requests(&mut self, from_ns: u64, to_ns: u64) {
        self.request_ns += to_ns.saturating_sub(from_ns);
    }

    /// Of the last closed window's busy time, the share spent on request
    /// work, per-mille (at most 1000; 0 for a window without work).
    pub fn request_share(&self) -> u32 {
        self.request_permille
    }

    /// A turn that did work, from `from_ns` to `to_ns`.
    #[inline]
    pub fn worked(&mut self, from_ns: u64, to_ns: u64) {
        self.busy_ns += to_ns.saturating_sub(from_ns);
    }

    /// Closes the window once it has run its length, the shard's thread
    /// having run `cpu_ns` by `now_ns` (0: unknown, no cap): the busy share in per-mille (at
    /// most 1000) of the worked time capped by the CPU time run in the
    /// window, and a new window starts at `now_ns`.
    pub fn roll(&mut self, now_ns: u64, cpu_ns: u64) -> Option<u32> {
        let span = now_ns.saturating_sub(self.start_ns);
        if span < self.window_ns {
            return None;
        }
        let ran = cpu_ns.saturating_sub(self.start_cpu_ns);
        self.start_cpu_ns = cpu_ns;
        // 0: the clock could not be read; the worked time stands.
        let busy = if cpu_ns == 0 {
            self.busy_ns
        } else {
            self.busy_ns.min(ran)
        };
        let permille = (u128::from(busy) * 1000 / u128::from(span)).min(1000) as u32;
        self.request_permille = (u128::from(self.request_ns) * 1000)
            .checked_div(u128::from(self.busy_ns))
            .map_or(0, |p| p.min(1000) as u32);
        self.start_ns = now_ns;
        self.busy_ns = 0;
        self.request_ns = 0;
        Some(permille)
    }
}

/// One shard as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardLoad {
    /// The shard's index.
    pub index: usize,
    /// Sessions it holds now.
    pub sessions: u64,
    /// Room for one more session.
    pub has_room: bool,
}

/// When shard 0 gives a session away, and to whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillPolicy {
    /// Busy share (per-mille) at or above which shard 0 spills; 0 = never.
    pub threshold_permille: u32,
}

impl SpillPolicy {
    /// Whether shard 0 spills at all (a threshold above 0).
    pub fn enabled(&self) -> bool {
        self.threshold_permille > 0
    }

    /// True while a shard this busy should give its sessions away (and
    /// the acceptor should place new ones as if `--shard0-fill` were 0).
    pub fn is_busy(&self, busy_permille: u32) -> bool {
        self.enabled() && busy_permille >= self.threshold_permille
    }

    /// The shard to move one session to, given shard 0's busy share and
    /// sessions and the other shards: the one with the fewest sessions
    /// among those with room (ties to the higher index), while shard 0
    /// holds more than one session beyond it.
    ///
    /// A busy shard 0 evens its sessions out with the others: the layout
    /// `--shard0-fill 0` gives from the start, which measured best under
    /// heavy feeds (BENCHMARKS.md, runs 24 and 26). Emptying shard 0
    /// instead would leave one shard carrying every session and a
    /// cross-thread wake-up per price.
    pub fn target(&self, busy0: u32, sessions0: u64, others: &[ShardLoad]) -> Option<usize> {
        if !self.is_busy(busy0) {
            return None;
        }
        let b = fewest(others)?;
        (sessions0 > b.sessions + 1).then_some(b.index)
    }
}

/// The shard other than 0 with the fewest sessions among those with room,
/// ties to the higher index: where a moved session goes (also when a move
/// is asked for rather than measured).
pub fn fewest(others: &[ShardLoad]) -> Option<ShardLoad> {
    let mut best: Option<ShardLoad> = None;
    for s in others.iter().filter(|s| s.has_room && s.index != 0) {
        if best.is_none_or(|b| s.sessions <= b.sessions) {
            best = Some(*s);
        }
    }
    best
}

/// The spill's state on a shard: its busy meter and policy, and the move
/// decided by the last measurement or asked for by an operator.
pub(super) struct Spiller {
    pub(super) busy: BusyMeter,
    pub(super) policy: SpillPolicy,
    /// Decided by the last measurement: move one session there.
    pub(super) to: Option<usize>,
    /// Sessions still to move on an operator's request.
    forced: u32,
}

impl Spiller {
    /// A spill at `threshold_permille` (0: off) whose busy windows are
    /// `window_ns` long, the first starting at `now_ns`.
    pub(super) fn new(threshold_permille: u32, window_ns: u64, now_ns: u64) -> Spiller {
        Spiller {
            busy: BusyMeter::new(window_ns, now_ns, 0),
            policy: SpillPolicy { threshold_permille },
            to: None,
            forced: 0,
        }
    }

    /// A move is due (measured or asked for).
    pub(super) fn is_due(&self) -> bool {
        self.forced > 0 || self.to.is_some()
    }

    /// An operator asked for `n` more sessions to move.
    pub(super) fn ask(&mut self, n: u32) {
        self.forced = self.forced.saturating_add(n);
    }

    /// Nothing more is to move.
    pub(super) fn cancel(&mut self) {
        self.forced = 0;
        self.to = None;
    }

    /// A step tried a move: one fewer asked for if it `moved`, none
    /// asked for any more if it could not.
    pub(super) fn done(&mut self, moved: bool) {
        self.to = None;
        self.forced = if moved {
            self.forced.saturating_sub(1)
        } else {
            0
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn load(index: usize, sessions: u64) -> ShardLoad {
        ShardLoad {
            index,
            sessions,
            has_room: true,
        }
    }

    #[test]
    fn the_meter_reports_the_worked_share_of_each_full_window() {
        let mut m = BusyMeter::new(50 * MS, 1_000 * MS, 1_000 * MS);
        m.worked(1_000 * MS, 1_010 * MS);
        assert_eq!(m.roll(1_049 * MS, 1_049 * MS), None, "window not over");
        m.worked(1_040 * MS, 1_045 * MS);
        // 15 ms of 50.
        assert_eq!(m.roll(1_050 * MS, 1_050 * MS), Some(300));
        // A new window: nothing worked, a longer span than asked.
        assert_eq!(m.roll(1_130 * MS, 1_130 * MS), Some(0));
        // Work counted past the window's end (a long turn) is capped.
        m.worked(1_130 * MS, 1_200 * MS);
        assert_eq!(m.roll(1_180 * MS, 1_180 * MS), Some(1000));
        // Time that goes backwards counts as nothing.
        m.worked(1_300 * MS, 1_200 * MS);
        assert_eq!(m.roll(1_230 * MS, 1_230 * MS), Some(0));
    }

    #[test]
    fn a_turn_preempted_by_the_host_is_not_read_as_work() {
        let mut m = BusyMeter::new(50 * MS, 0, 7_000 * MS);
        // One turn took 45 ms of wall time, its thread ran 2 ms of it.
        m.worked(MS, 46 * MS);
        m.requests(MS, 2 * MS);
        assert_eq!(m.roll(50 * MS, 7_002 * MS), Some(40));
        // The next window: 30 ms worked, all of it running.
        m.worked(55 * MS, 85 * MS);
        assert_eq!(m.roll(100 * MS, 7_032 * MS), Some(600));
        // A thread that spins idle runs the whole window but works 5 ms.
        m.worked(110 * MS, 115 * MS);
        assert_eq!(m.roll(150 * MS, 7_082 * MS), Some(100));
    }

    #[test]
    fn the_meter_reports_the_request_share_of_the_busy_time() {
        let mut m = BusyMeter::new(50 * MS, 0, 0);
        assert_eq!(m.request_share(), 0, "no window closed yet");
        // 20 ms worked, 15 of them on requests.
        m.worked(0, 10 * MS);
        m.requests(2 * MS, 9 * MS);
        m.worked(20 * MS, 30 * MS);
        m.requests(21 * MS, 29 * MS);
        assert_eq!(m.roll(50 * MS, 50 * MS), Some(400));
        assert_eq!(m.request_share(), 750);
        // An idle window: no share.
        assert_eq!(m.roll(100 * MS, 100 * MS), Some(0));
        assert_eq!(m.request_share(), 0);
        // Request time beyond the worked time is capped.
        m.worked(100 * MS, 101 * MS);
        m.requests(100 * MS, 110 * MS);
        assert_eq!(m.roll(150 * MS, 150 * MS), Some(20));
        assert_eq!(m.request_share(), 1000);
    }

    #[test]
    fn off_never_spills() {
        let p = SpillPolicy {
            threshold_permille: 0,
        };
        assert!(!p.is_busy(1000));
        assert_eq!(p.target(1000, 9, &[load(1, 0)]), None);
    }

    #[test]
    fn a_busy_shard0_evens_its_sessions_out_with_the_fewest() {
        let p = SpillPolicy {
            threshold_permille: 500,
        };
        assert!(!p.is_busy(499) && p.is_busy(500));
        assert_eq!(p.target(499, 10, &[load(1, 0)]), None, "below the mark");
        let mut on = [10u64, 0];
        while let Some(k) = p.target(900, on[0], &[load(1, on[1])]) {
            on[0] -= 1;
            on[k] += 1;
        }
        assert_eq!(on, [5, 5]);
        // Odd: shard 0 keeps the extra one.
        assert_eq!(p.target(900, 6, &[load(1, 5)]), None);
        // Three shards: the fewest takes it, ties to the higher index.
        assert_eq!(p.target(900, 9, &[load(1, 4), load(2, 2)]), Some(2));
        assert_eq!(p.target(900, 9, &[load(1, 2), load(2, 2)]), Some(2));
        // A lone session stays.
        assert_eq!(p.target(900, 1, &[load(1, 0)]), None);
        assert_eq!(p.target(900, 0, &[load(1, 0)]), None);
        // Shard 0 itself is never a target.
        assert_eq!(p.target(900, 9, &[load(0, 0)]), None);
    }

    #[test]
    fn a_full_shard_gets_none() {
        let p = SpillPolicy {
            threshold_permille: 500,
        };
        let full = ShardLoad {
            has_room: false,
            ..load(1, 0)
        };
        assert_eq!(p.target(900, 9, &[full]), None);
        assert_eq!(p.target(900, 9, &[full, load(2, 3)]), Some(2));
    }
}
