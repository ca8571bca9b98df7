//! A shard's maximum update frequency (time-based conflation) by pace
//! groups: every rate-limited subscription of one key ((symbol, tier))
//! and one interval on a shard is a member of one group, and the group,
//! not the member, gets at most one price per interval. A price that
//! arrives inside the interval is held in the group (only the latest; a
//! newer one replaces it) and delivered to every member at the next slot,
//! when the interval since the group's last delivery has passed, even if
//! no newer price comes.
//!
//! So a price costs O(groups of its key) here, whatever the number of
//! paced subscribers, and an edge's paced fan-out is bounded by members ×
//! allowed rate, not by the feed.
//!
//! A member that joins mid-interval gets its subscribe snapshot at once
//! (outside the pacer) and then the group's next slot, which may come
//! sooner than one interval after that snapshot: the limit holds per
//! group schedule, not from each member's own first price.
//!
//! Sans-IO and clock-free: every call takes the shard's `now` (monotonic
//! ns), so tests drive time. Groups and members live in arenas that grow
//! when a subscription is added (the control path) and are reused when
//! it goes; the price path only writes groups and links them into a
//! timing wheel of [`WHEEL_SLOTS`] buckets of [`TICK_NS`] (intrusive
//! doubly-linked lists, so holding, replacing and unsubscribing are O(1)
//! and nothing allocates). [`Pacer::pop_due`] costs O(due groups) plus
//! the buckets the clock passed since the last call (at most one
//! revolution), never a scan of every group.

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

/// Handle of a paced subscription (a group member); [`PACE_NONE`] for an
/// unlimited one.
pub type PaceId = u32;
/// An unlimited subscription's handle.
pub const PACE_NONE: PaceId = NIL;
/// Handle of a pace group.
pub type GroupId = u32;

/// The minimum interval between deliveries for `hz` updates per second;
/// 0 (unlimited) for `hz == 0`.
pub fn interval_ns(hz: u32) -> u64 {
    if hz == 0 {
        0
    } else {
        1_000_000_000 / u64::from(hz)
    }
}

/// What to do with a price offered to a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Its slot is open: send it to every member now (then call
    /// [`Pacer::sent`]).
    Send,
    /// Held for the next slot (it replaced an older held price if
    /// `replaced`).
    Held {
        /// An older held price was dropped for this one.
        replaced: bool,
    },
}

/// One member of a group: where its subscription lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Connection slot in the shard's slab.
    pub conn: u32,
    /// Subscription slot in the connection's list.
    pub slot: u32,
    /// The member's handle.
    pub id: PaceId,
}

#[derive(Debug)]
struct Group {
    key: u32,
    interval_ns: u64,
    /// Earliest time of the next delivery.
    next_ns: u64,
    /// The wheel tick the held price is due at (when linked).
    due_tick: u64,
    held: Price,
    /// Highest sequence offered to the group, of stream `seen_stream`.
    seen_seq: u64,
    /// The stream of the last price offered (a price of another stream
    /// starts the group's sequences afresh).
    seen_stream: u64,
    linked: bool,
    prev: u32,
    next: u32,
    members: Vec<Member>,
}

/// Where a member is: its group and its position in the member list.
#[derive(Debug, Clone, Copy)]
struct Place {
    group: GroupId,
    pos: u32,
}

/// The pace groups of one shard and their timing wheel.
#[derive(Debug)]
pub struct Pacer {
    groups: Vec<Group>,
    free_groups: Vec<GroupId>,
    /// The groups of each key (a few: one per distinct interval).
    by_key: Vec<Vec<GroupId>>,
    places: Vec<Place>,
    free_members: Vec<PaceId>,
    heads: Box<[u32]>,
    /// The first tick not yet drained.
    cursor: u64,
    /// Groups with a held price (linked in the wheel).
    linked: usize,
}

impl Pacer {
    /// An empty pacer whose clock starts at `now` (monotonic ns).
    pub fn new(now: u64) -> Pacer {
        Pacer {
            groups: Vec::new(),
            free_groups: Vec::new(),
            by_key: Vec::new(),
            places: Vec::new(),
            free_members: Vec::new(),
            heads: vec![NIL; WHEEL_SLOTS].into_boxed_slice(),
            cursor: now >> TICK_SHIFT,
            linked: 0,
        }
    }

