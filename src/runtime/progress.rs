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
//! One word on a cache line of its own, one writer (the stage's thread),
//! one load per reader's turn; nothing allocates. The writer stores only
//! what a reader could tell apart: a mark it already holds is not stored
//! again, nor an idle mark within [`IDLE_REFRESH_NS`] of the one it holds,
//! so a stage that spins (`--engine-wait spin`) does not take the line
//! from its readers on every empty turn.

use super::sync::{AtomicU64, Ordering};

/// How long an idle mark vouches for its stage: the longest a host lets
/// an idle engine or listener wait between turns.
pub const IDLE_TRUST_NS: u64 = 100_000_000;

/// How stale an idle mark may be before the writer stores a new one: a
/// reader then trusts an idle stage for at least `IDLE_TRUST_NS` minus
/// this.
pub const IDLE_REFRESH_NS: u64 = 1_000_000;

/// The mark was set (an engine feeds this table).
const TRACKED: u64 = 1 << 63;
/// The turn that set it found no input.
const IDLE: u64 = 1 << 62;
/// The time bits (monotonic ns).
const TIME: u64 = IDLE - 1;

/// As of when a stage has taken everything it was given.
#[derive(Debug, Default)]
#[repr(align(64))]
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
        self.store_if_new(TRACKED | (as_of & TIME), 0);
    }

    /// A turn at `at` found no input: the stage is current until it
    /// turns again (trusted for [`IDLE_TRUST_NS`]).
    #[inline]
    pub fn idle(&self, at: u64) {
        self.store_if_new(TRACKED | IDLE | (at & TIME), IDLE_REFRESH_NS);
    }

    /// Stores `word` unless the mark holds the same kind of mark within
    /// `slack` ns of it (the writer's own load: no store, no line taken).
    #[inline]
    fn store_if_new(&self, word: u64, slack: u64) {
        let held = self.word.load(Ordering::Relaxed);
        let kind = TRACKED | IDLE;
        let same_kind = held & kind == word & kind;
        if same_kind && (word & TIME).wrapping_sub(held & TIME) < slack.max(1) {
            return;
        }
        self.word.store(word, Ordering::Release);
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

    #[test]
    fn an_idle_mark_is_refreshed_at_most_once_per_refresh_interval() {
        let p = Progress::new();
        p.idle(1_000);
        p.idle(1_000 + IDLE_REFRESH_NS - 1);
        let end = 1_000 + IDLE_TRUST_NS;
        assert_eq!(p.lag_ns(end + 5), 5, "still the mark of 1,000");
        p.idle(1_000 + IDLE_REFRESH_NS);
        assert_eq!(p.lag_ns(end + 5), 0, "refreshed");
        // A busy mark after an idle one, and the same busy mark again.
        p.caught_up(1_000 + IDLE_REFRESH_NS + 1);
        p.caught_up(1_000 + IDLE_REFRESH_NS + 1);
        assert_eq!(p.lag_ns(1_000 + IDLE_REFRESH_NS + 11), 10);
        // An older busy mark (the engine still behind) is stored too.
        p.caught_up(500);
        assert_eq!(p.lag_ns(1_500), 1_000);
        // An idle mark after a busy one is stored at once.
        p.idle(1_600);
        assert_eq!(p.lag_ns(1_600 + IDLE_TRUST_NS), 0);
    }
}
