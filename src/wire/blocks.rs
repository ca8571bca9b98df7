//! Every fixed block of the schema: the message header, root blocks and
//! group entries. Layout = field order; see `wire_block!` in [`field`](super::field).
//!
//! Blocks that are a whole message by themselves (no groups, no var data)
//! are public message types; roots of messages with groups or var data are
//! crate-private and surface flattened in the message views of
//! [`decode()`](super::decode()).

use super::codes::{DisconnectReason, LogonRejectReason, RejectReason, SubscribeStatus};
use super::field::{wire_block, Block, FieldInfo, Name16};
use crate::model::{Price, SymbolId, Tick};

wire_block! {
    /// The standard SBE message header after the SOFH.
    pub struct MessageHeader [8] {
        /// Length of the root block in bytes (may exceed this schema's length when sent by a newer version).
        pub block_length: u16,
        /// Which message follows.
        pub template_id: u16,
        /// Always 0x5057 ("PW").
        pub schema_id: u16,
        /// Schema version the sender encoded with.
        pub version: u16,
    }
}

wire_block! {
    /// Header of a repeating group (SBE `groupSizeEncoding`).
    pub struct GroupHeader [4] {
        /// Length of one entry in bytes.
        pub block_length: u16,
        /// Number of entries.
        pub num_in_group: u16,
    }
}

wire_block! {
    /// Root of messages without fields (Heartbeat, Logout, ProviderQuote).
    pub struct EmptyRoot [0] {}
}

// ---- session ------------------------------------------------------------

wire_block! {
    pub(crate) struct LogonRoot [4] {
        /// Heartbeat interval the client asks for, in milliseconds (0 = server default). The server may clamp it.
        pub heartbeat_interval_ms: u32,
    }
}

wire_block! {
    /// Server → client: the logon (or provider logon) succeeded.
    pub struct LogonAccepted [29] {
        /// Server-assigned session id, unique per server instance.
        pub session_id: u64,
        /// Heartbeat interval both sides use, in milliseconds.
        pub heartbeat_interval_ms: u32,
        /// Server wall clock at acceptance, UTC nanoseconds since the Unix epoch (informational; never used for deadlines).
        pub server_time_ns: u64,
        /// The account's default tier id (used when a Subscribe says tier 0xFF).
        pub default_tier: u8,
        /// The stream whose sequence numbers this session's prices carry at logon (see PriceSnapshot's `streamId`); 0 = none yet (an edge that has not heard a core) or a version-2 server.
        pub stream_id: u64; since 3,
    }
}

wire_block! {
    /// Server → client: the logon was refused; the server closes the connection after sending it.
    pub struct LogonRejected [5] {
        /// Why (LogonRejectReason).
        pub reason: LogonRejectReason,
        /// Minimum wait before reconnecting, in milliseconds (jittered; 0 = no floor given).
        pub retry_after_ms: u32,
    }
}

wire_block! {
    pub(crate) struct DisconnectRoot [5] {
        /// Why the session ends (DisconnectReason).
        pub reason: DisconnectReason,
        /// Minimum wait before reconnecting, in milliseconds (jittered; 0 = at once with normal backoff).
        pub retry_after_ms: u32,
    }
}

// ---- data ---------------------------------------------------------------

wire_block! {
    /// Client → server: ask for the symbol and tier directory.
    pub struct SymbolListRequest [13] {
        /// Client-chosen id echoed in the response or Reject.
        pub request_id: u64,
        /// Remaining time budget in microseconds, relative to when the server reads the frame (0 = server default).
        pub budget_us: u32,
        /// Critical requests are shed last under overload.
        pub critical: bool,
    }
}

wire_block! {
    pub(crate) struct RequestIdRoot [8] {
        /// The request this answers.
        pub request_id: u64,
    }
}

wire_block! {
    /// One symbol of a SymbolDirectory.
    pub struct SymbolInfo [19] {
        /// Dense symbol id used in every other message.
        pub symbol_id: u16,
        /// Decimal digits: prices of this symbol are mantissa × 10^-digits.
        pub digits: u8,
        /// Symbol name, NUL-padded.
        pub name: Name16,
    }
}

wire_block! {
    /// One tier of a SymbolDirectory.
    pub struct TierInfo [17] {
        /// Tier id used in Subscribe and prices.
        pub tier_id: u8,
        /// Tier name, NUL-padded.
        pub name: Name16,
    }
}

wire_block! {
    pub(crate) struct SubscribeRoot [9] {
        /// Client-chosen id echoed in the SubscribeResponse or Reject.
        pub request_id: u64,
        /// Tier the entries are subscribed at, or unsubscribed from (0xFF = the account's default tier).
        pub tier: u8,
    }
}

