//! Retries with a budget, for the outermost layer only.
//!
//! **Only the outermost layer retries.** Every call carries a
//! [`RetryContext`]; a [`Retry`] that receives a context with
//! `retrying_layer_above = true` makes exactly one attempt and passes the
//! context on unchanged, and the outermost `Retry` hands its operation a
//! context with the flag set. Layers nest (gateway request -> reference-data
//! client -> connection pool) without multiplying attempts: three layers of
//! three attempts would otherwise be 27 calls to a dependency that is
//! already failing.
//!
//! **Retry budget.** Retries are capped at a fraction of calls
//! (`budget_ratio_pct`, default 10%) by a token bucket on the injected clock:
//! each call deposits `ratio` of a token, each retry withdraws one, and a
//! small time-based refill (`budget_min_retries_per_s`) lets a quiet service
//! still retry now and then. The bucket holds at most `budget_max_tokens`,
//! so a long calm period cannot save up a retry storm.
//!
//! **What is retried.** Only [`CallError::Transient`]. Business errors,
//! permanent errors, an open breaker and a full bulkhead are returned at
//! once (see the table on [`CallError`]). Delays are full-jitter exponential
//! ([`Backoff`]), raised to the dependency's retry-after when it gave one,
//! and a retry is not attempted when its delay would overrun the call's
//! remaining time budget.
//!
//! Two ways to drive it: [`Retry::run`] is a blocking driver that sleeps
//! through an injected [`Sleeper`] (tests pass a closure that advances a
//! `ManualClock`); [`Retry::start_call`] + [`Retry::next_delay_ms`] are the
//! same decisions as a state machine for an event loop that schedules its
//! own timers. Neither allocates.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use super::backoff::Backoff;
use super::error::{invalid, CallError, ConfigError};
use super::limiter::{RateLimiter, NANO_TOKENS_PER_TOKEN};
use crate::clock::{Clock, NS_PER_MS};

/// Default `max_attempts`.
pub const MAX_ATTEMPTS_DEFAULT: u32 = 3;
/// Attempts include the first call; more than this is never useful.
pub const MAX_ATTEMPTS_MAX: u32 = 10;
/// Default `budget_ratio_pct`.
pub const BUDGET_RATIO_PCT_DEFAULT: u32 = 10;
/// Default `budget_min_retries_per_s`.
pub const BUDGET_MIN_RETRIES_PER_S_DEFAULT: u32 = 5;
/// Default `budget_max_tokens`.
pub const BUDGET_MAX_TOKENS_DEFAULT: u32 = 100;
/// Largest `backoff.cap_ms` accepted.
pub const BACKOFF_CAP_MS_MAX: u64 = 60_000;

/// Retry settings; [`Retry::new`] validates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryConfig {
    /// Attempts per call, the first included (1 = never retry).
    pub max_attempts: u32,
    /// The wait between attempts (full jitter, in ms).
    pub backoff: Backoff,
    /// Retries allowed per 100 calls.
    pub budget_ratio_pct: u32,
    /// Retries allowed per second regardless of call volume.
    pub budget_min_retries_per_s: u32,
    /// Most retries the budget can save up.
    pub budget_max_tokens: u32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: MAX_ATTEMPTS_DEFAULT,
            backoff: Backoff::default(),
            budget_ratio_pct: BUDGET_RATIO_PCT_DEFAULT,
            budget_min_retries_per_s: BUDGET_MIN_RETRIES_PER_S_DEFAULT,
            budget_max_tokens: BUDGET_MAX_TOKENS_DEFAULT,
        }
    }
}

impl RetryConfig {
    /// Checks every bound. Errors name the key: `max_attempts` outside
    /// 1..=[`MAX_ATTEMPTS_MAX`], `backoff` not `base_ms <= cap_ms <=
    /// BACKOFF_CAP_MS_MAX`, `budget_ratio_pct` over 100, `budget_max_tokens` 0.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_ATTEMPTS_MAX).contains(&self.max_attempts) {
            let reason = format!("{} not in 1..={MAX_ATTEMPTS_MAX}", self.max_attempts);
            return Err(invalid("max_attempts", reason));
        }
        let b = self.backoff;
        if b.cap_ms > BACKOFF_CAP_MS_MAX || b.base_ms > b.cap_ms {
            let reason = format!("need base_ms <= cap_ms <= {BACKOFF_CAP_MS_MAX}, got {b:?}");
            return Err(invalid("backoff", reason));
        }
        if self.budget_ratio_pct > 100 {
            let reason = format!("{} not in 0..=100", self.budget_ratio_pct);
            return Err(invalid("budget_ratio_pct", reason));
        }
        if self.budget_max_tokens == 0 {
            return Err(invalid("budget_max_tokens", "must be at least 1"));
        }
        Ok(())
    }
}

