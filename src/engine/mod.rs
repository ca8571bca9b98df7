//! The engine stage: ticks from every feed ring in, aggregated prices out to
//! the price table and to one ring per gateway shard.
//!
//! One thread owns all engine state; nothing is shared but the lock-free
//! price table, the provider-health flags and the counters. A turn flushes
//! parked prices, then drains up to [`ENGINE_BATCH`] ticks from each input
//! ring, so one busy feed cannot starve another.

pub mod aggregator;
pub mod fanout;
pub mod history;
pub mod hosted;
#[cfg(all(test, pricewire_loom))]
mod loom_models;
pub mod price_table;
pub mod stats;

use std::sync::Arc;

pub use crate::model::ProviderHealth;
pub use aggregator::{Aggregator, TickOutcome};
pub use fanout::{FanoutStats, ShardInput, ShardPublisher, SymbolInterest};
pub use history::TickHistory;
pub use price_table::PriceTable;
pub use stats::EngineStats;

use crate::model::Tick;

/// Most ticks taken from one input ring per turn.
pub const ENGINE_BATCH: usize = 256;
/// How often prices are re-evaluated for staleness without new ticks.
pub const STALE_SWEEP_NS: u64 = 100_000_000;
// A hosted engine's host wakes it for the sweep: its idle mark is
// trusted for that long (`runtime::progress`).
const _: () = assert!(STALE_SWEEP_NS <= crate::runtime::progress::IDLE_TRUST_NS);

/// Engine state plus its rings. Driven by [`EngineStage::turn`] on the
/// engine thread, or directly by benches and tests.
pub struct EngineStage {
    /// Aggregation state for every symbol; produces the tier-less top of book.
    pub agg: Aggregator,
    /// The shared seqlock table the engine writes every publish into, read
    /// lock-free by request workers and snapshots.
    pub table: Arc<PriceTable>,
    /// One publisher per gateway shard, in shard-index order.
    pub shards: Vec<ShardPublisher>,
    /// One tick ring per feed; each turn takes at most [`ENGINE_BATCH`] ticks
    /// from each.
    pub inputs: Vec<rtrb::Consumer<Tick>>,
    /// Recent accepted ticks per symbol, for HistoryRequest.
    pub history: Option<Arc<TickHistory>>,
    /// Optional copy of every tick taken off a feed ring (the recorder).
    pub tap: Option<crate::capture::RecorderTap>,
    /// The engine's counters (ticks, invalid, spikes, crossed books, ...).
    pub stats: Arc<EngineStats>,
    /// The progress marks of the inputs' producers (any order; empty:
    /// none marks), folded into the table's.
    pub feed_marks: Vec<Arc<crate::runtime::Progress>>,
    next_sweep_ns: u64,
    /// The start of the last turn that left every input ring empty (the
    /// table's progress mark, see [`progress`]).
    caught_up_ns: u64,
}

impl EngineStage {
    /// A stage with no history and no recorder tap; set `history` and `tap`
    /// before the first turn to enable them. The first turn sweeps for staleness.
    pub fn new(
        agg: Aggregator,
        table: Arc<PriceTable>,
        shards: Vec<ShardPublisher>,
        inputs: Vec<rtrb::Consumer<Tick>>,
        stats: Arc<EngineStats>,
    ) -> Self {
        EngineStage {
            agg,
            table,
            shards,
            inputs,
            history: None,
            tap: None,
            stats,
            feed_marks: Vec::new(),
            next_sweep_ns: 0,
            caught_up_ns: 0,
        }
    }

    /// Applies one tick: aggregate, then write the table and every shard.
    #[inline]
    pub fn process(&mut self, tick: &Tick, now_ns: u64) -> TickOutcome {
        self.stats.ticks.inc();
        if let Some(tap) = &mut self.tap {
            // Never blocks: a full recorder ring counts the tick as lost.
            tap.push(*tick);
        }
        let outcome = self.agg.on_tick(tick, now_ns);
        match outcome {
            TickOutcome::Published => self.fan_out(),
            TickOutcome::Invalid | TickOutcome::Spike => return outcome,
            TickOutcome::Unchanged => {}
        }
        if let Some(h) = &self.history {
            h.push(tick);
        }
        outcome
    }

