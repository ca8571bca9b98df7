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
