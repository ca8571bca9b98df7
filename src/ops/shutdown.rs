//! Graceful shutdown: a plan of named steps run in order inside a budget.
//!
//! Sans-IO core: a [`ShutdownPlan`] is a list of steps, each a closure
//! `FnMut(deadline_ns, now_ns) -> StepResult` that does a bounded slice of
//! work and says `Done` or `NotYet`. [`Shutdown::run`] drives the steps with
//! an injected [`Clock`] and an injected wait function, so tests run the
//! whole sequence on a `ManualClock` without sleeping. Each step has its own
//! budget and the whole run has `grace_ms`; a step that overruns its budget
//! is cut and the next step runs (later steps — telling subscribers, closing
//! the capture file — matter on their own); once the total budget is spent,
//! every remaining step is cut without running. The report names exactly
//! what was cut, and the exit code is non-zero if anything was.
//!
//! Nothing here allocates after the plan is built, except the report.
//!
//! The standard order ([`standard_plan`]): readiness 503 at once → keep
//! serving for `drain_delay_ms` → stop accepting → finish in-flight requests
//! → flush outbound buffers → Disconnect(shutdown) with a jittered
//! retryAfterMs to every subscriber → flush and close the recorder → exit.

use crate::clock::{Clock, NS_PER_MS};
use crate::ops::health::Health;
use rand::Rng;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Exit code when every step finished in time.
pub const EXIT_CLEAN: i32 = 0;
/// Exit code when the budget ran out and steps were cut.
pub const EXIT_BUDGET_CUT: i32 = 1;
/// Exit code after a second signal forced an immediate exit (128 + SIGINT,
/// the shell's convention for "interrupted").
pub const EXIT_FORCED: i32 = 130;

/// Default drain delay: readiness fails, traffic keeps flowing while load
/// balancers and endpoint lists forget this instance.
pub const DEFAULT_DRAIN_DELAY_MS: u64 = 5_000;
/// Default total shutdown budget, from the first signal to exit.
pub const DEFAULT_GRACE_MS: u64 = 25_000;
/// Smallest time left after the drain delay for the work steps; grace must
/// exceed drain delay by at least this much.
pub const MIN_SHUTDOWN_WORK_MS: u64 = 1_000;
/// Default per-step budgets of the standard plan.
pub(crate) const DEFAULT_STOP_ACCEPTING_BUDGET_MS: u64 = 1_000;
/// Default budget of finishing in-flight requests.
pub(crate) const DEFAULT_IN_FLIGHT_BUDGET_MS: u64 = 5_000;
/// Default budget of flushing outbound buffers.
pub(crate) const DEFAULT_FLUSH_OUTBOUND_BUDGET_MS: u64 = 3_000;
/// Default budget of disconnecting every subscriber.
pub(crate) const DEFAULT_DISCONNECT_BUDGET_MS: u64 = 3_000;
/// Default budget of flushing and closing the recorder.
pub(crate) const DEFAULT_RECORDER_BUDGET_MS: u64 = 5_000;
/// How often a `NotYet` step is polled again.
pub(crate) const DEFAULT_POLL_INTERVAL_MS: u64 = 10;
/// Retry-after range for a shutdown notice drawn by [`RetryAfterJitter`]:
/// each subscriber would get a value in `[min, min + spread]` so they return
/// to the other instances spread out, not all in the same second. The
/// service does not use it: the gateway draws its own jittered retry-after
/// for Disconnect(shutdown).
pub const DEFAULT_RETRY_AFTER_MIN_MS: u32 = 1_000;
/// See [`DEFAULT_RETRY_AFTER_MIN_MS`].
pub const DEFAULT_RETRY_AFTER_SPREAD_MS: u32 = 9_000;

/// What a step says after one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepResult {
    /// The step's work is finished.
    Done,
    /// More work is left; call again after the poll interval.
    NotYet,
}

/// A step's work: called with the step's deadline and the current time,
/// both in ns on the run's clock. Must return promptly.
pub type StepFn = Box<dyn FnMut(u64, u64) -> StepResult + Send>;

struct Step {
    name: &'static str,
    budget_ns: u64,
    run: StepFn,
}

/// Named steps in order, with budgets.
pub struct ShutdownPlan {
    steps: Vec<Step>,
    grace_ns: u64,
    poll_interval_ns: u64,
}

impl std::fmt::Debug for ShutdownPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.steps.iter().map(|s| s.name).collect();
        f.debug_struct("ShutdownPlan")
            .field("steps", &names)
            .field("grace_ns", &self.grace_ns)
            .finish()
    }
}

