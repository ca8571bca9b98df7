//! Encoders: write one whole frame (SOFH included) into a caller buffer.
//!
//! Every encoder takes `&mut [u8]`, returns the number of bytes written and
//! allocates nothing; a buffer too small for the message is an
//! [`EncodeError`], never a partial frame the caller might send. Groups are
//! encoded from any iterator of entries (`&[T]`, `Vec<T>`, `.map(..)`), so a
//! response is built straight from a table without an intermediate list.
//! The hot messages have fixed-size fast paths: [`encode_update`],
//! [`encode_snapshot`] and [`encode_price`] for either.

use std::borrow::Borrow;

use super::blocks::*;
use super::codes::{template, DisconnectReason};
use super::decode::{Disconnect, Logon, Message, ProviderLogon, Reject};
use super::field::{Block, Name16};
use super::frame::{sofh, HEADER_LEN, SOFH_LEN};
use super::{SCHEMA_ID, VERSION};
use crate::model::{Price, SymbolId};

/// Why a message could not be encoded. Nothing usable was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The caller's buffer cannot hold the whole frame.
    #[error("buffer of {capacity} bytes is too small for the message")]
    BufferTooSmall {
        /// Length of the caller's buffer in bytes.
        capacity: usize,
    },
    /// A var-data field (account, token, text) is over 255 bytes.
    #[error("var data of {len} bytes exceeds 255")]
    VarDataTooLong {
        /// Length of the refused field in bytes.
        len: usize,
    },
    /// A repeating group has more than 65535 entries.
    #[error("group has more than 65535 entries")]
    GroupTooLarge,
    /// A symbol or tier name is over 16 bytes or holds a NUL byte.
    #[error("name of {len} bytes is longer than 16 bytes or contains NUL")]
    InvalidName {
        /// Length of the refused name in bytes.
        len: usize,
    },
    /// The frame would be longer than the 32-bit SOFH length can state.
    #[error("frame of {len} bytes does not fit the 32-bit SOFH length")]
    FrameTooLarge {
        /// Length the frame would have, in bytes.
        len: usize,
    },
}

/// Which price message to send: a snapshot (after subscribe or as a
/// resync) or an incremental update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PriceKind {
    /// PriceSnapshot: the full price, after subscribe or as a resync.
    Snapshot,
    /// PriceUpdate: a streamed change.
    Update,
}

impl PriceKind {
    /// The template id this kind is sent with.
    pub const fn template_id(self) -> u16 {
        match self {
            PriceKind::Snapshot => template::PRICE_SNAPSHOT,
            PriceKind::Update => template::PRICE_UPDATE,
        }
    }
}

/// Length of a PriceUpdate frame.
pub const PRICE_FRAME_LEN: usize = HEADER_LEN + PriceBody::BLOCK_LENGTH as usize;
const _: () = assert!(PRICE_FRAME_LEN == 76);
/// Length of a PriceSnapshot frame (the price body and the stream id).
pub const SNAPSHOT_FRAME_LEN: usize = HEADER_LEN + PriceSnapshot::BLOCK_LENGTH as usize;
const _: () = assert!(SNAPSHOT_FRAME_LEN == 84);
/// A slot that holds either price frame: the longer, a PriceSnapshot.
pub const PRICE_SLOT_LEN: usize = SNAPSHOT_FRAME_LEN;

/// SOFH and SBE header for a frame, built at compile time for fixed frames.
const fn frame_header(frame_len: u32, template_id: u16, block_length: u16) -> [u8; HEADER_LEN] {
    let s = sofh(frame_len);
    let b = block_length.to_le_bytes();
    let t = template_id.to_le_bytes();
    let i = SCHEMA_ID.to_le_bytes();
    let v = VERSION.to_le_bytes();
    [
        s[0], s[1], s[2], s[3], s[4], s[5], b[0], b[1], t[0], t[1], i[0], i[1], v[0], v[1],
    ]
}

const SNAPSHOT_HEADER: [u8; HEADER_LEN] = frame_header(
    SNAPSHOT_FRAME_LEN as u32,
    template::PRICE_SNAPSHOT,
    PriceSnapshot::BLOCK_LENGTH,
);
const UPDATE_HEADER: [u8; HEADER_LEN] = frame_header(
    PRICE_FRAME_LEN as u32,
    template::PRICE_UPDATE,
    PriceBody::BLOCK_LENGTH,
);

