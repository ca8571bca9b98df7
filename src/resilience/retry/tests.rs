//! Retry driver tests on a `ManualClock` with a sleeper that advances it.

use super::*;
use crate::clock::ManualClock;
use crate::resilience::error::{BulkheadFull, NotPermitted};
use crate::resilience::BreakerState;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::cell::Cell;

fn advancing(clock: &ManualClock) -> impl FnMut(Duration) + '_ {
    move |d| clock.advance(d)
}

#[derive(Debug, Clone, PartialEq)]
struct DepErr;

#[test]
fn retries_transient_errors_until_success() {
    let clock = ManualClock::new(0);
    let mut rng = SmallRng::seed_from_u64(1);
    let cfg = RetryConfig {
        backoff: Backoff::new(10, 100),
        ..RetryConfig::default()
    };
    let mut retry = Retry::new(cfg).unwrap();
    let calls = Cell::new(0);
    let mut slept = Vec::new();
    let result = retry.run(
        &RetryContext::outermost(None),
        &*clock,
        &mut rng,
        |ctx| {
            assert!(ctx.retrying_layer_above, "layers below must not retry");
            calls.set(calls.get() + 1);
            if calls.get() < 3 {
                Err(CallError::transient(DepErr))
            } else {
                Ok(calls.get())
            }
        },
        &mut |d: Duration| {
            slept.push(d);
            clock.advance(d)
        },
    );
    assert_eq!(result, Ok(3));
    assert_eq!(slept.len(), 2);
    assert!(slept[0] <= Duration::from_millis(10) && slept[1] <= Duration::from_millis(20));
    assert_eq!(retry.stats().snapshot().retries, 2);
}

#[test]
fn gives_up_after_max_attempts() {
    let clock = ManualClock::new(0);
    let mut rng = SmallRng::seed_from_u64(2);
    let mut retry = Retry::new(RetryConfig::default()).unwrap();
    let calls = Cell::new(0u32);
    let result: Result<(), _> = retry.run(
        &RetryContext::default(),
        &*clock,
        &mut rng,
        |_| {
            calls.set(calls.get() + 1);
            Err(CallError::transient(DepErr))
        },
        &mut advancing(&clock),
    );
    assert_eq!(result, Err(CallError::transient(DepErr)));
    assert_eq!(calls.get(), MAX_ATTEMPTS_DEFAULT);
    assert_eq!(retry.stats().snapshot().attempts_exhausted, 1);
}

#[test]
fn non_retryable_errors_are_never_retried() {
    let clock = ManualClock::new(0);
    let mut rng = SmallRng::seed_from_u64(3);
    let mut retry = Retry::new(RetryConfig::default()).unwrap();
    let open = NotPermitted {
        state: BreakerState::Open,
        retry_after_ns: Some(5),
    };
    let errors = [
        CallError::Business(DepErr),
        CallError::Permanent(DepErr),
        CallError::BreakerOpen(open),
        CallError::BulkheadFull(BulkheadFull { max_concurrent: 4 }),
    ];
    for e in errors {
        let calls = Cell::new(0);
        let result: Result<(), _> = retry.run(
            &RetryContext::default(),
            &*clock,
            &mut rng,
            |_| {
                calls.set(calls.get() + 1);
                Err(e.clone())
            },
            &mut |_: Duration| panic!("no backoff for a non-retryable error"),
        );
        assert_eq!(result, Err(e.clone()));
        assert_eq!(calls.get(), 1, "{e:?} was retried");
    }
    let s = retry.stats().snapshot();
    assert_eq!((s.not_retryable, s.retries), (4, 0));
}

#[test]
fn retry_after_is_honoured_as_a_floor() {
    let clock = ManualClock::new(0);
    let mut rng = SmallRng::seed_from_u64(4);
    let mut retry = Retry::new(RetryConfig {
        max_attempts: 2,
        ..RetryConfig::default()
    })
    .unwrap();
    let mut slept = Duration::ZERO;
    let _ = retry.run(
        &RetryContext::default(),
        &*clock,
        &mut rng,
        |_| {
            Err::<(), _>(CallError::Transient {
                error: DepErr,
                retry_after_ms: 700,
            })
        },
        &mut |d: Duration| slept += d,
    );
    assert!(slept >= Duration::from_millis(700), "slept {slept:?}");
}

