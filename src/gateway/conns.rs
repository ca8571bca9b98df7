//! The shard's connection set ([`Conns`]): the slab of connections and
//! their sessions, the subscription index and price path, and what every
//! handler does to a connection — a session call with its context, a
//! write of its outbound buffer, accepting it, closing it. The handlers
//! that own other state (logon, subscribe, requests, revalidation, moves,
//! lag) take a `&mut Conns` for the connection they act on.
//!
//! Reading a connection (the per-connection entry point for its input) is
//! the loop's (`reads.rs`): a read dispatches to those handlers.

use std::net::SocketAddr;
use std::sync::Arc;

use mio::{Interest, Registry, Token};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::conn::Conn;
use super::fanout::Fanout;
use super::fresh::PassClock;
use super::lanes::Room;
use super::outbound::OutBuf;
use super::session::{Ctx, Session, SessionConfig};
use super::slab::Slab;
use super::{GatewayStats, ShardStats, Shared};
use crate::admission::RetryWindow;
use crate::clock::monotonic_ns;
use crate::requests::hops::HopRecorder;
use crate::runtime::hosting::HostedTasks;
use crate::runtime::sys::send_queue_bytes;
use crate::runtime::tls::Link;
use crate::wire::{self, DisconnectReason, RejectReason};

/// Writes between two reads of the clock in [`Conns::flush_writes`]: a
/// write to a loopback socket costs 5–10 µs, so the clock's age is at most
/// about 0.1 ms, against one `now` for a whole list (with 5,000
/// connections per shard a turn took about 100 ms, and a connection
/// written late in it had its prices judged by the turn's start).
const WRITE_CLOCK_EVERY: usize = 16;

/// With hosted stages, their [`crate::runtime::HostedTask::between`] runs
/// after every this many connection writes or events in one loop turn, so
/// a turn that writes to thousands of sessions (a reconnect herd) does not
/// hold quotes and the other shards' prices for its whole length.
pub(super) const INTERLEAVE_EVERY: usize = 32;

/// A shard's connections and what acts on one of them.
pub(super) struct Conns {
    pub(super) shared: Arc<Shared>,
    /// The shard's poller (a clone of the loop's registry: the same epoll
    /// instance), where sockets are registered and deregistered.
    registry: Registry,
    /// Connections and this turn's write and read lists.
    pub(super) slab: Slab,
    /// Subscriptions and the price path.
    pub(super) fanout: Fanout,
    /// What every session of this shard decides by.
    pub(super) session_cfg: SessionConfig,
    pub(super) rng: SmallRng,
    /// The shard's counters.
    pub(super) stats: Arc<ShardStats>,
    /// The `gateway_write` hop: an answer popped to its last byte written.
    pub(super) write_hop: HopRecorder,
    /// This shard's slot room (see [`super::lanes::Peer::room`]).
    pub(super) room: Room,
}

impl Conns {
    pub(super) fn new(
        shared: Arc<Shared>,
        registry: Registry,
        interest: Arc<crate::engine::SymbolInterest>,
        stats: Arc<ShardStats>,
        write_hop: HopRecorder,
        room: Room,
    ) -> Conns {
        let fanout = Fanout::new(
            &shared.config,
            shared.table.clone(),
            interest,
            shared.wall_offset_ns,
            (
                shared.cfg.max_update_hz,
                2 * shared.cfg.price_age_max_ms * crate::clock::NS_PER_MS,
            ),
            monotonic_ns(),
        );
        Conns {
            registry,
            slab: Slab::new(shared.cfg.max_connections_per_shard),
            fanout,
            session_cfg: SessionConfig::from(&shared.cfg),
            rng: SmallRng::from_entropy(),
            stats,
            write_hop,
            room,
            shared,
        }
    }

    /// This shard's index.
    pub(super) fn index(&self) -> usize {
        self.room.index()
    }

    // ---- session calls ------------------------------------------------

