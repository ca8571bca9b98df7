//! The queue under a flood from one account: how fast overload trips,
//! what a drained burst does, and what the quiet accounts get.

use super::*;

/// A flood from one account into a full queue, two pops per ms against ten
/// pushes: returns the ms at which the queue first filled and the first at
/// which it was overloaded, and the ids served under LIFO in serving order.
fn flood(q: &mut Q, budget_us: u64, ms: u64) -> (Option<u64>, Option<u64>, Vec<(u64, u64)>) {
    let (mut filled, mut tripped, mut lifo_served) = (None, None, Vec::new());
    let mut id = 0;
    for t in 0..ms {
        let now = t * MS;
        for _ in 0..10 {
            let arrival = Arrival {
                budget_us,
                ..normal(0)
            };
            let _ = q.push(id, arrival, now);
            id += 1;
        }
        if q.len() == q.capacity() && filled.is_none() {
            filled = Some(t);
        }
        let (first, _) = pop(q, now);
        let (second, _) = pop(q, now);
        if let (true, Some(a), Some(b)) = (q.is_lifo(), first, second) {
            lifo_served.push((a, b));
        }
        if q.is_overloaded() && tripped.is_none() {
            tripped = Some(t);
        }
    }
    (filled, tripped, lifo_served)
}

fn flood_config() -> QueueConfig {
    QueueConfig {
        capacity: 256,
        account_rate_per_s: 1_000_000,
        account_burst: 1_000_000,
        ..QueueConfig::default()
    }
}

#[test]
fn full_queue_under_a_steady_flood_trips_within_two_intervals() {
    // Long budgets (evicted from the full queue) and budgets shorter than
    // the queue's wait (expired in it): both are standing queues.
    for budget_us in [LONG_BUDGET_US, 20_000] {
        let (mut q, stats) = queue(flood_config());
        let (filled, tripped, lifo_served) = flood(&mut q, budget_us, 1000);
        // With short budgets the queue never fills: requests expire in it.
        let (filled, tripped) = (filled.unwrap_or(0), tripped.expect("never overloaded"));
        assert!(
            tripped <= filled + 2 * 100,
            "budget {budget_us}: full at {filled} ms, overloaded at {tripped} ms"
        );
        assert!(q.is_overloaded() && q.is_lifo(), "budget {budget_us}");
        assert!(stats.snapshot().sojourn_min_last_interval_ns > SOJOURN_TARGET_NS_DEFAULT);
        // Newest first: of the two served in each ms, the second is older.
        assert!(lifo_served.len() > 500, "budget {budget_us}");
        assert!(lifo_served.iter().all(|(a, b)| a > b), "budget {budget_us}");
    }
}

#[test]
fn a_drained_burst_larger_than_the_queue_does_not_trip_it() {
    let (mut q, _) = queue(flood_config());
    for id in 0..300 {
        let _ = q.push(id, normal(0), 0);
    }
    // Drained in 2 ms, then the workers find the queue idle.
    for t in 1..100 {
        for _ in 0..200 {
            pop(&mut q, t * MS);
        }
    }
    q.poll(100 * MS);
    assert!(!q.is_overloaded());
}

#[test]
fn a_flooding_account_does_not_delay_a_quiet_one() {
    const NOISY: u32 = 0;
    const QUIET: u32 = 1;
    let (mut q, _) = queue(flood_config());
    let (mut quiet_sent, mut quiet_served) = (0, 0);
    let mut id = 0;
    for t in 0..2000u64 {
        let now = t * MS;
        for _ in 0..10 {
            let pushed = q.push(id, normal(NOISY), now);
            assert!(pushed.is_ok_and(|e| e.is_none_or(|e| e.account == NOISY)));
            id += 1;
        }
        if t % 10 == 0 {
            let evicted = q.push(1_000_000 + t, normal(QUIET), now).unwrap();
            assert!(evicted.is_none_or(|e| e.account == NOISY));
            quiet_sent += 1;
        }
        for _ in 0..2 {
            let mut sheds = Vec::new();
            if let Some(d) = q.pop(now, |s| sheds.push(s)) {
                if d.account == QUIET {
                    quiet_served += 1;
                    assert_eq!(d.sojourn_ns, 0, "the quiet request waited its turn only");
                }
            }
            assert!(sheds.iter().all(|s| s.account == NOISY));
        }
    }
    assert!(q.is_overloaded());
    assert_eq!((quiet_served, q.queued_of(QUIET)), (quiet_sent, 0));
}

