use super::*;

use proptest::prelude::*;

const ME: u64 = 0xaaaa;
const OTHER: u64 = 0xbbbb;

/// The default timing: a 15-s lease, 500-ms heartbeats.
fn timing() -> LeaseTiming {
    LeaseTiming::new(15_000, 500)
}

fn ms(n: u64) -> u64 {
    n * MS
}

/// A leader at epoch `rev` since `at`.
fn leader(rev: u64, at: u64) -> Lease {
    let mut l = Lease::new(timing(), ME, at);
    assert_eq!(
        l.next_request(at, true),
        Some(Request::Create { expected: 0 })
    );
    let (next, t) = l.on_outcome(Outcome::Written(rev), at);
    assert_eq!((next, t), (None, Some(Transition::Acquired { epoch: rev })));
    l
}

#[test]
fn the_default_timing_outlasts_a_measured_jetstream_election() {
    let t = timing();
    assert_eq!(t.renew_every_ns, ms(1_000));
    assert_eq!(t.fence_margin_ns, ms(1_500));
    assert_eq!(t.silence_ns, ms(1_500));
    // The longest election measured on a 3-node cluster was 7.8 s.
    assert!(
        t.outage_tolerated_ns() >= ms(12_000),
        "{}",
        t.outage_tolerated_ns()
    );
}

#[test]
fn only_a_healthy_standby_asks_for_the_lease() {
    let mut l = Lease::new(timing(), ME, 0);
    assert_eq!(l.next_request(0, false), None);
    assert_eq!(l.publishing_epoch(0), None);
    assert_eq!(
        l.next_request(0, true),
        Some(Request::Create { expected: 0 })
    );
    assert_eq!(l.next_request(0, true), None, "one call in flight");
}

#[test]
fn a_leader_renews_and_fences_a_margin_before_its_key_can_expire() {
    let mut l = leader(42, 0);
    assert_eq!(l.publishing_epoch(1), Some(42));
    assert_eq!(l.next_request(ms(999), true), None);
    assert_eq!(
        l.next_request(ms(1_000), true),
        Some(Request::Renew { revision: 42 })
    );
    // The answer comes late; the lease counts from when it was sent.
    l.on_outcome(Outcome::Written(43), ms(1_900));
    assert_eq!(
        l.state(),
        LeaseState::Leader {
            epoch: 42,
            revision: 43
        }
    );
    assert_eq!(l.publishing_epoch(ms(1_000 + 13_499)), Some(42));
    assert_eq!(l.publishing_epoch(ms(1_000 + 13_500)), None, "fenced");
}

#[test]
fn a_kv_outage_shorter_than_the_tolerance_does_not_fence_the_leader() {
    let mut l = leader(7, 0);
    let mut now = ms(1_000);
    // Every renewal fails (a stream-leader election) for 12 s.
    while now < ms(13_000) {
        if l.next_request(now, true).is_some() {
            l.on_outcome(Outcome::Failed, now);
        }
        assert_eq!(l.publishing_epoch(now), Some(7), "at {now}");
        now += ms(50);
    }
    let r = l.next_request(now, true).expect("retrying");
    assert_eq!(r, Request::Renew { revision: 7 });
    l.on_outcome(Outcome::Written(9), now);
    assert_eq!(l.publishing_epoch(now + ms(10_000)), Some(7));
}

#[test]
fn a_refused_renewal_whose_write_landed_keeps_the_lease() {
    let mut l = leader(5, 0);
    l.next_request(ms(1_000), true);
    let (next, t) = l.on_outcome(Outcome::WrongRevision, ms(1_001));
    assert_eq!((next, t), (Some(Request::Read), None));
    let ours = KeyState {
        revision: 6,
        holder: Some(ME),
    };
    let (_, t) = l.on_outcome(Outcome::Key(Some(ours)), ms(1_002));
    assert_eq!(t, None, "no loss: the key is ours");
    assert_eq!(
        l.state(),
        LeaseState::Leader {
            epoch: 5,
            revision: 6
        }
    );
    assert_eq!(
        l.next_request(ms(1_002), true),
        Some(Request::Renew { revision: 6 })
    );
}

