//! Errors of the resilience subsystem.
//!
//! Configuration mistakes are refused at construction with a
//! [`ConfigError`] naming the key; run-time rejections ([`NotPermitted`],
//! [`BulkheadFull`]) are small `Copy` values the caller handles, and
//! [`CallError`] is the vocabulary a caller uses to tell the retry driver
//! (and, by the same classification, the breaker) what kind of failure a
//! call had.

use super::breaker::BreakerState;

/// A configuration value the resilience blocks refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A value outside its allowed range.
    #[error("resilience config `{key}`: {reason}")]
    Invalid {
        /// The refused key, as written in the configuration.
        key: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// A slow call must be detectable before the call times out; otherwise
    /// every slow call is reported as a timeout failure and the slow-call
    /// rate can never trip.
    #[error(
        "resilience config `slow_call_duration_ms` ({slow_call_duration_ms} ms) must be below \
         `call_timeout_ms` ({call_timeout_ms} ms): a slow call has to be seen before the timeout \
         turns it into a failure"
    )]
    SlowThresholdNotBelowTimeout {
        /// The configured slow threshold, in ms.
        slow_call_duration_ms: u64,
        /// The configured call timeout, in ms.
        call_timeout_ms: u64,
    },
}

pub(crate) fn invalid(key: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        reason: reason.into(),
    }
}

/// The breaker refused a call. `retry_after_ns` is the remaining open wait
/// when the breaker is `Open` (so callers can pass a retry-after on), `None`
/// when the refusal has no known end (forced open, half-open trials taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("circuit breaker {state:?}: call not permitted")]
pub struct NotPermitted {
    /// The state that refused.
    pub state: BreakerState,
    /// Remaining open wait in ns when `Open`; `None` when the end is unknown.
    pub retry_after_ns: Option<u64>,
}

/// The bulkhead was full (or stayed full for the whole bounded wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("bulkhead full: {max_concurrent} calls in flight")]
pub struct BulkheadFull {
    /// The bulkhead's limit of calls in flight.
    pub max_concurrent: u32,
}

/// How a call through the resilience layers failed. The classification
/// decides what is retried and what the breaker counts:
///
/// | variant       | breaker records | retried |
/// |---------------|-----------------|---------|
/// | `Business`    | `Ignored`       | never   |
/// | `Transient`   | `Failure`       | yes, within budget |
/// | `Permanent`   | `Failure`       | never   |
/// | `BreakerOpen` | (not called)    | never   |
/// | `BulkheadFull`| (not called)    | never   |
///
/// Rejections are never retried: retrying into an open breaker or a full
/// bulkhead only adds load to the moment that is already overloaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError<E> {
    /// The caller's own fault (bad request, unknown symbol, not entitled).
    #[error("business error: {0:?}")]
    Business(E),
    /// The dependency failed in a way that may pass (timeout, reset, 503).
    /// `retry_after_ms` is the dependency's hint, honoured as a backoff
    /// floor; 0 when none was given.
    #[error("transient dependency error: {error:?}")]
    Transient {
        /// The dependency's error.
        error: E,
        /// The dependency's retry hint in ms (0 = none).
        retry_after_ms: u64,
    },
    /// The dependency failed in a way that will not pass by retrying.
    #[error("permanent dependency error: {0:?}")]
    Permanent(E),
    /// The circuit breaker refused the call.
    #[error(transparent)]
    BreakerOpen(NotPermitted),
    /// The bulkhead refused the call.
    #[error(transparent)]
    BulkheadFull(BulkheadFull),
}

impl<E> CallError<E> {
    /// A transient error without a retry-after hint.
    pub fn transient(error: E) -> Self {
        CallError::Transient {
            error,
            retry_after_ms: 0,
        }
    }

    /// Whether a retry may help. Only transient dependency errors qualify.
    pub fn is_retryable(&self) -> bool {
        matches!(self, CallError::Transient { .. })
    }

    /// The dependency's retry-after hint in milliseconds (0 = none).
    pub fn retry_after_ms(&self) -> u64 {
        match self {
            CallError::Transient { retry_after_ms, .. } => *retry_after_ms,
            _ => 0,
        }
    }
}