/// Fast path for the hot message: a PriceUpdate into a fixed 76-byte
/// slot. Infallible; returns [`PRICE_FRAME_LEN`].
#[inline]
pub fn encode_update(out: &mut [u8; PRICE_FRAME_LEN], body: &PriceBody) -> usize {
    let (head, rest) = out.split_at_mut(HEADER_LEN);
    head.copy_from_slice(&UPDATE_HEADER);
    body.write(rest);
    PRICE_FRAME_LEN
}

/// A PriceSnapshot of `body` numbered by stream `stream_id` into a fixed
/// 84-byte slot. Infallible; returns [`SNAPSHOT_FRAME_LEN`].
#[inline]
pub fn encode_snapshot(
    out: &mut [u8; SNAPSHOT_FRAME_LEN],
    body: &PriceBody,
    stream_id: u64,
) -> usize {
    let (head, rest) = out.split_at_mut(HEADER_LEN);
    head.copy_from_slice(&SNAPSHOT_HEADER);
    PriceSnapshot {
        body: *body,
        stream_id,
    }
    .write(rest);
    SNAPSHOT_FRAME_LEN
}

/// The PriceSnapshot of an encoded PriceUpdate `update` numbered by
/// `stream_id`, written into `out` (a copy of the body; nothing is
/// decoded): how a gateway turns the update it encoded once into the
/// resync point one subscriber needs. Returns [`SNAPSHOT_FRAME_LEN`], or
/// 0 if `update` is shorter than a PriceUpdate frame or `out` than a
/// PriceSnapshot frame.
#[inline]
pub fn update_to_snapshot(update: &[u8], stream_id: u64, out: &mut [u8]) -> usize {
    let (Some(src), Some(dst)) = (
        update.first_chunk::<PRICE_FRAME_LEN>(),
        out.first_chunk_mut::<SNAPSHOT_FRAME_LEN>(),
    ) else {
        return 0;
    };
    let (head, rest) = dst.split_at_mut(HEADER_LEN);
    head.copy_from_slice(&SNAPSHOT_HEADER);
    let (body, stream) = rest.split_at_mut(PriceBody::BLOCK_LENGTH as usize);
    body.copy_from_slice(&src[HEADER_LEN..]);
    stream.copy_from_slice(&stream_id.to_le_bytes());
    SNAPSHOT_FRAME_LEN
}

/// Either price message into a slot that holds both: a PriceSnapshot
/// (with `stream_id`, [`SNAPSHOT_FRAME_LEN`] bytes) or a PriceUpdate
/// (which carries no stream id: it follows a snapshot of its stream;
/// [`PRICE_FRAME_LEN`] bytes). Infallible; returns the frame's length.
/// Get the slot from a slice with `buf.first_chunk_mut::<PRICE_SLOT_LEN>()`.
#[inline]
pub fn encode_price(
    out: &mut [u8; PRICE_SLOT_LEN],
    kind: PriceKind,
    body: &PriceBody,
    stream_id: u64,
) -> usize {
    match kind {
        PriceKind::Snapshot => encode_snapshot(out, body, stream_id),
        PriceKind::Update => match out.first_chunk_mut::<PRICE_FRAME_LEN>() {
            Some(slot) => encode_update(slot, body),
            None => 0,
        },
    }
}

/// [`encode_price`] into any buffer long enough for the frame.
#[inline]
pub fn try_encode_price(
    buf: &mut [u8],
    kind: PriceKind,
    body: &PriceBody,
    stream_id: u64,
) -> Result<usize, EncodeError> {
    let capacity = buf.len();
    let small = EncodeError::BufferTooSmall { capacity };
    match kind {
        PriceKind::Snapshot => {
            let out = buf.first_chunk_mut::<SNAPSHOT_FRAME_LEN>().ok_or(small)?;
            Ok(encode_snapshot(out, body, stream_id))
        }
        PriceKind::Update => {
            let out = buf.first_chunk_mut::<PRICE_FRAME_LEN>().ok_or(small)?;
            Ok(encode_update(out, body))
        }
    }
}

/// Encodes an engine [`Price`] (see [`PriceBody::from_price`]); a
/// snapshot carries the price's own `stream_id`.
#[inline]
pub fn encode_model_price(
    out: &mut [u8; PRICE_SLOT_LEN],
    kind: PriceKind,
    price: &Price,
    digits: u8,
    wall_offset_ns: i64,
) -> usize {
    let body = PriceBody::from_price(price, digits, wall_offset_ns);
    encode_price(out, kind, &body, price.stream_id)
}

