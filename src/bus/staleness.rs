//! When an edge tells its terminals that its prices are stale.
//!
//! An edge hears the bus or it does not. It counts as hearing it on every
//! valid price and every heartbeat ([`super::heartbeat`]) of the current
//! lease epoch: the newest epoch seen, which moves on when a core that
//! took the lease speaks; an older epoch's messages (a core that lost the
//! lease) are not admitted and keep nothing alive. So a quiet market with
//! a live core is not stale (its heartbeats keep coming), while a dead
//! core with no standby, or a bus the edge cannot reach, goes stale once
//! nothing of the current epoch was heard for longer than the max age.
//! The decision is a pure function of the times and epochs it is given
//! (the bus thread passes its monotonic clock's `now`), so it is tested
//! without waiting.

/// Default max age of an edge's prices without news from the bus, in
/// milliseconds (the engine's own max quote age by default).
pub const MAX_AGE_MS_DEFAULT: u64 = 2_000;
/// Shortest `--bus-max-age-ms`.
pub const MAX_AGE_MS_MIN: u64 = 100;
/// Longest `--bus-max-age-ms`.
pub const MAX_AGE_MS_MAX: u64 = 600_000;

/// The bus's liveness as seen by one edge.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Staleness {
    max_age_ns: u64,
    /// When a price or heartbeat of the current epoch last arrived (or the
    /// watch started), monotonic ns.
    last_heard_ns: u64,
    /// The newest lease epoch heard.
    epoch: u64,
    /// The prices were flagged stale and nothing was heard since.
    flagged: bool,
}

impl Staleness {
    /// A watch that starts fresh at `now_ns`, having heard no epoch yet.
    pub(crate) fn new(max_age_ms: u64, now_ns: u64) -> Staleness {
        Staleness {
            max_age_ns: max_age_ms.saturating_mul(1_000_000),
            last_heard_ns: now_ns,
            epoch: 0,
            flagged: false,
        }
    }

    /// True if a message of `epoch` may be taken: not older than the
    /// newest epoch heard.
    #[inline]
    pub(crate) fn admits(&self, epoch: u64) -> bool {
        epoch >= self.epoch
    }

    /// A valid price or heartbeat of `epoch` arrived at `now_ns`: the bus
    /// is alive, and `epoch` is now the newest heard. Returns false (and
    /// changes nothing) for an epoch older than that.
    #[inline]
    pub(crate) fn heard(&mut self, epoch: u64, now_ns: u64) -> bool {
        if !self.admits(epoch) {
            return false;
        }
        self.epoch = epoch;
        self.last_heard_ns = now_ns;
        self.flagged = false;
        true
    }

    /// True exactly once per silence: the first call at which nothing of
    /// the current epoch was heard for longer than the max age. The caller
    /// flags every price.
    pub(crate) fn due(&mut self, now_ns: u64) -> bool {
        if self.flagged || now_ns.saturating_sub(self.last_heard_ns) <= self.max_age_ns {
            return false;
        }
        self.flagged = true;
        true
    }

    /// The newest lease epoch heard (0 before any).
    #[cfg(test)]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// True while the prices are flagged stale (nothing of the current
    /// epoch heard since they were).
    pub(crate) fn is_flagged(&self) -> bool {
        self.flagged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn due_once_per_silence_after_the_max_age() {
        let mut s = Staleness::new(500, 1_000 * MS);
        assert!(!s.due(1_500 * MS), "exactly the max age is not past it");
        assert!(s.due(1_501 * MS));
        assert!(s.is_flagged());
        assert!(!s.due(5_000 * MS), "flagged once per silence");
        assert!(s.heard(1, 6_000 * MS));
        assert!(!s.is_flagged());
        assert!(!s.due(6_400 * MS));
        assert!(s.due(6_501 * MS), "a new silence is flagged again");
    }

    #[test]
    fn a_clock_going_backwards_is_not_a_silence() {
        let mut s = Staleness::new(100, 1_000 * MS);
        assert!(!s.due(0));
    }

    #[test]
    fn a_quiet_market_with_a_live_core_is_never_stale() {
        // No price for a minute; heartbeats of epoch 5 every 500 ms.
        let mut s = Staleness::new(2_000, 0);
        assert!(s.heard(5, 0), "the last price");
        for beat in 1..=120u64 {
            let t = beat * 500 * MS;
            assert!(!s.due(t - MS), "stale at {} ms", t / MS);
            assert!(s.heard(5, t));
        }
        assert!(!s.is_flagged());
    }

    #[test]
    fn a_dead_core_goes_stale_one_max_age_after_its_last_heartbeat() {
        let mut s = Staleness::new(2_000, 0);
        for beat in 0..=10u64 {
            assert!(s.heard(5, beat * 500 * MS));
        }
        // The core dies after its heartbeat at 5 s: nothing more.
        assert!(!s.due(7_000 * MS));
        assert!(s.due(7_001 * MS), "stale after the max age");
        assert!(!s.due(9_000 * MS), "once per silence");
    }

    #[test]
    fn an_older_epoch_keeps_nothing_alive() {
        let mut s = Staleness::new(1_000, 0);
        assert!(s.heard(8, 0));
        assert!(!s.admits(7));
        // A core that lost the lease keeps sending: not heard.
        for t in 1..=30u64 {
            assert!(!s.heard(7, t * 100 * MS));
        }
        assert_eq!(s.epoch(), 8);
        assert!(s.due(1_001 * MS), "the old epoch's heartbeats are ignored");
        assert!(!s.heard(7, 3_100 * MS), "nor do they clear the flag");
        assert!(s.is_flagged());
    }

    #[test]
    fn a_takeover_moves_the_epoch_on_and_fences_the_old_core() {
        let mut s = Staleness::new(1_000, 0);
        assert!(s.heard(5, 0));
        assert!(s.heard(5, 400 * MS));
        // The leader dies; the standby takes the lease at epoch 9 within
        // the max age and its heartbeats keep the edge fresh.
        assert!(!s.due(1_300 * MS));
        assert!(s.admits(9));
        assert!(s.heard(9, 1_300 * MS));
        assert_eq!(s.epoch(), 9);
        assert!(!s.due(2_200 * MS));
        // The old leader comes back from a pause, still stamping epoch 5:
        // not admitted, and it does not keep the edge fresh.
        assert!(!s.admits(5));
        assert!(!s.heard(5, 2_250 * MS));
        // The new leader dies too: stale one max age after its last word.
        assert!(!s.due(2_300 * MS));
        assert!(s.due(2_301 * MS));
    }
}
