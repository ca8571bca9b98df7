//! Deterministic tests of the request queue: time is the `now_ns` argument,
//! the jitter RNG is seeded.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

const MS: u64 = NS_PER_MS;
/// Ten seconds: long enough never to expire inside a test unless asked.
const LONG_BUDGET_US: u64 = 10_000_000;

type Q = RequestQueue<u64>;

fn queue(cfg: QueueConfig) -> (Q, Arc<OverloadStats>) {
    let stats = Arc::new(OverloadStats::new());
    let q = RequestQueue::new(cfg, SmallRng::seed_from_u64(42), stats.clone(), 0).unwrap();
    (q, stats)
}

fn normal(account: u32) -> Arrival {
    Arrival {
        account,
        budget_us: LONG_BUDGET_US,
        critical: false,
        critical_entitled: false,
    }
}

fn critical(account: u32) -> Arrival {
    Arrival {
        critical: true,
        critical_entitled: true,
        ..normal(account)
    }
}

/// One pop; returns the served request id and the sheds it produced.
fn pop(q: &mut Q, now_ns: u64) -> (Option<u64>, Vec<Shed<u64>>) {
    let mut sheds = Vec::new();
    let served = q.pop(now_ns, |s| sheds.push(s)).map(|d| {
        assert!(d.deadline_ns > now_ns, "served past its deadline");
        d.request
    });
    (served, sheds)
}

fn push_ok(q: &mut Q, id: u64, arrival: Arrival, now_ns: u64) {
    assert_eq!(q.push(id, arrival, now_ns).map_err(|s| s.reason), Ok(None));
}

/// Builds a standing queue: `n` requests at t=0 over 10 accounts, first pop
/// at 10 ms, then one pop per ms until 99 ms. Every sample of the first
/// interval is >= 10 ms, so the pop at 100 ms closes it as overloaded.
fn standing_queue(q: &mut Q, n: u64) -> Vec<u64> {
    for id in 0..n {
        push_ok(q, id, normal((id % 10) as u32), 0);
    }
    let mut served = Vec::new();
    for t in 10..100 {
        let (s, sheds) = pop(q, t * MS);
        assert!(sheds.is_empty());
        served.extend(s);
    }
    assert!(
        !q.is_overloaded(),
        "verdicts are given only at interval ends"
    );
    served
}

#[test]
fn fifo_when_not_overloaded() {
    let (mut q, _) = queue(QueueConfig::default());
    for id in 0..5 {
        push_ok(&mut q, id, normal(1), 0);
    }
    let order: Vec<u64> = (0..5).filter_map(|_| pop(&mut q, MS).0).collect();
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
    assert_eq!(pop(&mut q, MS), (None, vec![]));
}

#[test]
fn burst_shorter_than_interval_never_sheds() {
    let (mut q, stats) = queue(QueueConfig::default());
    // 80 requests at 50 ms, drained one per ms across the 100 ms boundary:
    // waits reach 79 ms, but the queue empties within the interval.
    for id in 0..80 {
        push_ok(&mut q, id, normal((id % 8) as u32), 50 * MS);
    }
    let mut served = Vec::new();
    for t in 50..400 {
        let (s, sheds) = pop(&mut q, t * MS);
        assert!(sheds.is_empty(), "shed at {t} ms");
        assert!(!q.is_overloaded() && !q.is_lifo(), "overloaded at {t} ms");
        served.extend(s);
    }
    assert_eq!(served, (0..80).collect::<Vec<_>>());
    let snap = stats.snapshot();
    assert_eq!(snap.overload_episodes, 0);
    assert_eq!(snap.shed.iter().sum::<u64>(), 0);
}

/// Two arrivals per ms, one service per ms, for `duration_ms`; returns the
/// overload sheds and whether LIFO order was observed.
fn sustained_backlog(q: &mut Q, duration_ms: u64) -> (Vec<Shed<u64>>, bool) {
    let mut sheds = Vec::new();
    let mut lifo_seen = false;
    let mut newest = [u64::MAX; 50];
    let mut id = 0;
    for t in 0..duration_ms {
        let now = t * MS;
        for _ in 0..2 {
            let account = (id % 50) as u32;
            assert!(q.push(id, normal(account), now).unwrap().is_none());
            newest[account as usize] = id;
            id += 1;
        }
        let (served, mut shed_now) = pop(q, now);
        // Under LIFO the newest of the account whose turn it is is served,
        // with older ones of the same account still queued.
        if let Some(s) = served {
            if q.is_lifo() && s == newest[(s % 50) as usize] && s >= 100 {
                lifo_seen |= q.queued_of((s % 50) as u32) > 0;
            }
        }
        sheds.append(&mut shed_now);
    }
    (sheds, lifo_seen)
}

