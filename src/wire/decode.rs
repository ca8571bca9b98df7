//! Zero-copy decoding of one whole frame into a [`Message`] view.
//!
//! [`decode()`] borrows the frame: var data come back as `&[u8]` into it and
//! repeating groups as [`Group`] iterators that read entries on demand. Only
//! fixed-size `Copy` values are produced; nothing is allocated. Every length
//! (root block, group headers, group bodies, var data) is checked against
//! the frame before the message is returned, so reading a returned view can
//! never run past the frame, and no input makes `decode` panic.

use std::marker::PhantomData;

use super::blocks::*;
use super::codes::{template, DisconnectReason, RejectReason};
use super::field::Block;
use super::frame::{FrameError, ENCODING_TYPE_SBE_LE, FRAME_LEN_MIN, HEADER_LEN, SOFH_LEN};
use super::{SCHEMA_ID, VERSION_MIN};
use crate::model::SymbolId;

/// Why a frame could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The SOFH or SBE message header is unusable (see [`FrameError`]).
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The SOFH length disagrees with the length of the slice passed in.
    #[error("SOFH says {declared} bytes but the frame has {actual}")]
    LengthMismatch {
        /// Frame length in bytes, as the SOFH states it.
        declared: u32,
        /// Length in bytes of the slice given to [`decode()`].
        actual: usize,
    },
    /// The header names a schema id other than [`SCHEMA_ID`].
    #[error("unknown schema id {0:#06x}")]
    UnknownSchema(u16),
    /// The schema version is below [`VERSION_MIN`].
    #[error("schema version {0} is not supported")]
    UnsupportedVersion(u16),
    /// No message of this schema has this template id.
    #[error("unknown template id {0}")]
    UnknownTemplate(u16),
    /// The root block is shorter than this template's known fields.
    #[error("template {template_id}: root block of {block_length} bytes, needs {required}")]
    ShortBlock {
        /// Template id of the message.
        template_id: u16,
        /// Root block length in bytes, as the header states it.
        block_length: u16,
        /// Bytes this build needs for the root block's known fields.
        required: u16,
    },
    /// A group's entries are shorter than the entry type's known fields.
    #[error("template {template_id}: group entries of {block_length} bytes, need {required}")]
    ShortGroupBlock {
        /// Template id of the message.
        template_id: u16,
        /// Entry length in bytes, as the group header states it.
        block_length: u16,
        /// Bytes this build needs for one entry's known fields.
        required: u16,
    },
    /// A part of the message (named) runs past the end of the frame.
    #[error("template {template_id}: {part} runs past the end of the frame")]
    Truncated {
        /// Template id of the message.
        template_id: u16,
        /// Which part ran past: the root block, a group or a var-data field.
        part: &'static str,
    },
}

impl DecodeError {
    /// The reason code to put in the Reject sent to the peer.
    pub fn reason(&self) -> RejectReason {
        match self {
            DecodeError::Frame(e) => e.reason(),
            DecodeError::UnknownSchema(_) => RejectReason::UNKNOWN_SCHEMA,
            DecodeError::UnsupportedVersion(_) => RejectReason::UNSUPPORTED_VERSION,
            DecodeError::UnknownTemplate(_) => RejectReason::UNKNOWN_TEMPLATE,
            DecodeError::LengthMismatch { .. }
            | DecodeError::ShortBlock { .. }
            | DecodeError::ShortGroupBlock { .. }
            | DecodeError::Truncated { .. } => RejectReason::MALFORMED,
        }
    }

    /// The template id of the refused message, when it was read (for
    /// `Reject.refTemplateId`).
    pub fn template_id(&self) -> u16 {
        match *self {
            DecodeError::UnknownTemplate(t) => t,
            DecodeError::ShortBlock { template_id, .. }
            | DecodeError::ShortGroupBlock { template_id, .. }
            | DecodeError::Truncated { template_id, .. } => template_id,
            _ => 0,
        }
    }
}

/// A repeating group: an iterator over its entries, read from the frame on
/// demand. Entries longer than this build's block (from a newer schema
/// version) are read up to the known fields and the rest skipped.
#[derive(Clone)]
pub struct Group<'a, T> {
    data: &'a [u8],
    entry_len: usize,
    remaining: u16,
    _entry: PhantomData<T>,
}

impl<'a, T: Block> Group<'a, T> {
    /// The raw bytes of all entries.
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }
}

impl<T: Block> Iterator for Group<'_, T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        if self.remaining == 0 {
            return None;
        }
        let (head, tail) = self.data.split_at_checked(self.entry_len)?;
        self.data = tail;
        self.remaining -= 1;
        Some(T::read(head))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining as usize, Some(self.remaining as usize))
    }
}

