//! The latest price per (symbol, tier), written by the engine, read
//! lock-free by any thread.
//!
//! Each slot is a sequence lock whose payload is stored as `AtomicU64` words,
//! so there is no `unsafe` and no data race in the Rust memory model.
//!
//! Memory-ordering argument (the classic seqlock, as analysed by Boehm,
//! "Can seqlocks get along with programming language memory models?"):
//! - Writer (single thread): `seq = s + 1` (odd: write in progress), then a
//!   Release fence, then the payload words with Relaxed stores, then
//!   `seq = s + 2` with Release. The fence orders the odd store before every
//!   payload store; the final Release orders every payload store before the
//!   even store.
//! - Reader: load `seq` with Acquire (s1); if odd, retry. Read the payload
//!   with Relaxed loads, then an Acquire fence, then load `seq` (s2). If
//!   `s1 == s2` the payload is consistent: the Acquire on s1 synchronises
//!   with the writer's final Release of the same value, so every word is at
//!   least that write; the Acquire fence after the payload loads pairs with
//!   the writer's Release fence, so if any word came from a later write the
//!   reader's second load must see that write's odd (or later) sequence.
//!
//! The loom model `engine::loom_models` checks this on this type: no torn
//! read, and no read older than an earlier one.
//!
//! The slot is padded to whole cache lines so readers of one symbol do not
//! slow the writer of another.
//!
//! One slot per symbol, not per (symbol, tier): the engine writes the
//! tier-less top of book once per change and `read` derives the tier's
//! price with [`Markups::apply`], the one home of tier pricing. That is one
//! seqlock write per publish instead of one per tier.

use crate::runtime::sync::{fence, spin_loop, AtomicU64, Ordering};

use crate::model::{Markups, Price, SymbolId, TierId, TOP_OF_BOOK};
use crate::runtime::Progress;

const WORDS: usize = 10;

#[repr(align(64))]
#[derive(Debug, Default)]
struct Slot {
    seq: AtomicU64,
    words: [AtomicU64; WORDS],
}

/// Lock-free table of the latest [`Price`] per (symbol, tier).
#[derive(Debug)]
pub struct PriceTable {
    /// One per symbol, holding the top of book.
    slots: Box<[Slot]>,
    markups: Markups,
    /// The stream the table's writer numbers its prices by now (the
    /// engine's, or on an edge the bus stream it follows); 0 = none yet.
    /// Each slot's price carries its own `stream_id`; this is what a
    /// session is told at logon.
    stream_id: AtomicU64,
    /// As of when the table holds every tick its engine was given.
    progress: Progress,
}

fn pack(p: &Price) -> [u64; WORDS] {
    let meta = u64::from(p.symbol)
        | u64::from(p.tier) << 16
        | u64::from(p.flags) << 24
        | u64::from(p.providers) << 32;
    [
        p.bid as u64,
        p.ask as u64,
        p.bid_size,
        p.ask_size,
        p.seq,
        p.provider_time_ns,
        p.engine_time_ns,
        p.receive_time_ns,
        meta,
        p.stream_id,
    ]
}

fn unpack(w: &[u64; WORDS]) -> Price {
    let meta = w[8];
    Price {
        bid: w[0] as i64,
        ask: w[1] as i64,
        bid_size: w[2],
        ask_size: w[3],
        seq: w[4],
        provider_time_ns: w[5],
        engine_time_ns: w[6],
        receive_time_ns: w[7],
        stream_id: w[9],
        symbol: meta as u16,
        tier: (meta >> 16) as u8,
        flags: (meta >> 24) as u8,
        providers: (meta >> 32) as u8,
        _reserved: [0; 3],
    }
}

impl PriceTable {
    /// A table for `symbols` x `tiers`, all empty, every tier the same price.
    pub fn new(symbols: usize, tiers: usize) -> Self {
        Self::with_markups(Markups::none(symbols, tiers))
    }

    /// A table whose tiers are derived by `markups`.
    pub fn with_markups(markups: Markups) -> Self {
        PriceTable {
            slots: (0..markups.symbols()).map(|_| Slot::default()).collect(),
            markups,
            stream_id: AtomicU64::new(0),
            progress: Progress::new(),
        }
    }