    /// Adds subscription (`conn`, `slot`) of `key`, limited to one
    /// delivery per `interval_ns` (> 0), to the group of (`key`,
    /// `interval_ns`), creating it (with its slot open) if there is none.
    /// The control path: this may allocate.
    pub fn add(&mut self, key: u32, conn: u32, slot: u32, interval_ns: u64) -> PaceId {
        debug_assert!(interval_ns > 0);
        let group = self.group_for(key, interval_ns);
        let id = match self.free_members.pop() {
            Some(id) => id,
            None => {
                self.places.push(Place { group, pos: 0 });
                (self.places.len() - 1) as PaceId
            }
        };
        let members = &mut self.groups[group as usize].members;
        members.push(Member { conn, slot, id });
        self.places[id as usize] = Place {
            group,
            pos: (members.len() - 1) as u32,
        };
        id
    }

    fn group_for(&mut self, key: u32, interval_ns: u64) -> GroupId {
        let k = key as usize;
        if self.by_key.len() <= k {
            self.by_key.resize_with(k + 1, Vec::new);
        }
        let found = self.by_key[k]
            .iter()
            .copied()
            .find(|&g| self.groups[g as usize].interval_ns == interval_ns);
        if let Some(g) = found {
            return g;
        }
        let fresh = Group {
            key,
            interval_ns,
            next_ns: 0,
            due_tick: 0,
            held: Price::EMPTY,
            seen_seq: 0,
            seen_stream: 0,
            linked: false,
            prev: NIL,
            next: NIL,
            members: Vec::new(),
        };
        let g = match self.free_groups.pop() {
            Some(g) => {
                // Keep the member list's capacity for the next members.
                let members = std::mem::take(&mut self.groups[g as usize].members);
                self.groups[g as usize] = Group { members, ..fresh };
                g
            }
            None => {
                self.groups.push(fresh);
                (self.groups.len() - 1) as GroupId
            }
        };
        self.by_key[k].push(g);
        g
    }

    /// Takes member `id` out of its group (an unsubscribe, a close, a move
    /// to another shard); the last member's leaving drops the group's held
    /// price and frees the group. Returns whether the group held a price.
    pub fn remove(&mut self, id: PaceId) -> bool {
        let Some(&Place { group, pos }) = self.places.get(id as usize) else {
            return false;
        };
        let gi = group as usize;
        let held = self.groups[gi].linked;
        let members = &mut self.groups[gi].members;
        members.swap_remove(pos as usize);
        if let Some(moved) = members.get(pos as usize) {
            self.places[moved.id as usize].pos = pos;
        }
        self.free_members.push(id);
        if self.groups[gi].members.is_empty() {
            if held {
                self.unlink(group);
            }
            let key = self.groups[gi].key as usize;
            self.by_key[key].retain(|&g| g != group);
            self.free_groups.push(group);
        }
        held
    }

    /// The member's subscription moved to another slot of its
    /// connection's list.
    pub fn set_slot(&mut self, id: PaceId, slot: u32) {
        if let Some(&Place { group, pos }) = self.places.get(id as usize) {
            if let Some(m) = self.groups[group as usize].members.get_mut(pos as usize) {
                m.slot = slot;
            }
        }
    }

    /// Member `id`'s key and entry, if it is in a group (invariant checks).
    pub fn member(&self, id: PaceId) -> Option<(u32, Member)> {
        let p = self.places.get(id as usize)?;
        let g = self.groups.get(p.group as usize)?;
        let m = g.members.get(p.pos as usize).filter(|m| m.id == id)?;
        Some((g.key, *m))
    }

    /// Members over every group (invariant checks).
    pub fn member_total(&self) -> usize {
        self.groups.iter().map(|g| g.members.len()).sum()
    }

    /// The groups of `key` (one per interval its subscribers have).
    #[inline]
    pub fn groups_of(&self, key: usize) -> &[GroupId] {
        self.by_key.get(key).map_or(&[], Vec::as_slice)
    }

    /// The members of group `g`.
    #[inline]
    pub fn members(&self, g: GroupId) -> &[Member] {
        &self.groups[g as usize].members
    }

    /// The highest sequence offered to group `g` so far.
    #[inline]
    pub fn seen_seq(&self, g: GroupId) -> u64 {
        self.groups[g as usize].seen_seq
    }

