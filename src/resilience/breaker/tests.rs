//! The breaker matrix, driven by explicit `now_ns` values (no sleeping).

use super::*;
use crate::clock::{Clock, ManualClock};

const MS: u64 = NS_PER_MS;
const S: u64 = 1_000 * NS_PER_MS;

fn cfg() -> BreakerConfig {
    BreakerConfig {
        window: WindowKind::Time { window_s: 10 },
        minimum_calls: 4,
        failure_rate_threshold_pct: 50,
        slow_call_rate_threshold_pct: 50,
        slow_call_duration_ms: 100,
        call_timeout_ms: 200,
        open_wait_ms: 1_000,
        half_open_permitted_calls: 2,
        half_open_max_wait_ms: 500,
        ..BreakerConfig::default()
    }
}

fn ok(ms: u64) -> Outcome {
    Outcome::Success {
        duration_ns: ms * MS,
    }
}

fn fail(ms: u64) -> Outcome {
    Outcome::Failure {
        duration_ns: ms * MS,
    }
}

/// Acquires and records one call at `now_ns`; panics if refused.
fn call(b: &mut CircuitBreaker, outcome: Outcome, now_ns: u64) {
    let permit = b.try_acquire(now_ns).expect("call should be permitted");
    b.record(permit, outcome, now_ns);
}

fn opened(now_ns: u64) -> CircuitBreaker {
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    for _ in 0..4 {
        call(&mut b, fail(1), now_ns);
    }
    assert_eq!(b.state(now_ns), BreakerState::Open);
    b
}

#[test]
fn failures_open_it() {
    let t = 100 * S;
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    call(&mut b, ok(1), t);
    call(&mut b, ok(1), t);
    call(&mut b, fail(1), t);
    assert_eq!(
        b.state(t),
        BreakerState::Closed,
        "3 calls is below the minimum"
    );
    call(&mut b, fail(1), t);
    assert_eq!(b.state(t), BreakerState::Open, "2 of 4 failed = 50%");
    let refused = b.try_acquire(t + 300 * MS).unwrap_err();
    assert_eq!(refused.state, BreakerState::Open);
    assert_eq!(refused.retry_after_ns, Some(700 * MS));
    let s = b.stats().snapshot();
    assert_eq!(
        (s.successful_calls, s.failed_calls, s.not_permitted_calls),
        (2, 2, 1)
    );
    assert_eq!(s.transitions[BreakerState::Open as usize], 1);
}

#[test]
fn failure_rate_below_threshold_stays_closed() {
    let t = 100 * S;
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    for i in 0..40 {
        call(&mut b, if i % 3 == 2 { fail(1) } else { ok(1) }, t);
    }
    assert_eq!(
        b.state(t),
        BreakerState::Closed,
        "1 in 3 failed, threshold is 50%"
    );
    let rate = b.stats().snapshot().failure_rate_pct;
    assert!((rate - 32.5).abs() < 0.01, "13 of 40 = 32.5%, got {rate}");
}

#[test]
fn slow_successful_calls_open_it() {
    let t = 100 * S;
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    // Exactly at the threshold is not slow.
    for _ in 0..4 {
        call(&mut b, ok(100), t);
    }
    assert_eq!(b.state(t), BreakerState::Closed);
    for _ in 0..4 {
        call(&mut b, ok(150), t);
    }
    assert_eq!(b.state(t), BreakerState::Open, "4 of 8 slow = 50%");
    let s = b.stats().snapshot();
    assert_eq!(
        (s.failed_calls, s.slow_calls, s.successful_calls),
        (0, 4, 8)
    );
}

#[test]
fn ignored_business_outcomes_leave_it_closed() {
    let t = 100 * S;
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    for _ in 0..100 {
        call(&mut b, Outcome::Ignored, t);
    }
    assert_eq!(b.state(t), BreakerState::Closed);
    // Ignored calls are not successes either: 3 failures alone stay below
    // the minimum of 4 calls.
    for _ in 0..3 {
        call(&mut b, fail(1), t);
    }
    assert_eq!(b.state(t), BreakerState::Closed);
    let s = b.stats().snapshot();
    assert_eq!((s.ignored_calls, s.window_calls), (100, 3));
}