#[test]
fn sustained_backlog_turns_overloaded_lifo_and_sheds() {
    let (mut q, stats) = queue(QueueConfig::default());
    let (sheds, lifo_seen) = sustained_backlog(&mut q, 2000);
    assert!(q.is_overloaded() && q.is_lifo());
    assert!(lifo_seen, "LIFO order never observed");
    assert!(sheds.len() > 500, "only {} sheds", sheds.len());
    assert!(sheds.iter().all(|s| s.reason == ShedReason::Overloaded));
    let snap = stats.snapshot();
    assert_eq!(snap.shed_of(ShedReason::Overloaded), sheds.len() as u64);
    assert!(snap.overloaded && snap.lifo);
    assert!(snap.overload_episodes >= 1);
    assert!(snap.sojourn_min_last_interval_ns > SOJOURN_TARGET_NS_DEFAULT);
}

#[test]
fn overload_retry_after_covers_the_whole_window() {
    let (mut q, _) = queue(QueueConfig::default());
    let (sheds, _) = sustained_backlog(&mut q, 2000);
    let draws: Vec<u32> = sheds.iter().map(|s| s.retry_after_ms).collect();
    assert!(draws.iter().all(|d| (2000..=5000).contains(d)));
    let (min, max) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
    assert!(*min < 2100 && *max > 4900, "min {min} max {max}");
    let mut buckets = [0u32; 10];
    for d in &draws {
        buckets[((d - 2000) * 10 / 3001) as usize] += 1;
    }
    assert!(buckets.iter().all(|&n| n > 0), "buckets {buckets:?}");
}

#[test]
fn first_request_of_an_interval_is_never_shed() {
    let (mut q, _) = queue(QueueConfig::default());
    let served = standing_queue(&mut q, 300);
    assert_eq!(served.len(), 90);
    // The pop at 100 ms closes an overloaded interval: LIFO, and every
    // queued request waited 100 ms (> 2 x target). It is still served: the
    // newest of account 0, whose turn it is after nine full rounds.
    let (first, sheds) = pop(&mut q, 100 * MS);
    assert!(q.is_overloaded() && q.is_lifo());
    assert_eq!(first, Some(290));
    assert!(sheds.is_empty());
    // Later pops in the interval shed the rest — except an account's last
    // request while another account still holds a backlog: that one is
    // served in its turn (it is not part of the standing queue); and once
    // only SINGLES_STANDING_MIN single requests are left, those are served
    // too (no standing queue is left to shed).
    let (mut served, mut shed) = (Vec::new(), 0);
    loop {
        let (s, sheds) = pop(&mut q, 100 * MS);
        assert!(sheds.iter().all(|s| s.reason == ShedReason::Overloaded));
        shed += sheds.len();
        match s {
            Some(id) => served.push(id),
            None => break,
        }
    }
    assert_eq!(served.len() + shed, 300 - 90 - 1);
    assert!(
        served.len() < 10 + SINGLES_STANDING_MIN,
        "served {served:?}"
    );
}

#[test]
fn lifo_order_then_fifo_again_after_the_queue_empties() {
    let (mut q, _) = queue(QueueConfig::default());
    standing_queue(&mut q, 300);
    pop(&mut q, 100 * MS);
    assert!(q.is_lifo());
    // Fresh requests while LIFO: newest first.
    for id in 1000..1003 {
        push_ok(&mut q, id, normal(1), 101 * MS);
    }
    let mut served = Vec::new();
    while let (Some(id), _) = pop(&mut q, 101 * MS) {
        served.push(id);
    }
    let fresh: Vec<u64> = served.iter().copied().filter(|&id| id >= 1000).collect();
    assert_eq!(fresh, vec![1002, 1001, 1000]);
    // Of the old ones only accounts' last requests were served.
    assert!(served.len() - 3 < 10, "served {served:?}");
    // A worker finding the queue empty ends LIFO and the overload.
    assert!(q.is_empty());
    assert_eq!(pop(&mut q, 102 * MS).0, None);
    assert!(!q.is_lifo() && !q.is_overloaded());
    for id in 2000..2003 {
        push_ok(&mut q, id, normal(1), 103 * MS);
    }
    let order: Vec<u64> = (0..3).filter_map(|_| pop(&mut q, 104 * MS).0).collect();
    assert_eq!(order, vec![2000, 2001, 2002]);
}

