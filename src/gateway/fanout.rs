//! Fan-out: prices from the engine ring, encoded once per (symbol, tier)
//! and copied into the outbound buffer of every subscribed connection;
//! the shard's subscription index and symbol interest kept in step;
//! conflation bookkeeping and the snapshots that resync a connection.
//! Subscriptions of an account with a maximum update frequency go through
//! the shard's [`Pacer`] (held prices leave at their slot, see
//! [`Fanout::release_due`]). Nothing on the price path allocates (index
//! lists and pacer nodes grow only when a subscription is added).

use std::sync::Arc;

use super::conn::{Conn, Sub};
use super::outbound::Append;
use super::pacer::{self, Offer, Pacer, PACE_NONE};
use super::slab::Slab;
use super::subs::{SubIndex, Subscriber};
use super::ShardStats;
use crate::engine::{PriceTable, SymbolInterest};
use crate::model::{price_flags, Price};
use crate::wire::{self, PriceBody, PriceKind, SubscribeStatus, PRICE_FRAME_LEN};

/// Offset of the SBE templateId in a frame (after the 6-byte SOFH and the
/// 2-byte blockLength).
const TEMPLATE_ID_OFFSET: usize = 8;

/// A shard's fan-out state: who subscribes to what, and what it needs to
/// encode a price.
pub(super) struct Fanout {
    index: SubIndex,
    /// Subscriptions per symbol (all tiers): the first and the last one
    /// switch the symbol in `interest`.
    sym_subs: Box<[u32]>,
    /// The symbols the engine sends this shard.
    interest: Arc<SymbolInterest>,
    pub(super) tiers: usize,
    digits: Box<[u8]>,
    scratch: [u8; PRICE_FRAME_LEN],
    table: Arc<PriceTable>,
    /// UTC = monotonic + this (see `Shared::wall_offset_ns`).
    wall_offset_ns: i64,
    /// Rate-limited subscriptions and their held prices.
    pacer: Pacer,
    /// `--max-update-hz`: the limit of accounts that set none (0 = none).
    default_hz: u32,
}

/// One encoded price on its way to subscribers.
struct Frame<'a> {
    price: &'a Price,
    /// Sent as a snapshot (a resync point).
    snapshot: bool,
    /// Flagged STALE.
    stale: bool,
    bytes: &'a [u8],
}

impl Fanout {
    pub(super) fn new(
        config: &crate::config::Config,
        table: Arc<PriceTable>,
        interest: Arc<SymbolInterest>,
        wall_offset_ns: i64,
        default_hz: u32,
        now: u64,
    ) -> Fanout {
        let symbols = &config.table;
        let tiers = symbols.tiers().len();
        Fanout {
            index: SubIndex::new(symbols.len() * tiers),
            sym_subs: vec![0; symbols.len()].into_boxed_slice(),
            interest,
            tiers,
            digits: symbols.instruments().iter().map(|i| i.digits).collect(),
            scratch: [0; PRICE_FRAME_LEN],
            table,
            wall_offset_ns,
            pacer: Pacer::new(now),
            default_hz,
        }
    }

    /// The minimum interval between two prices of one subscription of
    /// `acct` (ns; 0 = unlimited): the account's `max_update_hz`, else
    /// `--max-update-hz`.
    pub(super) fn interval_for(&self, acct: Option<&crate::config::Account>) -> u64 {
        let hz = acct
            .and_then(|a| a.max_update_hz)
            .unwrap_or(self.default_hz);
        pacer::interval_ns(hz)
    }

    // ---- prices -------------------------------------------------------

    /// Encodes `p` once per tier and copies it to every subscriber.
    #[inline]
    pub(super) fn on_price(&mut self, p: &Price, slab: &mut Slab, stats: &ShardStats, now: u64) {
        stats.prices_in.inc();
        // The engine sends one price per symbol change (its first tier);
        // every tier is the same top of book with its own markup.
        for tier in 0..self.tiers as u8 {
            let tp = self.table.for_tier(p, tier);
            self.fan_out_tier(&tp, slab, stats, now);
        }
    }

    /// Sends the price table's latest price of every tier of `symbol`,
    /// flagged conflated (a snapshot), to its subscribers: a lagging
    /// shard's catch-up (see `lag.rs`).
    pub(super) fn on_latest(&mut self, symbol: u16, slab: &mut Slab, stats: &ShardStats, now: u64) {
        stats.prices_in.inc();
        for tier in 0..self.tiers as u8 {
            if let Some(mut p) = self.table.read(symbol, tier) {
                p.flags |= price_flags::CONFLATED;
                self.fan_out_tier(&p, slab, stats, now);
            }
        }
    }

