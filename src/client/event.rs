//! What the client yields: typed events, owned and `Clone`.
//!
//! [`Event::Price`] is `Copy`-sized (no heap); the request answers own
//! their lists because they are rare and callers keep them.

use crate::wire::{
    DecodeError, DisconnectReason, HistoryTick, LogonRejectReason, PriceBody, PriceKind,
    RejectReason, SubscribeResult, SymbolInfo, TierInfo,
};

/// A session was established (first logon or after a reconnect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogonInfo {
    /// The server's id of this session.
    pub session_id: u64,
    /// Interval both sides heartbeat at, from LogonAccepted.
    pub heartbeat_interval_ms: u32,
    /// Tier used when a subscribe asks for the account default.
    pub default_tier: u8,
    /// The server's clock at logon, in ns since the Unix epoch.
    pub server_time_ns: u64,
    /// 0 for the first logon, then 1, 2, ... for each reconnect.
    pub reconnects: u64,
    /// The stream whose sequence numbers the server's prices carry at
    /// logon (LogonAccepted's streamId; 0 = none yet, or a version-2
    /// server). A reconnect to a server of another stream resyncs every
    /// key instead of resuming it.
    pub stream_id: u64,
}

/// How a price relates to the expected sequence of its (symbol, tier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqStatus {
    /// A snapshot: the expectation was reset to `seq + 1`.
    Reset,
    /// The first snapshot of a key after a reconnect (to the same server
    /// or another edge) of the stream held before it, whose `seq` is the
    /// one held before it or the next one: no price was missed, the stream
    /// resumes by sequence without a resync. A snapshot of another stream
    /// id (a restarted server) is never a resume.
    Resumed,
    /// `seq` was the expected one.
    InOrder,
    /// An update for a key with no expectation yet (no snapshot seen).
    First,
    /// `seq > expected`: prices were missed. The price is still the newest
    /// (every price carries the full state); `resync` is true when this gap
    /// made the client ask for a snapshot (false while one is in flight).
    Gap {
        /// The sequence number that was expected.
        expected: u64,
        /// True when this gap sent a snapshot request.
        resync: bool,
    },
    /// A key the bounded sequence table had no room for.
    Untracked,
}

impl std::fmt::Display for SeqStatus {
    /// `snapshot`, `resumed`, `in-order`, `first`, `gap(expected N)`
    /// (`gap(expected N, resync)` when it sent a snapshot request) or
    /// `untracked`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SeqStatus::Reset => f.write_str("snapshot"),
            SeqStatus::Resumed => f.write_str("resumed"),
            SeqStatus::InOrder => f.write_str("in-order"),
            SeqStatus::First => f.write_str("first"),
            SeqStatus::Gap {
                expected,
                resync: true,
            } => write!(f, "gap(expected {expected}, resync)"),
            SeqStatus::Gap { expected, .. } => write!(f, "gap(expected {expected})"),
            SeqStatus::Untracked => f.write_str("untracked"),
        }
    }
}

/// Why a PriceSnapshot reset its key's expectation ([`SeqStatus::Reset`]),
/// from what the key held before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetCause {
    /// The key had no expectation: its first price on this client.
    Fresh,
    /// The key counted in another stream (`previous`): a restarted server,
    /// or cores that renumbered. A resync whatever the `seq`, never a
    /// resume.
    NewStream {
        /// The stream id the key counted in before.
        previous: u64,
    },
    /// The same stream: the server's resync (conflation, a stale
    /// restatement, a repeated subscribe) or, after a reconnect, a
    /// snapshot that did not continue the sequence held (prices were
    /// missed across the reconnect).
    Resync {
        /// The sequence number the key expected.
        expected: u64,
        /// True for the key's first snapshot after a reconnect.
        after_reconnect: bool,
    },
}

impl std::fmt::Display for ResetCause {
    /// `fresh`, `new stream` or `resync`, with `after reconnect`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResetCause::Fresh => f.write_str("fresh"),
            ResetCause::NewStream { .. } => f.write_str("new stream"),
            ResetCause::Resync {
                after_reconnect: true,
                ..
            } => f.write_str("resync after reconnect"),
            ResetCause::Resync { .. } => f.write_str("resync"),
        }
    }
}

