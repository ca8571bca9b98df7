//! [`OverloadStats`]: every counter and gauge of the overload controls — the
//! request queue, the adaptive concurrency limit and admission — in one
//! struct of relaxed atomics, shared by `Arc` between the threads that own
//! those controls and the metrics endpoint that reads them.
//!
//! Writers never block and never allocate (one relaxed atomic op each);
//! [`OverloadStats::snapshot`] copies every value into a plain
//! [`OverloadSnapshot`] whose [`for_each_metric`](OverloadSnapshot::for_each_metric)
//! yields stable Prometheus-style names. Values are read one by one, so a
//! snapshot is not a consistent cut across counters (it never needs to be).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::reasons::{ShedReason, Stage};

/// Counters (monotonic) and gauges (last value) of the overload controls.
/// Units are in the names; every field is documented in `docs/overload.md`.
#[derive(Debug, Default)]
pub struct OverloadStats {
    // --- request queue -----------------------------------------------
    /// Requests accepted into the queue.
    pub enqueued: AtomicU64,
    /// Requests handed to a worker by `pop`.
    pub served: AtomicU64,
    /// Requests removed without being served, by [`ShedReason`]
    /// (`Expired` is the expired count: dropped before service, not a failure).
    pub shed: [AtomicU64; ShedReason::COUNT],
    /// Gauge: requests in the queue now.
    pub queue_depth: AtomicU64,
    /// Gauge: minimum standing-queue delay of the last completed interval, ns.
    pub sojourn_min_last_interval_ns: AtomicU64,
    /// Gauge: p99 queueing delay of requests served in the last interval, ns.
    pub sojourn_p99_last_interval_ns: AtomicU64,
    /// Gauge: maximum queueing delay of requests served in the last interval, ns.
    pub sojourn_max_last_interval_ns: AtomicU64,
    /// Gauge: 1 while the queue is overloaded (min sojourn above target).
    pub overloaded: AtomicU64,
    /// Gauge: 1 while the queue dequeues LIFO.
    pub lifo: AtomicU64,
    /// Times the queue went from not overloaded to overloaded.
    pub overload_episodes: AtomicU64,
    // --- adaptive concurrency ------------------------------------------
    /// Gauge: current adaptive concurrency limit.
    pub adaptive_limit: AtomicU64,
    /// Gauge: requests in flight under the adaptive limit.
    pub adaptive_inflight: AtomicU64,
    /// Gauge: short-term (fast) average RTT, ns.
    pub rtt_short_ns: AtomicU64,
    /// Gauge: long-term (baseline) average RTT, ns.
    pub rtt_long_ns: AtomicU64,
    /// `try_acquire` refusals: the limit was reached.
    pub adaptive_rejected: AtomicU64,
    /// RTT samples skipped because another thread was updating the estimate.
    pub adaptive_samples_skipped: AtomicU64,
    // --- admission -------------------------------------------------------
    /// Connections, logons, subscriptions and list requests admitted.
    pub admitted: AtomicU64,
    /// Admission rejects by [`Stage`].
    pub admission_rejects: [AtomicU64; Stage::COUNT],
    /// Gauge: IPs tracked in the per-IP table.
    pub ip_table_entries: AtomicU64,
    /// Idle per-IP entries evicted to make room for a new IP.
    pub ip_table_evictions: AtomicU64,
    /// Accepts of unknown IPs decided by the shared overflow bucket because
    /// the per-IP table was full.
    pub ip_table_overflow: AtomicU64,
}

