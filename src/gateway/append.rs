//! Appending one price to one subscription's connection: the one place
//! every price frame is appended, so the protocol's rules for a price on
//! the wire hold for every path that sends one (fan-out, paced cadences,
//! restatements).

use super::conn::{Conn, Sub};
use super::fanout::skips_a_sequence;
use super::outbound::OutBuf;
use super::ShardStats;
use crate::model::{price_flags, Price};
use crate::wire::{self, SNAPSHOT_FRAME_LEN};

/// Offset of the SBE templateId in a frame (after the 6-byte SOFH and the
/// 2-byte blockLength).
const TEMPLATE_ID_OFFSET: usize = 8;
/// Offset of the PriceFlags byte in a price frame (after the symbol id
/// and the tier of the body).
const FLAGS_OFFSET: usize = wire::HEADER_LEN + 3;

pub(super) fn mark_owed(sub: &mut Sub, dirty_subs: &mut u32) {
    if !sub.dirty {
        sub.dirty = true;
        *dirty_subs += 1;
    }
}

/// Appends one encoded price to subscription `slot` of `conn`, or merges
/// it into the key's unwritten price (see [`put_price`]); an overflow
/// marks it owed. Returns true if the connection has the price to write.
#[inline]
pub(super) fn append(
    conn: &mut Conn,
    slot: usize,
    price: &Price,
    bytes: &[u8],
    now: u64,
    stats: &ShardStats,
) -> bool {
    let Some(sub) = conn.subs.get_mut(slot) else {
        return false;
    };
    match put_price(&mut conn.out, sub, price, bytes, now, stats) {
        Put::Merged => true,
        Put::Appended => {
            conn.session.note_sent(now);
            conn.out.update_flow(now);
            true
        }
        Put::Overflow => {
            mark_owed(sub, &mut conn.dirty_subs);
            false
        }
    }
}

/// What [`put_price`] did with a price.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Put {
    /// Appended as a frame of its own.
    Appended,
    /// Written over the key's unwritten snapshot, in place.
    Merged,
    /// No room: nothing changed.
    Overflow,
}

/// Puts `price` of `sub`'s key, encoded as `bytes`, into `out`:
/// appended, or — once the key's newest unwritten price has waited the
/// merge delay (`--merge-after-us`) — written over it in place
/// ([`merge_in_place`]), so a connection that is not written for a while
/// holds each key's latest once, not every price since its last write.
#[inline]
pub(super) fn put_price(
    out: &mut OutBuf,
    sub: &mut Sub,
    price: &Price,
    bytes: &[u8],
    now: u64,
    stats: &ShardStats,
) -> Put {
    let (stream, seq) = (price.stream_id, price.seq);
    let stale = price.flags & price_flags::STALE != 0;
    let rx = price.receive_time_ns;
    let template = bytes.get(TEMPLATE_ID_OFFSET..TEMPLATE_ID_OFFSET + 2);
    let is_update = template == Some(&wire::template::PRICE_UPDATE.to_le_bytes()[..]);
    let pending = out.unwritten(sub.mark);
    let due = pending.is_some() && now.saturating_sub(sub.unwritten_since) >= out.merge_after_ns();
    // A restatement (the same sequence again, its stale flag turned) is
    // never merged: written over the frame it restates, a second one
    // turning the flag back would repeat what the terminal already had.
    let newer = seq != sub.last_seq || stream != sub.stream;
    if let Some(at) = pending.filter(|_| due && newer && sub.mark_snapshot) {
        if merge_in_place(out, at, (stream, is_update), bytes) {
            out.note_price_rx(rx);
            (sub.last_seq, sub.stream, sub.stale) = (seq, stream, stale);
            stats.merged.inc();
            return Put::Merged;
        }
    }
    // The first price a subscription gets, and the first of a stream other
    // than its last one, is a snapshot (a resync point that names its
    // stream), even when the table had no price yet at subscribe time: an
    // update's body is copied into a snapshot frame with the stream id.
    // So is a price that finds the key's last one waiting past the merge
    // delay as an update (which a snapshot cannot overwrite): newer
    // prices then merge into it.
    let skips = is_update && skips_a_sequence(sub, stream, seq);
    if skips {
        stats.conflated.inc();
    }
    let as_snapshot = is_update && (sub.last_seq == 0 || sub.stream != stream || skips || due);
    let mark = if as_snapshot {
        out.append_price_mark(SNAPSHOT_FRAME_LEN, (now, rx), |b| {
            let n = wire::update_to_snapshot(bytes, stream, b);
            if skips && n > FLAGS_OFFSET {
                b[FLAGS_OFFSET] |= price_flags::CONFLATED;
            }
            n
        })
    } else {
        out.append_price_mark(bytes.len(), (now, rx), |b| {
            b[..bytes.len()].copy_from_slice(bytes);
            bytes.len()
        })
    };
    let Some(mark) = mark else {
        return Put::Overflow;
    };
    let snapshot = as_snapshot || (!is_update && bytes.len() == SNAPSHOT_FRAME_LEN);
    sub.note_appended(mark, snapshot, pending.is_some(), now);
    (sub.last_seq, sub.stream, sub.stale) = (seq, stream, stale);
    stats.prices_out.inc();
    Put::Appended
}

/// Overwrites the key's unwritten PriceSnapshot at `at` with the newer
/// price `bytes` (an update or a snapshot of the key), as a snapshot
/// flagged conflated (it replaced a price the terminal never got): the
/// connection's next write carries the key's latest price once, where its
/// older one was, instead of both. A snapshot resets the terminal's
/// expectation (protocol.md §5), so nothing it sees skips. Returns false,
/// changing nothing, if `bytes` is not a price frame of either length
/// (`is_update`: it is a PriceUpdate, of stream `stream`).
fn merge_in_place(
    out: &mut OutBuf,
    at: usize,
    (stream, is_update): (u64, bool),
    bytes: &[u8],
) -> bool {
    let Some(slot) = out.frame_mut(at, SNAPSHOT_FRAME_LEN) else {
        return false;
    };
    let n = if is_update {
        wire::update_to_snapshot(bytes, stream, slot)
    } else if bytes.len() == SNAPSHOT_FRAME_LEN {
        slot.copy_from_slice(bytes);
        SNAPSHOT_FRAME_LEN
    } else {
        0
    };
    if n != SNAPSHOT_FRAME_LEN {
        return false;
    }
    slot[FLAGS_OFFSET] |= price_flags::CONFLATED;
    true
}

#[cfg(test)]
#[path = "append_tests.rs"]
mod tests;