#[test]
fn outcome_classifies_call_errors() {
    let business: Result<(), CallError<&str>> = Err(CallError::Business("unknown symbol"));
    assert_eq!(Outcome::of(&business, 5), Outcome::Ignored);
    let transient: Result<(), _> = Err(CallError::transient("reset"));
    assert_eq!(
        Outcome::of(&transient, 5),
        Outcome::Failure { duration_ns: 5 }
    );
    let ok_call: Result<u8, CallError<&str>> = Ok(1);
    assert_eq!(
        Outcome::of(&ok_call, 5),
        Outcome::Success { duration_ns: 5 }
    );
}

#[test]
fn below_minimum_calls_it_never_opens() {
    let mut b = CircuitBreaker::new(BreakerConfig {
        minimum_calls: 10,
        ..cfg()
    })
    .unwrap();
    for i in 0..9 {
        call(&mut b, fail(150), 100 * S + i);
    }
    assert_eq!(b.state(100 * S + 9), BreakerState::Closed);
    assert_eq!(
        b.stats().snapshot().failure_rate_pct,
        -1.0,
        "no rate below the minimum"
    );
    call(&mut b, fail(1), 100 * S + 10);
    assert_eq!(b.state(100 * S + 10), BreakerState::Open);
}

#[test]
fn goes_half_open_by_itself_after_the_wait() {
    let clock = ManualClock::new(100 * S);
    let mut b = opened(clock.now_ns());
    clock.advance_ms(999);
    assert_eq!(b.state(clock.now_ns()), BreakerState::Open);
    clock.advance_ms(1);
    // No call was made: the query alone applies the timer.
    assert_eq!(b.state(clock.now_ns()), BreakerState::HalfOpen);
    assert_eq!(b.stats().state(), BreakerState::HalfOpen);
    assert_eq!(
        b.stats().snapshot().transitions[BreakerState::HalfOpen as usize],
        1
    );
}

#[test]
fn half_open_closes_when_trials_succeed_and_rejects_excess_trials() {
    let clock = ManualClock::new(100 * S);
    let mut b = opened(clock.now_ns());
    clock.advance_ms(1_000);
    let now = clock.now_ns();
    let p1 = b.try_acquire(now).unwrap();
    let p2 = b.try_acquire(now).unwrap();
    let excess = b.try_acquire(now).unwrap_err();
    assert_eq!(excess.state, BreakerState::HalfOpen);
    assert_eq!(excess.retry_after_ns, None);
    b.record(p1, ok(10), now);
    assert_eq!(b.state(now), BreakerState::HalfOpen, "one trial still out");
    b.record(p2, ok(10), now);
    assert_eq!(b.state(now), BreakerState::Closed);
    // Closed starts from an empty window: the four old failures are gone.
    call(&mut b, fail(1), now);
    assert_eq!(b.state(now), BreakerState::Closed);
}

#[test]
fn half_open_reopens_when_trials_fail() {
    let clock = ManualClock::new(100 * S);
    let mut b = opened(clock.now_ns());
    clock.advance_ms(1_000);
    let now = clock.now_ns();
    let p1 = b.try_acquire(now).unwrap();
    let p2 = b.try_acquire(now).unwrap();
    b.record(p1, fail(10), now);
    // One failure of two permitted trials is already 50%: re-open at once.
    assert_eq!(b.state(now), BreakerState::Open);
    b.record(p2, ok(10), now);
    assert_eq!(
        b.state(now),
        BreakerState::Open,
        "a late trial from the old epoch has no vote"
    );
    clock.advance_ms(1_000);
    assert_eq!(
        b.state(clock.now_ns()),
        BreakerState::HalfOpen,
        "and the timer runs again"
    );
}

#[test]
fn half_open_reopens_when_trials_are_slow() {
    let clock = ManualClock::new(100 * S);
    let mut b = opened(clock.now_ns());
    clock.advance_ms(1_000);
    let now = clock.now_ns();
    let p = b.try_acquire(now).unwrap();
    b.record(p, ok(150), now);
    assert_eq!(b.state(now), BreakerState::Open);
}

#[test]
fn ignored_trial_frees_its_slot() {
    let clock = ManualClock::new(100 * S);
    let mut b = opened(clock.now_ns());
    clock.advance_ms(1_000);
    let now = clock.now_ns();
    let p1 = b.try_acquire(now).unwrap();
    let p2 = b.try_acquire(now).unwrap();
    b.record(p1, Outcome::Ignored, now);
    let p3 = b
        .try_acquire(now)
        .expect("the ignored trial's slot is free again");
    b.record(p2, ok(1), now);
    b.record(p3, ok(1), now);
    assert_eq!(b.state(now), BreakerState::Closed);
}