    /// Delivers every held price whose slot has come by `now` (O(due)):
    /// a PriceUpdate if it follows the last price sent, else a snapshot
    /// flagged conflated (prices were skipped). Returns how many went out.
    pub(super) fn release_due(&mut self, slab: &mut Slab, stats: &ShardStats, now: u64) -> usize {
        let mut sent = 0;
        while let Some(due) = self.pacer.pop_due(now) {
            let i = due.conn as usize;
            let Some(conn) = slab.conns.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            let Some(sub) = conn.subs.get_mut(due.slot as usize) else {
                continue;
            };
            let mut p = due.price;
            if sub.pace != due.id || p.seq <= sub.last_seq {
                continue;
            }
            if conn.out.is_conflating() {
                mark_owed(sub, &mut conn.dirty_subs);
                stats.conflated.inc();
                continue;
            }
            let skipped = p.seq > sub.last_seq + 1 || p.flags & price_flags::CONFLATED != 0;
            let kind = if skipped {
                p.flags |= price_flags::CONFLATED;
                PriceKind::Snapshot
            } else {
                PriceKind::Update
            };
            let digits = self.digits[p.symbol as usize];
            let n =
                wire::encode_model_price(&mut self.scratch, kind, &p, digits, self.wall_offset_ns);
            let bytes = &self.scratch[..n];
            if append(
                conn,
                due.slot as usize,
                (p.seq, p.flags & price_flags::STALE != 0),
                bytes,
                now,
                stats,
                &mut self.pacer,
            ) {
                stats.paced_released.inc();
                if skipped {
                    stats.paced_conflated.inc();
                }
                sent += 1;
                slab.queue_write(i);
            }
        }
        sent
    }

    /// When the earliest held price is due (monotonic ns), if any: a shard
    /// about to sleep wakes for it.
    pub(super) fn next_due_ns(&self) -> Option<u64> {
        self.pacer.next_due_ns()
    }

    /// Encodes one (symbol, tier) price once and copies it to every
    /// subscriber of that key.
    #[inline]
    fn fan_out_tier(&mut self, p: &Price, slab: &mut Slab, stats: &ShardStats, now: u64) {
        let key = p.symbol as usize * self.tiers + p.tier as usize;
        let subscribers = self.index.subscribers(key);
        if subscribers.is_empty() {
            return;
        }
        // The engine conflated this key: send a resync point, not a delta.
        let kind = if p.flags & price_flags::CONFLATED != 0 {
            PriceKind::Snapshot
        } else {
            PriceKind::Update
        };
        let digits = self.digits[p.symbol as usize];
        let n = wire::encode_model_price(&mut self.scratch, kind, p, digits, self.wall_offset_ns);
        let bytes = &self.scratch[..n];
        // An edge that lost its bus repeats the last price, same sequence,
        // as a stale snapshot, and again without the flag once the bus is
        // back: both must reach subscribers that had that sequence.
        let frame = Frame {
            price: p,
            snapshot: kind == PriceKind::Snapshot,
            stale: p.flags & price_flags::STALE != 0,
            bytes,
        };
        let pacer = &mut self.pacer;
        for s in subscribers {
            if let Some(conn) = slab.conns[s.conn as usize].as_mut() {
                let sent = deliver(conn, s.slot, &frame, now, stats, pacer);
                if sent && !conn.in_write_list {
                    conn.in_write_list = true;
                    slab.write_list.push(s.conn);
                }
            }
        }
    }

    // ---- subscriptions ------------------------------------------------

    /// Subscribes connection `i` to `key` (at most `max` subscriptions);
    /// a new key is pushed to `new_keys` (its snapshot is owed).
    pub(super) fn add(
        &mut self,
        slab: &mut Slab,
        i: usize,
        key: usize,
        (max, interval_ns): (usize, u64),
        new_keys: &mut Vec<u32>,
    ) -> SubscribeStatus {
        let Some(conn) = slab.conns[i].as_mut() else {
            return SubscribeStatus::LIMIT_REACHED;
        };
        if let Some(sub) = conn.subs.iter_mut().find(|s| s.key as usize == key) {
            // Subscribing again is a resync: the snapshot is sent again
            // even if the connection already has the newest price.
            sub.last_seq = 0;
            new_keys.push(key as u32);
            return SubscribeStatus::OK;
        }
        if conn.subs.len() >= max {
            return SubscribeStatus::LIMIT_REACHED;
        }
        let slot = conn.subs.len() as u32;
        let pos = self.index.add(
            key,
            Subscriber {
                conn: i as u32,
                slot,
            },
        );
        let pace = if interval_ns > 0 {
            self.pacer.add(i as u32, slot, interval_ns)
        } else {
            PACE_NONE
        };
        conn.subs.push(Sub {
            key: key as u32,
            pos,
            last_seq: 0,
            dirty: false,
            stale: false,
            pace,
        });
        // Before the snapshot is read (send_snapshots): see SymbolInterest.
        self.hold(key / self.tiers);
        new_keys.push(key as u32);
        SubscribeStatus::OK
    }

