//! One subscriber connection: socket, outbound buffer, protocol session
//! and subscriptions. Everything is allocated when the connection is accepted.

use std::net::SocketAddr;

use super::answer_marks::AnswerMarks;
use super::outbound::OutBuf;
use super::session::Session;
use crate::requests::service::ANSWER_BYTES_MAX;
use crate::runtime::tls::Link;

pub use super::session::SessionState;

/// One subscription of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Sub {
    /// (symbol, tier) key.
    pub key: u32,
    /// Position in the shard index's list for `key` (unlimited
    /// subscriptions only; a paced one is not in the index).
    pub pos: u32,
    /// Highest sequence number sent for this key.
    pub last_seq: u64,
    /// The stream `last_seq` belongs to (0 before the first price): a
    /// price of another stream is news whatever its sequence, and goes
    /// out as a PriceSnapshot carrying its stream id.
    pub stream: u64,
    /// Changed while the connection was conflating; a snapshot is owed.
    pub dirty: bool,
    /// The last price sent for this key was flagged STALE (an edge that
    /// lost its bus): the same sequence may be sent again, fresh.
    pub stale: bool,
    /// Its handle in the shard's pacer (a member of its key and of its
    /// connection's cadence) when the
    /// account's update frequency is limited, else
    /// [`super::pacer::PACE_NONE`].
    pub pace: super::pacer::PaceId,
    /// The newest price frame appended for this key, by its mark in the
    /// connection's outbound buffer ([`super::outbound::NO_MARK`]: none),
    /// and whether it is a PriceSnapshot, which a newer price of the key
    /// may overwrite in place while it is unwritten (`fanout::merge`).
    pub mark: u64,
    /// Whether the frame at `mark` is a PriceSnapshot.
    pub mark_snapshot: bool,
    /// When the oldest of this key's unwritten prices was appended.
    pub unwritten_since: u64,
}

impl Sub {
    /// A subscription to `key` at `pos` in the shard's index (or paced,
    /// `pace`), sent nothing yet.
    pub fn new(key: u32, pos: u32, pace: super::pacer::PaceId) -> Sub {
        Sub {
            key,
            pos,
            last_seq: 0,
            stream: 0,
            dirty: false,
            stale: false,
            pace,
            mark: super::outbound::NO_MARK,
            mark_snapshot: false,
            unwritten_since: 0,
        }
    }

    /// A price frame of this key was appended at `mark` at `now`
    /// (`snapshot`: a PriceSnapshot); `pending`: the key had an unwritten
    /// frame already (its oldest keeps its time).
    #[inline]
    pub fn note_appended(&mut self, mark: u64, snapshot: bool, pending: bool, now: u64) {
        if !pending {
            self.unwritten_since = now;
        }
        self.mark = mark;
        self.mark_snapshot = snapshot;
    }
}