#[test]
fn lost_trial_permits_cannot_wedge_half_open() {
    let clock = ManualClock::new(100 * S);
    let mut b = opened(clock.now_ns());
    clock.advance_ms(1_000);
    let lost1 = b.try_acquire(clock.now_ns()).unwrap();
    let lost2 = b.try_acquire(clock.now_ns()).unwrap();
    drop((lost1, lost2));
    clock.advance_ms(500);
    assert_eq!(b.state(clock.now_ns()), BreakerState::Open);
    clock.advance_ms(1_000);
    assert_eq!(b.state(clock.now_ns()), BreakerState::HalfOpen);
    assert!(b.try_acquire(clock.now_ns()).is_ok(), "fresh trial permits");
}

#[test]
fn failures_older_than_the_window_no_longer_count() {
    let t0 = 100 * S;
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    for _ in 0..3 {
        call(&mut b, fail(1), t0);
    }
    // 10 s window: at t0 + 10 s the failures' bucket has slid out.
    let t1 = t0 + 10 * S;
    call(&mut b, fail(1), t1);
    for _ in 0..3 {
        call(&mut b, ok(1), t1);
    }
    assert_eq!(
        b.state(t1),
        BreakerState::Closed,
        "1 of 4 in the window failed"
    );

    // The same calls inside the window open it.
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    for _ in 0..3 {
        call(&mut b, fail(1), t0);
    }
    let t1 = t0 + 9 * S;
    call(&mut b, fail(1), t1);
    assert_eq!(
        b.state(t1),
        BreakerState::Open,
        "4 of 4 in the window failed"
    );
}

#[test]
fn window_rates_decay_on_query_without_traffic() {
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    for i in 0..3 {
        call(&mut b, fail(1), 100 * S + i);
    }
    assert_eq!(b.stats().snapshot().window_calls, 3);
    b.state(111 * S);
    assert_eq!(b.stats().snapshot().window_calls, 0);
}

#[test]
fn count_based_window_works() {
    let mut b = CircuitBreaker::new(BreakerConfig {
        window: WindowKind::Count { calls: 5 },
        minimum_calls: 5,
        ..cfg()
    })
    .unwrap();
    let t = 100 * S;
    for _ in 0..5 {
        call(&mut b, ok(1), t);
    }
    call(&mut b, fail(1), t);
    call(&mut b, fail(1), t);
    assert_eq!(b.state(t), BreakerState::Closed, "2 of the last 5 failed");
    call(&mut b, fail(1), t);
    assert_eq!(b.state(t), BreakerState::Open, "3 of the last 5 failed");

    // Time does not age a count window.
    let mut b = CircuitBreaker::new(BreakerConfig {
        window: WindowKind::Count { calls: 5 },
        minimum_calls: 4,
        ..cfg()
    })
    .unwrap();
    call(&mut b, fail(1), t);
    call(&mut b, fail(1), t);
    call(&mut b, ok(1), t + 3_600 * S);
    call(&mut b, ok(1), t + 3_600 * S);
    assert_eq!(b.state(t + 3_600 * S), BreakerState::Open);
}

#[test]
fn forced_open_refuses_until_reset() {
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    b.force_open(0);
    for t in [0, 10 * S, 3_600 * S] {
        assert_eq!(
            b.state(t),
            BreakerState::ForcedOpen,
            "no timer leaves forced open"
        );
        let refused = b.try_acquire(t).unwrap_err();
        assert_eq!(
            refused,
            NotPermitted {
                state: BreakerState::ForcedOpen,
                retry_after_ns: None
            }
        );
    }
    b.reset(3_600 * S);
    assert_eq!(b.state(3_600 * S), BreakerState::Closed);
    assert!(b.try_acquire(3_600 * S).is_ok());
}

#[test]
fn disabled_permits_everything_and_never_opens() {
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    b.disable(0);
    for i in 0..100 {
        call(&mut b, fail(150), i * MS);
    }
    assert_eq!(b.state(S), BreakerState::Disabled);
    let s = b.stats().snapshot();
    assert_eq!(
        (s.failed_calls, s.slow_calls, s.window_calls),
        (100, 100, 0)
    );
}

#[test]
fn permit_from_before_a_transition_does_not_vote() {
    let t = 100 * S;
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    let early = b.try_acquire(t).unwrap();
    for _ in 0..4 {
        call(&mut b, fail(1), t);
    }
    b.reset(t);
    b.record(early, fail(150), t);
    assert_eq!(b.stats().snapshot().window_calls, 0);
    assert_eq!(b.stats().snapshot().failed_calls, 5);
}

