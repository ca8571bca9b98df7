//! The engine stage as a task hosted by gateway shard 0's loop
//! (`--threading shared`; see [`crate::runtime::hosting`]).

use crate::clock::monotonic_ns;
use crate::runtime::hosting::{drop_signal, DropSignal, Dropped, HostedTask};

use super::EngineStage;

/// Longest time a finished engine keeps offering parked prices to shards
/// that do not take them.
const FLUSH_LIMIT_NS: u64 = 1_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EngineState {
    Running,
    Flushing { deadline_ns: u64 },
    Done,
}

/// The engine stage as a hosted task. Behaves as the dedicated engine
/// loop does: turns until every input is abandoned and drained, flushes
/// parked prices (bounded), then reports finished; dropping it abandons
/// the shard rings, which ends the shards' sinks.
pub struct HostedEngine {
    stage: EngineStage,
    state: EngineState,
    _dropped: DropSignal,
}

impl HostedEngine {
    pub(crate) fn new(stage: EngineStage) -> (Self, Dropped) {
        let (signal, dropped) = drop_signal();
        (
            HostedEngine {
                stage,
                state: EngineState::Running,
                _dropped: signal,
            },
            dropped,
        )
    }
}

impl HostedTask for HostedEngine {
    fn name(&self) -> &'static str {
        "engine"
    }

    #[inline]
    fn turn(&mut self, now_ns: u64) -> usize {
        match self.state {
            EngineState::Running => {
                // Time-gated, as in the dedicated loop: a silent provider's
                // symbols go stale even while ticks keep every turn busy.
                self.stage.maybe_sweep(now_ns);
                let n = self.stage.turn(now_ns);
                if n == 0 && self.stage.inputs_done() {
                    self.stage.finish();
                    self.state = EngineState::Flushing {
                        deadline_ns: monotonic_ns() + FLUSH_LIMIT_NS,
                    };
                }
                n
            }
            EngineState::Flushing { deadline_ns } => {
                let n = self.stage.turn(now_ns);
                if self.stage.parked() == 0 || now_ns >= deadline_ns {
                    self.state = EngineState::Done;
                }
                n
            }
            EngineState::Done => 0,
        }
    }

    // Prices parked for a full shard ring are not work here: counting them
    // would keep shard 0 from sleeping while another shard lags. They are
    // offered again on shard 0's next turn (at most PARK_MAX_US later),
    // as the dedicated engine does after its park.
    fn has_work(&self) -> bool {
        match self.state {
            EngineState::Running => self.stage.has_input() || self.stage.inputs_done(),
            EngineState::Flushing { .. } => true,
            EngineState::Done => false,
        }
    }

    fn retry_pending(&self) -> bool {
        self.stage.parked() > 0
    }

    fn next_timer_ns(&self) -> Option<u64> {
        // The stale sweep: a silent provider's symbols are republished
        // on time even when nothing else wakes the host.
        (self.state == EngineState::Running).then(|| self.stage.next_sweep_ns())
    }

    fn finished(&self) -> bool {
        self.state == EngineState::Done
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// The hosted engine asks its host to wake for its stale sweep while
    /// it runs, and stops asking once its inputs are done.
    #[test]
    fn a_running_engine_reports_its_next_stale_sweep() {
        use crate::engine::{Aggregator, EngineStats, PriceTable, ProviderHealth, STALE_SWEEP_NS};
        let config = crate::config::ConfigFile::default().resolve(1).unwrap();
        let table = &config.table;
        let stats = Arc::new(EngineStats::default());
        let health = ProviderHealth::new(table.providers().len());
        let agg = Aggregator::new(table, &config.engine, health, stats.clone());
        let prices = Arc::new(PriceTable::with_markups(crate::model::Markups::new(table)));
        let (producer, consumer) = rtrb::RingBuffer::<crate::model::Tick>::new(8);
        let stage = EngineStage::new(agg, prices, Vec::new(), vec![consumer], stats);
        let (mut engine, _done) = HostedEngine::new(stage);
        assert_eq!(engine.next_timer_ns(), Some(0), "due before the first turn");
        engine.turn(5);
        assert_eq!(engine.next_timer_ns(), Some(5 + STALE_SWEEP_NS));
        engine.turn(6);
        assert_eq!(
            engine.next_timer_ns(),
            Some(5 + STALE_SWEEP_NS),
            "not due yet: unchanged"
        );
        engine.turn(5 + STALE_SWEEP_NS);
        assert_eq!(engine.next_timer_ns(), Some(5 + 2 * STALE_SWEEP_NS));
        drop(producer);
        engine.turn(5 + STALE_SWEEP_NS + 1);
        assert_eq!(engine.next_timer_ns(), None, "inputs done: no timer");
    }
}
