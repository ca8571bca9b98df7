//! One frame from a bridge: ProviderLogon, quote batches, heartbeats and
//! everything a bridge must not send, with the reply each gets.

use std::sync::atomic::Ordering;

use super::{IngestConfig, IngestStats};
use crate::clock::{monotonic_ns, wall_ns};
use crate::model::{InstrumentTable, ProviderKind, Tick};
use crate::runtime::FeedPort;
use crate::wire::{self, LogonAccepted, LogonRejectReason, LogonRejected, Message, Name16};

/// Largest reply frame to a bridge.
const REPLY_MAX: usize = 8192;

/// Encodes one reply frame on the stack and appends it to the bridge's
/// output. Only replies pay for the stack buffer: the quote path, which
/// answers nothing, never builds one (returning an 8 KiB reply by value
/// from every frame's handler had cost one 8 KiB copy per quote frame,
/// 5 % of the shard's CPU at 200k ticks/s).
fn reply(out: &mut Vec<u8>, f: impl FnOnce(&mut [u8]) -> Result<usize, wire::EncodeError>) {
    let mut buf = [0u8; REPLY_MAX];
    if let Ok(n) = f(&mut buf) {
        out.extend_from_slice(&buf[..n]);
    }
}

pub(super) fn encode_reject(
    buf: &mut [u8],
    reason: wire::RejectReason,
    text: &str,
) -> Result<usize, wire::EncodeError> {
    wire::encode_reject(
        buf,
        &wire::Reject {
            request_id: 0,
            ref_template_id: 0,
            reason,
            retry_after_ms: 0,
            text: text.as_bytes(),
        },
    )
}

/// Handles one frame, appending any reply to `out` (quotes, the hot path,
/// have none); returns whether to close afterwards.
#[allow(clippy::too_many_arguments)]
pub(super) fn handle(
    frame: &[u8],
    provider: &mut Option<u16>,
    table: &InstrumentTable,
    cfg: &IngestConfig,
    port: &mut FeedPort,
    batch: &mut Vec<Tick>,
    stats: &IngestStats,
    out: &mut Vec<u8>,
) -> bool {
    let msg = match wire::decode(frame) {
        Ok(m) => m,
        Err(e) => {
            stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            reply(out, |b| encode_reject(b, e.reason(), "bad message"));
            // Before logon nothing is owed to the peer: one bad frame ends it.
            return provider.is_none();
        }
    };
    match (msg, *provider) {
        (Message::ProviderLogon(l), None) => logon(&l, provider, table, cfg, stats, out),
        (Message::ProviderQuote(q), Some(p)) => {
            quotes(&q, p, port, batch, stats);
            false
        }
        (Message::Heartbeat, Some(_)) => {
            reply(out, wire::encode_heartbeat);
            false
        }
        (Message::SymbolListRequest(r), Some(_)) => {
            directory(r.request_id, table, out);
            false
        }
        (Message::Logout, _) => {
            reply(out, |b| {
                wire::encode_disconnect_reason(b, wire::DisconnectReason::LOGOUT, 0, "logout")
            });
            true
        }
        (_, None) => {
            stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            reply(out, |b| {
                encode_reject(b, wire::RejectReason::NOT_LOGGED_ON, "logon first")
            });
            true
        }
        (_, Some(_)) => {
            stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            reply(out, |b| {
                encode_reject(b, wire::RejectReason::UNEXPECTED_MESSAGE, "")
            });
            false
        }
    }
}

fn logon(
    l: &wire::ProviderLogon<'_>,
    provider: &mut Option<u16>,
    table: &InstrumentTable,
    cfg: &IngestConfig,
    stats: &IngestStats,
    out: &mut Vec<u8>,
) -> bool {
    let ok = table
        .providers()
        .get(l.provider_id as usize)
        .is_some_and(|p| {
            let expected = if p.kind == ProviderKind::Ingest && !p.token.is_empty() {
                p.token.as_bytes()
            } else {
                cfg.default_token.as_bytes()
            };
            expected == l.token
        });
    if !ok {
        stats.logons_rejected.fetch_add(1, Ordering::Relaxed);
        let m = LogonRejected {
            reason: LogonRejectReason::AUTH,
            retry_after_ms: 1_000,
        };
        reply(out, |b| wire::encode_logon_rejected(b, &m));
        return true;
    }
    *provider = Some(l.provider_id);
    stats.logons_accepted.fetch_add(1, Ordering::Relaxed);
    let m = LogonAccepted {
        session_id: u64::from(l.provider_id),
        heartbeat_interval_ms: 1_000,
        server_time_ns: wall_ns(),
        default_tier: 0,
    };
    reply(out, |b| wire::encode_logon_accepted(b, &m));
    false
}

fn quotes(
    q: &wire::ProviderQuote<'_>,
    provider: u16,
    port: &mut FeedPort,
    batch: &mut Vec<Tick>,
    stats: &IngestStats,
) {
    let now = monotonic_ns();
    batch.clear();
    for e in q.quotes.clone() {
        if batch.len() == batch.capacity() {
            break;
        }
        batch.push(Tick {
            bid: e.bid,
            ask: e.ask,
            bid_size: e.bid_size,
            ask_size: e.ask_size,
            provider_time_ns: e.provider_time_ns,
            receive_time_ns: now,
            feed_seq: 0,
            symbol: e.symbol_id,
            provider,
            flags: u32::from(e.flags),
        });
    }
    stats
        .quotes
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    for t in batch.iter() {
        port.push(*t);
    }
}

fn directory(request_id: u64, table: &InstrumentTable, out: &mut Vec<u8>) {
    // A directory of every instrument may exceed the stack reply; bridges
    // that need more use the subscriber listener's SymbolListRequest.
    let symbols = table.instruments().iter().map(|s| wire::SymbolInfo {
        symbol_id: s.id,
        digits: s.digits,
        name: Name16::new(&s.name).unwrap_or_default(),
    });
    let tiers = std::iter::empty::<wire::TierInfo>();
    reply(out, |b| {
        wire::encode_symbol_directory(b, request_id, symbols, tiers)
    });
}
