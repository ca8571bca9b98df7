//! Circuit breaker for one dependency.
//!
//! Contract: the sliding window is allocated once in [`CircuitBreaker::new`];
//! [`CircuitBreaker::try_acquire`], [`CircuitBreaker::record`] and
//! [`CircuitBreaker::state`] allocate nothing, never block and take time only
//! from their `now_ns` argument. The breaker has one owner (`&mut self`);
//! its counters are atomics in an `Arc<BreakerStats>` that a metrics thread
//! reads.
//!
//! Behaviour (defaults in [`BreakerConfig::default`]):
//! - The caller reports each call as an [`Outcome`]: `Success` or `Failure`
//!   with its duration, or `Ignored` for the caller's own (business) errors,
//!   which count as neither. A call longer than `slow_call_duration_ms` is
//!   also *slow*, whether it succeeded or not.
//! - **Closed**: outcomes go into a sliding window — by default time-based
//!   (one bucket per second over `window_s`), optionally count-based. Once
//!   the window holds `minimum_calls`, the breaker opens when the failure
//!   rate or the slow-call rate reaches its threshold.
//! - **Open**: every call is refused with the remaining wait. After
//!   `open_wait_ms` (moved within ±`open_wait_jitter_pct`, drawn per Open
//!   from a generator seeded from the OS's entropy) it is **HalfOpen** —
//!   decided from `now_ns` whenever the breaker is asked, so `state(now)`
//!   reports `HalfOpen` with no traffic.
//! - **HalfOpen**: exactly `half_open_permitted_calls` trial permits are
//!   handed out; excess calls are refused. When the trials are complete the
//!   breaker closes if both rates are below their thresholds and re-opens
//!   otherwise (it re-opens early once the failures or slow calls already
//!   seen make the threshold unavoidable; with `half_open_fail_fast`, at
//!   the first failed trial). Trials that never report (a lost permit)
//!   cannot wedge it: after `half_open_max_wait_ms` it re-opens.
//! - Every transition, with its reason, is kept in a fixed ring for the
//!   owner to log ([`CircuitBreaker::pop_transition`]).
//! - **ForcedOpen** / **Disabled**: operator states — refuse everything /
//!   permit everything and record nothing in the window. Left only by
//!   [`CircuitBreaker::reset`].
//!
//! A permit carries the state epoch it was issued in; an outcome that
//! reports after a transition (a slow call from before the breaker opened)
//! is counted in the stats but does not vote in the new state.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::error::{invalid, CallError, ConfigError, NotPermitted};
use super::window::{CountWindow, Sample, TimeWindow, Totals, Window};
use crate::clock::NS_PER_MS;

/// Default time window: one bucket per second over 30 s.
pub const WINDOW_S_DEFAULT: u32 = 30;
/// Longest time window (bounds the preallocated ring).
pub const WINDOW_S_MAX: u32 = 3_600;
/// Largest count window (bounds the preallocated ring).
pub const COUNT_WINDOW_MAX: u32 = 100_000;
/// Default `minimum_calls`.
pub const MINIMUM_CALLS_DEFAULT: u32 = 20;
/// Default `failure_rate_threshold_pct`.
pub const FAILURE_RATE_THRESHOLD_PCT_DEFAULT: u32 = 50;
/// Default `slow_call_rate_threshold_pct`.
pub const SLOW_CALL_RATE_THRESHOLD_PCT_DEFAULT: u32 = 50;
/// Default `call_timeout_ms`.
pub const CALL_TIMEOUT_MS_DEFAULT: u64 = 1_000;
/// Default `slow_call_duration_ms`.
pub const SLOW_CALL_DURATION_MS_DEFAULT: u64 = 500;
/// Default `open_wait_ms`.
pub const OPEN_WAIT_MS_DEFAULT: u64 = 10_000;
/// Default `half_open_permitted_calls`.
pub const HALF_OPEN_PERMITTED_CALLS_DEFAULT: u32 = 5;
/// Most `half_open_permitted_calls` accepted.
pub const HALF_OPEN_PERMITTED_CALLS_MAX: u32 = 1_000;
/// Default `half_open_max_wait_ms`.
pub const HALF_OPEN_MAX_WAIT_MS_DEFAULT: u64 = 5_000;
/// Largest `open_wait_jitter_pct` accepted.
pub const OPEN_WAIT_JITTER_PCT_MAX: u32 = 50;