impl ShutdownPlan {
    /// An empty plan with a total budget of `grace_ms`.
    pub fn new(grace_ms: u64) -> Self {
        ShutdownPlan {
            steps: Vec::new(),
            grace_ns: grace_ms.saturating_mul(NS_PER_MS),
            poll_interval_ns: DEFAULT_POLL_INTERVAL_MS * NS_PER_MS,
        }
    }

    /// Appends a step with its own budget.
    pub fn step(
        mut self,
        name: &'static str,
        budget_ms: u64,
        run: impl FnMut(u64, u64) -> StepResult + Send + 'static,
    ) -> Self {
        self.steps.push(Step {
            name,
            budget_ns: budget_ms.saturating_mul(NS_PER_MS),
            run: Box::new(run),
        });
        self
    }

    /// How long to wait between polls of a `NotYet` step.
    pub fn poll_interval_ms(mut self, ms: u64) -> Self {
        self.poll_interval_ns = ms.max(1) * NS_PER_MS;
        self
    }

    /// Step names in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.steps.iter().map(|s| s.name).collect()
    }
}

/// Why a step did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutReason {
    /// It ran but was still `NotYet` at its own deadline.
    StepBudget,
    /// The total budget was spent before or while it ran.
    TotalBudget,
    /// A second signal asked for an immediate exit.
    Forced,
}

/// What happened to one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    /// The step finished within its budget.
    Done {
        /// The step's name.
        name: &'static str,
        /// How long it ran, in ns.
        took_ns: u64,
    },
    /// The step was cut (or never ran).
    Cut {
        /// The step's name.
        name: &'static str,
        /// Why it was cut.
        reason: CutReason,
        /// How long it ran before the cut, in ns (0 when it never ran).
        ran_ns: u64,
    },
}

impl StepOutcome {
    /// The step's name.
    pub fn name(&self) -> &'static str {
        match self {
            StepOutcome::Done { name, .. } | StepOutcome::Cut { name, .. } => name,
        }
    }
}

/// The result of a run: every step's outcome, in order, and the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Every step's outcome, in plan order.
    pub outcomes: Vec<StepOutcome>,
    /// Time from the start of the run to its end, in ns.
    pub elapsed_ns: u64,
    /// [`EXIT_CLEAN`], [`EXIT_BUDGET_CUT`] or [`EXIT_FORCED`].
    pub exit_code: i32,
}

impl ShutdownReport {
    /// Names of the steps that were cut, in order.
    pub fn cut(&self) -> Vec<&'static str> {
        self.outcomes
            .iter()
            .filter(|o| matches!(o, StepOutcome::Cut { .. }))
            .map(StepOutcome::name)
            .collect()
    }

    /// True when no step was cut and no second signal came.
    pub(crate) fn is_clean(&self) -> bool {
        self.exit_code == EXIT_CLEAN
    }
}

/// Runs a plan. `wait(until_ns)` must return by `until_ns` on the clock (a
/// real sleep in the service, a `ManualClock` advance in tests); it may
/// return early.
#[derive(Debug)]
pub struct Shutdown;

struct Run<'a> {
    clock: &'a dyn Clock,
    forced: &'a AtomicBool,
    start_ns: u64,
    total_deadline_ns: u64,
    poll_interval_ns: u64,
}

impl Shutdown {
    /// Runs every step of `plan` in order, each until `Done`, its own deadline
    /// or the run's `grace_ms`, whichever is first; a set `forced` cuts every
    /// remaining step. Never panics on a step's answer; allocates the report.
    pub fn run(
        mut plan: ShutdownPlan,
        clock: &dyn Clock,
        wait: &mut dyn FnMut(u64),
        forced: &AtomicBool,
    ) -> ShutdownReport {
        let start_ns = clock.now_ns();
        let run = Run {
            clock,
            forced,
            start_ns,
            total_deadline_ns: start_ns.saturating_add(plan.grace_ns),
            poll_interval_ns: plan.poll_interval_ns,
        };
        let mut outcomes = Vec::with_capacity(plan.steps.len());
        let mut stop: Option<CutReason> = None;
        for step in plan.steps.iter_mut() {
            let outcome = match stop {
                Some(reason) => StepOutcome::Cut {
                    name: step.name,
                    reason,
                    ran_ns: 0,
                },
                None => run.step(step, wait),
            };
            if let StepOutcome::Cut {
                reason: r @ (CutReason::TotalBudget | CutReason::Forced),
                ..
            } = outcome
            {
                stop = Some(r);
            }
            outcomes.push(outcome);
        }
        run.report(outcomes)
    }
}