#[test]
fn no_retry_that_would_overrun_the_deadline() {
    let clock = ManualClock::new(0);
    let mut rng = SmallRng::seed_from_u64(5);
    let mut retry = Retry::new(RetryConfig::default()).unwrap();
    let seen_remaining = Cell::new(None);
    let result: Result<(), _> = retry.run(
        &RetryContext::outermost(Some(300 * NS_PER_MS)),
        &*clock,
        &mut rng,
        |ctx| {
            seen_remaining.set(ctx.remaining_ns);
            clock.advance_ms(100); // the attempt itself takes 100 ms
            Err(CallError::Transient {
                error: DepErr,
                retry_after_ms: 250,
            })
        },
        &mut advancing(&clock),
    );
    assert!(result.is_err());
    assert_eq!(
        seen_remaining.get(),
        Some(300 * NS_PER_MS),
        "first attempt sees the whole budget"
    );
    let s = retry.stats().snapshot();
    assert_eq!(
        (s.retries, s.deadline_exhausted),
        (0, 1),
        "250 ms floor >= 200 ms left"
    );
}

/// The outer layer retries with a budget; the inner layer (its own `Retry`)
/// receives the outer context and must not retry. The dependency therefore
/// sees at most `calls + budget` attempts.
#[test]
fn budget_caps_retries_across_two_layers() {
    let clock = ManualClock::new(0);
    let mut rng = SmallRng::seed_from_u64(6);
    let cfg = RetryConfig {
        backoff: Backoff::new(10, 100),
        ..RetryConfig::default()
    };
    let mut outer = Retry::new(cfg).unwrap();
    let mut inner = Retry::new(cfg).unwrap();
    let dependency_calls = Cell::new(0u64);
    let calls = 2_000u64;
    for _ in 0..calls {
        let _: Result<(), _> = outer.run(
            &RetryContext::outermost(None),
            &*clock,
            &mut rng,
            |ctx| {
                let mut must_not_wait = |_: Duration| panic!("the inner layer must not back off");
                inner.run(
                    ctx,
                    &*clock,
                    &mut SmallRng::seed_from_u64(0),
                    |_| {
                        dependency_calls.set(dependency_calls.get() + 1);
                        Err(CallError::transient(DepErr))
                    },
                    &mut must_not_wait,
                )
            },
            &mut advancing(&clock),
        );
        clock.advance_ms(1);
    }
    let elapsed_s = clock.now_ns().div_ceil(1_000 * NS_PER_MS);
    let min_per_s = u64::from(cfg.budget_min_retries_per_s);
    // Initial reserve + 10% of calls + the time-based minimum.
    let budget = min_per_s + calls * u64::from(cfg.budget_ratio_pct) / 100 + min_per_s * elapsed_s;
    let seen = dependency_calls.get();
    assert!(
        seen <= calls + budget,
        "{seen} dependency calls > {calls} + {budget}"
    );
    assert!(
        seen > calls + calls / 20,
        "the budget should allow some retries, saw {seen}"
    );
    let (o, i) = (outer.stats().snapshot(), inner.stats().snapshot());
    assert_eq!(o.retries, seen - calls);
    assert!(o.budget_exhausted > 0, "the budget must have run dry");
    assert_eq!(
        (i.retries, i.passed_through, i.calls),
        (0, calls + o.retries, 0)
    );
}

#[test]
fn state_machine_api_matches_the_driver() {
    let mut rng = SmallRng::seed_from_u64(7);
    let cfg = RetryConfig {
        budget_min_retries_per_s: 0,
        budget_ratio_pct: 50,
        ..RetryConfig::default()
    };
    let mut retry = Retry::new(cfg).unwrap();
    let err = CallError::transient(DepErr);
    assert_eq!(retry.budget_available(0), 0);
    retry.start_call(0);
    assert_eq!(
        retry.next_delay_ms(0, &err, None, 0, &mut rng),
        None,
        "half a token only"
    );
    retry.start_call(0);
    assert!(retry.next_delay_ms(0, &err, None, 0, &mut rng).is_some());
    assert_eq!(retry.budget_available(0), 0);
}

#[test]
fn invalid_config_is_refused() {
    let bad = [
        RetryConfig {
            max_attempts: 0,
            ..RetryConfig::default()
        },
        RetryConfig {
            max_attempts: MAX_ATTEMPTS_MAX + 1,
            ..RetryConfig::default()
        },
        RetryConfig {
            backoff: Backoff::new(200, 100),
            ..RetryConfig::default()
        },
        RetryConfig {
            budget_ratio_pct: 101,
            ..RetryConfig::default()
        },
        RetryConfig {
            budget_max_tokens: 0,
            ..RetryConfig::default()
        },
    ];
    for c in bad {
        assert!(Retry::new(c).is_err(), "{c:?}");
    }
}
