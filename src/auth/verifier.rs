//! The argon2 verifier: worker threads fed by a bounded queue, so that
//! milliseconds of hashing never run on a shard thread between prices.
//!
//! - **Bounded and fair** (`verifier/fair.rs`): at most `queue` jobs wait; accounts
//!   (the job's [`Job::key`]) are served in turn, and a full queue makes
//!   room for an account holding few jobs by pushing out the newest job
//!   of the one holding the most (answered [`Outcome::Busy`]). A job that
//!   finds no room is given back at once by [`Verifier::submit`]; the
//!   caller answers LogonRejected(busy).
//! - **Counted before argon2**: on the worker, a job first checks the
//!   verification cache, then reserves its guess against the address and
//!   account ([`super::Reservation`]); only a granted reservation runs
//!   argon2 ([`Outcome::Verified`] hands it to the caller to settle), a
//!   refused one is answered [`Outcome::Refused`] unhashed. So no number
//!   of worker threads or queued jobs lets more guesses of one key reach
//!   argon2 than its lockout threshold (docs/security.md, "Limits").
//! - **Deadlines**: a job taken after its deadline is dropped unrun.

mod fair;

use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};

use super::{hash, AuthGuard, Reservation};
use crate::clock::{Clock, MonotonicClock};
use crate::runtime::{Policy, Supervised, Supervisor};
use fair::{FairQueue, Pushed};

/// Longest an idle verifier thread waits before it looks up (its drill
/// point; the request workers wake as often).
const VERIFIER_IDLE: std::time::Duration = std::time::Duration::from_millis(200);

/// Default verifier threads.
pub const WORKERS_DEFAULT: usize = 1;
/// Default queue length (logons waiting for a verifier thread). Waiting
/// logons of a token that verified meanwhile cost only a cache check
/// ([`Job::cached`]), so a herd of one account's sessions passes.
pub const QUEUE_DEFAULT: usize = 256;
/// Default queue length of the provider listener's verifier (one thread):
/// providers are few, and a bridge that finds it full retries.
pub const FEED_QUEUE_DEFAULT: usize = 8;
/// Most verifier threads a listener may have (`--verifier-threads`):
/// each argon2id check holds 19 MiB while it runs.
pub const WORKERS_MAX: usize = 32;
/// Longest verifier queue (`--verifier-queue`, `--feed-verifier-queue`).
pub const QUEUE_MAX: usize = 65_536;

/// What became of a job, handed to its [`Done`] on a verifier thread
/// (or, for [`Outcome::Busy`], on the thread whose job pushed it out).
#[derive(Debug)]
pub enum Outcome {
    /// A verification of the same token finished while it waited (the
    /// cache): it matched, without argon2.
    Cached,
    /// argon2 ran. The caller settles the reservation (matched or failed;
    /// dropped, it is released).
    Verified {
        /// Whether the token matched.
        matched: bool,
        /// The guess's places in the lockout tables (`None`: the job had
        /// no [`Claim`]).
        reservation: Option<Reservation>,
        /// The verifier's clock at the verdict.
        now_ns: u64,
    },
    /// Refused before argon2: the address or account is locked, or its
    /// budget of guesses is taken by checks under way.
    Refused {
        /// When to come back, ms.
        retry_after_ms: u32,
    },
    /// Pushed out of the full queue to make room for an account holding
    /// fewer jobs.
    Busy,
}

/// Called with the outcome and the token (for the verification cache;
/// zeroed right after).
pub type Done = Box<dyn FnOnce(Outcome, &[u8]) + Send>;
/// Asked on the verifier thread before argon2: whether the token verified
/// since the job was queued (the verification cache).
pub type Cached = Box<dyn Fn(&[u8]) -> bool + Send>;

/// Whose guess a job is: reserved against `guard`'s tables before argon2,
/// and counted in its `verifications` (argon2 runs) and `cache_hits`.
pub struct Claim {
    /// The listener's guard.
    pub guard: Arc<AuthGuard>,
    /// The logon's source address.
    pub ip: IpAddr,
    /// The account named (the subscriber listener's account lockout).
    pub account: Vec<u8>,
}

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
    /// The fairness key: jobs of one key are served in turn with other
    /// keys' (the account's lockout key; the provider id).
    pub key: u64,
    /// The lockout reservation to take before argon2 (`None`: none).
    pub claim: Option<Claim>,
    /// Receives the outcome.
    pub done: Done,
}

struct Queue {
    jobs: Mutex<(FairQueue<Job>, bool)>,
    ready: Condvar,
}

/// The worker pool (threads `<name><N>`: `pw-auth0` for subscribers,
/// `pw-provauth0` for providers, supervised); they exit when the handle
/// is dropped.
pub struct Verifier {
    queue: Arc<Queue>,
    /// Asked to stop on drop, before the queue is closed.
    threads: Vec<Supervised<()>>,
    /// Jobs dropped past their deadline.
    expired: Arc<AtomicU64>,
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

