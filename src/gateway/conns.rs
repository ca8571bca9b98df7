//! The shard's connections: socket reads into each session, writes of
//! the outbound buffers, the session calls with their context, and the
//! end of a connection (closing, closing now, disconnecting all).
//!
//! Reads are bounded per connection per turn ([`READS_PER_TURN`]), and so
//! are the requests handled ([`REQUESTS_PER_CONN_TURN`], and
//! [`super::queries::REQUESTS_PER_TURN`] over all connections); the rest is read and
//! handled next turn (edge-triggered: remembered in the read list).

use std::io::{self, Read};

use super::conn::Conn;
use super::queries::REQUESTS_PER_CONN_TURN;
use super::session::{Ctx, Session, Step, Timer};
use super::shard::{Shard, INTERLEAVE_EVERY, STALL_MIN_NS, SWEEP_NS};
use super::GatewayStats;
use crate::clock::monotonic_ns;
use crate::wire::{self, DisconnectReason, RejectReason};

/// Socket reads per connection per loop turn (each up to the inbound
/// buffer's size).
const READS_PER_TURN: usize = 8;

impl Shard {
    // ---- session calls ------------------------------------------------

    /// Connection `i`'s session and a context for a call at `now`; call
    /// [`Shard::settle`] after it.
    pub(super) fn session_ctx(&mut self, i: usize, now: u64) -> Option<(&mut Session, Ctx<'_>)> {
        let conn = self.slab.conns.get_mut(i)?.as_mut()?;
        let ctx = Ctx {
            now_ns: now,
            cfg: &self.session_cfg,
            out: &mut conn.out,
            rng: &mut self.rng,
            stats: &self.shared.stats,
        };
        Some((&mut conn.session, ctx))
    }

