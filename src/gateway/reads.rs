//! The shard's read path: socket reads into each session, the frames it
//! returns handed to the handler that owns the state they touch (logon,
//! subscribe, requests), and the timer sweep, which reads a session
//! about to be cut for silence first.
//!
//! Reads are bounded per connection per turn ([`READS_PER_TURN`]), and so
//! are the requests handled ([`REQUESTS_PER_CONN_TURN`], and
//! [`super::queries::REQUESTS_PER_TURN`] over all connections); the rest is read and
//! handled next turn (edge-triggered: remembered in the read list).
//! [`Shard::on_readable`] is where one connection's input is processed.

use std::io::{self, Read};

use super::conn::Conn;
use super::queries::REQUESTS_PER_CONN_TURN;
use super::read_turn::{ReadTurn, Reader};
use super::session::{Step, Timer};
use super::shard::Shard;
use super::GatewayStats;
use crate::clock::monotonic_ns;

/// Socket reads per connection per loop turn (each up to the inbound
/// buffer's size).
const READS_PER_TURN: usize = 8;

/// How a read of one connection ended.
enum ReadEnd {
    /// Socket drained (WouldBlock) and every frame handled.
    Drained,
    /// Input left (budget spent, or reads bounded): read again next turn.
    More,
    /// Not to be read now (closed, held, its Logon with the verifier).
    Stop,
    /// Input left, held until there is room for its answers: read again
    /// when a write or an answer makes it (not listed for next turn).
    AnswerHeld,
}

/// How handling the frames read so far ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Frames {
    /// Every complete frame handled (or none may be until a Logon's
    /// verdict).
    All,
    /// The connection's or the turn's request budget ran out.
    Budget,
    /// No room for another answer (see [`Conn::has_answer_room`]): read
    /// again when a write or an answer makes room.
    AnswerHeld,
}

impl Shard {
    /// Reads connection `i` within the turn's request budget (see
    /// [`Shard::read_conn`]).
    pub(super) fn on_readable(&mut self, i: usize, now: u64) {
        self.read_conn(i, now, REQUESTS_PER_CONN_TURN);
    }

    /// Reads connection `i`, handling at most `allow` requests (and the
    /// turn's budget); returns how many it handled. Input left over lists
    /// it for the next turn. The connection's unread mark (see
    /// [`Conn::unread_since_ns`]) is cleared when its input is drained and
    /// set to `now` when some is left: requests handled later count their
    /// budget from the last time the shard served it.
    pub(super) fn read_conn(&mut self, i: usize, now: u64, allow: usize) -> usize {
        // A session held for a draining move is not read (see
        // `gateway::drain`); it is queued again when the hold ends.
        if self.conns.slab.conns[i].as_ref().is_none_or(Conn::is_held) {
            return 0;
        }
        let mut left = allow;
        let end = self.read_input(i, now, &mut left);
        if let Some(c) = self.conns.slab.conns[i].as_mut() {
            match end {
                ReadEnd::Drained => c.unread_since_ns = 0,
                ReadEnd::More => {
                    c.unread_since_ns = now;
                    self.conns.slab.queue_read(i);
                }
                // Its input waits from here: the backoff gate and the
                // request budgets count from the last time it was served.
                ReadEnd::AnswerHeld => c.unread_since_ns = now,
                ReadEnd::Stop => {}
            }
        }
        allow - left
    }

