//! Whether a core's feeds are healthy enough for it to lead, with
//! hysteresis, over injected time.
//!
//! A core's feed health is what its own engine says: the number of
//! symbols whose latest price is not stale (the engine flags a price
//! stale once no healthy provider has quoted it within its max quote age,
//! so a feed that is cut, unreachable or silent shows here within that
//! age). The bus thread sees every price the engine produces (the ring
//! it drains), so the count costs one flag test per price.
//!
//! Rules, so that one gap in a feed does not move leadership back and
//! forth:
//! - a standby may take the lease only after some symbol has been fresh
//!   for [`HEALTHY_HOLD_MS`] without a break (a core whose providers are
//!   unreachable has no fresh symbol and never takes it);
//! - a leader keeps it until no symbol has been fresh for
//!   [`UNHEALTHY_HOLD_MS`], then hands it on (`bus::lease`).

/// A standby's feeds must have been healthy this long before it leads.
pub const HEALTHY_HOLD_MS: u64 = 500;
/// A leader's feeds must have been unhealthy this long before it yields.
pub const UNHEALTHY_HOLD_MS: u64 = 1_000;

const MS: u64 = 1_000_000;

/// The fresh-symbol count and its history.
#[derive(Debug, Clone)]
pub struct FeedHealth {
    /// Per symbol: its latest engine price is not stale.
    fresh: Vec<bool>,
    fresh_count: u32,
    /// Since when the count has been above zero (or zero), monotonic ns.
    since_ns: u64,
}

impl FeedHealth {
    /// `symbols` symbols, none priced yet, at `now_ns`.
    pub fn new(symbols: usize, now_ns: u64) -> FeedHealth {
        FeedHealth {
            fresh: vec![false; symbols],
            fresh_count: 0,
            since_ns: now_ns,
        }
    }

    /// The engine published a price of `symbol`, stale or not, at `now_ns`.
    #[inline]
    pub fn on_price(&mut self, symbol: usize, stale: bool, now_ns: u64) {
        let Some(f) = self.fresh.get_mut(symbol) else {
            return;
        };
        if *f != stale {
            return;
        }
        *f = !stale;
        let before = self.fresh_count > 0;
        if stale {
            self.fresh_count -= 1;
        } else {
            self.fresh_count += 1;
        }
        if before != (self.fresh_count > 0) {
            self.since_ns = now_ns;
        }
    }

    /// Symbols whose latest price is fresh.
    pub fn fresh_symbols(&self) -> u32 {
        self.fresh_count
    }

    /// Whether a core that `leads` (or not) should hold the lease at
    /// `now_ns`: a standby once some symbol has been fresh for
    /// [`HEALTHY_HOLD_MS`], a leader until none has been for
    /// [`UNHEALTHY_HOLD_MS`].
    pub fn may_lead(&self, leads: bool, now_ns: u64) -> bool {
        let held = now_ns.saturating_sub(self.since_ns);
        match (leads, self.fresh_count > 0) {
            (false, true) => held >= HEALTHY_HOLD_MS * MS,
            (false, false) => false,
            (true, true) => true,
            (true, false) => held < UNHEALTHY_HOLD_MS * MS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_with_no_fresh_price_never_leads() {
        let h = FeedHealth::new(3, 0);
        assert!(!h.may_lead(false, 10_000 * MS));
        assert_eq!(h.fresh_symbols(), 0);
    }

    #[test]
    fn a_standby_leads_only_after_its_feed_held_up() {
        let mut h = FeedHealth::new(3, 0);
        h.on_price(1, false, 100 * MS);
        assert!(!h.may_lead(false, 599 * MS));
        assert!(h.may_lead(false, 600 * MS));
        // A break restarts the hold.
        h.on_price(1, true, 700 * MS);
        h.on_price(1, false, 750 * MS);
        assert!(!h.may_lead(false, 1_000 * MS));
        assert!(h.may_lead(false, 1_250 * MS));
    }

    #[test]
    fn a_leader_yields_only_after_its_feeds_stayed_stale() {
        let mut h = FeedHealth::new(2, 0);
        h.on_price(0, false, 0);
        h.on_price(1, false, 0);
        h.on_price(0, true, 10 * MS);
        assert_eq!(h.fresh_symbols(), 1);
        assert!(h.may_lead(true, 5_000 * MS), "one fresh symbol is enough");
        h.on_price(1, true, 6_000 * MS);
        assert!(h.may_lead(true, 6_999 * MS));
        assert!(!h.may_lead(true, 7_000 * MS));
        // Repeated stale prices do not restart the clock.
        h.on_price(1, true, 6_900 * MS);
        assert!(!h.may_lead(true, 7_000 * MS));
        assert!(h.may_lead(true, 7_000 * MS) == h.may_lead(true, 7_001 * MS));
    }

    #[test]
    fn an_unknown_symbol_is_ignored() {
        let mut h = FeedHealth::new(1, 0);
        h.on_price(9, false, 0);
        assert_eq!(h.fresh_symbols(), 0);
    }
}
