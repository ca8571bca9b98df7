//! The leader lease of cores, as a state machine over injected time.
//!
//! Cores share one key in a NATS KV bucket whose entries expire after the
//! lease period (`max_age`). A core takes the lease by creating the key
//! (only possible while it is absent or expired) and keeps it by updating
//! it with compare-and-set on the revision it last wrote, every third of
//! the period. The revision it created the key at is its **epoch**: every
//! price it publishes carries it, and edges drop prices of an older epoch.
//!
//! Fencing: a core publishes only while its last successful renewal is
//! younger than three quarters of the period, so it stops before the key
//! can expire and another core can take it, even when it cannot reach
//! NATS at all (then it cannot learn that it lost the lease). This type
//! does no I/O: the bus thread performs the KV calls and reports results.

/// Where a core stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Not holding it: try to create the key when [`Lease::acquire_due`].
    Standby,
    /// Holding it since `epoch` (the key's revision at creation).
    Leader {
        /// The revision the key was created at: stamped on every price.
        epoch: u64,
        /// The revision last written (what the next renewal compares).
        revision: u64,
    },
}

/// The lease as seen by one core.
#[derive(Debug, Clone)]
pub struct Lease {
    ttl_ns: u64,
    state: LeaseState,
    /// When the key was last written by us (created or renewed).
    renewed_ns: u64,
    /// When the last attempt (acquire or renew) was made.
    tried_ns: Option<u64>,
}

impl Lease {
    /// A standby core with a lease period of `ttl_ns` (> 0).
    pub fn new(ttl_ns: u64) -> Lease {
        assert!(ttl_ns > 0, "lease period must be positive");
        Lease {
            ttl_ns,
            state: LeaseState::Standby,
            renewed_ns: 0,
            tried_ns: None,
        }
    }

    /// Where this core stands now.
    pub fn state(&self) -> LeaseState {
        self.state
    }

    /// The epoch to stamp on prices, if this core may publish at `now_ns`.
    pub fn publishing_epoch(&self, now_ns: u64) -> Option<u64> {
        match self.state {
            LeaseState::Leader { epoch, .. }
                if now_ns.saturating_sub(self.renewed_ns) < self.ttl_ns / 4 * 3 =>
            {
                Some(epoch)
            }
            _ => None,
        }
    }

    fn attempt_due(&self, now_ns: u64, every_ns: u64) -> bool {
        self.tried_ns
            .is_none_or(|t| now_ns.saturating_sub(t) >= every_ns)
    }

    /// A standby should try to create the key now (every third period).
    pub fn acquire_due(&self, now_ns: u64) -> bool {
        self.state == LeaseState::Standby && self.attempt_due(now_ns, self.ttl_ns / 3)
    }

    /// The leader should renew now (a third of the period after the last
    /// write, then every tenth while renewals fail).
    pub fn renew_due(&self, now_ns: u64) -> bool {
        matches!(self.state, LeaseState::Leader { .. })
            && now_ns.saturating_sub(self.renewed_ns) >= self.ttl_ns / 3
            && self.attempt_due(now_ns, self.ttl_ns / 10)
    }

    /// An acquire or renew attempt starts at `now_ns`.
    pub fn tried(&mut self, now_ns: u64) {
        self.tried_ns = Some(now_ns);
    }

    /// The key was created at `revision`: this core leads from now on.
    pub fn acquired(&mut self, revision: u64, now_ns: u64) {
        self.state = LeaseState::Leader {
            epoch: revision,
            revision,
        };
        self.renewed_ns = now_ns;
    }

    /// The compare-and-set renewal wrote `revision`.
    pub fn renewed(&mut self, revision: u64, now_ns: u64) {
        if let LeaseState::Leader { epoch, .. } = self.state {
            self.state = LeaseState::Leader { epoch, revision };
            self.renewed_ns = now_ns;
        }
    }

    /// The key holds another core's revision (or is gone): step down.
    pub fn lost(&mut self) {
        self.state = LeaseState::Standby;
    }

    /// The revision a renewal must compare against.
    pub fn revision(&self) -> Option<u64> {
        match self.state {
            LeaseState::Leader { revision, .. } => Some(revision),
            LeaseState::Standby => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_standby_tries_every_third_period_and_never_publishes() {
        let mut l = Lease::new(3_000 * MS);
        assert!(l.acquire_due(0));
        l.tried(0);
        assert!(!l.acquire_due(999 * MS));
        assert!(l.acquire_due(1_000 * MS));
        assert_eq!(l.publishing_epoch(0), None);
        assert!(!l.renew_due(10_000 * MS));
    }

    #[test]
    fn a_leader_publishes_with_its_epoch_and_renews_each_third() {
        let mut l = Lease::new(3_000 * MS);
        l.tried(0);
        l.acquired(42, 0);
        assert_eq!(l.publishing_epoch(1), Some(42));
        assert!(!l.renew_due(999 * MS));
        assert!(l.renew_due(1_000 * MS));
        l.tried(1_000 * MS);
        l.renewed(43, 1_000 * MS);
        assert_eq!(l.revision(), Some(43));
        assert_eq!(l.publishing_epoch(3_000 * MS), Some(42), "epoch stays");
        assert!(!l.acquire_due(5_000 * MS), "a leader does not acquire");
    }

    #[test]
    fn a_leader_that_cannot_renew_stops_before_the_key_expires() {
        let mut l = Lease::new(3_000 * MS);
        l.acquired(7, 0);
        // Renewals fail (no NATS): retried every tenth of the period.
        l.tried(1_000 * MS);
        assert!(!l.renew_due(1_200 * MS));
        assert!(l.renew_due(1_300 * MS));
        assert_eq!(l.publishing_epoch(2_249 * MS), Some(7));
        assert_eq!(l.publishing_epoch(2_250 * MS), None, "fenced at 3/4");
        l.lost();
        assert_eq!(l.state(), LeaseState::Standby);
        assert_eq!(l.publishing_epoch(2_251 * MS), None);
    }
}
