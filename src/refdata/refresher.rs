//! The background refresher: the only code that calls Redis.
//!
//! Contract: [`Refresher::step`] makes at most `refresh_batch_max` calls
//! through the [`AccountFetch`] source (in production behind the breaker,
//! each call bounded by the pool's timeouts), taking requests from the
//! bounded queue in its order ([`super::queue`]: logons waiting first),
//! and writes the results into the cache:
//!
//! - an account, or a positive absence (deleted or `revoked` while the
//!   data set is trusted), is installed;
//! - a record fault (another type, a bad field, over the limits) fails that
//!   name only: a cached account keeps serving (no refresh asked for
//!   `negative_ttl_ms`), an uncached one answers `Unavailable`; logged once
//!   per name;
//! - an absence while the data set is not trusted is no verdict: cached
//!   accounts keep serving and their refreshes wait in the queue until it
//!   is trusted again (checked every `probe_interval_ms`); an uncached name
//!   answers `Unavailable` until the next check;
//! - a failed or refused call puts the request back and stops calling: while
//!   the breaker is open, exactly until its (jittered) trial; while it is
//!   closed, for a full-jitter backoff.
//!
//! With nothing to fetch for `probe_interval_ms` (or after a failure, or
//! while the breaker is half-open) it probes Redis (a read of the data-set
//! marker), so an outage is seen, and the breaker opens, while every logon
//! is served from the cache. After a failure the queue that built up is
//! worked off at `recovery_rate_per_s` (paced recovery). Failures are
//! logged at most once per [`LOG_EVERY_NS`] with a count of the ones held
//! back. [`Refresher::run`] is the thread body: `step`, then wait for the
//! doorbell or the next due time, at most `idle_tick_ms`. Tests call
//! `step` directly with a manual clock.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use rand::rngs::SmallRng;

use super::cache::{Cached, RequestKind, Shared};
use super::queue::{Class, Taken};
use super::settings::RECOVERY_BURST;
use super::source::{AccountFetch, FetchError};
use crate::clock::{Clock, NS_PER_MS};
use crate::resilience::TokenBucket;

/// At most one failure warning per this period (the rest are counted and
/// named in the next one).
pub(crate) const LOG_EVERY_NS: u64 = 10_000_000_000;
/// Names whose record fault was logged, remembered so each is logged once
/// (beyond this many, faults are only counted).
const FAULTS_LOGGED_MAX: usize = 1_024;

/// One unit of the refresher's work.
enum Job {
    Fetch(Taken),
    /// Read the index set (prefetch, once).
    List,
    /// A name from the index set, not requested by anyone.
    Prefetch(String),
}

/// Drives fetches for one [`super::RefData`].
#[derive(Debug)]
pub struct Refresher<S> {
    shared: Arc<Shared>,
    doorbell: Receiver<()>,
    source: S,
    retry_at_ns: u64,
    failures_in_row: u32,
    /// The index set still to be listed (prefetch), and not before when.
    list_pending: bool,
    list_at_ns: u64,
    prefetch: VecDeque<String>,
    rng: SmallRng,
    /// When the last Redis call (of any kind) was made.
    last_call_ns: u64,
    /// Working off a backlog after a failure: calls are paced.
    recovering: bool,
    pace: TokenBucket,
    /// The data set's trust as of the last call.
    trusted: bool,
    faults_logged: HashSet<String>,
    last_warn_ns: Option<u64>,
    warns_held: u64,
}

impl<S: AccountFetch> Refresher<S> {
    pub(crate) fn new(
        shared: Arc<Shared>,
        doorbell: Receiver<()>,
        source: S,
        rng: SmallRng,
    ) -> Self {
        let trusted = source.data_set_trusted();
        Refresher {
            list_pending: shared.cfg.prefetch_max > 0,
            list_at_ns: 0,
            prefetch: VecDeque::new(),
            doorbell,
            source,
            retry_at_ns: 0,
            failures_in_row: 0,
            last_call_ns: 0,
            recovering: false,
            pace: TokenBucket::new(shared.cfg.recovery_rate_per_s, RECOVERY_BURST, 0),
            trusted,
            faults_logged: HashSet::new(),
            rng,
            last_warn_ns: None,
            warns_held: 0,
            shared,
        }
    }

    /// The source, for tests (breaker state, injected faults).
    pub fn source(&mut self) -> &mut S {
        &mut self.source
    }

    /// Requests waiting for a fetch (queued, plus prefetch names).
    pub fn queued(&self) -> usize {
        self.shared.queue().len() + self.prefetch.len()
    }

