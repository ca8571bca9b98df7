//! One frame from a bridge: ProviderLogon, quote batches, heartbeats and
//! everything a bridge must not send, with the reply each gets.
//!
//! Before ProviderLogon is accepted the first error of any kind ends the
//! session (Reject, then `Disconnect(protocol_error)`); after it, a bad
//! frame body gets a Reject and the session goes on. Every Reject echoes
//! what could be read of the refused frame: its template id and, for
//! messages that carry one, its requestId.

use std::net::IpAddr;
use std::sync::atomic::Ordering;

use super::keepalive::{Keepalive, PROVIDER_HEARTBEAT_MS};
use super::quotes::quotes;
use super::{IngestConfig, IngestStats};
use crate::clock::wall_ns;
use crate::model::{InstrumentTable, ProviderKind, Tick};
use crate::runtime::FeedPort;
use crate::wire::{
    self, DisconnectReason, LogonAccepted, LogonRejectReason, LogonRejected, Message, Name16,
    RejectReason,
};

/// Largest reply frame to a bridge.
const REPLY_MAX: usize = 8192;
/// `retryAfterMs` of the feed port's `Disconnect(protocol_error)` and of
/// LogonRejected: a broken or refused bridge must not reconnect in a loop.
pub(super) const FEED_RETRY_AFTER_MS: u32 = 1_000;

/// Encodes one reply frame on the stack and appends it to the bridge's
/// output. Only replies pay for the stack buffer: the quote path, which
/// answers nothing, never builds one (returning an 8 KiB reply by value
/// from every frame's handler had cost one 8 KiB copy per quote frame,
/// 5 % of the shard's CPU at 200k ticks/s).
pub(super) fn reply(
    out: &mut Vec<u8>,
    f: impl FnOnce(&mut [u8]) -> Result<usize, wire::EncodeError>,
) {
    let mut buf = [0u8; REPLY_MAX];
    if let Ok(n) = f(&mut buf) {
        out.extend_from_slice(&buf[..n]);
    }
}

/// What could be read of a refused frame, echoed in its Reject.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Readable {
    pub template_id: u16,
    pub request_id: u64,
}

/// Reads the template id from a frame's SBE header and, when the template's
/// root block starts with `requestId` and that much arrived, the request id.
pub(super) fn readable(frame: &[u8]) -> Readable {
    let u16_at = |o: usize| {
        frame
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let (Some(block_length), Some(template_id)) = (u16_at(6), u16_at(8)) else {
        return Readable::default();
    };
    let body = wire::HEADER_LEN;
    let has_request_id = wire::spec::message_spec(template_id).is_some_and(|s| {
        s.root
            .fields
            .first()
            .is_some_and(|f| f.name == "request_id")
    });
    let request_id = frame
        .get(body..body + 8)
        .filter(|_| has_request_id && block_length >= 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    Readable {
        template_id,
        request_id,
    }
}

/// Appends a Reject for a frame of which `r` could be read.
pub(super) fn push_reject(out: &mut Vec<u8>, r: Readable, reason: RejectReason, text: &str) {
    reply(out, |b| {
        wire::encode_reject(
            b,
            &wire::Reject {
                request_id: r.request_id,
                ref_template_id: r.template_id,
                reason,
                retry_after_ms: 0,
                text: text.as_bytes(),
            },
        )
    });
}

/// Appends a Disconnect; the caller closes once it is written.
pub(super) fn push_disconnect(out: &mut Vec<u8>, reason: DisconnectReason, text: &str) {
    let retry = if reason == DisconnectReason::PROTOCOL_ERROR {
        FEED_RETRY_AFTER_MS
    } else {
        0
    };
    reply(out, |b| {
        wire::encode_disconnect_reason(b, reason, retry, text)
    });
}

/// The listener's state a frame may read or change.
pub(super) struct Ctx<'a> {
    pub auth: &'a crate::auth::AuthGuard,
    /// Set by a ProviderLogon whose token needs argon2: the provider id
    /// and the token, for the caller to hand to the verifier.
    pub verify: &'a mut Option<(u16, Vec<u8>)>,
    pub table: &'a InstrumentTable,
    pub cfg: &'a IngestConfig,
    pub port: &'a mut FeedPort,
    pub batch: &'a mut Vec<Tick>,
    pub stats: &'a IngestStats,
    /// Provider ids held by a logged-on session (one session per id).
    pub held: &'a mut [bool],
    pub now_ns: u64,
}

/// One bridge's session state.
pub(super) struct Peer<'a> {
    pub provider: &'a mut Option<u16>,
    pub keep: &'a mut Keepalive,
    pub out: &'a mut Vec<u8>,
    pub ip: IpAddr,
}