#[test]
fn expired_requests_never_reach_a_worker() {
    let (mut q, stats) = queue(QueueConfig {
        account_rate_per_s: 1_000_000,
        account_burst: 1_000_000,
        ..QueueConfig::default()
    });
    let mut rng = SmallRng::seed_from_u64(9);
    let (mut pushed, mut served, mut expired) = (0u64, 0u64, 0u64);
    let mut now = 0;
    for id in 0..20_000u64 {
        now += rng.gen_range(0..200_000);
        let arrival = Arrival {
            budget_us: rng.gen_range(0..30_000),
            ..normal(rng.gen_range(0..20))
        };
        if q.push(id, arrival, now).is_ok() {
            pushed += 1;
        }
        if rng.gen_bool(0.4) {
            let (s, sheds) = pop(&mut q, now); // asserts deadline > now
            served += u64::from(s.is_some());
            for shed in &sheds {
                assert!(matches!(
                    shed.reason,
                    ShedReason::Expired | ShedReason::Overloaded
                ));
                if shed.reason == ShedReason::Expired {
                    assert_eq!(shed.retry_after_ms, 0);
                    expired += 1;
                }
            }
        }
    }
    assert!(expired > 1000, "scenario too gentle: {expired} expired");
    let snap = stats.snapshot();
    assert_eq!(snap.expired(), expired);
    assert_eq!(snap.served, served);
    let shed_in_queue =
        snap.expired() + snap.shed_of(ShedReason::Overloaded) + snap.shed_of(ShedReason::QueueFull);
    assert_eq!(pushed, served + shed_in_queue + q.len() as u64);
}

#[test]
fn zero_budget_expires_before_service() {
    let (mut q, stats) = queue(QueueConfig::default());
    let arrival = Arrival {
        budget_us: 0,
        ..normal(3)
    };
    push_ok(&mut q, 7, arrival, 5 * MS);
    let (served, sheds) = pop(&mut q, 5 * MS);
    assert_eq!(served, None);
    assert_eq!(sheds.len(), 1);
    assert_eq!(
        (sheds[0].request, sheds[0].reason),
        (7, ShedReason::Expired)
    );
    assert_eq!(stats.snapshot().expired(), 1);
}

#[test]
fn critical_served_first_only_when_entitled() {
    let (mut q, _) = queue(QueueConfig::default());
    for id in 0..3 {
        push_ok(&mut q, id, normal(1), 0);
    }
    push_ok(&mut q, 10, critical(2), 0);
    let unentitled = Arrival {
        critical: true,
        critical_entitled: false,
        ..normal(3)
    };
    push_ok(&mut q, 20, unentitled, 0);
    push_ok(&mut q, 11, critical(2), 0);
    let order: Vec<u64> = (0..6).filter_map(|_| pop(&mut q, MS).0).collect();
    // Critical first; then accounts 1 and 3 take turns (20 is account 3's).
    assert_eq!(order, vec![10, 11, 0, 20, 1, 2]);
}

#[test]
fn critical_requests_survive_overload_shedding() {
    let (mut q, _) = queue(QueueConfig::default());
    let mut critical_sent = vec![900, 901];
    push_ok(&mut q, 900, critical(7), 0);
    push_ok(&mut q, 901, critical(7), 0);
    for id in 0..300 {
        push_ok(&mut q, id, normal((id % 5) as u32), 0);
    }
    let mut served = Vec::new();
    // One critical arrival and one pop per ms: critical first, so the
    // normal backlog stands and the interval closes overloaded.
    for t in 10..100 {
        push_ok(&mut q, 1000 + t, critical(7), t * MS);
        critical_sent.push(1000 + t);
        let (s, sheds) = pop(&mut q, t * MS);
        assert!(sheds.is_empty());
        served.extend(s);
    }
    assert_eq!(&served[..2], &[900, 901]);
    // Queue the last critical behind an overloaded verdict, then drain.
    let (s, _) = pop(&mut q, 100 * MS);
    served.extend(s);
    assert!(q.is_overloaded());
    let mut sheds = Vec::new();
    while !q.is_empty() {
        let (s, mut shed_now) = pop(&mut q, 100 * MS);
        served.extend(s);
        sheds.append(&mut shed_now);
    }
    assert!(sheds.len() > 200);
    assert!(
        sheds.iter().all(|s| s.account != 7),
        "a critical request was shed"
    );
    assert!(critical_sent.iter().all(|id| served.contains(id)));
}

