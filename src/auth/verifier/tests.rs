use super::*;
use crate::auth::{AuthLimits, FailReason, Listener, Scope};
use crossbeam_channel::{Receiver, Sender};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn job(stored: &str, token: &[u8], key: u64, done: Done) -> Job {
    Job {
        stored: stored.to_string(),
        token: token.to_vec(),
        cached: None,
        deadline_ns: 0,
        key,
        claim: None,
        done,
    }
}

/// A job that takes the worker and blocks it (in its cache check) until
/// the returned sender is used or dropped; returns once it is taken.
fn hold(v: &Verifier) -> Sender<()> {
    let (started_tx, started) = crossbeam_channel::bounded::<()>(1);
    let (release, released) = crossbeam_channel::bounded::<()>(1);
    let mut j = job("", b"t", u64::MAX, Box::new(|_, _| {}));
    j.cached = Some(Box::new(move |_| {
        let _ = started_tx.send(());
        let _ = released.recv_timeout(WAIT);
        true
    }));
    assert!(v.submit(j).is_ok());
    started.recv_timeout(WAIT).unwrap();
    release
}

#[test]
fn verifies_off_thread_and_refuses_when_full() {
    let v = Verifier::start("pw-test-auth", 1, 1, &Default::default()).unwrap();
    let h = hash::hash_token(b"t0k").unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let release = hold(&v);
    let mut refused = 0;
    for tok in [&b"t0k"[..], b"bad", b"bad"] {
        let tx = tx.clone();
        let done: Done = Box::new(move |o, _| {
            tx.send(matches!(o, Outcome::Verified { matched: true, .. }))
                .unwrap()
        });
        if v.submit(job(&h, tok, 1, done)).is_err() {
            refused += 1;
        }
    }
    // The worker is held and one job waits: the other two were refused.
    assert_eq!(refused, 2);
    drop(release);
    assert!(rx.recv_timeout(WAIT).unwrap(), "the good token verifies");
}

/// On the shipped defaults (one thread; 256 waiting for subscribers, 8
/// for providers), with the worker held busy: exactly the queue's length
/// of one key's jobs is taken, the next is given back.
#[test]
fn the_default_queues_take_exactly_their_length_behind_a_busy_worker() {
    for queue in [QUEUE_DEFAULT, FEED_QUEUE_DEFAULT] {
        let v =
            Verifier::start("pw-test-auth", WORKERS_DEFAULT, queue, &Default::default()).unwrap();
        let release = hold(&v);
        let hit = || {
            let mut j = job("", b"t", 7, Box::new(|_, _| {}));
            j.cached = Some(Box::new(|_| true));
            j
        };
        for n in 0..queue {
            assert!(v.submit(hit()).is_ok(), "job {n} of {queue}");
        }
        assert_eq!(v.queued(), queue);
        assert!(v.submit(hit()).is_err(), "queue {queue} full");
        release.send(()).unwrap();
    }
}

#[test]
fn a_job_past_its_deadline_is_dropped_unrun() {
    let clock = crate::clock::ManualClock::new(1_000);
    let v = Verifier::start_with_clock("pw-test-auth", 1, 4, clock.clone(), &Default::default())
        .unwrap();
    let h = hash::hash_token(b"t0k").unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let with = |deadline_ns: u64, tx: Sender<bool>| {
        let done: Done = Box::new(move |o, _| {
            tx.send(matches!(o, Outcome::Verified { matched: true, .. }))
                .unwrap()
        });
        Job {
            deadline_ns,
            ..job(&h, b"t0k", 1, done)
        }
    };
    clock.set_ns(5_000);
    assert!(v.submit(with(4_999, tx.clone())).is_ok());
    assert!(v.submit(with(5_000, tx.clone())).is_ok());
    // Only the second (deadline not passed) is answered.
    assert!(rx.recv_timeout(WAIT).unwrap());
    assert_eq!(v.expired(), 1);
    assert!(rx.try_recv().is_err());
}

/// How each of a flood's jobs ended.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    mismatched: u32,
    refused: u32,
    busy: u32,
    not_queued: u32,
}