/// Handles one frame, appending any reply to the peer's output (quotes,
/// the hot path, have none); returns whether to close afterwards.
pub(super) fn handle(frame: &[u8], mut peer: Peer<'_>, cx: &mut Ctx<'_>) -> bool {
    let msg = match wire::decode(frame) {
        Ok(m) => m,
        Err(e) => {
            cx.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            push_reject(peer.out, readable(frame), e.reason(), "bad message");
            return refuse_before_logon(&mut peer, "bad message before ProviderLogon");
        }
    };
    match (msg, *peer.provider) {
        (Message::ProviderLogon(l), None) => logon(&l, peer, cx),
        (Message::ProviderQuote(q), Some(p)) => {
            quotes(&q, p, peer, cx);
            false
        }
        (Message::Heartbeat, _) => {
            reply(peer.out, wire::encode_heartbeat);
            false
        }
        (Message::SymbolListRequest(r), Some(_)) => {
            directory(r.request_id, cx.table, peer.out);
            false
        }
        (Message::Logout, _) => {
            reply(peer.out, |b| {
                wire::encode_disconnect_reason(b, DisconnectReason::LOGOUT, 0, "logout")
            });
            true
        }
        (Message::ProviderLogon(_), Some(_)) => {
            cx.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            let r = readable(frame);
            push_reject(peer.out, r, RejectReason::ALREADY_LOGGED_ON, "");
            false
        }
        (Message::ProviderQuote(_) | Message::SymbolListRequest(_), None) => {
            cx.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            let r = readable(frame);
            push_reject(
                peer.out,
                r,
                RejectReason::NOT_LOGGED_ON,
                "ProviderLogon first",
            );
            refuse_before_logon(&mut peer, "no ProviderLogon")
        }
        (_, _) => {
            // A subscriber's message (or a server's) on the feed port.
            cx.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            let text = "not a provider message: subscribers use the subscriber listener";
            push_reject(
                peer.out,
                readable(frame),
                RejectReason::UNEXPECTED_MESSAGE,
                text,
            );
            refuse_before_logon(&mut peer, "not a provider message")
        }
    }
}

/// A provider's token check: decided here, or (a hashed token without a
/// cached verification) for the verifier thread.
enum TokenCheck {
    /// A verification of the same token is cached.
    Cached,
    /// Compared in place (a clear token, in constant time): whether it
    /// matched.
    Compared(bool),
    Verify,
}

/// A provider token's verdict: `Ok` if it matched, else the LogonRejected
/// reason and retry-after.
pub(super) type TokenVerdict = Result<(), (LogonRejectReason, u32)>;

/// The shared `--ingest-token` logs a provider on only on a loopback
/// listener, compared in constant time.
fn shared_token_accepted(listen: std::net::SocketAddr, expected: &str, presented: &[u8]) -> bool {
    listen.ip().is_loopback() && crate::auth::hash::constant_time_eq(expected.as_bytes(), presented)
}

/// Checks a provider's token. Its own token is stored hashed: a repeat
/// logon with the same token reuses a cached verification; otherwise
/// argon2 runs on the verifier thread, never here (see docs/security.md).
/// The `--ingest-token` default for the other providers is compared in
/// constant time, and only on a loopback ingest listener: it is a clear,
/// shared value (a command-line flag with a documented default), so from
/// the network only a provider's own hashed token logs on.
fn provider_token(l: &wire::ProviderLogon<'_>, id: usize, cx: &Ctx<'_>) -> TokenCheck {
    let Some(p) = cx.table.providers().get(id) else {
        return TokenCheck::Compared(false);
    };
    if p.kind != ProviderKind::Ingest || p.token.is_empty() {
        let ok = shared_token_accepted(cx.cfg.listen, &cx.cfg.default_token, l.token);
        TokenCheck::Compared(ok)
    } else if !crate::auth::hash::is_hash(&p.token) {
        // A clear token (loopback demo).
        TokenCheck::Compared(crate::auth::hash::verify(&p.token, l.token))
    } else if cx
        .auth
        .cached(&provider_key(id), &p.token, l.token, cx.now_ns)
    {
        TokenCheck::Cached
    } else {
        TokenCheck::Verify
    }
}

/// The verification cache's key of provider `id`.
pub(super) fn provider_key(id: usize) -> String {
    format!("provider:{id}")
}

/// Before logon, an error ends the session: appends the Disconnect and
/// returns true. After logon: false.
fn refuse_before_logon(peer: &mut Peer<'_>, text: &str) -> bool {
    if peer.provider.is_some() {
        return false;
    }
    push_disconnect(peer.out, DisconnectReason::PROTOCOL_ERROR, text);
    true
}