/// Adds one to a counter.
#[inline]
pub(crate) fn inc(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

/// Sets a gauge.
#[inline]
pub(crate) fn set(gauge: &AtomicU64, value: u64) {
    gauge.store(value, Relaxed);
}

impl OverloadStats {
    /// Every counter and gauge at zero.
    pub fn new() -> OverloadStats {
        OverloadStats::default()
    }

    /// Counts one shed of `reason`.
    #[inline]
    pub fn record_shed(&self, reason: ShedReason) {
        inc(&self.shed[reason as usize]);
    }

    /// Counts one admission reject at `stage`.
    #[inline]
    pub fn record_reject(&self, stage: Stage) {
        inc(&self.admission_rejects[stage as usize]);
    }

    /// Copies every value (relaxed loads) for the metrics endpoint.
    pub fn snapshot(&self) -> OverloadSnapshot {
        let get = |a: &AtomicU64| a.load(Relaxed);
        OverloadSnapshot {
            enqueued: get(&self.enqueued),
            served: get(&self.served),
            shed: std::array::from_fn(|i| get(&self.shed[i])),
            queue_depth: get(&self.queue_depth),
            sojourn_min_last_interval_ns: get(&self.sojourn_min_last_interval_ns),
            sojourn_p99_last_interval_ns: get(&self.sojourn_p99_last_interval_ns),
            sojourn_max_last_interval_ns: get(&self.sojourn_max_last_interval_ns),
            overloaded: get(&self.overloaded) != 0,
            lifo: get(&self.lifo) != 0,
            overload_episodes: get(&self.overload_episodes),
            adaptive_limit: get(&self.adaptive_limit),
            adaptive_inflight: get(&self.adaptive_inflight),
            rtt_short_ns: get(&self.rtt_short_ns),
            rtt_long_ns: get(&self.rtt_long_ns),
            adaptive_rejected: get(&self.adaptive_rejected),
            adaptive_samples_skipped: get(&self.adaptive_samples_skipped),
            admitted: get(&self.admitted),
            admission_rejects: std::array::from_fn(|i| get(&self.admission_rejects[i])),
            ip_table_entries: get(&self.ip_table_entries),
            ip_table_evictions: get(&self.ip_table_evictions),
            ip_table_overflow: get(&self.ip_table_overflow),
        }
    }
}

/// A plain copy of [`OverloadStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OverloadSnapshot {
    /// Requests accepted into the queue.
    pub enqueued: u64,
    /// Requests handed to a worker by `pop`.
    pub served: u64,
    /// Requests removed without being served, by [`ShedReason`]
    /// (`Expired` is the expired count: dropped before service, not a failure).
    pub shed: [u64; ShedReason::COUNT],
    /// Gauge: requests in the queue now.
    pub queue_depth: u64,
    /// Gauge: minimum standing-queue delay of the last completed interval, ns.
    pub sojourn_min_last_interval_ns: u64,
    /// Gauge: p99 queueing delay of requests served in the last interval, ns.
    pub sojourn_p99_last_interval_ns: u64,
    /// Gauge: maximum queueing delay of requests served in the last interval, ns.
    pub sojourn_max_last_interval_ns: u64,
    /// True while the queue is overloaded (min sojourn above target).
    pub overloaded: bool,
    /// True while the queue dequeues LIFO.
    pub lifo: bool,
    /// Times the queue went from not overloaded to overloaded.
    pub overload_episodes: u64,
    /// Gauge: current adaptive concurrency limit.
    pub adaptive_limit: u64,
    /// Gauge: requests in flight under the adaptive limit.
    pub adaptive_inflight: u64,
    /// Gauge: short-term (fast) average RTT, ns.
    pub rtt_short_ns: u64,
    /// Gauge: long-term (baseline) average RTT, ns.
    pub rtt_long_ns: u64,
    /// `try_acquire` refusals: the limit was reached.
    pub adaptive_rejected: u64,
    /// RTT samples skipped because another thread was updating the estimate.
    pub adaptive_samples_skipped: u64,
    /// Connections, logons, subscriptions and list requests admitted.
    pub admitted: u64,
    /// Admission rejects by [`Stage`].
    pub admission_rejects: [u64; Stage::COUNT],
    /// Gauge: IPs tracked in the per-IP table.
    pub ip_table_entries: u64,
    /// Idle per-IP entries evicted to make room for a new IP.
    pub ip_table_evictions: u64,
    /// Accepts of unknown IPs decided by the shared overflow bucket because
    /// the per-IP table was full.
    pub ip_table_overflow: u64,
}