    /// [`Verifier::start`] with the clock job deadlines and lockouts are
    /// judged by (the callers' `monotonic_ns` base in production).
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
        let q = Arc::new(Queue {
            jobs: Mutex::new((FairQueue::new(queue.max(1)), false)),
            ready: Condvar::new(),
        });
        let expired = Arc::new(AtomicU64::new(0));
        let mut v = Verifier {
            queue: q.clone(),
            threads: Vec::new(),
            expired: expired.clone(),
        };
        let kind = if name.ends_with("provauth") {
            "provauth"
        } else {
            "auth"
        };
        for n in 0..workers.max(1) {
            let (q, clock, expired) = (q.clone(), clock.clone(), expired.clone());
            let body = move || work(&q, &*clock, &expired, (kind, n as u32));
            v.threads
                .push(supervisor.spawn(format!("{name}{n}"), Policy::Permanent, body)?);
        }
        Ok(v)
    }

    /// Jobs dropped unrun because their deadline had passed.
    pub fn expired(&self) -> u64 {
        self.expired.load(Relaxed)
    }

    /// Queues a job; `Err(job)` when the queue is full and its key may
    /// push out no other key's job. A job pushed out to make room is
    /// answered [`Outcome::Busy`] here, on the caller's thread.
    pub fn submit(&self, job: Job) -> Result<(), Box<Job>> {
        let pushed = lock(&self.queue.jobs).0.push(job.key, job);
        match pushed {
            Pushed::Queued => {}
            Pushed::Evicted(out) => {
                let mut out = out;
                (out.done)(Outcome::Busy, &out.token);
                out.token.fill(0);
            }
            Pushed::Full(job) => return Err(Box::new(job)),
        }
        self.queue.ready.notify_one();
        Ok(())
    }

    /// Jobs waiting.
    pub fn queued(&self) -> usize {
        lock(&self.queue.jobs).0.len()
    }
}

impl Drop for Verifier {
    fn drop(&mut self) {
        // Before the queue closes and the workers return.
        for t in &self.threads {
            t.request_stop();
        }
        lock(&self.queue.jobs).1 = true;
        self.queue.ready.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A job's callback panicking elsewhere leaves the queue consistent
    // (it is never called under the lock).
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a worker's wait came to.
enum Take {
    Job(Job),
    /// [`VERIFIER_IDLE`] passed without a job.
    Idle,
    /// The verifier was dropped.
    Closed,
}

/// The next job, waiting at most [`VERIFIER_IDLE`].
fn take(q: &Queue) -> Take {
    let mut jobs = lock(&q.jobs);
    let mut waited = false;
    loop {
        if jobs.1 {
            return Take::Closed;
        }
        if let Some(job) = jobs.0.pop() {
            return Take::Job(job);
        }
        if waited {
            return Take::Idle;
        }
        jobs = q
            .ready
            .wait_timeout(jobs, VERIFIER_IDLE)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
        waited = true;
    }
}

fn work(q: &Queue, clock: &dyn Clock, expired: &AtomicU64, (kind, n): (&'static str, u32)) {
    loop {
        // Woken every VERIFIER_IDLE even without jobs: the drill point (a
        // cold path) then fires on an idle verifier too.
        let mut job = match take(q) {
            Take::Job(job) => job,
            Take::Idle => {
                crate::runtime::drill::point(kind, n);
                continue;
            }
            Take::Closed => return,
        };
        crate::runtime::drill::point(kind, n);
        match judge(&job, clock) {
            Some(outcome) => (job.done)(outcome, &job.token),
            None => {
                expired.fetch_add(1, Relaxed);
            }
        }
        job.token.fill(0);
    }
}

/// One job's outcome (`None`: past its deadline, dropped unrun).
fn judge(job: &Job, clock: &dyn Clock) -> Option<Outcome> {
    let now_ns = clock.now_ns();
    if job.deadline_ns != 0 && now_ns > job.deadline_ns {
        return None;
    }
    let guard = job.claim.as_ref().map(|c| &c.guard);
    if job.cached.as_ref().is_some_and(|c| c(&job.token)) {
        if let Some(g) = guard {
            g.stats.cache_hits.fetch_add(1, Relaxed);
        }
        return Some(Outcome::Cached);
    }
    let reservation = match &job.claim {
        Some(c) => match c.guard.reserve(c.ip, &c.account, now_ns) {
            Ok(r) => Some(r),
            Err(retry_after_ms) => return Some(Outcome::Refused { retry_after_ms }),
        },
        None => None,
    };
    if let Some(g) = guard {
        g.stats.verifications.fetch_add(1, Relaxed);
    }
    let matched = hash::verify(&job.stored, &job.token);
    Some(Outcome::Verified {
        matched,
        reservation,
        now_ns: clock.now_ns(),
    })
}

#[cfg(test)]
mod tests;
