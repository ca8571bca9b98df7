//! Full-jitter exponential backoff.
//!
//! `delay = max(floor, uniform(0, min(cap, base * 2^attempt)))`, inclusive
//! bounds, in milliseconds. Full jitter spreads a crowd of clients that all
//! failed in the same instant (a market-open reconnect, a provider restart)
//! evenly over the whole window instead of keeping them in lock-step.
//! Pure arithmetic on the caller's RNG: no allocation, no clock, no state.
//! Used by the client SDK reconnect loop, the FIX initiator and [`super::retry`].

use rand::Rng;

/// Exponential backoff window with full jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Window of the first retry (attempt 0).
    pub base_ms: u64,
    /// Largest window; the doubling stops here.
    pub cap_ms: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base_ms: 100,
            cap_ms: 10_000,
        }
    }
}

impl Backoff {
    /// A backoff whose first window is `base_ms` and largest `cap_ms`, in ms.
    pub const fn new(base_ms: u64, cap_ms: u64) -> Self {
        Backoff { base_ms, cap_ms }
    }

    /// Upper end of the jitter window for `attempt` (0-based):
    /// `min(cap_ms, base_ms * 2^attempt)`, saturating instead of overflowing.
    pub fn window_ms(&self, attempt: u32) -> u64 {
        let factor = 1u64.checked_shl(attempt).unwrap_or(u64::MAX);
        self.base_ms.saturating_mul(factor).min(self.cap_ms)
    }

    /// The delay before retry `attempt` (0-based): uniform in
    /// `[0, window_ms(attempt)]`, raised to `floor_ms` when the server asked
    /// for a later retry (its `retryAfterMs`). The floor is honoured even
    /// above `cap_ms`: the server knows its own recovery time better than our
    /// default cap does. Pass `floor_ms = 0` for no floor.
    pub fn delay_ms(&self, attempt: u32, floor_ms: u64, rng: &mut impl Rng) -> u64 {
        let jittered = rng.gen_range(0..=self.window_ms(attempt));
        jittered.max(floor_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn window_doubles_then_caps() {
        let b = Backoff::new(100, 1_000);
        let windows: Vec<u64> = (0..6).map(|a| b.window_ms(a)).collect();
        assert_eq!(windows, vec![100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(
            b.window_ms(64),
            1_000,
            "huge attempt saturates, no overflow"
        );
        assert_eq!(b.window_ms(u32::MAX), 1_000);
    }

    #[test]
    fn delays_are_bounded_by_the_window_and_cover_it() {
        let b = Backoff::new(50, 400);
        let mut rng = SmallRng::seed_from_u64(7);
        for attempt in 0..8 {
            let window = b.window_ms(attempt);
            let (mut lo, mut hi) = (u64::MAX, 0);
            for _ in 0..5_000 {
                let d = b.delay_ms(attempt, 0, &mut rng);
                assert!(
                    d <= window && d <= b.cap_ms,
                    "delay {d} above window {window}"
                );
                lo = lo.min(d);
                hi = hi.max(d);
            }
            // Full jitter: the samples reach both ends of the window.
            assert!(lo <= window / 20, "attempt {attempt}: min {lo} not near 0");
            assert!(
                hi >= window - window / 20,
                "attempt {attempt}: max {hi} not near {window}"
            );
        }
    }

    #[test]
    fn delays_spread_evenly_over_the_window() {
        let b = Backoff::new(1_000, 1_000);
        let mut rng = SmallRng::seed_from_u64(11);
        let mut halves = [0u32; 2];
        for _ in 0..10_000 {
            halves[(b.delay_ms(0, 0, &mut rng) >= 500) as usize] += 1;
        }
        assert!(
            halves[0].abs_diff(halves[1]) < 500,
            "uneven spread {halves:?}"
        );
    }

    #[test]
    fn floor_is_honoured_even_above_the_cap() {
        let b = Backoff::new(10, 100);
        let mut rng = SmallRng::seed_from_u64(3);
        for attempt in 0..5 {
            assert!(b.delay_ms(attempt, 60, &mut rng) >= 60);
            assert_eq!(b.delay_ms(attempt, 5_000, &mut rng), 5_000);
        }
    }

    #[test]
    fn zero_base_means_no_delay() {
        let b = Backoff::new(0, 100);
        let mut rng = SmallRng::seed_from_u64(1);
        assert_eq!(b.delay_ms(3, 0, &mut rng), 0);
    }
}
