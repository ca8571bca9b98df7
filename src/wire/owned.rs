//! Owned messages for tests, tools and clients that keep messages around.
//! Not for the hot path: converting a [`Message`] allocates for var data and
//! groups. Encoding an [`OwnedMessage`] goes through the same encoders.

use super::blocks::*;
use super::codes::{DisconnectReason, RejectReason};
use super::decode::{Disconnect, Logon, Message, ProviderLogon, Reject};
use super::encode::*;
use crate::model::SymbolId;

/// A message that owns its var data and group entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedMessage {
    /// Owned [`Logon`].
    Logon {
        /// Heartbeat interval asked for, in ms (0 = server default).
        heartbeat_interval_ms: u32,
        /// Account name (at most 255 bytes to encode).
        account: Vec<u8>,
        /// Secret token (at most 255 bytes to encode).
        token: Vec<u8>,
    },
    /// The session is open.
    LogonAccepted(LogonAccepted),
    /// The logon was refused.
    LogonRejected(LogonRejected),
    /// Liveness, no body.
    Heartbeat,
    /// End of session, no body.
    Logout,
    /// Owned [`Disconnect`].
    Disconnect {
        /// Why the session ends.
        reason: DisconnectReason,
        /// Minimum wait before reconnecting, in ms.
        retry_after_ms: u32,
        /// Human-readable detail (at most 255 bytes to encode).
        text: Vec<u8>,
    },
    /// A request for the symbol directory.
    SymbolListRequest(SymbolListRequest),
    /// Owned [`SymbolDirectory`](super::SymbolDirectory).
    SymbolDirectory {
        /// The request this answers.
        request_id: u64,
        /// Symbols the account may subscribe to.
        symbols: Vec<SymbolInfo>,
        /// Tiers the account may ask for.
        tiers: Vec<TierInfo>,
    },
    /// Owned [`Subscribe`](super::Subscribe).
    Subscribe {
        /// Client-chosen id echoed in the answer.
        request_id: u64,
        /// Tier id, or [`TIER_ACCOUNT_DEFAULT`](super::TIER_ACCOUNT_DEFAULT).
        tier: u8,
        /// Symbols to subscribe, by id or by name.
        entries: Vec<SymbolRef>,
    },
    /// Owned Unsubscribe (Subscribe's layout).
    Unsubscribe {
        /// Client-chosen id echoed in the answer.
        request_id: u64,
        /// Tier id, or [`TIER_ACCOUNT_DEFAULT`](super::TIER_ACCOUNT_DEFAULT).
        tier: u8,
        /// Symbols to unsubscribe, by id or by name.
        entries: Vec<SymbolRef>,
    },
    /// Owned [`SubscribeResponse`](super::SubscribeResponse).
    SubscribeResponse {
        /// The request this answers.
        request_id: u64,
        /// One outcome per requested entry, in request order.
        results: Vec<SubscribeResult>,
    },
    /// A symbol's full price on subscribe, and its stream.
    PriceSnapshot(PriceSnapshot),
    /// A streamed price change.
    PriceUpdate(PriceBody),
    /// Owned [`SnapshotRequest`](super::SnapshotRequest).
    SnapshotRequest {
        /// Client-chosen id echoed in the answer.
        request_id: u64,
        /// Remaining budget in µs, relative to arrival (0 = server default).
        budget_us: u32,
        /// Critical requests are shed last under overload.
        critical: bool,
        /// Tier id, or [`TIER_ACCOUNT_DEFAULT`](super::TIER_ACCOUNT_DEFAULT).
        tier: u8,
        /// Symbol ids wanted.
        symbols: Vec<SymbolId>,
    },
    /// Owned [`SnapshotResponse`](super::SnapshotResponse).
    SnapshotResponse {
        /// The request this answers.
        request_id: u64,
        /// One price per requested symbol that is known, entitled and priced.
        prices: Vec<PriceBody>,
    },
    /// A request for recent ticks of one symbol.
    HistoryRequest(HistoryRequest),
    /// Owned [`HistoryResponse`](super::HistoryResponse).
    HistoryResponse {
        /// The request this answers.
        request_id: u64,
        /// Symbol the ticks belong to.
        symbol_id: SymbolId,
        /// Decimal digits of the tick prices.
        digits: u8,
        /// The most recent ticks, oldest first.
        ticks: Vec<HistoryTick>,
    },
    /// Owned [`Reject`].
    Reject {
        /// Id of the refused request, when it could be read (else 0).
        request_id: u64,
        /// Template id of the refused message, when it could be read (else 0).
        ref_template_id: u16,
        /// Why it was refused.
        reason: RejectReason,
        /// Minimum wait before retrying, in ms (0 = none given).
        retry_after_ms: u32,
        /// Human-readable detail (at most 255 bytes to encode).
        text: Vec<u8>,
    },
    /// Owned [`ProviderLogon`].
    ProviderLogon {
        /// The provider's configured id.
        provider_id: u16,
        /// Secret token (at most 255 bytes to encode).
        token: Vec<u8>,
    },
    /// Owned ProviderQuote.
    ProviderQuote {
        /// The quotes, one entry per symbol quoted.
        quotes: Vec<QuoteEntry>,
    },
}

