//! The paced half of [`Fanout`]: a price offered to the pace groups of its
//! key, the held prices released at their slots, and the per-member copy
//! that picks an update or a conflated snapshot.

use super::{deliver, encode_plain, Fanout, Frame};
use crate::gateway::append::{append, mark_owed};
use crate::gateway::conn::Sub;
use crate::gateway::pacer::{Member, Offer};
use crate::gateway::slab::Slab;
use crate::gateway::ShardStats;
use crate::model::{price_flags, Price};
use crate::wire::{self, PriceKind, PRICE_SLOT_LEN};

impl Fanout {
    /// Offers one encoded (symbol, tier) price to each pace group of
    /// `key`: sent to the members at once if the group's slot is open,
    /// else held for it.
    #[inline]
    pub(super) fn offer_to_groups(
        &mut self,
        key: usize,
        f: &Frame<'_>,
        slab: &mut Slab,
        stats: &ShardStats,
        now: u64,
    ) {
        let p = f.price;
        self.conflated.len = 0;
        for k in 0..self.pacer.groups_of(key).len() {
            let g = self.pacer.groups_of(key)[k];
            let seen = self.pacer.seen_seq(g);
            let same_stream = self.pacer.seen_stream(g) == p.stream_id;
            // A stale restatement is not paced: it must reach the members
            // that had that sequence (O(members), only for restatements).
            let restate = f.snapshot && p.seq == seen && same_stream;
            if restate {
                restate_to(self.pacer.members(g), f, slab, stats, now);
            }
            let news = p.seq > seen || !same_stream || (restate && self.pacer.holds(g));
            if !news {
                if !restate {
                    stats.superseded.inc();
                }
                continue;
            }
            match self.pacer.offer(g, p, now) {
                Offer::Held { .. } => stats.paced_held.inc(),
                Offer::Send => {
                    let members = self.pacer.members(g);
                    let digits = self.digits[p.symbol as usize];
                    let out = (f.bytes, &mut self.conflated, digits);
                    emit(members, p, out, slab, stats, (now, false));
                    self.pacer.sent(g, now);
                }
            }
        }
    }

    /// Delivers every held price whose slot has come by `now` to its
    /// group's members (O(due groups + their members)), the price encoded
    /// once: to each member a PriceUpdate if it follows the last price sent
    /// to it, else a snapshot flagged conflated (prices were skipped).
    /// Returns how many prices went out.
    pub(in crate::gateway) fn release_due(
        &mut self,
        slab: &mut Slab,
        stats: &ShardStats,
        now: u64,
    ) -> usize {
        let mut sent = 0;
        while let Some((g, mut p)) = self.pacer.pop_due(now) {
            p.flags |= self.behind_flags(p.symbol, stats);
            let n = encode_plain(&mut self.scratch, &p, &self.digits, self.wall_offset_ns);
            self.conflated.len = 0;
            let members = self.pacer.members(g);
            let out = (
                &self.scratch[..n],
                &mut self.conflated,
                self.digits[p.symbol as usize],
            );
            sent += emit(members, &p, out, slab, stats, (now, true));
            self.pacer.sent(g, now);
        }
        sent
    }

    /// When the earliest held price is due (monotonic ns), if any: a shard
    /// about to sleep wakes for it.
    pub(in crate::gateway) fn next_due_ns(&self) -> Option<u64> {
        self.pacer.next_due_ns()
    }
}

/// A restatement (same sequence, as a snapshot) to the members of one
/// pace group that were last sent that sequence, unpaced.
fn restate_to(members: &[Member], f: &Frame<'_>, slab: &mut Slab, stats: &ShardStats, now: u64) {
    for m in members {
        let Some(conn) = slab.conns[m.conn as usize].as_mut() else {
            continue;
        };
        let ours = conn.subs.get(m.slot as usize);
        let had = |s: &Sub| s.last_seq == f.price.seq && s.stream == f.price.stream_id;
        if ours.is_none_or(|s| s.pace != m.id || !had(s)) {
            continue;
        }
        if deliver(conn, m.slot, f, now, stats) && !conn.in_write_list {
            conn.in_write_list = true;
            slab.write_list.push(m.conn);
        }
    }
}

/// A paced price as a snapshot flagged conflated, encoded on first use
/// (`len == 0` until then) for the members that missed prices.
pub(super) struct Conflated {
    pub(super) buf: [u8; PRICE_SLOT_LEN],
    pub(super) len: usize,
    pub(super) wall_offset_ns: i64,
}

impl Conflated {
    fn bytes(&mut self, p: &Price, digits: u8) -> &[u8] {
        if self.len == 0 {
            let mut q = *p;
            q.flags |= price_flags::CONFLATED;
            self.len = wire::encode_model_price(
                &mut self.buf,
                PriceKind::Snapshot,
                &q,
                digits,
                self.wall_offset_ns,
            );
        }
        &self.buf[..self.len]
    }
}

/// Copies one price of a pace group to each of its members that has not
/// had it: as `plain` if it follows the member's last price, else as the
/// conflated snapshot; a conflating member is marked owed. `at_slot`
/// counts the deliveries as released (per member). Returns how many
/// members were sent the price.
fn emit(
    members: &[Member],
    p: &Price,
    (plain, conflated, digits): (&[u8], &mut Conflated, u8),
    slab: &mut Slab,
    stats: &ShardStats,
    (now, at_slot): (u64, bool),
) -> usize {
    let mut sent = 0;
    for m in members {
        let Some(conn) = slab.conns.get_mut(m.conn as usize).and_then(Option::as_mut) else {
            continue;
        };
        let Some(sub) = conn.subs.get_mut(m.slot as usize) else {
            continue;
        };
        let same_stream = p.stream_id == sub.stream;
        if sub.pace != m.id || (same_stream && p.seq <= sub.last_seq) {
            continue;
        }
        if conn.out.is_conflating() {
            mark_owed(sub, &mut conn.dirty_subs);
            stats.conflated.inc();
            continue;
        }
        let skipped =
            !same_stream || p.seq > sub.last_seq + 1 || p.flags & price_flags::CONFLATED != 0;
        let bytes = if skipped {
            conflated.bytes(p, digits)
        } else {
            plain
        };
        if append(conn, m.slot as usize, p, bytes, now, stats) {
            if at_slot {
                stats.paced_released.inc();
                if skipped {
                    stats.paced_conflated.inc();
                }
            }
            sent += 1;
            if !conn.in_write_list {
                conn.in_write_list = true;
                slab.write_list.push(m.conn);
            }
        }
    }
    sent
}