    /// Until when the refresher backs off (0 = not backing off).
    pub fn retry_at_ns(&self) -> u64 {
        self.retry_at_ns
    }

    /// Whether the refresher is working off a backlog at the recovery pace.
    pub fn is_recovering(&self) -> bool {
        self.recovering
    }

    /// One round: fetch what is due in the queue's order (paced while
    /// recovering), or probe when idle. Returns the number of Redis calls
    /// made (or refused by the breaker).
    pub fn step(&mut self, clock: &dyn Clock) -> usize {
        let now = clock.now_ns();
        self.source.tick(now);
        if now < self.retry_at_ns {
            return 0;
        }
        let mut calls = 0;
        while calls < self.shared.cfg.refresh_batch_max {
            if self.recovering && !self.pace.try_take(clock.now_ns()) {
                return calls;
            }
            let Some(job) = self.next_job(clock.now_ns()) else {
                self.recovering = false;
                break;
            };
            calls += 1;
            if !self.run_job(job, clock) {
                return calls;
            }
            if self.recovering && !self.has_work(clock.now_ns()) {
                self.recovering = false;
            }
        }
        if calls == 0 {
            return usize::from(self.probe_if_due(clock));
        }
        calls
    }

    /// Misses first, then the listing (once), then the queue's turn of
    /// refreshes (only while the data set is trusted), then prefetch names.
    fn next_job(&mut self, now_ns: u64) -> Option<Job> {
        let mut queue = self.shared.queue();
        if queue.misses() > 0 {
            return queue.pop(self.trusted).map(Job::Fetch);
        }
        if self.list_pending && now_ns >= self.list_at_ns {
            return Some(Job::List);
        }
        if let Some(t) = queue.pop(self.trusted) {
            return Some(Job::Fetch(t));
        }
        drop(queue);
        while let Some(name) = self.prefetch.pop_front() {
            if !self.shared.has_account(&name) {
                return Some(Job::Prefetch(name));
            }
        }
        None
    }

    /// Runs one job; false when the refresher must back off.
    fn run_job(&mut self, job: Job, clock: &dyn Clock) -> bool {
        self.last_call_ns = clock.now_ns();
        match job {
            Job::List => self.list(clock),
            Job::Fetch(t) => self.fetch(t, clock),
            Job::Prefetch(name) => {
                let (result, delta) = self.source.fetch(&name, clock.now_ns());
                if !matches!(result, Err(ref e) if !e.is_answer()) {
                    self.count_fetch(RequestKind::Prefetch);
                }
                match result {
                    Ok(Some(a)) => self.install(&name, Cached::Account(Arc::new(a)), clock, delta),
                    Ok(None) => self.install(&name, Cached::Absent, clock, delta),
                    Err(FetchError::Invalid { field, reason }) => {
                        self.record_fault(&name, field, &reason, clock, delta)
                    }
                    Err(FetchError::DataSet(_)) => {}
                    Err(e) => {
                        self.prefetch.push_front(name);
                        return self.failed(clock.now_ns(), &e);
                    }
                }
                self.answered(clock.now_ns());
                true
            }
        }
    }

    /// A `PING`-like probe (the data-set read) when nothing else called
    /// Redis for `probe_interval_ms`, or at once when the last call failed
    /// (the probe is then the retry) or the breaker is half-open.
    fn probe_if_due(&mut self, clock: &dyn Clock) -> bool {
        let interval_ns = self.shared.cfg.probe_interval_ms * NS_PER_MS;
        let now = clock.now_ns();
        if interval_ns == 0 {
            return false;
        }
        let due = self.failures_in_row > 0
            || now.saturating_sub(self.last_call_ns) >= interval_ns
            || self.source.wants_probe(now);
        if !due {
            return false;
        }
        self.last_call_ns = now;
        self.shared.stats.probes.fetch_add(1, Relaxed);
        match self.source.probe(now) {
            Ok(()) => self.answered(clock.now_ns()),
            Err(e) => {
                self.failed(clock.now_ns(), &e);
            }
        }
        true
    }