    /// Runs `f` on connection `i`'s session, then carries out what it
    /// asked for.
    pub(super) fn with_session<T>(
        &mut self,
        i: usize,
        now: u64,
        f: impl FnOnce(&mut Session, &mut Ctx<'_>) -> T,
    ) -> Option<T> {
        let (session, mut ctx) = self.session_ctx(i, now)?;
        let r = f(session, &mut ctx);
        self.settle(i);
        Some(r)
    }

    /// Carries out what connection `i`'s session asked for: a write, and
    /// if it ended, its subscriptions and account slot dropped.
    pub(super) fn settle(&mut self, i: usize) {
        let Some(conn) = self.slab.conns[i].as_mut() else {
            return;
        };
        let fx = conn.session.take_effects();
        if let Some(ended) = fx.ended {
            self.drop_subs(i);
            if let Some(account) = ended.account {
                self.release_account(account);
            }
        }
        if fx.write {
            self.queue_write(i);
        }
    }

    /// Appends a control message built by `encode` (see [`Session::send`]).
    pub(super) fn send(
        &mut self,
        i: usize,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, wire::EncodeError>,
    ) {
        self.with_session(i, monotonic_ns(), |s, ctx| s.send(ctx, encode));
    }

    pub(super) fn reject(
        &mut self,
        i: usize,
        request_id: u64,
        ref_template_id: u16,
        reason: RejectReason,
        retry_after_ms: u32,
        text: &str,
    ) {
        self.with_session(i, monotonic_ns(), |s, ctx| {
            s.reject(
                ctx,
                request_id,
                ref_template_id,
                reason,
                retry_after_ms,
                text,
            )
        });
    }

    /// Queues Disconnect(reason) and starts closing.
    pub(super) fn disconnect(
        &mut self,
        i: usize,
        reason: DisconnectReason,
        retry_after_ms: u32,
        text: &str,
        now: u64,
    ) {
        self.with_session(i, now, |s, ctx| {
            s.disconnect(ctx, reason, retry_after_ms, text)
        });
    }

    // ---- writes -------------------------------------------------------

    pub(super) fn flush_writes(&mut self, now: u64) {
        let mut list = std::mem::take(&mut self.slab.write_list);
        let hosting = !self.input.hosted.is_empty();
        for (k, &i) in list.iter().enumerate() {
            if let Some(c) = self.slab.conns[i as usize].as_mut() {
                c.in_write_list = false;
            }
            self.write_conn(i as usize, now);
            if hosting && k % INTERLEAVE_EVERY == INTERLEAVE_EVERY - 1 {
                self.input.hosted.between(monotonic_ns());
                self.stats.interleaves.inc();
            }
        }
        list.clear();
        self.slab.write_list = list;
    }

    pub(super) fn write_conn(&mut self, i: usize, now: u64) {
        let Some(conn) = self.slab.conns[i].as_mut() else {
            return;
        };
        // Encrypted bytes the socket did not take last time go first.
        if conn.stream.flush_pending().is_err() {
            self.close_now(i);
            return;
        }
        for _ in 0..2 {
            let before = conn.out.len();
            let res = conn.out.write_to(&mut conn.stream);
            let n = before - conn.out.len();
            self.stats.bytes_written.add(n as u64);
            conn.answer_marks
                .on_written(n, &mut self.write_hop, monotonic_ns);
            if res.is_err() {
                self.close_now(i);
                return;
            }
            // Drained below low after conflating, or owed keys left by an
            // overflow while writing through: send the latest of each.
            let drained = conn.out.update_flow(now);
            if (drained || !conn.out.is_conflating()) && conn.dirty_subs > 0 {
                self.fanout.resync(conn, &self.stats, now);
                continue;
            }
            break;
        }
        let flushed = conn.out.is_empty() && !conn.stream.has_pending();
        if conn.session.is_closing() && flushed && !conn.fin_sent {
            // Half-close after the last byte (our FIN follows the Disconnect)
            // and keep reading until the peer closes or the linger ends:
            // closing with unread input would send a reset, and a reset
            // makes the peer's stack discard the Disconnect it has not read.
            conn.stream.shutdown_write();
            conn.fin_sent = true;
        }
    }

    pub(super) fn queue_write(&mut self, i: usize) {
        self.slab.queue_write(i);
    }

    // ---- reads --------------------------------------------------------

    pub(super) fn on_readable(&mut self, i: usize, now: u64) {
        // A bounded number of reads and requests per turn, so one fast
        // sender cannot keep the shard from its prices and its other
        // connections; the rest is read next turn (edge-triggered:
        // remembered here). Frames left buffered by last turn's request
        // budget come before more bytes.
        // A session held for a draining move is not read (see
        // `gateway::drain`); it is queued again when the hold ends.
        if self.slab.conns[i].as_ref().is_none_or(Conn::is_held) {
            return;
        }
        let mut left = REQUESTS_PER_CONN_TURN;
        if !self.process_frames(i, now, &mut left) {
            return self.slab.queue_read(i);
        }
        for _ in 0..READS_PER_TURN {
            let Some(conn) = self.slab.conns[i].as_mut() else {
                return;
            };
            if conn.logon_ticket != 0 {
                // Its Logon is with the verifier: what follows stays in the
                // socket until the verdict (`gateway::logon`).
                return;
            }
            let buf = conn.session.read_buf();
            if buf.is_empty() {
                // Cannot happen while max frame <= buffer; treat as abuse.
                self.with_session(i, now, |s, ctx| s.on_buffer_full(ctx));
                return;
            }
            match conn.stream.read(buf) {
                Ok(0) => {
                    GatewayStats::add(&self.shared.stats.peer_closed, 1);
                    self.close_now(i);
                    return;
                }
                Ok(n) => conn.session.on_read(n, now),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    GatewayStats::add(&self.shared.stats.peer_closed, 1);
                    self.close_now(i);
                    return;
                }
            }
            if !self.process_frames(i, now, &mut left) {
                break;
            }
        }
        self.slab.queue_read(i);
    }

