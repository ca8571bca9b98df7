//! Token-bucket rate limiter in exact integer arithmetic.
//!
//! [`TokenBucket`] is pricewire's one token bucket — 32 bytes of plain
//! `Copy` state, embedded by the gateway's per-connection and per-address
//! limiters, admission's stage buckets and the request queue's per-account
//! buckets; [`RateLimiter`] wraps it with validated configuration and
//! counters (the retry budget).
//!
//! The level is kept in nano-tokens (1e-9 token): one nanosecond of elapsed
//! time adds exactly `rate_per_s` nano-tokens, and a take costs
//! [`NANO_TOKENS_PER_TOKEN`]. Integer units mean no float drift: after any
//! sequence of calls the number of tokens granted equals
//! `burst + floor(rate_per_s * elapsed_ns / 1e9)` exactly (for a bucket that
//! started full and never overflowed its burst). Generic over what it limits
//! (connection accepts, logons, per-account requests). No allocation after
//! construction; `try_take` never blocks. Single owner (`&mut self`);
//! counters are atomics in an `Arc` for the metrics thread.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::error::{invalid, ConfigError};
use super::NS_PER_S;

/// Fixed-point scale of the bucket level.
pub const NANO_TOKENS_PER_TOKEN: u64 = NS_PER_S;
/// Largest burst a bucket accepts, so the level fits in a `u64`.
pub const BURST_MAX: u64 = 1_000_000_000;
/// Largest rate a bucket accepts.
pub const RATE_PER_S_MAX: u64 = 1_000_000_000;

/// Counters of one limiter.
#[derive(Debug, Default)]
pub struct LimiterStats {
    /// Calls granted (a `try_take_n` counts once, whatever its `n`).
    pub taken: AtomicU64,
    /// Calls refused.
    pub rejected: AtomicU64,
}

/// A plain copy of [`LimiterStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimiterSnapshot {
    /// Calls granted.
    pub taken: u64,
    /// Calls refused.
    pub rejected: u64,
}

impl LimiterStats {
    /// Reads both counters (Relaxed).
    pub fn snapshot(&self) -> LimiterSnapshot {
        LimiterSnapshot {
            taken: self.taken.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
        }
    }
}

/// Time of the last refill before the first call (the bucket needs no
/// clock at construction).
const UNSET_NS: u64 = u64::MAX;

/// The bucket arithmetic: `rate_per_s` tokens per second, at most `burst`
/// stored, the level in nano-tokens. No validation and no counters: the
/// owner guarantees `burst >= 1`, `initial_tokens <= burst` and a burst
/// whose nano-tokens fit a `u64` (below 1.8e10): [`RateLimiter`] checks
/// [`BURST_MAX`] and [`RATE_PER_S_MAX`], the gateway's `u32` configuration
/// cannot exceed 4.3e9. Any `u64` rate is exact (the refill is `u128`).
#[derive(Debug, Clone, Copy)]
pub struct TokenBucket {
    level_nt: u64,
    capacity_nt: u64,
    rate_per_s: u64,
    /// Time of the last refill; [`UNSET_NS`] until the first call when the
    /// bucket was built without a clock reading.
    last_ns: u64,
}

impl TokenBucket {
    /// A bucket holding `initial_tokens`; `now_ns` starts its clock (`None`:
    /// the first call does).
    pub const fn with_level(
        rate_per_s: u64,
        burst: u64,
        initial_tokens: u64,
        now_ns: Option<u64>,
    ) -> TokenBucket {
        TokenBucket {
            level_nt: initial_tokens * NANO_TOKENS_PER_TOKEN,
            capacity_nt: burst * NANO_TOKENS_PER_TOKEN,
            rate_per_s,
            last_ns: match now_ns {
                Some(t) if t < UNSET_NS => t,
                Some(_) => UNSET_NS - 1,
                None => UNSET_NS,
            },
        }
    }