    /// Removes subscription `slot` of connection `i`.
    pub(super) fn remove(&mut self, slab: &mut Slab, i: usize, slot: usize) {
        self.unindex(slab, i, slot);
        let Some(conn) = slab.conns[i].as_mut() else {
            return;
        };
        let sub = conn.subs.swap_remove(slot);
        if sub.dirty {
            conn.dirty_subs -= 1;
        }
        if slot < conn.subs.len() {
            let m = conn.subs[slot];
            self.index.set_slot(m.key as usize, m.pos, slot as u32);
            if m.pace != PACE_NONE {
                self.pacer.set_slot(m.pace, slot as u32);
            }
        }
    }

    /// Takes subscription `slot` of connection `i` out of this shard's
    /// index (and the symbol out of its interest if it was the last) and
    /// out of its pacer (a price it held becomes owed: a move's new shard
    /// sends the latest as a resync), leaving the connection's own list as
    /// it is.
    pub(super) fn unindex(&mut self, slab: &mut Slab, i: usize, slot: usize) {
        let Some(conn) = slab.conns[i].as_mut() else {
            return;
        };
        let sub = conn.subs[slot];
        if sub.pace != PACE_NONE {
            let s = &mut conn.subs[slot];
            if self.pacer.remove(sub.pace) {
                mark_owed(s, &mut conn.dirty_subs);
            }
            s.pace = PACE_NONE;
        }
        if let Some(moved) = self.index.remove(sub.key as usize, sub.pos) {
            if let Some(other) = slab.conns[moved.conn as usize].as_mut() {
                other.subs[moved.slot as usize].pos = sub.pos;
            }
        }
        let symbol = sub.key as usize / self.tiers;
        self.sym_subs[symbol] -= 1;
        if self.sym_subs[symbol] == 0 {
            self.interest.release(symbol as u16);
        }
    }

    /// Indexes every subscription of `conn` (a session moved here) as
    /// connection `i`.
    pub(super) fn index_conn(&mut self, conn: &mut Conn, i: usize) {
        let interval_ns = self.interval_for(conn.session.acct().map(|a| &**a));
        for (k, sub) in conn.subs.iter_mut().enumerate() {
            if interval_ns > 0 {
                sub.pace = self.pacer.add(i as u32, k as u32, interval_ns);
            }
            let key = sub.key as usize;
            let s = Subscriber {
                conn: i as u32,
                slot: k as u32,
            };
            sub.pos = self.index.add(key, s);
            self.hold(key / self.tiers);
        }
    }

    fn hold(&mut self, symbol: usize) {
        self.sym_subs[symbol] += 1;
        if self.sym_subs[symbol] == 1 {
            self.interest.hold(symbol as u16);
        }
    }

    /// This shard's symbol interest (see `lanes::release_symbols`).
    pub(super) fn interest(&self) -> &SymbolInterest {
        &self.interest
    }

    // ---- resync -------------------------------------------------------

    /// After draining below low: the latest price of every owed key, as a
    /// snapshot flagged conflated.
    pub(super) fn resync(&mut self, conn: &mut Conn, stats: &ShardStats, now: u64) {
        let n = self.send_owed(conn, price_flags::CONFLATED, now);
        stats.resync_snapshots.add(n);
    }

    /// Initial snapshots after a subscribe (not flagged conflated).
    pub(super) fn resync_fresh(&mut self, conn: &mut Conn, now: u64) {
        self.send_owed(conn, 0, now);
    }

    fn send_owed(&mut self, conn: &mut Conn, flag: u8, now: u64) -> u64 {
        let tiers = self.tiers;
        let mut sent = 0;
        for sub in conn.subs.iter_mut().filter(|s| s.dirty) {
            let (symbol, tier) = (
                (sub.key as usize / tiers) as u16,
                (sub.key as usize % tiers) as u8,
            );
            if let Some(mut p) = self.table.read(symbol, tier) {
                if p.seq > sub.last_seq {
                    p.flags |= flag;
                    let digits = self.digits[symbol as usize];
                    let body = PriceBody::from_price(&p, digits, self.wall_offset_ns);
                    let r = conn.out.append_with(PRICE_FRAME_LEN, |b| {
                        wire::try_encode_price(b, PriceKind::Snapshot, &body).unwrap_or(0)
                    });
                    if r == Append::Overflow {
                        break;
                    }
                    sub.last_seq = p.seq;
                    sub.stale = p.flags & price_flags::STALE != 0;
                    if sub.pace != PACE_NONE {
                        self.pacer.sent(sub.pace, now);
                    }
                    sent += 1;
                }
            }
            sub.dirty = false;
            conn.dirty_subs -= 1;
        }
        if sent > 0 {
            conn.session.note_sent(now);
        }
        conn.out.update_flow(now);
        sent
    }
}