    /// The stream of the last price offered to group `g`
    /// ([`Pacer::seen_seq`] counts in it).
    #[inline]
    pub fn seen_stream(&self, g: GroupId) -> u64 {
        self.groups[g as usize].seen_stream
    }

    /// Whether group `g` holds a price for its next slot.
    #[inline]
    pub fn holds(&self, g: GroupId) -> bool {
        self.groups[g as usize].linked
    }

    /// Offers price `p` to group `g` at `now`: send it if the interval
    /// since the group's last delivery has passed and nothing is held,
    /// else hold it (the latest wins) for the next slot. O(1), no
    /// allocation.
    #[inline]
    pub fn offer(&mut self, g: GroupId, p: &Price, now: u64) -> Offer {
        let Some(group) = self.groups.get_mut(g as usize) else {
            return Offer::Send;
        };
        if group.seen_stream == p.stream_id {
            group.seen_seq = group.seen_seq.max(p.seq);
        } else {
            (group.seen_stream, group.seen_seq) = (p.stream_id, p.seq);
        }
        if group.linked {
            group.held = *p;
            return Offer::Held { replaced: true };
        }
        if now >= group.next_ns {
            return Offer::Send;
        }
        group.held = *p;
        // The first tick boundary at or after the slot: never early.
        let due_tick = (group.next_ns + TICK_NS - 1) >> TICK_SHIFT;
        group.due_tick = due_tick;
        self.link(g, due_tick);
        Offer::Held { replaced: false }
    }

    /// Group `g` delivered at `now`: its next slot opens at
    /// `now + interval`. Drops a held price older than the one sent.
    #[inline]
    pub fn sent(&mut self, g: GroupId, now: u64) {
        let Some(group) = self.groups.get_mut(g as usize) else {
            return;
        };
        group.next_ns = now + group.interval_ns;
        if group.linked {
            self.unlink(g);
        }
    }

    /// The next group whose held price's slot has come by `now`, and that
    /// price, taken out of the wheel; `None` when nothing more is due.
    pub fn pop_due(&mut self, now: u64) -> Option<(GroupId, Price)> {
        let now_tick = now >> TICK_SHIFT;
        if self.linked == 0 {
            self.cursor = self.cursor.max(now_tick + 1);
            return None;
        }
        // After a long idle stretch one revolution visits every bucket.
        let floor = (now_tick + 1).saturating_sub(WHEEL_SLOTS as u64);
        self.cursor = self.cursor.max(floor);
        while self.cursor <= now_tick {
            let mut g = self.heads[(self.cursor & MASK) as usize];
            while g != NIL {
                let grp = &self.groups[g as usize];
                if grp.due_tick <= now_tick {
                    let held = grp.held;
                    self.unlink(g);
                    return Some((g, held));
                }
                g = grp.next;
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

    /// Groups with a price held now.
    pub fn held(&self) -> usize {
        self.linked
    }

    /// Groups in use (with at least one member).
    pub fn groups(&self) -> usize {
        self.groups.len() - self.free_groups.len()
    }

    fn link(&mut self, g: GroupId, tick: u64) {
        let b = (tick & MASK) as usize;
        let head = self.heads[b];
        {
            let n = &mut self.groups[g as usize];
            debug_assert!(!n.linked, "group {g} linked twice");
            n.linked = true;
            n.prev = NIL;
            n.next = head;
        }
        if head != NIL {
            self.groups[head as usize].prev = g;
        }
        self.heads[b] = g;
        self.linked += 1;
    }

    fn unlink(&mut self, g: GroupId) {
        let (prev, next, due_tick) = {
            let n = &self.groups[g as usize];
            debug_assert!(n.linked, "group {g} not linked");
            (n.prev, n.next, n.due_tick)
        };
        if prev == NIL {
            self.heads[(due_tick & MASK) as usize] = next;
        } else {
            self.groups[prev as usize].next = next;
        }
        if next != NIL {
            self.groups[next as usize].prev = prev;
        }
        let m = &mut self.groups[g as usize];
        m.linked = false;
        m.prev = NIL;
        m.next = NIL;
        self.linked -= 1;
    }
}

#[cfg(test)]
mod tests;
