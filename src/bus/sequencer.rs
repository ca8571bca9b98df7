//! How a leading core numbers the prices it publishes: its engine's own
//! per-symbol sequences, rebased onto the stream it leads.
//!
//! On taking the lease a core gets a [`Continuation`] (`bus::follow`): the
//! stream and, per symbol, the sequence its first price takes. The first
//! price of each symbol is anchored there (engine sequence e → published
//! sequence p); every later one, of engine sequence e', is published at
//! `p + (e' - e)`, so the published sequence rises by one exactly when the
//! engine's does, and a skip in the engine (conflated in the ring, flagged by the
//! engine) is a skip on the bus. A price whose engine sequence is not
//! above the anchor (older than one already published, e.g. the restated
//! price at a takeover) is not published. Nothing allocates after
//! construction.

use super::follow::Continuation;
use crate::model::{price_flags, Price};

/// The numbering of a leading core (inactive while it stands by).
#[derive(Debug, Clone)]
pub struct Sequencer {
    stream_id: u64,
    /// Per symbol: (engine seq, published seq) of the last price published.
    anchor: Vec<Option<(u64, u64)>>,
    /// Per symbol: the sequence the first price takes (`None`: its
    /// highest sequence is not known yet, so it is not published).
    first: Vec<Option<u64>>,
    /// The first price of each symbol is flagged (a continued stream).
    flag_first: bool,
    /// Per symbol: prices were drained unpublished (fenced) since the last
    /// publish, so the next one is flagged.
    missed: Vec<bool>,
}

/// What [`Sequencer::number`] did with a price.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbered {
    /// Publish it (its `seq` and `stream_id` are now the stream's).
    Publish,
    /// Older than a price already published for its symbol: drop it.
    Superseded,
    /// Its symbol's highest sequence in the stream is not known yet: not
    /// published (a sequence could repeat an unseen one).
    Unknown,
}

impl Sequencer {
    /// An inactive sequencer for `symbols` symbols.
    pub fn new(symbols: usize) -> Sequencer {
        Sequencer {
            stream_id: 0,
            anchor: vec![None; symbols],
            first: vec![Some(1); symbols],
            flag_first: false,
            missed: vec![false; symbols],
        }
    }

    /// Leading starts: number by `c`.
    pub fn start(&mut self, c: &Continuation) {
        debug_assert_eq!(c.first_seq.len(), self.first.len());
        self.stream_id = c.stream_id;
        self.first.copy_from_slice(&c.first_seq);
        self.anchor.fill(None);
        self.flag_first = c.continues;
    }

    /// The stream being published (0 while standing by).
    pub fn stream_id(&self) -> u64 {
        self.stream_id
    }

    /// `symbol`'s highest sequence became known: its first price takes
    /// `first_seq`.
    pub fn learned(&mut self, symbol: usize, first_seq: u64) {
        if let (Some(f), Some(None)) = (self.first.get_mut(symbol), self.anchor.get(symbol)) {
            *f = Some(first_seq);
        }
    }

    /// A symbol held back for want of its highest sequence, if any.
    pub fn unknown(&self) -> Option<usize> {
        (self.stream_id != 0)
            .then(|| self.first.iter().position(Option::is_none))
            .flatten()
    }

    /// Leading ended: the next start numbers afresh.
    pub fn stop(&mut self) {
        self.stream_id = 0;
        self.anchor.fill(None);
    }

    /// A price of `symbol` was drained without being published.
    #[inline]
    pub fn missed(&mut self, symbol: usize) {
        if let Some(m) = self.missed.get_mut(symbol) {
            *m = true;
        }
    }

    /// Numbers `price` (an engine price: its engine sequence) for the bus.
    #[inline]
    pub fn number(&mut self, price: &mut Price) -> Numbered {
        let s = price.symbol as usize;
        debug_assert!(s < self.anchor.len());
        let (Some(anchor), Some(&first), Some(missed)) = (
            self.anchor.get_mut(s),
            self.first.get(s),
            self.missed.get_mut(s),
        ) else {
            return Numbered::Superseded;
        };
        let published = match *anchor {
            None => {
                let Some(first) = first else {
                    return Numbered::Unknown;
                };
                if self.flag_first {
                    price.flags |= price_flags::CONFLATED;
                }
                first
            }
            Some((e, _)) if price.seq <= e => return Numbered::Superseded,
            Some((e, p)) => p + (price.seq - e),
        };
        *anchor = Some((price.seq, published));
        if std::mem::take(missed) {
            price.flags |= price_flags::CONFLATED;
        }
        price.seq = published;
        price.stream_id = self.stream_id;
        Numbered::Publish
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(symbol: u16, seq: u64) -> Price {
        Price {
            symbol,
            seq,
            ..Price::EMPTY
        }
    }

    fn continuation(first: Vec<u64>, continues: bool) -> Continuation {
        Continuation {
            stream_id: 7,
            first_seq: first.into_iter().map(Some).collect(),
            continues,
        }
    }

    #[test]
    fn a_continued_stream_rebases_the_engine_s_sequences_and_flags_the_first() {
        let mut q = Sequencer::new(2);
        q.start(&continuation(vec![1_000_113, 1], true));
        let mut p = price(0, 40);
        assert_eq!(q.number(&mut p), Numbered::Publish);
        assert_eq!(
            (p.seq, p.stream_id, p.flags),
            (1_000_113, 7, price_flags::CONFLATED)
        );
        let mut p = price(0, 41);
        q.number(&mut p);
        assert_eq!((p.seq, p.flags), (1_000_114, 0), "then by one, unflagged");
        // An engine skip (conflated in the ring) stays a skip.
        let mut p = price(0, 44);
        q.number(&mut p);
        assert_eq!(p.seq, 1_000_117);
        // Older than what was published: not published.
        assert_eq!(q.number(&mut price(0, 44)), Numbered::Superseded);
        assert_eq!(q.number(&mut price(0, 12)), Numbered::Superseded);
    }

    #[test]
    fn a_fresh_stream_starts_at_one_unflagged_and_missed_prices_are_flagged() {
        let mut q = Sequencer::new(1);
        q.start(&continuation(vec![1], false));
        let mut p = price(0, 900);
        q.number(&mut p);
        assert_eq!((p.seq, p.flags), (1, 0));
        q.missed(0);
        let mut p = price(0, 902);
        q.number(&mut p);
        assert_eq!((p.seq, p.flags), (3, price_flags::CONFLATED));
        q.stop();
        assert_eq!(q.stream_id(), 0);
    }

    #[test]
    fn a_symbol_of_unknown_height_is_held_until_learned() {
        let mut q = Sequencer::new(2);
        let mut c = continuation(vec![50, 1], true);
        c.first_seq[1] = None;
        q.start(&c);
        assert_eq!(q.unknown(), Some(1));
        assert_eq!(q.number(&mut price(1, 9)), Numbered::Unknown);
        q.learned(1, 1_000_031);
        assert_eq!(q.unknown(), None);
        let mut p = price(1, 10);
        assert_eq!(q.number(&mut p), Numbered::Publish);
        assert_eq!(p.seq, 1_000_031);
    }
}
