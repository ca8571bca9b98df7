//! Progress marks: as of when a stage has taken everything it was given.
//! The engine's, beside its price table, says as of when the table holds
//! every tick; a feed's (the provider listener's, on its feed port) as of
//! when every quote its sockets had received is in its ring, which the
//! engine folds into its own.
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
//! An idle stage (a turn that found no input) vouches for itself until
//! it turns again: the dedicated engine loop turns at least every
//! [`crate::runtime::wait::IDLE_PARK_MAX_US`], a host thread wakes its
//! hosted engine for the stale sweep (`engine::STALE_SWEEP_NS`), and a
//! listener with a bridge wakes for its bridges' timers
//! (`feed::ingest`'s check, every 50 ms), so an idle mark is trusted for
//! [`IDLE_TRUST_NS`] and a stage that stops turning is seen behind by
//! then. What an idle stage does not see is input that came while it
//! waited to be scheduled, for at most that long.
//!
//! One word, one writer (the stage's thread), one store per turn and one
//! load per reader's turn; nothing allocates.

use super::sync::{AtomicU64, Ordering};

/// How long an idle mark vouches for its stage: the longest a host lets
/// an idle engine or listener wait between turns.
pub const IDLE_TRUST_NS: u64 = 100_000_000;

/// The mark was set (an engine feeds this table).
const TRACKED: u64 = 1 << 63;
/// The turn that set it found no input.
const IDLE: u64 = 1 << 62;
/// The time bits (monotonic ns).
const TIME: u64 = IDLE - 1;

/// As of when a stage has taken everything it was given.
#[derive(Debug, Default)]
pub struct Progress {
    word: AtomicU64,
}

impl Progress {
    /// Untracked: a stage that does not mark (an edge's table, a
    /// synthetic feed) is never behind by this mark.
    pub fn new() -> Progress {
        Progress::default()
    }

    /// Everything given before `as_of` was taken (for the engine: a turn
    /// that began then left every input ring empty, or the last such turn
    /// began then).
    #[inline]
    pub fn caught_up(&self, as_of: u64) {
        self.word.store(TRACKED | (as_of & TIME), Ordering::Release);
    }

    /// A turn at `at` found no input: the stage is current until it
    /// turns again (trusted for [`IDLE_TRUST_NS`]).
    #[inline]
    pub fn idle(&self, at: u64) {
        self.word
            .store(TRACKED | IDLE | (at & TIME), Ordering::Release);
    }

    /// Untracked again: the stage has finished (an engine whose feeds all
    /// ended: its table is final) or has nothing to take (a listener
    /// without a bridge).
    pub fn finished(&self) {
        self.word.store(0, Ordering::Release);
    }

    /// As of when, judged at `now`, the stage has taken everything it
    /// was given: `now` while untracked or idle within the trust, else
    /// the mark (for an idle mark, the end of its trust).
    #[inline]
    pub fn as_of(&self, now: u64) -> u64 {
        let w = self.word.load(Ordering::Acquire);
        if w & TRACKED == 0 {
            return now;
        }
        let t = w & TIME;
        if w & IDLE != 0 {
            now.min(t.saturating_add(IDLE_TRUST_NS))
        } else {
            now.min(t)
        }
    }

    /// How far behind what it was given by `now` the stage may be.
    #[inline]
    pub fn lag_ns(&self, now: u64) -> u64 {
        now - self.as_of(now)
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
