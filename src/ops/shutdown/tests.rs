use super::*;
use crate::clock::ManualClock;
use std::sync::Mutex;

type Log = Arc<Mutex<Vec<String>>>;

/// A step that records its calls and finishes after `calls_needed` calls.
fn recorder(log: &Log, name: &'static str, calls_needed: u32) -> StepFn {
    let log = log.clone();
    let mut calls = 0;
    Box::new(move |_deadline_ns, _now_ns| {
        calls += 1;
        log.lock().unwrap().push(name.to_string());
        if calls >= calls_needed {
            StepResult::Done
        } else {
            StepResult::NotYet
        }
    })
}

fn hooks(log: &Log, in_flight_calls: u32) -> ShutdownHooks {
    ShutdownHooks {
        stop_accepting: recorder(log, "stop_accepting", 1),
        finish_in_flight: recorder(log, "finish_in_flight", in_flight_calls),
        flush_outbound: recorder(log, "flush_outbound", 1),
        disconnect_subscribers: recorder(log, "disconnect_subscribers", 1),
        close_recorder: recorder(log, "close_recorder", 1),
    }
}

/// Wait function for tests: jumps the manual clock to the requested time.
fn jump(clock: &Arc<ManualClock>) -> impl FnMut(u64) + '_ {
    move |until_ns| clock.set_ns(until_ns.max(clock.now_ns()))
}

fn fixture() -> (Arc<ManualClock>, Arc<Health>, Log) {
    let clock = ManualClock::new(1_000);
    let health = Health::new(clock.clone(), 60_000);
    health.set_serving();
    (clock, health, Arc::new(Mutex::new(Vec::new())))
}

#[test]
fn steps_run_in_order_and_exit_clean_inside_grace() {
    let (clock, health, log) = fixture();
    let plan = standard_plan(health.clone(), ShutdownBudgets::default(), hooks(&log, 3));
    assert_eq!(plan.names(), STANDARD_STEPS);
    let report = Shutdown::run(plan, &*clock, &mut jump(&clock), &AtomicBool::new(false));
    assert_eq!(report.exit_code, EXIT_CLEAN);
    assert!(report.cut().is_empty());
    let names: Vec<_> = report.outcomes.iter().map(StepOutcome::name).collect();
    assert_eq!(names, STANDARD_STEPS);
    let mut calls = log.lock().unwrap().clone();
    calls.dedup();
    assert_eq!(calls, STANDARD_STEPS[2..]);
    // The drain delay was really waited: at least 5 s passed, and under grace.
    assert!(report.elapsed_ns >= DEFAULT_DRAIN_DELAY_MS * NS_PER_MS);
    assert!(report.elapsed_ns < DEFAULT_GRACE_MS * NS_PER_MS);
}

#[test]
fn readiness_flips_before_anything_else() {
    let (clock, health, _log) = fixture();
    let h = health.clone();
    let mut seen_ready = Vec::new();
    let probe = move |_: u64, _: u64| {
        seen_ready.push(h.is_ready());
        assert!(
            seen_ready.iter().all(|r| !r),
            "a service step ran while still ready"
        );
        StepResult::Done
    };
    let hooks = ShutdownHooks {
        stop_accepting: Box::new(probe.clone()),
        finish_in_flight: Box::new(probe.clone()),
        flush_outbound: Box::new(probe.clone()),
        disconnect_subscribers: Box::new(probe.clone()),
        close_recorder: Box::new(probe),
    };
    assert!(health.is_ready());
    let plan = standard_plan(health.clone(), ShutdownBudgets::default(), hooks);
    let report = Shutdown::run(plan, &*clock, &mut jump(&clock), &AtomicBool::new(false));
    assert_eq!(
        report.outcomes[0],
        StepOutcome::Done {
            name: "readiness_off",
            took_ns: 0
        }
    );
    assert!(!health.is_ready());
    assert!(health.is_live(), "draining is still live");
}

#[test]
fn drain_delay_keeps_serving_for_the_configured_time() {
    let (clock, health, log) = fixture();
    let budgets = ShutdownBudgets {
        drain_delay_ms: 2_000,
        ..ShutdownBudgets::default()
    };
    let report = Shutdown::run(
        standard_plan(health, budgets, hooks(&log, 1)),
        &*clock,
        &mut jump(&clock),
        &AtomicBool::new(false),
    );
    let StepOutcome::Done { took_ns, .. } = report.outcomes[1] else {
        panic!("drain delay cut: {report:?}");
    };
    assert!(
        (2_000 * NS_PER_MS..2_000 * NS_PER_MS + DEFAULT_POLL_INTERVAL_MS * NS_PER_MS)
            .contains(&took_ns)
    );
}

