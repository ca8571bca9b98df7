//! The background refresher: the only code that calls Redis.
//!
//! Contract: [`Refresher::step`] takes the queued requests (bounded by the
//! channel), makes at most `refresh_batch_max` fetches through the
//! [`AccountFetch`] source (in production behind the breaker, each call
//! bounded by the pool's timeouts), writes the results into the cache and,
//! after a failure or a refusal by the open breaker, stops calling until a
//! full-jitter backoff delay has passed (floored by the breaker's remaining
//! open wait). Failed requests stay queued; entries already cached keep
//! serving meanwhile. With nothing to fetch for `probe_interval_ms` (or
//! while backing off with an empty queue) it probes Redis (`PING`), so an
//! outage is seen, and the breaker opens, while every logon is served from
//! the cache. After a failure the queue that built up is worked off at
//! `recovery_rate_per_s` (paced recovery), not back to back. Failures and
//! recoveries are logged, at most one warning per [`LOG_EVERY_NS`] with a
//! count of the ones held back. [`Refresher::run`] is the thread body:
//! `step`, then wait for the next request or the next due time, at most
//! `idle_tick_ms`. Tests call `step` directly with a manual clock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use rand::rngs::SmallRng;

use super::cache::{Request, RequestKind, Shared};
use super::pool::PoolError;
use super::settings::RECOVERY_BURST;
use super::source::{AccountFetch, FetchError};
use crate::clock::{Clock, NS_PER_MS};
use crate::resilience::TokenBucket;

/// At most one failure warning per this period (the rest are counted and
/// named in the next one).
pub(crate) const LOG_EVERY_NS: u64 = 10_000_000_000;

/// Drives fetches for one [`super::RefData`].
#[derive(Debug)]
pub struct Refresher<S> {
    shared: Arc<Shared>,
    rx: Receiver<Request>,
    source: S,
    work: VecDeque<Request>,
    retry_at_ns: u64,
    failures_in_row: u32,
    prefetched: bool,
    rng: SmallRng,
    /// When the last Redis call (of any kind) was made.
    last_call_ns: u64,
    /// Working off a backlog after a failure: calls are paced.
    recovering: bool,
    pace: TokenBucket,
    last_warn_ns: Option<u64>,
    warns_held: u64,
}

impl<S: AccountFetch> Refresher<S> {
    pub(crate) fn new(
        shared: Arc<Shared>,
        rx: Receiver<Request>,
        source: S,
        rng: SmallRng,
    ) -> Self {
        let prefetched = shared.cfg.prefetch_max == 0;
        Refresher {
            work: VecDeque::with_capacity(shared.cfg.request_queue_max.min(1 << 16)),
            rx,
            source,
            retry_at_ns: 0,
            failures_in_row: 0,
            prefetched,
            last_call_ns: 0,
            recovering: false,
            pace: TokenBucket::new(shared.cfg.recovery_rate_per_s, RECOVERY_BURST, 0),
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

    /// Requests waiting for a fetch (taken from the channel or retried).
    pub fn queued(&self) -> usize {
        self.work.len() + self.rx.len()
    }

    /// Until when the refresher backs off (0 = not backing off).
    pub fn retry_at_ns(&self) -> u64 {
        self.retry_at_ns
    }

    /// Whether the refresher is working off a backlog at the recovery pace.
    pub fn is_recovering(&self) -> bool {
        self.recovering
    }

    /// One round: prefetch (once), take queued requests, fetch what is due
    /// (paced while recovering), or probe when idle. Returns the number of
    /// Redis calls made (or refused by the breaker).
    pub fn step(&mut self, clock: &dyn Clock) -> usize {
        self.work.extend(self.rx.try_iter());
        let now = clock.now_ns();
        if now < self.retry_at_ns {
            return 0;
        }
        if !self.prefetched && !self.prefetch(clock) {
            return 1;
        }
        if self.work.is_empty() {
            self.recovering = false;
            return usize::from(self.probe_if_due(clock));
        }
        let mut calls = 0;
        while calls < self.shared.cfg.refresh_batch_max {
            if self.work.is_empty() {
                self.recovering = false;
                break;
            }
            if self.recovering && !self.pace.try_take(clock.now_ns()) {
                break;
            }
            let Some(req) = self.work.pop_front() else {
                break;
            };
            calls += 1;
            if !self.fetch_one(req, clock) {
                break;
            }
        }
        calls
    }

    /// A `PING` when nothing else called Redis for `probe_interval_ms`, or
    /// at once when the last call failed (the probe is then the retry) or
    /// the source wants trial calls (a half-open breaker).
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
            Ok(()) => self.recovered(clock.now_ns()),
            Err(e) => self.back_off(clock.now_ns(), &e),
        }
        true
    }

