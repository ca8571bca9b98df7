//! Injected time.
//!
//! Everything that decides by time (breakers, limiters, queues, backoff,
//! caches, staleness) reads a [`Clock`] instead of the OS, so tests drive it
//! deterministically with [`ManualClock`] and never sleep. Times are
//! nanoseconds on a monotonic clock with an arbitrary origin; durations
//! travel as relative budgets, never as absolute timestamps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of monotonic time in nanoseconds.
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's origin; never goes backwards.
    fn now_ns(&self) -> u64;
}

fn process_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Nanoseconds on the process-wide monotonic clock (origin: first use).
/// This is what `Tick::receive_time_ns` and latency measurements use; one
/// call is a vDSO `clock_gettime`, no syscall.
#[inline]
pub fn monotonic_ns() -> u64 {
    process_origin().elapsed().as_nanos() as u64
}

/// UTC nanoseconds since the Unix epoch (wall clock; may jump). Used only
/// for provider timestamps and server time on the wire, never for deciding.
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The real monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        monotonic_ns()
    }
}

/// A clock that only moves when told to. Shared by cloning the `Arc`.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock that reads `start_ns` until it is set or advanced.
    pub fn new(start_ns: u64) -> Arc<Self> {
        Arc::new(ManualClock {
            now: AtomicU64::new(start_ns),
        })
    }
    /// Jumps to `ns`. Nothing stops a jump backwards; a test that does one
    /// breaks the [`Clock`] promise on purpose.
    pub fn set_ns(&self, ns: u64) {
        self.now.store(ns, Ordering::SeqCst);
    }
    /// Moves forward by `by` (nanosecond resolution; wraps past `u64::MAX`).
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }
    /// Moves forward by `ms` milliseconds.
    pub fn advance_ms(&self, ms: u64) {
        self.advance(Duration::from_millis(ms));
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}

/// Nanoseconds in a millisecond, for unit conversions.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds in a microsecond, for unit conversions.
pub const NS_PER_US: u64 = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(5);
        assert_eq!(c.now_ns(), 5);
        c.advance_ms(2);
        assert_eq!(c.now_ns(), 5 + 2 * NS_PER_MS);
        c.set_ns(1);
        assert_eq!(c.now_ns(), 1);
    }

    #[test]
    fn monotonic_never_goes_back() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
        assert!(wall_ns() > 1_600_000_000_000_000_000);
    }
}