/// Whether a price of sequence `seq` is news to `sub`: a newer sequence,
/// or a restatement — the same sequence again, as a snapshot that sets the
/// stale flag or clears the one this subscriber was last sent (an edge
/// that lost its bus, then heard it again). The same sequence with the
/// same flag (a lagging shard's catch-up re-reading a price it already
/// sent) is not sent twice.
#[inline]
fn is_news(sub: &Sub, seq: u64, snapshot: bool, stale: bool) -> bool {
    seq > sub.last_seq || (seq == sub.last_seq && snapshot && stale != sub.stale)
}

/// Copies one encoded price to one connection, marks it owed if the
/// connection is conflating, or holds it for the subscription's next slot
/// if its update frequency is limited. Returns true if bytes were appended.
#[inline]
fn deliver(
    conn: &mut Conn,
    slot: u32,
    f: &Frame<'_>,
    now: u64,
    stats: &ShardStats,
    pacer: &mut Pacer,
) -> bool {
    let Some(sub) = conn.subs.get_mut(slot as usize) else {
        return false;
    };
    let seq = f.price.seq;
    if !is_news(sub, seq, f.snapshot, f.stale) {
        stats.superseded.inc();
        return false;
    }
    let restate = seq == sub.last_seq;
    if conn.out.is_conflating() {
        mark_owed(sub, &mut conn.dirty_subs);
        stats.conflated.inc();
        return false;
    }
    // A stale restatement is not paced: it must reach the subscriber.
    if sub.pace != PACE_NONE && !restate {
        if let Offer::Held { .. } = pacer.offer(sub.pace, f.price, now) {
            stats.paced_held.inc();
            return false;
        }
    }
    append(
        conn,
        slot as usize,
        (seq, f.stale),
        f.bytes,
        now,
        stats,
        pacer,
    )
}

fn mark_owed(sub: &mut Sub, dirty_subs: &mut u32) {
    if !sub.dirty {
        sub.dirty = true;
        *dirty_subs += 1;
    }
}

/// Appends one encoded price to subscription `slot` of `conn`; an
/// overflow marks it owed. Returns true if bytes were appended.
#[inline]
fn append(
    conn: &mut Conn,
    slot: usize,
    (seq, stale): (u64, bool),
    bytes: &[u8],
    now: u64,
    stats: &ShardStats,
    pacer: &mut Pacer,
) -> bool {
    let Some(sub) = conn.subs.get_mut(slot) else {
        return false;
    };
    // The first price a subscription gets is a snapshot (a resync point),
    // even when the table had no price yet at subscribe time: same body,
    // only the template id in the SBE header differs.
    let first = sub.last_seq == 0;
    let appended = conn.out.append_with(bytes.len(), |b| {
        b[..bytes.len()].copy_from_slice(bytes);
        if first {
            b[TEMPLATE_ID_OFFSET..TEMPLATE_ID_OFFSET + 2]
                .copy_from_slice(&wire::template::PRICE_SNAPSHOT.to_le_bytes());
        }
        bytes.len()
    });
    if appended == Append::Overflow {
        mark_owed(sub, &mut conn.dirty_subs);
        return false;
    }
    sub.last_seq = seq;
    sub.stale = stale;
    if sub.pace != PACE_NONE {
        pacer.sent(sub.pace, now);
    }
    conn.session.note_sent(now);
    stats.prices_out.inc();
    conn.out.update_flow(now);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(last_seq: u64, stale: bool) -> Sub {
        Sub {
            key: 0,
            pos: 0,
            last_seq,
            dirty: false,
            stale,
            pace: PACE_NONE,
        }
    }

    #[test]
    fn a_sequence_is_sent_once_unless_its_stale_flag_changes() {
        let fresh = sub(7, false);
        assert!(is_news(&fresh, 8, false, false), "newer");
        assert!(
            !is_news(&fresh, 6, true, true),
            "older, even as a stale snapshot"
        );
        assert!(!is_news(&fresh, 7, false, false), "same update");
        assert!(!is_news(&fresh, 7, true, false), "same snapshot, same flag");
        assert!(
            !is_news(&fresh, 7, false, true),
            "a stale update is no restatement"
        );
        assert!(is_news(&fresh, 7, true, true), "restated stale");
        let stale = sub(7, true);
        assert!(is_news(&stale, 7, true, false), "restated fresh");
        assert!(!is_news(&stale, 7, true, true), "stale again: already said");
    }
}