#[test]
fn full_queue_evicts_normal_before_critical_of_the_heaviest() {
    let (mut q, _) = queue(QueueConfig {
        capacity: 4,
        ..QueueConfig::default()
    });
    push_ok(&mut q, 0, critical(1), 0);
    push_ok(&mut q, 1, normal(1), 0);
    push_ok(&mut q, 2, normal(1), 0);
    push_ok(&mut q, 3, normal(2), 0);
    let evicted = q.push(4, normal(3), MS).unwrap().unwrap();
    assert_eq!(
        (evicted.request, evicted.reason),
        (1, ShedReason::QueueFull)
    );
    assert!((2000..=5000).contains(&evicted.retry_after_ms));
    let evicted = q.push(5, normal(3), MS).unwrap().unwrap();
    assert_eq!(evicted.request, 2);
    assert_eq!(q.queued_of(1), 1);
    // Account 1 holds only its critical entry now; 3 holds two: 3 loses.
    let evicted = q.push(6, normal(2), MS).unwrap().unwrap();
    assert_eq!(evicted.request, 4);
    assert_eq!(q.len(), 4);
}

#[test]
fn noisy_account_is_evicted_while_quiet_accounts_are_all_served() {
    let (mut q, stats) = queue(QueueConfig {
        capacity: 32,
        account_rate_per_s: 1_000_000,
        account_burst: 1_000_000,
        ..QueueConfig::default()
    });
    const NOISY: u32 = 0;
    let mut quiet_sent = Vec::new();
    let mut served = Vec::new();
    let mut noisy_evicted = 0;
    let mut id = 0;
    for t in 0..1000 {
        let now = t * MS;
        // Three quiet accounts send one each; the noisy one sends 100.
        let arrivals = (1..=3).chain(std::iter::repeat_n(NOISY, 100));
        for account in arrivals {
            if account != NOISY {
                quiet_sent.push(id);
            }
            if let Some(evicted) = q.push(id, normal(account), now).unwrap() {
                assert_eq!(evicted.account, NOISY, "a quiet account was evicted");
                noisy_evicted += 1;
            }
            id += 1;
        }
        for _ in 0..20 {
            let (s, sheds) = pop(&mut q, now);
            assert!(sheds.is_empty());
            served.extend(s);
        }
    }
    let quiet_served = served.iter().filter(|id| quiet_sent.contains(id)).count();
    assert_eq!(quiet_served, quiet_sent.len());
    assert!(noisy_evicted > 50_000);
    assert_eq!(
        stats.snapshot().shed_of(ShedReason::QueueFull),
        noisy_evicted
    );
}

#[test]
fn account_rate_limit_refuses_the_storm_not_the_quiet() {
    let (mut q, stats) = queue(QueueConfig::default());
    let (mut noisy_ok, mut quiet_ok, mut quiet_sent) = (0, 0, 0);
    for t in 0..1000u64 {
        let now = t * MS;
        for k in 0..10 {
            match q.push(t * 100 + k, normal(0), now) {
                Ok(_) => noisy_ok += 1,
                Err(shed) => {
                    assert_eq!(shed.reason, ShedReason::RateLimited);
                    // One to two refills of 100/s, not the shed window.
                    assert!(
                        (1..=20).contains(&shed.retry_after_ms),
                        "{}",
                        shed.retry_after_ms
                    );
                }
            }
        }
        if t % 10 == 0 {
            quiet_sent += 1;
            quiet_ok += u32::from(q.push(t * 100 + 50, normal(1), now).is_ok());
        }
        while pop(&mut q, now).0.is_some() {}
    }
    assert_eq!(quiet_ok, quiet_sent);
    // Burst 200 plus 100/s over ~1 s.
    assert!((290..=301).contains(&noisy_ok), "noisy admitted {noisy_ok}");
    assert_eq!(
        stats.snapshot().shed_of(ShedReason::RateLimited),
        10_000 - noisy_ok
    );
}

#[test]
fn bad_account_is_refused_not_panicking() {
    let (mut q, stats) = queue(QueueConfig {
        accounts_max: 4,
        ..QueueConfig::default()
    });
    let refused = q.push(1, normal(4), 0).unwrap_err();
    assert_eq!(
        (refused.request, refused.reason),
        (1, ShedReason::BadAccount)
    );
    assert_eq!(q.queued_of(4), 0);
    assert_eq!(stats.snapshot().shed_of(ShedReason::BadAccount), 1);
}

