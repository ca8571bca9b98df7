//! A shard consumer that only measures: it drains its engine ring, checks
//! per-(symbol, tier) sequence continuity and records end-to-end latency
//! (tick receive → shard) in a preallocated HDR histogram.
//!
//! `serve --no-listen`, the benches and the allocation tests use it in
//! place of a gateway shard. Histograms are exchanged with the reporter
//! over the control plane (two histograms ping-pong), so recording never
//! allocates and never takes a lock.

use std::sync::Arc;

use hdrhistogram::Histogram;

use crate::clock::monotonic_ns;
use crate::engine::ShardInput;
use crate::model::{price_flags, Price};
use crate::runtime::counter::Counter;
use crate::runtime::latency::{latency_histogram, HistogramExchange};
use crate::runtime::wait::{WaitStrategy, Waiter};

/// Counters of one sink.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct SinkStats {
    /// Prices consumed.
    pub prices: Counter,
    /// Sequence jumps not explained by a `CONFLATED` flag.
    pub unexplained_gaps: Counter,
    /// Sequence jumps on conflated prices (expected under backpressure).
    pub conflated_gaps: Counter,
}

/// The measuring shard consumer.
pub struct ShardSink {
    input: ShardInput,
    tiers: usize,
    last_seq: Box<[u64]>,
    hist: Histogram<u64>,
    exchange: Option<HistogramExchange>,
    /// Shared counters for the status report.
    pub stats: Arc<SinkStats>,
}

impl ShardSink {
    /// A sink over `input` that registers interest in every symbol; it keeps
    /// the last sequence of each of `symbols × tiers` prices (allocated here).
    pub fn new(input: ShardInput, symbols: usize, tiers: usize) -> Self {
        // A sink measures everything the engine publishes.
        input.interest.set_all();
        ShardSink {
            input,
            tiers,
            last_seq: vec![0; symbols * tiers].into_boxed_slice(),
            hist: latency_histogram(),
            exchange: None,
            stats: Arc::new(SinkStats::default()),
        }
    }

    /// Swaps its latency histogram with the reporter through `exchange`
    /// after each drain, so recording never locks or allocates.
    pub(crate) fn with_exchange(mut self, exchange: HistogramExchange) -> Self {
        self.exchange = Some(exchange);
        self
    }

    #[inline]
    fn on_price(&mut self, p: &Price, now_ns: u64) {
        self.stats.prices.inc();
        let k = p.symbol as usize * self.tiers + p.tier as usize;
        if let Some(last) = self.last_seq.get_mut(k) {
            if *last != 0 && p.seq != *last + 1 {
                if p.flags & price_flags::CONFLATED != 0 {
                    self.stats.conflated_gaps.inc();
                } else {
                    self.stats.unexplained_gaps.inc();
                }
            }
            *last = p.seq;
        }
        self.hist
            .saturating_record(now_ns.saturating_sub(p.receive_time_ns).max(1));
    }

    /// Drains what is in the ring now. Returns how many prices it took.
    pub fn drain(&mut self) -> usize {
        let n = self.input.consumer.slots();
        if n == 0 {
            return 0;
        }
        let now = monotonic_ns();
        for _ in 0..n {
            if let Ok(p) = self.input.consumer.pop() {
                self.on_price(&p, now);
            }
        }
        self.swap_histogram();
        n
    }

    fn swap_histogram(&mut self) {
        if let Some(x) = &self.exchange {
            x.swap(&mut self.hist);
        }
    }

    /// Runs until the engine abandons the ring and it is drained. Turns
    /// the hosted stages (`--threading shared`: the engine) first in each
    /// loop turn; they ring this sink's doorbell to wake it.
    pub fn run(&mut self, wait: WaitStrategy) {
        self.input.doorbell.bind_current_thread();
        let mut waiter = Waiter::new(wait, self.input.doorbell.clone());
        loop {
            let hosted = self.input.hosted.turn(monotonic_ns());
            if hosted + self.drain() > 0 {
                waiter.reset();
                continue;
            }
            if self.input.consumer.is_abandoned()
                && self.input.consumer.is_empty()
                && self.input.hosted.is_empty()
            {
                break;
            }
            crate::runtime::drill::point("sink", self.input.index as u32);
            let consumer = &self.input.consumer;
            let hosted = &self.input.hosted;
            waiter.idle(|| !consumer.is_empty() || hosted.has_work());
        }
    }

    /// The histogram being recorded (for tests and final reports).
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }
}