/// Offset that turns a monotonic timestamp into UTC: `utc = mono + offset`.
/// Take both readings together once at start-up (`clock::wall_ns()`,
/// `clock::monotonic_ns()`), so wall-clock steps never reorder prices.
pub fn wall_offset_ns(wall_ns: u64, monotonic_ns: u64) -> i64 {
    (i128::from(wall_ns) - i128::from(monotonic_ns)).clamp(i64::MIN.into(), i64::MAX.into()) as i64
}

/// Writes one frame part by part; [`Writer::finish`] patches the SOFH length.
struct Writer<'b> {
    buf: &'b mut [u8],
    pos: usize,
}

impl<'b> Writer<'b> {
    fn begin(buf: &'b mut [u8], template_id: u16, block_length: u16) -> Result<Self, EncodeError> {
        let mut w = Writer { buf, pos: 0 };
        let head = w.reserve(HEADER_LEN)?;
        // The length is patched by `finish`; 0 until then.
        head.copy_from_slice(&frame_header(0, template_id, block_length));
        Ok(w)
    }

    fn reserve(&mut self, n: usize) -> Result<&mut [u8], EncodeError> {
        let capacity = self.buf.len();
        let end = self.pos.checked_add(n).filter(|&end| end <= capacity);
        let Some(end) = end else {
            return Err(EncodeError::BufferTooSmall { capacity });
        };
        let dst = self
            .buf
            .get_mut(self.pos..end)
            .ok_or(EncodeError::BufferTooSmall { capacity })?;
        self.pos = end;
        Ok(dst)
    }

    fn block<B: Block>(&mut self, block: &B) -> Result<(), EncodeError> {
        block.write(self.reserve(B::BLOCK_LENGTH as usize)?);
        Ok(())
    }

    fn group<T, I>(&mut self, entries: I) -> Result<(), EncodeError>
    where
        T: Block,
        I: IntoIterator,
        I::Item: Borrow<T>,
    {
        self.try_group(entries.into_iter().map(|e| Ok(*e.borrow())))
    }

    /// A group whose entries are built as they are written and may fail.
    fn try_group<T: Block>(
        &mut self,
        entries: impl Iterator<Item = Result<T, EncodeError>>,
    ) -> Result<(), EncodeError> {
        let header_at = self.pos;
        self.reserve(GroupHeader::BLOCK_LENGTH as usize)?;
        let mut count: u16 = 0;
        for entry in entries {
            count = count.checked_add(1).ok_or(EncodeError::GroupTooLarge)?;
            self.block(&entry?)?;
        }
        let header = GroupHeader {
            block_length: T::BLOCK_LENGTH,
            num_in_group: count,
        };
        if let Some(dst) = self.buf.get_mut(header_at..) {
            header.write(dst);
        }
        Ok(())
    }

    fn var_data(&mut self, data: &[u8]) -> Result<(), EncodeError> {
        let len = u8::try_from(data.len())
            .map_err(|_| EncodeError::VarDataTooLong { len: data.len() })?;
        let dst = self.reserve(1 + data.len())?;
        if let Some((first, rest)) = dst.split_first_mut() {
            *first = len;
            rest.copy_from_slice(data);
        }
        Ok(())
    }

    fn finish(self) -> Result<usize, EncodeError> {
        let len =
            u32::try_from(self.pos).map_err(|_| EncodeError::FrameTooLarge { len: self.pos })?;
        if let Some(dst) = self.buf.get_mut(..SOFH_LEN) {
            dst.copy_from_slice(&sofh(len));
        }
        Ok(self.pos)
    }
}

/// A frame of one root block and nothing else.
fn encode_block<B: Block>(
    buf: &mut [u8],
    template_id: u16,
    block: &B,
) -> Result<usize, EncodeError> {
    let mut w = Writer::begin(buf, template_id, B::BLOCK_LENGTH)?;
    w.block(block)?;
    w.finish()
}

// ---- session ------------------------------------------------------------

