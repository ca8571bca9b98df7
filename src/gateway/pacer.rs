//! A shard's maximum update frequency (time-based conflation), paced per
//! connection: the rate-limited subscriptions of one connection with one
//! interval form a **cadence** with slots 1/N s apart at a phase of its
//! own, and at each slot every one of them whose key has a newer price
//! than it was sent gets that price, all in the same turn and so in one
//! write. Between slots the shard only remembers each paced key's latest
//! price (a newer one replaces it), whatever the number of subscribers.
//!
//! Why per connection and not per key: a schedule per (key, interval)
//! released each key to all its subscribers at once, so a shard's paced
//! deliveries bunched onto the same instants and every terminal's prices
//! went out in the same burst (4-Hz terminals read p99 126–184 ms while
//! the server handed over at p99 ≤ 50 ms; BENCHMARKS.md run 38). Each
//! cadence's phase is its own (spread by a golden-ratio sequence over
//! the cadences a shard creates) and stays its own: a late slot does not
//! move the next one, so cadences served in one long turn do not converge.
//!
//! A cadence whose slot finds nothing newer for any of its subscriptions
//! is **open**: it leaves the timing wheel, and the next price of one of
//! its keys goes to it at once (a quiet market's first tick is not held)
//! and closes it again, its next slot the first point of its own grid at
//! least one interval later. A new cadence starts open. Each key counts
//! its members in open cadences, so a price visits a key's members only
//! when one of them is open (O(1) otherwise).
//!
//! The guarantee: a paced subscription gets at most one price per slot
//! of its cadence, slots 1/N s apart, and never more than N in a second
//! on average. Two deliveries come less than 1/N s apart only after a
//! slot served late (a long shard turn: the next slot, or a price sent at
//! once to the cadence that slot opened, may follow it sooner) or right
//! after a subscribe snapshot (the snapshot goes outside the cadence).
//!
//! Sans-IO and clock-free: every call takes the shard's `now` (monotonic
//! ns), so tests drive time. Keys, cadences and members live in arenas
//! that grow when a subscription is added (the control path) and are
//! reused when it goes; the price path writes a key's latest price (and
//! walks the key's members only while one of their cadences is open),
//! and slots only relink cadences in a timing wheel of [`WHEEL_SLOTS`]
//! buckets of [`TICK_NS`] (intrusive doubly-linked lists: O(1), nothing
//! allocates). [`Pacer::pop_due`] costs O(due cadences) plus the buckets
//! the clock passed since the last call, never a scan of every cadence.

use crate::model::Price;
use crate::wire::PRICE_SLOT_LEN;

/// log2 of the wheel's tick in ns: 2^20 ns ≈ 1.05 ms.
const TICK_SHIFT: u32 = 20;
/// The wheel's tick: a slot is due at the first tick boundary at or after
/// it, so it is served at most one tick (≈ 1 ms) late by the wheel.
pub const TICK_NS: u64 = 1 << TICK_SHIFT;
/// Buckets of the wheel: one revolution (≈ 2.1 s) exceeds the furthest
/// slot a cadence is linked at (just under two of the longest interval,
/// 1 s at [`crate::config::MAX_UPDATE_HZ_MIN`]: a cadence closed at once
/// after a grid point), so a bucket holds only cadences due in it.
pub const WHEEL_SLOTS: usize = 2048;
const MASK: u64 = WHEEL_SLOTS as u64 - 1;
const NIL: u32 = u32::MAX;

/// Handle of a paced subscription (a member); [`PACE_NONE`] for an
/// unlimited one.
pub type PaceId = u32;
/// An unlimited subscription's handle.
pub const PACE_NONE: PaceId = NIL;
/// Handle of a paced key's record (its latest price and members).
pub type KeyId = u32;
/// Handle of a cadence (one connection's paced subscriptions of one
/// interval).
pub type CadenceId = u32;

/// The minimum interval between deliveries for `hz` updates per second;
/// 0 (unlimited) for `hz == 0`.
pub fn interval_ns(hz: u32) -> u64 {
    if hz == 0 {
        0
    } else {
        1_000_000_000 / u64::from(hz)
    }
}

