//! Bounded per-symbol tick history, written by the engine, read lock-free
//! by request workers (HistoryRequest: the last N ticks of a symbol).
//!
//! Each symbol has a ring of `depth` entries allocated at start. Every
//! entry is a small seqlock (same argument as the price table): the engine
//! marks it odd, writes the words, marks it even; a reader that sees an odd
//! or changed sequence skips the entry, so a reader never returns a torn
//! tick and never blocks the writer. `head` counts writes per symbol.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::model::{SymbolId, Tick};

const WORDS: usize = 6;

#[derive(Debug, Default)]
struct Entry {
    seq: AtomicU64,
    words: [AtomicU64; WORDS],
}

/// One historical tick as served to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistTick {
    /// Index of the provider that quoted (the low 16 bits of the provider id).
    pub provider: u16,
    /// Bid in points (`10^-digits`).
    pub bid: i64,
    /// Ask in points (`10^-digits`).
    pub ask: i64,
    /// Size at the bid, in units of the base instrument.
    pub bid_size: u64,
    /// Size at the ask, in units of the base instrument.
    pub ask_size: u64,
    /// The provider's timestamp, UTC nanoseconds since the Unix epoch.
    pub provider_time_ns: u64,
}

/// Per-symbol rings of recent accepted ticks.
#[derive(Debug)]
pub struct TickHistory {
    depth: usize,
    entries: Box<[Entry]>,
    heads: Box<[AtomicU64]>,
}

/// Default ticks kept per symbol.
pub const HISTORY_DEPTH_DEFAULT: usize = 256;

impl TickHistory {
    /// `depth` entries per symbol for `symbols` symbols, allocated here; both
    /// must be non-zero (panics otherwise).
    pub fn new(symbols: usize, depth: usize) -> Self {
        assert!(symbols > 0 && depth > 0);
        TickHistory {
            depth,
            entries: (0..symbols * depth).map(|_| Entry::default()).collect(),
            heads: (0..symbols).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Ticks kept per symbol; older ones are overwritten.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Appends a tick (engine thread only).
    #[inline]
    pub fn push(&self, t: &Tick) {
        let sym = t.symbol as usize;
        let Some(head) = self.heads.get(sym) else {
            return;
        };
        let h = head.load(Ordering::Relaxed);
        let e = &self.entries[sym * self.depth + (h as usize % self.depth)];
        let s = e.seq.load(Ordering::Relaxed);
        debug_assert!(s.is_multiple_of(2), "concurrent tick-history writers");
        e.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let w = [
            u64::from(t.provider),
            t.bid as u64,
            t.ask as u64,
            t.bid_size,
            t.ask_size,
            t.provider_time_ns,
        ];
        for (slot, v) in e.words.iter().zip(w) {
            slot.store(v, Ordering::Relaxed);
        }
        e.seq.store(s.wrapping_add(2), Ordering::Release);
        head.store(h + 1, Ordering::Release);
    }

    /// Calls `f` with up to `count` most recent ticks of `symbol`, oldest
    /// first. Returns how many were delivered.
    pub fn last(&self, symbol: SymbolId, count: usize, mut f: impl FnMut(HistTick)) -> usize {
        let sym = symbol as usize;
        let Some(head) = self.heads.get(sym) else {
            return 0;
        };
        let h = head.load(Ordering::Acquire) as usize;
        let n = count.min(h).min(self.depth);
        let mut delivered = 0;
        for i in (h - n)..h {
            if let Some(t) = self.read(&self.entries[sym * self.depth + i % self.depth]) {
                f(t);
                delivered += 1;
            }
        }
        delivered
    }

    fn read(&self, e: &Entry) -> Option<HistTick> {
        let s1 = e.seq.load(Ordering::Acquire);
        if s1 % 2 == 1 {
            return None;
        }
        let mut w = [0u64; WORDS];
        for (out, v) in w.iter_mut().zip(&e.words) {
            *out = v.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        (e.seq.load(Ordering::Relaxed) == s1).then_some(HistTick {
            provider: w[0] as u16,
            bid: w[1] as i64,
            ask: w[2] as i64,
            bid_size: w[3],
            ask_size: w[4],
            provider_time_ns: w[5],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(sym: u16, k: i64) -> Tick {
        Tick {
            symbol: sym,
            bid: k,
            ask: k + 1,
            provider_time_ns: k as u64,
            ..Tick::EMPTY
        }
    }

    #[test]
    fn keeps_the_last_depth_ticks_oldest_first() {
        let h = TickHistory::new(2, 4);
        for k in 1..=10 {
            h.push(&tick(1, k));
        }
        let mut got = Vec::new();
        assert_eq!(h.last(1, 100, |t| got.push(t.bid)), 4);
        assert_eq!(got, vec![7, 8, 9, 10]);
        got.clear();
        h.last(1, 2, |t| got.push(t.bid));
        assert_eq!(got, vec![9, 10]);
        assert_eq!(h.last(0, 5, |_| {}), 0);
        assert_eq!(h.last(9, 5, |_| {}), 0);
    }

    #[test]
    fn concurrent_reads_never_tear() {
        let h = std::sync::Arc::new(TickHistory::new(1, 8));
        let h2 = h.clone();
        let reader = std::thread::spawn(move || {
            let mut seen = 0u64;
            while seen < 20_000 {
                h2.last(0, 8, |t| {
                    assert_eq!(t.ask, t.bid + 1, "torn");
                    assert_eq!(t.provider_time_ns, t.bid as u64, "torn");
                    seen += 1;
                });
            }
        });
        for k in 1..=200_000 {
            h.push(&tick(0, k));
        }
        while !reader.is_finished() {
            h.push(&tick(0, 7));
        }
        reader.join().unwrap();
    }
}
