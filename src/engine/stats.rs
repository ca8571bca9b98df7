//! Engine counters, written by the engine thread, read by reporters.

use crate::runtime::counter::Counter;

/// What the engine did with the ticks it received.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct EngineStats {
    /// Ticks taken off the feed ring.
    pub ticks: Counter,
    /// Ticks refused by validation (unknown ids, missing side, crossed).
    pub invalid: Counter,
    /// Ticks refused by the spike filter.
    pub spikes_rejected: Counter,
    /// Large moves accepted after `spike_confirm` consecutive rejections.
    pub spikes_confirmed: Counter,
    /// Aggregations whose book was crossed or locked across providers.
    pub crossed: Counter,
    /// Accepted ticks that did not change the aggregated price.
    pub unchanged: Counter,
    /// Aggregated prices published (per symbol; each covers every tier).
    pub published: Counter,
    /// Prices republished flagged stale.
    pub stale: Counter,
    /// Ticks that withdrew a provider's side or symbol.
    pub withdrawals: Counter,
}
