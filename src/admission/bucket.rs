//! The jittered retry-after window every reject draws from, and tests of
//! the token bucket as admission uses it.
//!
//! The bucket itself is pricewire's one token bucket,
//! [`crate::resilience::TokenBucket`] (re-exported by admission): 32 bytes
//! of plain state on injected nanoseconds that allocates nothing, never
//! blocks and decides only from the `now_ns` it is given. Per-connection and
//! per-address buckets are counted by their owners.

use rand::Rng;

pub use crate::resilience::TokenBucket;

/// The window a jittered retry-after is drawn from, uniformly, inclusive.
/// A fixed retry-after would bring every rejected client back in the same
/// millisecond; a window spreads the herd across it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryWindow {
    /// Shortest retry-after, in milliseconds.
    pub min_ms: u32,
    /// Longest retry-after, in milliseconds; usable windows have
    /// `min_ms <= max_ms` and `max_ms > 0` ([`RetryWindow::is_valid`]).
    pub max_ms: u32,
}

impl RetryWindow {
    /// `min_ms..=max_ms`; not checked here, see [`RetryWindow::is_valid`].
    pub const fn new(min_ms: u32, max_ms: u32) -> RetryWindow {
        RetryWindow { min_ms, max_ms }
    }

    /// Whether the window is usable (non-empty and not zero-only).
    pub fn is_valid(&self) -> bool {
        self.min_ms <= self.max_ms && self.max_ms > 0
    }

    /// One uniform draw from `[min_ms, max_ms]`.
    #[inline]
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> u32 {
        debug_assert!(self.min_ms <= self.max_ms);
        rng.gen_range(self.min_ms..=self.max_ms)
    }
}

/// Longest retry-after [`refill_retry_ms`] gives (a bucket that refills
/// slower than this or never).
pub const REFILL_RETRY_MAX_MS: u32 = 60_000;

/// The retry-after of a refusal by a token bucket whose tokens take
/// `token_ns` each to refill ([`TokenBucket::token_ns`]): one to two
/// refills, that time times a uniform draw from [1, 2], rounded up to
/// whole ms, at least 1 ms, at most [`REFILL_RETRY_MAX_MS`]. Honouring it
/// costs a client one or two refills (10–20 ms at 100/s), not seconds; it
/// then finds a token whatever the bucket held when refused, and the
/// clients refused at one moment spread over the next refill instead of
/// coming back together.
pub fn refill_retry_ms<R: Rng + ?Sized>(token_ns: u64, rng: &mut R) -> u32 {
    let max_ns = u64::from(REFILL_RETRY_MAX_MS) * 1_000_000;
    let base = token_ns.clamp(1, max_ns);
    let ns = base.saturating_add(rng.gen_range(0..=base));
    let ms = ns
        .div_ceil(1_000_000)
        .clamp(1, u64::from(REFILL_RETRY_MAX_MS));
    ms as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::NS_PER_MS;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn bucket_starts_full_and_empties_after_burst() {
        let mut b = TokenBucket::new(10, 5, 0);
        for _ in 0..5 {
            assert!(b.try_take(0));
        }
        assert!(!b.try_take(0));
    }

    #[test]
    fn bucket_refills_exactly_at_rate() {
        // 3 per second: one token every 333.33.. ms, exact in nano-tokens.
        let mut b = TokenBucket::new(3, 1, 0);
        assert!(b.try_take(0));
        assert!(!b.try_take(333 * NS_PER_MS));
        assert!(b.try_take(333_333_334));
        // The bucket was full at 333_333_334 (burst 1), so the 2 nano-tokens
        // earned past the full token were lost: the next is due a full
        // 333_333_334 ns later.
        assert!(!b.try_take(666_666_667));
        assert!(b.try_take(666_666_668));
    }

    #[test]
    fn bucket_never_exceeds_burst_after_idle() {
        let mut b = TokenBucket::new(1_000_000, 7, 0);
        assert_eq!(b.available(u64::MAX / 2), 7);
        assert!(b.is_full(u64::MAX / 2));
    }

    #[test]
    fn bucket_ignores_clock_going_back() {
        let mut b = TokenBucket::new(1, 1, 10 * NS_PER_MS);
        assert!(b.try_take(10 * NS_PER_MS));
        assert!(!b.try_take(0));
        assert!(!b.try_take(10 * NS_PER_MS + 999 * NS_PER_MS));
        assert!(b.try_take(10 * NS_PER_MS + 1000 * NS_PER_MS));
    }

    #[test]
    fn zero_rate_bucket_is_burst_only() {
        let mut b = TokenBucket::new(0, 2, 0);
        assert!(b.try_take(0));
        assert!(b.try_take(1_000 * NS_PER_MS));
        assert!(!b.try_take(u64::MAX));
    }

    #[test]
    fn bucket_stays_32_bytes() {
        // Embedded per connection and per address-table entry.
        assert_eq!(std::mem::size_of::<TokenBucket>(), 32);
    }

    #[test]
    fn refill_retry_is_one_to_two_refills_and_spreads() {
        let mut rng = SmallRng::seed_from_u64(3);
        // 100/s: a token takes 10 ms.
        let draws: Vec<u32> = (0..2000)
            .map(|_| refill_retry_ms(10 * NS_PER_MS, &mut rng))
            .collect();
        assert!(draws.iter().all(|d| (10..=20).contains(d)), "{draws:?}");
        assert!(*draws.iter().min().unwrap() <= 11);
        assert!(*draws.iter().max().unwrap() >= 19);
        // A zero refill time: at least 1 ms.
        assert!((1..=1).contains(&refill_retry_ms(0, &mut rng)));
        // A bucket that never refills: capped.
        assert_eq!(refill_retry_ms(u64::MAX, &mut rng), REFILL_RETRY_MAX_MS);
    }

    #[test]
    fn retry_window_draws_stay_inside_and_spread() {
        let w = RetryWindow::new(3000, 8000);
        let mut rng = SmallRng::seed_from_u64(7);
        let draws: Vec<u32> = (0..2000).map(|_| w.draw(&mut rng)).collect();
        assert!(draws.iter().all(|d| (3000..=8000).contains(d)));
        assert!(*draws.iter().min().unwrap() < 3100);
        assert!(*draws.iter().max().unwrap() > 7900);
    }
}