    /// A full bucket of `burst` tokens refilled at `rate_per_s`, its clock
    /// started at `now_ns` (a cold start admits a whole burst at once).
    /// `burst` must be at least 1 — a bucket that can never hold a token is
    /// a configuration error its owner refuses; `rate_per_s == 0` means
    /// "burst only, never refills".
    pub fn new(rate_per_s: u32, burst: u32, now_ns: u64) -> TokenBucket {
        assert!(burst > 0, "token bucket burst must be at least 1");
        let burst = u64::from(burst);
        TokenBucket::with_level(u64::from(rate_per_s), burst, burst, Some(now_ns))
    }

    /// Whether one token is available (after a [`refill`](Self::refill)).
    #[inline]
    pub fn has_token(&self) -> bool {
        self.has_tokens(1)
    }

    /// Takes one token; the caller checked [`has_token`](Self::has_token).
    #[inline]
    pub fn take(&mut self) {
        self.take_n(1);
    }

    /// Refills, then takes one token if there is one.
    #[inline]
    pub fn try_take(&mut self, now_ns: u64) -> bool {
        self.try_take_n(1, now_ns)
    }

    /// Tokens earned per second.
    pub fn rate_per_s(&self) -> u64 {
        self.rate_per_s
    }

    /// Bucket capacity in tokens: the largest burst.
    pub fn burst(&self) -> u64 {
        self.capacity_nt / NANO_TOKENS_PER_TOKEN
    }

    /// Adds the tokens earned since the last call. A clock that steps back
    /// adds nothing (and the later time is kept as the reference).
    #[inline]
    pub fn refill(&mut self, now_ns: u64) {
        let now_ns = now_ns.min(UNSET_NS - 1);
        if self.last_ns == UNSET_NS {
            self.last_ns = now_ns;
            return;
        }
        if now_ns <= self.last_ns {
            return;
        }
        // u128: a long idle period times a high rate overflows u64; the
        // bucket is full then anyway.
        let earned = u128::from(now_ns - self.last_ns) * u128::from(self.rate_per_s);
        let room = u128::from(self.capacity_nt - self.level_nt);
        self.level_nt += earned.min(room) as u64;
        self.last_ns = now_ns;
    }

    /// Whether `n` tokens are available (after a [`refill`](Self::refill)).
    #[inline]
    pub fn has_tokens(&self, n: u64) -> bool {
        self.level_nt >= n.saturating_mul(NANO_TOKENS_PER_TOKEN)
    }

    /// Takes `n` tokens; the caller checked [`has_tokens`](Self::has_tokens).
    #[inline]
    pub fn take_n(&mut self, n: u64) {
        debug_assert!(self.has_tokens(n));
        self.level_nt -= n * NANO_TOKENS_PER_TOKEN;
    }

    /// Refills, then takes `n` tokens if all are there (nothing otherwise).
    #[inline]
    pub fn try_take_n(&mut self, n: u64, now_ns: u64) -> bool {
        self.refill(now_ns);
        if !self.has_tokens(n) {
            return false;
        }
        self.take_n(n);
        true
    }

    /// Whole tokens available at `now_ns`.
    pub fn available(&mut self, now_ns: u64) -> u64 {
        self.refill(now_ns);
        self.level_nt / NANO_TOKENS_PER_TOKEN
    }

    /// Whether the bucket is full at `now_ns`: its state is then
    /// indistinguishable from a fresh bucket, so it may be forgotten.
    pub fn is_full(&mut self, now_ns: u64) -> bool {
        self.refill(now_ns);
        self.level_nt == self.capacity_nt
    }

    /// Nanoseconds one token takes to refill; `u64::MAX` when the bucket
    /// never refills by time. The basis of a rate's retry-after: a caller
    /// that waits it may send again at the rate (the next token's own
    /// [`wait_ns`](Self::wait_ns) may be far shorter).
    pub fn token_ns(&self) -> u64 {
        match self.rate_per_s {
            0 => u64::MAX,
            r => NANO_TOKENS_PER_TOKEN.div_ceil(r),
        }
    }

