//! The aggregated, tradable price the engine publishes per (symbol, tier).

use super::price::{Mantissa, NO_PRICE};
use super::tick::SymbolId;

/// Tier id: index into the tier table (0 is the raw, unmarked-up tier).
pub type TierId = u8;

/// Bits of [`Price::flags`]. The same bits go on the wire.
pub mod price_flags {
    /// Older updates for this (symbol, tier) were replaced by this one.
    pub const CONFLATED: u8 = 1 << 0;
    /// No healthy, fresh provider quote backs this price; the last known
    /// price is repeated so subscribers know it is not current.
    pub const STALE: u8 = 1 << 1;
    /// Exactly one provider contributes to the price.
    pub const SINGLE_PROVIDER: u8 = 1 << 2;
    /// Not firm: the book was crossed or locked and resolved by rule, or the
    /// contributing quote was itself indicative.
    pub const INDICATIVE: u8 = 1 << 3;
}

/// An aggregated price for one (symbol, tier). 80 bytes, copied by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    /// Best bid in points after aggregation, or [`NO_PRICE`] when no side is quoted.
    pub bid: Mantissa,
    /// Best ask in points after aggregation, or [`NO_PRICE`] when no side is quoted.
    pub ask: Mantissa,
    /// Size available at the bid, in units of the base instrument (summed over
    /// the providers quoting the best bid); 0 when the side is absent.
    pub bid_size: u64,
    /// Size available at the ask, in units of the base instrument; 0 when the
    /// side is absent.
    pub ask_size: u64,
    /// Per-symbol sequence number, shared by every tier of the symbol and
    /// incremented on every published change. Starts at 1.
    pub seq: u64,
    /// Provider timestamp of the quote that caused this price (UTC ns).
    pub provider_time_ns: u64,
    /// When the engine produced this price (monotonic ns).
    pub engine_time_ns: u64,
    /// Receive time of the tick that caused this price (monotonic ns); the
    /// start of the end-to-end latency measurement.
    pub receive_time_ns: u64,
    /// The stream that numbered `seq` (the protocol's `streamId`, see
    /// docs/protocol.md): one (symbol, seq) of one stream is one price
    /// everywhere. A standalone or core engine stamps its own (random,
    /// nonzero, per process); on an edge it is the bus stream's. 0: none.
    pub stream_id: u64,
    /// Index into the instrument table.
    pub symbol: SymbolId,
    /// Tier this price is for; [`TOP_OF_BOOK`](super::markups::TOP_OF_BOOK)
    /// (0) on the engine's tier-less publish, before any markup.
    pub tier: TierId,
    /// [`price_flags`] bits.
    pub flags: u8,
    /// How many providers contributed.
    pub providers: u8,
    /// Padding to 80 bytes; always zero.
    pub _reserved: [u8; 3],
}

const _: () = assert!(std::mem::size_of::<Price>() == 80);

impl Price {
    /// No price: both sides [`NO_PRICE`], sequence 0 (never published), every
    /// other field zero. The initial value of every price-table slot.
    pub const EMPTY: Price = Price {
        bid: NO_PRICE,
        ask: NO_PRICE,
        bid_size: 0,
        ask_size: 0,
        seq: 0,
        provider_time_ns: 0,
        engine_time_ns: 0,
        receive_time_ns: 0,
        stream_id: 0,
        symbol: 0,
        tier: 0,
        flags: 0,
        providers: 0,
        _reserved: [0; 3],
    };

    /// Spread in points, if both sides are present.
    pub fn spread(&self) -> Option<Mantissa> {
        (self.bid != NO_PRICE && self.ask != NO_PRICE).then(|| self.ask - self.bid)
    }
}

/// A fresh stream id: random, nonzero. Each engine (each process) picks
/// one, so a restarted server's sequences are never taken for the old
/// server's.
pub fn fresh_stream_id() -> u64 {
    loop {
        let id = rand::random::<u64>();
        if id != 0 {
            return id;
        }
    }
}

impl Default for Price {
    fn default() -> Self {
        Price::EMPTY
    }
}
