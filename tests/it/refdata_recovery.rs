//! The recovery bound, by injected time on the shipped defaults: from the
//! moment Redis is healthy again, the first logon of an account that is
//! not cached is served within `RefDataConfig::recovery_bound_ms`, for a
//! client that comes back when its retry-after says — over generated
//! outages (refused or blackholed, of any length, ending at any phase of
//! the breaker's cycle), client schedules and seeds. The real breaker,
//! refresher and cache run over a scripted Redis (`util/refdata_world.rs`).
//!
//! Also, over the same runs: every retry-after stays within the longest
//! open wait plus the spread; what /metrics reads of the breaker's state
//! is never half-open for longer than `half_open_max_wait_ms`; a failed
//! trial re-opens at once and the next trial comes exactly at the end of
//! the (jittered) open wait.

use crate::util::refdata_world as world;

use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use pricewire::clock::NS_PER_MS;
use pricewire::refdata::settings::RETRY_SPREAD_MAX_MS;
use pricewire::refdata::{Lookup, Record};
use pricewire::resilience::BreakerState;

use world::{account, Down, Rig, World};

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

/// One generated outage.
#[derive(Debug, Clone)]
struct Outage {
    down: Down,
    /// How long Redis is down (ms).
    length_ms: u64,
    /// When the client first tries, relative to the outage's start (ms).
    client_start_ms: u64,
    seed: u64,
}

fn outage() -> impl Strategy<Value = Outage> {
    (
        prop_oneof![Just(Down::Refused), Just(Down::Timeout)],
        0u64..40_000,
        0u64..40_000,
        any::<u64>(),
    )
        .prop_map(|(down, length_ms, client_start_ms, seed)| Outage {
            down,
            length_ms,
            client_start_ms,
            seed,
        })
}

/// What one run saw.
struct Run {
    /// Redis healthy and the client trying (the later of the two).
    from_ns: u64,
    served_ns: u64,
    retry_after_max_ms: u64,
    half_open_longest_ns: u64,
}