#[test]
fn config_refuses_slow_threshold_at_or_above_timeout() {
    for slow in [200, 300] {
        let err = CircuitBreaker::new(BreakerConfig {
            slow_call_duration_ms: slow,
            call_timeout_ms: 200,
            ..cfg()
        })
        .unwrap_err();
        assert_eq!(
            err,
            ConfigError::SlowThresholdNotBelowTimeout {
                slow_call_duration_ms: slow,
                call_timeout_ms: 200
            }
        );
        assert!(
            err.to_string().contains("must be below `call_timeout_ms`"),
            "{err}"
        );
    }
    assert!(CircuitBreaker::new(BreakerConfig {
        slow_call_duration_ms: 199,
        ..cfg()
    })
    .is_ok());
}

#[test]
fn config_refuses_other_unworkable_values() {
    let bad = [
        BreakerConfig {
            window: WindowKind::Time { window_s: 0 },
            ..cfg()
        },
        BreakerConfig {
            window: WindowKind::Time {
                window_s: WINDOW_S_MAX + 1,
            },
            ..cfg()
        },
        BreakerConfig {
            window: WindowKind::Count { calls: 3 },
            minimum_calls: 4,
            ..cfg()
        },
        BreakerConfig {
            minimum_calls: 0,
            ..cfg()
        },
        BreakerConfig {
            failure_rate_threshold_pct: 0,
            ..cfg()
        },
        BreakerConfig {
            slow_call_rate_threshold_pct: 101,
            ..cfg()
        },
        BreakerConfig {
            half_open_permitted_calls: 0,
            ..cfg()
        },
        BreakerConfig {
            half_open_max_wait_ms: 199,
            ..cfg()
        },
        BreakerConfig {
            open_wait_ms: 0,
            ..cfg()
        },
    ];
    for c in bad {
        assert!(
            matches!(c.validate(), Err(ConfigError::Invalid { .. })),
            "{c:?}"
        );
    }
    assert!(BreakerConfig::default().validate().is_ok());
}

#[test]
fn stats_are_readable_from_another_thread() {
    let t = 100 * S;
    let b = opened(t);
    let stats = b.stats();
    let seen = std::thread::spawn(move || stats.snapshot()).join().unwrap();
    assert_eq!(seen.state, BreakerState::Open);
    assert_eq!(seen.failed_calls, 4);
}

#[test]
fn trip_opens_only_a_closed_breaker_and_recovery_runs_its_course() {
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    assert!(b.trip(0), "closed: opens");
    assert_eq!(b.state(0), BreakerState::Open);
    assert!(!b.trip(10 * MS), "already open");
    assert_eq!(b.state(S), BreakerState::HalfOpen, "after open_wait_ms");
    assert!(!b.trip(S), "half-open: the trials decide");
    for _ in 0..2 {
        let p = b.try_acquire(S).unwrap();
        b.record(p, ok(1), S);
    }
    assert_eq!(b.state(S), BreakerState::Closed);
    assert_eq!(
        b.stats().snapshot().transitions[BreakerState::Open as usize],
        1
    );
}

#[test]
fn can_open_check_refuses_a_window_the_caller_cannot_fill() {
    // The Redis refresher before its consecutive-failures rule: 20 calls
    // at one per 10.75 s (cap 10 s + 500 + 250 ms) in a 30-s window.
    let c = BreakerConfig::default();
    let e = c.check_can_open(10_750).unwrap_err();
    assert!(
        matches!(&e, ConfigError::Invalid { key: "minimum_calls", reason } if reason.contains("215000 ms")),
        "{e}"
    );
    // 20 calls at one per 1.5 s fit 30 s exactly.
    c.check_can_open(1_500).unwrap();
    // A count window always fits.
    let count = BreakerConfig {
        window: WindowKind::Count { calls: 20 },
        ..c
    };
    count.check_can_open(u64::MAX).unwrap();
}

#[test]
fn rates_read_minus_one_below_minimum_calls_and_while_open() {
    let clock = ManualClock::new(0);
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    let stats = b.stats();
    assert_eq!(stats.snapshot().failure_rate_pct, -1.0);
    call(&mut b, fail(1), clock.now_ns());
    let s = stats.snapshot();
    assert_eq!((s.failure_rate_pct, s.slow_call_rate_pct), (-1.0, -1.0));
    assert!(b.trip(clock.now_ns()));
    assert_eq!(stats.snapshot().failure_rate_pct, -1.0);
}