    /// Loads the names in the index set; false (and backing off) on failure.
    fn prefetch(&mut self, clock: &dyn Clock) -> bool {
        let now = clock.now_ns();
        self.last_call_ns = now;
        match self.source.list(self.shared.cfg.prefetch_max, now) {
            Ok(names) => {
                self.prefetched = true;
                for name in names {
                    if !self.shared.contains(&name) {
                        self.work.push_back(Request {
                            name,
                            kind: RequestKind::Prefetch,
                        });
                    }
                }
                true
            }
            Err(e) => {
                self.back_off(clock.now_ns(), &e);
                false
            }
        }
    }

    /// One fetch; false when the refresher must back off.
    fn fetch_one(&mut self, req: Request, clock: &dyn Clock) -> bool {
        self.last_call_ns = clock.now_ns();
        let (result, duration_ns) = self.source.fetch(&req.name, clock.now_ns());
        let done_ns = clock.now_ns();
        if !matches!(result, Err(ref e) if !matches!(e, FetchError::Invalid { .. })) {
            let stats = &self.shared.stats;
            let counter = match req.kind {
                RequestKind::Miss | RequestKind::Prefetch => &stats.fills,
                RequestKind::Early => &stats.refreshes_early,
                RequestKind::Expired => &stats.refreshes_expired,
            };
            counter.fetch_add(1, Relaxed);
        }
        match result {
            Ok(account) => {
                let value = account.map(Arc::new);
                self.shared
                    .install(&req.name, value, done_ns, duration_ns, &mut self.rng);
                self.recovered(done_ns);
                true
            }
            Err(FetchError::Invalid { field, reason }) => {
                tracing::warn!(account = %crate::runtime::esc(&req.name), field, reason = %crate::runtime::esc(&reason), "reference data: invalid account record, treated as absent");
                self.shared
                    .install(&req.name, None, done_ns, duration_ns, &mut self.rng);
                true
            }
            Err(e) => {
                self.work.push_front(req);
                self.back_off(done_ns, &e);
                false
            }
        }
    }

    fn recovered(&mut self, now_ns: u64) {
        if self.failures_in_row > 0 {
            tracing::info!(
                failures = self.failures_in_row,
                queued = self.work.len(),
                "reference data: Redis answers again; working off the queue at the recovery pace"
            );
            self.recovering = !self.work.is_empty();
            self.pace =
                TokenBucket::new(self.shared.cfg.recovery_rate_per_s, RECOVERY_BURST, now_ns);
            self.last_warn_ns = None;
            self.warns_held = 0;
        }
        self.failures_in_row = 0;
        self.retry_at_ns = 0;
        self.shared.unavailable_until_ns.store(0, Relaxed);
    }

    fn back_off(&mut self, now_ns: u64, e: &FetchError) {
        let floor_ms = match e {
            FetchError::NotPermitted(np) => np.retry_after_ns.unwrap_or(0).div_ceil(NS_PER_MS),
            FetchError::Pool(PoolError::CheckoutTimeout { .. }) => 0,
            _ => 0,
        };
        let backoff = self.shared.cfg.backoff;
        let delay_ms = backoff.delay_ms(self.failures_in_row, floor_ms, &mut self.rng);
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
            queued = self.work.len(),
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
            // millisecond: the breaker's open bound counts on it.
            let wait_ns = if now < self.retry_at_ns {
                (self.retry_at_ns - now).min(tick_ns)
            } else if self.work.is_empty() && self.prefetched {
                tick_ns
            } else if self.recovering {
                self.pace.wait_ns(now).min(tick_ns)
            } else {
                0
            };
            if wait_ns == 0 {
                continue;
            }
            match self.rx.recv_timeout(Duration::from_nanos(wait_ns)) {
                Ok(req) => self.work.push_back(req),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}
