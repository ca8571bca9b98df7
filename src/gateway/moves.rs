//! Moving sessions between shards (see `spill.rs` for the policy): the
//! steps of a move on the shard that runs the engine and on the shard
//! that adopts the session, over the lanes of `lanes.rs`.

use std::sync::atomic::Ordering;

use mio::{Interest, Token};

use super::conn::{Conn, ANSWER_WAIT_NS};
use super::lanes::release_symbols;
use super::shard::Shard;
use super::shard::{STALL_MIN_NS, SWEEP_NS};
use super::spill::{self, ShardLoad};
use super::GatewayStats;
use crate::clock::monotonic_ns;
use crate::wire::DisconnectReason;

impl Shard {
    // ---- moving sessions between shards (see `spill.rs`) --------------

    /// Closes a measurement window: publishes this shard's busy share and,
    /// on the shard that hosts the engine, decides whether to move a
    /// session away.
    pub(super) fn measure(&mut self, now: u64) {
        let cpu = crate::runtime::sys::thread_cpu_ns();
        let Some(permille) = self.busy.roll(now, cpu) else {
            return;
        };
        self.stats.busy_permille.set(u64::from(permille));
        let heaviest = self.take_window_requests();
        if self.hosts_engine() && self.spill.enabled() {
            // Request-heavy sessions leave first (see `drain.rs`).
            if self.consider_drain(permille, heaviest, now) {
                self.spill_to = None;
                return;
            }
            let sessions = self.stats.connections.get();
            let spill = self.spill;
            self.spill_to = spill.target(permille, sessions, self.peer_loads());
        }
    }

    /// One slot of this shard's room (see [`Peer::room`]).
    pub(super) fn take_room(&self) -> bool {
        self.peers
            .get(self.input.index)
            .is_none_or(|p| p.take_room())
    }

    pub(super) fn give_room(&self) {
        if let Some(p) = self.peers.get(self.input.index) {
            p.give_room();
        }
    }

    /// Only the shard that runs the engine moves sessions away: the engine
    /// publishing on this same thread is what keeps a move gap-free.
    pub(super) fn hosts_engine(&self) -> bool {
        !self.input.hosted.is_empty()
    }

    /// The other shards as the policy sees them, in `self.loads` (sized
    /// at start: a measurement allocates nothing).
    pub(super) fn peer_loads(&mut self) -> &[ShardLoad] {
        self.loads.clear();
        for (k, p) in self.peers.iter().enumerate() {
            if k == self.input.index {
                continue;
            }
            let sessions = p.stats.connections.get() + p.adopt.len() as u64;
            self.loads.push(ShardLoad {
                index: k,
                sessions,
                has_room: !p.adopt.is_full() && p.room.load(Ordering::SeqCst) > 0,
            });
        }
        &self.loads
    }

    /// Moves one session if one is due (measured or asked for).
    pub(super) fn spill_step(&mut self, now: u64) {
        let closing = self.stopping.is_some() || self.disconnecting;
        if !self.hosts_engine() || self.peers.len() < 2 || closing {
            self.spill_forced = 0;
            self.spill_to = None;
            return;
        }
        // Prices the engine holds for this shard's full ring reach the
        // ring only on a later turn, and a moved session would miss them:
        // move once they are through. (Held for another shard's ring, they
        // arrive there late and in order.)
        if self.input.fanout.parked.get() > 0 {
            return;
        }
        // Asked for: the other shard with the fewest sessions and room.
        let to = self
            .spill_to
            .or_else(|| spill::fewest(self.peer_loads()).map(|s| s.index));
        let moved = to.is_some_and(|to| self.spill_one(to, now));
        self.spill_to = None;
        self.spill_forced = if moved {
            self.spill_forced.saturating_sub(1)
        } else {
            0
        };
    }