    /// Nanoseconds until one token is available (0 if one is now);
    /// `u64::MAX` when the bucket never refills by time.
    pub fn wait_ns(&mut self, now_ns: u64) -> u64 {
        self.refill(now_ns);
        let missing = NANO_TOKENS_PER_TOKEN.saturating_sub(self.level_nt);
        match (missing, self.rate_per_s) {
            (0, _) => 0,
            (_, 0) => u64::MAX,
            (m, r) => m.div_ceil(r),
        }
    }

    /// Adds `nano_tokens`, capped at the burst.
    pub fn deposit_nano_tokens(&mut self, nano_tokens: u64, now_ns: u64) {
        self.refill(now_ns);
        let room = self.capacity_nt - self.level_nt;
        self.level_nt += nano_tokens.min(room);
    }
}

/// A validated [`TokenBucket`] with counters: `rate_per_s` tokens per second,
/// at most `burst` stored.
#[derive(Debug)]
pub struct RateLimiter {
    bucket: TokenBucket,
    stats: Arc<LimiterStats>,
}

impl RateLimiter {
    /// A bucket that starts full (`burst` tokens available).
    pub fn new(rate_per_s: u64, burst: u64) -> Result<Self, ConfigError> {
        Self::with_initial_tokens(rate_per_s, burst, burst)
    }

    /// A bucket that starts with `initial_tokens` (at most `burst`).
    /// `rate_per_s` may be 0 for a bucket that only the owner refills
    /// through [`RateLimiter::deposit_nano_tokens`].
    pub fn with_initial_tokens(
        rate_per_s: u64,
        burst: u64,
        initial_tokens: u64,
    ) -> Result<Self, ConfigError> {
        if rate_per_s > RATE_PER_S_MAX {
            return Err(invalid(
                "rate_per_s",
                format!("{rate_per_s} above {RATE_PER_S_MAX}"),
            ));
        }
        if burst == 0 || burst > BURST_MAX {
            return Err(invalid("burst", format!("{burst} not in 1..={BURST_MAX}")));
        }
        if initial_tokens > burst {
            return Err(invalid(
                "initial_tokens",
                format!("{initial_tokens} above burst {burst}"),
            ));
        }
        Ok(RateLimiter {
            bucket: TokenBucket::with_level(rate_per_s, burst, initial_tokens, None),
            stats: Arc::new(LimiterStats::default()),
        })
    }

    /// Tokens earned per second.
    pub fn rate_per_s(&self) -> u64 {
        self.bucket.rate_per_s()
    }

    /// Bucket capacity in tokens: the largest burst.
    pub fn burst(&self) -> u64 {
        self.bucket.burst()
    }

    /// Shared counters for the metrics thread.
    pub fn stats(&self) -> Arc<LimiterStats> {
        Arc::clone(&self.stats)
    }

    /// Takes one token if available.
    #[inline]
    pub fn try_take(&mut self, now_ns: u64) -> bool {
        self.try_take_n(1, now_ns)
    }

    /// Takes `n` tokens if all are available; takes nothing otherwise.
    pub fn try_take_n(&mut self, n: u64, now_ns: u64) -> bool {
        let ok = self.bucket.try_take_n(n, now_ns);
        let counter = if ok {
            &self.stats.taken
        } else {
            &self.stats.rejected
        };
        counter.fetch_add(1, Relaxed);
        ok
    }

    /// Whole tokens available at `now_ns`.
    pub fn available(&mut self, now_ns: u64) -> u64 {
        self.bucket.available(now_ns)
    }

    /// Nanoseconds until one token is available (0 if one is now); the
    /// basis of a retry-after for a rejected caller. `u64::MAX` when the
    /// bucket never refills by time.
    pub fn wait_ns(&mut self, now_ns: u64) -> u64 {
        self.bucket.wait_ns(now_ns)
    }