wire_block! {
    /// A symbol named in Subscribe/Unsubscribe: by id, or by name when
    /// `symbol_id` is 0xFFFF.
    pub struct SymbolRef [18] {
        /// Symbol id, or 0xFFFF to look the symbol up by name.
        pub symbol_id: u16,
        /// Symbol name, NUL-padded: all NUL when referring by id (an id with a name must name that symbol).
        pub name: Name16,
    }
}

wire_block! {
    /// Outcome for one symbol of a SubscribeResponse.
    pub struct SubscribeResult [19] {
        /// Resolved symbol id (0xFFFF if the name is unknown).
        pub symbol_id: u16,
        /// The symbol's name once resolved (also for an entry by id); for an unknown symbol, the name as sent.
        pub name: Name16,
        /// Outcome (SubscribeStatus).
        pub status: SubscribeStatus,
    }
}

wire_block! {
    /// The price body of PriceSnapshot, PriceUpdate and SnapshotResponse
    /// entries: one aggregated price for a (symbol, tier).
    pub struct PriceBody [62] {
        /// Symbol id.
        pub symbol_id: u16,
        /// Tier id.
        pub tier: u8,
        /// PriceFlags bits: 0x01 conflated, 0x02 stale, 0x04 single_provider, 0x08 indicative.
        pub flags: u8 => "PriceFlags",
        /// Decimal digits: bid and ask are mantissa × 10^-digits.
        pub digits: u8,
        /// Number of providers that contributed.
        pub providers: u8,
        /// Per-symbol sequence number, shared by all tiers of the symbol, starting at 1.
        pub seq: u64,
        /// Best bid mantissa (i64::MIN = no bid).
        pub bid: i64,
        /// Best ask mantissa (i64::MIN = no ask).
        pub ask: i64,
        /// Size at the bid, in units of the base instrument.
        pub bid_size: u64,
        /// Size at the ask, in units of the base instrument.
        pub ask_size: u64,
        /// Provider timestamp of the quote behind this price, UTC nanoseconds since the Unix epoch.
        pub provider_time_ns: u64,
        /// When the engine produced this price, UTC nanoseconds since the Unix epoch.
        pub engine_time_ns: u64,
    }
}

/// Number of fields of [`PriceBody`].
const PRICE_FIELDS: usize = PriceBody::FIELDS.len();

/// PriceSnapshot's root block: a [`PriceBody`] and, since version 3, the
/// id of the stream that numbered its sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PriceSnapshot {
    /// The price, in PriceUpdate's layout.
    pub body: PriceBody,
    /// See the field's doc in [`SNAPSHOT_STREAM_ID`].
    pub stream_id: u64,
}

/// The `streamId` field PriceSnapshot appends to the price body.
pub const SNAPSHOT_STREAM_ID: FieldInfo = FieldInfo {
    name: "stream_id",
    size: 8,
    sbe_type: "uint64",
    doc: "The stream that numbered `seq`: one (symbol, tier, seq) of one stream id is one price on every server. Prices of another stream id are numbered afresh, so a new stream id is a resync, never a resume. Nonzero from a version-3 server; 0 from a version-2 server, which sends no stream id.\n",
    since_version: 3,
};

const fn with_field<const N: usize>(head: &[FieldInfo], last: FieldInfo) -> [FieldInfo; N] {
    let mut out = [last; N];
    let mut i = 0;
    while i < head.len() {
        out[i] = head[i];
        i += 1;
    }
    out
}

const SNAPSHOT_FIELDS: [FieldInfo; PRICE_FIELDS + 1] =
    with_field(PriceBody::FIELDS, SNAPSHOT_STREAM_ID);

impl Block for PriceSnapshot {
    const BLOCK_LENGTH: u16 = PriceBody::BLOCK_LENGTH + 8;
    const BLOCK_LENGTH_MIN: u16 = PriceBody::BLOCK_LENGTH;
    const FIELDS: &'static [FieldInfo] = &SNAPSHOT_FIELDS;
    #[inline(always)]
    fn read(b: &[u8]) -> Self {
        PriceSnapshot {
            body: PriceBody::read(b),
            stream_id: <u64 as super::field::Field>::get(b, PriceBody::BLOCK_LENGTH as usize),
        }
    }
    #[inline(always)]
    fn write(&self, b: &mut [u8]) {
        self.body.write(b);
        super::field::Field::put(self.stream_id, b, PriceBody::BLOCK_LENGTH as usize);
    }
}

const _: () = assert!(PriceSnapshot::BLOCK_LENGTH == 70);

