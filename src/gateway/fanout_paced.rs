//! The paced half of [`Fanout`]: a price becomes its key's latest in the
//! [`crate::gateway::pacer::Pacer`] (and goes at once to members whose
//! cadence is open), each due cadence's slot sends its members the latest
//! of their keys, and the per-member copy picks an update or a conflated
//! snapshot.

use super::{deliver, encode_plain, Fanout, Frame};
use crate::gateway::append::{append, mark_owed};
use crate::gateway::conn::Sub;
use crate::gateway::pacer::{KeyId, Member};
use crate::gateway::slab::Slab;
use crate::gateway::ShardStats;
use crate::model::price_flags;
use crate::wire::{self, PriceKind};

/// What a member's turn at a price did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// It had the latest already (or is gone).
    Nothing,
    /// It is owed the price (its connection is conflating, or full).
    Owed,
    /// The price was appended for it.
    Sent,
}

impl Fanout {
    /// Makes one encoded (symbol, tier) price the latest of its paced key
    /// and sends it at once to the members whose cadence is open (O(1)
    /// when none is; else O(the key's members)). A restatement (same
    /// sequence, as a snapshot) goes unpaced to the members that had that
    /// sequence.
    #[inline]
    pub(super) fn offer_to_paced(
        &mut self,
        key: usize,
        f: &Frame<'_>,
        slab: &mut Slab,
        stats: &ShardStats,
        now: u64,
    ) {
        let Some(k) = self.pacer.key_of(key) else {
            return;
        };
        let p = f.price;
        let latest = self.pacer.latest(k);
        let same_stream = latest.stream_id == p.stream_id;
        // A stale restatement is not paced: it must reach the members
        // that had that sequence (O(members), only for restatements).
        let restate = f.snapshot && p.seq == latest.seq && same_stream;
        if restate {
            restate_to(self.pacer.members(k), f, slab, stats, now);
        } else if same_stream && p.seq <= latest.seq {
            stats.superseded.inc();
            return;
        }
        // A restatement replaces the latest too: members that did not
        // have its sequence get it, flags and all, at their slot.
        self.pacer.offer(k, p, f.bytes);
        if restate {
            return;
        }
        let open = self.pacer.open_members(k) as usize;
        if self.pacer.members(k).len() > open {
            stats.paced_held.inc();
        }
        if open > 0 {
            self.send_to_open(k, slab, stats, now);
        }
    }

    /// Key `k`'s latest to each member whose cadence is open, closing the
    /// cadence if it sent (or owed) it. A member that had it already (the
    /// ring's copy of its subscribe snapshot) stays open: an open cadence
    /// has the latest of each of its keys.
    fn send_to_open(&mut self, k: KeyId, slab: &mut Slab, stats: &ShardStats, now: u64) {
        // Closing a cadence changes open counts, never the member list.
        for i in 0..self.pacer.members(k).len() {
            if self.pacer.open_members(k) == 0 {
                break;
            }
            let m = self.pacer.members(k)[i];
            if self.pacer.is_open(m.id)
                && self.release_to(k, m, slab, stats, (now, false)) != Release::Nothing
            {
                self.pacer.close(m.id, now);
            }
        }
    }

    /// Serves every cadence whose slot has come by `now`: each member gets
    /// its key's latest price if it has not had it — a PriceUpdate if it
    /// follows the last price sent to it, else a snapshot flagged
    /// conflated (prices were skipped) — all appended in this turn, so a
    /// connection's paced prices share one write. O(due cadences + their
    /// members). Returns how many prices went out.
    pub(in crate::gateway) fn release_due(
        &mut self,
        slab: &mut Slab,
        stats: &ShardStats,
        now: u64,
    ) -> usize {
        let mut sent = 0;
        while let Some(c) = self.pacer.pop_due(now) {
            let mut busy = false;
            for i in 0..self.pacer.cadence_len(c) {
                let (k, m) = self.pacer.cadence_member(c, i);
                match self.release_to(k, m, slab, stats, (now, true)) {
                    Release::Nothing => {}
                    Release::Owed => busy = true,
                    Release::Sent => {
                        busy = true;
                        sent += 1;
                    }
                }
            }
            self.pacer.slot_done(c, now, busy);
        }
        sent
    }

    /// When the earliest slot is due (monotonic ns), if any: a shard about
    /// to sleep wakes for it.
    pub(in crate::gateway) fn next_due_ns(&self) -> Option<u64> {
        self.pacer.next_due_ns()
    }

    /// Key `k`'s latest price to member `m`, unless it had it (with the
    /// same stale flag: a restatement that changes the flag is sent again,
    /// as a snapshot): as the plain encoding if it follows the member's
    /// last price, else as the conflated snapshot (encoded once per
    /// price); flagged stale while the table is behind; marked owed on a
    /// conflating connection.
    /// `at_slot` counts the delivery as released at a slot.
    fn release_to(
        &mut self,
        k: KeyId,
        m: Member,
        slab: &mut Slab,
        stats: &ShardStats,
        (now, at_slot): (u64, bool),
    ) -> Release {
        let Some(conn) = slab.conns.get_mut(m.conn as usize).and_then(Option::as_mut) else {
            return Release::Nothing;
        };
        let Some(sub) = conn.subs.get_mut(m.slot as usize) else {
            return Release::Nothing;
        };
        let (latest, enc) = self.pacer.latest_mut(k);
        let same_stream = latest.stream_id == sub.stream;
        let behind = self.behind.flags_for(latest.symbol);
        let stale = (latest.flags | behind) & price_flags::STALE != 0;
        let had = enc.plain_len == 0
            || (same_stream
                && (latest.seq < sub.last_seq
                    || (latest.seq == sub.last_seq && stale == sub.stale)));
        if sub.pace != m.id || had {
            return Release::Nothing;
        }
        if conn.out.is_conflating() {
            mark_owed(sub, &mut conn.dirty_subs);
            stats.conflated.inc();
            return Release::Owed;
        }
        let mut p = *latest;
        let digits = self.digits[p.symbol as usize];
        let skipped = !same_stream
            || p.seq != sub.last_seq + 1
            || (p.flags | behind) & price_flags::CONFLATED != 0;
        let bytes: &[u8] = if behind & !p.flags != 0 {
            // Rare (a table behind its feeds): encoded for this member.
            stats.behind_flagged.inc();
            p.flags |= behind;
            let n = encode_plain(&mut self.scratch, &p, &self.digits, self.wall_offset_ns);
            &self.scratch[..n]
        } else if skipped {
            if enc.conflated_len == 0 {
                let mut q = p;
                q.flags |= price_flags::CONFLATED;
                enc.conflated_len = wire::encode_model_price(
                    &mut enc.conflated,
                    PriceKind::Snapshot,
                    &q,
                    digits,
                    self.wall_offset_ns,
                );
            }
            &enc.conflated[..enc.conflated_len]
        } else {
            &enc.plain[..enc.plain_len]
        };
        if !append(conn, m.slot as usize, &p, bytes, now, stats) {
            return Release::Owed;
        }
        if at_slot {
            stats.paced_released.inc();
            if skipped {
                stats.paced_conflated.inc();
            }
        }
        if !conn.in_write_list {
            conn.in_write_list = true;
            slab.write_list.push(m.conn);
        }
        Release::Sent
    }
}

/// A restatement (same sequence, as a snapshot) to the members of one
/// paced key that were last sent that sequence, unpaced.
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
