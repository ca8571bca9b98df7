//! A shard's maximum update frequency (time-based conflation): a
//! subscription limited to N updates/s gets at most one price per 1/N s.
//! A price that arrives inside the interval is held (only the latest; a
//! newer one replaces it) and delivered at the next slot, when the
//! interval since the last delivery has passed, even if no newer price
//! comes.
//!
//! Sans-IO and clock-free: every call takes the shard's `now` (monotonic
//! ns), so tests drive time. Each rate-limited subscription has a node in
//! an arena, allocated when it subscribes (the control path) and freed
//! when it goes; the price path only writes nodes and links them into a
//! timing wheel of [`WHEEL_SLOTS`] buckets of [`TICK_NS`] (intrusive
//! doubly-linked lists, so holding, replacing and unsubscribing are O(1)
//! and nothing allocates). [`Pacer::pop_due`] costs O(due) plus the
//! buckets the clock passed since the last call (at most one revolution),
//! never a scan of every subscription.

use crate::model::Price;

/// log2 of the wheel's tick in ns: 2^20 ns ≈ 1.05 ms.
const TICK_SHIFT: u32 = 20;
/// The wheel's tick: a held price is due at the first tick boundary at
/// or after its slot, so it leaves at most one tick (≈ 1 ms) late.
pub const TICK_NS: u64 = 1 << TICK_SHIFT;
/// Buckets of the wheel: one revolution (≈ 1.07 s) exceeds the longest
/// interval (1 s at [`crate::config::MAX_UPDATE_HZ_MIN`]).
pub const WHEEL_SLOTS: usize = 1024;
const MASK: u64 = WHEEL_SLOTS as u64 - 1;
const NIL: u32 = u32::MAX;

/// Handle of a paced subscription; [`PACE_NONE`] for an unlimited one.
pub type PaceId = u32;
/// An unlimited subscription's handle.
pub const PACE_NONE: PaceId = NIL;

/// The minimum interval between deliveries for `hz` updates per second;
/// 0 (unlimited) for `hz == 0`.
pub fn interval_ns(hz: u32) -> u64 {
    if hz == 0 {
        0
    } else {
        1_000_000_000 / u64::from(hz)
    }
}

/// What to do with a price offered to a paced subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Its slot is open: send it now (then call [`Pacer::sent`]).
    Send,
    /// Held for the next slot (it replaced an older held price if
    /// `replaced`).
    Held {
        /// An older held price was dropped for this one.
        replaced: bool,
    },
}

/// A held price whose slot came: deliver it to `conn`'s subscription
/// `slot`, then call [`Pacer::sent`] with `id`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Due {
    /// The subscription's handle.
    pub id: PaceId,
    /// Connection slot in the shard's slab.
    pub conn: u32,
    /// Subscription slot in the connection's list.
    pub slot: u32,
    /// The latest price held.
    pub price: Price,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    conn: u32,
    slot: u32,
    interval_ns: u64,
    /// Earliest time of the next delivery.
    next_ns: u64,
    /// The wheel tick the held price is due at (when linked).
    due_tick: u64,
    held: Price,
    linked: bool,
    prev: u32,
    next: u32,
}

/// The paced subscriptions of one shard and their timing wheel.
#[derive(Debug)]
pub struct Pacer {
    nodes: Vec<Node>,
    free: Vec<u32>,
    heads: Box<[u32]>,
    /// The first tick not yet drained.
    cursor: u64,
    /// Nodes with a held price (linked in the wheel).
    linked: usize,
}

impl Pacer {
    /// An empty pacer whose clock starts at `now` (monotonic ns).
    pub fn new(now: u64) -> Pacer {
        Pacer {
            nodes: Vec::new(),
            free: Vec::new(),
            heads: vec![NIL; WHEEL_SLOTS].into_boxed_slice(),
            cursor: now >> TICK_SHIFT,
            linked: 0,
        }
    }

