//! The argon2 verifier: worker threads fed by a bounded queue, so that
//! milliseconds of hashing never run on a shard thread between prices.
//! A full queue is refused at once ([`Verifier::submit`] gives the job
//! back); the caller answers LogonRejected(busy). The brute-force
//! lockouts stop repeat offenders before they reach this queue.

use std::io;
use std::sync::Arc;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};

use super::hash;
use crate::clock::{Clock, MonotonicClock};
use crate::runtime::{Policy, Supervised, Supervisor};

/// Default verifier threads.
pub const WORKERS_DEFAULT: usize = 1;
/// Default queue length (logons waiting for a verifier thread). Waiting
/// logons of a token that verified meanwhile cost only a cache check
/// ([`Job::cached`]), so a herd of one account's sessions passes.
pub const QUEUE_DEFAULT: usize = 256;
/// Default queue length of the provider listener's verifier (one thread):
/// providers are few, and a bridge that finds it full retries.
pub const FEED_QUEUE_DEFAULT: usize = 8;
/// Longest an idle verifier thread waits before it looks up (its drill
/// point; the request workers wake as often).
const VERIFIER_IDLE: std::time::Duration = std::time::Duration::from_millis(200);
/// Most verifier threads a listener may have (`--verifier-threads`):
/// each argon2id check holds 19 MiB while it runs.
pub const WORKERS_MAX: usize = 32;
/// Longest verifier queue (`--verifier-queue`, `--feed-verifier-queue`).
pub const QUEUE_MAX: usize = 65_536;

/// Called on the verifier thread with the outcome and the token (for the
/// verification cache; zeroed right after).
pub type Done = Box<dyn FnOnce(bool, &[u8]) + Send>;
/// Asked on the verifier thread before argon2: whether the token verified
/// since the job was queued (the verification cache).
pub type Cached = Box<dyn Fn(&[u8]) -> bool + Send>;

/// One verification.
pub struct Job {
    /// The stored credential (a PHC string, or a decoy hash for an
    /// unknown account).
    pub stored: String,
    /// The token presented (at most 64 bytes); zeroed after use.
    pub token: Vec<u8>,
    /// A cache check run first; a hit skips argon2 (`None`: always hash).
    pub cached: Option<Cached>,
    /// On the verifier's clock: a job taken after this is dropped unrun
    /// and `done` is not called (its connection's logon timeout has cut
    /// it). 0: no deadline.
    pub deadline_ns: u64,
    /// Receives whether it matched.
    pub done: Done,
}

/// The worker pool (threads `<name><N>`: `pw-auth0` for subscribers,
/// `pw-provauth0` for providers, supervised); they exit when the last
/// handle is dropped.
pub struct Verifier {
    tx: Sender<Job>,
    /// Asked to stop on drop, before `tx` closes the queue.
    threads: Vec<Supervised<()>>,
    /// Jobs dropped past their deadline.
    expired: Arc<std::sync::atomic::AtomicU64>,
}

impl Verifier {
    /// Starts `workers` threads named `name<N>` with a queue of `queue`
    /// jobs.
    ///
    /// # Errors
    /// A thread could not be spawned.
    pub fn start(
        name: &str,
        workers: usize,
        queue: usize,
        supervisor: &Supervisor,
    ) -> io::Result<Verifier> {
        Self::start_with_clock(name, workers, queue, Arc::new(MonotonicClock), supervisor)
    }

    /// [`Verifier::start`] with the clock job deadlines are judged by
    /// (the callers' `monotonic_ns` base in production).
    ///
    /// # Errors
    /// A thread could not be spawned.
    pub fn start_with_clock(
        name: &str,
        workers: usize,
        queue: usize,
        clock: Arc<dyn Clock>,
        supervisor: &Supervisor,
    ) -> io::Result<Verifier> {
        let (tx, rx) = crossbeam_channel::bounded(queue.max(1));
        let expired = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let kind = if name.ends_with("provauth") {
            "provauth"
        } else {
            "auth"
        };
        let mut threads = Vec::new();
        for n in 0..workers.max(1) {
            let (rx, clock, expired): (Receiver<Job>, _, _) =
                (rx.clone(), clock.clone(), expired.clone());
            let body = move || work(&rx, &*clock, &expired, (kind, n as u32));
            threads.push(supervisor.spawn(format!("{name}{n}"), Policy::Permanent, body)?);
        }
        Ok(Verifier {
            tx,
            threads,
            expired,
        })
    }

    /// Jobs dropped unrun because their deadline had passed.
    pub fn expired(&self) -> u64 {
        self.expired.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Queues a job; `Err(job)` when the queue is full.
    pub fn submit(&self, job: Job) -> Result<(), Box<Job>> {
        match self.tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(j) | TrySendError::Disconnected(j)) => Err(Box::new(j)),
        }
    }

    /// Jobs waiting.
    pub fn queued(&self) -> usize {
        self.tx.len()
    }
}

