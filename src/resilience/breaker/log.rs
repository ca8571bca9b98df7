//! The breaker's transitions, kept for its owner to log.
//!
//! Contract: every transition (timed ones included, which happen inside
//! whatever call comes first) is appended to a fixed ring of
//! [`TRANSITIONS_KEPT`] entries allocated with the breaker; the owner takes
//! them with [`super::CircuitBreaker::pop_transition`] and logs them (rate
//! limited, it knows its own log policy). An owner that does not take them
//! loses the oldest, counted in `lost`; nothing grows.

use super::BreakerState;

/// Transitions kept until the owner takes them.
pub const TRANSITIONS_KEPT: usize = 8;

/// Why the breaker moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransitionReason {
    /// Closed → Open: the failure rate reached its threshold.
    FailureRate,
    /// Closed → Open: the slow-call rate reached its threshold.
    SlowCallRate,
    /// Closed → Open by the caller's own rule ([`super::CircuitBreaker::trip`]).
    Tripped,
    /// Open → HalfOpen: the (jittered) open wait is over.
    OpenWaitElapsed,
    /// HalfOpen → Closed: the trials passed.
    TrialsPassed,
    /// HalfOpen → Open: a trial failed (`half_open_fail_fast`).
    TrialFailed,
    /// HalfOpen → Open: the trials' failure or slow rate made the
    /// threshold certain.
    TrialsOverThreshold,
    /// HalfOpen → Open: no verdict within `half_open_max_wait_ms`.
    HalfOpenTimedOut,
    /// `force_open`, `disable` or `reset`.
    Operator,
}

impl TransitionReason {
    /// Lower-case name for logs.
    pub fn name(self) -> &'static str {
        match self {
            TransitionReason::FailureRate => "failure_rate",
            TransitionReason::SlowCallRate => "slow_call_rate",
            TransitionReason::Tripped => "consecutive_failures",
            TransitionReason::OpenWaitElapsed => "open_wait_elapsed",
            TransitionReason::TrialsPassed => "trials_passed",
            TransitionReason::TrialFailed => "trial_failed",
            TransitionReason::TrialsOverThreshold => "trials_over_threshold",
            TransitionReason::HalfOpenTimedOut => "half_open_timed_out",
            TransitionReason::Operator => "operator",
        }
    }
}

/// One transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// The state left.
    pub from: BreakerState,
    /// The state entered.
    pub to: BreakerState,
    /// Why.
    pub reason: TransitionReason,
    /// When, on the breaker's clock.
    pub at_ns: u64,
    /// Into Open: how long this open lasts (jittered); 0 otherwise.
    pub open_wait_ns: u64,
}

/// The fixed ring.
#[derive(Debug)]
pub(super) struct TransitionLog {
    ring: [Option<Transition>; TRANSITIONS_KEPT],
    head: usize,
    len: usize,
    /// Transitions overwritten before they were taken.
    pub(super) lost: u64,
}

impl TransitionLog {
    pub(super) fn new() -> TransitionLog {
        TransitionLog {
            ring: [None; TRANSITIONS_KEPT],
            head: 0,
            len: 0,
            lost: 0,
        }
    }

    pub(super) fn push(&mut self, t: Transition) {
        if self.len == TRANSITIONS_KEPT {
            self.head = (self.head + 1) % TRANSITIONS_KEPT;
            self.len -= 1;
            self.lost += 1;
        }
        let at = (self.head + self.len) % TRANSITIONS_KEPT;
        self.ring[at] = Some(t);
        self.len += 1;
    }

    pub(super) fn pop(&mut self) -> Option<Transition> {
        if self.len == 0 {
            return None;
        }
        let t = self.ring[self.head].take();
        self.head = (self.head + 1) % TRANSITIONS_KEPT;
        self.len -= 1;
        t
    }
}
