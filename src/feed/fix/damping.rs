//! Flap damping of one FIX provider, as BGP damps a flapping route
//! (RFC 2439), whatever the length of its sessions.
//!
//! Each logged-on session that delivered quotes and ends (other than by
//! our own shutdown) sooner than `flap_stable_ms` is a **flap** and adds
//! [`FLAP_PENALTY`] (1000) to the provider's penalty; the penalty halves
//! every `flap_half_life_ms` and never exceeds its ceiling
//! (`flap_reuse` x 2^(`flap_max_suppress_ms` / half-life)). At
//! `flap_suppress` the provider is **damped**: out of the best price
//! whatever its session does, until the penalty has decayed below
//! `flap_reuse` (hysteresis). While the penalty holds `n` flaps (the
//! penalty / 1000, rounded: one flap counts for a half-life):
//! - the **probation** a new session must stream before it re-enters the
//!   price is `probation_ms x 2^n`;
//! - while damped, each **reconnect** waits at least a window of
//!   `reconnect_base_ms x 2^(n-1)` (capped at `reconnect_cap_ms`), drawn
//!   uniformly in its upper half, so reconnects are spaced.
//!
//! So a provider whose sessions end early is in the price for at most
//! (s1 - p) + (s2 - 2p) in total (s1, s2 its first two session lengths, p
//! the probation) until it stops flapping: its second early end within a
//! half-life damps it (docs/fix.md "Flap damping").
//!
//! Time is the caller's monotonic `now_ns`; nothing allocates.

use rand::Rng;

use crate::clock::NS_PER_MS;
pub use crate::config::fix::damping::FLAP_PENALTY;
use crate::config::fix::FlapDamping;
use crate::resilience::Backoff;

/// The damping state of one provider.
#[derive(Debug, Clone)]
pub(crate) struct FlapDamper {
    cfg: FlapDamping,
    ceiling: f64,
    /// Penalty as of `at_ns`.
    penalty: f64,
    at_ns: u64,
    damped: bool,
    /// While damped: when the penalty falls below `reuse` if no flap
    /// comes first.
    reuse_at_ns: u64,
}

impl FlapDamper {
    pub(crate) fn new(cfg: FlapDamping) -> FlapDamper {
        FlapDamper {
            ceiling: cfg.ceiling(),
            cfg,
            penalty: 0.0,
            at_ns: 0,
            damped: false,
            reuse_at_ns: 0,
        }
    }

    /// The penalty at `now_ns`.
    pub(crate) fn penalty(&self, now_ns: u64) -> f64 {
        if self.penalty == 0.0 {
            return 0.0;
        }
        let half_lives = now_ns.saturating_sub(self.at_ns) as f64
            / (self.cfg.half_life_ms as f64 * NS_PER_MS as f64);
        self.penalty * (-half_lives).exp2()
    }

    /// Flaps the penalty holds at `now_ns`, rounded: one flap counts
    /// for a half-life (down to 500), two for about two.
    fn flaps_held(&self, now_ns: u64) -> u32 {
        (self.penalty(now_ns) / f64::from(FLAP_PENALTY)).round() as u32
    }

    /// A logged-on session that lasted `up_ns` ended at `now_ns` (not by
    /// our shutdown). True when it was a flap; `damped()` then says
    /// whether the provider is damped now.
    pub(crate) fn on_session_end(&mut self, up_ns: u64, now_ns: u64) -> bool {
        if self.cfg.stable_ms == 0 || up_ns >= self.cfg.stable_ms * NS_PER_MS {
            return false;
        }
        let p = (self.penalty(now_ns) + f64::from(FLAP_PENALTY)).min(self.ceiling);
        (self.penalty, self.at_ns) = (p, now_ns);
        if p >= f64::from(self.cfg.suppress) {
            self.damped = true;
        }
        if self.damped {
            let halvings = (p / f64::from(self.cfg.reuse)).log2().max(0.0);
            let ns = halvings * self.cfg.half_life_ms as f64 * NS_PER_MS as f64;
            self.reuse_at_ns = now_ns.saturating_add(ns.ceil() as u64);
        }
        true
    }

