//! When an edge tells its terminals that its prices are stale.
//!
//! An edge hears the bus or it does not: while it has no server, or no
//! price at all has arrived for longer than the max age (the core died
//! with no standby, or the bus is partitioned), the prices it holds may
//! no longer be current. The decision is a pure function of the times it
//! is given (the bus thread passes its monotonic clock's `now`), so it is
//! tested without waiting.

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
    /// When the last price arrived (or the watch started), monotonic ns.
    last_heard_ns: u64,
    /// The prices were flagged stale and no fresh one has come since.
    flagged: bool,
}

impl Staleness {
    /// A watch that starts fresh at `now_ns`.
    pub(crate) fn new(max_age_ms: u64, now_ns: u64) -> Staleness {
        Staleness {
            max_age_ns: max_age_ms.saturating_mul(1_000_000),
            last_heard_ns: now_ns,
            flagged: false,
        }
    }

    /// A price arrived from the bus at `now_ns`: the bus is alive again.
    #[inline]
    pub(crate) fn heard(&mut self, now_ns: u64) {
        self.last_heard_ns = now_ns;
        self.flagged = false;
    }

    /// True exactly once per silence: the first call at which nothing was
    /// heard for longer than the max age. The caller flags every price.
    pub(crate) fn due(&mut self, now_ns: u64) -> bool {
        if self.flagged || now_ns.saturating_sub(self.last_heard_ns) <= self.max_age_ns {
            return false;
        }
        self.flagged = true;
        true
    }

    /// True while the prices are flagged stale.
    #[cfg(test)]
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
        s.heard(6_000 * MS);
        assert!(!s.is_flagged());
        assert!(!s.due(6_400 * MS));
        assert!(s.due(6_501 * MS), "a new silence is flagged again");
    }

    #[test]
    fn a_clock_going_backwards_is_not_a_silence() {
        let mut s = Staleness::new(100, 1_000 * MS);
        assert!(!s.due(0));
    }
}