/// Travels with a call through the layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetryContext {
    /// A layer above already retries; this layer must not.
    pub retrying_layer_above: bool,
    /// Remaining time budget of the call in nanoseconds (relative, counted
    /// down on each hop's own clock); `None` = no deadline.
    pub remaining_ns: Option<u64>,
}

impl RetryContext {
    /// The context of a fresh call entering the outermost layer.
    pub fn outermost(remaining_ns: Option<u64>) -> Self {
        RetryContext {
            retrying_layer_above: false,
            remaining_ns,
        }
    }

    /// The context this layer hands to the layers below after `elapsed_ns`.
    pub fn below(&self, elapsed_ns: u64) -> Self {
        RetryContext {
            retrying_layer_above: true,
            remaining_ns: self.remaining_ns.map(|r| r.saturating_sub(elapsed_ns)),
        }
    }
}

/// How the retry driver waits between attempts.
pub trait Sleeper {
    /// Waits `duration` (or, in tests, records it).
    fn sleep(&mut self, duration: Duration);
}

impl<F: FnMut(Duration)> Sleeper for F {
    fn sleep(&mut self, duration: Duration) {
        self(duration)
    }
}

/// Sleeps the calling thread (production use off the hot path).
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadSleeper;

impl Sleeper for ThreadSleeper {
    fn sleep(&mut self, duration: Duration) {
        std::thread::sleep(duration)
    }
}

/// Counters of one retry layer.
#[derive(Debug, Default)]
pub struct RetryStats {
    /// Calls that entered this layer as the outermost (retrying) layer.
    pub calls: AtomicU64,
    /// Calls passed straight through because a layer above retries.
    pub passed_through: AtomicU64,
    /// Retries granted.
    pub retries: AtomicU64,
    /// Failures not retried because their kind is never retried.
    pub not_retryable: AtomicU64,
    /// Failures not retried because `max_attempts` were used.
    pub attempts_exhausted: AtomicU64,
    /// Failures not retried because the budget was empty.
    pub budget_exhausted: AtomicU64,
    /// Failures not retried because the backoff would outlast the deadline.
    pub deadline_exhausted: AtomicU64,
}

/// A plain copy of [`RetryStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetrySnapshot {
    /// Calls that entered as the outermost layer.
    pub calls: u64,
    /// Calls passed straight through.
    pub passed_through: u64,
    /// Retries granted.
    pub retries: u64,
    /// Failures of a kind never retried.
    pub not_retryable: u64,
    /// Failures after `max_attempts`.
    pub attempts_exhausted: u64,
    /// Failures refused by the budget.
    pub budget_exhausted: u64,
    /// Failures whose backoff would outlast the deadline.
    pub deadline_exhausted: u64,
}

impl RetryStats {
    /// Reads every counter (Relaxed).
    pub fn snapshot(&self) -> RetrySnapshot {
        RetrySnapshot {
            calls: self.calls.load(Relaxed),
            passed_through: self.passed_through.load(Relaxed),
            retries: self.retries.load(Relaxed),
            not_retryable: self.not_retryable.load(Relaxed),
            attempts_exhausted: self.attempts_exhausted.load(Relaxed),
            budget_exhausted: self.budget_exhausted.load(Relaxed),
            deadline_exhausted: self.deadline_exhausted.load(Relaxed),
        }
    }
}

/// One retry layer with its budget. Single owner; stats shared by `Arc`.
#[derive(Debug)]
pub struct Retry {
    cfg: RetryConfig,
    budget: RateLimiter,
    deposit_nt: u64,
    stats: Arc<RetryStats>,
}