    /// Registers a subscription (`conn`, `slot`) limited to one delivery
    /// per `interval_ns` (> 0); its first price goes out at once. The
    /// control path: this may allocate.
    pub fn add(&mut self, conn: u32, slot: u32, interval_ns: u64) -> PaceId {
        debug_assert!(interval_ns > 0);
        let node = Node {
            conn,
            slot,
            interval_ns,
            next_ns: 0,
            due_tick: 0,
            held: Price::EMPTY,
            linked: false,
            prev: NIL,
            next: NIL,
        };
        match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as PaceId
            }
        }
    }

    /// Forgets subscription `id` and any price it held (an unsubscribe, a
    /// close, a move to another shard). Returns whether a price was held.
    pub fn remove(&mut self, id: PaceId) -> bool {
        let Some(node) = self.nodes.get(id as usize) else {
            return false;
        };
        let held = node.linked;
        if held {
            self.unlink(id);
        }
        self.free.push(id);
        held
    }

    /// The subscription moved to another slot of its connection's list.
    pub fn set_slot(&mut self, id: PaceId, slot: u32) {
        if let Some(n) = self.nodes.get_mut(id as usize) {
            n.slot = slot;
        }
    }

    /// Offers price `p` to subscription `id` at `now`: send it if the
    /// interval since the last delivery has passed and nothing is held,
    /// else hold it (the latest wins) for the next slot. The price path:
    /// no allocation.
    #[inline]
    pub fn offer(&mut self, id: PaceId, p: &Price, now: u64) -> Offer {
        let Some(node) = self.nodes.get_mut(id as usize) else {
            return Offer::Send;
        };
        if node.linked {
            node.held = *p;
            return Offer::Held { replaced: true };
        }
        if now >= node.next_ns {
            return Offer::Send;
        }
        node.held = *p;
        // The first tick boundary at or after the slot: never early.
        let due_tick = (node.next_ns + TICK_NS - 1) >> TICK_SHIFT;
        node.due_tick = due_tick;
        self.link(id, due_tick);
        Offer::Held { replaced: false }
    }

    /// A price was delivered to `id` at `now`: the next may go at
    /// `now + interval`. Drops a held price older than the one sent.
    #[inline]
    pub fn sent(&mut self, id: PaceId, now: u64) {
        let Some(node) = self.nodes.get_mut(id as usize) else {
            return;
        };
        node.next_ns = now + node.interval_ns;
        if node.linked {
            self.unlink(id);
        }
    }

    /// The next held price whose slot has come by `now`, taken out of the
    /// wheel; `None` when nothing more is due.
    pub fn pop_due(&mut self, now: u64) -> Option<Due> {
        let now_tick = now >> TICK_SHIFT;
        if self.linked == 0 {
            self.cursor = self.cursor.max(now_tick + 1);
            return None;
        }
        // After a long idle stretch one revolution visits every bucket.
        let floor = (now_tick + 1).saturating_sub(WHEEL_SLOTS as u64);
        self.cursor = self.cursor.max(floor);
        while self.cursor <= now_tick {
            let mut id = self.heads[(self.cursor & MASK) as usize];
            while id != NIL {
                let n = self.nodes[id as usize];
                if n.due_tick <= now_tick {
                    self.unlink(id);
                    return Some(Due {
                        id,
                        conn: n.conn,
                        slot: n.slot,
                        price: n.held,
                    });
                }
                id = n.next;
            }
            self.cursor += 1;
        }
        None
    }

    /// When the earliest held price is due (monotonic ns, rounded to the
    /// wheel's tick), for a shard about to sleep; `None` if none is held.
    pub fn next_due_ns(&self) -> Option<u64> {
        if self.linked == 0 {
            return None;
        }
        (0..WHEEL_SLOTS as u64)
            .map(|k| self.cursor + k)
            .find(|t| self.heads[(t & MASK) as usize] != NIL)
            .map(|t| t << TICK_SHIFT)
    }

    /// Subscriptions with a price held now.
    pub fn held(&self) -> usize {
        self.linked
    }

    fn link(&mut self, id: PaceId, tick: u64) {
        let b = (tick & MASK) as usize;
        let head = self.heads[b];
        {
            let n = &mut self.nodes[id as usize];
            debug_assert!(!n.linked, "node {id} linked twice");
            n.linked = true;
            n.prev = NIL;
            n.next = head;
        }
        if head != NIL {
            self.nodes[head as usize].prev = id;
        }
        self.heads[b] = id;
        self.linked += 1;
    }

    fn unlink(&mut self, id: PaceId) {
        let n = self.nodes[id as usize];
        debug_assert!(n.linked, "node {id} not linked");
        if n.prev == NIL {
            self.heads[(n.due_tick & MASK) as usize] = n.next;
        } else {
            self.nodes[n.prev as usize].next = n.next;
        }
        if n.next != NIL {
            self.nodes[n.next as usize].prev = n.prev;
        }
        let m = &mut self.nodes[id as usize];
        m.linked = false;
        m.prev = NIL;
        m.next = NIL;
        self.linked -= 1;
    }
}

#[cfg(test)]
mod tests;
