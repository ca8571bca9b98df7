use super::*;

const S: u64 = 1_000_000_000;

fn policy() -> LockoutPolicy {
    LockoutPolicy {
        threshold: 5,
        window_ms: 60_000,
        base_ms: 1_000,
        cap_ms: 8_000,
        forget_ms: 600_000,
        capacity: 64,
    }
}

/// `n` failures at `now`; the first lock they caused, if any.
fn fail_n(t: &mut Lockout, key: u64, n: u32, now: u64) -> Failed {
    let mut first = Failed::Counted;
    for _ in 0..n {
        let f = t.failure(key, now);
        if first == Failed::Counted {
            first = f;
        }
    }
    first
}

#[test]
fn five_failures_lock_for_a_jittered_second() {
    let mut t = Lockout::new(policy(), 1);
    let now = 10 * S;
    assert_eq!(fail_n(&mut t, 7, 4, now), Failed::Counted);
    assert_eq!(t.check(7, now), Ok(()));
    let Failed::Locked(ms) = t.failure(7, now) else {
        panic!("fifth failure must lock")
    };
    assert!((1_000..=1_250).contains(&ms), "{ms}");
    let retry = t.check(7, now).unwrap_err();
    assert_eq!(u64::from(retry), ms);
    assert_eq!(t.check(7, now + ms * MS - MS).unwrap_err(), 1);
    assert_eq!(t.check(7, now + ms * MS), Ok(()));
    assert_eq!(t.active(now), 1);
    assert_eq!(t.active(now + ms * MS), 0);
    // Another key is not affected.
    assert_eq!(t.check(8, now), Ok(()));
}

#[test]
fn locks_double_to_the_cap_then_forget() {
    let mut t = Lockout::new(policy(), 2);
    let mut now = S;
    assert_eq!(fail_n(&mut t, 9, 4, now), Failed::Counted);
    let mut locks = Vec::new();
    for _ in 0..6 {
        // The fifth failure locks a fresh key; once locked, one does.
        let Failed::Locked(ms) = t.failure(9, now) else {
            panic!("not locked after {locks:?}")
        };
        locks.push(ms);
        // Failures during the lock (verifications under way) do not extend it.
        assert_eq!(t.failure(9, now + MS), Failed::Counted);
        assert_eq!(t.check(9, now).unwrap_err(), ms as u32);
        now += ms * MS;
    }
    let bases = [1_000, 2_000, 4_000, 8_000, 8_000, 8_000];
    for (ms, base) in locks.iter().zip(bases) {
        assert!((base..=base + base / 4).contains(ms), "{locks:?}");
    }
    // Quiet for longer than forget_ms: five failures again, a first lock.
    now += 601 * S;
    assert_eq!(fail_n(&mut t, 9, 4, now), Failed::Counted);
    let Failed::Locked(ms) = t.failure(9, now) else {
        panic!()
    };
    assert!(ms <= 1_250, "{ms}");
}

#[test]
fn failures_outside_the_window_do_not_add_up() {
    let mut t = Lockout::new(policy(), 3);
    assert_eq!(fail_n(&mut t, 5, 4, S), Failed::Counted);
    // The window (60 s from the first failure) is over: counting restarts.
    assert_eq!(fail_n(&mut t, 5, 4, 62 * S), Failed::Counted);
    assert!(matches!(t.failure(5, 62 * S), Failed::Locked(_)));
}

#[test]
fn success_clears_the_key() {
    let mut t = Lockout::new(policy(), 4);
    fail_n(&mut t, 5, 4, S);
    t.success(5);
    assert_eq!(fail_n(&mut t, 5, 4, S), Failed::Counted);
}

#[test]
fn a_flood_of_distinct_keys_stays_in_the_table_and_keeps_locks() {
    let mut t = Lockout::new(policy(), 5);
    let slots = t.slots.len();
    let now = S;
    // Lock one key, then flood with 100,000 distinct keys (one failure each).
    assert!(matches!(fail_n(&mut t, 42, 5, now), Failed::Locked(_)));
    for k in 1_000..101_000u64 {
        t.failure(k, now);
    }
    assert_eq!(t.slots.len(), slots, "the table never grows");
    assert!(t.evictions() > 90_000);
    // Unlocked slots are evicted first: the locked key is still locked.
    assert!(t.check(42, now).is_err());
}

