//! Freshness, the fan-out's invariant: a price handed to the kernel for a
//! connection is at most [`GatewayConfig::price_age_max_ms`] old (since
//! this process received it), or it is not sent and the connection's
//! next price for that key is the latest one, as a snapshot flagged
//! conflated. Two gates keep it:
//!
//! - **the ring gate** (`FreshGate`): a price the shard takes off its
//!   engine ring older than the limit is not fanned out as an update; the
//!   symbol is owed, and once the batch is taken every owed symbol's
//!   latest price (the price table's) goes to its subscribers flagged
//!   conflated. A shard that falls behind its ring therefore catches up in
//!   one pass instead of working through a backlog of up to 65,536 prices
//!   (an edge overloaded by 10,000 terminals × 5 symbols at 10k ticks/s
//!   delivered prices 12–17 s old, and kept delivering for 11 s after the
//!   feed stopped, before both gates: measured for issue #28);
//! - **the connection gate** (`outbound.rs`, `sendq.rs`): bytes queued
//!   for one connection, in its outbound buffer and in its kernel send
//!   queue, are bounded in bytes and in age; a connection whose queue is
//!   too old stops taking updates (it conflates), and prices it was given
//!   and could not write within the limit are dropped before the write
//!   (`compact_run` and `owe_dropped` here): the latest of each key
//!   goes out as a conflated snapshot once the connection drains.
//!
//! The ring gate costs one subtraction per price and allocates nothing:
//! the owed flags are sized to the symbol table at start.
//!
//! [`GatewayConfig::price_age_max_ms`]: super::GatewayConfig::price_age_max_ms

use super::conn::Sub;
use super::conns::Conns;
use crate::model::Price;
use crate::wire::frame::{HEADER_LEN, SOFH_LEN};
use crate::wire::template;

/// Default of `--price-age-max-ms`.
pub const PRICE_AGE_MAX_MS_DEFAULT: u64 = 20;
/// Largest `--price-age-max-ms`.
pub const PRICE_AGE_MAX_MS_MAX: u64 = 60_000;

/// Refuses a price age limit out of range (the flag's check).
pub(super) fn check_price_age_max_ms(ms: u64) -> Result<(), super::SettingsError> {
    if ms == 0 || ms > PRICE_AGE_MAX_MS_MAX {
        let range = format!("1..={PRICE_AGE_MAX_MS_MAX} (milliseconds)");
        return Err(super::SettingsError::value("--price-age-max-ms", ms, range));
    }
    Ok(())
}

/// The ring gate: which prices taken off the ring are still fresh, and
/// the symbols owed their latest price.
pub(super) struct FreshGate {
    age_max_ns: u64,
    owed: Box<[bool]>,
    owed_list: Vec<u16>,
}

impl FreshGate {
    /// A gate at `age_max_ns` for a table of `symbols`.
    pub(super) fn new(age_max_ns: u64, symbols: usize) -> FreshGate {
        FreshGate {
            age_max_ns,
            owed: vec![false; symbols].into_boxed_slice(),
            owed_list: Vec::with_capacity(symbols),
        }
    }

    /// Whether `p`, taken off the ring at `now`, is young enough to fan
    /// out as it is; if not, its symbol is owed (see [`FreshGate::flush`]).
    #[inline]
    pub(super) fn admit(&mut self, p: &Price, now: u64) -> bool {
        if now.saturating_sub(p.receive_time_ns) <= self.age_max_ns {
            return true;
        }
        if let Some(owed) = self.owed.get_mut(p.symbol as usize) {
            if !*owed {
                *owed = true;
                self.owed_list.push(p.symbol);
            }
        }
        false
    }

    /// Sends every owed symbol's latest price, flagged conflated, to its
    /// subscribers (those that had it already are skipped by sequence).
    pub(super) fn flush(&mut self, conns: &mut Conns, now: u64) {
        for k in 0..self.owed_list.len() {
            let symbol = self.owed_list[k];
            self.owed[symbol as usize] = false;
            let c = &mut *conns;
            c.fanout.on_latest(symbol, &mut c.slab, &c.stats, now);
        }
        self.owed_list.clear();
    }
}