/// A subscriber connection.
pub struct Conn {
    /// The socket, plain or TLS, registered with the shard's poller.
    pub stream: Link,
    /// The peer's address (per-IP admission is released with it).
    pub peer: SocketAddr,
    /// The protocol state (logon, timers, inbound framing).
    pub session: Session,
    /// Bytes waiting to be written (fixed capacity, water marks).
    pub out: OutBuf,
    /// The connection's subscriptions (at most `max_subscriptions`).
    pub subs: Vec<Sub>,
    /// Subscriptions with `dirty` set.
    pub dirty_subs: u32,
    /// Queued for a write this loop turn.
    pub in_write_list: bool,
    /// Closing and flushed: our FIN was sent; waiting for the peer's.
    pub fin_sent: bool,
    /// Queued to read again next turn (its read budget ran out).
    pub in_read_list: bool,
    /// Since when input has waited for the shard (monotonic ns; 0: none
    /// known): the poll turn that reported it readable, or the last read
    /// that left input over. A request read from that input counts its
    /// budget from here, not from the moment the shard got round to it:
    /// time the shard kept it unread is the server's queueing delay (see
    /// `gateway::read_turn`).
    pub unread_since_ns: u64,
    /// Requests handed to the request path and not answered yet: a
    /// session with answers on their way to this shard is not moved to
    /// another (see `gateway::spill`) until a drain has held it to 0 (see
    /// `gateway::drain`).
    pub requests_out: u32,
    /// When the last of those was handed over: an answer the request path
    /// had to drop (its ring to this shard full) is never counted back,
    /// so past [`ANSWER_WAIT_NS`] the count no longer holds a move.
    pub last_request_ns: u64,
    /// Answers in `out` not yet written: the `gateway_write` hop.
    pub(crate) answer_marks: AnswerMarks,
    /// Non-zero while this connection's Logon is with the verifier: the
    /// ticket its verdict must carry (see `gateway::logon`).
    pub logon_ticket: u64,
    /// Requests (SymbolList, Snapshot, History frames) handled in the
    /// shard's current measurement window: a draining move takes the
    /// session with the most (see `gateway::drain`).
    pub window_requests: u32,
    /// Measurement windows in a row, up to the last closed one, in which
    /// the session sent at least the drain's request count: only a
    /// sustained requester is drained, not a burst (see `gateway::drain`).
    pub heavy_windows: u8,
    /// Set while a draining move holds the session's input (its socket is
    /// not read, so TCP pushes back on the peer): when its deadlines were
    /// last moved out by the time held (see [`Conn::held_catch_up`]).
    pub held_since_ns: Option<u64>,
    /// Set while the session's input waits for room for its answers (see
    /// [`Conn::has_answer_room`]; it is read again when a write or an
    /// answer makes room): when its deadlines were last moved out by the
    /// time held, as for a draining move's hold.
    pub answer_held_since_ns: Option<u64>,
    /// Bytes reserved in `out` for the answers of the requests in flight
    /// (see [`Conn::on_request_out`]).
    pub answer_reserve: u32,
}

/// Longest a request's answer is waited for before a session may move
/// anyway (well past any request deadline).
pub const ANSWER_WAIT_NS: u64 = 30_000_000_000;

impl Conn {
    /// Whether the session is logged on and not closing.
    pub fn is_active(&self) -> bool {
        self.session.is_active()
    }

    /// The logged-on account's index, if logged on.
    pub fn account(&self) -> Option<u32> {
        self.session.account()
    }

    /// When a request read now arrived for the server: the connection's
    /// unread mark if set and earlier, else `now_ns`.
    pub fn arrival_ns(&self, now_ns: u64) -> u64 {
        match self.unread_since_ns {
            0 => now_ns,
            t => t.min(now_ns),
        }
    }

    /// Requests whose answers are still on their way: `requests_out`,
    /// unless the last was handed over longer than [`ANSWER_WAIT_NS`] ago
    /// (an answer the request path had to drop is never counted back).
    pub fn answers_awaited(&self, now_ns: u64) -> u32 {
        if now_ns.saturating_sub(self.last_request_ns) < ANSWER_WAIT_NS {
            self.requests_out
        } else {
            0
        }
    }

    /// A request whose answer takes at most `bound` bytes was handed to
    /// the request path.
    pub fn on_request_out(&mut self, bound: usize, now_ns: u64) {
        self.requests_out += 1;
        self.last_request_ns = now_ns;
        self.answer_reserve = self.answer_reserve.saturating_add(bound as u32);
    }

    /// An answer of `len` bytes came back. What is reserved for the rest
    /// never falls below their bounds: each answer is at most its own, so
    /// taking off its length leaves at least the others' (the reserve is
    /// exact again, 0, once none is awaited).
    pub fn on_answer_back(&mut self, len: u32) {
        self.requests_out = self.requests_out.saturating_sub(1);
        self.answer_reserve = match self.requests_out {
            0 => 0,
            _ => self.answer_reserve.saturating_sub(len),
        };
    }

    /// Whether the next frame may be handled: its answer, whatever it is
    /// ([`ANSWER_BYTES_MAX`]), and those of the requests in flight (their
    /// bounds, `answer_bound`) are sure to fit in `out`; or nothing is
    /// queued or awaited at all. A session without that room is not read:
    /// its requests wait in its socket and TCP holds back a client that
    /// sends faster than it reads its answers, instead of a full buffer
    /// cutting it as a slow consumer while it reads (see `gateway::reads`).
    pub fn has_answer_room(&self, now_ns: u64) -> bool {
        let reserved = match self.answers_awaited(now_ns) {
            0 => 0,
            _ => self.answer_reserve as usize,
        };
        reserved + ANSWER_BYTES_MAX <= self.out.room() || (reserved == 0 && self.out.is_empty())
    }