/// Logon: account and token var data at most 255 bytes each.
pub fn encode_logon(buf: &mut [u8], m: &Logon<'_>) -> Result<usize, EncodeError> {
    let root = LogonRoot {
        heartbeat_interval_ms: m.heartbeat_interval_ms,
    };
    let mut w = Writer::begin(buf, template::LOGON, LogonRoot::BLOCK_LENGTH)?;
    w.block(&root)?;
    w.var_data(m.account)?;
    w.var_data(m.token)?;
    w.finish()
}

/// LogonAccepted: a root block only.
pub fn encode_logon_accepted(buf: &mut [u8], m: &LogonAccepted) -> Result<usize, EncodeError> {
    encode_block(buf, template::LOGON_ACCEPTED, m)
}

/// LogonRejected: a root block only.
pub fn encode_logon_rejected(buf: &mut [u8], m: &LogonRejected) -> Result<usize, EncodeError> {
    encode_block(buf, template::LOGON_REJECTED, m)
}

/// Heartbeat: a header and no body (12 bytes).
pub fn encode_heartbeat(buf: &mut [u8]) -> Result<usize, EncodeError> {
    encode_block(buf, template::HEARTBEAT, &EmptyRoot {})
}

/// Logout: a header and no body.
pub fn encode_logout(buf: &mut [u8]) -> Result<usize, EncodeError> {
    encode_block(buf, template::LOGOUT, &EmptyRoot {})
}

/// Disconnect with its reason, retry floor and text (at most 255 bytes).
pub fn encode_disconnect(buf: &mut [u8], m: &Disconnect<'_>) -> Result<usize, EncodeError> {
    let root = DisconnectRoot {
        reason: m.reason,
        retry_after_ms: m.retry_after_ms,
    };
    let mut w = Writer::begin(buf, template::DISCONNECT, DisconnectRoot::BLOCK_LENGTH)?;
    w.block(&root)?;
    w.var_data(m.text)?;
    w.finish()
}

/// Shorthand for [`encode_disconnect`] with a text.
pub fn encode_disconnect_reason(
    buf: &mut [u8],
    reason: DisconnectReason,
    retry_after_ms: u32,
    text: &str,
) -> Result<usize, EncodeError> {
    let m = Disconnect {
        reason,
        retry_after_ms,
        text: text.as_bytes(),
    };
    encode_disconnect(buf, &m)
}

// ---- data ---------------------------------------------------------------

/// SymbolListRequest: a root block only.
pub fn encode_symbol_list_request(
    buf: &mut [u8],
    m: &SymbolListRequest,
) -> Result<usize, EncodeError> {
    encode_block(buf, template::SYMBOL_LIST_REQUEST, m)
}

/// SymbolDirectory answering `request_id`: the `symbols` then the `tiers`
/// groups, each at most 65535 entries.
pub fn encode_symbol_directory<S, T>(
    buf: &mut [u8],
    request_id: u64,
    symbols: S,
    tiers: T,
) -> Result<usize, EncodeError>
where
    S: IntoIterator,
    S::Item: Borrow<SymbolInfo>,
    T: IntoIterator,
    T::Item: Borrow<TierInfo>,
{
    let mut w = Writer::begin(buf, template::SYMBOL_DIRECTORY, RequestIdRoot::BLOCK_LENGTH)?;
    w.block(&RequestIdRoot { request_id })?;
    w.group::<SymbolInfo, _>(symbols)?;
    w.group::<TierInfo, _>(tiers)?;
    w.finish()
}

fn encode_subscription<E>(
    buf: &mut [u8],
    template_id: u16,
    request_id: u64,
    tier: u8,
    entries: E,
) -> Result<usize, EncodeError>
where
    E: IntoIterator,
    E::Item: Borrow<SymbolRef>,
{
    let mut w = Writer::begin(buf, template_id, SubscribeRoot::BLOCK_LENGTH)?;
    w.block(&SubscribeRoot { request_id, tier })?;
    w.group::<SymbolRef, _>(entries)?;
    w.finish()
}

/// Subscribe to symbols at `tier` ([`TIER_ACCOUNT_DEFAULT`](super::TIER_ACCOUNT_DEFAULT)
/// for the account's default), by id or by name ([`SymbolRef`]).
pub fn encode_subscribe<E>(
    buf: &mut [u8],
    request_id: u64,
    tier: u8,
    entries: E,
) -> Result<usize, EncodeError>
where
    E: IntoIterator,
    E::Item: Borrow<SymbolRef>,
{
    encode_subscription(buf, template::SUBSCRIBE, request_id, tier, entries)
}