/// One paced subscription: where it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Connection slot in the shard's slab.
    pub conn: u32,
    /// Subscription slot in the connection's list.
    pub slot: u32,
    /// The member's handle.
    pub id: PaceId,
}

/// A key's latest price as the fan-out encoded it: as it came, and (on
/// first use, `conflated_len == 0` until then) as a snapshot flagged
/// conflated, for members that missed prices.
#[derive(Debug)]
pub struct Encoded {
    /// The price as offered.
    pub plain: [u8; PRICE_SLOT_LEN],
    /// Bytes of `plain` in use.
    pub plain_len: usize,
    /// The price as a conflated snapshot.
    pub conflated: [u8; PRICE_SLOT_LEN],
    /// Bytes of `conflated` in use (0: not encoded yet).
    pub conflated_len: usize,
}

#[derive(Debug)]
struct Keyed {
    key: u32,
    /// The latest price offered (`Price::EMPTY` before the first).
    latest: Price,
    wire: Encoded,
    members: Vec<Member>,
    /// Members whose cadence is open.
    open: u32,
}

#[derive(Debug)]
struct Cadence {
    conn: u32,
    interval_ns: u64,
    /// The next slot while closed; while open, a point of its grid (the
    /// grid is every `slot_ns + k × interval_ns`).
    slot_ns: u64,
    /// The wheel tick the slot is due at (while linked).
    due_tick: u64,
    linked: bool,
    open: bool,
    prev: u32,
    next: u32,
    members: Vec<PaceId>,
}

/// Where a member is: its key record and cadence, and its position in
/// each one's member list.
#[derive(Debug, Clone, Copy)]
struct Place {
    key: KeyId,
    key_pos: u32,
    cadence: CadenceId,
    cadence_pos: u32,
}

/// The paced keys and cadences of one shard, and their timing wheel.
#[derive(Debug)]
pub struct Pacer {
    keys: Vec<Keyed>,
    free_keys: Vec<KeyId>,
    /// The record of each key ([`NIL`]: none).
    by_key: Vec<KeyId>,
    cadences: Vec<Cadence>,
    free_cadences: Vec<CadenceId>,
    /// The cadences of each connection (one per interval its
    /// subscriptions have: nearly always one).
    by_conn: Vec<Vec<CadenceId>>,
    places: Vec<Place>,
    free_members: Vec<PaceId>,
    heads: Box<[u32]>,
    /// The first tick not yet drained.
    cursor: u64,
    /// Cadences in the wheel.
    linked: usize,
    /// Cadences created so far: the next one's phase.
    phases: u64,
}

/// The first point of the grid `phase + k × interval` at or after `t`.
#[inline]
fn grid_at_or_after(phase_of: u64, interval: u64, t: u64) -> u64 {
    let phase = phase_of % interval;
    t + (phase + interval - t % interval) % interval
}

impl Pacer {
    /// An empty pacer whose clock starts at `now` (monotonic ns).
    pub fn new(now: u64) -> Pacer {
        Pacer {
            keys: Vec::new(),
            free_keys: Vec::new(),
            by_key: Vec::new(),
            cadences: Vec::new(),
            free_cadences: Vec::new(),
            by_conn: Vec::new(),
            places: Vec::new(),
            free_members: Vec::new(),
            heads: vec![NIL; WHEEL_SLOTS].into_boxed_slice(),
            cursor: now >> TICK_SHIFT,
            linked: 0,
            phases: 0,
        }
    }

    /// Adds subscription (`conn`, `slot`) of `key`, limited to one
    /// delivery per `interval_ns` (> 0), to the cadence of (`conn`,
    /// `interval_ns`), creating it (open, at a phase of its own) if there
    /// is none. The control path: this may allocate.
    pub fn add(&mut self, key: u32, (conn, slot): (u32, u32), interval_ns: u64) -> PaceId {
        debug_assert!(interval_ns > 0);
        let k = self.key_for(key);
        let c = self.cadence_for(conn, interval_ns);
        let id = match self.free_members.pop() {
            Some(id) => id,
            None => {
                self.places.push(Place {
                    key: k,
                    key_pos: 0,
                    cadence: c,
                    cadence_pos: 0,
                });
                (self.places.len() - 1) as PaceId
            }
        };
        let rec = &mut self.keys[k as usize];
        rec.members.push(Member { conn, slot, id });
        let cad = &mut self.cadences[c as usize];
        cad.members.push(id);
        if cad.open {
            rec.open += 1;
        }
        self.places[id as usize] = Place {
            key: k,
            key_pos: (rec.members.len() - 1) as u32,
            cadence: c,
            cadence_pos: (cad.members.len() - 1) as u32,
        };
        id
    }

