//! Resilience building blocks for calls to dependencies (provider feeds,
//! reference data) and for admission: circuit breaker, bulkhead, retry with a
//! budget, full-jitter backoff, token-bucket limiter, XFetch early refresh,
//! and a fault-injection TCP proxy for drills and tests.
//!
//! Contract shared by every block except [`proxy`]:
//! - **Time is injected.** Every decision takes `now_ns` (monotonic
//!   nanoseconds from a [`crate::clock::Clock`]); nothing reads the OS clock,
//!   so tests drive time with [`crate::clock::ManualClock`] and never sleep.
//! - **Randomness is injected** as a generic `rand::Rng`, so a seeded
//!   `SmallRng` makes every jitter reproducible.
//! - **Allocation happens at construction only.** The breaker's sliding
//!   window is a preallocated ring; `try_acquire`, `record`, `try_take`,
//!   `try_enter`, `delay_ms` and `should_refresh` allocate nothing.
//! - **Nothing waits unboundedly.** The only blocking call in this module
//!   tree is [`bulkhead::Bulkhead::enter_wait`], bounded by its configured
//!   `max_wait_ms`; the retry driver sleeps only through the injected
//!   [`retry::Sleeper`], and only for a bounded number of attempts.
//! - **Every protective action is counted** in a stats struct of atomics
//!   (`Relaxed`), shared by `Arc` so a metrics thread can read a snapshot.
//!
//! Composition for one dependency, outside in: retry (outermost only) ->
//! breaker -> bulkhead -> the call with its timeout. Rejections by the
//! breaker or the bulkhead come back as [`CallError`] variants that the
//! retry layer never retries, and business errors are `Ignored` by the
//! breaker:
//!
//! ```
//! use pricewire::clock::{Clock, ManualClock};
//! use pricewire::resilience::*;
//! use rand::{rngs::SmallRng, SeedableRng};
//!
//! let clock = ManualClock::new(0);
//! let mut rng = SmallRng::seed_from_u64(1);
//! let mut retry = Retry::new(RetryConfig::default()).unwrap();
//! let mut breaker = CircuitBreaker::new(BreakerConfig::default()).unwrap();
//! let bulkhead = Bulkhead::new(BulkheadConfig::default()).unwrap();
//! let fetch = |_ctx: &RetryContext| -> Result<u32, CallError<&str>> { Ok(42) };
//!
//! let result = retry.run(
//!     &RetryContext::outermost(Some(2_000_000_000)),
//!     &*clock,
//!     &mut rng,
//!     |ctx| {
//!         let permit = breaker.try_acquire(clock.now_ns()).map_err(CallError::BreakerOpen)?;
//!         let started_ns = clock.now_ns();
//!         let result = bulkhead
//!             .try_enter()
//!             .map_err(CallError::BulkheadFull)
//!             .and_then(|_slot| fetch(ctx));
//!         let duration_ns = clock.now_ns() - started_ns;
//!         breaker.record(permit, Outcome::of(&result, duration_ns), clock.now_ns());
//!         result
//!     },
//!     &mut |d| clock.advance(d),
//! );
//! assert_eq!(result, Ok(42));
//! ```
//!
//! [`proxy`] is a test and drill tool, not a hot-path component: it uses real
//! threads and real time, bounded by a maximum connection count.

pub mod backoff;
pub mod breaker;
pub mod bulkhead;
mod error;
pub mod limiter;
pub mod proxy;
pub mod retry;
mod window;
pub mod xfetch;

pub use backoff::Backoff;
pub use breaker::{
    BreakerConfig, BreakerState, BreakerStats, CircuitBreaker, Outcome, Permit, Transition,
    TransitionReason,
};
pub use bulkhead::{Bulkhead, BulkheadConfig, BulkheadGuard};
pub use error::{BulkheadFull, CallError, ConfigError, NotPermitted};
pub use limiter::{RateLimiter, TokenBucket};
pub use retry::{Retry, RetryConfig, RetryContext, Sleeper};
pub use xfetch::XFetch;

/// Nanoseconds per second, for integer rate arithmetic.
pub const NS_PER_S: u64 = 1_000_000_000;