    /// Adds `nano_tokens` (capped at `burst`), for buckets refilled by events
    /// rather than time, such as the retry budget's per-call deposit.
    pub fn deposit_nano_tokens(&mut self, nano_tokens: u64, now_ns: u64) {
        self.bucket.deposit_nano_tokens(nano_tokens, now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock, NS_PER_MS};

    #[test]
    fn burst_then_exact_rate() {
        let clock = ManualClock::new(1_000 * NS_PER_S);
        let mut b = RateLimiter::new(10, 5).unwrap();
        let granted = (0..20).filter(|_| b.try_take(clock.now_ns())).count();
        assert_eq!(granted, 5, "a full bucket grants exactly the burst");
        // 10/s = one token per 100 ms; 99 ms is not enough.
        clock.advance_ms(99);
        assert!(!b.try_take(clock.now_ns()));
        clock.advance_ms(1);
        assert!(b.try_take(clock.now_ns()));
        assert!(!b.try_take(clock.now_ns()));
        assert_eq!(
            b.stats().snapshot(),
            LimiterSnapshot {
                taken: 6,
                rejected: 17
            }
        );
    }

    #[test]
    fn no_drift_over_many_small_steps() {
        // 3 tokens/s with 1 ms steps: 1 ms earns 0.003 token, a fraction a
        // float accumulator would round; integer nano-tokens keep it exact.
        let clock = ManualClock::new(0);
        let mut b = RateLimiter::with_initial_tokens(3, 1_000, 0).unwrap();
        let mut granted = 0u64;
        b.try_take(clock.now_ns()); // first call only sets the reference
        for _ in 0..100_000 {
            clock.advance_ms(1);
            granted += b.try_take(clock.now_ns()) as u64;
        }
        assert_eq!(granted, 300, "100 s at 3/s is exactly 300 tokens");
    }

    #[test]
    fn burst_caps_the_level_after_a_long_idle() {
        let clock = ManualClock::new(0);
        let mut b = RateLimiter::new(1_000, 50).unwrap();
        b.try_take(clock.now_ns());
        clock.advance(std::time::Duration::from_secs(3_600));
        assert_eq!(b.available(clock.now_ns()), 50);
    }

    #[test]
    fn a_token_takes_a_second_over_the_rate_whatever_the_level() {
        let clock = ManualClock::new(0);
        let mut b = TokenBucket::new(200, 1, clock.now_ns());
        assert!(b.try_take_n(1, clock.now_ns()));
        clock.advance_ms(4);
        assert_eq!(b.token_ns(), 5 * NS_PER_MS, "not the 1 ms left");
        assert_eq!(TokenBucket::new(3, 1, 0).token_ns(), 333_333_334);
        assert_eq!(TokenBucket::new(0, 1, 0).token_ns(), u64::MAX);
    }

    #[test]
    fn wait_time_until_next_token() {
        let clock = ManualClock::new(0);
        let mut b = RateLimiter::with_initial_tokens(4, 1, 0).unwrap();
        assert_eq!(b.wait_ns(clock.now_ns()), 250 * NS_PER_MS);
        clock.advance_ms(100);
        assert_eq!(b.wait_ns(clock.now_ns()), 150 * NS_PER_MS);
        clock.advance_ms(150);
        assert_eq!(b.wait_ns(clock.now_ns()), 0);
    }

    #[test]
    fn clock_stepping_back_grants_nothing() {
        let mut b = RateLimiter::with_initial_tokens(1, 1, 0).unwrap();
        assert!(!b.try_take(10 * NS_PER_S));
        assert!(!b.try_take(5 * NS_PER_S));
        assert!(
            !b.try_take(10 * NS_PER_S),
            "the step back must not earn tokens"
        );
        assert!(b.try_take(11 * NS_PER_S));
    }

    #[test]
    fn invalid_config_is_refused() {
        assert!(RateLimiter::new(10, 0).is_err());
        assert!(RateLimiter::new(RATE_PER_S_MAX + 1, 1).is_err());
        assert!(RateLimiter::with_initial_tokens(1, 2, 3).is_err());
    }

    #[test]
    fn deposits_are_capped_at_burst() {
        let mut b = RateLimiter::with_initial_tokens(0, 2, 0).unwrap();
        b.deposit_nano_tokens(5 * NANO_TOKENS_PER_TOKEN, 0);
        assert_eq!(b.available(0), 2);
        assert_eq!(b.wait_ns(0), 0);
        assert!(b.try_take_n(2, 0));
        assert_eq!(b.wait_ns(0), u64::MAX);
    }
}