/// The shape of the sliding window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// Outcomes of the last `window_s` seconds (per-second buckets).
    Time {
        /// Window length in seconds (1..=[`WINDOW_S_MAX`]).
        window_s: u32,
    },
    /// Outcomes of the last `calls` calls.
    Count {
        /// Calls in the window (1..=[`COUNT_WINDOW_MAX`]).
        calls: u32,
    },
}

/// Breaker settings. Build from [`BreakerConfig::default`] and override.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Time- or count-based sliding window.
    pub window: WindowKind,
    /// Calls the window must hold before any decision to open.
    pub minimum_calls: u32,
    /// Open when `failures * 100 >= threshold * calls` (1..=100).
    pub failure_rate_threshold_pct: u32,
    /// Open when `slow * 100 >= threshold * calls` (1..=100).
    pub slow_call_rate_threshold_pct: u32,
    /// A call longer than this is slow. Must be below `call_timeout_ms`.
    pub slow_call_duration_ms: u64,
    /// The dependency's call timeout, given here so the slow threshold can
    /// be checked against it.
    pub call_timeout_ms: u64,
    /// Time in Open before HalfOpen.
    pub open_wait_ms: u64,
    /// Trial calls allowed in HalfOpen.
    pub half_open_permitted_calls: u32,
    /// Longest HalfOpen without a verdict before re-opening; at least
    /// `call_timeout_ms` so a trial that takes the whole timeout still counts.
    pub half_open_max_wait_ms: u64,
    /// Each Open lasts `open_wait_ms` moved by a uniform amount within
    /// ± this percent (0..=[`OPEN_WAIT_JITTER_PCT_MAX`]; 0, the default,
    /// is exactly `open_wait_ms`), drawn from the breaker's own generator
    /// (seeded from the OS's entropy by [`CircuitBreaker::new`]), so the
    /// trials of processes that opened together drift apart.
    pub open_wait_jitter_pct: u32,
    /// HalfOpen: the first failed trial re-opens at once (a caller that
    /// makes one call at a time gets a verdict per trial). False, the
    /// default: the rates over all permitted trials decide.
    pub half_open_fail_fast: bool,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window: WindowKind::Time {
                window_s: WINDOW_S_DEFAULT,
            },
            minimum_calls: MINIMUM_CALLS_DEFAULT,
            failure_rate_threshold_pct: FAILURE_RATE_THRESHOLD_PCT_DEFAULT,
            slow_call_rate_threshold_pct: SLOW_CALL_RATE_THRESHOLD_PCT_DEFAULT,
            slow_call_duration_ms: SLOW_CALL_DURATION_MS_DEFAULT,
            call_timeout_ms: CALL_TIMEOUT_MS_DEFAULT,
            open_wait_ms: OPEN_WAIT_MS_DEFAULT,
            half_open_permitted_calls: HALF_OPEN_PERMITTED_CALLS_DEFAULT,
            half_open_max_wait_ms: HALF_OPEN_MAX_WAIT_MS_DEFAULT,
            open_wait_jitter_pct: 0,
            half_open_fail_fast: false,
        }
    }
}

fn check_range(key: &'static str, v: u64, lo: u64, hi: u64) -> Result<(), ConfigError> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(invalid(key, format!("{v} not in {lo}..={hi}")))
    }
}