impl Run<'_> {
    fn step(&self, step: &mut Step, wait: &mut dyn FnMut(u64)) -> StepOutcome {
        let began_ns = self.clock.now_ns();
        let step_deadline_ns = began_ns
            .saturating_add(step.budget_ns)
            .min(self.total_deadline_ns);
        loop {
            let now_ns = self.clock.now_ns();
            if self.forced.load(Ordering::Acquire) {
                return self.cut(step, CutReason::Forced, began_ns, now_ns);
            }
            if now_ns >= self.total_deadline_ns {
                return self.cut(step, CutReason::TotalBudget, began_ns, now_ns);
            }
            if (step.run)(step_deadline_ns, now_ns) == StepResult::Done {
                let took_ns = self.clock.now_ns().saturating_sub(began_ns);
                tracing::info!(
                    step = step.name,
                    took_ms = took_ns / NS_PER_MS,
                    "shutdown step done"
                );
                return StepOutcome::Done {
                    name: step.name,
                    took_ns,
                };
            }
            if now_ns >= step_deadline_ns {
                let reason = if step_deadline_ns == self.total_deadline_ns {
                    CutReason::TotalBudget
                } else {
                    CutReason::StepBudget
                };
                return self.cut(step, reason, began_ns, now_ns);
            }
            wait(
                now_ns
                    .saturating_add(self.poll_interval_ns)
                    .min(step_deadline_ns),
            );
        }
    }

    #[cold]
    fn cut(&self, step: &Step, reason: CutReason, began_ns: u64, now_ns: u64) -> StepOutcome {
        let ran_ns = now_ns.saturating_sub(began_ns);
        tracing::warn!(
            step = step.name,
            ?reason,
            ran_ms = ran_ns / NS_PER_MS,
            "shutdown step cut"
        );
        StepOutcome::Cut {
            name: step.name,
            reason,
            ran_ns,
        }
    }

    fn report(&self, outcomes: Vec<StepOutcome>) -> ShutdownReport {
        let forced = outcomes.iter().any(|o| {
            matches!(
                o,
                StepOutcome::Cut {
                    reason: CutReason::Forced,
                    ..
                }
            )
        });
        let cut = outcomes
            .iter()
            .any(|o| matches!(o, StepOutcome::Cut { .. }));
        let exit_code = match (forced, cut) {
            (true, _) => EXIT_FORCED,
            (false, true) => EXIT_BUDGET_CUT,
            _ => EXIT_CLEAN,
        };
        let report = ShutdownReport {
            outcomes,
            elapsed_ns: self.clock.now_ns().saturating_sub(self.start_ns),
            exit_code,
        };
        if report.is_clean() {
            tracing::info!(
                elapsed_ms = report.elapsed_ns / NS_PER_MS,
                "shutdown complete"
            );
        } else {
            tracing::warn!(cut = ?report.cut(), exit_code, elapsed_ms = report.elapsed_ns / NS_PER_MS, "shutdown cut short");
        }
        report
    }
}

/// Jittered retry-after values for a shutdown notice: uniform in
/// `[min_ms, min_ms + spread_ms]`. Seeded, so tests are deterministic.
/// The service's disconnect step does not use it (the gateway draws its
/// own); it is here for a step that sends the notices itself.
#[derive(Debug, Clone)]
pub struct RetryAfterJitter<R: Rng> {
    /// Smallest retry-after, in ms.
    pub min_ms: u32,
    /// Width of the uniform range above `min_ms`, in ms.
    pub spread_ms: u32,
    rng: R,
}

impl<R: Rng> RetryAfterJitter<R> {
    /// A jitter over `[min_ms, min_ms + spread_ms]` drawing from `rng`.
    pub fn new(min_ms: u32, spread_ms: u32, rng: R) -> Self {
        RetryAfterJitter {
            min_ms,
            spread_ms,
            rng,
        }
    }

    /// The next subscriber's retryAfterMs.
    pub fn next_ms(&mut self) -> u32 {
        self.min_ms
            .saturating_add(self.rng.gen_range(0..=self.spread_ms))
    }
}

