//! A price on the bus: the protocol's own PriceUpdate frame (SOFH + SBE,
//! 76 bytes, schema id and version in the header) followed by the
//! publishing core's lease epoch, 8 bytes little-endian: 84 bytes. (In
//! the payload rather than a NATS header, which would cost the client
//! several allocations per message to build and to parse.)
//!
//! Encoding writes into a caller's fixed array and allocates nothing.
//! Decoding checks the frame (length, schema, version, template), that
//! the symbol is one of the edge's instruments and that its decimal digits
//! agree with the edge's configuration: a core and an edge configured with
//! different instruments must not turn 1.08123 into 108.123.

use crate::model::{InstrumentTable, Price};
use crate::wire::{self, Message, PriceBody, PRICE_FRAME_LEN};

/// Length of a bus message: the price frame and the epoch.
pub const BUS_MESSAGE_LEN: usize = PRICE_FRAME_LEN + 8;

/// Why a bus message was refused (each is counted by the edge).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The message is not [`BUS_MESSAGE_LEN`] bytes long.
    #[error("{0} bytes, a bus price message has {BUS_MESSAGE_LEN}")]
    Length(usize),
    /// The frame's decoder refused it (SOFH, schema, version, layout).
    #[error("frame: {0}")]
    Frame(String),
    /// A valid frame of another template.
    #[error("template {0} is not a PriceUpdate")]
    NotAPrice(u16),
    /// The subject's symbol is not in this edge's configuration.
    #[error("symbol {0:?} is not configured here")]
    UnknownSymbol(String),
    /// The price's decimal digits differ from this edge's configuration.
    #[error("symbol {symbol}: {digits} digits on the bus, {configured} configured here")]
    Digits {
        /// The symbol's name.
        symbol: String,
        /// Digits in the message.
        digits: u8,
        /// Digits configured on this edge.
        configured: u8,
    },
}

/// Encodes `price` (engine monotonic times turned to UTC by
/// `wall_offset_ns`) and `epoch` into `out`.
#[inline]
pub fn encode(
    out: &mut [u8; BUS_MESSAGE_LEN],
    price: &Price,
    epoch: u64,
    digits: u8,
    wall_offset_ns: i64,
) -> usize {
    let (frame, tail) = out.split_at_mut(PRICE_FRAME_LEN);
    let frame: &mut [u8; PRICE_FRAME_LEN] = frame.try_into().expect("split at the frame length");
    wire::encode_update(frame, &PriceBody::from_price(price, digits, wall_offset_ns));
    tail.copy_from_slice(&epoch.to_le_bytes());
    BUS_MESSAGE_LEN
}

/// The epoch of a bus message (0 if it is too short to carry one).
pub fn epoch(message: &[u8]) -> u64 {
    message
        .get(PRICE_FRAME_LEN..BUS_MESSAGE_LEN)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Decodes one bus message for `symbol` (the subject's last token). The
/// symbol id is the edge's own (looked up by name, so cores and edges
/// agree by name, not by the order of their instrument lists); times are
/// turned back to this host's monotonic clock with `wall_offset_ns`, and
/// `receive_time_ns` is when the edge took the message off the bus.
pub fn decode(
    frame: &[u8],
    symbol: &str,
    table: &InstrumentTable,
    wall_offset_ns: i64,
    receive_time_ns: u64,
) -> Result<Price, CodecError> {
    if frame.len() != BUS_MESSAGE_LEN {
        return Err(CodecError::Length(frame.len()));
    }
    let body = match wire::decode(&frame[..PRICE_FRAME_LEN]) {
        Ok(Message::PriceUpdate(b)) => b,
        Ok(other) => return Err(CodecError::NotAPrice(other.template_id())),
        Err(e) => return Err(CodecError::Frame(e.to_string())),
    };
    let inst = table
        .by_name(symbol)
        .ok_or_else(|| CodecError::UnknownSymbol(symbol.to_string()))?;
    if inst.digits != body.digits {
        return Err(CodecError::Digits {
            symbol: symbol.to_string(),
            digits: body.digits,
            configured: inst.digits,
        });
    }
    let back = |utc: u64| utc.saturating_add_signed(wall_offset_ns.saturating_neg());
    Ok(Price {
        bid: body.bid,
        ask: body.ask,
        bid_size: body.bid_size,
        ask_size: body.ask_size,
        seq: body.seq,
        provider_time_ns: body.provider_time_ns,
        engine_time_ns: back(body.engine_time_ns),
        receive_time_ns,
        stream_id: 0,
        symbol: inst.id,
        tier: body.tier,
        flags: body.flags,
        providers: body.providers,
        _reserved: [0; 3],
    })
}