    /// Damped at `now_ns` (ends, by the timer, once the penalty has
    /// decayed below `reuse`). Returns `(damped, changed)`.
    pub(crate) fn update(&mut self, now_ns: u64) -> (bool, bool) {
        if self.damped && now_ns >= self.reuse_at_ns {
            self.damped = false;
            return (false, true);
        }
        (self.damped, false)
    }

    /// Damped as of the last [`FlapDamper::update`] or flap.
    pub(crate) fn damped(&self) -> bool {
        self.damped
    }

    /// Time left until damping ends if no flap comes first; 0 when not
    /// damped.
    pub(crate) fn damped_left_ns(&self, now_ns: u64) -> u64 {
        if self.damped {
            self.reuse_at_ns.saturating_sub(now_ns)
        } else {
            0
        }
    }

    /// The probation a session starting at `now_ns` must stream:
    /// `base_ms x 2^n` for the `n` whole flaps held, at most the longest
    /// damping (a provider is never kept out longer than that).
    pub(crate) fn probation_ms(&self, base_ms: u64, now_ns: u64) -> u64 {
        let n = self.flaps_held(now_ns).min(32);
        let grown = base_ms.saturating_mul(1u64 << n);
        if n == 0 {
            base_ms
        } else {
            grown.min(self.cfg.max_suppress_ms.max(base_ms))
        }
    }