#[test]
fn a_quiet_account_with_one_request_is_served_not_shed_under_overload() {
    let (mut q, _) = queue(flood_config());
    const QUIET: u32 = 1;
    let _ = flood(&mut q, LONG_BUDGET_US, 300);
    assert!(q.is_overloaded());
    // Overdue by the time it is popped (waited 20 ms > 2 x target), but the
    // only request of its account: served in its turn, not shed.
    push_ok(&mut q, 9_999_999, normal(QUIET), 300 * MS);
    let mut quiet_served = false;
    for _ in 0..4 {
        let mut sheds = Vec::new();
        if let Some(d) = q.pop(320 * MS, |s| sheds.push(s)) {
            quiet_served |= d.request == 9_999_999;
        }
        assert!(sheds.iter().all(|s| s.account != QUIET));
    }
    assert!(quiet_served);
}

#[test]
fn a_few_single_requests_left_overdue_by_a_stall_are_served_not_shed() {
    let (mut q, _) = queue(flood_config());
    const QUIET: u32 = 1;
    let _ = flood(&mut q, LONG_BUDGET_US, 300);
    // The flood's backlog drains (shed or served) down to one request.
    let mut guard = 0;
    while q.queued_of(0) > 1 && guard < 10_000 {
        let _ = pop(&mut q, 300 * MS);
        guard += 1;
    }
    assert_eq!(q.queued_of(0), 1);
    push_ok(&mut q, 9_999_999, normal(QUIET), 300 * MS);
    // Every account holds one request, both overdue at 320 ms (a stall of
    // the worker, not a standing queue): nothing to shed them for.
    assert!(q.is_overloaded());
    let mut served = Vec::new();
    for _ in 0..2 {
        let (got, sheds) = pop(&mut q, 320 * MS);
        assert!(sheds.is_empty(), "shed {:?}", sheds.len());
        served.extend(got);
    }
    assert!(served.contains(&9_999_999), "{served:?}");
}

#[test]
fn a_quiet_account_with_a_few_queued_is_not_shed_while_a_flood_holds_more() {
    // Generated cases: the quiet account's pile (2..=20, grown while the
    // path was starved), when it is popped, and how many pops.
    let mut rng = SmallRng::seed_from_u64(30);
    const QUIET: u32 = 1;
    for case in 0..64 {
        let (mut q, _) = queue(flood_config());
        let _ = flood(&mut q, LONG_BUDGET_US, 300);
        assert!(q.is_overloaded());
        let pile: u64 = rng.gen_range(2..=20);
        for k in 0..pile {
            push_ok(&mut q, 9_000_000 + k, normal(QUIET), 300 * MS);
        }
        // Overdue (> 2 x target) by the time they are popped.
        let at = 300 * MS + rng.gen_range(20..200) * MS;
        let (mut flood_shed, mut quiet_served) = (0, 0);
        for _ in 0..rng.gen_range(pile * 2..=pile * 4) {
            // Far below the flood throughout the pop (the flood only
            // shrinks in it, the quiet pile never grows): never shed for
            // overload.
            let quiet = q.queued_of(QUIET);
            let (got, sheds) = pop(&mut q, at);
            let noisy = q.queued_of(0);
            let far_below = quiet * FAR_BELOW_HEAVIEST < noisy;
            quiet_served += u64::from(got.is_some_and(|id| id >= 9_000_000));
            for s in &sheds {
                assert!(
                    s.account != QUIET || s.reason != ShedReason::Overloaded || !far_below,
                    "case {case}: a quiet request ({quiet} queued, flood {noisy}) shed"
                );
                flood_shed += u64::from(s.account == 0);
            }
        }
        assert!(flood_shed > 0, "case {case}: the flood was never shed");
        assert!(
            quiet_served > 0,
            "case {case}: the quiet account never served"
        );
    }
}

#[test]
fn accounts_near_the_heaviest_are_shed_beside_it() {
    // Two flooding accounts of similar size both build the standing
    // queue: both are shed, not only the larger.
    let (mut q, _) = queue(flood_config());
    let _ = flood(&mut q, LONG_BUDGET_US, 300);
    let big = q.queued_of(0);
    for k in 0..u64::from(big / 2 + 1) {
        let _ = q.push(8_000_000 + k, normal(2), 300 * MS);
    }
    let mut shed_of = [0u32; 3];
    for _ in 0..40 {
        let (_, sheds) = pop(&mut q, 400 * MS);
        for s in sheds.iter().filter(|s| s.reason == ShedReason::Overloaded) {
            shed_of[s.account as usize] += 1;
        }
    }
    assert!(shed_of[0] > 0 && shed_of[2] > 0, "{shed_of:?}");
}