impl Retry {
    /// A retry layer with a full second's minimum budget saved up. Errors: as
    /// [`RetryConfig::validate`].
    pub fn new(cfg: RetryConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let min_per_s = u64::from(cfg.budget_min_retries_per_s);
        let max_tokens = u64::from(cfg.budget_max_tokens);
        // One second's worth of the minimum to start with, so the first
        // failure after start-up may be retried.
        let budget =
            RateLimiter::with_initial_tokens(min_per_s, max_tokens, min_per_s.min(max_tokens))?;
        Ok(Retry {
            deposit_nt: u64::from(cfg.budget_ratio_pct) * NANO_TOKENS_PER_TOKEN / 100,
            cfg,
            budget,
            stats: Arc::new(RetryStats::default()),
        })
    }

    /// The settings this layer was built with (validated).
    pub fn config(&self) -> &RetryConfig {
        &self.cfg
    }

    /// Shared counters for the metrics thread.
    pub fn stats(&self) -> Arc<RetryStats> {
        Arc::clone(&self.stats)
    }

    /// Retries the budget would grant right now.
    pub fn budget_available(&mut self, now_ns: u64) -> u64 {
        self.budget.available(now_ns)
    }

    /// State-machine use: a new call entered this (outermost) layer.
    pub fn start_call(&mut self, now_ns: u64) {
        self.stats.calls.fetch_add(1, Relaxed);
        self.budget.deposit_nano_tokens(self.deposit_nt, now_ns);
    }

    /// State-machine use: attempt `attempt` (0-based) failed with `err`.
    /// Returns the delay before the next attempt, or `None` to give up (and
    /// counts why). `remaining_ns` is what is left of the call's time budget.
    /// A granted retry has already withdrawn its budget token.
    pub fn next_delay_ms<E>(
        &mut self,
        attempt: u32,
        err: &CallError<E>,
        remaining_ns: Option<u64>,
        now_ns: u64,
        rng: &mut impl Rng,
    ) -> Option<u64> {
        let s = &self.stats;
        if !err.is_retryable() {
            s.not_retryable.fetch_add(1, Relaxed);
            return None;
        }
        if attempt.saturating_add(1) >= self.cfg.max_attempts {
            s.attempts_exhausted.fetch_add(1, Relaxed);
            return None;
        }
        let delay_ms = self
            .cfg
            .backoff
            .delay_ms(attempt, err.retry_after_ms(), rng);
        if remaining_ns.is_some_and(|r| delay_ms.saturating_mul(NS_PER_MS) >= r) {
            s.deadline_exhausted.fetch_add(1, Relaxed);
            return None;
        }
        if !self.budget.try_take(now_ns) {
            s.budget_exhausted.fetch_add(1, Relaxed);
            return None;
        }
        s.retries.fetch_add(1, Relaxed);
        Some(delay_ms)
    }

    /// Runs `op` with retries if this is the outermost retrying layer, or
    /// exactly once if `ctx.retrying_layer_above`. `op` receives the context
    /// to hand to the layers below it (always marked as having a retrying
    /// layer above, with the remaining budget counted down).
    pub fn run<T, E, C, R, F, S>(
        &mut self,
        ctx: &RetryContext,
        clock: &C,
        rng: &mut R,
        mut op: F,
        sleeper: &mut S,
    ) -> Result<T, CallError<E>>
    where
        C: Clock + ?Sized,
        R: Rng,
        F: FnMut(&RetryContext) -> Result<T, CallError<E>>,
        S: Sleeper,
    {
        if ctx.retrying_layer_above {
            self.stats.passed_through.fetch_add(1, Relaxed);
            return op(ctx);
        }
        let start_ns = clock.now_ns();
        self.start_call(start_ns);
        let mut attempt = 0;
        loop {
            let elapsed_ns = clock.now_ns().saturating_sub(start_ns);
            let err = match op(&ctx.below(elapsed_ns)) {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let now_ns = clock.now_ns();
            let remaining_ns = ctx.below(now_ns.saturating_sub(start_ns)).remaining_ns;
            match self.next_delay_ms(attempt, &err, remaining_ns, now_ns, rng) {
                Some(delay_ms) => sleeper.sleep(Duration::from_millis(delay_ms)),
                None => return Err(err),
            }
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests;