#[test]
fn a_step_over_its_budget_is_cut_and_later_steps_still_run() {
    let (clock, health, log) = fixture();
    // finish_in_flight never finishes.
    let plan = standard_plan(health, ShutdownBudgets::default(), hooks(&log, u32::MAX));
    let report = Shutdown::run(plan, &*clock, &mut jump(&clock), &AtomicBool::new(false));
    assert_eq!(report.cut(), ["finish_in_flight"]);
    assert_eq!(report.exit_code, EXIT_BUDGET_CUT);
    assert!(matches!(
        report.outcomes[3],
        StepOutcome::Cut { reason: CutReason::StepBudget, ran_ns, .. } if ran_ns == DEFAULT_IN_FLIGHT_BUDGET_MS * NS_PER_MS
    ));
    let calls = log.lock().unwrap().clone();
    assert_eq!(calls.last().map(String::as_str), Some("close_recorder"));
}

#[test]
fn total_budget_cut_reports_exactly_what_remains_and_exits_non_zero() {
    let (clock, health, log) = fixture();
    // 5 s drain + in-flight allowed 5 s but the total grace is only 8 s:
    // finish_in_flight is cut by the total budget at 8 s, and the three
    // steps after it never run.
    let budgets = ShutdownBudgets {
        grace_ms: 8_000,
        ..ShutdownBudgets::default()
    };
    let plan = standard_plan(health, budgets, hooks(&log, u32::MAX));
    let start = clock.now_ns();
    let report = Shutdown::run(plan, &*clock, &mut jump(&clock), &AtomicBool::new(false));
    assert_eq!(
        report.cut(),
        [
            "finish_in_flight",
            "flush_outbound",
            "disconnect_subscribers",
            "close_recorder"
        ]
    );
    assert_ne!(report.exit_code, EXIT_CLEAN);
    assert!(report.outcomes[4..].iter().all(|o| matches!(
        o,
        StepOutcome::Cut {
            reason: CutReason::TotalBudget,
            ran_ns: 0,
            ..
        }
    )));
    assert!(!log.lock().unwrap().iter().any(|c| c == "flush_outbound"));
    assert_eq!(
        clock.now_ns() - start,
        8_000 * NS_PER_MS,
        "stopped exactly at grace"
    );
}

#[test]
fn second_signal_cuts_everything_left_at_once() {
    let (clock, health, _log) = fixture();
    let forced = Arc::new(AtomicBool::new(false));
    let counter = crate::ops::signals::SignalCounter::default();
    assert_eq!(
        counter.observe(),
        crate::ops::signals::SignalAction::BeginShutdown
    );
    let f = forced.clone();
    let second_signal_in_flight = move |_: u64, _: u64| {
        // The second signal arrives while requests are finishing.
        if counter.observe() == crate::ops::signals::SignalAction::ExitNow {
            f.store(true, Ordering::Release);
        }
        StepResult::NotYet
    };
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let mut h = hooks(&log, 1);
    h.finish_in_flight = Box::new(second_signal_in_flight);
    let plan = standard_plan(health, ShutdownBudgets::default(), h);
    let before = clock.now_ns();
    let report = Shutdown::run(plan, &*clock, &mut jump(&clock), &forced);
    assert_eq!(report.exit_code, EXIT_FORCED);
    assert_eq!(
        report.cut(),
        [
            "finish_in_flight",
            "flush_outbound",
            "disconnect_subscribers",
            "close_recorder"
        ]
    );
    // Only the drain delay and one poll passed: no waiting after the signal.
    let elapsed_ms = (clock.now_ns() - before) / NS_PER_MS;
    assert!(
        elapsed_ms <= DEFAULT_DRAIN_DELAY_MS + 3 * DEFAULT_POLL_INTERVAL_MS,
        "{elapsed_ms}"
    );
}

#[test]
fn retry_after_is_jittered_within_range() {
    use rand::SeedableRng;
    let mut j = RetryAfterJitter::new(1_000, 9_000, rand::rngs::SmallRng::seed_from_u64(7));
    let values: Vec<u32> = (0..1_000).map(|_| j.next_ms()).collect();
    assert!(values.iter().all(|v| (1_000..=10_000).contains(v)));
    let distinct: std::collections::BTreeSet<_> = values.iter().map(|v| v / 1_000).collect();
    assert!(distinct.len() >= 9, "spread over the window: {distinct:?}");
}

#[test]
fn empty_plan_is_clean() {
    let clock = ManualClock::new(0);
    let r = Shutdown::run(
        ShutdownPlan::new(1),
        &*clock,
        &mut |_| {},
        &AtomicBool::new(false),
    );
    assert!(r.is_clean() && r.outcomes.is_empty());
}
