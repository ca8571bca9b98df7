//! The background refresher: the only code that calls Redis.
//!
//! Contract: [`Refresher::step`] takes the queued requests (bounded by the
//! channel), makes at most `refresh_batch_max` fetches through the
//! [`AccountFetch`] source (in production behind the breaker, each call
//! bounded by the pool's timeouts), writes the results into the cache and,
//! after a failure or a refusal by the open breaker, stops calling until a
//! full-jitter backoff delay has passed (floored by the breaker's remaining
//! open wait). Failed requests stay queued; entries already cached keep
//! serving meanwhile. [`Refresher::run`] is the thread body: `step`, then
//! wait for the next request or the next due time, at most `idle_tick_ms`.
//! Tests call `step` directly with a manual clock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use rand::rngs::SmallRng;

use super::cache::{Request, RequestKind, Shared};
use super::pool::PoolError;
use super::source::{AccountFetch, FetchError};
use crate::clock::{Clock, NS_PER_MS};

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
            shared,
            rx,
            source,
            retry_at_ns: 0,
            failures_in_row: 0,
            prefetched,
            rng,
        }
    }

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

    /// One round: prefetch (once), take queued requests, fetch what is due.
    /// Returns the number of fetches made.
    pub fn step(&mut self, clock: &dyn Clock) -> usize {
        self.work.extend(self.rx.try_iter());
        if clock.now_ns() < self.retry_at_ns {
            return 0;
        }
        if !self.prefetched && !self.prefetch(clock) {
            return 1;
        }
        let mut calls = 0;
        while calls < self.shared.cfg.refresh_batch_max {
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

    /// Loads the names in the index set; false (and backing off) on failure.
    fn prefetch(&mut self, clock: &dyn Clock) -> bool {
        let now = clock.now_ns();
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
                tracing::warn!(error = %e, "reference data: prefetch failed");
                self.back_off(now, &e);
                false
            }
        }
    }

    /// One fetch; false when the refresher must back off.
    fn fetch_one(&mut self, req: Request, clock: &dyn Clock) -> bool {
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
                self.recovered();
                true
            }
            Err(FetchError::Invalid { field, reason }) => {
                tracing::warn!(account = %req.name, field, %reason, "reference data: invalid account record, treated as absent");
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

    fn recovered(&mut self) {
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
    }

    /// The thread body: runs until `stop` is set (seen within
    /// `idle_tick_ms` plus one bounded Redis call).
    pub fn run(mut self, clock: Arc<dyn Clock>, stop: Arc<AtomicBool>) {
        let tick_ns = self.shared.cfg.idle_tick_ms * NS_PER_MS;
        while !stop.load(Relaxed) {
            self.step(&*clock);
            let now = clock.now_ns();
            let wait_ns = if self.work.is_empty() && self.prefetched {
                tick_ns
            } else {
                self.retry_at_ns.saturating_sub(now).min(tick_ns)
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
