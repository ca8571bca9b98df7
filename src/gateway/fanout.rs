//! Fan-out: prices from the engine ring, encoded once per (symbol, tier)
//! and copied into the outbound buffer of every subscribed connection;
//! conflation bookkeeping and the snapshots that resync a connection.
//! Nothing here allocates.

use super::conn::Conn;
use super::outbound::Append;
use super::shard::Shard;
use super::{ShardStats, Shared};
use crate::model::{price_flags, Price};
use crate::wire::{self, PriceBody, PriceKind, PRICE_FRAME_LEN};

/// Most prices taken from the engine ring per turn, so sockets are polled
/// regularly even under a flood of prices.
pub const PRICE_BATCH: usize = 4096;
/// Offset of the SBE templateId in a frame (after the 6-byte SOFH and the
/// 2-byte blockLength).
const TEMPLATE_ID_OFFSET: usize = 8;

impl Shard {
    // ---- prices -------------------------------------------------------

    pub(super) fn drain_prices(&mut self, now: u64) -> usize {
        let n = self.input.consumer.slots().min(PRICE_BATCH);
        // After reading the ring's fill: a session handed over before the
        // first price published after its hand-over is attached before that
        // price is delivered (the push that made it visible came after the
        // send into the lane).
        self.adopt();
        for _ in 0..n {
            if let Ok(p) = self.input.consumer.pop() {
                self.hist
                    .saturating_record(now.saturating_sub(p.receive_time_ns).max(1));
                self.on_price(&p, now);
            }
        }
        if n > 0 {
            self.swap_histogram();
        }
        n
    }

    /// Hands the histogram to the reporter when it asked.
    fn swap_histogram(&mut self) {
        if let Some(x) = &self.exchange {
            x.swap(&mut self.hist);
        }
    }

    /// Encodes `p` once and copies it to every subscriber of its key.
    #[inline]
    fn on_price(&mut self, p: &Price, now: u64) {
        self.stats.prices_in.inc();
        // The engine sends one price per symbol change (its first tier);
        // every tier is the same top of book with its own markup.
        for tier in 0..self.tiers as u8 {
            let tp = self.shared.table.for_tier(p, tier);
            self.fan_out_tier(&tp, now);
        }
    }

    /// Encodes one (symbol, tier) price once and copies it to every
    /// subscriber of that key.
    #[inline]
    fn fan_out_tier(&mut self, p: &Price, now: u64) {
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
        let n = wire::encode_model_price(
            &mut self.scratch,
            kind,
            p,
            digits,
            self.shared.wall_offset_ns,
        );
        let bytes = &self.scratch[..n];
        for s in subscribers {
            if let Some(conn) = self.conns[s.conn as usize].as_mut() {
                if deliver(conn, s.slot, p.seq, bytes, now, &self.stats) && !conn.in_write_list {
                    conn.in_write_list = true;
                    self.write_list.push(s.conn);
                }
            }
        }
    }
}

/// Copies one encoded price to one connection, or marks it owed if the
/// connection is conflating. Returns true if bytes were appended.
#[inline]
pub(super) fn deliver(
    conn: &mut Conn,
    slot: u32,
    seq: u64,
    bytes: &[u8],
    now: u64,
    stats: &ShardStats,
) -> bool {
    let Some(sub) = conn.subs.get_mut(slot as usize) else {
        return false;
    };
    if seq <= sub.last_seq {
        stats.superseded.inc();
        return false;
    }
    if conn.out.is_conflating() {
        if !sub.dirty {
            sub.dirty = true;
            conn.dirty_subs += 1;
        }
        stats.conflated.inc();
        return false;
    }
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
        if !sub.dirty {
            sub.dirty = true;
            conn.dirty_subs += 1;
        }
        return false;
    }
    sub.last_seq = seq;
    conn.session.note_sent(now);
    stats.prices_out.inc();
    conn.out.update_flow(now);
    true
}

/// After draining below low: the latest price of every owed key, as a
/// snapshot flagged conflated.
pub(super) fn resync(
    conn: &mut Conn,
    shared: &Shared,
    tiers: usize,
    digits: &[u8],
    stats: &ShardStats,
    now: u64,
) {
    let n = send_owed(conn, shared, tiers, digits, price_flags::CONFLATED, now);
    stats.resync_snapshots.add(n);
}

/// Initial snapshots after a subscribe (not flagged conflated).
pub(super) fn resync_fresh(
    conn: &mut Conn,
    shared: &Shared,
    tiers: usize,
    digits: &[u8],
    now: u64,
) {
    send_owed(conn, shared, tiers, digits, 0, now);
}

fn send_owed(
    conn: &mut Conn,
    shared: &Shared,
    tiers: usize,
    digits: &[u8],
    flag: u8,
    now: u64,
) -> u64 {
    let mut sent = 0;
    for sub in conn.subs.iter_mut().filter(|s| s.dirty) {
        let (symbol, tier) = (
            (sub.key as usize / tiers) as u16,
            (sub.key as usize % tiers) as u8,
        );
        if let Some(mut p) = shared.table.read(symbol, tier) {
            if p.seq > sub.last_seq {
                p.flags |= flag;
                let body =
                    PriceBody::from_price(&p, digits[symbol as usize], shared.wall_offset_ns);
                let r = conn.out.append_with(PRICE_FRAME_LEN, |b| {
                    wire::try_encode_price(b, PriceKind::Snapshot, &body).unwrap_or(0)
                });
                if r == Append::Overflow {
                    break;
                }
                sub.last_seq = p.seq;
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