impl Message<'_> {
    /// Copies the message out of its frame.
    pub fn to_owned_message(&self) -> OwnedMessage {
        use OwnedMessage as O;
        // One arm per message of the schema, over 70 lines: a flat table
        // reads against `Message` line by line; spreading it over helpers
        // would hide a missing arm, which the exhaustive match now catches.
        match self {
            Message::Logon(m) => O::Logon {
                heartbeat_interval_ms: m.heartbeat_interval_ms,
                account: m.account.to_vec(),
                token: m.token.to_vec(),
            },
            Message::LogonAccepted(m) => O::LogonAccepted(*m),
            Message::LogonRejected(m) => O::LogonRejected(*m),
            Message::Heartbeat => O::Heartbeat,
            Message::Logout => O::Logout,
            Message::Disconnect(m) => O::Disconnect {
                reason: m.reason,
                retry_after_ms: m.retry_after_ms,
                text: m.text.to_vec(),
            },
            Message::SymbolListRequest(m) => O::SymbolListRequest(*m),
            Message::SymbolDirectory(m) => O::SymbolDirectory {
                request_id: m.request_id,
                symbols: m.symbols.clone().collect(),
                tiers: m.tiers.clone().collect(),
            },
            Message::Subscribe(m) => O::Subscribe {
                request_id: m.request_id,
                tier: m.tier,
                entries: m.entries.clone().collect(),
            },
            Message::Unsubscribe(m) => O::Unsubscribe {
                request_id: m.request_id,
                tier: m.tier,
                entries: m.entries.clone().collect(),
            },
            Message::SubscribeResponse(m) => O::SubscribeResponse {
                request_id: m.request_id,
                results: m.results.clone().collect(),
            },
            Message::PriceSnapshot(b) => O::PriceSnapshot(*b),
            Message::PriceUpdate(b) => O::PriceUpdate(*b),
            Message::SnapshotRequest(m) => O::SnapshotRequest {
                request_id: m.request_id,
                budget_us: m.budget_us,
                critical: m.critical,
                tier: m.tier,
                symbols: m.symbols.clone().collect(),
            },
            Message::SnapshotResponse(m) => O::SnapshotResponse {
                request_id: m.request_id,
                prices: m.prices.clone().collect(),
            },
            Message::HistoryRequest(m) => O::HistoryRequest(*m),
            Message::HistoryResponse(m) => O::HistoryResponse {
                request_id: m.request_id,
                symbol_id: m.symbol_id,
                digits: m.digits,
                ticks: m.ticks.clone().collect(),
            },
            Message::Reject(m) => O::Reject {
                request_id: m.request_id,
                ref_template_id: m.ref_template_id,
                reason: m.reason,
                retry_after_ms: m.retry_after_ms,
                text: m.text.to_vec(),
            },
            Message::ProviderLogon(m) => O::ProviderLogon {
                provider_id: m.provider_id,
                token: m.token.to_vec(),
            },
            Message::ProviderQuote(m) => O::ProviderQuote {
                quotes: m.quotes.clone().collect(),
            },
        }
    }
}