/// One price for a subscribed (symbol, tier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriceEvent {
    /// Snapshot (after subscribe, or a resync from the server) or update.
    pub kind: PriceKind,
    /// Symbol, tier, flags, digits, seq, bid/ask, sizes, times.
    pub body: PriceBody,
    /// How `seq` relates to the expected sequence.
    pub seq: SeqStatus,
    /// The stream that numbered `seq`: a snapshot's own stream id; for an
    /// update, that of the key's last snapshot (updates carry none). One
    /// (symbol, tier, seq) of one stream id is one price on every server.
    pub stream_id: u64,
    /// For [`SeqStatus::Reset`]: what the key held before this snapshot
    /// (`None` for every other status).
    pub reset: Option<ResetCause>,
}

impl PriceEvent {
    /// A short label of the price's place in its key's sequence, for logs
    /// and screens: `in-order`, `first`, `resumed`, `gap(expected N)`,
    /// `untracked`, or for a snapshot `snapshot` (fresh), `resync: new
    /// stream`, `resync` or `resync after reconnect`.
    pub fn seq_label(&self) -> String {
        match (self.seq, self.reset) {
            (SeqStatus::Reset, Some(ResetCause::Fresh) | None) => "snapshot".into(),
            (SeqStatus::Reset, Some(ResetCause::NewStream { .. })) => "resync: new stream".into(),
            (SeqStatus::Reset, Some(cause)) => cause.to_string(),
            (status, _) => status.to_string(),
        }
    }
}

/// Why a session ended (or a reconnect attempt failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisconnectCause {
    /// The server sent Disconnect(reason) with a human-readable text.
    Server {
        /// Why, as the server sent it.
        reason: DisconnectReason,
        /// The server's text.
        text: String,
    },
    /// The server refused the logon (reported as [`Event::LogonRejected`]
    /// too).
    LogonRejected(LogonRejectReason),
    /// The peer closed the connection without a Disconnect.
    PeerClosed,
    /// Nothing was received for this long (dead-peer rule).
    DeadPeer {
        /// Time without any frame from the server, in ms.
        silent_ms: u64,
    },
    /// A socket error (connect, read or write).
    Io(std::io::ErrorKind),
    /// The server broke the framing; the stream is unusable.
    Protocol(DecodeError),
    /// No LogonAccepted within the logon timeout.
    LogonTimeout,
}

impl std::fmt::Display for DisconnectCause {
    /// `server: slow_consumer "text"`, `logon rejected: auth`,
    /// `peer closed`, `dead peer (3000 ms silent)`, `io: connection
    /// reset`, `protocol error: …`, `logon timeout`. The server's text is
    /// escaped (`{:?}`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DisconnectCause::Server { reason, text } => write!(f, "server: {reason} {text:?}"),
            DisconnectCause::LogonRejected(reason) => write!(f, "logon rejected: {reason}"),
            DisconnectCause::PeerClosed => f.write_str("peer closed"),
            DisconnectCause::DeadPeer { silent_ms } => {
                write!(f, "dead peer ({silent_ms} ms silent)")
            }
            DisconnectCause::Io(kind) => write!(f, "io: {kind}"),
            DisconnectCause::Protocol(e) => write!(f, "protocol error: {e}"),
            DisconnectCause::LogonTimeout => f.write_str("logon timeout"),
        }
    }
}