/// Offsets in a price frame (PriceUpdate or PriceSnapshot): the body's
/// symbol id (u16), tier (u8) and sequence (u64), little-endian.
const SYMBOL_AT: usize = HEADER_LEN;
const TIER_AT: usize = HEADER_LEN + 2;
const SEQ_AT: usize = HEADER_LEN + 6;
const TEMPLATE_AT: usize = SOFH_LEN + 2;

/// The run-compaction of [`super::outbound::OutBuf::drop_prices`] for
/// wire frames: frames the kernel took (the first `written` bytes, up to
/// the end of the frame it took part of) stay; every later control frame
/// moves down, in order; each later price frame (PriceUpdate or
/// PriceSnapshot) is dropped and handed to `on_price`. Returns the
/// run's new length.
pub(super) fn compact_run(
    run: &mut [u8],
    written: usize,
    mut on_price: impl FnMut(&[u8]),
) -> usize {
    let (mut at, mut kept) = (0, 0);
    while let Some(head) = run.get(at..at + TEMPLATE_AT + 2) {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let Some(end) = at.checked_add(len).filter(|&e| len > 0 && e <= run.len()) else {
            debug_assert!(false, "a run holds whole frames");
            return run.len();
        };
        let t = u16::from_le_bytes([head[TEMPLATE_AT], head[TEMPLATE_AT + 1]]);
        let price = t == template::PRICE_UPDATE || t == template::PRICE_SNAPSHOT;
        if at < written {
            kept = end;
        } else if price && len > SEQ_AT + 8 {
            on_price(&run[at..end]);
        } else {
            run.copy_within(at..end, kept);
            kept += len;
        }
        at = end;
    }
    kept.max(written)
}

/// Marks owed the key of `frame` (a dropped price frame) and winds its
/// sequence back below it, so the resync sends its latest price even if
/// that is the dropped one: a dropped update sets the sequence to one
/// below its own (the earliest dropped wins); a dropped snapshot (the
/// first price of a stream, or a resync) to 0, which makes the next price
/// a snapshot again. O(subscriptions), on the rare path of a connection
/// that could not write for the whole age limit.
pub(super) fn owe_dropped(frame: &[u8], subs: &mut [Sub], dirty: &mut u32, tiers: usize) {
    let Some(f) = frame.get(..SEQ_AT + 8) else {
        return;
    };
    let word = |i: usize| u16::from_le_bytes([f[i], f[i + 1]]);
    let key = usize::from(word(SYMBOL_AT)) * tiers + usize::from(f[TIER_AT]);
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&f[SEQ_AT..SEQ_AT + 8]);
    let seq = u64::from_le_bytes(seq);
    if let Some(sub) = subs.iter_mut().find(|s| s.key as usize == key) {
        sub.last_seq = if word(TEMPLATE_AT) == template::PRICE_SNAPSHOT {
            0
        } else {
            sub.last_seq.min(seq.saturating_sub(1))
        };
        if !sub.dirty {
            sub.dirty = true;
            *dirty += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(symbol: u16, received: u64) -> Price {
        Price {
            symbol,
            receive_time_ns: received,
            ..Price::EMPTY
        }
    }

    #[test]
    fn a_price_at_the_limit_passes_one_past_it_is_owed_once() {
        let mut g = FreshGate::new(20, 4);
        assert!(g.admit(&price(1, 100), 120));
        assert!(!g.admit(&price(1, 100), 121));
        assert!(!g.admit(&price(1, 101), 200));
        assert!(!g.admit(&price(3, 0), 200));
        assert_eq!(g.owed_list, vec![1, 3], "each symbol owed once");
        // A price from the future (another clock) is not stale.
        assert!(g.admit(&price(2, 500), 200));
    }

    #[test]
    fn the_limit_is_range_checked() {
        assert!(check_price_age_max_ms(0).is_err());
        assert!(check_price_age_max_ms(1).is_ok());
        assert!(check_price_age_max_ms(PRICE_AGE_MAX_MS_MAX).is_ok());
        assert!(check_price_age_max_ms(PRICE_AGE_MAX_MS_MAX + 1).is_err());
    }
}