impl PriceBody {
    /// The wire body of an engine price. `wall_offset_ns` converts the
    /// engine's monotonic `engine_time_ns` to UTC; take it once at start-up
    /// with [`wall_offset_ns`](super::wall_offset_ns).
    #[inline]
    pub fn from_price(price: &Price, digits: u8, wall_offset_ns: i64) -> PriceBody {
        PriceBody {
            symbol_id: price.symbol,
            tier: price.tier,
            flags: price.flags,
            digits,
            providers: price.providers,
            seq: price.seq,
            bid: price.bid,
            ask: price.ask,
            bid_size: price.bid_size,
            ask_size: price.ask_size,
            provider_time_ns: price.provider_time_ns,
            engine_time_ns: price.engine_time_ns.saturating_add_signed(wall_offset_ns),
        }
    }
}

wire_block! {
    pub(crate) struct SnapshotRequestRoot [14] {
        /// Client-chosen id echoed in the response or Reject.
        pub request_id: u64,
        /// Remaining time budget in microseconds (0 = server default).
        pub budget_us: u32,
        /// Critical requests are shed last under overload.
        pub critical: bool,
        /// Tier to read (0xFF = the account's default tier).
        pub tier: u8,
    }
}

/// A SnapshotRequest entry is a bare symbol id.
impl Block for SymbolId {
    const BLOCK_LENGTH: u16 = 2;
    const FIELDS: &'static [FieldInfo] = &[FieldInfo {
        name: "symbol_id",
        size: 2,
        sbe_type: "uint16",
        doc: "Symbol id.",
        since_version: 0,
    }];
    #[inline(always)]
    fn read(b: &[u8]) -> Self {
        <u16 as super::field::Field>::get(b, 0)
    }
    #[inline(always)]
    fn write(&self, b: &mut [u8]) {
        super::field::Field::put(*self, b, 0)
    }
}

wire_block! {
    /// Client → server: recent ticks of one symbol.
    pub struct HistoryRequest [17] {
        /// Client-chosen id echoed in the response or Reject.
        pub request_id: u64,
        /// Remaining time budget in microseconds (0 = server default).
        pub budget_us: u32,
        /// Critical requests are shed last under overload.
        pub critical: bool,
        /// Symbol id.
        pub symbol_id: u16,
        /// Number of most recent ticks wanted (the server may return fewer).
        pub count: u16,
    }
}

wire_block! {
    pub(crate) struct HistoryResponseRoot [11] {
        /// The request this answers.
        pub request_id: u64,
        /// Symbol id.
        pub symbol_id: u16,
        /// Decimal digits of the tick prices.
        pub digits: u8,
    }
}

wire_block! {
    /// One provider tick of a HistoryResponse, oldest first.
    pub struct HistoryTick [42] {
        /// Provider id.
        pub provider: u16,
        /// Bid mantissa (i64::MIN = no bid).
        pub bid: i64,
        /// Ask mantissa (i64::MIN = no ask).
        pub ask: i64,
        /// Size at the bid.
        pub bid_size: u64,
        /// Size at the ask.
        pub ask_size: u64,
        /// Provider timestamp, UTC nanoseconds since the Unix epoch.
        pub provider_time_ns: u64,
    }
}

wire_block! {
    pub(crate) struct RejectRoot [16] {
        /// The refused request's id (0 when the frame could not be read far enough to know it).
        pub request_id: u64,
        /// Template id of the refused message (0 when unknown).
        pub ref_template_id: u16,
        /// Why (RejectReason).
        pub reason: RejectReason,
        /// Minimum wait before retrying, in milliseconds (jittered; 0 = retrying will not help or may be at once).
        pub retry_after_ms: u32,
    }
}

// ---- provider ingest ----------------------------------------------------

wire_block! {
    pub(crate) struct ProviderLogonRoot [2] {
        /// The provider's id in the server's provider table.
        pub provider_id: u16,
    }
}

wire_block! {
    /// One quote of a ProviderQuote batch.
    pub struct QuoteEntry [43] {
        /// Symbol id.
        pub symbol_id: u16,
        /// QuoteFlags bits: 0x01 indicative.
        pub flags: u8 => "QuoteFlags",
        /// Best bid mantissa at the symbol's digits (i64::MIN = no bid).
        pub bid: i64,
        /// Best ask mantissa at the symbol's digits (i64::MIN = no ask).
        pub ask: i64,
        /// Size at the bid.
        pub bid_size: u64,
        /// Size at the ask.
        pub ask_size: u64,
        /// The provider's own timestamp, UTC nanoseconds since the Unix epoch.
        pub provider_time_ns: u64,
    }
}

impl QuoteEntry {
    /// The engine tick for this quote, stamped with the receive time (monotonic ns).
    #[inline]
    pub fn to_tick(&self, provider: u16, receive_time_ns: u64, feed_seq: u64) -> Tick {
        Tick {
            bid: self.bid,
            ask: self.ask,
            bid_size: self.bid_size,
            ask_size: self.ask_size,
            provider_time_ns: self.provider_time_ns,
            receive_time_ns,
            feed_seq,
            symbol: self.symbol_id,
            provider,
            flags: u32::from(self.flags),
        }
    }
}