#[test]
fn open_waits_are_jittered_within_their_bound_and_seeded() {
    let c = BreakerConfig {
        open_wait_jitter_pct: 20,
        ..cfg()
    };
    assert_eq!(c.open_wait_max_ms(), 1_200);
    let waits = |seed: u64| -> Vec<u64> {
        let mut b = CircuitBreaker::with_seed(c, seed).unwrap();
        let mut t = 100 * S;
        let mut out = Vec::new();
        for _ in 0..50 {
            assert!(b.trip(t) || b.state(t) != BreakerState::Closed);
            let left = b.open_wait_left_ns(t).expect("open");
            assert!((800 * MS..=1_200 * MS).contains(&left), "{left}");
            out.push(left);
            t += left;
            assert_eq!(
                b.state(t),
                BreakerState::HalfOpen,
                "half-open exactly at the drawn wait"
            );
            b.reset(t);
        }
        out
    };
    let (a, b) = (waits(1), waits(2));
    assert_ne!(a, b, "different seeds draw different waits");
    assert!(a.iter().max() > a.iter().min(), "the waits spread");
    assert_eq!(waits(1), a, "one seed, one sequence");
    // No jitter: exactly the configured wait, as before.
    let mut plain = CircuitBreaker::new(cfg()).unwrap();
    plain.trip(0);
    assert_eq!(plain.open_wait_left_ns(0), Some(1_000 * MS));
    assert!(BreakerConfig {
        open_wait_jitter_pct: 51,
        ..cfg()
    }
    .validate()
    .is_err());
}

#[test]
fn fail_fast_half_open_decides_on_each_trial() {
    let c = BreakerConfig {
        half_open_permitted_calls: 5,
        half_open_fail_fast: true,
        ..cfg()
    };
    let mut b = CircuitBreaker::new(c).unwrap();
    b.trip(0);
    let t = 1_000 * MS;
    assert_eq!(b.state(t), BreakerState::HalfOpen);
    call(&mut b, ok(1), t);
    call(&mut b, fail(1), t);
    assert_eq!(b.state(t), BreakerState::Open, "one failed trial re-opens");
    let t = t + 1_000 * MS;
    for _ in 0..5 {
        assert_eq!(b.state(t), BreakerState::HalfOpen);
        call(&mut b, ok(1), t);
    }
    assert_eq!(b.state(t), BreakerState::Closed, "five good trials close");
    // Without it, one failure in five is below the 50% threshold.
    let mut b = CircuitBreaker::new(BreakerConfig {
        half_open_fail_fast: false,
        ..c
    })
    .unwrap();
    b.trip(0);
    call(&mut b, fail(1), t);
    assert_eq!(b.state(t), BreakerState::HalfOpen);
}

#[test]
fn every_transition_is_kept_with_its_reason() {
    let mut b = CircuitBreaker::new(cfg()).unwrap();
    let t0 = 100 * S;
    for _ in 0..4 {
        call(&mut b, fail(1), t0);
    }
    // The timed moves happen inside whichever call comes first.
    assert_eq!(b.state(t0 + 1_000 * MS), BreakerState::HalfOpen);
    assert_eq!(b.state(t0 + 1_500 * MS), BreakerState::Open);
    b.reset(t0 + 2 * S);
    let got: Vec<_> = std::iter::from_fn(|| b.pop_transition())
        .map(|t| (t.from, t.to, t.reason, t.at_ns))
        .collect();
    use BreakerState::{Closed, HalfOpen, Open};
    assert_eq!(
        got,
        [
            (Closed, Open, TransitionReason::FailureRate, t0),
            (
                Open,
                HalfOpen,
                TransitionReason::OpenWaitElapsed,
                t0 + 1_000 * MS
            ),
            (
                HalfOpen,
                Open,
                TransitionReason::HalfOpenTimedOut,
                t0 + 1_500 * MS
            ),
            (Open, Closed, TransitionReason::Operator, t0 + 2 * S),
        ]
    );
    // An owner that never takes them loses the oldest, counted; the ring
    // never grows.
    for i in 0..20 {
        b.trip(t0 + (3 + 2 * i) * S);
        b.reset(t0 + (4 + 2 * i) * S);
    }
    assert_eq!(b.transitions_lost(), 40 - TRANSITIONS_KEPT as u64);
    assert_eq!(
        std::iter::from_fn(|| b.pop_transition()).count(),
        TRANSITIONS_KEPT
    );
}