#[test]
fn invalid_config_is_refused_with_its_key() {
    let bad = [
        QueueConfig {
            capacity: 0,
            ..QueueConfig::default()
        },
        QueueConfig {
            target_ns: 200 * MS,
            ..QueueConfig::default()
        },
        QueueConfig {
            retry_after: RetryWindow::new(5, 4),
            ..QueueConfig::default()
        },
        QueueConfig {
            account_burst: 0,
            ..QueueConfig::default()
        },
    ];
    let keys: Vec<&str> = bad
        .iter()
        .map(|cfg| match cfg.validate() {
            Err(RequestsError::Config { key, .. }) => key,
            Ok(()) => "accepted",
        })
        .collect();
    assert_eq!(
        keys,
        vec!["capacity", "target_ns", "retry_after", "account_burst"]
    );
}

#[test]
fn sojourn_figures_are_published_per_interval() {
    let (mut q, stats) = queue(QueueConfig::default());
    for id in 0..10 {
        push_ok(&mut q, id, normal(1), 0);
    }
    for t in 0..10 {
        pop(&mut q, (t * 3 + 1) * MS);
    }
    pop(&mut q, 100 * MS); // closes the interval
    let snap = stats.snapshot();
    // Served waits were 1, 4, ..., 28 ms (each the oldest queued): the
    // minimum sample is the first. The pop at 100 ms finds the queue idle
    // only after closing the interval.
    assert_eq!(snap.sojourn_min_last_interval_ns, MS);
    let p99_ms = snap.sojourn_p99_last_interval_ns / MS;
    let max_ms = snap.sojourn_max_last_interval_ns / MS;
    assert!((27..=28).contains(&p99_ms), "p99 {p99_ms}");
    assert!((27..=28).contains(&max_ms), "max {max_ms}");
    assert_eq!(snap.served, 10);
    assert_eq!(snap.queue_depth, 0);
}

#[test]
fn never_exceeds_capacity_under_random_traffic() {
    let (mut q, stats) = queue(QueueConfig {
        capacity: 64,
        accounts_max: 16,
        ..QueueConfig::default()
    });
    let mut rng = SmallRng::seed_from_u64(5);
    let mut now = 0;
    for id in 0..50_000u64 {
        now += rng.gen_range(0..100_000);
        let arrival = Arrival {
            budget_us: rng.gen_range(0..200_000),
            critical: rng.gen_bool(0.1),
            critical_entitled: rng.gen_bool(0.5),
            account: rng.gen_range(0..16),
        };
        let _ = q.push(id, arrival, now);
        assert!(q.len() <= 64);
        if rng.gen_bool(0.3) {
            pop(&mut q, now);
        }
        let per_account: u32 = (0..16).map(|a| q.queued_of(a)).sum();
        assert_eq!(per_account as usize, q.len());
    }
    assert_eq!(stats.snapshot().queue_depth, q.len() as u64);
}

#[test]
fn poll_closes_intervals_while_idle() {
    let (mut q, stats) = queue(QueueConfig::default());
    standing_queue(&mut q, 300);
    q.poll(100 * MS);
    assert!(q.is_overloaded());
    assert!(stats.snapshot().sojourn_min_last_interval_ns >= 10 * MS);
    // No pop for a whole interval: no evidence, the verdict stands.
    q.poll(200 * MS);
    assert!(q.is_overloaded());
}

mod flood;

/// A queue whose workers are all held or stuck and that no new request
/// finds full has no dequeue to sample: once its oldest request has
/// waited longer than an interval plus the target, the interval that
/// closes declares overload (and LIFO), whenever the requests arrived.
#[test]
fn a_queue_nobody_serves_turns_overloaded_without_new_arrivals() {
    let cfg = QueueConfig::default();
    let (interval, target) = (cfg.interval_ns, cfg.target_ns);
    for arrived_at in [0, interval / 2, interval - 1] {
        let (mut q, stats) = queue(QueueConfig::default());
        for id in 0..4 {
            push_ok(&mut q, id, normal(id as u32), arrived_at);
        }
        let mut now = arrived_at;
        while now <= arrived_at + interval + target {
            q.poll(now);
            assert!(
                !q.is_overloaded(),
                "at {now} ns: waited only {}",
                now - arrived_at
            );
            now += MS;
        }
        // One more interval closes past the bound.
        for _ in 0..=(interval / MS) {
            q.poll(now);
            now += MS;
        }
        assert!(q.is_overloaded() && q.is_lifo(), "arrived at {arrived_at}");
        assert_eq!(stats.snapshot().overload_episodes, 1);
    }
}