    /// Reads the index set (prefetch); see `docs/refdata.md` for the bound.
    fn list(&mut self, clock: &dyn Clock) -> bool {
        let max = self.shared.cfg.prefetch_max;
        match self.source.list(max, clock.now_ns()) {
            Ok(listing) => {
                self.list_pending = false;
                let stats = &self.shared.stats;
                let listed = listing.names.len() as u64;
                stats.prefetch_listed.fetch_add(listed, Relaxed);
                if !listing.complete {
                    let left_out = listing.total.saturating_sub(listed);
                    stats.prefetch_left_out.fetch_add(left_out, Relaxed);
                    tracing::warn!(
                        prefetch_max = max,
                        index_names = listing.total,
                        left_out,
                        "reference data: the index set holds more names than refdata.prefetch_max; \
                         the rest are fetched at their first logon"
                    );
                }
                self.prefetch.extend(listing.names);
                self.answered(clock.now_ns());
                true
            }
            Err(FetchError::DataSet(fault)) => {
                // The index is unreadable: retried at the probe pace, and
                // in the meantime nothing else waits for it.
                if self.list_at_ns == 0 {
                    tracing::warn!(%fault, "reference data: the index set cannot be read; no prefetch until it can");
                }
                let interval = self.shared.cfg.probe_interval_ms.max(1) * NS_PER_MS;
                self.list_at_ns = clock.now_ns() + interval;
                self.answered(clock.now_ns());
                true
            }
            Err(e) => self.failed(clock.now_ns(), &e),
        }
    }

    /// One fetch of a queued request; false when the refresher must back
    /// off.
    fn fetch(&mut self, t: Taken, clock: &dyn Clock) -> bool {
        let (result, delta) = self.source.fetch(&t.name, clock.now_ns());
        let now = clock.now_ns();
        if !matches!(result, Err(ref e) if !e.is_answer()) {
            self.count_fetch(t.kind);
        }
        match result {
            Ok(Some(a)) => self.install(&t.name, Cached::Account(Arc::new(a)), clock, delta),
            Ok(None) => self.install(&t.name, Cached::Absent, clock, delta),
            Err(FetchError::Invalid { field, reason }) => {
                self.record_fault(&t.name, field, &reason, clock, delta)
            }
            Err(FetchError::DataSet(_)) if t.class == Class::Refresh => {
                // No verdict: the entry keeps serving, the refresh waits
                // for the data set to be trusted again.
                self.shared.requeue(t);
                self.answered(now);
                return true;
            }
            Err(FetchError::DataSet(_)) => self.undecided(&t.name, clock, delta),
            Err(e) => {
                self.shared.requeue(t);
                return self.failed(now, &e);
            }
        }
        self.shared.done(&t.name);
        self.answered(now);
        true
    }

    fn count_fetch(&self, kind: RequestKind) {
        let stats = &self.shared.stats;
        let counter = match kind {
            RequestKind::Miss | RequestKind::Prefetch => &stats.fills,
            RequestKind::Early => &stats.refreshes_early,
            RequestKind::Expired => &stats.refreshes_expired,
        };
        counter.fetch_add(1, Relaxed);
    }

    fn install(&mut self, name: &str, cached: Cached, clock: &dyn Clock, delta_ns: u64) {
        self.faults_logged.remove(name);
        let now = clock.now_ns();
        self.shared
            .install(name, cached, now, delta_ns, &mut self.rng);
    }

    /// The record cannot be used: this name only (module docs).
    fn record_fault(
        &mut self,
        name: &str,
        field: &str,
        reason: &str,
        clock: &dyn Clock,
        delta_ns: u64,
    ) {
        let now = clock.now_ns();
        let first = self.faults_logged.len() < FAULTS_LOGGED_MAX
            && self.faults_logged.insert(name.to_string());
        if first {
            tracing::warn!(
                account = %crate::runtime::esc(name),
                field,
                reason = %crate::runtime::esc(reason),
                "reference data: invalid account record; this account only is refused (busy) \
                 or served from the cache"
            );
        }
        let hold = now + self.shared.cfg.negative_ttl_ms * NS_PER_MS;
        if !self.shared.hold(name, hold) {
            self.shared
                .install(name, Cached::Faulty, now, delta_ns, &mut self.rng);
        }
    }

    /// Absent while the data set is not trusted: no verdict (module docs).
    fn undecided(&mut self, name: &str, clock: &dyn Clock, delta_ns: u64) {
        let now = clock.now_ns();
        let next_check = now + self.shared.cfg.probe_interval_ms.max(1) * NS_PER_MS;
        if !self.shared.hold(name, next_check) {
            self.shared
                .install(name, Cached::Undecided, now, delta_ns, &mut self.rng);
        }
    }