/// Unsubscribe from symbols at `tier`; the same layout as [`encode_subscribe`].
pub fn encode_unsubscribe<E>(
    buf: &mut [u8],
    request_id: u64,
    tier: u8,
    entries: E,
) -> Result<usize, EncodeError>
where
    E: IntoIterator,
    E::Item: Borrow<SymbolRef>,
{
    encode_subscription(buf, template::UNSUBSCRIBE, request_id, tier, entries)
}

/// Subscribe by symbol names: `encode_subscribe_names(buf, 1, TIER_ACCOUNT_DEFAULT, ["EURUSD", "XAUUSD"])`.
pub fn encode_subscribe_names<N>(
    buf: &mut [u8],
    request_id: u64,
    tier: u8,
    names: N,
) -> Result<usize, EncodeError>
where
    N: IntoIterator,
    N::Item: AsRef<str>,
{
    let mut w = Writer::begin(buf, template::SUBSCRIBE, SubscribeRoot::BLOCK_LENGTH)?;
    w.block(&SubscribeRoot { request_id, tier })?;
    w.try_group(names.into_iter().map(|n| SymbolRef::by_name(n.as_ref())))?;
    w.finish()
}

impl SymbolRef {
    /// Refers to a symbol by id.
    pub fn by_id(symbol_id: SymbolId) -> SymbolRef {
        SymbolRef {
            symbol_id,
            name: Name16::default(),
        }
    }

    /// Refers to a symbol by name (`symbol_id` = 0xFFFF).
    pub fn by_name(name: &str) -> Result<SymbolRef, EncodeError> {
        Ok(SymbolRef {
            symbol_id: super::SYMBOL_BY_NAME,
            name: Name16::new(name)?,
        })
    }
}

/// SubscribeResponse answering `request_id`: one result per requested
/// entry, in request order.
pub fn encode_subscribe_response<R>(
    buf: &mut [u8],
    request_id: u64,
    results: R,
) -> Result<usize, EncodeError>
where
    R: IntoIterator,
    R::Item: Borrow<SubscribeResult>,
{
    let mut w = Writer::begin(
        buf,
        template::SUBSCRIBE_RESPONSE,
        RequestIdRoot::BLOCK_LENGTH,
    )?;
    w.block(&RequestIdRoot { request_id })?;
    w.group::<SubscribeResult, _>(results)?;
    w.finish()
}

/// Current prices of `symbols` at `tier`; `budget_us` is the time the
/// client will still wait, relative to now (0 = server default).
pub fn encode_snapshot_request<S>(
    buf: &mut [u8],
    request_id: u64,
    budget_us: u32,
    critical: bool,
    tier: u8,
    symbols: S,
) -> Result<usize, EncodeError>
where
    S: IntoIterator,
    S::Item: Borrow<SymbolId>,
{
    let root = SnapshotRequestRoot {
        request_id,
        budget_us,
        critical,
        tier,
    };
    let mut w = Writer::begin(
        buf,
        template::SNAPSHOT_REQUEST,
        SnapshotRequestRoot::BLOCK_LENGTH,
    )?;
    w.block(&root)?;
    w.group::<SymbolId, _>(symbols)?;
    w.finish()
}

/// SnapshotResponse answering `request_id`: one [`PriceBody`] per entry of
/// `prices`.
pub fn encode_snapshot_response<P>(
    buf: &mut [u8],
    request_id: u64,
    prices: P,
) -> Result<usize, EncodeError>
where
    P: IntoIterator,
    P::Item: Borrow<PriceBody>,
{
    let mut w = Writer::begin(
        buf,
        template::SNAPSHOT_RESPONSE,
        RequestIdRoot::BLOCK_LENGTH,
    )?;
    w.block(&RequestIdRoot { request_id })?;
    w.group::<PriceBody, _>(prices)?;
    w.finish()
}

/// HistoryRequest: a root block only.
pub fn encode_history_request(buf: &mut [u8], m: &HistoryRequest) -> Result<usize, EncodeError> {
    encode_block(buf, template::HISTORY_REQUEST, m)
}

