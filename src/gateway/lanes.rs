//! The hand-over lanes between shards: each shard's [`Peer`] (its lane,
//! doorbell, symbol interest and slot room) made before any shard starts,
//! so a busy shard 0 can move a session to any other (see `moves.rs`).

use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use super::conn::Conn;
use super::ShardStats;
use crate::engine::ShardInput;
use crate::engine::SymbolInterest;
use crate::runtime::sync::{AtomicBool, AtomicU64, Ordering};
use crate::runtime::wait::Doorbell;

/// Sessions in transit to one shard (moved off a busy shard 0).
const ADOPT_SLOTS: usize = 64;

/// What another shard needs to hand this shard a session.
pub struct Peer {
    pub(super) adopt: Sender<Conn>,
    pub(super) doorbell: Arc<Doorbell>,
    pub(super) interest: Arc<SymbolInterest>,
    pub(super) stats: Arc<ShardStats>,
    /// Slab slots neither in use nor promised to a session in this
    /// shard's lane (see [`SlotRoom`]).
    pub(super) room: SlotRoom,
}

impl Peer {
    /// One slot, if there is room.
    pub(super) fn take_room(&self) -> bool {
        self.room.take()
    }

    pub(super) fn give_room(&self) {
        self.room.give();
    }

    /// Holds on `symbol` in this shard's interest (tests, diagnostics).
    pub fn symbol_holds(&self, symbol: u16) -> u32 {
        self.interest.holds(symbol)
    }
}

/// Slab slots of one shard neither in use nor promised to a session in
/// its lane. Taken before a slot is used or promised, by the shard itself
/// (accept) or by shard 0 (a move), so a moved session always finds its
/// slot; given back when a slot is freed or a promise is not kept. Never
/// below zero: of two takers racing for the last slot, one fails.
pub(super) struct SlotRoom(AtomicU64);

impl SlotRoom {
    pub(super) fn new(slots: u64) -> SlotRoom {
        SlotRoom(AtomicU64::new(slots))
    }

    /// One slot, if there is room.
    pub(super) fn take(&self) -> bool {
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| r.checked_sub(1))
            .is_ok()
    }

    /// A slot taken earlier is free again.
    pub(super) fn give(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// Slots free right now.
    pub(super) fn available(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Whether a receiving shard may stop waiting for sessions: the sender has
/// closed the moves (`open` false) and the lane is empty. `open` is read
/// first: the sender clears it after its last send, so a receiver that
/// reads it false then finds that send in the lane (checked the other way
/// round, a session sent between the two reads would be left in the lane).
pub(super) fn moves_settled(open: &AtomicBool, lane_empty: impl FnOnce() -> bool) -> bool {
    !open.load(Ordering::SeqCst) && lane_empty()
}

/// The sender closes the moves: no more sessions come. Returns whether
/// they were open; if so every receiver's doorbell rings, so a stopping
/// receiver with nothing left notices at once (see [`moves_settled`]).
pub(super) fn close_moves<'a>(
    open: &AtomicBool,
    receivers: impl Iterator<Item = &'a Doorbell>,
) -> bool {
    if !open.swap(false, Ordering::SeqCst) {
        return false;
    }
    for bell in receivers {
        bell.ring();
    }
    true
}

/// A shard's own slot room in its [`Peer`] (see [`Peer::room`]): taken
/// when a slot is used, given back when one is freed.
pub(super) struct Room {
    peers: Arc<[Peer]>,
    index: usize,
}

impl Room {
    /// Shard `index`'s room among `peers` (none given: unlimited).
    pub(super) fn new(peers: Arc<[Peer]>, index: usize) -> Room {
        Room { peers, index }
    }

    /// The shard's index.
    pub(super) fn index(&self) -> usize {
        self.index
    }

    /// One slot of this shard's room.
    pub(super) fn take(&self) -> bool {
        self.peers.get(self.index).is_none_or(|p| p.take_room())
    }

    pub(super) fn give(&self) {
        if let Some(p) = self.peers.get(self.index) {
            p.give_room();
        }
    }
}

/// Each shard's [`Peer`] and its end of the hand-over lane, made before
/// any shard starts so every shard knows the others.
pub struct Lanes {
    pub peers: Arc<[Peer]>,
    inboxes: Vec<Receiver<Conn>>,
    /// True while shard 0 may still send sessions: the other shards do not
    /// exit on an empty slab before it is false and their lane is empty.
    pub(super) moves_open: Arc<AtomicBool>,
}

impl Lanes {
    /// `slots`: each shard's slab size (`max_connections_per_shard`).
    pub fn new(inputs: &[ShardInput], slots: usize) -> Lanes {
        // Only a shard 0 that runs the engine moves sessions.
        let moves = inputs.len() >= 2 && !inputs[0].hosted.is_empty();
        let (peers, inboxes): (Vec<Peer>, Vec<Receiver<Conn>>) = inputs
            .iter()
            .map(|input| {
                let (tx, rx) = crossbeam_channel::bounded(ADOPT_SLOTS);
                let peer = Peer {
                    adopt: tx,
                    doorbell: input.doorbell.clone(),
                    interest: input.interest.clone(),
                    stats: Arc::new(ShardStats::default()),
                    room: SlotRoom::new(slots as u64),
                };
                (peer, rx)
            })
            .unzip();
        Lanes {
            peers: peers.into(),
            inboxes,
            moves_open: Arc::new(AtomicBool::new(moves)),
        }
    }

    /// Shard `index`'s inbox (taken once).
    pub(super) fn take_inbox(&mut self, index: usize) -> Receiver<Conn> {
        std::mem::replace(&mut self.inboxes[index], crossbeam_channel::never())
    }
}

/// Clears [`Lanes`]' `moves_open` when shard 0's thread ends, however it
/// ends.
pub(super) struct MovesClosedOnExit {
    pub(super) open: Arc<AtomicBool>,
    pub(super) sender: bool,
}

impl Drop for MovesClosedOnExit {
    fn drop(&mut self) {
        if self.sender {
            self.open.store(false, Ordering::SeqCst);
        }
    }
}

/// Lets go of one hold per subscription of `conn` (a moved session's).
pub(super) fn release_symbols(interest: &SymbolInterest, conn: &Conn, tiers: usize) {
    for sub in &conn.subs {
        interest.release((sub.key as usize / tiers) as u16);
    }
}