#[test]
fn a_refused_renewal_names_the_real_cause() {
    for (key, cause) in [
        (
            Some(KeyState {
                revision: 9,
                holder: Some(OTHER),
            }),
            LossCause::AnotherCore(OTHER),
        ),
        (None, LossCause::KeyGone),
        (
            Some(KeyState {
                revision: 9,
                holder: None,
            }),
            LossCause::KeyGone,
        ),
    ] {
        let mut l = leader(5, 0);
        l.next_request(ms(1_000), true);
        l.on_outcome(Outcome::WrongRevision, ms(1_001));
        let (_, t) = l.on_outcome(Outcome::Key(key), ms(1_002));
        assert_eq!(t, Some(Transition::Lost(cause)));
        assert_eq!(l.publishing_epoch(ms(1_003)), None);
    }
}

#[test]
fn a_standby_takes_over_from_a_silent_leader_without_waiting_for_expiry() {
    let mut l = Lease::new(timing(), ME, 0);
    l.heard_leader(8, ms(100));
    let held = Some(KeyState {
        revision: 30,
        holder: Some(OTHER),
    });
    // Heard recently: the key stays the holder's.
    l.next_request(ms(200), true);
    assert_eq!(
        l.on_outcome(Outcome::WrongRevision, ms(201)).0,
        Some(Request::Read)
    );
    assert_eq!(l.on_outcome(Outcome::Key(held), ms(202)), (None, None));
    // Silent for three heartbeats: delete its key, create ours over it.
    let now = ms(100 + 1_500);
    assert_eq!(
        l.next_request(now, true),
        Some(Request::Create { expected: 0 })
    );
    l.on_outcome(Outcome::WrongRevision, now);
    let (next, _) = l.on_outcome(Outcome::Key(held), now);
    assert_eq!(next, Some(Request::Delete { revision: 30 }));
    let (next, _) = l.on_outcome(Outcome::Written(31), now);
    assert_eq!(next, Some(Request::Create { expected: 31 }));
    let (_, t) = l.on_outcome(Outcome::Written(32), now);
    assert_eq!(t, Some(Transition::Acquired { epoch: 32 }));
}

#[test]
fn a_holder_that_renewed_meanwhile_is_not_taken_over() {
    let mut l = Lease::new(timing(), ME, 0);
    let now = ms(2_000);
    l.next_request(now, true);
    l.on_outcome(Outcome::WrongRevision, now);
    let held = Some(KeyState {
        revision: 30,
        holder: Some(OTHER),
    });
    l.on_outcome(Outcome::Key(held), now);
    assert_eq!(l.on_outcome(Outcome::WrongRevision, now), (None, None));
    assert_eq!(l.state(), LeaseState::Standby);
}

#[test]
fn epochs_stay_above_any_seen_when_the_bucket_starts_again() {
    let mut l = Lease::new(timing(), ME, 0);
    l.observe_epoch(8);
    l.next_request(0, true);
    let (_, t) = l.on_outcome(Outcome::Written(1), 0);
    assert_eq!(t, Some(Transition::Acquired { epoch: 9 }));
}

#[test]
fn a_lost_bucket_is_told_apart_from_an_election_and_recreated() {
    let mut l = leader(8, 0);
    l.next_request(ms(1_000), true);
    let (next, _) = l.on_outcome(Outcome::NoStore, ms(1_001));
    assert_eq!(next, Some(Request::CheckBucket));
    // An election: the stream is there, keep leading and retry.
    assert_eq!(l.on_outcome(Outcome::BucketFound, ms(1_002)), (None, None));
    assert_eq!(l.publishing_epoch(ms(1_003)), Some(8));
    assert_eq!(l.next_request(ms(1_200), true), None, "after a pause");
    let r = l.next_request(ms(2_100), true).expect("retry");
    assert_eq!(r, Request::Renew { revision: 8 });
    l.on_outcome(Outcome::NoStore, ms(2_101));
    let (next, t) = l.on_outcome(Outcome::BucketMissing, ms(2_102));
    assert_eq!(next, Some(Request::RecreateBucket));
    assert_eq!(t, Some(Transition::Lost(LossCause::BucketLost)));
    let (_, t) = l.on_outcome(Outcome::BucketFound, ms(2_300));
    assert_eq!(t, Some(Transition::BucketRecreated));
    l.next_request(ms(2_300), true);
    let (_, t) = l.on_outcome(Outcome::Written(1), ms(2_301));
    assert_eq!(
        t,
        Some(Transition::Acquired { epoch: 9 }),
        "above the lost epoch"
    );
}

