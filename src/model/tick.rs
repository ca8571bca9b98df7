//! The inbound quote record that flows from feeds to the engine.
//!
//! `Tick` is a fixed 64-byte `#[repr(C)]` value: one cache line, copied by
//! value through the rings, never boxed.

use super::price::{Mantissa, NO_PRICE};

/// Dense symbol id: the index of the instrument in the instrument table.
pub type SymbolId = u16;
/// Dense provider id: the index of the provider in the provider table.
pub type ProviderId = u16;

/// One provider quote, exactly as received.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tick {
    /// Best bid in points of the symbol's digits, or [`NO_PRICE`].
    pub bid: Mantissa,
    /// Best ask in points of the symbol's digits, or [`NO_PRICE`].
    pub ask: Mantissa,
    /// Size available at the bid, in units of the base instrument.
    pub bid_size: u64,
    /// Size available at the ask, in units of the base instrument.
    pub ask_size: u64,
    /// The provider's own timestamp, UTC nanoseconds since the Unix epoch.
    pub provider_time_ns: u64,
    /// When pricewire received the quote, on the process's monotonic clock
    /// (nanoseconds since the clock's origin). Latency is measured from here.
    pub receive_time_ns: u64,
    /// The feed's own sequence number for this quote (per feed source).
    pub feed_seq: u64,
    /// Index into the instrument table.
    pub symbol: SymbolId,
    /// Index into the provider table; which provider quoted.
    pub provider: ProviderId,
    /// [`tick_flags`] bits.
    pub flags: u32,
}

const _: () = assert!(std::mem::size_of::<Tick>() == 64);

/// Bits of [`Tick::flags`].
pub mod tick_flags {
    /// The provider marked the quote indicative (not firm).
    pub const INDICATIVE: u32 = 1 << 0;
    /// The provider withdrew its bid (a FIX delete `279=2` of the bid, a
    /// snapshot without one, or the whole symbol by `35=Y`): the field
    /// `bid` is [`NO_PRICE`](crate::model::NO_PRICE) and the engine drops
    /// this provider's bid from the aggregate at once. An unflagged side
    /// of such a tick carries the side's current price.
    pub const WITHDRAWN_BID: u32 = 1 << 1;
    /// The provider withdrew its ask (see [`WITHDRAWN_BID`]).
    pub const WITHDRAWN_ASK: u32 = 1 << 2;
    /// Either withdrawal bit: the tick is a withdrawal.
    pub const WITHDRAWN: u32 = WITHDRAWN_BID | WITHDRAWN_ASK;
}

impl Tick {
    /// An empty tick: no prices, zero times. Used to pre-fill buffers.
    pub const EMPTY: Tick = Tick {
        bid: NO_PRICE,
        ask: NO_PRICE,
        bid_size: 0,
        ask_size: 0,
        provider_time_ns: 0,
        receive_time_ns: 0,
        feed_seq: 0,
        symbol: 0,
        provider: 0,
        flags: 0,
    };

    /// Mid price in points, if both sides are present.
    #[inline]
    pub fn mid(&self) -> Option<Mantissa> {
        if self.bid == NO_PRICE || self.ask == NO_PRICE {
            None
        } else {
            Some(self.bid / 2 + self.ask / 2 + (self.bid % 2 + self.ask % 2) / 2)
        }
    }
}

impl Default for Tick {
    fn default() -> Self {
        Tick::EMPTY
    }
}