    /// Redis answered: the backoff ends, and a data set trusted again
    /// releases what waited for it.
    fn answered(&mut self, now_ns: u64) {
        if self.failures_in_row > 0 {
            let queued = self.shared.queue().len();
            tracing::info!(
                failures = self.failures_in_row,
                queued,
                "reference data: Redis answers again; working off the queue at the recovery pace"
            );
            self.recovering = queued > 0;
            self.pace =
                TokenBucket::new(self.shared.cfg.recovery_rate_per_s, RECOVERY_BURST, now_ns);
            self.last_warn_ns = None;
            self.warns_held = 0;
        }
        self.failures_in_row = 0;
        self.retry_at_ns = 0;
        self.shared.unavailable_until_ns.store(0, Relaxed);
        let trusted = self.source.data_set_trusted();
        if trusted && !self.trusted {
            self.shared.data_set_trusted_again();
        }
        self.trusted = trusted;
    }

    /// A failed or refused call: wait for the breaker's trial while it is
    /// open, else a full-jitter backoff. Always false (stop calling).
    fn failed(&mut self, now_ns: u64, e: &FetchError) -> bool {
        let delay_ms = match self.source.open_wait_left_ns(now_ns) {
            Some(left_ns) => left_ns.div_ceil(NS_PER_MS),
            None => {
                let backoff = self.shared.cfg.backoff;
                backoff.delay_ms(self.failures_in_row, 0, &mut self.rng)
            }
        };
        self.failures_in_row = self.failures_in_row.saturating_add(1);
        self.retry_at_ns = now_ns.saturating_add(delay_ms.max(1) * NS_PER_MS);
        self.shared
            .unavailable_until_ns
            .store(self.retry_at_ns, Relaxed);
        self.shared.stats.refresher_backoffs.fetch_add(1, Relaxed);
        // Every delay at debug level (drills and the cross-process jitter
        // test read them); the warning below is rate-limited.
        tracing::debug!(backoff_ms = delay_ms, "reference data: backing off");
        self.warn_limited(now_ns, e, delay_ms);
        false
    }

    /// Logs a failure unless one was logged in the last [`LOG_EVERY_NS`];
    /// the next line names how many were held back.
    fn warn_limited(&mut self, now_ns: u64, e: &FetchError, delay_ms: u64) {
        if self
            .last_warn_ns
            .is_some_and(|t| now_ns.saturating_sub(t) < LOG_EVERY_NS)
        {
            self.warns_held += 1;
            return;
        }
        self.last_warn_ns = Some(now_ns);
        let held = std::mem::take(&mut self.warns_held);
        tracing::warn!(
            error = %crate::runtime::esc(e),
            failures_in_row = self.failures_in_row,
            backoff_ms = delay_ms,
            queued = self.shared.queue().len(),
            not_logged_since_last = held,
            "reference data: Redis call failed; backing off, cached accounts keep serving"
        );
    }

    /// The thread body: runs until `stop` is set (seen within
    /// `idle_tick_ms` plus one bounded Redis call).
    pub fn run(mut self, clock: Arc<dyn Clock>, stop: Arc<AtomicBool>) {
        let tick_ns = self.shared.cfg.idle_tick_ms * NS_PER_MS;
        while !stop.load(Relaxed) {
            self.step(&*clock);
            crate::runtime::drill::point("refdata", 0);
            let now = clock.now_ns();
            // A backoff that ends before the idle tick is kept to the
            // millisecond: the open and recovery bounds count on it.
            let wait_ns = if now < self.retry_at_ns {
                (self.retry_at_ns - now).min(tick_ns)
            } else if self.recovering {
                self.pace.wait_ns(now).clamp(1, tick_ns)
            } else if self.has_work(now) || self.source.wants_probe(now) {
                // Work to take, or a half-open breaker's next trial.
                0
            } else {
                tick_ns
            };
            if wait_ns == 0 {
                continue;
            }
            match self.doorbell.recv_timeout(Duration::from_nanos(wait_ns)) {
                Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Whether a job could be taken now (without taking it).
    fn has_work(&self, now_ns: u64) -> bool {
        let q = self.shared.queue();
        q.misses() > 0
            || (self.trusted && q.refreshes() > 0)
            || (self.list_pending && now_ns >= self.list_at_ns)
            || !self.prefetch.is_empty()
    }
}

impl FetchError {
    /// Redis answered (a record fault or an untrusted absence): no
    /// backoff, no failure.
    fn is_answer(&self) -> bool {
        matches!(self, FetchError::Invalid { .. } | FetchError::DataSet(_))
    }
}
