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
    Logon {
        heartbeat_interval_ms: u32,
        account: Vec<u8>,
        token: Vec<u8>,
    },
    LogonAccepted(LogonAccepted),
    LogonRejected(LogonRejected),
    Heartbeat,
    Logout,
    Disconnect {
        reason: DisconnectReason,
        retry_after_ms: u32,
        text: Vec<u8>,
    },
    SymbolListRequest(SymbolListRequest),
    SymbolDirectory {
        request_id: u64,
        symbols: Vec<SymbolInfo>,
        tiers: Vec<TierInfo>,
    },
    Subscribe {
        request_id: u64,
        tier: u8,
        entries: Vec<SymbolRef>,
    },
    Unsubscribe {
        request_id: u64,
        tier: u8,
        entries: Vec<SymbolRef>,
    },
    SubscribeResponse {
        request_id: u64,
        results: Vec<SubscribeResult>,
    },
    PriceSnapshot(PriceBody),
    PriceUpdate(PriceBody),
    SnapshotRequest {
        request_id: u64,
        budget_us: u32,
        critical: bool,
        tier: u8,
        symbols: Vec<SymbolId>,
    },
    SnapshotResponse {
        request_id: u64,
        prices: Vec<PriceBody>,
    },
    HistoryRequest(HistoryRequest),
    HistoryResponse {
        request_id: u64,
        symbol_id: SymbolId,
        digits: u8,
        ticks: Vec<HistoryTick>,
    },
    Reject {
        request_id: u64,
        ref_template_id: u16,
        reason: RejectReason,
        retry_after_ms: u32,
        text: Vec<u8>,
    },
    ProviderLogon {
        provider_id: u16,
        token: Vec<u8>,
    },
    ProviderQuote {
        quotes: Vec<QuoteEntry>,
    },
}

impl Message<'_> {
    /// Copies the message out of its frame.
    pub fn to_owned_message(&self) -> OwnedMessage {
        use OwnedMessage as O;
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
    /// Encodes the message; see the `encode_*` functions.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        use OwnedMessage as O;
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
            O::PriceSnapshot(b) => try_encode_price(buf, PriceKind::Snapshot, b),
            O::PriceUpdate(b) => try_encode_price(buf, PriceKind::Update, b),
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