impl OverloadSnapshot {
    /// Sheds of one reason.
    pub fn shed_of(&self, reason: ShedReason) -> u64 {
        self.shed[reason as usize]
    }

    /// Requests dropped because their deadline passed before service.
    pub fn expired(&self) -> u64 {
        self.shed_of(ShedReason::Expired)
    }

    /// Admission rejects at one stage.
    pub fn rejects_at(&self, stage: Stage) -> u64 {
        self.admission_rejects[stage as usize]
    }

    /// Every value with its stable metric name and, for labelled families,
    /// the label value (`reason` for sheds, `stage` for admission rejects).
    /// The metrics endpoint formats these; names never change.
    pub fn for_each_metric(&self, mut f: impl FnMut(&'static str, Option<&'static str>, u64)) {
        f("pricewire_requests_enqueued_total", None, self.enqueued);
        f("pricewire_requests_served_total", None, self.served);
        for reason in ShedReason::ALL {
            f(
                crate::ops::metrics::catalogue::SHEDS,
                Some(reason.name()),
                self.shed_of(reason),
            );
        }
        f("pricewire_request_queue_depth", None, self.queue_depth);
        let min = self.sojourn_min_last_interval_ns;
        f("pricewire_request_sojourn_min_interval_ns", None, min);
        let p99 = self.sojourn_p99_last_interval_ns;
        f("pricewire_request_sojourn_p99_interval_ns", None, p99);
        let max = self.sojourn_max_last_interval_ns;
        f("pricewire_request_sojourn_max_interval_ns", None, max);
        f(
            "pricewire_request_queue_overloaded",
            None,
            u64::from(self.overloaded),
        );
        f("pricewire_request_queue_lifo", None, u64::from(self.lifo));
        let episodes = self.overload_episodes;
        f("pricewire_request_overload_episodes_total", None, episodes);
        f("pricewire_adaptive_limit", None, self.adaptive_limit);
        f("pricewire_adaptive_inflight", None, self.adaptive_inflight);
        f("pricewire_adaptive_rtt_short_ns", None, self.rtt_short_ns);
        f("pricewire_adaptive_rtt_long_ns", None, self.rtt_long_ns);
        f(
            "pricewire_adaptive_rejected_total",
            None,
            self.adaptive_rejected,
        );
        let skipped = self.adaptive_samples_skipped;
        f("pricewire_adaptive_samples_skipped_total", None, skipped);
        f("pricewire_admission_admitted_total", None, self.admitted);
        for stage in Stage::ALL {
            let n = self.rejects_at(stage);
            f("pricewire_admission_rejects_total", Some(stage.name()), n);
        }
        f(
            "pricewire_admission_ip_table_entries",
            None,
            self.ip_table_entries,
        );
        let evictions = self.ip_table_evictions;
        f(
            "pricewire_admission_ip_table_evictions_total",
            None,
            evictions,
        );
        let overflow = self.ip_table_overflow;
        f(
            "pricewire_admission_ip_table_overflow_total",
            None,
            overflow,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_copies_counters_and_names_are_unique_per_label() {
        let s = OverloadStats::new();
        s.record_shed(ShedReason::Overloaded);
        s.record_shed(ShedReason::Expired);
        s.record_shed(ShedReason::Expired);
        s.record_reject(Stage::SymbolList);
        set(&s.lifo, 1);
        let snap = s.snapshot();
        assert_eq!(snap.shed_of(ShedReason::Overloaded), 1);
        assert_eq!(snap.expired(), 2);
        assert_eq!(snap.rejects_at(Stage::SymbolList), 1);
        assert!(snap.lifo);
        let mut seen = std::collections::HashSet::new();
        snap.for_each_metric(|name, label, _| assert!(seen.insert((name, label))));
        assert!(seen.len() > 20);
    }
}