    /// Continues reading connections that used up last turn's budget.
    pub(super) fn read_again(&mut self) {
        let mut list = std::mem::take(&mut self.slab.read_list);
        for &i in &list {
            if let Some(c) = self.slab.conns[i as usize].as_mut() {
                c.in_read_list = false;
            }
            self.on_readable(i as usize, monotonic_ns());
        }
        list.clear();
        // Entries pushed while reading went to the (empty) replacement.
        list.append(&mut self.slab.read_list);
        self.slab.read_list = list;
    }

    /// Hands every complete frame read so far to the session, and what it
    /// returns to the shard's handlers, until `left` (this connection's) or
    /// the turn's request budget runs out: false then (frames may remain).
    /// Frames after a Logon wait for its verdict, in order (true: nothing
    /// to do until it comes).
    pub(super) fn process_frames(&mut self, i: usize, now: u64, left: &mut usize) -> bool {
        let mut frame = std::mem::take(&mut self.frame);
        let mut all = true;
        loop {
            if self.slab.conns[i]
                .as_ref()
                .is_none_or(|c| c.logon_ticket != 0)
            {
                break;
            }
            if *left == 0 || self.requests_left == 0 {
                all = false;
                break;
            }
            let Some((session, mut ctx)) = self.session_ctx(i, now) else {
                break;
            };
            let step = session.poll_frame(&mut frame[..], &mut ctx);
            self.settle(i);
            match step {
                Step::Done => break,
                Step::Handled => {}
                Step::Event(ev) => {
                    use super::session::Event as E;
                    if matches!(ev, E::SymbolList(_) | E::Snapshot(_) | E::History(_)) {
                        *left -= 1;
                        self.requests_left -= 1;
                        if let Some(c) = self.slab.conns[i].as_mut() {
                            c.window_requests = c.window_requests.saturating_add(1);
                        }
                    }
                    self.on_event(i, ev, now)
                }
            }
        }
        self.frame = frame;
        all
    }

    fn on_event(&mut self, i: usize, ev: super::session::Event<'_>, now: u64) {
        use super::session::Event;
        let account = self.slab.conns[i].as_ref().and_then(|c| c.account());
        match (ev, account) {
            (Event::Logon(l), _) => self.on_logon(i, &l, now),
            (Event::Subscribe(s), _) => self.on_subscribe(i, &s, now),
            (Event::Unsubscribe(s), _) => self.on_unsubscribe(i, &s),
            (Event::SymbolList(r), Some(a)) => self.on_symbol_list(i, a, &r, now),
            (Event::Snapshot(r), Some(a)) => self.on_snapshot_request(i, a, &r, now),
            (Event::History(r), Some(a)) => self.on_history_request(i, a, &r, now),
            // Requests come only from a logged-on session.
            _ => {}
        }
    }

    // ---- ending connections -------------------------------------------

    /// Removes the connection's subscriptions from the shard.
    fn drop_subs(&mut self, i: usize) {
        while let Some(last) = self.slab.conns[i]
            .as_ref()
            .and_then(|c| c.subs.len().checked_sub(1))
        {
            self.fanout.remove(&mut self.slab, i, last);
        }
    }

    /// Removes subscriptions and releases the session's account slot.
    fn drop_session(&mut self, i: usize) {
        self.drop_subs(i);
        let Some(conn) = self.slab.conns[i].as_mut() else {
            return;
        };
        if let Some(account) = conn.session.end() {
            self.release_account(account);
        }
    }

    /// A logged-on session ended: one fewer logged on, and its account's
    /// session slot given back.
    pub(super) fn release_account(&self, account: u32) {
        GatewayStats::sub(&self.shared.stats.logged_on, 1);
        self.shared
            .admission
            .lock()
            .expect("admission lock")
            .on_session_close(account);
    }