    fn key_for(&mut self, key: u32) -> KeyId {
        let i = key as usize;
        if self.by_key.len() <= i {
            self.by_key.resize(i + 1, NIL);
        }
        if self.by_key[i] != NIL {
            return self.by_key[i];
        }
        let fresh = |members| Keyed {
            key,
            latest: Price::EMPTY,
            wire: Encoded {
                plain: [0; PRICE_SLOT_LEN],
                plain_len: 0,
                conflated: [0; PRICE_SLOT_LEN],
                conflated_len: 0,
            },
            members,
            open: 0,
        };
        let k = match self.free_keys.pop() {
            Some(k) => {
                // Keep the member list's capacity for the next members.
                let members = std::mem::take(&mut self.keys[k as usize].members);
                self.keys[k as usize] = fresh(members);
                k
            }
            None => {
                self.keys.push(fresh(Vec::new()));
                (self.keys.len() - 1) as KeyId
            }
        };
        self.by_key[i] = k;
        k
    }

    fn cadence_for(&mut self, conn: u32, interval_ns: u64) -> CadenceId {
        let i = conn as usize;
        if self.by_conn.len() <= i {
            self.by_conn.resize_with(i + 1, Vec::new);
        }
        let found = self.by_conn[i]
            .iter()
            .copied()
            .find(|&c| self.cadences[c as usize].interval_ns == interval_ns);
        if let Some(c) = found {
            return c;
        }
        // Golden-ratio phases: each new cadence lands in the largest gap
        // the ones before it left, so cadences made in the same turn (a
        // logon herd) are spread over the interval, not bunched.
        let frac = self.phases.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        self.phases += 1;
        // Open, so only its phase counts until it first closes.
        let fresh = |members| Cadence {
            conn,
            interval_ns,
            slot_ns: (frac * interval_ns) >> 32,
            due_tick: 0,
            linked: false,
            open: true,
            prev: NIL,
            next: NIL,
            members,
        };
        let c = match self.free_cadences.pop() {
            Some(c) => {
                let members = std::mem::take(&mut self.cadences[c as usize].members);
                self.cadences[c as usize] = fresh(members);
                c
            }
            None => {
                self.cadences.push(fresh(Vec::new()));
                (self.cadences.len() - 1) as CadenceId
            }
        };
        self.by_conn[i].push(c);
        c
    }

    /// Takes member `id` out of its key and cadence (an unsubscribe, a
    /// close, a move to another shard); a key or cadence left without
    /// members is freed.
    pub fn remove(&mut self, id: PaceId) {
        let Some(&place) = self.places.get(id as usize) else {
            return;
        };
        let (k, c) = (place.key as usize, place.cadence as usize);
        let members = &mut self.keys[k].members;
        members.swap_remove(place.key_pos as usize);
        if let Some(moved) = members.get(place.key_pos as usize) {
            self.places[moved.id as usize].key_pos = place.key_pos;
        }
        let cad = &mut self.cadences[c];
        cad.members.swap_remove(place.cadence_pos as usize);
        if let Some(&moved) = cad.members.get(place.cadence_pos as usize) {
            self.places[moved as usize].cadence_pos = place.cadence_pos;
        }
        if cad.open {
            self.keys[k].open -= 1;
        }
        self.free_members.push(id);
        if self.keys[k].members.is_empty() {
            let key = self.keys[k].key as usize;
            self.by_key[key] = NIL;
            self.free_keys.push(place.key);
        }
        if self.cadences[c].members.is_empty() {
            if self.cadences[c].linked {
                self.unlink(place.cadence);
            }
            let conn = self.cadences[c].conn as usize;
            self.by_conn[conn].retain(|&x| x != place.cadence);
            self.free_cadences.push(place.cadence);
        }
    }