fn logon(l: &wire::ProviderLogon<'_>, peer: Peer<'_>, cx: &mut Ctx<'_>) -> bool {
    crate::runtime::drill::connection_point(l.token, "ProviderLogon");
    let id = usize::from(l.provider_id);
    let (ip, now) = (peer.ip, cx.now_ns);
    if let Err(retry) = cx.auth.check_address(ip, now) {
        cx.stats.logons_rejected.fetch_add(1, Ordering::Relaxed);
        let m = LogonRejected {
            reason: LogonRejectReason::RATE_LIMITED,
            retry_after_ms: retry,
        };
        reply(peer.out, |b| wire::encode_logon_rejected(b, &m));
        return true;
    }
    let verdict = match provider_token(l, id, cx) {
        TokenCheck::Cached => Ok(()),
        // Reserved and settled at once: the comparison takes microseconds.
        TokenCheck::Compared(ok) => {
            match cx
                .auth
                .judge(ip, &l.provider_id.to_le_bytes(), true, now, || ok)
            {
                Ok(true) => Ok(()),
                Ok(false) => Err((LogonRejectReason::AUTH, FEED_RETRY_AFTER_MS)),
                Err(retry) => Err((LogonRejectReason::RATE_LIMITED, retry)),
            }
        }
        TokenCheck::Verify => {
            *cx.verify = Some((l.provider_id, l.token.to_vec()));
            return false;
        }
    };
    logon_decided(l.provider_id, verdict, peer, cx)
}

/// The rest of a ProviderLogon once its token is judged (here, or by the
/// verifier): the one-session-per-id rule and the answer. Returns
/// whether to close.
pub(super) fn logon_decided(
    provider_id: u16,
    verdict: TokenVerdict,
    peer: Peer<'_>,
    cx: &mut Ctx<'_>,
) -> bool {
    let id = usize::from(provider_id);
    let refused = match verdict {
        Err(refusal) => Some(refusal),
        Ok(()) if cx.held.get(id).copied().unwrap_or(true) => {
            // One session per provider id: two would interleave one feed.
            cx.stats.logons_duplicate.fetch_add(1, Ordering::Relaxed);
            Some((LogonRejectReason::SESSION_LIMIT, FEED_RETRY_AFTER_MS))
        }
        Ok(()) => None,
    };
    if let Some((reason, retry_after_ms)) = refused {
        cx.stats.logons_rejected.fetch_add(1, Ordering::Relaxed);
        let m = LogonRejected {
            reason,
            retry_after_ms,
        };
        reply(peer.out, |b| wire::encode_logon_rejected(b, &m));
        return true;
    }
    // The bridge names its id before the id is marked held: a fault
    // between the two cannot leave an id held by no bridge.
    *peer.provider = Some(provider_id);
    cx.held[id] = true;
    cx.stats.logons_accepted.fetch_add(1, Ordering::Relaxed);
    let m = LogonAccepted {
        session_id: u64::from(provider_id),
        heartbeat_interval_ms: PROVIDER_HEARTBEAT_MS,
        server_time_ns: wall_ns(),
        default_tier: 0,
        // A provider session carries no prices to it.
        stream_id: 0,
    };
    reply(peer.out, |b| wire::encode_logon_accepted(b, &m));
    false
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

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(f: impl FnOnce(&mut [u8]) -> Result<usize, wire::EncodeError>) -> Vec<u8> {
        let mut buf = vec![0u8; 256];
        let n = f(&mut buf).expect("encodes");
        buf.truncate(n);
        buf
    }

    #[test]
    fn a_reject_echoes_the_template_and_request_id_that_could_be_read() {
        let req = wire::SymbolListRequest {
            request_id: 11,
            budget_us: 0,
            critical: false,
        };
        let frame = encoded(|b| wire::encode_symbol_list_request(b, &req));
        let want = Readable {
            template_id: wire::template::SYMBOL_LIST_REQUEST,
            request_id: 11,
        };
        assert_eq!(readable(&frame), want);
        // Truncated inside the requestId: the template is still known.
        let short = readable(&frame[..wire::HEADER_LEN + 4]);
        assert_eq!((short.template_id, short.request_id), (want.template_id, 0));
        // A message without a requestId, and a frame shorter than a header.
        let hb = encoded(wire::encode_heartbeat);
        assert_eq!(readable(&hb).template_id, wire::template::HEARTBEAT);
        assert_eq!(readable(&hb).request_id, 0);
        assert_eq!(readable(&frame[..7]), Readable::default());
    }

    #[test]
    fn the_shared_ingest_token_works_on_loopback_only() {
        let on = |a: &str| a.parse::<std::net::SocketAddr>().unwrap();
        for loopback in ["127.0.0.1:9500", "127.0.0.9:9500", "[::1]:9500"] {
            assert!(shared_token_accepted(
                on(loopback),
                "demo-feed",
                b"demo-feed"
            ));
            assert!(!shared_token_accepted(
                on(loopback),
                "demo-feed",
                b"demo-fee"
            ));
        }
        for network in ["0.0.0.0:9500", "10.1.2.3:9500", "[::]:9500"] {
            assert!(!shared_token_accepted(
                on(network),
                "demo-feed",
                b"demo-feed"
            ));
        }
    }
}