    /// The engine's progress mark: how far behind what the engine was
    /// given this table may be (untracked unless an engine marks it).
    #[inline]
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The stream the writer numbers prices by from now on (see
    /// [`PriceTable::stream_id`]).
    pub fn set_stream_id(&self, stream_id: u64) {
        self.stream_id.store(stream_id, Ordering::Release);
    }

    /// The stream of the newest prices (0 before the writer named one):
    /// LogonAccepted's `streamId`.
    pub fn stream_id(&self) -> u64 {
        self.stream_id.load(Ordering::Acquire)
    }

    /// Number of symbols (rows).
    pub fn symbols(&self) -> usize {
        self.slots.len()
    }

    /// Number of tiers each symbol can be read at.
    pub fn tiers(&self) -> usize {
        self.markups.tiers()
    }

    /// The markups every tier's price is derived by.
    pub fn markups(&self) -> &Markups {
        &self.markups
    }

    /// `top` (a tier-less top of book, as the engine publishes it) as tier
    /// `tier` sees it.
    #[inline]
    pub fn for_tier(&self, top: &Price, tier: TierId) -> Price {
        self.markups.apply(top, tier)
    }

    /// Stores `top`, the tier-less top of book of its symbol (every tier
    /// follows). Only one thread (the engine) may write; concurrent writers
    /// would corrupt the sequence.
    #[inline]
    pub fn write(&self, top: &Price) {
        debug_assert_eq!(top.tier, TOP_OF_BOOK, "the table stores tops of book");
        debug_assert!((top.symbol as usize) < self.slots.len());
        let slot = &self.slots[top.symbol as usize];
        let s = slot.seq.load(Ordering::Relaxed);
        debug_assert!(s.is_multiple_of(2), "concurrent price-table writers");
        slot.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (w, v) in slot.words.iter().zip(pack(top)) {
            w.store(v, Ordering::Relaxed);
        }
        slot.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// The latest price of (symbol, tier), or `None` if none was written
    /// yet. Retries while a write is in progress; the writer never blocks,
    /// so this terminates as soon as the writer leaves the slot alone for
    /// the length of nine loads.
    #[inline]
    pub fn read(&self, symbol: SymbolId, tier: TierId) -> Option<Price> {
        if symbol as usize >= self.symbols() || tier as usize >= self.tiers() {
            return None;
        }
        let slot = &self.slots[symbol as usize];
        loop {
            let s1 = slot.seq.load(Ordering::Acquire);
            if s1 == 0 {
                return None;
            }
            if s1 % 2 == 1 {
                spin_loop();
                continue;
            }
            let mut words = [0u64; WORDS];
            for (out, w) in words.iter_mut().zip(&slot.words) {
                *out = w.load(Ordering::Relaxed);
            }
            fence(Ordering::Acquire);
            if slot.seq.load(Ordering::Relaxed) == s1 {
                return Some(self.markups.apply(&unpack(&words), tier));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn price(k: u64, symbol: u16, tier: u8) -> Price {
        // Every field derives from k, so a torn read shows as a mismatch.
        Price {
            bid: k as i64,
            ask: k as i64 + 1,
            bid_size: k * 2,
            ask_size: k * 3,
            seq: k,
            provider_time_ns: k + 10,
            engine_time_ns: k + 20,
            receive_time_ns: k + 30,
            stream_id: k + 40,
            symbol,
            tier,
            flags: (k % 16) as u8,
            providers: (k % 7) as u8,
            _reserved: [0; 3],
        }
    }

    #[test]
    fn empty_until_written_then_latest() {
        let t = PriceTable::new(4, 2);
        assert_eq!(t.read(1, 1), None);
        t.write(&price(5, 1, 0));
        t.write(&price(6, 1, 0));
        assert_eq!(t.read(1, 1), Some(price(6, 1, 1)));
        assert_eq!(
            t.read(1, 0),
            Some(price(6, 1, 0)),
            "same markup: same price"
        );
        assert_eq!(t.read(2, 0), None);
        assert_eq!(t.read(9, 0), None);
        assert_eq!(t.read(1, 2), None);
    }

    #[test]
    fn every_tier_reads_its_own_markup() {
        // Two symbols, three tiers with markups 0 / 5 / 12 (symbol 1: 0 / 20 / 40).
        let t = PriceTable::with_markups(Markups::from_points(3, vec![0, 5, 12, 0, 20, 40]));
        let mut p = price(1, 1, TOP_OF_BOOK);
        p.bid = 1_040;
        p.ask = 1_060;
        t.write(&p);
        let r = |tier| t.read(1, tier).map(|p| (p.tier, p.bid, p.ask));
        assert_eq!(r(2), Some((2, 1_000, 1_100)));
        assert_eq!(r(1), Some((1, 1_020, 1_080)));
        assert_eq!(r(0), Some((0, 1_040, 1_060)));
        assert_eq!(t.read(0, 0), None);
        let t1 = t.for_tier(&p, 1);
        assert_eq!((t1.tier, t1.bid, t1.ask), (1, 1_020, 1_080));
    }

    #[test]
    fn concurrent_reads_never_tear() {
        let table = Arc::new(PriceTable::new(2, 1));
        let done = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (t, d) = (table.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    let mut last = 0;
                    while !d.load(Ordering::Relaxed) || reads < 1_000 {
                        if let Some(p) = t.read(0, 0) {
                            assert_eq!(p, price(p.seq, 0, 0), "torn read");
                            assert!(p.seq >= last, "went backwards");
                            last = p.seq;
                            reads += 1;
                        }
                    }
                    reads
                })
            })
            .collect();
        for k in 1..=300_000u64 {
            table.write(&price(k, 0, 0));
        }
        done.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() >= 1_000);
        }
        assert_eq!(table.read(0, 0).unwrap().seq, 300_000);
    }
}