impl BreakerConfig {
    /// Refuses settings under which the breaker could not work as promised.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.window {
            WindowKind::Time { window_s } => {
                check_range("window_s", window_s.into(), 1, WINDOW_S_MAX.into())?
            }
            WindowKind::Count { calls } => {
                check_range("window_calls", calls.into(), 1, COUNT_WINDOW_MAX.into())?;
                // A count window can never hold more than `calls` outcomes.
                check_range("minimum_calls", self.minimum_calls.into(), 1, calls.into())?;
            }
        }
        check_range(
            "minimum_calls",
            self.minimum_calls.into(),
            1,
            u32::MAX.into(),
        )?;
        check_range(
            "failure_rate_threshold_pct",
            self.failure_rate_threshold_pct.into(),
            1,
            100,
        )?;
        let slow_pct = self.slow_call_rate_threshold_pct.into();
        check_range("slow_call_rate_threshold_pct", slow_pct, 1, 100)?;
        let ms_max = u64::MAX / NS_PER_MS;
        check_range("call_timeout_ms", self.call_timeout_ms, 1, ms_max)?;
        check_range(
            "slow_call_duration_ms",
            self.slow_call_duration_ms,
            1,
            ms_max,
        )?;
        if self.slow_call_duration_ms >= self.call_timeout_ms {
            return Err(ConfigError::SlowThresholdNotBelowTimeout {
                slow_call_duration_ms: self.slow_call_duration_ms,
                call_timeout_ms: self.call_timeout_ms,
            });
        }
        check_range("open_wait_ms", self.open_wait_ms, 1, ms_max)?;
        let trials = self.half_open_permitted_calls.into();
        check_range(
            "half_open_permitted_calls",
            trials,
            1,
            HALF_OPEN_PERMITTED_CALLS_MAX.into(),
        )?;
        let hw = self.half_open_max_wait_ms;
        check_range("half_open_max_wait_ms", hw, self.call_timeout_ms, ms_max)?;
        let jitter = self.open_wait_jitter_pct.into();
        check_range(
            "open_wait_jitter_pct",
            jitter,
            0,
            OPEN_WAIT_JITTER_PCT_MAX.into(),
        )
    }

    /// The longest an Open lasts: `open_wait_ms` plus its jitter.
    pub fn open_wait_max_ms(&self) -> u64 {
        self.open_wait_ms
            .saturating_mul(100 + u64::from(self.open_wait_jitter_pct))
            / 100
    }

    /// Refuses a window the caller can never fill: a caller that, while its
    /// dependency fails, makes at most one call per `cycle_ms` (its longest
    /// timeout plus its backoff cap) must get `minimum_calls` failures into
    /// a time window of `window_s`, or the rate rule can never open the
    /// breaker. A count window holds the last N calls however slow they
    /// come, so it always fits. A caller with a consecutive-failures rule
    /// of its own (see [`CircuitBreaker::trip`]) need not call this.
    ///
    /// Errors: [`ConfigError::Invalid`] naming `minimum_calls`, with the
    /// arithmetic in the reason.
    pub fn check_can_open(&self, cycle_ms: u64) -> Result<(), ConfigError> {
        let WindowKind::Time { window_s } = self.window else {
            return Ok(());
        };
        let need_ms = u64::from(self.minimum_calls).saturating_mul(cycle_ms);
        let window_ms = u64::from(window_s) * 1_000;
        if need_ms > window_ms {
            return Err(invalid(
                "minimum_calls",
                format!(
                    "the breaker can never open: {} failures at one per up to {cycle_ms} ms \
                     (the caller's longest timeout plus its backoff cap) need {need_ms} ms, \
                     more than the {window_s}-s window; lower minimum_calls, widen the window \
                     or set a consecutive-failures rule",
                    self.minimum_calls
                ),
            ));
        }
        Ok(())
    }
}

/// Breaker states. The discriminant is what [`BreakerStats`] exports
/// (a stable number for the metrics gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BreakerState {
    /// Normal: calls pass and vote in the window.
    Closed = 0,
    /// Tripped: every call is refused until `open_wait_ms` has passed.
    Open = 1,
    /// Probing: a fixed number of trial calls decide between Closed and Open.
    HalfOpen = 2,
    /// Operator state: refuses everything until reset.
    ForcedOpen = 3,
    /// Operator state: permits everything and records nothing in the window.
    Disabled = 4,
}

impl BreakerState {
    /// Every state, in discriminant order.
    pub const ALL: [BreakerState; 5] = [
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
        BreakerState::ForcedOpen,
        BreakerState::Disabled,
    ];

    pub(super) fn from_u8(v: u8) -> BreakerState {
        Self::ALL[v as usize]
    }

    /// Lower-case name for logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
            BreakerState::ForcedOpen => "forced_open",
            BreakerState::Disabled => "disabled",
        }
    }
}