/// The service's parts of the standard plan, each a step closure (see
/// [`StepFn`]).
pub struct ShutdownHooks {
    /// Step that stops accepting new subscriber connections.
    pub stop_accepting: StepFn,
    /// Step that is `Done` once no request is queued or running.
    pub finish_in_flight: StepFn,
    /// Step that is `Done` once the outbound buffers are written.
    pub flush_outbound: StepFn,
    /// Step that sends every subscriber Disconnect(shutdown) with a jittered
    /// retry-after and is `Done` once none is connected.
    pub disconnect_subscribers: StepFn,
    /// Step that flushes and closes the recorder's capture file.
    pub close_recorder: StepFn,
}

/// Budgets of the standard plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownBudgets {
    /// Time readiness fails before the work steps start, in ms.
    pub drain_delay_ms: u64,
    /// Total budget from the first signal to exit, in ms.
    pub grace_ms: u64,
    /// Budget of [`ShutdownHooks::stop_accepting`], in ms.
    pub stop_accepting_ms: u64,
    /// Budget of [`ShutdownHooks::finish_in_flight`], in ms.
    pub in_flight_ms: u64,
    /// Budget of [`ShutdownHooks::flush_outbound`], in ms.
    pub flush_outbound_ms: u64,
    /// Budget of [`ShutdownHooks::disconnect_subscribers`], in ms.
    pub disconnect_ms: u64,
    /// Budget of [`ShutdownHooks::close_recorder`], in ms.
    pub recorder_ms: u64,
}

impl Default for ShutdownBudgets {
    fn default() -> Self {
        ShutdownBudgets {
            drain_delay_ms: DEFAULT_DRAIN_DELAY_MS,
            grace_ms: DEFAULT_GRACE_MS,
            stop_accepting_ms: DEFAULT_STOP_ACCEPTING_BUDGET_MS,
            in_flight_ms: DEFAULT_IN_FLIGHT_BUDGET_MS,
            flush_outbound_ms: DEFAULT_FLUSH_OUTBOUND_BUDGET_MS,
            disconnect_ms: DEFAULT_DISCONNECT_BUDGET_MS,
            recorder_ms: DEFAULT_RECORDER_BUDGET_MS,
        }
    }
}

/// Step names of the standard plan, in order.
pub(crate) const STANDARD_STEPS: [&str; 7] = [
    "readiness_off",
    "drain_delay",
    "stop_accepting",
    "finish_in_flight",
    "flush_outbound",
    "disconnect_subscribers",
    "close_recorder",
];

/// The standard plan: readiness off, drain delay, then the hooks in order.
pub fn standard_plan(
    health: Arc<Health>,
    budgets: ShutdownBudgets,
    hooks: ShutdownHooks,
) -> ShutdownPlan {
    let drain_ns = budgets.drain_delay_ms.saturating_mul(NS_PER_MS);
    let mut drain_started_ns: Option<u64> = None;
    let drain = move |_deadline_ns: u64, now_ns: u64| {
        let started = *drain_started_ns.get_or_insert(now_ns);
        if now_ns.saturating_sub(started) >= drain_ns {
            StepResult::Done
        } else {
            StepResult::NotYet
        }
    };
    let readiness_off = move |_deadline_ns: u64, _now_ns: u64| {
        health.begin_draining();
        StepResult::Done
    };
    // The drain step's budget is the delay plus one poll, so it ends by
    // finishing, not by being cut.
    ShutdownPlan::new(budgets.grace_ms)
        .step(STANDARD_STEPS[0], 0, readiness_off)
        .step(
            STANDARD_STEPS[1],
            budgets.drain_delay_ms + DEFAULT_POLL_INTERVAL_MS,
            drain,
        )
        .step(
            STANDARD_STEPS[2],
            budgets.stop_accepting_ms,
            hooks.stop_accepting,
        )
        .step(
            STANDARD_STEPS[3],
            budgets.in_flight_ms,
            hooks.finish_in_flight,
        )
        .step(
            STANDARD_STEPS[4],
            budgets.flush_outbound_ms,
            hooks.flush_outbound,
        )
        .step(
            STANDARD_STEPS[5],
            budgets.disconnect_ms,
            hooks.disconnect_subscribers,
        )
        .step(STANDARD_STEPS[6], budgets.recorder_ms, hooks.close_recorder)
}

/// The service's wait function: sleeps on the real clock until `until_ns`.
pub fn sleep_until<C: Clock + 'static>(clock: C) -> impl FnMut(u64) {
    move |until_ns| {
        let now_ns = clock.now_ns();
        if until_ns > now_ns {
            std::thread::sleep(std::time::Duration::from_nanos(until_ns - now_ns));
        }
    }
}

#[cfg(test)]
mod tests;