    /// Connection `i`'s session and a context for a call at `now`; call
    /// [`Conns::settle`] after it.
    pub(super) fn session_ctx(&mut self, i: usize, now: u64) -> Option<(&mut Session, Ctx<'_>)> {
        let conn = self.slab.conns.get_mut(i)?.as_mut()?;
        let ctx = Ctx {
            now_ns: now,
            input_since_ns: conn.arrival_ns(now),
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
        self.settle(i, now);
        Some(r)
    }

    /// Carries out what connection `i`'s session asked for: a write, and
    /// if it ended, its subscriptions and account slot dropped (at
    /// `now`, monotonic ns).
    pub(super) fn settle(&mut self, i: usize, now: u64) {
        let Some(conn) = self.slab.conns[i].as_mut() else {
            return;
        };
        let fx = conn.session.take_effects();
        if let (Some(ms), Some(a)) = (fx.flood_retry_ms, conn.session.acct()) {
            // Counted from the cut, before the Disconnect is written: a
            // client that waits what it was told is never refused.
            let ip = conn.peer.ip();
            let auth = &self.shared.auth;
            auth.hold_after_flood(a.name.as_bytes(), ip, ms, now);
        }
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
    // ---- writes -------------------------------------------------------

    /// Writes every connection in the write list; with hosted stages,
    /// `hosted` runs between every [`INTERLEAVE_EVERY`] writes. The clock
    /// is read again every [`WRITE_CLOCK_EVERY`] writes: thousands of
    /// writes take tens of ms, and a connection written late in the list
    /// must have its prices judged by their age then (see `gateway::fresh`).
    pub(super) fn flush_writes(&mut self, hosted: &mut HostedTasks, now: u64) {
        let mut list = std::mem::take(&mut self.slab.write_list);
        let hosting = !hosted.is_empty();
        let mut clock = PassClock::new(now, u64::MAX, WRITE_CLOCK_EVERY);
        for (k, &i) in list.iter().enumerate() {
            let now = clock.step(monotonic_ns).unwrap_or(now);
            if let Some(c) = self.slab.conns[i as usize].as_mut() {
                c.in_write_list = false;
            }
            self.contained(i as usize, |c| c.write_conn(i as usize, now));
            if hosting && k % INTERLEAVE_EVERY == INTERLEAVE_EVERY - 1 {
                hosted.between(monotonic_ns());
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
        // Prices given to the connection that waited past the age limit
        // are not handed to the kernel: their keys are owed instead.
        let (tiers, subs, dirty) = (self.fanout.tiers, &mut conn.subs, &mut conn.dirty_subs);
        conn.out.drop_stale_prices(now, |run, written| {
            super::fresh::compact_run(run, written, |f| {
                super::fresh::owe_dropped(f, subs, dirty, tiers);
                self.stats.stale_dropped.inc();
            })
        });
        for _ in 0..2 {
            // Taken before the write, which may empty the buffer; recorded
            // only if the write handed bytes over.
            let age = conn.out.handoff_age_ns(now);
            let before = conn.out.len();
            let res = conn.out.write_to(&mut conn.stream);
            let n = before - conn.out.len();
            self.stats.bytes_written.add(n as u64);
            if n > 0 {
                self.stats.socket_writes.inc();
                if let Some(age) = age {
                    self.stats.handoff_age.record(age);
                }
            }
            conn.out.on_written(n, now);
            if conn.out.wants_look() {
                if let Ok((held, unsent)) = send_queue_bytes(conn.stream.socket()) {
                    conn.out.on_look(held, unsent);
                }
            }
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
        // Input held for want of room for its answers is read again once
        // written bytes (or answers delivered) make the room.
        let resume = conn.is_answer_held() && conn.has_answer_room(now);
        if resume {
            conn.end_answer_hold(now);
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
        if resume {
            self.slab.queue_read(i);
        }
    }

    pub(super) fn queue_write(&mut self, i: usize) {
        self.slab.queue_write(i);
    }
    // ---- accepting ----------------------------------------------------

    /// Registers `stream` with the shard's poller as slot `i`'s socket.
    pub(super) fn register(&self, stream: &mut Link, i: usize) -> std::io::Result<()> {
        let interest = Interest::READABLE | Interest::WRITABLE;
        self.registry.register(stream, Token(i + 1), interest)
    }

    /// Takes a new connection into a free slot, or refuses it with
    /// Disconnect(busy) when there is none.
    pub(super) fn accept(&mut self, mut stream: Link, peer: SocketAddr) {
        // No slot while every free one is promised to a moving session.
        let slot = if self.room.take() {
            self.slab.free.pop()
        } else {
            None
        };
        let Some(i) = slot else {
            self.release_ip(peer);
            let retry = self.jitter(self.shared.cfg.admission.retry_after);
            super::acceptor::refuse_busy(stream, retry, &self.shared);
            return;
        };
        let i = i as usize;
        if self.register(&mut stream, i).is_err() {
            self.slab.free.push(i as u32);
            self.room.give();
            self.release_ip(peer);
            return;
        }
        let conn = self.new_conn(stream, peer, monotonic_ns());
        self.slab.put(i, conn);
        GatewayStats::add(&self.shared.stats.open, 1);
        self.stats.connections.set(self.slab.in_use() as u64);
    }

    /// A new connection's state, its buffers allocated.
    fn new_conn(&self, stream: Link, peer: SocketAddr, now: u64) -> Conn {
        let cfg = &self.shared.cfg;
        let mut session = Session::new(&self.session_cfg, now);
        // The handshake's round trip: the grace of a backoff window.
        let rtt_us = crate::runtime::sys::tcp_rtt_us(stream.socket()).unwrap_or(0);
        session.set_rtt_ns(u64::from(rtt_us) * 1_000);
        Conn {
            stream,
            peer,
            session,
            out: OutBuf::new(cfg.out_cap_bytes, cfg.low_water_bytes, cfg.high_water_bytes)
                .with_final_reserve(super::session::CONTROL_FRAME_MAX)
                .with_age_max(cfg.price_age_max_ms.saturating_mul(1_000_000))
                .with_merge_after(cfg.merge_after_us.saturating_mul(1_000)),
            subs: Vec::with_capacity(cfg.max_subscriptions.min(64)),
            dirty_subs: 0,
            in_write_list: false,
            fin_sent: false,
            in_read_list: false,
            unread_since_ns: 0,
            requests_out: 0,
            last_request_ns: 0,
            answer_marks: super::answer_marks::AnswerMarks::new(),
            logon_ticket: 0,
            window_requests: 0,
            heavy_windows: 0,
            held_since_ns: None,
            answer_held_since_ns: None,
            answer_reserve: 0,
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
        let _ = self.registry.deregister(&mut conn.stream);
        self.room.give();
        self.stats.connections.set(self.slab.in_use() as u64);
        Some(conn)
    }

    /// Sends Disconnect(shutdown) to every session not already closing.
    pub(super) fn disconnect_open(&mut self, now: u64) {
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
    }

    /// Writes what each connection has queued and closes it.
    pub(super) fn close_every(&mut self) {
        for i in 0..self.slab.conns.len() {
            if self.slab.conns[i].is_some() {
                self.contained(i, |c| c.write_conn(i, monotonic_ns()));
                self.close_now(i);
            }
        }
    }

    pub(super) fn release_ip(&self, peer: SocketAddr) {
        self.shared
            .admission
            .lock()
            .expect("admission lock")
            .on_close(peer.ip());
    }

    pub(super) fn jitter(&mut self, w: RetryWindow) -> u32 {
        self.rng.gen_range(w.min_ms..=w.max_ms)
    }
}