/// `guesses` wrong tokens for account `a` from 150 addresses (two each,
/// as sent at once), queued behind a held worker, then released; the
/// outcomes once all are answered.
/// Every one of the verifier's `workers` is held while the flood is
/// submitted, so the queue alone decides what is queued.
fn flood(guard: &Arc<AuthGuard>, v: &Verifier, workers: usize, stored: &str) -> Tally {
    let release: Vec<_> = (0..workers).map(|_| hold(v)).collect();
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut tally = Tally::default();
    let mut queued = 0;
    for n in 0..300u32 {
        let ip = IpAddr::from([10, 0, (n / 2 / 250) as u8, (n / 2 % 250) as u8 + 1]);
        let tx = tx.clone();
        let done: Done = Box::new(move |o, _| {
            if let Outcome::Verified {
                reservation: Some(r),
                now_ns,
                ..
            } = o
            {
                r.failed(true, now_ns);
                return tx.send("mismatched").unwrap();
            }
            tx.send(match o {
                Outcome::Refused { .. } => "refused",
                Outcome::Busy => "busy",
                _ => "other",
            })
            .unwrap()
        });
        let mut j = job(stored, b"wrong", guard.keyer.account(b"a"), done);
        j.claim = Some(Claim {
            guard: guard.clone(),
            ip,
            account: b"a".to_vec(),
        });
        match v.submit(j) {
            Ok(()) => queued += 1,
            Err(_) => tally.not_queued += 1,
        }
    }
    drop(release);
    for _ in 0..queued {
        match rx.recv_timeout(WAIT).unwrap() {
            "mismatched" => tally.mismatched += 1,
            "refused" => tally.refused += 1,
            "busy" => tally.busy += 1,
            o => panic!("{o}"),
        }
    }
    tally
}

/// #26: 150 addresses × 2 wrong tokens for one account, all queued at
/// once behind a held worker on the shipped defaults (one thread, 256
/// waiting, account threshold 20, address threshold 5). Time stands still
/// (a manual clock), so nothing expires and no lock ends: exactly 20
/// guesses reach argon2 (the verifier counter), the 21st finds the
/// account locked, and every later one is refused unhashed. With four
/// worker threads racing each other, the same holds.
#[test]
fn a_concurrent_flood_of_one_account_reaches_argon2_at_most_threshold_times() {
    let stored = hash::hash_token(b"right").unwrap();
    for workers in [WORKERS_DEFAULT, 4] {
        let clock = crate::clock::ManualClock::new(1_000_000_000);
        let limits = AuthLimits::default();
        let guard = Arc::new(AuthGuard::new(Listener::Subscriber, &limits));
        let v = Verifier::start_with_clock(
            "pw-test-auth",
            workers,
            limits.verifier_queue,
            clock.clone(),
            &Default::default(),
        )
        .unwrap();
        let t = flood(&guard, &v, workers, &stored);
        let threshold = limits.account.threshold;
        assert_eq!(
            guard.stats.verifications.load(Relaxed),
            u64::from(threshold),
            "{t:?}"
        );
        assert_eq!(t.mismatched, threshold, "{t:?}");
        assert_eq!(
            t.refused + t.mismatched,
            limits.verifier_queue as u32,
            "{t:?}"
        );
        assert_eq!(t.not_queued, 300 - limits.verifier_queue as u32);
        assert_eq!(guard.stats.lockouts(Scope::Account), 1);
        assert_eq!(
            guard.stats.lockouts(Scope::Address),
            0,
            "two guesses per address"
        );
        assert_eq!(
            guard.stats.failures(FailReason::BadToken),
            u64::from(threshold)
        );
        assert_eq!(guard.pending_account(b"a"), 0, "every reservation settled");
        assert!(guard.check_account(b"a", clock.now_ns()).is_err());
    }
}

/// While one account's flood fills the queue behind a held worker,
/// another account's first logon is queued (pushing out the flood's
/// newest job, answered busy) and served second, right after the flood's
/// first job.
#[test]
fn another_accounts_first_logon_is_served_while_a_flood_is_queued() {
    let v = Verifier::start("pw-test-auth", 1, QUEUE_DEFAULT, &Default::default()).unwrap();
    let release = hold(&v);
    let (tx, rx): (Sender<(u64, bool)>, Receiver<_>) = crossbeam_channel::unbounded();
    let hit = |key: u64| {
        let tx = tx.clone();
        let mut j = job(
            "",
            b"t",
            key,
            Box::new(move |o, _| tx.send((key, matches!(o, Outcome::Busy))).unwrap()),
        );
        j.cached = Some(Box::new(|_| true));
        j
    };
    for _ in 0..QUEUE_DEFAULT {
        assert!(v.submit(hit(1)).is_ok());
    }
    assert!(
        v.submit(hit(1)).is_err(),
        "the flood's own next job is refused"
    );
    assert!(
        v.submit(hit(2)).is_ok(),
        "another account's first logon is queued"
    );
    assert_eq!(
        rx.recv_timeout(WAIT).unwrap(),
        (1, true),
        "the flood's newest is pushed out"
    );
    drop(release);
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), (1, false));
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), (2, false), "served second");
}