    /// A bounded number of reads and requests, so one fast sender cannot
    /// keep the shard from its prices and its other connections. Frames
    /// left buffered by last turn's request budget come before more bytes.
    fn read_input(&mut self, i: usize, now: u64, left: &mut usize) -> ReadEnd {
        match self.process_frames(i, now, left) {
            Frames::All => {}
            Frames::Budget => return ReadEnd::More,
            Frames::AnswerHeld => return ReadEnd::AnswerHeld,
        }
        for _ in 0..READS_PER_TURN {
            let Some(conn) = self.conns.slab.conns[i].as_mut() else {
                return ReadEnd::Stop;
            };
            if conn.logon_ticket != 0 {
                // Its Logon is with the verifier: what follows stays in the
                // socket until the verdict (`gateway::logon`).
                return ReadEnd::Stop;
            }
            let buf = conn.session.read_buf();
            if buf.is_empty() {
                // Cannot happen while max frame <= buffer; treat as abuse.
                self.conns
                    .with_session(i, now, |s, ctx| s.on_buffer_full(ctx));
                return ReadEnd::Stop;
            }
            match conn.stream.read(buf) {
                Ok(0) => {
                    GatewayStats::add(&self.conns.shared.stats.peer_closed, 1);
                    self.conns.close_now(i);
                    return ReadEnd::Stop;
                }
                Ok(n) => conn.session.on_read(n, now),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return ReadEnd::Drained,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    GatewayStats::add(&self.conns.shared.stats.peer_closed, 1);
                    self.conns.close_now(i);
                    return ReadEnd::Stop;
                }
            }
            match self.process_frames(i, now, left) {
                Frames::All => {}
                Frames::Budget => return ReadEnd::More,
                Frames::AnswerHeld => return ReadEnd::AnswerHeld,
            }
        }
        ReadEnd::More
    }

    /// Continues reading connections that used up last turn's budget, in
    /// the fair order of [`ReadTurn`](super::read_turn::ReadTurn).
    pub(super) fn read_again(&mut self) {
        let mut turn = std::mem::replace(&mut self.read_turn, ReadTurn::idle());
        std::mem::swap(&mut turn.current, &mut self.conns.slab.read_list);
        turn.run(self, REQUESTS_PER_CONN_TURN);
        // Skipped connections first, then those listed again while reading.
        let mut next = std::mem::take(&mut turn.current);
        turn.next_list(&self.conns.slab.read_list, &mut next);
        std::mem::swap(&mut next, &mut self.conns.slab.read_list);
        next.clear();
        turn.current = next;
        self.read_turn = turn;
    }

    /// Hands every complete frame read so far to the session, and what it
    /// returns to the shard's handlers, until `left` (this connection's) or
    /// the turn's request budget runs out, or the connection has no room
    /// for another answer (frames may remain then). Frames after a Logon
    /// wait for its verdict, in order ([`Frames::All`]: nothing to do
    /// until it comes).
    pub(super) fn process_frames(&mut self, i: usize, now: u64, left: &mut usize) -> Frames {
        let mut frame = std::mem::take(&mut self.frame);
        let mut end = Frames::All;
        while let Some(c) = self.conns.slab.conns[i].as_mut() {
            if c.logon_ticket != 0 {
                break;
            }
            if !c.session.is_closing() && !c.has_answer_room(now) {
                if c.hold_for_answers(now) {
                    GatewayStats::add(&self.conns.shared.stats.input_held_for_answers, 1);
                }
                end = Frames::AnswerHeld;
                break;
            }
            if *left == 0 || self.requests.left == 0 {
                end = Frames::Budget;
                break;
            }
            let Some((session, mut ctx)) = self.conns.session_ctx(i, now) else {
                break;
            };
            let step = session.poll_frame(&mut frame[..], &mut ctx);
            self.conns.settle(i, now);
            match step {
                Step::Done => break,
                Step::Handled => {}
                Step::Event(ev) => {
                    use super::session::Event as E;
                    // Requests, and the session steps that cost the shard
                    // most (a Logon, a Subscribe with its snapshots): a
                    // herd's turn is bounded like a flood's, so prices go
                    // out between its batches.
                    let request = matches!(ev, E::SymbolList(_) | E::Snapshot(_) | E::History(_));
                    if request || matches!(ev, E::Logon(_) | E::Subscribe(_)) {
                        *left -= 1;
                        self.requests.left -= 1;
                    }
                    if let Some(c) = self.conns.slab.conns[i].as_mut().filter(|_| request) {
                        c.window_requests = c.window_requests.saturating_add(1);
                    }
                    self.on_event(i, ev, now)
                }
            }
        }
        self.frame = frame;
        end
    }

    fn on_event(&mut self, i: usize, ev: super::session::Event<'_>, now: u64) {
        use super::session::Event;
        let account = self.conns.slab.conns[i].as_ref().and_then(|c| c.account());
        let (conns, lag, requests) = (&mut self.conns, &mut self.lag, &mut self.requests);
        match (ev, account) {
            (Event::Logon(l), _) => self.logons.on_logon(conns, lag, i, &l, now),
            (Event::Subscribe(s), _) => self.subscribing.on_subscribe(conns, i, &s, now),
            (Event::Unsubscribe(s), _) => self.subscribing.on_unsubscribe(conns, i, &s),
            (Event::SymbolList(r), Some(a)) => requests.on_symbol_list(conns, lag, i, a, &r, now),
            (Event::Snapshot(r), Some(a)) => {
                requests.on_snapshot_request(conns, lag, i, a, &r, now)
            }
            (Event::History(r), Some(a)) => requests.on_history_request(conns, lag, i, a, &r, now),
            // Requests come only from a logged-on session.
            _ => {}
        }
    }

    /// Applies the verifier's verdicts to their connections (if still
    /// waiting for them); returns how many came.
    pub(super) fn drain_verdicts(&mut self, now: u64) -> usize {
        let mut n = 0;
        while let Some(v) = self.logons.take_verdict() {
            n += 1;
            self.contained(v.conn(), |s| {
                // What the client sent after its Logon (a pipelined
                // Subscribe) waited for this: the frames already read,
                // then the socket (`on_readable` takes both, within the
                // turn's budget).
                if let Some(i) = s.logons.apply_verdict(v, &mut s.conns, now) {
                    s.on_readable(i, now);
                }
            });
        }
        n
    }

    /// A session about to be cut for what its peer has not sent: its
    /// socket is read first (even when the turn's request budget is
    /// spent), and if it still looks silent the socket is asked whether
    /// bytes wait there unread (held, its Logon with the verifier): those
    /// count as sent ([`super::session::Session::note_input_waiting`]).
    fn read_before_judging(&mut self, i: usize, now: u64) {
        self.requests.left = self.requests.left.max(REQUESTS_PER_CONN_TURN);
        self.on_readable(i, now);
        let cfg = &self.conns.session_cfg;
        let Some(conn) = self.conns.slab.conns[i].as_mut() else {
            return;
        };
        if !conn.session.silence_due(cfg, now) {
            return;
        }
        let waiting = crate::runtime::sys::unread_bytes(conn.stream.socket()).unwrap_or(0);
        if waiting > 0 {
            conn.session.note_input_waiting(now);
        }
    }

    /// Runs every session's timers (see [`super::session::Session::on_timer`]) and samples
    /// the outbound gauges. A session about to be cut for what its peer
    /// has not sent has its socket read first: bytes waiting there count.
    pub(super) fn sweep(&mut self, now: u64) {
        let mut sampled = (0u64, 0u64);
        for i in 0..self.conns.slab.live_end {
            if self.conns.slab.conns[i].is_some() {
                self.contained(i, |s| s.sweep_one(i, now, &mut sampled));
            }
        }
        let (conflating, queued) = sampled;
        self.conns.stats.conflating_now.set(conflating);
        self.conns.stats.outbound_bytes.set(queued);
    }

    /// Connection `i`'s part of the sweep; adds to the (conflating,
    /// queued bytes) samples.
    fn sweep_one(&mut self, i: usize, now: u64, (conflating, queued): &mut (u64, u64)) {
        let Some(conn) = self.conns.slab.conns[i].as_mut() else {
            return;
        };
        if conn.stream.handshake_expired(now) {
            // Counted by the link; the peer never spoke TLS to the end.
            return self.conns.close_now(i);
        }
        // No deadline counts against a session while it is held.
        conn.held_catch_up(now);
        conn.answer_hold_catch_up(now);
        *conflating += u64::from(conn.out.is_conflating());
        *queued += conn.out.len() as u64;
        // A kernel queue that held bytes is looked at again (by a write
        // of what is left): one that drained lets a conflating connection
        // resync, though no readiness comes to say so.
        // So is a session whose input waits for room for its answers.
        let look = conn.out.sendq().bytes() > 0 || conn.is_answer_held();
        if conn.session.silence_due(&self.conns.session_cfg, now) {
            self.read_before_judging(i, now);
        }
        if self.conns.with_session(i, now, |s, ctx| s.on_timer(ctx)) == Some(Timer::CloseNow) {
            self.conns.close_now(i);
        } else if look {
            self.conns.queue_write(i);
        }
    }
}

impl Reader for Shard {
    fn account_of(&self, i: u32) -> Option<Option<u32>> {
        self.conns.slab.conns[i as usize]
            .as_ref()
            .map(Conn::account)
    }

    fn turn_left(&self) -> usize {
        self.requests.left
    }

    fn read(&mut self, i: u32, allow: usize) -> usize {
        let i = i as usize;
        if let Some(c) = self.conns.slab.conns[i].as_mut() {
            c.in_read_list = false;
        }
        let mut handled = 0;
        self.contained(i, |s| handled = s.read_conn(i, monotonic_ns(), allow));
        handled
    }
}