/// HistoryResponse answering `request_id`: `ticks` (oldest first) of
/// `symbol_id`, whose prices have `digits` decimal digits.
pub fn encode_history_response<T>(
    buf: &mut [u8],
    request_id: u64,
    symbol_id: SymbolId,
    digits: u8,
    ticks: T,
) -> Result<usize, EncodeError>
where
    T: IntoIterator,
    T::Item: Borrow<HistoryTick>,
{
    let root = HistoryResponseRoot {
        request_id,
        symbol_id,
        digits,
    };
    let mut w = Writer::begin(
        buf,
        template::HISTORY_RESPONSE,
        HistoryResponseRoot::BLOCK_LENGTH,
    )?;
    w.block(&root)?;
    w.group::<HistoryTick, _>(ticks)?;
    w.finish()
}

/// Reject with its reason, retry floor and text (at most 255 bytes).
pub fn encode_reject(buf: &mut [u8], m: &Reject<'_>) -> Result<usize, EncodeError> {
    let root = RejectRoot {
        request_id: m.request_id,
        ref_template_id: m.ref_template_id,
        reason: m.reason,
        retry_after_ms: m.retry_after_ms,
    };
    let mut w = Writer::begin(buf, template::REJECT, RejectRoot::BLOCK_LENGTH)?;
    w.block(&root)?;
    w.var_data(m.text)?;
    w.finish()
}

// ---- provider ingest ----------------------------------------------------

/// ProviderLogon: the provider id and its token (at most 255 bytes).
pub fn encode_provider_logon(buf: &mut [u8], m: &ProviderLogon<'_>) -> Result<usize, EncodeError> {
    let mut w = Writer::begin(
        buf,
        template::PROVIDER_LOGON,
        ProviderLogonRoot::BLOCK_LENGTH,
    )?;
    w.block(&ProviderLogonRoot {
        provider_id: m.provider_id,
    })?;
    w.var_data(m.token)?;
    w.finish()
}

/// ProviderQuote: one [`QuoteEntry`] per quoted symbol.
pub fn encode_provider_quote<Q>(buf: &mut [u8], quotes: Q) -> Result<usize, EncodeError>
where
    Q: IntoIterator,
    Q::Item: Borrow<QuoteEntry>,
{
    let mut w = Writer::begin(buf, template::PROVIDER_QUOTE, EmptyRoot::BLOCK_LENGTH)?;
    w.group::<QuoteEntry, _>(quotes)?;
    w.finish()
}

impl Message<'_> {
    /// Re-encodes a message (a decoded one, or one built from parts).
    /// Output equals the input frame when that frame was written by this
    /// schema version.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        match self {
            Message::Logon(m) => encode_logon(buf, m),
            Message::LogonAccepted(m) => encode_logon_accepted(buf, m),
            Message::LogonRejected(m) => encode_logon_rejected(buf, m),
            Message::Heartbeat => encode_heartbeat(buf),
            Message::Logout => encode_logout(buf),
            Message::Disconnect(m) => encode_disconnect(buf, m),
            Message::SymbolListRequest(m) => encode_symbol_list_request(buf, m),
            Message::SymbolDirectory(m) => {
                encode_symbol_directory(buf, m.request_id, m.symbols.clone(), m.tiers.clone())
            }
            Message::Subscribe(m) => encode_subscribe(buf, m.request_id, m.tier, m.entries.clone()),
            Message::Unsubscribe(m) => {
                encode_unsubscribe(buf, m.request_id, m.tier, m.entries.clone())
            }
            Message::SubscribeResponse(m) => {
                encode_subscribe_response(buf, m.request_id, m.results.clone())
            }
            Message::PriceSnapshot(s) => {
                try_encode_price(buf, PriceKind::Snapshot, &s.body, s.stream_id)
            }
            Message::PriceUpdate(b) => try_encode_price(buf, PriceKind::Update, b, 0),
            Message::SnapshotRequest(m) => encode_snapshot_request(
                buf,
                m.request_id,
                m.budget_us,
                m.critical,
                m.tier,
                m.symbols.clone(),
            ),
            Message::SnapshotResponse(m) => {
                encode_snapshot_response(buf, m.request_id, m.prices.clone())
            }
            Message::HistoryRequest(m) => encode_history_request(buf, m),
            Message::HistoryResponse(m) => {
                encode_history_response(buf, m.request_id, m.symbol_id, m.digits, m.ticks.clone())
            }
            Message::Reject(m) => encode_reject(buf, m),
            Message::ProviderLogon(m) => encode_provider_logon(buf, m),
            Message::ProviderQuote(m) => encode_provider_quote(buf, m.quotes.clone()),
        }
    }
}
