//! The engine's progress mark: as of when the price table holds
//! everything the engine was given.
//!
//! A shard sends the table's latest price (a resync, a new subscription's
//! snapshot, a conflated catch-up) judging it by its tick's age, which
//! says nothing about ticks the engine has not taken yet: an engine behind
//! its feed rings, or not scheduled at all while a shard on another core
//! runs, leaves the table behind the market with every price in it
//! looking as current as its symbol's last tick. The mark closes that:
//! the engine publishes the start of its last turn that left every input
//! ring empty (everything pushed before it is in the table), and a shard
//! that finds the mark older than its limit flags what it sends stale
//! until the engine catches up (`gateway::behind`).
//!
//! An idle engine (a turn that found no tick) vouches for its table
//! until it turns again: the dedicated loop turns at least every
//! [`crate::runtime::wait::IDLE_PARK_MAX_US`], and a host thread wakes
//! its hosted engine for the stale sweep, at most [`STALE_SWEEP_NS`]
//! apart, so an idle mark is trusted for [`IDLE_TRUST_NS`] and an engine
//! that stops turning is seen behind by then. What an idle engine does
//! not see is a tick pushed to it while it waits to be scheduled, for at
//! most that long.
//!
//! One word, one writer (the engine thread), one store per engine turn
//! and one load per shard turn; nothing allocates.

use crate::runtime::sync::{AtomicU64, Ordering};

use super::STALE_SWEEP_NS;

/// How long an idle mark vouches for the table: one stale sweep, the
/// longest a host lets its engine wait between turns.
pub const IDLE_TRUST_NS: u64 = STALE_SWEEP_NS;

/// The mark was set (an engine feeds this table).
const TRACKED: u64 = 1 << 63;
/// The turn that set it found no input.
const IDLE: u64 = 1 << 62;
/// The time bits (monotonic ns).
const TIME: u64 = IDLE - 1;

/// As of when the table holds every tick its engine was given.
#[derive(Debug, Default)]
pub struct Progress {
    word: AtomicU64,
}

impl Progress {
    /// Untracked: a table no engine marks (an edge's, a test's) is never
    /// behind by this mark.
    pub fn new() -> Progress {
        Progress::default()
    }

    /// A turn that began at `as_of` left every input ring empty, or (a
    /// turn that could not) the last such turn began then.
    #[inline]
    pub fn caught_up(&self, as_of: u64) {
        self.word.store(TRACKED | (as_of & TIME), Ordering::Release);
    }

    /// A turn at `at` found no input: the table is current until the
    /// engine turns again (trusted for [`IDLE_TRUST_NS`]).
    #[inline]
    pub fn idle(&self, at: u64) {
        self.word
            .store(TRACKED | IDLE | (at & TIME), Ordering::Release);
    }

    /// The engine has finished (every feed ended and its rings are
    /// drained): nothing more will change the table, which is final.
    pub fn finished(&self) {
        self.word.store(0, Ordering::Release);
    }

    /// How far the table may be behind what the engine was given by
    /// `now`: 0 while untracked or idle within the trust, else the time
    /// since the mark (for an idle mark, since its trust ran out).
    #[inline]
    pub fn lag_ns(&self, now: u64) -> u64 {
        let w = self.word.load(Ordering::Acquire);
        if w & TRACKED == 0 {
            return 0;
        }
        let since = now.saturating_sub(w & TIME);
        if w & IDLE != 0 {
            since.saturating_sub(IDLE_TRUST_NS)
        } else {
            since
        }
    }
}

#[cfg(all(test, not(pricewire_loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_untracked_table_is_never_behind() {
        let p = Progress::new();
        assert_eq!(p.lag_ns(u64::MAX), 0);
        p.caught_up(5);
        p.finished();
        assert_eq!(p.lag_ns(1_000_000_000_000), 0, "finished: final");
    }

    #[test]
    fn a_busy_mark_ages_from_its_turn_an_idle_one_after_its_trust() {
        let p = Progress::new();
        // The mark of time 0 is a mark (the monotonic clock starts at 0).
        p.caught_up(0);
        assert_eq!(p.lag_ns(0), 0);
        assert_eq!(p.lag_ns(7), 7);
        p.caught_up(1_000);
        assert_eq!(p.lag_ns(900), 0, "a reader's clock may be behind");
        assert_eq!(p.lag_ns(1_500), 500);
        p.idle(2_000);
        assert_eq!(p.lag_ns(2_000 + IDLE_TRUST_NS), 0);
        assert_eq!(p.lag_ns(2_000 + IDLE_TRUST_NS + 3), 3);
    }
}