    /// The session to move: logged on, not held for a draining move, no
    /// request answer on its way here (or none for [`ANSWER_WAIT_NS`]), the
    /// most subscriptions (the most fan-out work), the highest slot on a
    /// tie.
    pub(super) fn pick_mover(&self, now: u64) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for (i, c) in self.slab.conns[..self.slab.live_end].iter().enumerate() {
            let Some(c) = c else { continue };
            let awaited =
                c.requests_out > 0 && now.saturating_sub(c.last_request_ns) < ANSWER_WAIT_NS;
            if !c.is_active() || awaited || c.is_held() {
                continue;
            }
            if best.is_none_or(|(_, n)| c.subs.len() >= n) {
                best = Some((i, c.subs.len()));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Hands one session to shard `to`. The engine publishes on this
    /// thread, so nothing is published while this runs, and every update
    /// stays in sequence:
    ///
    /// 1. this shard drains its own ring (with nothing held for it by the
    ///    engine, see `spill_step`): the session has everything published
    ///    so far; copies of it in `to`'s ring are dropped there by
    ///    sequence number (`deliver`);
    /// 2. `to`'s interest holds the session's symbols, so every later
    ///    price for them goes into `to`'s ring;
    /// 3. the session leaves this shard's index, poller and slab and goes
    ///    into `to`'s lane, with a slot reserved there; `to` attaches it
    ///    before it delivers any price it finds after that (see
    ///    `drain_prices`) and then lets go of the holds.
    ///
    /// Returns false if no session could move.
    pub(super) fn spill_one(&mut self, to: usize, now: u64) -> bool {
        while !self.input.consumer.is_empty() {
            self.drain_prices(now);
        }
        let Some(i) = self.pick_mover(now) else {
            return false;
        };
        if let Some(c) = self.slab.conns[i].as_ref() {
            let (subs, account) = (c.subs.len(), c.account());
            let busy = self.stats.busy_permille.get();
            let share = self.busy.request_share();
            tracing::debug!(
                shard = self.input.index,
                to,
                subs,
                ?account,
                busy,
                share,
                "spilling a session"
            );
        }
        self.move_slot(i, to, now)
    }

    /// Hands the session in slot `i` to shard `to` (steps 2 and 3 of
    /// [`Shard::spill_one`]; the caller drained this shard's ring). A held
    /// session is let go first (its deadlines caught up): the receiver
    /// reads it. Returns false if it stayed (no room, or the lane full).
    pub(super) fn move_slot(&mut self, i: usize, to: usize, now: u64) -> bool {
        let peers = self.peers.clone();
        let peer = &peers[to];
        let tiers = self.fanout.tiers;
        let Some(conn) = self.slab.conns[i].as_ref() else {
            return false;
        };
        if peer.adopt.is_full() || !peer.take_room() {
            return false;
        }
        for sub in &conn.subs {
            peer.interest.hold((sub.key as usize / tiers) as u16);
        }
        for slot in 0..conn.subs.len() {
            self.fanout.unindex(&mut self.slab, i, slot);
        }
        self.slab.write_list.retain(|&k| k as usize != i);
        self.slab.read_list.retain(|&k| k as usize != i);
        let Some(mut conn) = self.release_slot(i) else {
            unreachable!("slot {i} was checked above");
        };
        // A stall this shard has not noted yet (its sweep comes later in
        // this turn) would miss the session: it moves with its deadlines
        // already moved out.
        conn.session
            .on_stall(unnoted_stall_ns(self.last_sweep_ns, now));
        conn.in_write_list = false;
        conn.in_read_list = false;
        conn.unhold(now);
        conn.window_requests = 0;
        conn.heavy_windows = 0;
        // Answers still counted here are long lost (see `pick_mover`).
        conn.requests_out = 0;
        match peer.adopt.try_send(conn) {
            Ok(()) => {
                peer.doorbell.ring();
                self.stats.sessions_moved_out.inc();
                tracing::debug!(shard = self.input.index, to, "session moved");
                true
            }
            Err(e) => {
                // The lane filled or the shard stopped: keep the session
                // (its slot here was freed on this thread just now).
                peer.give_room();
                let conn = e.into_inner();
                release_symbols(&peer.interest, &conn, tiers);
                let kept = if self.take_room() {
                    self.attach(conn)
                } else {
                    Err(conn)
                };
                if let Err(conn) = kept {
                    self.refuse_adoption(conn);
                }
                false
            }
        }
    }

    /// Puts a session that comes from another shard into this one: slab,
    /// poller (a socket with input or room waiting reports it at once),
    /// index and interest. The caller took this shard's room for it; on
    /// failure the room is given back with the session.
    // A rare control step: the session goes back to the caller by value
    // rather than through a heap box.
    #[allow(clippy::result_large_err)]
    pub(super) fn attach(&mut self, mut conn: Conn) -> Result<usize, Conn> {
        let Some(i) = self.slab.free.pop() else {
            self.give_room();
            return Err(conn);
        };
        let i = i as usize;
        let token = Token(i + 1);
        let registered = self.poll.registry().register(
            &mut conn.stream,
            token,
            Interest::READABLE | Interest::WRITABLE,
        );
        if registered.is_err() {
            self.slab.free.push(i as u32);
            self.give_room();
            return Err(conn);
        }
        self.fanout.index_conn(&mut conn, i);
        let owes = !conn.out.is_empty() || conn.dirty_subs > 0;
        self.slab.put(i, conn);
        self.stats.connections.set(self.slab.in_use() as u64);
        if owes {
            self.queue_write(i);
        }
        // Frames left in its inbound buffer (a spent read budget, a hold)
        // raise no socket event here: read it next turn.
        self.slab.queue_read(i);
        Ok(i)
    }

    /// Takes every session another shard handed over.
    pub(super) fn adopt(&mut self) {
        while let Ok(conn) = self.adopt_rx.try_recv() {
            // Shard 0 took this shard's room for it before sending.
            match self.attach(conn) {
                Ok(i) => {
                    // This shard's own holds are in place: the mover's go.
                    if let Some(c) = self.slab.conns[i].as_ref() {
                        release_symbols(self.fanout.interest(), c, self.fanout.tiers);
                    }
                    self.stats.sessions_moved_in.inc();
                    if self.disconnecting || self.stopping.is_some() {
                        // It left a shard that was about to tell it so.
                        let now = monotonic_ns();
                        let retry = self.jitter(self.shared.cfg.shutdown_retry);
                        let text = "server shutting down";
                        self.disconnect(i, DisconnectReason::SHUTDOWN, retry, text, now);
                    }
                }
                Err(conn) => {
                    release_symbols(self.fanout.interest(), &conn, self.fanout.tiers);
                    self.refuse_adoption(conn);
                }
            }
        }
    }

    /// Shard 0 sends no more sessions (it is stopping or disconnecting
    /// everyone): the others may exit once their lanes are empty.
    pub(super) fn close_moves(&mut self) {
        self.spill_forced = 0;
        self.spill_to = None;
        // Only shard 0 sends (while it runs the engine; it may have
        // finished by now).
        if self.input.index == 0 && self.moves_open.swap(false, Ordering::SeqCst) {
            // A stopping shard with nothing left notices at once.
            for p in self.peers.iter().skip(1) {
                p.doorbell.ring();
            }
        }
    }

    /// A session that could not be attached (the poller refused its
    /// socket, or no slot was left): closed, its account slot and IP
    /// count given back, with Disconnect(busy) and a jittered retry-after
    /// if its outbound buffer is empty (otherwise the Disconnect could land
    /// in the middle of a queued frame).
    pub(super) fn refuse_adoption(&mut self, conn: Conn) {
        tracing::warn!(peer = %conn.peer, "a moved session could not be attached; closing it");
        if let Some(account) = conn.account() {
            self.release_account(account);
        }
        self.release_ip(conn.peer);
        GatewayStats::sub(&self.shared.stats.open, 1);
        if conn.out.is_empty() {
            let retry = self.jitter(self.shared.cfg.admission.retry_after);
            super::acceptor::refuse_busy(conn.stream, retry, &self.shared);
        }
    }
}

/// The loop stall at `now` that the sweep has not yet noted: how much later
/// than its period the next sweep comes after the last one at
/// `last_sweep_ns` (0: none yet), if that is a stall (at least
/// [`STALL_MIN_NS`]); else 0. The measure of `Shard::note_stall`.
pub(super) fn unnoted_stall_ns(last_sweep_ns: u64, now: u64) -> u64 {
    let late = now.saturating_sub(last_sweep_ns).saturating_sub(SWEEP_NS);
    if last_sweep_ns == 0 || late < STALL_MIN_NS {
        0
    } else {
        late
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::session::{Session, SessionConfig};

    #[test]
    fn a_session_moved_after_a_stall_carries_it_and_not_otherwise() {
        let ms = 1_000_000;
        let last = 10_000 * ms;
        assert_eq!(unnoted_stall_ns(0, last), 0, "no sweep yet");
        assert_eq!(unnoted_stall_ns(last, last + SWEEP_NS + 20 * ms), 0);
        let stall = 6_000 * ms;
        assert_eq!(unnoted_stall_ns(last, last + SWEEP_NS + stall), stall);
        let cfg = SessionConfig::from(&crate::gateway::GatewayConfig::default());
        let mut s = Session::new(&cfg, last);
        // Waiting for a logon (5 s) through a 6-s stall.
        let before = s.silence_due(&cfg, last + stall);
        s.on_stall(unnoted_stall_ns(last, last + SWEEP_NS + stall));
        assert!(!s.silence_due(&cfg, last + stall));
        assert!(before, "the stall alone would have made it silent");
    }
}