impl Drop for Verifier {
    fn drop(&mut self) {
        // Before `tx` drops and the workers' `recv` ends.
        for t in &self.threads {
            t.request_stop();
        }
    }
}

fn work(
    rx: &Receiver<Job>,
    clock: &dyn Clock,
    expired: &std::sync::atomic::AtomicU64,
    (kind, n): (&'static str, u32),
) {
    loop {
        // Woken every VERIFIER_IDLE even without jobs: the drill point
        // (a cold path) then fires on an idle verifier too.
        let mut job = match rx.recv_timeout(VERIFIER_IDLE) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                crate::runtime::drill::point(kind, n);
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        crate::runtime::drill::point(kind, n);
        if job.deadline_ns != 0 && clock.now_ns() > job.deadline_ns {
            job.token.fill(0);
            expired.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            continue;
        }
        let hit = job.cached.as_ref().is_some_and(|c| c(&job.token));
        let ok = hit || hash::verify(&job.stored, &job.token);
        (job.done)(ok, &job.token);
        job.token.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn verifies_off_thread_and_refuses_when_full() {
        let v = Verifier::start("pw-test-auth", 1, 1, &Supervisor::new()).unwrap();
        let h = hash::hash_token(b"t0k").unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut refused = 0;
        for tok in [&b"t0k"[..], b"bad", b"bad", b"bad", b"bad"] {
            let tx = tx.clone();
            let job = Job {
                stored: h.clone(),
                token: tok.to_vec(),
                cached: None,
                deadline_ns: 0,
                done: Box::new(move |ok, _| tx.send(ok).unwrap()),
            };
            if v.submit(job).is_err() {
                refused += 1;
            }
        }
        // One in the worker, one queued at most: the rest were refused.
        assert!(refused >= 3, "{refused}");
        let first = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(first, "the good token verifies");
        let n = 5 - refused;
        for _ in 1..n {
            assert!(!rx.recv_timeout(Duration::from_secs(10)).unwrap());
        }
    }

    /// On the shipped defaults (one thread; 256 waiting for subscribers, 8
    /// for providers), with the worker held busy: exactly the queue's
    /// length is taken, the next job is given back.
    #[test]
    fn the_default_queues_take_exactly_their_length_behind_a_busy_worker() {
        for queue in [QUEUE_DEFAULT, FEED_QUEUE_DEFAULT] {
            let v = Verifier::start("pw-test-auth", WORKERS_DEFAULT, queue, &Supervisor::new())
                .unwrap();
            let (started_tx, started) = crossbeam_channel::bounded::<()>(1);
            let (release, released) = crossbeam_channel::bounded::<()>(1);
            let job = |cached: Option<Cached>| Job {
                stored: String::new(),
                token: b"t".to_vec(),
                cached,
                deadline_ns: 0,
                done: Box::new(|_, _| {}),
            };
            // The worker takes this one and blocks in its cache check.
            let hold: Cached = Box::new(move |_| {
                let _ = started_tx.send(());
                let _ = released.recv_timeout(Duration::from_secs(10));
                true
            });
            assert!(v.submit(job(Some(hold))).is_ok());
            started.recv_timeout(Duration::from_secs(10)).unwrap();
            let hit: fn() -> Cached = || Box::new(|_| true);
            for n in 0..queue {
                assert!(v.submit(job(Some(hit()))).is_ok(), "job {n} of {queue}");
            }
            assert_eq!(v.queued(), queue);
            assert!(v.submit(job(Some(hit()))).is_err(), "queue {queue} full");
            release.send(()).unwrap();
        }
    }

    #[test]
    fn a_job_past_its_deadline_is_dropped_unrun() {
        let clock = crate::clock::ManualClock::new(1_000);
        let v = Verifier::start_with_clock("pw-test-auth", 1, 4, clock.clone(), &Supervisor::new())
            .unwrap();
        let h = hash::hash_token(b"t0k").unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let job = |deadline_ns: u64, tx: Sender<bool>| Job {
            stored: h.clone(),
            token: b"t0k".to_vec(),
            cached: None,
            deadline_ns,
            done: Box::new(move |ok, _| tx.send(ok).unwrap()),
        };
        clock.set_ns(5_000);
        assert!(v.submit(job(4_999, tx.clone())).is_ok());
        assert!(v.submit(job(5_000, tx.clone())).is_ok());
        // Only the second (deadline not passed) is answered.
        assert!(rx.recv_timeout(Duration::from_secs(10)).unwrap());
        assert_eq!(v.expired(), 1);
        assert!(rx.try_recv().is_err());
    }
}
