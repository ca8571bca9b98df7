//! Fan-out: prices from the engine ring, encoded once per (symbol, tier)
//! and copied into the outbound buffer of every subscribed connection;
//! the shard's subscription index and symbol interest kept in step;
//! conflation bookkeeping and the snapshots that resync a connection.
//! Subscriptions of an account with a maximum update frequency are not in
//! the index but members of the shard's [`Pacer`]: a price visits each
//! unlimited subscriber and becomes its paced key's latest, which each
//! member's cadence sends at its own slot (see `fanout_paced.rs`).
//! Nothing on the price path allocates (index lists, paced keys and
//! cadences grow only when a subscription is added).

use std::sync::Arc;

use super::append::{append, mark_owed};
use super::behind::{Behind, Owed};
use super::conn::{Conn, Sub};
use super::pacer::{self, Pacer, PACE_NONE};
use super::slab::Slab;
use super::subs::{SubIndex, Subscriber};
use super::ShardStats;
use crate::engine::{PriceTable, SymbolInterest};
use crate::model::{price_flags, Price};
use crate::wire::{
    self, PriceBody, PriceKind, SubscribeStatus, PRICE_SLOT_LEN, SNAPSHOT_FRAME_LEN,
};

/// `Sub::pos` of a paced subscription (it is in the pacer, not in the
/// index).
const NOT_INDEXED: u32 = u32::MAX;

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
    /// A paced price re-encoded with the stale flags of a table behind.
    scratch: [u8; PRICE_SLOT_LEN],
    table: Arc<PriceTable>,
    /// UTC = monotonic + this (see `Shared::wall_offset_ns`).
    wall_offset_ns: i64,
    /// Rate-limited subscriptions, their keys' latest prices and their
    /// connections' cadences.
    pacer: Pacer,
    /// `--max-update-hz`: the limit of accounts that set none (0 = none).
    default_hz: u32,
    /// Whether the table is behind its engine's input, and the symbols
    /// sent stale because it was.
    behind: Behind,
    /// Subscription changes in progress (index, pacer, per-symbol
    /// counts, interest): raised before one starts and lowered after it
    /// ends, so a panic that unwinds out of one leaves it raised — the
    /// fan-out state is then poisoned and no connection boundary may
    /// contain that fault (see [`Fanout::is_poisoned`]).
    mutating: u32,
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
        (default_hz, behind_after_ns): (u32, u64),
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
            scratch: [0; PRICE_SLOT_LEN],
            table,
            wall_offset_ns,
            pacer: Pacer::new(now),
            default_hz,
            behind: Behind::new(
                (behind_after_ns, config.engine.max_quote_age_ms * 1_000_000),
                symbols.len(),
            ),
            mutating: 0,
        }
    }

    /// A panic unwound out of a subscription change: the index, the pace
    /// keys and cadences or the interest counts may be half-updated.
    pub(super) fn is_poisoned(&self) -> bool {
        self.mutating > 0
    }

    /// Runs one subscription change, poisoning the state if it unwinds.
    fn mutate<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        self.mutating += 1;
        let r = f(self);
        self.mutating -= 1;
        r
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

    /// Reads the engine's progress mark (once per turn, before its
    /// prices): while the table is behind, what this shard sends is
    /// flagged stale; once it has caught up, each symbol sent so is
    /// restated with its latest price (see `behind.rs`).
    pub(super) fn check_progress(&mut self, slab: &mut Slab, stats: &ShardStats, now: u64) {
        match self.behind.check(self.table.progress(), now) {
            Owed::Nothing => {}
            Owed::Restatements => {
                while let Some(symbol) = self.behind.restate() {
                    stats.behind_restated.inc();
                    self.on_latest(symbol, slab, stats, now);
                }
            }
            Owed::AllStale => {
                tracing::warn!(
                    lag_ms = self.table.progress().lag_ns(now) / 1_000_000,
                    "the engine is behind past the max quote age: every \
                     subscribed price restated stale"
                );
                for symbol in 0..self.sym_subs.len() {
                    if self.sym_subs[symbol] > 0 {
                        self.on_latest(symbol as u16, slab, stats, now);
                    }
                }
            }
        }
    }

    /// The flags a price of `symbol` sent now gets because the table is
    /// behind (none while it is not).
    #[inline]
    fn behind_flags(&mut self, symbol: u16, stats: &ShardStats) -> u8 {
        let flags = self.behind.flags_for(symbol);
        if flags != 0 {
            stats.behind_flagged.inc();
        }
        flags
    }

    /// Encodes `p` once per tier and copies it to every subscriber.
    #[inline]
    pub(super) fn on_price(&mut self, p: &Price, slab: &mut Slab, stats: &ShardStats, now: u64) {
        stats.prices_in.inc();
        let flags = self.behind_flags(p.symbol, stats);
        // The engine sends one price per symbol change (its first tier);
        // every tier is the same top of book with its own markup.
        for tier in 0..self.tiers as u8 {
            let mut tp = self.table.for_tier(p, tier);
            tp.flags |= flags;
            self.fan_out_tier(&tp, slab, stats, now);
        }
    }

    /// Sends the price table's latest price of every tier of `symbol`,
    /// flagged conflated (a snapshot), to its subscribers: a lagging
    /// shard's catch-up (see `lag.rs`), a fresh gate's owed symbol, a
    /// restatement once the table caught up.
    pub(super) fn on_latest(&mut self, symbol: u16, slab: &mut Slab, stats: &ShardStats, now: u64) {
        stats.prices_in.inc();
        let flags = price_flags::CONFLATED | self.behind_flags(symbol, stats);
        for tier in 0..self.tiers as u8 {
            if let Some(mut p) = self.table.read(symbol, tier) {
                p.flags |= flags;
                self.fan_out_tier(&p, slab, stats, now);
            }
        }
    }

    /// Encodes one (symbol, tier) price once and copies it to every
    /// unlimited subscriber of that key, then makes it the latest of the
    /// key's paced subscriptions.
    #[inline]
    fn fan_out_tier(&mut self, p: &Price, slab: &mut Slab, stats: &ShardStats, now: u64) {
        let key = p.symbol as usize * self.tiers + p.tier as usize;
        let subscribers = self.index.subscribers(key);
        if subscribers.is_empty() && self.pacer.key_of(key).is_none() {
            return;
        }
        let mut buf = [0; PRICE_SLOT_LEN];
        let n = encode_plain(&mut buf, p, &self.digits, self.wall_offset_ns);
        // An edge that lost its bus repeats the last price, same sequence,
        // as a stale snapshot, and again without the flag once the bus is
        // back: both must reach subscribers that had that sequence.
        let frame = Frame {
            price: p,
            snapshot: p.flags & price_flags::CONFLATED != 0,
            stale: p.flags & price_flags::STALE != 0,
            bytes: &buf[..n],
        };
        for s in subscribers {
            if let Some(conn) = slab.conns[s.conn as usize].as_mut() {
                let sent = deliver(conn, s.slot, &frame, now, stats);
                if sent && !conn.in_write_list {
                    conn.in_write_list = true;
                    slab.write_list.push(s.conn);
                }
            }
        }
        self.offer_to_paced(key, &frame, slab, stats, now);
    }

    // ---- subscriptions ------------------------------------------------

    /// Subscribes connection `i` to `key` (at most `max` subscriptions);
    /// a new key is pushed to `new_keys` (its snapshot is owed).
    pub(super) fn add(
        &mut self,
        slab: &mut Slab,
        i: usize,
        key: usize,
        limits: (usize, u64),
        new_keys: &mut Vec<u32>,
    ) -> SubscribeStatus {
        self.mutate(|f| f.add_sub(slab, i, key, limits, new_keys))
    }

    fn add_sub(
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
        let (pos, pace) = if interval_ns > 0 {
            let pace = self.pacer.add(key as u32, (i as u32, slot), interval_ns);
            (NOT_INDEXED, pace)
        } else {
            let s = Subscriber {
                conn: i as u32,
                slot,
            };
            (self.index.add(key, s), PACE_NONE)
        };
        conn.subs.push(Sub::new(key as u32, pos, pace));
        // Before the snapshot is read (send_snapshots): see SymbolInterest.
        self.hold(key / self.tiers);
        new_keys.push(key as u32);
        SubscribeStatus::OK
    }

    /// Removes subscription `slot` of connection `i`.
    pub(super) fn remove(&mut self, slab: &mut Slab, i: usize, slot: usize) {
        self.mutate(|f| f.remove_sub(slab, i, slot));
    }

    fn remove_sub(&mut self, slab: &mut Slab, i: usize, slot: usize) {
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
            if m.pace == PACE_NONE {
                self.index.set_slot(m.key as usize, m.pos, slot as u32);
            } else {
                self.pacer.set_slot(m.pace, slot as u32);
            }
        }
    }

    /// Takes subscription `slot` of connection `i` out of this shard's
    /// index or pacer (and the symbol out of its interest if it was the
    /// last; a newer price its cadence had yet to send becomes owed: a
    /// move's new shard sends the latest as a resync), leaving the
    /// connection's own list as it is.
    pub(super) fn unindex(&mut self, slab: &mut Slab, i: usize, slot: usize) {
        self.mutate(|f| f.unindex_sub(slab, i, slot));
    }

    fn unindex_sub(&mut self, slab: &mut Slab, i: usize, slot: usize) {
        let Some(conn) = slab.conns[i].as_mut() else {
            return;
        };
        let sub = conn.subs[slot];
        if sub.pace != PACE_NONE {
            let s = &mut conn.subs[slot];
            // Its cadence's next slot would have sent the key's latest.
            if self
                .pacer
                .has_newer(sub.key as usize, (s.stream, s.last_seq))
            {
                mark_owed(s, &mut conn.dirty_subs);
            }
            self.pacer.remove(sub.pace);
            s.pace = PACE_NONE;
            s.pos = NOT_INDEXED;
        } else if let Some(moved) = self.index.remove(sub.key as usize, sub.pos) {
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
        self.mutate(|f| f.index_subs(conn, i));
    }

    fn index_subs(&mut self, conn: &mut Conn, i: usize) {
        let interval_ns = self.interval_for(conn.session.acct().map(|a| &**a));
        for (k, sub) in conn.subs.iter_mut().enumerate() {
            let key = sub.key as usize;
            if interval_ns > 0 {
                sub.pace = self.pacer.add(sub.key, (i as u32, k as u32), interval_ns);
                sub.pos = NOT_INDEXED;
            } else {
                let s = Subscriber {
                    conn: i as u32,
                    slot: k as u32,
                };
                sub.pos = self.index.add(key, s);
            }
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
        let n = self.send_owed(conn, price_flags::CONFLATED, stats, now);
        stats.resync_snapshots.add(n);
    }

    /// Initial snapshots after a subscribe (not flagged conflated).
    pub(super) fn resync_fresh(&mut self, conn: &mut Conn, stats: &ShardStats, now: u64) {
        self.send_owed(conn, 0, stats, now);
    }

    fn send_owed(&mut self, conn: &mut Conn, flag: u8, stats: &ShardStats, now: u64) -> u64 {
        let tiers = self.tiers;
        let mut sent = 0;
        for sub in conn.subs.iter_mut().filter(|s| s.dirty) {
            let (symbol, tier) = (
                (sub.key as usize / tiers) as u16,
                (sub.key as usize % tiers) as u8,
            );
            if let Some(mut p) = self.table.read(symbol, tier) {
                if p.seq > sub.last_seq || p.stream_id != sub.stream {
                    p.flags |= flag | self.behind_flags(symbol, stats);
                    let digits = self.digits[symbol as usize];
                    let body = PriceBody::from_price(&p, digits, self.wall_offset_ns);
                    let pending = conn.out.unwritten(sub.mark).is_some();
                    // Its age counts from its tick's receipt: a table
                    // the engine has not updated (an engine behind its
                    // feed) shows in the hand-off age.
                    let rx = p.receive_time_ns;
                    let r = conn
                        .out
                        .append_price_mark(SNAPSHOT_FRAME_LEN, (now, rx), |b| {
                            wire::try_encode_price(b, PriceKind::Snapshot, &body, p.stream_id)
                                .unwrap_or(0)
                        });
                    let Some(mark) = r else {
                        break;
                    };
                    sub.note_appended(mark, true, pending, now);
                    sub.last_seq = p.seq;
                    sub.stream = p.stream_id;
                    sub.stale = p.flags & price_flags::STALE != 0;
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

/// Whether a price of sequence `seq` of stream `stream` is news to `sub`:
/// a price of another stream than the last one sent (an edge that follows
/// a new stream: its sequences start afresh), a newer sequence, or a
/// restatement — the same sequence again, as a snapshot that sets the
/// stale flag or clears the one this subscriber was last sent (an edge
/// that lost its bus, then heard it again). The same sequence with the
/// same flag (a lagging shard's catch-up re-reading a price it already
/// sent) is not sent twice.
#[inline]
pub(super) fn is_news(sub: &Sub, (stream, seq): (u64, u64), snapshot: bool, stale: bool) -> bool {
    stream != sub.stream
        || seq > sub.last_seq
        || (seq == sub.last_seq && snapshot && stale != sub.stale)
}

/// Whether an update of `seq` on `stream` would skip a sequence of `sub`'s
/// key: it is of the stream last sent and does not follow the last price
/// sent. The protocol never sends a PriceUpdate that skips (protocol.md
/// §5), so `append` sends such a price as a snapshot flagged conflated,
/// whatever dropped the prices between: the ring gate, the compaction of
/// prices a connection could not write in time, an overflow. One check at
/// the one place every price is appended holds the rule for all of them.
#[inline]
pub(super) fn skips_a_sequence(sub: &Sub, stream: u64, seq: u64) -> bool {
    sub.last_seq != 0 && sub.stream == stream && seq != sub.last_seq.wrapping_add(1)
}

/// Copies one encoded price to one unlimited subscription (or restates
/// it to a paced one), or marks it owed if the connection is conflating.
/// Returns true if bytes were appended.
#[inline]
fn deliver(conn: &mut Conn, slot: u32, f: &Frame<'_>, now: u64, stats: &ShardStats) -> bool {
    let Some(sub) = conn.subs.get_mut(slot as usize) else {
        return false;
    };
    let seq = f.price.seq;
    if !is_news(sub, (f.price.stream_id, seq), f.snapshot, f.stale) {
        stats.superseded.inc();
        return false;
    }
    if conn.out.is_conflating() {
        mark_owed(sub, &mut conn.dirty_subs);
        stats.conflated.inc();
        return false;
    }
    append(conn, slot as usize, f.price, f.bytes, now, stats)
}

/// Encodes `p` as every subscriber of its key gets it first: an update,
/// or a snapshot (a resync point) if the engine conflated the key.
/// Returns the frame's length in `buf`.
#[inline]
fn encode_plain(buf: &mut [u8; PRICE_SLOT_LEN], p: &Price, digits: &[u8], wall: i64) -> usize {
    let kind = if p.flags & price_flags::CONFLATED != 0 {
        PriceKind::Snapshot
    } else {
        PriceKind::Update
    };
    wire::encode_model_price(buf, kind, p, digits[p.symbol as usize], wall)
}

#[path = "fanout_paced.rs"]
mod paced;

#[path = "fanout_check.rs"]
mod check;

#[cfg(test)]
#[path = "fanout_tests.rs"]
mod tests;
