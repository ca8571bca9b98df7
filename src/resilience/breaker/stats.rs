//! The breaker's counters and gauges, shared with the metrics thread.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

use super::BreakerState;
use crate::resilience::window::Totals;

/// Counters and gauges of one breaker, readable from any thread.
#[derive(Debug)]
pub struct BreakerStats {
    pub(super) state: AtomicU8,
    minimum_calls: u32,
    /// Calls reported as [`Outcome::Success`](super::Outcome::Success).
    pub successful_calls: AtomicU64,
    /// Calls reported as [`Outcome::Failure`](super::Outcome::Failure).
    pub failed_calls: AtomicU64,
    /// Calls over the slow threshold (a subset of successful + failed).
    pub slow_calls: AtomicU64,
    /// Calls reported as [`Outcome::Ignored`](super::Outcome::Ignored).
    pub ignored_calls: AtomicU64,
    /// Calls refused (Open, ForcedOpen, or HalfOpen with no trial left).
    pub not_permitted_calls: AtomicU64,
    /// Transitions into each state, indexed by `BreakerState as usize`.
    pub transitions: [AtomicU64; 5],
    /// Totals of the window currently deciding (the closed window, or the
    /// half-open trials).
    pub window_calls: AtomicU64,
    /// Failures in that window.
    pub window_failures: AtomicU64,
    /// Slow calls in that window.
    pub window_slow: AtomicU64,
}

/// A plain copy of [`BreakerStats`] with the rates worked out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerSnapshot {
    /// The state as of the last call on the breaker.
    pub state: BreakerState,
    /// Percent of calls in the window that failed; -1 below `minimum_calls`
    /// (no decision possible yet).
    pub failure_rate_pct: f64,
    /// Percent of calls in the window that were slow; -1 as above.
    pub slow_call_rate_pct: f64,
    /// Calls reported as successes.
    pub successful_calls: u64,
    /// Calls reported as failures.
    pub failed_calls: u64,
    /// Calls over the slow threshold (successful or failed).
    pub slow_calls: u64,
    /// Calls reported as ignored.
    pub ignored_calls: u64,
    /// Calls refused.
    pub not_permitted_calls: u64,
    /// Transitions into each state, indexed by `BreakerState as usize`.
    pub transitions: [u64; 5],
    /// Calls in the window currently deciding.
    pub window_calls: u64,
}

impl BreakerStats {
    pub(super) fn new(minimum_calls: u32) -> Self {
        BreakerStats {
            state: AtomicU8::new(BreakerState::Closed as u8),
            minimum_calls,
            successful_calls: AtomicU64::new(0),
            failed_calls: AtomicU64::new(0),
            slow_calls: AtomicU64::new(0),
            ignored_calls: AtomicU64::new(0),
            not_permitted_calls: AtomicU64::new(0),
            transitions: Default::default(),
            window_calls: AtomicU64::new(0),
            window_failures: AtomicU64::new(0),
            window_slow: AtomicU64::new(0),
        }
    }

    /// The state as of the last call on the breaker (the owner decides the
    /// timed Open -> HalfOpen move on its next call).
    pub fn state(&self) -> BreakerState {
        BreakerState::from_u8(self.state.load(Relaxed))
    }

    /// Reads every counter (Relaxed: each exact, the set not one instant).
    pub fn snapshot(&self) -> BreakerSnapshot {
        let calls = self.window_calls.load(Relaxed);
        let rate = |n: u64| {
            if calls == 0 || calls < self.minimum_calls as u64 {
                -1.0
            } else {
                n as f64 * 100.0 / calls as f64
            }
        };
        BreakerSnapshot {
            state: self.state(),
            failure_rate_pct: rate(self.window_failures.load(Relaxed)),
            slow_call_rate_pct: rate(self.window_slow.load(Relaxed)),
            successful_calls: self.successful_calls.load(Relaxed),
            failed_calls: self.failed_calls.load(Relaxed),
            slow_calls: self.slow_calls.load(Relaxed),
            ignored_calls: self.ignored_calls.load(Relaxed),
            not_permitted_calls: self.not_permitted_calls.load(Relaxed),
            transitions: std::array::from_fn(|i| self.transitions[i].load(Relaxed)),
            window_calls: calls,
        }
    }

    pub(super) fn publish_totals(&self, t: Totals) {
        self.window_calls.store(t.calls.into(), Relaxed);
        self.window_failures.store(t.failures.into(), Relaxed);
        self.window_slow.store(t.slow.into(), Relaxed);
    }
}
