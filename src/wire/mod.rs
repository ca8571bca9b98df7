//! The subscriber and provider binary protocol: SOFH-framed SBE messages,
//! sans-IO.
//!
//! # Contract
//!
//! This module never touches a socket, a clock or the heap on its hot
//! paths. [`split`] finds one frame at the front of a receive buffer,
//! [`decode()`] turns it into a borrowed [`Message`] view, and the `encode_*`
//! functions write one whole frame into a caller buffer. Nothing here
//! allocates except the cold helpers ([`OwnedMessage`], [`annotate()`]);
//! nothing blocks; no input makes `split` or `decode` panic. The wire format
//! is specified in `docs/protocol.md` and `schema/pricewire-sbe.xml`.
//!
//! Limits: a frame is 14 bytes ([`FRAME_LEN_MIN`]) to [`FRAME_LEN_MAX`]
//! (64 KiB) from clients and providers, up to [`SERVER_FRAME_LEN_MAX`]
//! (1 MiB) from the server; var data up to 255 bytes; groups up to 65535
//! entries (and the frame limit).
//!
//! # Reading (gateway or client)
//!
//! ```
//! use pricewire::wire::{self, Message};
//! # let mut inbound = vec![0u8; 128];
//! # let n = wire::encode_heartbeat(&mut inbound).unwrap();
//! # inbound.truncate(n);
//! let mut consumed = 0;
//! loop {
//!     match wire::split(&inbound[consumed..]) {
//!         Ok(None) => break, // need more bytes: read the socket again
//!         Ok(Some(len)) => {
//!             let frame = &inbound[consumed..consumed + len];
//!             consumed += len;
//!             match wire::decode(frame) {
//!                 Ok(Message::Heartbeat) => {}
//!                 Ok(Message::Subscribe(sub)) => {
//!                     for entry in sub.entries { /* entry: SymbolRef */ let _ = entry; }
//!                 }
//!                 Ok(_other) => {}
//!                 // One bad message: send a Reject with e.reason(); the
//!                 // framing is intact, so the session may continue.
//!                 Err(e) => { let _ = e.reason(); }
//!             }
//!         }
//!         // The framing is lost: send Reject(e.reason()) and a
//!         // Disconnect(protocol_error), then close.
//!         Err(e) => { let _ = e.reason(); break; }
//!     }
//! }
//! // Keep inbound[consumed..] (a partial frame) for the next read.
//! ```
//!
//! # Writing
//!
//! Every encoder returns the frame length or an [`EncodeError`] (buffer too
//! small, var data over 255 bytes, ...), in which case nothing usable was
//! written. The price fast path writes into a fixed slot that holds either
//! price message: a PriceUpdate (76 bytes) or a PriceSnapshot, which also
//! names the stream that numbered its sequence (84 bytes):
//!
//! ```
//! use pricewire::wire::{self, PriceBody, PriceKind, PRICE_FRAME_LEN, PRICE_SLOT_LEN};
//! let mut slot = [0u8; PRICE_SLOT_LEN];
//! let body = PriceBody { symbol_id: 3, digits: 5, seq: 1, bid: 108_123, ask: 108_126, ..Default::default() };
//! let n = wire::encode_price(&mut slot, PriceKind::Update, &body, 0);
//! assert_eq!(n, PRICE_FRAME_LEN);
//! assert_eq!(wire::decode(&slot[..n]), Ok(wire::Message::PriceUpdate(body)));
//! ```
//!
//! Groups come from any iterator, so a client subscribes to names in one
//! call and a server answers straight from its tables:
//!
//! ```
//! use pricewire::wire::{self, TIER_ACCOUNT_DEFAULT};
//! let mut buf = [0u8; 512];
//! let n = wire::encode_subscribe_names(&mut buf, 7, TIER_ACCOUNT_DEFAULT, ["EURUSD", "XAUUSD"]).unwrap();
//! let n2 = wire::encode_subscribe(&mut buf[n..], 8, 0, [wire::SymbolRef::by_id(3)]).unwrap();
//! assert_eq!(n + n2, 14 + 9 + 4 + 2 * 18 + 14 + 9 + 4 + 18);
//! ```
//!
//! # Evolution
//!
//! The schema only grows by appending: new fields at the end of a block,
//! new groups and var data after the existing ones, new templates, new enum
//! values. The decoder reads blocks and group entries by the lengths on the
//! wire, so a frame from a newer version decodes (its extra bytes skipped).
//! A root block from an older version that ends before a field added later
//! (`since_version`) decodes with that field 0 (a version-2 server's
//! LogonAccepted and PriceSnapshot have no stream id); a block shorter
//! than the first version's is [`DecodeError::ShortBlock`]. A change that
//! is not an append takes a new schema id.

pub mod annotate;
pub mod blocks;
pub mod codes;
pub mod decode;
pub mod encode;
pub mod field;
pub mod frame;
pub mod owned;
pub mod peek;
pub mod spec;
pub mod stats;

#[cfg(test)]
mod tests;

pub use annotate::annotate;
pub use blocks::{
    GroupHeader, HistoryRequest, HistoryTick, LogonAccepted, LogonRejected, MessageHeader,
    PriceBody, PriceSnapshot, QuoteEntry, SubscribeResult, SymbolInfo, SymbolListRequest,
    SymbolRef, TierInfo, SNAPSHOT_STREAM_ID,
};
pub use codes::{
    quote_flags, template, DisconnectReason, LogonRejectReason, RejectReason, SubscribeStatus,
    SYMBOL_BY_NAME, TIER_ACCOUNT_DEFAULT,
};
pub use decode::{
    decode, decode_header, DecodeError, Disconnect, Group, HistoryResponse, Logon, Message,
    ProviderLogon, ProviderQuote, Reject, SnapshotRequest, SnapshotResponse, Subscribe,
    SubscribeResponse, SymbolDirectory,
};
pub use encode::*;
pub use field::{Block, Name16, NAME_LEN};
pub use frame::{
    split, split_with_max, FrameError, ENCODING_TYPE_SBE_LE, FRAME_LEN_MAX, FRAME_LEN_MIN,
    HEADER_LEN, SERVER_FRAME_LEN_MAX,
};
pub use owned::OwnedMessage;
pub use peek::{readable, Readable};
pub use spec::Sender;
pub use stats::{WireStats, WireStatsSnapshot};

/// SBE schema id of pricewire ("PW").
pub const SCHEMA_ID: u16 = 0x5057;
/// Schema version this build encodes (3: the stream id in LogonAccepted
/// and PriceSnapshot).
pub const VERSION: u16 = 3;
/// Lowest schema version this build decodes.
pub const VERSION_MIN: u16 = 1;