impl<T: Block> ExactSizeIterator for Group<'_, T> {}

impl<T: Block + std::fmt::Debug> std::fmt::Debug for Group<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.clone()).finish()
    }
}

impl<T: Block + PartialEq> PartialEq for Group<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        self.clone().eq(other.clone())
    }
}

/// Client → server: open a subscriber session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logon<'a> {
    /// Heartbeat interval the client asks for, in ms (0 = server default).
    pub heartbeat_interval_ms: u32,
    /// Account name (at most 255 bytes).
    pub account: &'a [u8],
    /// Secret token (at most 255 bytes).
    pub token: &'a [u8],
}

/// Server → client: the session ends; the server closes after sending it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disconnect<'a> {
    /// Why the session ends.
    pub reason: DisconnectReason,
    /// Minimum wait before reconnecting, in ms (jittered).
    pub retry_after_ms: u32,
    /// Human-readable detail (at most 255 bytes).
    pub text: &'a [u8],
}

/// Server → client: symbols and tiers the account may use.
#[derive(Debug, Clone, PartialEq)]
pub struct SymbolDirectory<'a> {
    /// The request this answers.
    pub request_id: u64,
    /// Symbols the account may subscribe to.
    pub symbols: Group<'a, SymbolInfo>,
    /// Tiers the account may ask for.
    pub tiers: Group<'a, TierInfo>,
}

/// Client → server: Subscribe or Unsubscribe (same layout).
#[derive(Debug, Clone, PartialEq)]
pub struct Subscribe<'a> {
    /// Client-chosen id echoed in the SubscribeResponse or Reject.
    pub request_id: u64,
    /// Tier id, or [`TIER_ACCOUNT_DEFAULT`](super::TIER_ACCOUNT_DEFAULT).
    pub tier: u8,
    /// Symbols to (un)subscribe, each by id or by name.
    pub entries: Group<'a, SymbolRef>,
}

/// Server → client: per-symbol outcome of a Subscribe/Unsubscribe.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscribeResponse<'a> {
    /// The request this answers.
    pub request_id: u64,
    /// One outcome per requested entry, in request order.
    pub results: Group<'a, SubscribeResult>,
}

/// Client → server: current prices of some symbols at one tier.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotRequest<'a> {
    /// Client-chosen id echoed in the response or Reject.
    pub request_id: u64,
    /// Remaining budget in µs, relative to arrival (0 = server default).
    pub budget_us: u32,
    /// Critical requests are shed last under overload.
    pub critical: bool,
    /// Tier id, or [`TIER_ACCOUNT_DEFAULT`](super::TIER_ACCOUNT_DEFAULT).
    pub tier: u8,
    /// Symbol ids wanted (unknown and not-entitled ids are left out of the answer).
    pub symbols: Group<'a, SymbolId>,
}

/// Server → client: answer to a SnapshotRequest.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotResponse<'a> {
    /// The request this answers.
    pub request_id: u64,
    /// One price per requested symbol that is known, entitled and priced.
    pub prices: Group<'a, PriceBody>,
}

/// Server → client: answer to a HistoryRequest.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryResponse<'a> {
    /// The request this answers.
    pub request_id: u64,
    /// Symbol id the ticks belong to.
    pub symbol_id: u16,
    /// Decimal digits of the tick prices: mantissa × 10^-digits.
    pub digits: u8,
    /// The most recent ticks, oldest first (at most 190).
    pub ticks: Group<'a, HistoryTick>,
}

/// Server → client (or provider): a request or frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reject<'a> {
    /// Id of the refused request, when it could be read (else 0).
    pub request_id: u64,
    /// Template id of the refused message, when it could be read (else 0).
    pub ref_template_id: u16,
    /// Why it was refused.
    pub reason: RejectReason,
    /// Minimum wait before retrying, in ms (jittered; 0 = none given).
    pub retry_after_ms: u32,
    /// Human-readable detail (at most 255 bytes).
    pub text: &'a [u8],
}

/// Provider → server: open a provider ingest session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderLogon<'a> {
    /// The provider's configured id.
    pub provider_id: u16,
    /// Secret token (at most 255 bytes).
    pub token: &'a [u8],
}

/// Provider → server: a batch of quotes.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderQuote<'a> {
    /// The quotes, one entry per symbol quoted.
    pub quotes: Group<'a, QuoteEntry>,
}

