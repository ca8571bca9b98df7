//! Moving sessions between shards (see `spill.rs` and `drain.rs` for when
//! and which): the [`Mover`] owns this shard's ends of the lanes of
//! `lanes.rs` and carries out the steps of a move on the shard that runs
//! the engine and on the shard that adopts the session.
//!
//! The hand-over's invariants (checked by `loom_models.rs`): a session is in exactly one shard's slab or in
//! exactly one lane, never both and never neither; a moved session gets
//! every price published for its symbols once, in sequence, across the
//! move; the receivers exit only once the sender has closed the moves and
//! their lanes are empty.

use std::sync::Arc;

use crossbeam_channel::Receiver;

use super::conn::Conn;
use super::conns::Conns;
use super::lanes::{close_moves, moves_settled, release_symbols, Lanes, MovesClosedOnExit, Peer};
use super::spill::ShardLoad;
use super::sweep::unnoted_stall_ns;
use super::GatewayStats;
use crate::clock::monotonic_ns;
use crate::runtime::sync::AtomicBool;
use crate::wire::DisconnectReason;

/// This shard's part in moving sessions between shards.
pub(super) struct Mover {
    index: usize,
    /// Every shard's hand-over lane (this one's included, by index).
    peers: Arc<[Peer]>,
    /// Sessions handed to this shard by another.
    adopt_rx: Receiver<Conn>,
    /// See [`Lanes`]; cleared by shard 0 once it stops moving sessions.
    moves_open: Arc<AtomicBool>,
    /// Scratch for [`Mover::peer_loads`] (sized at start: a measurement
    /// allocates nothing).
    loads: Vec<ShardLoad>,
}

impl Mover {
    /// Shard `index`'s mover over `lanes` (its inbox taken).
    pub(super) fn new(index: usize, lanes: &mut Lanes) -> Mover {
        Mover {
            index,
            peers: lanes.peers.clone(),
            adopt_rx: lanes.take_inbox(index),
            moves_open: lanes.moves_open.clone(),
            loads: Vec::with_capacity(lanes.peers.len()),
        }
    }

    /// Clears the moves' flag when the shard's thread ends, however it
    /// ends, if this is the shard that sends (see [`Lanes`]).
    pub(super) fn closed_on_exit(&self) -> MovesClosedOnExit {
        MovesClosedOnExit {
            open: self.moves_open.clone(),
            sender: self.index == 0,
        }
    }

    /// How many shards there are.
    pub(super) fn shards(&self) -> usize {
        self.peers.len()
    }

    /// A session is waiting in this shard's lane.
    pub(super) fn has_arrivals(&self) -> bool {
        !self.adopt_rx.is_empty()
    }

    /// No session can come any more: the sender closed the moves and this
    /// shard's lane is empty.
    pub(super) fn settled(&self) -> bool {
        moves_settled(&self.moves_open, || self.adopt_rx.is_empty())
    }

    /// The other shards as the policy sees them (sessions, room).
    pub(super) fn peer_loads(&mut self) -> &[ShardLoad] {
        self.loads.clear();
        for (k, p) in self.peers.iter().enumerate() {
            if k == self.index {
                continue;
            }
            let sessions = p.stats.connections.get() + p.adopt.len() as u64;
            self.loads.push(ShardLoad {
                index: k,
                sessions,
                has_room: !p.adopt.is_full() && p.room.available() > 0,
            });
        }
        &self.loads
    }

    /// Hands the session in slot `i` to shard `to` (steps 2 and 3 of
    /// `Shard::spill_one`; the caller drained this shard's ring). The
    /// engine publishes on this thread, so nothing is published while
    /// this runs. A held session is let go first (its deadlines caught
    /// up): the receiver reads it. `last_sweep_ns`: when this shard's last
    /// sweep ran. Returns false if it stayed (no room, or the lane full).
    pub(super) fn move_slot(
        &mut self,
        conns: &mut Conns,
        i: usize,
        to: usize,
        last_sweep_ns: u64,
        now: u64,
    ) -> bool {
        let peer = &self.peers[to];
        let tiers = conns.fanout.tiers;
        let Some(conn) = conns.slab.conns[i].as_ref() else {
            return false;
        };
        if peer.adopt.is_full() || !peer.take_room() {
            return false;
        }
        for sub in &conn.subs {
            peer.interest.hold((sub.key as usize / tiers) as u16);
        }
        for slot in 0..conn.subs.len() {
            conns.fanout.unindex(&mut conns.slab, i, slot);
        }
        conns.slab.write_list.retain(|&k| k as usize != i);
        conns.slab.read_list.retain(|&k| k as usize != i);
        let Some(mut conn) = conns.release_slot(i) else {
            unreachable!("slot {i} was checked above");
        };
        // A stall this shard has not noted yet (its sweep comes later in
        // this turn) would miss the session: it moves with its deadlines
        // already moved out.
        conn.session.on_stall(unnoted_stall_ns(last_sweep_ns, now));
        conn.in_write_list = false;
        conn.in_read_list = false;
        conn.unhold(now);
        conn.window_requests = 0;
        conn.heavy_windows = 0;
        // Answers still counted here are long lost (see `pick_mover`).
        conn.requests_out = 0;
        conn.end_answer_hold(now);
        conn.answer_reserve = 0;
        match peer.adopt.try_send(conn) {
            Ok(()) => {
                peer.doorbell.ring();
                conns.stats.sessions_moved_out.inc();
                tracing::debug!(shard = self.index, to, "session moved");
                true
            }
            Err(e) => {
                // The lane filled or the shard stopped: keep the session
                // (its slot here was freed on this thread just now).
                peer.give_room();
                let conn = e.into_inner();
                release_symbols(&peer.interest, &conn, tiers);
                let kept = if conns.room.take() {
                    attach(conns, conn)
                } else {
                    Err(conn)
                };
                if let Err(conn) = kept {
                    refuse_adoption(conns, conn);
                }
                false
            }
        }
    }