/// Everything [`Client::next_event`](super::Client::next_event) yields.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A session is up (after the first logon or a reconnect); after a
    /// reconnect every subscription has been sent again.
    LoggedOn(LogonInfo),
    /// A (re)logon was refused. `retry_after_ms` is the server's floor.
    LogonRejected {
        /// Why, as the server sent it.
        reason: LogonRejectReason,
        /// The server's retry floor, in ms.
        retry_after_ms: u32,
    },
    /// A price for a subscribed (symbol, tier).
    Price(PriceEvent),
    /// One result per requested entry, in request order.
    SubscribeResponse {
        /// The request this answers.
        request_id: u64,
        /// One result per requested entry.
        results: Vec<SubscribeResult>,
    },
    /// Answer to a snapshot request (also the client's own gap resyncs).
    /// An answer is not part of the price stream: it does not move any
    /// key's expected sequence, because it can overtake updates still on
    /// their way to this connection (the server reads its price table for
    /// the answer), and those updates must still reach the caller as
    /// [`Event::Price`]. Compare `seq` before showing an answer's price
    /// over a streamed one.
    SnapshotResponse {
        /// The request this answers.
        request_id: u64,
        /// One price per requested symbol that is known, entitled and priced.
        prices: Vec<PriceBody>,
    },
    /// Answer to a history request: the symbol's most recent provider
    /// ticks, oldest first (at most 190; raw quotes, without tier markup).
    HistoryResponse {
        /// The request this answers.
        request_id: u64,
        /// The symbol the ticks belong to.
        symbol_id: u16,
        /// Decimal digits of the tick prices: mantissa × 10^-digits.
        digits: u8,
        /// The ticks, oldest first.
        ticks: Vec<HistoryTick>,
    },
    /// The symbols and tiers the account may use.
    SymbolDirectory {
        /// The request this answers.
        request_id: u64,
        /// Symbols the account may subscribe to.
        symbols: Vec<SymbolInfo>,
        /// Tiers the account may ask for.
        tiers: Vec<TierInfo>,
    },
    /// A request or frame was refused.
    Reject {
        /// Id of the refused request (0 when unknown).
        request_id: u64,
        /// Template id of the refused message (0 when unknown).
        ref_template_id: u16,
        /// Why it was refused.
        reason: RejectReason,
        /// The server's retry floor, in ms (0 = none).
        retry_after_ms: u32,
        /// The server's text.
        text: String,
    },
    /// The session ended (or a reconnect attempt failed). `retry_after_ms`
    /// is the server's floor (0 = none); `reconnect_in_ms` is the delay
    /// the client chose, `None` when it will not reconnect.
    Disconnected {
        /// Why the session ended.
        cause: DisconnectCause,
        /// The server's retry floor, in ms (0 = none).
        retry_after_ms: u32,
        /// Delay before the next attempt, in ms; `None` when the client gives up.
        reconnect_in_ms: Option<u64>,
    },
}

impl Event {
    /// The request id for answers to requests (and Rejects).
    pub fn request_id(&self) -> Option<u64> {
        match self {
            Event::SubscribeResponse { request_id, .. }
            | Event::SnapshotResponse { request_id, .. }
            | Event::HistoryResponse { request_id, .. }
            | Event::SymbolDirectory { request_id, .. }
            | Event::Reject { request_id, .. } => Some(*request_id),
            _ => None,
        }
    }

    /// The price, for [`Event::Price`].
    pub fn price(&self) -> Option<&PriceEvent> {
        match self {
            Event::Price(p) => Some(p),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_and_statuses_read_as_names_with_the_server_text_escaped() {
        let slow = DisconnectCause::Server {
            reason: DisconnectReason::SLOW_CONSUMER,
            text: "behind\n\x1b[2J".into(),
        };
        assert_eq!(
            slow.to_string(),
            r#"server: slow_consumer "behind\n\u{1b}[2J""#
        );
        let refused = DisconnectCause::LogonRejected(LogonRejectReason::AUTH);
        assert_eq!(refused.to_string(), "logon rejected: auth");
        let dead = DisconnectCause::DeadPeer { silent_ms: 3_000 };
        assert_eq!(dead.to_string(), "dead peer (3000 ms silent)");
        let gap = SeqStatus::Gap {
            expected: 12,
            resync: true,
        };
        assert_eq!(gap.to_string(), "gap(expected 12, resync)");
        let mut p = PriceEvent {
            kind: PriceKind::Snapshot,
            body: PriceBody::default(),
            seq: SeqStatus::Reset,
            stream_id: 9,
            reset: Some(ResetCause::NewStream { previous: 8 }),
        };
        assert_eq!(p.seq_label(), "resync: new stream");
        p.reset = Some(ResetCause::Resync {
            expected: 3,
            after_reconnect: true,
        });
        assert_eq!(p.seq_label(), "resync after reconnect");
        p.reset = Some(ResetCause::Fresh);
        assert_eq!(p.seq_label(), "snapshot");
    }
}