    /// Closes the socket now and frees the slot.
    pub(super) fn close_now(&mut self, i: usize) {
        self.drop_session(i);
        let Some(conn) = self.release_slot(i) else {
            return;
        };
        self.release_ip(conn.peer);
        GatewayStats::sub(&self.shared.stats.open, 1);
    }

    /// Takes connection `i` out of the poller and the slab, still open.
    pub(super) fn release_slot(&mut self, i: usize) -> Option<Conn> {
        let mut conn = self.slab.take(i)?;
        let _ = self.poll.registry().deregister(&mut conn.stream);
        self.give_room();
        self.stats.connections.set(self.slab.in_use() as u64);
        Some(conn)
    }

    pub(super) fn disconnect_all(&mut self) {
        // Sessions in this shard's lane are told too (on adoption), and
        // shard 0 sends no more.
        self.disconnecting = true;
        self.close_moves();
        self.adopt();
        let now = monotonic_ns();
        for i in 0..self.slab.conns.len() {
            let open = self.slab.conns[i]
                .as_ref()
                .is_some_and(|c| !c.session.is_closing());
            if open {
                let retry = self.jitter(self.shared.cfg.shutdown_retry);
                let text = "server shutting down";
                self.disconnect(i, DisconnectReason::SHUTDOWN, retry, text, now);
            }
        }
        self.flush_writes(now);
    }

    pub(super) fn close_all(&mut self) {
        self.close_moves();
        self.adopt();
        for i in 0..self.slab.conns.len() {
            if self.slab.conns[i].is_some() {
                self.write_conn(i, monotonic_ns());
                self.close_now(i);
            }
        }
    }

    // ---- timers -------------------------------------------------------

    /// Measures how late this sweep is (from the last one); a lateness of
    /// [`STALL_MIN_NS`] or more is a loop stall: counted, and every
    /// session's deadlines move out by it (see [`Session::on_stall`]).
    /// Returns whether it was one.
    pub(super) fn note_stall(&mut self, now: u64) -> bool {
        let last = std::mem::replace(&mut self.last_sweep_ns, now);
        let stall = now.saturating_sub(last).saturating_sub(SWEEP_NS);
        if last == 0 || stall < STALL_MIN_NS {
            return false;
        }
        self.stats.stalls.inc();
        let ms = stall / 1_000_000;
        if ms > self.stats.max_stall_ms.get() {
            self.stats.max_stall_ms.set(ms);
        }
        for conn in self.slab.conns[..self.slab.live_end].iter_mut().flatten() {
            conn.session.on_stall(stall);
            conn.stream.extend_deadline(stall);
        }
        true
    }

    /// Runs every session's timers (see [`Session::on_timer`]) and samples
    /// the outbound gauges. A session about to be cut for what its peer
    /// has not sent has its socket read first: bytes waiting there count.
    pub(super) fn sweep(&mut self, now: u64) {
        let (mut conflating, mut queued) = (0u64, 0u64);
        for i in 0..self.slab.live_end {
            let Some(conn) = self.slab.conns[i].as_mut() else {
                continue;
            };
            if conn.stream.handshake_expired(now) {
                // Counted by the link; the peer never spoke TLS to the end.
                self.close_now(i);
                continue;
            }
            // No deadline counts against a session while it is held.
            conn.held_catch_up(now);
            conflating += u64::from(conn.out.is_conflating());
            queued += conn.out.len() as u64;
            if conn.session.silence_due(&self.session_cfg, now) {
                // Read even when the turn's request budget is spent.
                self.requests_left = self.requests_left.max(REQUESTS_PER_CONN_TURN);
                self.on_readable(i, now);
            }
            if self.with_session(i, now, |s, ctx| s.on_timer(ctx)) == Some(Timer::CloseNow) {
                self.close_now(i);
            }
        }
        self.stats.conflating_now.set(conflating);
        self.stats.outbound_bytes.set(queued);
    }
}
