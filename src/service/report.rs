//! The periodic one-line report of `serve`: rates, end-to-end latency
//! percentiles and every protective counter, as deltas over the interval.

use std::fmt::Write as _;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use hdrhistogram::Histogram;

use crate::pipeline::sink::SinkStats;
use crate::pipeline::PipelineHandles;
use crate::runtime::latency::{latency_histogram, HistogramExchange};
use std::sync::Arc;

/// Totals the reporter diffs between lines.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub ticks_in: u64,
    pub prices_out: u64,
    pub conflated: u64,
    pub spikes: u64,
    pub dropped: u64,
    pub invalid: u64,
    pub stale: u64,
}

impl Totals {
    pub fn read(h: &PipelineHandles, sinks: &[Arc<SinkStats>], prices_out_extra: u64) -> Totals {
        Totals {
            ticks_in: h.engine.ticks.get(),
            prices_out: sinks.iter().map(|s| s.prices.get()).sum::<u64>() + prices_out_extra,
            conflated: h.fanout.iter().map(|f| f.conflated.get()).sum(),
            spikes: h.engine.spikes_rejected.get(),
            dropped: h.feeds.iter().map(|(_, f)| f.dropped.get()).sum(),
            invalid: h.engine.invalid.get(),
            stale: h.engine.stale.get(),
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
    let mut s = String::with_capacity(200);
    let _ = write!(
        s,
        "ticks/s in {:.0} | prices/s out {:.0} | ",
        rate(prev.ticks_in, now.ticks_in),
        rate(prev.prices_out, now.prices_out)
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
    let _ = write!(
        s,
        "conflated {} | spikes {} | dropped {} | invalid {} | stale {}",
        now.conflated - prev.conflated,
        now.spikes - prev.spikes,
        now.dropped - prev.dropped,
        now.invalid - prev.invalid,
        now.stale - prev.stale
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_reports_deltas_and_percentiles() {
        let prev = Totals::default();
        let now = Totals {
            ticks_in: 2_000,
            prices_out: 1_000,
            conflated: 3,
            ..Totals::default()
        };
        let mut h = latency_histogram();
        for v in 1..=1000u64 {
            h.record(v * 1_000).unwrap();
        }
        let l = line(&prev, &now, &h, 2.0);
        assert!(l.starts_with("ticks/s in 1000 | prices/s out 500 |"), "{l}");
        assert!(l.contains("p50 500.") && l.contains("conflated 3"), "{l}");
    }
}