impl OwnedMessage {
    /// The price of a PriceSnapshot or a PriceUpdate.
    pub fn price_body(&self) -> Option<&PriceBody> {
        match self {
            OwnedMessage::PriceSnapshot(s) => Some(&s.body),
            OwnedMessage::PriceUpdate(b) => Some(b),
            _ => None,
        }
    }

    /// Encodes the message; see the `encode_*` functions.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        use OwnedMessage as O;
        // One arm per message of the schema, over 70 lines: a flat table
        // reads against `Message` line by line; spreading it over helpers
        // would hide a missing arm, which the exhaustive match now catches.
        match self {
            O::Logon {
                heartbeat_interval_ms,
                account,
                token,
            } => encode_logon(
                buf,
                &Logon {
                    heartbeat_interval_ms: *heartbeat_interval_ms,
                    account,
                    token,
                },
            ),
            O::LogonAccepted(m) => encode_logon_accepted(buf, m),
            O::LogonRejected(m) => encode_logon_rejected(buf, m),
            O::Heartbeat => encode_heartbeat(buf),
            O::Logout => encode_logout(buf),
            O::Disconnect {
                reason,
                retry_after_ms,
                text,
            } => encode_disconnect(
                buf,
                &Disconnect {
                    reason: *reason,
                    retry_after_ms: *retry_after_ms,
                    text,
                },
            ),
            O::SymbolListRequest(m) => encode_symbol_list_request(buf, m),
            O::SymbolDirectory {
                request_id,
                symbols,
                tiers,
            } => encode_symbol_directory(buf, *request_id, symbols, tiers),
            O::Subscribe {
                request_id,
                tier,
                entries,
            } => encode_subscribe(buf, *request_id, *tier, entries),
            O::Unsubscribe {
                request_id,
                tier,
                entries,
            } => encode_unsubscribe(buf, *request_id, *tier, entries),
            O::SubscribeResponse {
                request_id,
                results,
            } => encode_subscribe_response(buf, *request_id, results),
            O::PriceSnapshot(s) => try_encode_price(buf, PriceKind::Snapshot, &s.body, s.stream_id),
            O::PriceUpdate(b) => try_encode_price(buf, PriceKind::Update, b, 0),
            O::SnapshotRequest {
                request_id,
                budget_us,
                critical,
                tier,
                symbols,
            } => encode_snapshot_request(buf, *request_id, *budget_us, *critical, *tier, symbols),
            O::SnapshotResponse { request_id, prices } => {
                encode_snapshot_response(buf, *request_id, prices)
            }
            O::HistoryRequest(m) => encode_history_request(buf, m),
            O::HistoryResponse {
                request_id,
                symbol_id,
                digits,
                ticks,
            } => encode_history_response(buf, *request_id, *symbol_id, *digits, ticks),
            O::Reject {
                request_id,
                ref_template_id,
                reason,
                retry_after_ms,
                text,
            } => encode_reject(
                buf,
                &Reject {
                    request_id: *request_id,
                    ref_template_id: *ref_template_id,
                    reason: *reason,
                    retry_after_ms: *retry_after_ms,
                    text,
                },
            ),
            O::ProviderLogon { provider_id, token } => encode_provider_logon(
                buf,
                &ProviderLogon {
                    provider_id: *provider_id,
                    token,
                },
            ),
            O::ProviderQuote { quotes } => encode_provider_quote(buf, quotes),
        }
    }
}