    /// The member's subscription moved to another slot of its
    /// connection's list.
    pub fn set_slot(&mut self, id: PaceId, slot: u32) {
        if let Some(&p) = self.places.get(id as usize) {
            if let Some(m) = self.keys[p.key as usize]
                .members
                .get_mut(p.key_pos as usize)
            {
                m.slot = slot;
            }
        }
    }

    /// Member `id`'s key and entry, if it is paced (invariant checks).
    pub fn member(&self, id: PaceId) -> Option<(u32, Member)> {
        let p = self.places.get(id as usize)?;
        let k = self.keys.get(p.key as usize)?;
        let m = k.members.get(p.key_pos as usize).filter(|m| m.id == id)?;
        let c = self.cadences.get(p.cadence as usize)?;
        let here = c.conn == m.conn && c.members.get(p.cadence_pos as usize) == Some(&id);
        here.then_some((k.key, *m))
    }

    /// Members over every key (invariant checks).
    pub fn member_total(&self) -> usize {
        // A freed record has no members.
        self.keys.iter().map(|k| k.members.len()).sum()
    }

    // ---- the price path ---------------------------------------------

    /// The record of `key`, if it has paced members.
    #[inline]
    pub fn key_of(&self, key: usize) -> Option<KeyId> {
        self.by_key.get(key).copied().filter(|&k| k != NIL)
    }

    /// The latest price offered to key `k` (`Price::EMPTY` before the
    /// first).
    #[inline]
    pub fn latest(&self, k: KeyId) -> &Price {
        &self.keys[k as usize].latest
    }

    /// Whether `key` has a latest price newer than `(stream, seq)`, the
    /// last one a member was sent.
    pub fn has_newer(&self, key: usize, (stream, seq): (u64, u64)) -> bool {
        self.key_of(key).is_some_and(|k| {
            let rec = &self.keys[k as usize];
            rec.wire.plain_len > 0 && (rec.latest.stream_id != stream || rec.latest.seq > seq)
        })
    }

    /// The latest price of key `k`, and its encodings to fill in.
    #[inline]
    pub fn latest_mut(&mut self, k: KeyId) -> (&Price, &mut Encoded) {
        let rec = &mut self.keys[k as usize];
        (&rec.latest, &mut rec.wire)
    }

    /// Key `k`'s latest price is now `p`, encoded as `bytes` (its
    /// conflated encoding is made again on first use). O(1).
    #[inline]
    pub fn offer(&mut self, k: KeyId, p: &Price, bytes: &[u8]) {
        let rec = &mut self.keys[k as usize];
        rec.latest = *p;
        rec.wire.plain[..bytes.len()].copy_from_slice(bytes);
        rec.wire.plain_len = bytes.len();
        rec.wire.conflated_len = 0;
    }

    /// The members of key `k`.
    #[inline]
    pub fn members(&self, k: KeyId) -> &[Member] {
        &self.keys[k as usize].members
    }

    /// Members of key `k` whose cadence is open.
    #[inline]
    pub fn open_members(&self, k: KeyId) -> u32 {
        self.keys[k as usize].open
    }

    /// Whether member `id`'s cadence is open.
    #[inline]
    pub fn is_open(&self, id: PaceId) -> bool {
        let c = self.places[id as usize].cadence;
        self.cadences[c as usize].open
    }

    /// Member `id`'s cadence was sent a price at `now` while open: it
    /// closes, its next slot the first point of its grid at least one
    /// interval after `now`. O(its members).
    pub fn close(&mut self, id: PaceId, now: u64) {
        let c = self.places[id as usize].cadence;
        let cad = &mut self.cadences[c as usize];
        if !cad.open {
            return;
        }
        cad.open = false;
        cad.slot_ns = grid_at_or_after(cad.slot_ns, cad.interval_ns, now + cad.interval_ns);
        for k in 0..self.cadences[c as usize].members.len() {
            let m = self.cadences[c as usize].members[k];
            self.keys[self.places[m as usize].key as usize].open -= 1;
        }
        self.link(c);
    }

    // ---- slots ----------------------------------------------------------