    /// Whether the session's input waits for room for its answers.
    pub fn is_answer_held(&self) -> bool {
        self.answer_held_since_ns.is_some()
    }

    /// Holds the session's input from `now_ns` until its answers have room;
    /// true if it was not held already.
    pub fn hold_for_answers(&mut self, now_ns: u64) -> bool {
        let new = self.answer_held_since_ns.is_none();
        if new {
            self.answer_held_since_ns = Some(now_ns);
        }
        new
    }

    /// While its input waits for answer room the server reads nothing of
    /// the peer: its idle, logon and partial-frame deadlines move out by
    /// the time held (see [`Conn::held_catch_up`]).
    pub fn answer_hold_catch_up(&mut self, now_ns: u64) {
        held_catch_up(&mut self.answer_held_since_ns, &mut self.session, now_ns);
    }

    /// Ends an answer hold at `now_ns`; the caller reads the socket again.
    pub fn end_answer_hold(&mut self, now_ns: u64) {
        unhold(&mut self.answer_held_since_ns, &mut self.session, now_ns);
    }

    /// Whether a draining move holds the session's input.
    pub fn is_held(&self) -> bool {
        self.held_since_ns.is_some()
    }

    /// Stops reading the session's input from `now_ns` on.
    pub fn hold(&mut self, now_ns: u64) {
        self.held_since_ns = Some(now_ns);
    }

    /// While held, the peer's silence is the server's doing: its idle,
    /// logon and partial-frame deadlines move out by the time held since
    /// the last call (see [`Session::on_stall`]). Nothing if not held.
    pub fn held_catch_up(&mut self, now_ns: u64) {
        held_catch_up(&mut self.held_since_ns, &mut self.session, now_ns);
    }

    /// Ends a hold at `now_ns` (its deadlines caught up first); the caller
    /// reads the socket again.
    pub fn unhold(&mut self, now_ns: u64) {
        unhold(&mut self.held_since_ns, &mut self.session, now_ns);
    }
}

/// [`Conn::held_catch_up`] on a connection's hold clock and session.
fn held_catch_up(held_since_ns: &mut Option<u64>, session: &mut Session, now_ns: u64) {
    if let Some(since) = held_since_ns.as_mut() {
        session.on_stall(now_ns.saturating_sub(*since));
        *since = now_ns;
    }
}

/// [`Conn::unhold`] on a connection's hold clock and session.
fn unhold(held_since_ns: &mut Option<u64>, session: &mut Session, now_ns: u64) {
    held_catch_up(held_since_ns, session, now_ns);
    *held_since_ns = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::session::SessionConfig;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_hold_moves_deadlines_out_by_its_length_and_they_run_again_after() {
        let cfg = SessionConfig::from(&crate::gateway::GatewayConfig::default());
        // Waiting for its logon (5 s) from t0; held from t0 + 1 s to t0 + 8 s
        // (an aborted or slow drain), with sweeps catching up meanwhile.
        let t0 = 100 * S;
        let mut session = Session::new(&cfg, t0);
        let mut held = Some(t0 + S);
        held_catch_up(&mut held, &mut session, t0 + 3 * S);
        held_catch_up(&mut held, &mut session, t0 + 7 * S);
        assert!(!session.silence_due(&cfg, t0 + 7 * S), "cut while held");
        unhold(&mut held, &mut session, t0 + 8 * S);
        assert_eq!(held, None);
        // 1 s of its 5 s ran before the hold: 4 s are left after it.
        assert!(!session.silence_due(&cfg, t0 + 12 * S - 1));
        assert!(session.silence_due(&cfg, t0 + 12 * S + 1));
        // Not held: a catch-up changes nothing.
        held_catch_up(&mut held, &mut session, t0 + 30 * S);
        assert!(session.silence_due(&cfg, t0 + 30 * S));
    }
}