#[test]
fn a_leader_without_healthy_feeds_hands_the_lease_on() {
    let mut l = leader(4, 0);
    assert_eq!(
        l.next_request(ms(10), false),
        Some(Request::Delete { revision: 4 })
    );
    let (_, t) = l.on_outcome(Outcome::Failed, ms(11));
    assert_eq!(t, Some(Transition::Lost(LossCause::Resigned)));
    assert_eq!(
        l.next_request(ms(5_000), false),
        None,
        "and does not take it back"
    );
}

#[test]
fn a_newer_leader_s_heartbeat_deposes_at_once() {
    let mut l = leader(4, 0);
    assert_eq!(l.superseded(4, ms(1)), None);
    assert_eq!(
        l.superseded(5, ms(2)),
        Some(Transition::Lost(LossCause::KeyGone))
    );
    assert_eq!(l.publishing_epoch(ms(3)), None);
}

#[test]
fn an_unanswered_call_fails_after_the_timeout() {
    let mut l = leader(4, 0);
    l.next_request(ms(1_000), true);
    assert_eq!(l.check_timeout(ms(1_999)), None);
    assert!(l.in_flight().is_some());
    assert_eq!(l.check_timeout(ms(2_000)), None);
    assert!(l.in_flight().is_none());
}

fn outcome() -> impl Strategy<Value = Outcome> {
    let key = (
        0u64..50,
        prop_oneof![Just(None), Just(Some(ME)), Just(Some(OTHER))],
    )
        .prop_map(|(revision, holder)| KeyState { revision, holder });
    prop_oneof![
        (1u64..100).prop_map(Outcome::Written),
        Just(Outcome::WrongRevision),
        proptest::option::of(key).prop_map(Outcome::Key),
        Just(Outcome::NoStore),
        Just(Outcome::BucketFound),
        Just(Outcome::BucketMissing),
        Just(Outcome::Failed),
    ]
}

proptest! {
    /// Whatever the KV store answers and whenever: a core publishes only
    /// within the period minus the margin of a write it sent and saw
    /// confirmed, and every epoch it leads with is above every earlier one.
    #[test]
    fn fencing_and_monotonic_epochs_hold_over_any_history(
        steps in proptest::collection::vec((0u64..3_000, any::<bool>(), outcome(), 0u8..8), 1..200)
    ) {
        let t = timing();
        let mut l = Lease::new(t, ME, 0);
        let (mut now, mut last_epoch) = (0u64, 0u64);
        let mut confirmed: Option<u64> = None;
        let mut sent: Option<(Request, u64)> = None;
        for (dt, healthy, outcome, event) in steps {
            now += dt * MS;
            if event == 0 {
                l.heard_leader(last_epoch + 3, now);
            }
            if sent.is_none() {
                sent = l.next_request(now, healthy).map(|r| (r, now));
            }
            if let Some((r, at)) = sent.take() {
                let (next, tr) = l.on_outcome(outcome, now);
                if let Some(Transition::Acquired { epoch }) = tr {
                    prop_assert!(epoch > last_epoch, "epoch {epoch} after {last_epoch}");
                    last_epoch = epoch;
                    confirmed = (matches!(r, Request::Create { .. })).then_some(at);
                }
                if matches!((r, outcome), (Request::Renew { .. }, Outcome::Written(_))) {
                    confirmed = Some(at);
                }
                if matches!(tr, Some(Transition::Lost(_))) {
                    confirmed = None;
                }
                sent = next.map(|n| (n, now));
            }
            if let Some(epoch) = l.publishing_epoch(now) {
                prop_assert_eq!(epoch, last_epoch);
                let since = confirmed.expect("publishing without a confirmed write");
                prop_assert!(now - since < t.ttl_ns - t.fence_margin_ns);
            }
        }
    }
}