/// An outage under 50 cached accounts (whose logons keep the refresher
/// busy as in production), then a newcomer who logs on by retry-after.
fn run(o: &Outage) -> Run {
    let cached: Vec<String> = (0..50).map(|i| format!("c{i:02}")).collect();
    let mut rig = Rig::new(World::with_accounts(&cached, Some(7)), o.seed, |_| {});
    rig.settle();
    assert_eq!(rig.refdata.cached_entries(), 50, "prefetched");
    rig.world()
        .records
        .insert("newcomer".into(), Record::Account(account("newcomer")));
    let start = rig.now();
    rig.world().down = Some(o.down);
    let healthy_ns = start + o.length_ms * NS_PER_MS;
    let mut client_at = start + o.client_start_ms * NS_PER_MS;
    let (mut retry_after_max_ms, mut half_open_since, mut half_open_longest_ns) = (0, None, 0);
    let breaker = rig.breaker.clone();
    loop {
        // The next event: the client's attempt, Redis healing, or the
        // refresher's own wake-up.
        let next = client_at.min(rig.next_wake_ns());
        let next = if rig.world().down.is_some() {
            next.min(healthy_ns)
        } else {
            next
        };
        rig.clock.set_ns(next.max(rig.now()));
        if rig.world().down.is_some() && rig.now() >= healthy_ns {
            rig.world().down = None;
        }
        let now = rig.now();
        // A cached account logs on now and then (it is always served).
        let c = &cached[(now / NS_PER_MS % 50) as usize];
        assert!(matches!(
            rig.refdata.lookup_from(c, CLIENT, now),
            Lookup::Found(_)
        ));
        if now >= client_at {
            match rig.refdata.lookup_from("newcomer", CLIENT, now) {
                Lookup::Found(_) if now >= healthy_ns => {
                    return Run {
                        from_ns: healthy_ns.max(start + o.client_start_ms * NS_PER_MS),
                        served_ns: now,
                        retry_after_max_ms,
                        half_open_longest_ns,
                    }
                }
                Lookup::Found(_) => panic!("served while Redis was down"),
                Lookup::Unavailable { retry_after_ms } => {
                    retry_after_max_ms = retry_after_max_ms.max(retry_after_ms);
                    client_at = now + retry_after_ms * NS_PER_MS;
                }
                Lookup::NotFound => panic!("an outage turned into NotFound"),
            }
        }
        rig.settle();
        // What /metrics reads: the state as of the owner's last call.
        let now = rig.now();
        match (breaker.state(), half_open_since) {
            (BreakerState::HalfOpen, None) => half_open_since = Some(now),
            (BreakerState::HalfOpen, Some(t)) => {
                half_open_longest_ns = half_open_longest_ns.max(now - t)
            }
            (_, _) => half_open_since = None,
        }
        assert!(
            now < healthy_ns + 120_000 * NS_PER_MS,
            "never served: {o:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn the_first_uncached_logon_is_served_within_the_recovery_bound(o in outage()) {
        let cfg = pricewire::refdata::RefDataConfig::from_url("redis://127.0.0.1:6379").unwrap();
        let bound_ms = cfg.recovery_bound_ms();
        let r = run(&o);
        let took_ms = r.served_ns.saturating_sub(r.from_ns) / NS_PER_MS;
        prop_assert!(took_ms <= bound_ms, "served {took_ms} ms after Redis healed, bound {bound_ms} ms: {o:?}");
        let retry_max = cfg.redis.breaker_config().open_wait_max_ms() + RETRY_SPREAD_MAX_MS + 1;
        prop_assert!(r.retry_after_max_ms <= retry_max, "told to retry after {} ms", r.retry_after_max_ms);
        let half_open_limit = cfg.redis.breaker_config().half_open_max_wait_ms * NS_PER_MS;
        prop_assert!(r.half_open_longest_ns <= half_open_limit, "half-open on /metrics for {} ns", r.half_open_longest_ns);
    }
}

#[test]
fn the_recovery_bound_is_the_worst_case_sum_on_defaults() {
    let cfg = pricewire::refdata::RefDataConfig::from_url("redis://127.0.0.1:6379").unwrap();
    // A failing call under way (100 checkout + 500 connect + 250 I/O),
    // the longest open wait (3 s + 20%), the trial that fetches the
    // account (250), the client's return (1 s spread + 2 x 100 ms).
    assert_eq!(cfg.recovery_bound_ms(), 850 + 3_600 + 250 + 1_000 + 200);
    assert_eq!(cfg.trust_bound_ms(), Some(1_000 + 100 + 250 + 1_000 + 200));
}

#[test]
fn a_failed_trial_reopens_at_once_and_the_next_comes_at_the_drawn_wait() {
    let names = vec!["a".to_string()];
    let mut rig = Rig::new(World::with_accounts(&names, Some(1)), 42, |_| {});
    rig.settle();
    rig.world().down = Some(Down::Refused);
    let breaker = rig.breaker.clone();
    let t_end = rig.now() + 60_000 * NS_PER_MS;
    let mut calls_at = Vec::new();
    while rig.now() < t_end {
        let before = rig.world().calls;
        let next = rig.next_wake_ns();
        rig.clock.set_ns(next);
        rig.settle();
        if rig.world().calls > before {
            calls_at.push(rig.now());
        }
    }
    let snap = breaker.snapshot();
    // Every trial failed and re-opened: as many half-opens as re-opens.
    let (open, half) = (snap.transitions[1], snap.transitions[2]);
    assert!(half >= 10, "trials in 60 s: {half}");
    assert!(
        open == half || open == half + 1,
        "open {open}, half-open {half}"
    );
    // Once open, calls come one per open wait: 2.4..3.6 s apart, spread.
    let gaps: Vec<u64> = calls_at
        .windows(2)
        .map(|w| (w[1] - w[0]) / NS_PER_MS)
        .collect();
    let cycle: Vec<u64> = gaps.iter().copied().filter(|g| *g >= 2_000).collect();
    assert!(
        cycle.iter().all(|g| (2_400..=3_600 + 1).contains(g)),
        "{gaps:?}"
    );
    assert!(
        cycle.iter().max() > cycle.iter().min(),
        "jittered: {cycle:?}"
    );
}
