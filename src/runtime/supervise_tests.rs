use super::*;

use std::time::Instant;

/// Waits (bounded) until `f` holds.
fn until(mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

#[test]
fn the_rule_over_every_combination() {
    let panicked = Cause::Panicked("boom".into());
    for policy in [Policy::Permanent, Policy::Transient] {
        for stop in [false, true] {
            assert!(is_fatal(policy, stop, &panicked), "a panic is always fatal");
            let returned = is_fatal(policy, stop, &Cause::Returned);
            assert_eq!(
                returned,
                policy == Policy::Permanent && !stop,
                "{policy:?} {stop}"
            );
        }
    }
}

#[test]
fn a_panic_is_recorded_with_its_message_and_the_join_still_sees_it() {
    let s = Supervisor::new();
    let t = s
        .spawn("pw-test-panic", Policy::Transient, || -> u32 {
            panic!("planted {}", 7)
        })
        .unwrap();
    assert!(t.join().is_err(), "the owner's join sees the panic");
    let d = s.first_death().expect("recorded");
    assert_eq!(d.stage, "pw-test-panic");
    assert_eq!(d.cause, Cause::Panicked("planted 7".into()));
    assert_eq!(s.stages(), vec![("pw-test-panic".to_string(), false)]);
}

#[test]
fn a_permanent_stage_that_returns_unasked_dies_and_an_asked_one_does_not() {
    let s = Supervisor::new();
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(0);
    let asked = s
        .spawn("pw-test-asked", Policy::Permanent, move || {
            let _ = go_rx.recv();
        })
        .unwrap();
    asked.request_stop();
    drop(go_tx);
    assert!(until(|| asked.is_finished()));
    assert!(s.first_death().is_none(), "a requested end is not a death");
    assert!(s.stages().is_empty(), "an expected end leaves the list");
    let unasked = s.spawn("pw-test-unasked", Policy::Permanent, || 5).unwrap();
    assert!(until(|| s.first_death().is_some()));
    assert_eq!(unasked.join().unwrap(), 5);
    assert_eq!(s.first_death().unwrap().cause, Cause::Returned);
}

#[test]
fn a_transient_stage_may_return() {
    let s = Supervisor::new();
    let t = s.spawn("pw-test-feed", Policy::Transient, || ()).unwrap();
    assert!(until(|| t.is_finished()));
    assert!(s.first_death().is_none());
}

#[test]
fn the_first_death_is_kept_and_running_stages_are_up() {
    let s = Supervisor::new();
    let (hold_tx, hold_rx) = crossbeam_channel::bounded::<()>(0);
    let running = s
        .spawn("pw-test-running", Policy::Permanent, move || {
            let _ = hold_rx.recv();
        })
        .unwrap();
    let a = s
        .spawn("pw-test-a", Policy::Permanent, || panic!("first"))
        .unwrap();
    assert!(until(|| s.first_death().is_some()));
    let b = s
        .spawn("pw-test-b", Policy::Permanent, || panic!("second"))
        .unwrap();
    let _ = (a.join(), b.join());
    assert_eq!(s.first_death().unwrap().stage, "pw-test-a");
    let up: Vec<_> = s.stages();
    assert!(up.contains(&("pw-test-running".to_string(), true)));
    assert!(up.contains(&("pw-test-b".to_string(), false)));
    running.request_stop();
    drop(hold_tx);
    running.join().unwrap();
}

#[test]
fn panic_messages_are_cut_at_a_character_boundary() {
    let long = "é".repeat(CAUSE_BYTES_MAX);
    let payload: Box<dyn std::any::Any + Send> = Box::new(long);
    let m = panic_message(&*payload);
    assert!(m.len() <= CAUSE_BYTES_MAX && m.chars().all(|c| c == 'é'));
    let other: Box<dyn std::any::Any + Send> = Box::new(7u8);
    assert_eq!(panic_message(&*other), "(not a string)");
}

#[test]
fn causes_are_escaped_for_logs() {
    let d = Death {
        stage: "pw-x".into(),
        cause: Cause::Panicked("a\nb\u{1b}[31m".into()),
        at_ns: 0,
    };
    assert_eq!(d.to_string(), "stage pw-x died: panicked: a\\nb\\u{1b}[31m");
}

#[test]
fn a_stage_that_declares_its_end_expected_is_not_a_death() {
    let s = Supervisor::new();
    let t = s
        .spawn("pw-test-refused", Policy::Permanent, end_expected)
        .unwrap();
    t.join().unwrap();
    assert!(s.first_death().is_none());
    end_expected(); // off a supervised thread: nothing to mark
}

/// How one generated stage ends.
#[derive(Debug, Clone, Copy)]
enum End {
    Panic,
    Return,
    RunUntilStopped,
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Over generated sets of stages (policy, whether the owner asks them
    /// to stop first, how they end): a death is recorded exactly when
    /// some end was fatal by the rule, and the stage list shows exactly
    /// the running stages as up and the fatal ones as down.
    #[test]
    fn the_supervisor_reports_exactly_the_fatal_ends(
        stages in proptest::collection::vec(
            (proptest::bool::ANY, proptest::bool::ANY, 0u8..3),
            1..6,
        )
    ) {
        let s = Supervisor::new();
        let mut handles = Vec::new();
        let mut holds = Vec::new();
        let mut fatal = Vec::new();
        for (k, &(permanent, stop_first, end)) in stages.iter().enumerate() {
            let policy = if permanent { Policy::Permanent } else { Policy::Transient };
            let end = [End::Panic, End::Return, End::RunUntilStopped][end as usize];
            let (tx, rx) = crossbeam_channel::bounded::<()>(0);
            let name = format!("pw-test-{k}");
            let t = s.spawn(name.clone(), policy, move || {
                let _ = rx.recv(); // released by the test
                match end {
                    End::Panic => panic!("generated"),
                    End::Return | End::RunUntilStopped => {}
                }
            }).unwrap();
            if stop_first || matches!(end, End::RunUntilStopped) {
                t.request_stop();
            }
            let cause = match end {
                End::Panic => Cause::Panicked("generated".into()),
                _ => Cause::Returned,
            };
            let asked = stop_first || matches!(end, End::RunUntilStopped);
            if is_fatal(policy, asked, &cause) {
                fatal.push(name);
            }
            if matches!(end, End::RunUntilStopped) {
                holds.push(tx);
            } else {
                drop(tx);
            }
            handles.push(t);
        }
        // Every stage that ends has ended once its handle is finished.
        let ending = stages.iter().filter(|s| s.2 != 2).count();
        proptest::prop_assert!(until(|| handles.iter().filter(|t| t.is_finished()).count() == ending));
        proptest::prop_assert_eq!(s.first_death().is_some(), !fatal.is_empty());
        if let Some(d) = s.first_death() {
            proptest::prop_assert!(fatal.contains(&d.stage));
        }
        for (name, up) in s.stages() {
            proptest::prop_assert_eq!(up, !fatal.contains(&name), "{}", name);
        }
        drop(holds);
        for t in handles {
            let _ = t.join();
        }
    }
}