/// What a permitted call turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The dependency answered.
    Success {
        /// How long the call took, in ns (decides "slow").
        duration_ns: u64,
    },
    /// The dependency failed or timed out.
    Failure {
        /// How long the call took, in ns (decides "slow").
        duration_ns: u64,
    },
    /// The caller's own error (business error): neither failure nor success.
    Ignored,
}

impl Outcome {
    /// Classifies a call result with the [`CallError`] vocabulary: business
    /// errors and rejections by inner layers are ignored, dependency errors
    /// are failures.
    pub fn of<T, E>(result: &Result<T, CallError<E>>, duration_ns: u64) -> Outcome {
        match result {
            Ok(_) => Outcome::Success { duration_ns },
            Err(CallError::Transient { .. } | CallError::Permanent(_)) => {
                Outcome::Failure { duration_ns }
            }
            Err(_) => Outcome::Ignored,
        }
    }
}

/// Permission for one call; hand it back to [`CircuitBreaker::record`].
/// Not `Clone`, so one permit records one outcome.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a permit must be returned through CircuitBreaker::record"]
pub struct Permit {
    epoch: u64,
}

/// A circuit breaker for one dependency. See the module docs.
#[derive(Debug)]
pub struct CircuitBreaker {
    cfg: BreakerConfig,
    slow_ns: u64,
    open_wait_ns: u64,
    half_open_max_wait_ns: u64,
    state: BreakerState,
    /// Bumped on every transition; permits from an older epoch do not vote.
    epoch: u64,
    state_since_ns: u64,
    window: Window,
    trials_issued: u32,
    trials: Totals,
    stats: Arc<BreakerStats>,
    /// This Open's (jittered) wait.
    current_open_wait_ns: u64,
    rng: SmallRng,
    log: TransitionLog,
}

impl CircuitBreaker {
    /// Validates `cfg` and preallocates the window. Starts Closed. The
    /// open-wait jitter is seeded from the OS's entropy.
    pub fn new(cfg: BreakerConfig) -> Result<Self, ConfigError> {
        Self::with_seed(cfg, rand::random())
    }