    #[inline]
    fn fan_out(&mut self) {
        // One table write and one ring push per change, of the tier-less
        // top of book: the table and the shards derive each tier by its
        // markup where they read it.
        let Some(first) = self.agg.output() else {
            return;
        };
        fanout::publish_top(&self.table, &mut self.shards, first);
    }

    /// One loop turn at `now_ns`. Returns how many ticks it processed.
    #[inline]
    pub fn turn(&mut self, now_ns: u64) -> usize {
        // Before the rings are read: what a feed had taken by this mark
        // is in its ring now.
        let feeds_as_of = self.feeds_as_of(now_ns);
        let mut flushed = false;
        for shard in &mut self.shards {
            flushed |= shard.flush_some() > 0;
        }
        let mut total = 0;
        for i in 0..self.inputs.len() {
            let n = self.inputs[i].slots().min(ENGINE_BATCH);
            for _ in 0..n {
                // `slots()` said the items are there; only we consume.
                if let Ok(t) = self.inputs[i].pop() {
                    self.process(&t, now_ns);
                }
            }
            total += n;
        }
        if total > 0 || flushed {
            self.notify();
        }
        self.mark_progress((now_ns, feeds_as_of), total);
        total
    }

    /// The earliest of the feeds' marks at `now_ns` (`now_ns` if none
    /// marks or all are current).
    #[inline]
    fn feeds_as_of(&self, now_ns: u64) -> u64 {
        self.feed_marks
            .iter()
            .fold(now_ns, |t, m| t.min(m.as_of(now_ns)))
    }

    /// Publishes the table's progress mark after a turn that began at
    /// `now` and took `took` ticks, the feeds current as of `feeds`: if it
    /// left every ring empty, the table holds what the feeds had taken by
    /// then — idle if it found no tick and every feed is current, else
    /// caught up as of the feeds' mark; if it did not, still as of the
    /// last turn that did.
    #[inline]
    fn mark_progress(&mut self, (now, feeds): (u64, u64), took: usize) {
        let progress = self.table.progress();
        if took == 0 || !self.has_input() {
            self.caught_up_ns = feeds;
        }
        if took == 0 && feeds >= now {
            progress.idle(now);
        } else {
            progress.caught_up(self.caught_up_ns);
        }
    }

    /// Every feed has ended and the rings are drained: the table is final
    /// and no longer marked (a shard does not flag a finished replay's
    /// prices stale).
    pub fn finish(&mut self) {
        self.table.progress().finished();
    }

    fn notify(&mut self) {
        for shard in &mut self.shards {
            shard.notify();
        }
    }

    /// When [`EngineStage::maybe_sweep`] next has work: a host that parks
    /// wakes by then at the latest.
    pub fn next_sweep_ns(&self) -> u64 {
        self.next_sweep_ns
    }

    /// Republishes symbols whose providers went stale or unhealthy, at most
    /// every [`STALE_SWEEP_NS`].
    pub fn maybe_sweep(&mut self, now_ns: u64) {
        if now_ns < self.next_sweep_ns {
            return;
        }
        self.next_sweep_ns = now_ns + STALE_SWEEP_NS;
        crate::runtime::drill::point("engine", 0);
        let mut any = false;
        for sym in 0..self.agg.symbols() {
            if self.agg.reevaluate(sym, now_ns) == TickOutcome::Published {
                self.fan_out();
                any = true;
            }
        }
        if any {
            self.notify();
        }
    }

    /// True when any input ring holds ticks.
    pub fn has_input(&self) -> bool {
        self.inputs.iter().any(|c| !c.is_empty())
    }

    /// True when every producer has stopped and every ring is drained.
    pub fn inputs_done(&self) -> bool {
        self.inputs.iter().all(|c| c.is_abandoned() && c.is_empty())
    }

    /// Keys still parked across shards (for an orderly stop).
    pub fn parked(&self) -> usize {
        self.shards
            .iter()
            .filter(|s| !s.is_abandoned())
            .map(|s| s.parked())
            .sum()
    }
}

#[cfg(test)]
mod tests;
