//! Appending one price to one subscription's connection: the one place
//! every price frame is appended, so the protocol's rules for a price on
//! the wire hold for every path that sends one (fan-out, pace groups,
//! restatements).

use super::conn::{Conn, Sub};
use super::fanout::skips_a_sequence;
use super::outbound::Append;
use super::ShardStats;
use crate::model::price_flags;
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

/// Appends one encoded price to subscription `slot` of `conn`; an
/// overflow marks it owed. Returns true if bytes were appended.
#[inline]
pub(super) fn append(
    conn: &mut Conn,
    slot: usize,
    (stream, seq, stale): (u64, u64, bool),
    bytes: &[u8],
    now: u64,
    stats: &ShardStats,
) -> bool {
    let Some(sub) = conn.subs.get_mut(slot) else {
        return false;
    };
    // The first price a subscription gets, and the first of a stream other
    // than its last one, is a snapshot (a resync point that names its
    // stream), even when the table had no price yet at subscribe time: an
    // update's body is copied into a snapshot frame with the stream id.
    let template = bytes.get(TEMPLATE_ID_OFFSET..TEMPLATE_ID_OFFSET + 2);
    let is_update = template == Some(&wire::template::PRICE_UPDATE.to_le_bytes()[..]);
    let skips = is_update && skips_a_sequence(sub, stream, seq);
    if skips {
        stats.conflated.inc();
    }
    let appended = if is_update && (sub.last_seq == 0 || sub.stream != stream || skips) {
        conn.out.append_price_with(SNAPSHOT_FRAME_LEN, now, |b| {
            let n = wire::update_to_snapshot(bytes, stream, b);
            if skips && n > FLAGS_OFFSET {
                b[FLAGS_OFFSET] |= price_flags::CONFLATED;
            }
            n
        })
    } else {
        conn.out.append_price_with(bytes.len(), now, |b| {
            b[..bytes.len()].copy_from_slice(bytes);
            bytes.len()
        })
    };
    if appended == Append::Overflow {
        mark_owed(sub, &mut conn.dirty_subs);
        return false;
    }
    sub.last_seq = seq;
    sub.stream = stream;
    sub.stale = stale;
    conn.session.note_sent(now);
    stats.prices_out.inc();
    conn.out.update_flow(now);
    true
}