    /// While damped, the least a reconnect waits: uniform in the upper
    /// half of `base x 2^(n-1)` (capped by the backoff's cap); 0 when not
    /// damped.
    pub(crate) fn reconnect_floor_ms(
        &self,
        backoff: &Backoff,
        now_ns: u64,
        rng: &mut impl Rng,
    ) -> u64 {
        if !self.damped {
            return 0;
        }
        let n = self.flaps_held(now_ns).max(1);
        let window = backoff.window_ms(n - 1);
        rng.gen_range(window / 2..=window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    const S: u64 = 1_000_000_000;

    fn damper() -> FlapDamper {
        FlapDamper::new(FlapDamping::default())
    }

    #[test]
    fn two_early_ends_within_a_half_life_damp_and_the_penalty_decays() {
        let mut d = damper();
        assert!(!d.on_session_end(60 * S, 10 * S), "a minute is stable");
        assert!(d.on_session_end(2 * S, 20 * S), "2 s: a flap");
        assert!(!d.damped(), "one flap is not flapping");
        assert_eq!(d.probation_ms(1_000, 20 * S), 2_000, "probation doubles");
        assert!(d.on_session_end(2 * S, 25 * S));
        assert!(d.damped(), "1000 x 2^(-5/60) + 1000 >= 1500");
        let p = d.penalty(25 * S);
        assert!((p - 1_943.9).abs() < 1.0, "{p}");
        // Decays to 750 after log2(p / 750) half-lives: ~82 s.
        let left = d.damped_left_ns(25 * S);
        assert!((81 * S..83 * S).contains(&left), "{left}");
        assert_eq!(d.update(25 * S + left - 1), (true, false));
        assert_eq!(d.update(25 * S + left), (false, true));
        assert!(d.penalty(25 * S + left) < 750.0 + 0.01);
        let end = 25 * S + left;
        assert_eq!(d.probation_ms(1_000, end), 2_000, "750 still holds a flap");
        assert_eq!(d.probation_ms(1_000, end + 60 * S), 1_000, "375: none");
    }

    #[test]
    fn flaps_two_half_lives_apart_never_damp_but_one_apart_do() {
        let mut d = damper();
        for k in 1..20 {
            assert!(d.on_session_end(10 * S, k * 121 * S));
            assert!(!d.damped(), "flap {k}: at most 1000 / (1 - 1/4) < 1500");
        }
        // Every 61 s the penalty settles at 1000 / (1 - 2^(-61/60)) > 1500:
        // a provider in the price 10 s a minute is flapping.
        let mut d = damper();
        let damped_at = (1..20).find(|&k| {
            d.on_session_end(10 * S, k * 61 * S);
            d.damped()
        });
        assert_eq!(damped_at, Some(3));
    }

    #[test]
    fn the_penalty_stops_at_the_ceiling_so_damping_ends_within_max_suppress() {
        let mut d = damper();
        for k in 0..1_000 {
            d.on_session_end(S, k * S);
        }
        assert!(d.penalty(999 * S) <= 24_000.0);
        let left = d.damped_left_ns(999 * S);
        assert!(left <= 300 * S, "{left}");
        assert_eq!(d.probation_ms(1_000, 999 * S), 300_000, "capped");
    }

    #[test]
    fn reconnects_of_a_damped_provider_are_spaced_and_grow() {
        let backoff = Backoff::new(500, 30_000);
        let mut rng = SmallRng::seed_from_u64(3);
        let mut d = damper();
        assert_eq!(d.reconnect_floor_ms(&backoff, 0, &mut rng), 0);
        d.on_session_end(S, 0);
        d.on_session_end(S, S);
        let f = d.reconnect_floor_ms(&backoff, S, &mut rng);
        assert!((500..=1_000).contains(&f), "two flaps held: {f}");
        for k in 2..40 {
            d.on_session_end(S, k * S);
        }
        let f = d.reconnect_floor_ms(&backoff, 39 * S, &mut rng);
        assert!((15_000..=30_000).contains(&f), "capped: {f}");
    }

    proptest::proptest! {
        /// Over any sequence of session ends (each `gap` after the last,
        /// lasting `up`) on the shipped defaults: the penalty never
        /// exceeds its ceiling; damping never has more than
        /// `flap_max_suppress_ms` left and has ended by then; two flaps
        /// within a half-life always damp; the probation stays within
        /// its bounds.
        #[test]
        fn damping_is_bounded_and_two_quick_flaps_always_damp(
            ends in proptest::collection::vec((0u64..200_000, 0u64..90_000), 1..60)
        ) {
            let cfg = FlapDamping::default();
            let mut d = FlapDamper::new(cfg);
            let max_ns = cfg.max_suppress_ms * NS_PER_MS;
            let (mut now, mut last_flap) = (S, None::<u64>);
            for (gap_ms, up_ms) in ends {
                now += gap_ms * NS_PER_MS;
                d.update(now);
                let flap = d.on_session_end(up_ms * NS_PER_MS, now);
                proptest::prop_assert_eq!(flap, up_ms < cfg.stable_ms);
                proptest::prop_assert!(d.penalty(now) <= d.ceiling + 1e-6);
                proptest::prop_assert!(d.damped_left_ns(now) <= max_ns + 1);
                if flap {
                    if let Some(t) = last_flap {
                        if now - t < cfg.half_life_ms * NS_PER_MS {
                            proptest::prop_assert!(d.damped(), "two flaps in a half-life");
                        }
                    }
                    last_flap = Some(now);
                }
                let p = d.probation_ms(1_000, now);
                proptest::prop_assert!((1_000..=cfg.max_suppress_ms).contains(&p));
            }
            let after = now + max_ns + 1;
            proptest::prop_assert_eq!(d.update(after).0, false, "over by max_suppress");
        }
    }

    #[test]
    fn stable_ms_zero_turns_damping_off() {
        let mut d = FlapDamper::new(FlapDamping {
            stable_ms: 0,
            ..FlapDamping::default()
        });
        for k in 0..10 {
            assert!(!d.on_session_end(1, k));
        }
        assert_eq!(d.penalty(10), 0.0);
    }
}