#[test]
fn keyer_separates_scopes_and_groups_ipv6_by_64() {
    let k = Keyer::default();
    let a: IpAddr = "2001:db8::1".parse().unwrap();
    let b: IpAddr = "2001:db8::2".parse().unwrap();
    let c: IpAddr = "127.0.0.1".parse().unwrap();
    let d: IpAddr = "127.0.0.2".parse().unwrap();
    assert_eq!(k.address(a), k.address(b));
    assert_ne!(k.address(c), k.address(d));
    assert_ne!(k.account(b"x"), k.account(b"y"));
    // IPv4-mapped IPv6 is the IPv4 address (as admission counts it).
    let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
    assert_eq!(ip_key(mapped), ip_key(c));
    assert_eq!(k.address(mapped), k.address(c));
}

/// The shipped defaults, by injected time: per address 5 failures in 60 s
/// lock 1 s, doubling to 5 min, forgotten after 15 min; per account 20.
#[test]
fn the_default_policies_lock_grow_cap_and_forget_as_documented() {
    let mut t = Lockout::new(LockoutPolicy::ADDRESS, 6);
    let mut now = S;
    assert_eq!(fail_n(&mut t, 3, 4, now), Failed::Counted);
    let mut locks = Vec::new();
    for _ in 0..11 {
        let Failed::Locked(ms) = t.failure(3, now) else {
            panic!("not locked after {locks:?}")
        };
        locks.push(ms);
        now += ms * MS;
    }
    let bases = [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300].map(|s: u64| s * 1_000);
    for (ms, base) in locks.iter().zip(bases) {
        assert!((base..=base + base / 4).contains(ms), "{locks:?}");
    }
    // 15 min without a failure: back to a first lock of about a second,
    // after five failures again.
    now += 901 * S;
    assert_eq!(fail_n(&mut t, 3, 4, now), Failed::Counted);
    assert!(matches!(t.failure(3, now), Failed::Locked(ms) if ms <= 1_250));
    // Four failures, then the 60-s window ends: counting starts over.
    assert_eq!(fail_n(&mut t, 4, 4, now), Failed::Counted);
    assert_eq!(fail_n(&mut t, 4, 4, now + 61 * S), Failed::Counted);

    let mut a = Lockout::new(LockoutPolicy::ACCOUNT, 7);
    assert_eq!(fail_n(&mut a, 5, 19, S), Failed::Counted);
    assert!(matches!(a.failure(5, S), Failed::Locked(ms) if (1_000..=1_250).contains(&ms)));
    assert_eq!(LockoutPolicy::ADDRESS.capacity, 16_384);
    assert_eq!(LockoutPolicy::ACCOUNT.capacity, 4_096);
}

#[test]
fn reservations_hold_the_budget_before_the_verdicts() {
    let mut t = Lockout::new(policy(), 8);
    // Five guesses under way at once take the whole budget: a sixth is
    // refused before any failed, with the first lock as retry-after.
    for _ in 0..5 {
        assert_eq!(t.reserve(3, S), Ok(()));
    }
    assert_eq!(t.reserve(3, S), Err(1_000));
    assert_eq!(t.pending(3), 5);
    // One is never checked (given back): room for one more.
    t.release(3);
    assert_eq!(t.reserve(3, S), Ok(()));
    for n in 0..5 {
        let f = t.confirm(3, S);
        assert_eq!(matches!(f, Failed::Locked(_)), n == 4, "{n}: {f:?}");
    }
    assert_eq!(t.pending(3), 0);
    assert!(t.reserve(3, S).is_err(), "locked");
}

#[test]
fn a_success_keeps_other_guesses_reserved_and_a_pending_slot_is_never_evicted() {
    let mut t = Lockout::new(policy(), 9);
    assert_eq!(t.reserve(3, S), Ok(()));
    assert_eq!(t.reserve(3, S), Ok(()));
    t.release(3);
    t.success(3);
    assert_eq!(t.pending(3), 1, "the other guess is still being checked");
    // A flood of other keys cannot push the reserved slot out.
    for k in 1_000..11_000u64 {
        t.failure(k, S);
    }
    assert_eq!(t.pending(3), 1);
    assert!(matches!(t.confirm(3, S), Failed::Counted));
    assert_eq!(t.pending(3), 0);
}

#[test]
fn a_set_whose_slots_all_have_reservations_refuses_new_keys() {
    let mut t = Lockout::new(
        LockoutPolicy {
            capacity: WAYS,
            ..policy()
        },
        10,
    );
    for k in 1..=WAYS as u64 {
        assert_eq!(t.reserve(k, S), Ok(()));
    }
    assert_eq!(t.reserve(99, S), Err(1_000), "fail closed");
    t.release(1);
    assert_eq!(t.reserve(99, S), Ok(()));
}