/// One decoded message, borrowing the frame it came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Message<'a> {
    /// Client → server: open a subscriber session.
    Logon(Logon<'a>),
    /// Server → client: the session is open.
    LogonAccepted(LogonAccepted),
    /// Server → client: the logon was refused.
    LogonRejected(LogonRejected),
    /// Either way: liveness.
    Heartbeat,
    /// Client → server: end the session.
    Logout,
    /// Server → client: the session ends.
    Disconnect(Disconnect<'a>),
    /// Client → server: ask for the symbol directory.
    SymbolListRequest(SymbolListRequest),
    /// Server → client: the symbol directory.
    SymbolDirectory(SymbolDirectory<'a>),
    /// Client → server: start streaming symbols.
    Subscribe(Subscribe<'a>),
    /// Client → server: stop streaming symbols (Subscribe's layout).
    Unsubscribe(Subscribe<'a>),
    /// Server → client: outcome of a (un)subscribe.
    SubscribeResponse(SubscribeResponse<'a>),
    /// Server → client: a symbol's full price on subscribe or resync, and
    /// the stream that numbered it.
    PriceSnapshot(PriceSnapshot),
    /// Server → client: a streamed price change.
    PriceUpdate(PriceBody),
    /// Client → server: current prices, once.
    SnapshotRequest(SnapshotRequest<'a>),
    /// Server → client: answer to a SnapshotRequest.
    SnapshotResponse(SnapshotResponse<'a>),
    /// Client → server: recent ticks of one symbol.
    HistoryRequest(HistoryRequest),
    /// Server → client: answer to a HistoryRequest.
    HistoryResponse(HistoryResponse<'a>),
    /// Server → peer: a request or frame was refused.
    Reject(Reject<'a>),
    /// Provider → server: open an ingest session.
    ProviderLogon(ProviderLogon<'a>),
    /// Provider → server: a batch of quotes.
    ProviderQuote(ProviderQuote<'a>),
}

impl Message<'_> {
    /// The message's template id.
    pub fn template_id(&self) -> u16 {
        use template as t;
        match self {
            Message::Logon(_) => t::LOGON,
            Message::LogonAccepted(_) => t::LOGON_ACCEPTED,
            Message::LogonRejected(_) => t::LOGON_REJECTED,
            Message::Heartbeat => t::HEARTBEAT,
            Message::Logout => t::LOGOUT,
            Message::Disconnect(_) => t::DISCONNECT,
            Message::SymbolListRequest(_) => t::SYMBOL_LIST_REQUEST,
            Message::SymbolDirectory(_) => t::SYMBOL_DIRECTORY,
            Message::Subscribe(_) => t::SUBSCRIBE,
            Message::Unsubscribe(_) => t::UNSUBSCRIBE,
            Message::SubscribeResponse(_) => t::SUBSCRIBE_RESPONSE,
            Message::PriceSnapshot(_) => t::PRICE_SNAPSHOT,
            Message::PriceUpdate(_) => t::PRICE_UPDATE,
            Message::SnapshotRequest(_) => t::SNAPSHOT_REQUEST,
            Message::SnapshotResponse(_) => t::SNAPSHOT_RESPONSE,
            Message::HistoryRequest(_) => t::HISTORY_REQUEST,
            Message::HistoryResponse(_) => t::HISTORY_RESPONSE,
            Message::Reject(_) => t::REJECT,
            Message::ProviderLogon(_) => t::PROVIDER_LOGON,
            Message::ProviderQuote(_) => t::PROVIDER_QUOTE,
        }
    }

    /// The price of a PriceSnapshot or a PriceUpdate.
    pub fn price_body(&self) -> Option<&PriceBody> {
        match self {
            Message::PriceSnapshot(s) => Some(&s.body),
            Message::PriceUpdate(b) => Some(b),
            _ => None,
        }
    }

    /// The request id, for messages that carry one.
    pub fn request_id(&self) -> Option<u64> {
        match self {
            Message::SymbolListRequest(m) => Some(m.request_id),
            Message::SymbolDirectory(m) => Some(m.request_id),
            Message::Subscribe(m) | Message::Unsubscribe(m) => Some(m.request_id),
            Message::SubscribeResponse(m) => Some(m.request_id),
            Message::SnapshotRequest(m) => Some(m.request_id),
            Message::SnapshotResponse(m) => Some(m.request_id),
            Message::HistoryRequest(m) => Some(m.request_id),
            Message::HistoryResponse(m) => Some(m.request_id),
            Message::Reject(m) => Some(m.request_id),
            _ => None,
        }
    }
}

/// Reads the SOFH and SBE header of a whole frame and checks framing,
/// schema and version. Returns the header and the bytes after it.
#[inline]
pub fn decode_header(frame: &[u8]) -> Result<(MessageHeader, &[u8]), DecodeError> {
    let Some((head, body)) = frame.split_first_chunk::<HEADER_LEN>() else {
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        return Err(FrameError::TooSmall { len }.into());
    };
    let declared = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let encoding_type = u16::from_be_bytes([head[4], head[5]]);
    if encoding_type != ENCODING_TYPE_SBE_LE {
        return Err(FrameError::BadEncodingType(encoding_type).into());
    }
    if (declared as usize) < FRAME_LEN_MIN {
        return Err(FrameError::TooSmall { len: declared }.into());
    }
    if declared as usize != frame.len() {
        return Err(DecodeError::LengthMismatch {
            declared,
            actual: frame.len(),
        });
    }
    let header = MessageHeader::read(head.get(SOFH_LEN..).unwrap_or(&[]));
    if header.schema_id != SCHEMA_ID {
        return Err(DecodeError::UnknownSchema(header.schema_id));
    }
    // Versions above ours are accepted: the schema only evolves by
    // appending (longer blocks, new groups and var data at the end), which
    // the block lengths let us skip. A breaking change gets a new schema id.
    if header.version < VERSION_MIN {
        return Err(DecodeError::UnsupportedVersion(header.version));
    }
    Ok((header, body))
}

/// Decodes one whole frame (exactly the `n` bytes [`split`](super::split)
/// reported, SOFH included). Bytes after the last field this build knows
/// (groups or var data appended by a newer schema version) are ignored.
#[inline]
pub fn decode(frame: &[u8]) -> Result<Message<'_>, DecodeError> {
    let (header, body) = decode_header(frame)?;
    let mut c = Cursor {
        rest: body,
        template_id: header.template_id,
        block_length: header.block_length,
    };
    match header.template_id {
        template::PRICE_UPDATE => Ok(Message::PriceUpdate(c.root()?)),
        template::PRICE_SNAPSHOT => Ok(Message::PriceSnapshot(c.root()?)),
        template::HEARTBEAT => c.root::<EmptyRoot>().map(|_| Message::Heartbeat),
        t if t < template::PROVIDER_LOGON => decode_session_and_data(&mut c),
        _ => decode_provider(&mut c),
    }
}

fn decode_session_and_data<'a>(c: &mut Cursor<'a>) -> Result<Message<'a>, DecodeError> {
    use template as t;
    Ok(match c.template_id {
        t::LOGON => {
            let r: LogonRoot = c.root()?;
            Message::Logon(Logon {
                heartbeat_interval_ms: r.heartbeat_interval_ms,
                account: c.var_data("account")?,
                token: c.var_data("token")?,
            })
        }
        t::LOGON_ACCEPTED => Message::LogonAccepted(c.root()?),
        t::LOGON_REJECTED => Message::LogonRejected(c.root()?),
        t::LOGOUT => c.root::<EmptyRoot>().map(|_| Message::Logout)?,
        t::DISCONNECT => {
            let r: DisconnectRoot = c.root()?;
            Message::Disconnect(Disconnect {
                reason: r.reason,
                retry_after_ms: r.retry_after_ms,
                text: c.var_data("text")?,
            })
        }
        t::SYMBOL_LIST_REQUEST => Message::SymbolListRequest(c.root()?),
        t::SYMBOL_DIRECTORY => {
            let r: RequestIdRoot = c.root()?;
            Message::SymbolDirectory(SymbolDirectory {
                request_id: r.request_id,
                symbols: c.group("symbols")?,
                tiers: c.group("tiers")?,
            })
        }
        t::SUBSCRIBE => Message::Subscribe(decode_subscribe(c)?),
        t::UNSUBSCRIBE => Message::Unsubscribe(decode_subscribe(c)?),
        t::SUBSCRIBE_RESPONSE => {
            let r: RequestIdRoot = c.root()?;
            Message::SubscribeResponse(SubscribeResponse {
                request_id: r.request_id,
                results: c.group("results")?,
            })
        }
        _ => decode_requests(c)?,
    })
}

fn decode_subscribe<'a>(c: &mut Cursor<'a>) -> Result<Subscribe<'a>, DecodeError> {
    let r: SubscribeRoot = c.root()?;
    Ok(Subscribe {
        request_id: r.request_id,
        tier: r.tier,
        entries: c.group("entries")?,
    })
}

fn decode_requests<'a>(c: &mut Cursor<'a>) -> Result<Message<'a>, DecodeError> {
    use template as t;
    Ok(match c.template_id {
        t::SNAPSHOT_REQUEST => {
            let r: SnapshotRequestRoot = c.root()?;
            Message::SnapshotRequest(SnapshotRequest {
                request_id: r.request_id,
                budget_us: r.budget_us,
                critical: r.critical,
                tier: r.tier,
                symbols: c.group("symbols")?,
            })
        }
        t::SNAPSHOT_RESPONSE => {
            let r: RequestIdRoot = c.root()?;
            Message::SnapshotResponse(SnapshotResponse {
                request_id: r.request_id,
                prices: c.group("prices")?,
            })
        }
        t::HISTORY_REQUEST => Message::HistoryRequest(c.root()?),
        t::HISTORY_RESPONSE => {
            let r: HistoryResponseRoot = c.root()?;
            Message::HistoryResponse(HistoryResponse {
                request_id: r.request_id,
                symbol_id: r.symbol_id,
                digits: r.digits,
                ticks: c.group("ticks")?,
            })
        }
        t::REJECT => {
            let r: RejectRoot = c.root()?;
            Message::Reject(Reject {
                request_id: r.request_id,
                ref_template_id: r.ref_template_id,
                reason: r.reason,
                retry_after_ms: r.retry_after_ms,
                text: c.var_data("text")?,
            })
        }
        other => return Err(DecodeError::UnknownTemplate(other)),
    })
}

fn decode_provider<'a>(c: &mut Cursor<'a>) -> Result<Message<'a>, DecodeError> {
    Ok(match c.template_id {
        template::PROVIDER_LOGON => {
            let r: ProviderLogonRoot = c.root()?;
            Message::ProviderLogon(ProviderLogon {
                provider_id: r.provider_id,
                token: c.var_data("token")?,
            })
        }
        template::PROVIDER_QUOTE => {
            c.root::<EmptyRoot>()?;
            Message::ProviderQuote(ProviderQuote {
                quotes: c.group("quotes")?,
            })
        }
        other => return Err(DecodeError::UnknownTemplate(other)),
    })
}

/// Longest root block that may arrive shorter (from an older version) and
/// be read with its later fields as zero.
const ROOT_PAD_MAX: usize = 128;

/// Reads the parts of a message body in order, checking each length.
struct Cursor<'a> {
    rest: &'a [u8],
    template_id: u16,
    block_length: u16,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, part: &'static str) -> Result<&'a [u8], DecodeError> {
        let Some((head, tail)) = self.rest.split_at_checked(n) else {
            return Err(DecodeError::Truncated {
                template_id: self.template_id,
                part,
            });
        };
        self.rest = tail;
        Ok(head)
    }

    /// The root block; a longer block (newer version) is skipped past its
    /// known fields; a shorter one from an older version reads the fields
    /// it lacks as 0; one shorter than the first version's is refused.
    #[inline]
    fn root<B: Block>(&mut self) -> Result<B, DecodeError> {
        if self.block_length < B::BLOCK_LENGTH_MIN {
            return Err(DecodeError::ShortBlock {
                template_id: self.template_id,
                block_length: self.block_length,
                required: B::BLOCK_LENGTH_MIN,
            });
        }
        let block = self.take(self.block_length as usize, "root block")?;
        if block.len() >= B::BLOCK_LENGTH as usize {
            return Ok(B::read(block));
        }
        // An older version's block: the later fields are absent (zero).
        let mut padded = [0u8; ROOT_PAD_MAX];
        match padded.get_mut(..block.len()) {
            Some(head) if B::BLOCK_LENGTH as usize <= ROOT_PAD_MAX => head.copy_from_slice(block),
            _ => {
                return Err(DecodeError::ShortBlock {
                    template_id: self.template_id,
                    block_length: self.block_length,
                    required: B::BLOCK_LENGTH,
                })
            }
        }
        Ok(B::read(&padded))
    }

    fn group<T: Block>(&mut self, part: &'static str) -> Result<Group<'a, T>, DecodeError> {
        let header = GroupHeader::read(self.take(GroupHeader::BLOCK_LENGTH as usize, part)?);
        if header.block_length < T::BLOCK_LENGTH {
            return Err(DecodeError::ShortGroupBlock {
                template_id: self.template_id,
                block_length: header.block_length,
                required: T::BLOCK_LENGTH,
            });
        }
        let entry_len = header.block_length as usize;
        let total = entry_len.saturating_mul(header.num_in_group as usize);
        Ok(Group {
            data: self.take(total, part)?,
            entry_len,
            remaining: header.num_in_group,
            _entry: PhantomData,
        })
    }

    fn var_data(&mut self, part: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = self.take(1, part)?.first().copied().unwrap_or(0);
        self.take(len as usize, part)
    }
}