    /// As [`CircuitBreaker::new`], with the jitter's seed given (tests).
    pub fn with_seed(cfg: BreakerConfig, seed: u64) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let window = match cfg.window {
            WindowKind::Time { window_s } => Window::Time(TimeWindow::new(window_s)),
            WindowKind::Count { calls } => Window::Count(CountWindow::new(calls)),
        };
        Ok(CircuitBreaker {
            slow_ns: cfg.slow_call_duration_ms * NS_PER_MS,
            open_wait_ns: cfg.open_wait_ms * NS_PER_MS,
            half_open_max_wait_ns: cfg.half_open_max_wait_ms * NS_PER_MS,
            state: BreakerState::Closed,
            epoch: 0,
            state_since_ns: 0,
            window,
            trials_issued: 0,
            trials: Totals::default(),
            stats: Arc::new(BreakerStats::new(cfg.minimum_calls)),
            current_open_wait_ns: cfg.open_wait_ms * NS_PER_MS,
            rng: SmallRng::seed_from_u64(seed),
            log: TransitionLog::new(),
            cfg,
        })
    }

    /// The settings this breaker was built with (validated).
    pub fn config(&self) -> &BreakerConfig {
        &self.cfg
    }

    /// Shared counters for the metrics thread.
    pub fn stats(&self) -> Arc<BreakerStats> {
        Arc::clone(&self.stats)
    }

    /// The state at `now_ns`, applying the timed moves first (Open ->
    /// HalfOpen after `open_wait_ms`, HalfOpen -> Open after
    /// `half_open_max_wait_ms` without a verdict).
    pub fn state(&mut self, now_ns: u64) -> BreakerState {
        self.apply_timers(now_ns);
        if self.state == BreakerState::Closed {
            let totals = self.window.totals(now_ns);
            self.stats.publish_totals(totals);
        }
        self.state
    }

    /// Asks to make one call. Refusals are counted and carry the remaining
    /// open wait where there is one.
    pub fn try_acquire(&mut self, now_ns: u64) -> Result<Permit, NotPermitted> {
        self.apply_timers(now_ns);
        let refused = match self.state {
            BreakerState::Closed | BreakerState::Disabled => None,
            BreakerState::HalfOpen if self.trials_issued < self.cfg.half_open_permitted_calls => {
                self.trials_issued += 1;
                None
            }
            BreakerState::Open => Some(Some(self.open_left_ns(now_ns))),
            BreakerState::HalfOpen | BreakerState::ForcedOpen => Some(None),
        };
        match refused {
            None => Ok(Permit { epoch: self.epoch }),
            Some(retry_after_ns) => {
                self.stats.not_permitted_calls.fetch_add(1, Relaxed);
                Err(NotPermitted {
                    state: self.state,
                    retry_after_ns,
                })
            }
        }
    }

    /// Reports how a permitted call went.
    pub fn record(&mut self, permit: Permit, outcome: Outcome, now_ns: u64) {
        self.apply_timers(now_ns);
        let sample = self.count_outcome(outcome);
        if permit.epoch != self.epoch {
            return; // issued before a transition: counted, but no vote
        }
        match (self.state, sample) {
            (BreakerState::Closed, Some(s)) => self.record_closed(s, now_ns),
            (BreakerState::HalfOpen, Some(s)) => self.record_trial(s, now_ns),
            // An ignored trial hands its slot to another caller.
            (BreakerState::HalfOpen, None) => self.trials_issued -= 1,
            _ => {}
        }
    }

    /// In Open, the time until HalfOpen (the next trial); `None` in any
    /// other state. Applies the timed moves first.
    pub fn open_wait_left_ns(&mut self, now_ns: u64) -> Option<u64> {
        self.apply_timers(now_ns);
        (self.state == BreakerState::Open).then(|| self.open_left_ns(now_ns))
    }

    fn open_left_ns(&self, now_ns: u64) -> u64 {
        let open_until_ns = self
            .state_since_ns
            .saturating_add(self.current_open_wait_ns);
        open_until_ns.saturating_sub(now_ns)
    }

    /// The oldest transition not yet taken (see [`log`]), for the owner to
    /// log; every transition is kept, timed ones included, up to
    /// [`TRANSITIONS_KEPT`].
    pub fn pop_transition(&mut self) -> Option<Transition> {
        self.log.pop()
    }

    /// Transitions overwritten before the owner took them.
    pub fn transitions_lost(&self) -> u64 {
        self.log.lost
    }

    /// Opens a Closed breaker now, as its own rate rule would: for a caller
    /// with an extra rule of its own (the FIX feed opens on consecutive
    /// failures). Open then runs its course (HalfOpen after `open_wait_ms`).
    /// Returns whether it opened; no effect in any other state.
    pub fn trip(&mut self, now_ns: u64) -> bool {
        self.apply_timers(now_ns);
        if self.state != BreakerState::Closed {
            return false;
        }
        self.transition(BreakerState::Open, TransitionReason::Tripped, now_ns);
        true
    }

    /// Operator: refuse every call until [`CircuitBreaker::reset`].
    pub fn force_open(&mut self, now_ns: u64) {
        self.transition(BreakerState::ForcedOpen, TransitionReason::Operator, now_ns);
    }

    /// Operator: permit every call and record nothing until
    /// [`CircuitBreaker::reset`].
    pub fn disable(&mut self, now_ns: u64) {
        self.transition(BreakerState::Disabled, TransitionReason::Operator, now_ns);
    }

    /// Operator: back to Closed with an empty window.
    pub fn reset(&mut self, now_ns: u64) {
        self.transition(BreakerState::Closed, TransitionReason::Operator, now_ns);
    }

    /// Updates the outcome counters; returns the window sample, `None` for
    /// ignored outcomes.
    fn count_outcome(&self, outcome: Outcome) -> Option<Sample> {
        let (failed, duration_ns) = match outcome {
            Outcome::Success { duration_ns } => (false, duration_ns),
            Outcome::Failure { duration_ns } => (true, duration_ns),
            Outcome::Ignored => {
                self.stats.ignored_calls.fetch_add(1, Relaxed);
                return None;
            }
        };
        let slow = duration_ns > self.slow_ns;
        let counter = if failed {
            &self.stats.failed_calls
        } else {
            &self.stats.successful_calls
        };
        counter.fetch_add(1, Relaxed);
        if slow {
            self.stats.slow_calls.fetch_add(1, Relaxed);
        }
        Some(Sample { failed, slow })
    }

    /// Which threshold `t` reaches out of `out_of` calls, if any.
    fn over_threshold(&self, t: Totals, out_of: u32) -> Option<TransitionReason> {
        let out_of = u64::from(out_of);
        if u64::from(t.failures) * 100 >= u64::from(self.cfg.failure_rate_threshold_pct) * out_of {
            Some(TransitionReason::FailureRate)
        } else if u64::from(t.slow) * 100
            >= u64::from(self.cfg.slow_call_rate_threshold_pct) * out_of
        {
            Some(TransitionReason::SlowCallRate)
        } else {
            None
        }
    }

    fn record_closed(&mut self, sample: Sample, now_ns: u64) {
        self.window.record(sample, now_ns);
        let totals = self.window.totals(now_ns);
        self.stats.publish_totals(totals);
        if totals.calls < self.cfg.minimum_calls {
            return;
        }
        if let Some(reason) = self.over_threshold(totals, totals.calls) {
            self.transition(BreakerState::Open, reason, now_ns);
        }
    }

    fn record_trial(&mut self, sample: Sample, now_ns: u64) {
        let t = &mut self.trials;
        t.calls += 1;
        t.failures += sample.failed as u32;
        t.slow += sample.slow as u32;
        let trials = *t;
        self.stats.publish_totals(trials);
        let permitted = self.cfg.half_open_permitted_calls;
        // Judged against all permitted trials, so a verdict already certain
        // (enough failures that the rest cannot bring the rate below the
        // threshold) re-opens at once instead of waiting for the stragglers.
        if sample.failed && self.cfg.half_open_fail_fast {
            self.transition(BreakerState::Open, TransitionReason::TrialFailed, now_ns);
        } else if self.over_threshold(trials, permitted).is_some() {
            let reason = TransitionReason::TrialsOverThreshold;
            self.transition(BreakerState::Open, reason, now_ns);
        } else if trials.calls >= permitted {
            self.transition(BreakerState::Closed, TransitionReason::TrialsPassed, now_ns);
        }
    }

    fn apply_timers(&mut self, now_ns: u64) {
        let since = now_ns.saturating_sub(self.state_since_ns);
        match self.state {
            BreakerState::Open if since >= self.current_open_wait_ns => {
                let reason = TransitionReason::OpenWaitElapsed;
                self.transition(BreakerState::HalfOpen, reason, now_ns)
            }
            BreakerState::HalfOpen if since >= self.half_open_max_wait_ns => {
                let reason = TransitionReason::HalfOpenTimedOut;
                self.transition(BreakerState::Open, reason, now_ns)
            }
            _ => {}
        }
    }

    /// The wait of an Open starting now: `open_wait_ms` ± the jitter.
    fn draw_open_wait_ns(&mut self) -> u64 {
        let pct = u64::from(self.cfg.open_wait_jitter_pct);
        if pct == 0 {
            return self.open_wait_ns;
        }
        let lo = self.open_wait_ns / 100 * (100 - pct);
        let hi = self.open_wait_ns / 100 * (100 + pct);
        self.rng.gen_range(lo..=hi)
    }

    fn transition(&mut self, to: BreakerState, reason: TransitionReason, now_ns: u64) {
        let from = self.state;
        self.current_open_wait_ns = if to == BreakerState::Open {
            self.draw_open_wait_ns()
        } else {
            self.open_wait_ns
        };
        self.log.push(Transition {
            from,
            to,
            reason,
            at_ns: now_ns,
            open_wait_ns: if to == BreakerState::Open {
                self.current_open_wait_ns
            } else {
                0
            },
        });
        self.state = to;
        self.epoch += 1;
        self.state_since_ns = now_ns;
        self.trials_issued = 0;
        self.trials = Totals::default();
        if to == BreakerState::Closed {
            self.window.clear();
        }
        self.stats.publish_totals(Totals::default());
        self.stats.state.store(to as u8, Relaxed);
        self.stats.transitions[to as usize].fetch_add(1, Relaxed);
    }
}

pub mod log;
mod stats;
#[cfg(test)]
mod tests;

use log::TransitionLog;
pub use log::{Transition, TransitionReason, TRANSITIONS_KEPT};
pub use stats::{BreakerSnapshot, BreakerStats};
