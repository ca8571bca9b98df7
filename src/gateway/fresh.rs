//! Freshness, the fan-out's invariant: a price waits at most
//! [`GatewayConfig::price_age_max_ms`] on the engine ring and at most that
//! again in a connection's outbound buffer, so it reaches the kernel at
//! most about twice the limit after this process received it, or it is
//! not sent and the connection's next price for that key is the latest
//! one, as a snapshot flagged conflated. The shard reads the clock as its
//! turn goes (every 64 prices, every 16 writes; `Shard::drain_prices`,
//! `Conns::flush_writes`), so a long turn is judged by the time it has
//! reached. Two gates keep it:
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

/// Default of `--merge-after-us`: a shard turn that writes promptly
/// (tens of µs) sends every price as it came; a price that waited a
/// quarter of the default age limit (`--price-age-max-ms`) unwritten is
/// behind, and newer ones of its key replace it.
pub const MERGE_AFTER_US_DEFAULT: u64 = 5_000;
/// Largest `--merge-after-us`.
pub const MERGE_AFTER_US_MAX: u64 = 60_000_000;

/// Refuses a merge delay out of range (the flag's check).
pub(super) fn check_merge_after_us(us: u64) -> Result<(), super::SettingsError> {
    if us > MERGE_AFTER_US_MAX {
        let range = format!("0..={MERGE_AFTER_US_MAX} (microseconds)");
        return Err(super::SettingsError::value("--merge-after-us", us, range));
    }
    Ok(())
}

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

    /// How long one turn may spend fanning out a batch of prices: half
    /// the age limit, so a price taken at the batch's start still meets
    /// the limit at its write.
    pub(super) fn fan_out_budget_ns(&self) -> u64 {
        self.age_max_ns / 2
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

/// The clock of a long pass of the shard's turn (a batch of prices taken
/// off the ring, the write list): read again every `every` steps, so the
/// gates judge each step by the time the pass has reached; the pass ends
/// once `budget_ns` went on it. The reading is injected (`read`).
pub(super) struct PassClock {
    start: u64,
    now: u64,
    budget_ns: u64,
    every: usize,
    steps: usize,
}

impl PassClock {
    /// A pass that began at `now`, reading the clock every `every` steps
    /// and ending past `budget_ns` (`u64::MAX`: never).
    pub(super) fn new(now: u64, budget_ns: u64, every: usize) -> PassClock {
        PassClock {
            start: now,
            now,
            budget_ns,
            every: every.max(1),
            steps: 0,
        }
    }

    /// Before the next step: the time to judge it by, or `None` when the
    /// budget is spent (the step is not taken).
    #[inline]
    pub(super) fn step(&mut self, read: impl FnOnce() -> u64) -> Option<u64> {
        if self.steps > 0 && self.steps.is_multiple_of(self.every) {
            self.now = read();
            if self.now.saturating_sub(self.start) > self.budget_ns {
                return None;
            }
        }
        self.steps += 1;
        Some(self.now)
    }

    /// Steps taken so far.
    pub(super) fn steps(&self) -> usize {
        self.steps
    }

    /// The last reading.
    pub(super) fn now(&self) -> u64 {
        self.now
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
    fn a_pass_reads_the_clock_every_n_steps_and_ends_past_its_budget() {
        let mut t = 1_000;
        let mut reads = 0;
        let mut c = PassClock::new(t, 10, 4);
        let mut judged = Vec::new();
        while let Some(now) = c.step(|| {
            reads += 1;
            t += 3;
            t
        }) {
            judged.push(now);
        }
        // Read before steps 4, 8, 12 and 16: 1,003, 1,006, 1,009, then
        // 1,012 is past the 10-ns budget and step 16 is not taken.
        assert_eq!(reads, 4);
        assert_eq!(c.steps(), 16);
        assert_eq!(c.now(), 1_012);
        assert_eq!(&judged[..5], &[1_000, 1_000, 1_000, 1_000, 1_003]);
        assert_eq!(judged[15], 1_009);
        // Without a budget the pass never ends early.
        let mut c = PassClock::new(0, u64::MAX, 16);
        assert!((0..10_000).all(|k| c.step(|| k as u64 * 1_000_000).is_some()));
    }

    #[test]
    fn the_limit_is_range_checked() {
        assert!(check_price_age_max_ms(0).is_err());
        assert!(check_price_age_max_ms(1).is_ok());
        assert!(check_price_age_max_ms(PRICE_AGE_MAX_MS_MAX).is_ok());
        assert!(check_price_age_max_ms(PRICE_AGE_MAX_MS_MAX + 1).is_err());
    }
}