/// One step of the reservation model.
#[derive(Debug, Clone)]
enum Step {
    Reserve(u64),
    /// Settle the n-th pending guess (mod their number): fail, match or
    /// release.
    Settle(usize, u8),
    Advance(u64),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (1u64..4).prop_map(Step::Reserve),
        4 => (any::<usize>(), 0u8..3).prop_map(|(n, how)| Step::Settle(n, how)),
        // At most 300 steps of 100 ms: locks (1-8 s) end, the 60-s window
        // and the 600-s forget time do not, so the model's cap stays
        // `threshold` before the first lock and 1 after.
        1 => (0u64..100).prop_map(|ms| Step::Advance(ms * MS)),
    ]
}

proptest::proptest! {
    /// Over any interleaving of guesses reserved, settled and time moving:
    /// per key, failures in the window plus pending reservations never
    /// exceed the threshold (1 after a strike); no reservation is granted
    /// while locked; and between two moments the key is unlocked, at most
    /// `threshold` failed guesses were checked before its first lock, one
    /// between later locks.
    #[test]
    fn no_interleaving_checks_more_guesses_than_the_threshold(
        steps in proptest::collection::vec(step(), 1..300),
    ) {
        let p = policy();
        let mut t = Lockout::new(p, 11);
        let mut now = S;
        let mut pending: Vec<u64> = Vec::new();
        // Per key: failed guesses since the key was last locked or clean.
        let mut failed_since: std::collections::HashMap<u64, (u32, bool)> = Default::default();
        for s in steps {
            match s {
                Step::Reserve(k) => {
                    let locked = t.check(k, now).is_err();
                    let granted = t.reserve(k, now).is_ok();
                    proptest::prop_assert!(!(locked && granted));
                    if granted {
                        pending.push(k);
                    }
                }
                Step::Settle(n, how) if !pending.is_empty() => {
                    let k = pending.swap_remove(n % pending.len());
                    match how {
                        0 => {
                            let e = failed_since.entry(k).or_default();
                            e.0 += 1;
                            let cap = if e.1 { 1 } else { p.threshold };
                            proptest::prop_assert!(e.0 <= cap, "key {k}: {} failed guesses checked", e.0);
                            if matches!(t.confirm(k, now), Failed::Locked(_)) {
                                *e = (0, true);
                            }
                        }
                        1 => {
                            t.release(k);
                            t.success(k);
                            failed_since.insert(k, (0, false));
                        }
                        _ => t.release(k),
                    }
                }
                Step::Settle(..) => {}
                Step::Advance(ns) => now += ns,
            }
            for s in t.slots.iter().filter(|s| s.key != 0) {
                proptest::prop_assert!(s.failures + u32::from(s.pending) <= threshold(s, &p));
            }
        }
    }
}

#[test]
fn a_hold_refuses_until_its_end_and_each_early_try_lengthens_it() {
    let p = LockoutPolicy::FLOOD_HOLD;
    let mut t = Lockout::new(p, 1);
    let now = 100 * S;
    assert_eq!(t.try_held(7, now), Ok(()), "nothing held yet");
    t.hold(7, now, 500);
    // 100 ms in: 400 ms were left; doubled, but by at least `base_ms`.
    let early = now + S / 10;
    assert_eq!(t.try_held(7, early), Err(1_400));
    // Then doubled: 1,300 ms left 100 ms later → 2,600.
    assert_eq!(t.try_held(7, early + S / 10), Err(2_600));
    // Never past `cap_ms` from now, however often it is tried.
    let mut last = 0;
    for i in 0..40 {
        last = t.try_held(7, early + S / 5 + i).unwrap_err();
    }
    assert_eq!(u64::from(last), p.cap_ms);
    // Other keys are untouched; after the end the key is let through.
    assert_eq!(t.try_held(8, early), Ok(()));
    assert_eq!(
        t.try_held(7, early + S / 5 + 40 + p.cap_ms * 1_000_000),
        Ok(())
    );
}

#[test]
fn a_hold_keeps_a_longer_one_and_waiting_it_out_is_never_refused() {
    let mut t = Lockout::new(LockoutPolicy::FLOOD_HOLD, 1);
    let now = 100 * S;
    t.hold(7, now, 3_000);
    t.hold(7, now, 500);
    assert_eq!(t.check(7, now + S), Err(2_000), "the longer hold stands");
    assert_eq!(t.try_held(7, now + 3 * S), Ok(()), "exactly at its end");
}

#[test]
fn pair_keys_differ_by_account_and_by_address() {
    let k = Keyer::default();
    let (a, b): (IpAddr, IpAddr) = ([127, 0, 0, 1].into(), [127, 0, 0, 2].into());
    assert_eq!(k.pair(b"demo", a), k.pair(b"demo", a));
    assert_ne!(k.pair(b"demo", a), k.pair(b"demo", b));
    assert_ne!(k.pair(b"demo", a), k.pair(b"desk", a));
    assert_ne!(k.pair(b"demo", a), k.account(b"demo"));
}