    /// The next cadence whose slot has come by `now`, taken out of the
    /// wheel; `None` when nothing more is due. Serve its members
    /// ([`Pacer::cadence_member`]), then call [`Pacer::slot_done`].
    pub fn pop_due(&mut self, now: u64) -> Option<CadenceId> {
        let now_tick = now >> TICK_SHIFT;
        if self.linked == 0 {
            self.cursor = self.cursor.max(now_tick + 1);
            return None;
        }
        // After a long idle stretch one revolution visits every bucket.
        let floor = (now_tick + 1).saturating_sub(WHEEL_SLOTS as u64);
        self.cursor = self.cursor.max(floor);
        while self.cursor <= now_tick {
            let mut c = self.heads[(self.cursor & MASK) as usize];
            while c != NIL {
                let cad = &self.cadences[c as usize];
                if cad.due_tick <= now_tick {
                    self.unlink(c);
                    return Some(c);
                }
                c = cad.next;
            }
            self.cursor += 1;
        }
        None
    }

    /// Members of cadence `c`.
    #[inline]
    pub fn cadence_len(&self, c: CadenceId) -> usize {
        self.cadences[c as usize].members.len()
    }

    /// The `i`th member of cadence `c` and its key.
    #[inline]
    pub fn cadence_member(&self, c: CadenceId, i: usize) -> (KeyId, Member) {
        let id = self.cadences[c as usize].members[i];
        let p = self.places[id as usize];
        (p.key, self.keys[p.key as usize].members[p.key_pos as usize])
    }

    /// Cadence `c`'s slot was served at `now`: if it sent (or owed)
    /// something, its next slot is the first point of its grid after
    /// `now`; if nothing was newer, it opens. O(1), or O(its members) to
    /// open.
    pub fn slot_done(&mut self, c: CadenceId, now: u64, busy: bool) {
        let cad = &mut self.cadences[c as usize];
        if busy {
            cad.slot_ns = grid_at_or_after(cad.slot_ns, cad.interval_ns, now + 1);
            self.link(c);
            return;
        }
        cad.open = true;
        for k in 0..self.cadences[c as usize].members.len() {
            let m = self.cadences[c as usize].members[k];
            self.keys[self.places[m as usize].key as usize].open += 1;
        }
    }

    /// When the earliest slot is due (monotonic ns, rounded to the wheel's
    /// tick), for a shard about to sleep; `None` if no cadence is closed.
    pub fn next_due_ns(&self) -> Option<u64> {
        if self.linked == 0 {
            return None;
        }
        (0..WHEEL_SLOTS as u64)
            .map(|k| self.cursor + k)
            .find(|t| self.heads[(t & MASK) as usize] != NIL)
            .map(|t| t << TICK_SHIFT)
    }

    /// Cadences waiting for a slot (closed).
    pub fn scheduled(&self) -> usize {
        self.linked
    }

    /// Cadences in use (with at least one member).
    pub fn cadences(&self) -> usize {
        self.cadences.len() - self.free_cadences.len()
    }

    /// Keys with paced members.
    pub fn keys(&self) -> usize {
        self.keys.len() - self.free_keys.len()
    }

    fn link(&mut self, c: CadenceId) {
        let tick = {
            let cad = &self.cadences[c as usize];
            // The first tick boundary at or after the slot: never early.
            (cad.slot_ns + TICK_NS - 1) >> TICK_SHIFT
        };
        let b = (tick & MASK) as usize;
        let head = self.heads[b];
        {
            let n = &mut self.cadences[c as usize];
            debug_assert!(!n.linked, "cadence {c} linked twice");
            n.due_tick = tick;
            n.linked = true;
            n.prev = NIL;
            n.next = head;
        }
        if head != NIL {
            self.cadences[head as usize].prev = c;
        }
        self.heads[b] = c;
        self.linked += 1;
    }

    fn unlink(&mut self, c: CadenceId) {
        let (prev, next, due_tick) = {
            let n = &self.cadences[c as usize];
            debug_assert!(n.linked, "cadence {c} not linked");
            (n.prev, n.next, n.due_tick)
        };
        if prev == NIL {
            self.heads[(due_tick & MASK) as usize] = next;
        } else {
            self.cadences[prev as usize].next = next;
        }
        if next != NIL {
            self.cadences[next as usize].prev = prev;
        }
        let m = &mut self.cadences[c as usize];
        m.linked = false;
        m.prev = NIL;
        m.next = NIL;
        self.linked -= 1;
    }
}

#[cfg(test)]
mod tests;
