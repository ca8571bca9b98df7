//! The periodic one-line report of `serve`: rates, end-to-end latency
//! percentiles and every protective counter, as deltas over the interval.

use std::fmt::Write as _;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use hdrhistogram::Histogram;

use crate::ops::metrics::catalogue as m;
use crate::ops::metrics::{sum_of, Series};
use crate::runtime::latency::{latency_histogram, HistogramExchange};

/// Totals the reporter diffs between lines, read from the metrics
/// registry ([`Registry::series`](crate::ops::Registry::series)) so the line and `/metrics` always agree:
/// each is the sum of one family's series (drops split by reason).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// `pricewire_ticks_received_total`.
    pub ticks_in: u64,
    /// `pricewire_prices_published_total`.
    pub published: u64,
    /// `pricewire_price_updates_sent_total` (0 without a gateway).
    pub updates_sent: u64,
    /// `pricewire_conflations_total`, every reason.
    pub conflated: u64,
    /// `pricewire_drops_total{reason="spike_rejected"}`.
    pub spikes: u64,
    /// `pricewire_drops_total{reason="stale_republish"}`.
    pub stale: u64,
    /// `pricewire_drops_total{reason="invalid_tick"}`.
    pub invalid: u64,
    /// `pricewire_drops_total`, every other reason (full rings, refused
    /// provider quotes, answers without room).
    pub dropped: u64,
    /// `pricewire_sheds_total`, every reason.
    pub shed: u64,
}

impl Totals {
    /// Sums the totals out of one scrape of the registry.
    pub fn read(series: &[Series]) -> Totals {
        let all = |family: &str| sum_of(series, family, |_| true) as u64;
        let drop = |reason: &str| sum_of(series, m::DROPS, |s| s.label("reason") == reason) as u64;
        let (spikes, stale, invalid) = (
            drop("spike_rejected"),
            drop("stale_republish"),
            drop("invalid_tick"),
        );
        Totals {
            ticks_in: all(m::TICKS_RECEIVED),
            published: all(m::PRICES_PUBLISHED),
            updates_sent: all(m::PRICE_UPDATES_SENT),
            conflated: all(m::CONFLATIONS),
            spikes,
            stale,
            invalid,
            dropped: all(m::DROPS).saturating_sub(spikes + stale + invalid),
            shed: all(m::SHEDS),
        }
    }
}

/// The reporter's ends of one shard's exchange: empties out, fulls back.
type ShardReturn = (Sender<Histogram<u64>>, Receiver<Histogram<u64>>);

/// Collects histograms from every shard through their exchanges.
pub struct LatencyCollector {
    returns: Vec<ShardReturn>,
    spare: Vec<Option<Histogram<u64>>>,
}

impl LatencyCollector {
    /// Creates one exchange per shard (hand each to its shard).
    pub fn new(shards: usize) -> (Self, Vec<HistogramExchange>) {
        let mut returns = Vec::new();
        let mut exchanges = Vec::new();
        for _ in 0..shards {
            let (full_tx, full_rx) = crossbeam_channel::bounded(1);
            let (empty_tx, empty_rx) = crossbeam_channel::bounded(1);
            returns.push((empty_tx, full_rx));
            exchanges.push(HistogramExchange {
                full: full_tx,
                empty: empty_rx,
            });
        }
        let spare = (0..shards).map(|_| Some(latency_histogram())).collect();
        (LatencyCollector { returns, spare }, exchanges)
    }

    /// Asks every shard for its histogram (hands each an empty one).
    pub fn request(&mut self) {
        for ((empty_tx, _), spare) in self.returns.iter().zip(&mut self.spare) {
            if let Some(h) = spare.take() {
                if let Err(e) = empty_tx.try_send(h) {
                    *spare = Some(e.into_inner());
                }
            }
        }
    }

    /// Merges what shards sent back within `wait` into `into`.
    pub fn collect(&mut self, into: &mut Histogram<u64>, wait: Duration) {
        for ((_, full_rx), spare) in self.returns.iter().zip(&mut self.spare) {
            if spare.is_some() {
                continue;
            }
            if let Ok(mut h) = full_rx.recv_timeout(wait) {
                let _ = into.add(&h);
                h.reset();
                *spare = Some(h);
            }
        }
    }
}

fn us(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.2}ms", ns as f64 / 1e6)
    } else {
        format!("{:.1}us", ns as f64 / 1e3)
    }
}

/// Formats one report line from two totals and the interval histogram.
pub fn line(prev: &Totals, now: &Totals, hist: &Histogram<u64>, secs: f64) -> String {
    let rate = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / secs.max(1e-9);
    let mut s = String::with_capacity(240);
    let _ = write!(
        s,
        "ticks/s in {:.0} | prices/s published {:.0} | updates/s sent {:.0} | ",
        rate(prev.ticks_in, now.ticks_in),
        rate(prev.published, now.published),
        rate(prev.updates_sent, now.updates_sent)
    );
    if hist.is_empty() {
        s.push_str("latency - | ");
    } else {
        let _ = write!(
            s,
            "feed->shard p50 {} p99 {} p99.9 {} max {} | ",
            us(hist.value_at_quantile(0.5)),
            us(hist.value_at_quantile(0.99)),
            us(hist.value_at_quantile(0.999)),
            us(hist.max())
        );
    }
    let d = |a: u64, b: u64| b.saturating_sub(a);
    let _ = write!(
        s,
        "conflated {} | spikes {} | stale {} | invalid {} | dropped {} | shed {}",
        d(prev.conflated, now.conflated),
        d(prev.spikes, now.spikes),
        d(prev.stale, now.stale),
        d(prev.invalid, now.invalid),
        d(prev.dropped, now.dropped),
        d(prev.shed, now.shed)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::metrics::Registry;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    #[test]
    fn totals_are_the_registry_series_the_scrape_shows() {
        let r = Registry::new();
        let n = |v: u64| Arc::new(AtomicU64::new(v));
        let reason = |v: &'static str| [("reason", v)];
        r.register_counter(m::CONFLATIONS, &reason("engine_ring_full_shard0"), n(5))
            .unwrap();
        r.register_counter(
            m::CONFLATIONS,
            &reason("slow_subscriber_shard1"),
            n(161_285),
        )
        .unwrap();
        r.register_counter(m::DROPS, &reason("spike_rejected"), n(2))
            .unwrap();
        r.register_counter(m::DROPS, &reason("feed_ring_full_ingest"), n(7))
            .unwrap();
        r.register_counter(m::DROPS, &reason("crossed_quote_ingest"), n(1))
            .unwrap();
        let t = Totals::read(&r.series());
        assert_eq!((t.conflated, t.spikes, t.dropped), (161_290, 2, 8));
        let scraped = r.scrape();
        assert!(
            scraped.contains("reason=\"slow_subscriber_shard1\"} 161285"),
            "{scraped}"
        );
        let l = line(&Totals::default(), &t, &latency_histogram(), 1.0);
        assert!(l.contains("conflated 161290 | spikes 2 |"), "{l}");
    }

    #[test]
    fn line_reports_deltas_and_percentiles() {
        let prev = Totals::default();
        let now = Totals {
            ticks_in: 2_000,
            published: 1_000,
            conflated: 3,
            ..Totals::default()
        };
        let mut h = latency_histogram();
        for v in 1..=1000u64 {
            h.record(v * 1_000).unwrap();
        }
        let l = line(&prev, &now, &h, 2.0);
        assert!(
            l.starts_with("ticks/s in 1000 | prices/s published 500 |"),
            "{l}"
        );
        assert!(l.contains("p50 500.") && l.contains("conflated 3"), "{l}");
    }
}