    /// Takes every session another shard handed over; `closing`: this
    /// shard is stopping or disconnecting everyone, so each is told so.
    pub(super) fn adopt(&mut self, conns: &mut Conns, closing: bool) {
        while let Ok(conn) = self.adopt_rx.try_recv() {
            // Shard 0 took this shard's room for it before sending.
            match attach(conns, conn) {
                Ok(i) => {
                    // This shard's own holds are in place: the mover's go.
                    if let Some(c) = conns.slab.conns[i].as_ref() {
                        release_symbols(conns.fanout.interest(), c, conns.fanout.tiers);
                    }
                    conns.stats.sessions_moved_in.inc();
                    if closing {
                        // It left a shard that was about to tell it so.
                        let now = monotonic_ns();
                        let retry = conns.jitter(conns.shared.cfg.shutdown_retry);
                        let text = "server shutting down";
                        conns.disconnect(i, DisconnectReason::SHUTDOWN, retry, text, now);
                    }
                }
                Err(conn) => {
                    release_symbols(conns.fanout.interest(), &conn, conns.fanout.tiers);
                    refuse_adoption(conns, conn);
                }
            }
        }
    }

    /// Shard 0 sends no more sessions (it is stopping or disconnecting
    /// everyone): the others may exit once their lanes are empty.
    pub(super) fn close(&mut self) {
        // Only shard 0 sends (while it runs the engine; it may have
        // finished by now).
        if self.index == 0 {
            let receivers = self.peers.iter().skip(1).map(|p| &*p.doorbell);
            close_moves(&self.moves_open, receivers);
        }
    }
}

/// The session to move: logged on, not held for a draining move, no
/// request answer on its way here (see [`Conn::answers_awaited`]), the
/// most subscriptions (the most fan-out work), the highest slot on a tie.
pub(super) fn pick_mover(conns: &Conns, now: u64) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (i, c) in conns.slab.conns[..conns.slab.live_end].iter().enumerate() {
        let Some(c) = c else { continue };
        let awaited = c.answers_awaited(now) > 0;
        if !c.is_active() || awaited || c.is_held() {
            continue;
        }
        if best.is_none_or(|(_, n)| c.subs.len() >= n) {
            best = Some((i, c.subs.len()));
        }
    }
    best.map(|(i, _)| i)
}

/// Puts a session that comes from another shard into this one: slab,
/// poller (a socket with input or room waiting reports it at once),
/// index and interest. The caller took this shard's room for it; on
/// failure the room is given back with the session.
// A rare control step: the session goes back to the caller by value
// rather than through a heap box.
#[allow(clippy::result_large_err)]
pub(super) fn attach(conns: &mut Conns, mut conn: Conn) -> Result<usize, Conn> {
    let Some(i) = conns.slab.free.pop() else {
        conns.room.give();
        return Err(conn);
    };
    let i = i as usize;
    if conns.register(&mut conn.stream, i).is_err() {
        conns.slab.free.push(i as u32);
        conns.room.give();
        return Err(conn);
    }
    conns.fanout.index_conn(&mut conn, i);
    let owes = !conn.out.is_empty() || conn.dirty_subs > 0;
    conns.slab.put(i, conn);
    conns.stats.connections.set(conns.slab.in_use() as u64);
    if owes {
        conns.queue_write(i);
    }
    // Frames left in its inbound buffer (a spent read budget, a hold)
    // raise no socket event here: read it next turn.
    conns.slab.queue_read(i);
    Ok(i)
}

/// A session that could not be attached (the poller refused its socket,
/// or no slot was left): closed, its account slot and IP count given
/// back, with Disconnect(busy) and a jittered retry-after if its outbound
/// buffer is empty (otherwise the Disconnect could land in the middle of
/// a queued frame).
pub(super) fn refuse_adoption(conns: &mut Conns, conn: Conn) {
    tracing::warn!(peer = %conn.peer, "a moved session could not be attached; closing it");
    if let Some(account) = conn.account() {
        conns.release_account(account);
    }
    conns.release_ip(conn.peer);
    GatewayStats::sub(&conns.shared.stats.open, 1);
    if conn.out.is_empty() {
        let retry = conns.jitter(conns.shared.cfg.admission.retry_after);
        super::acceptor::refuse_busy(conn.stream, retry, &conns.shared);
    }
}
