//! What a core knows of the numbering on the bus: the current stream (the
//! one of the newest epoch heard), its epoch, and every symbol's highest
//! sequence in it. A standby builds it by following the leader's output
//! (the prices and heartbeats on the bus, as an edge sees them) and, when
//! it takes the lease, by reading every symbol's last value; a leader adds
//! what it publishes. From it a new leader decides how to continue
//! ([`Known::continuation`]).
//!
//! The rule: a message of a newer epoch than the current one makes its
//! stream current (a stream other than the known one starts the symbol
//! sequences afresh); a message of the current stream raises its symbol's
//! highest sequence whatever its epoch (a higher sequence only makes the
//! next leader start higher, which keeps one (stream, symbol, seq) one
//! price). Nothing here allocates after construction.

/// Sequences a new leader jumps over when it continues a stream: room
/// for prices the previous leader published that this core did not see
/// (in flight when it died, or published while it was cut off from this
/// core and not yet fenced), so that no (stream, symbol, seq) is ever
/// used for two prices. The first price after a takeover is flagged, so
/// the jump is a flagged skip to terminals.
pub const TAKEOVER_SEQ_GAP: u64 = 1_000_000;

/// The numbering known to one core.
#[derive(Debug, Clone)]
pub struct Known {
    stream_id: u64,
    epoch: u64,
    /// Per symbol: the highest sequence seen in `stream_id` (0: none).
    seq: Vec<u64>,
    /// Per symbol: `seq` was seen live (followed, or published by this
    /// core) with the connection unbroken since: nothing after it was
    /// missed, so it is the symbol's highest.
    live: Vec<bool>,
}

/// How a new leader numbers its prices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    /// The stream it publishes.
    pub stream_id: u64,
    /// Per symbol: the sequence its first price takes (the price after
    /// that continues by one); `None` while the symbol's highest sequence
    /// is not known (its last value could not be read): it is not
    /// published until it is ([`Known::first_seq`]).
    pub first_seq: Vec<Option<u64>>,
    /// True when the stream continues one that was published before
    /// (its first price per symbol is flagged: prices may be missing).
    pub continues: bool,
}

impl Known {
    /// Nothing known, `symbols` symbols.
    pub fn new(symbols: usize) -> Known {
        Known {
            stream_id: 0,
            epoch: 0,
            seq: vec![0; symbols],
            live: vec![false; symbols],
        }
    }

    /// The current stream (0: none heard).
    pub fn stream_id(&self) -> u64 {
        self.stream_id
    }

    /// The newest epoch heard.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The highest sequence of `symbol` in the current stream.
    pub fn seq(&self, symbol: usize) -> u64 {
        self.seq.get(symbol).copied().unwrap_or(0)
    }

    /// A message of `stream_id` at `epoch` was heard (a heartbeat, or a
    /// price without a symbol): a newer epoch makes its stream current.
    pub fn heard(&mut self, stream_id: u64, epoch: u64) {
        if epoch < self.epoch || (epoch == self.epoch && self.stream_id != 0) {
            return;
        }
        self.epoch = epoch;
        if stream_id != self.stream_id {
            self.stream_id = stream_id;
            self.seq.fill(0);
            self.live.fill(false);
        }
    }

    /// The connection to the bus was lost: what is followed from now on
    /// may have missed prices, so no sequence counts as seen live.
    pub fn disconnected(&mut self) {
        self.live.fill(false);
    }

    /// A price of `symbol` numbered `seq` in `stream_id`, published at
    /// `epoch`, was seen (followed, read from the last values, or
    /// published by this core).
    #[inline]
    pub fn price(&mut self, symbol: usize, stream_id: u64, epoch: u64, seq: u64) {
        self.heard(stream_id, epoch);
        if stream_id != self.stream_id {
            return;
        }
        if let Some(s) = self.seq.get_mut(symbol) {
            *s = (*s).max(seq);
        }
    }

    /// [`Known::price`] of a price seen live (followed on the bus, or
    /// published by this core).
    #[inline]
    pub fn price_live(&mut self, symbol: usize, stream_id: u64, epoch: u64, seq: u64) {
        self.price(symbol, stream_id, epoch, seq);
        if stream_id == self.stream_id {
            if let Some(l) = self.live.get_mut(symbol) {
                *l = true;
            }
        }
    }

    /// The sequence `symbol`'s first price takes in the current stream,
    /// if its highest is known: seen live, or `read` (its last value was
    /// read from the stream, found or not).
    pub fn first_seq(&self, symbol: usize, read: bool) -> Option<u64> {
        let known = read || self.live.get(symbol).copied().unwrap_or(false);
        known.then(|| match self.seq(symbol) {
            0 => 1,
            s => s.saturating_add(TAKEOVER_SEQ_GAP + 1),
        })
    }

    /// How to number prices on taking the lease, `read[s]` saying that
    /// symbol `s`'s last value was read at the takeover. The current
    /// stream continues: each symbol whose highest sequence is known
    /// starts above it (and the gap); one whose highest is not known is
    /// held back until it is. With no stream known at all (a new
    /// deployment, or nothing heard and nothing readable) a fresh stream
    /// (`fresh`, nonzero) starts at 1 — a new stream id cannot repeat a
    /// (stream, symbol, seq) of any other.
    pub fn continuation(&self, read: &[bool], fresh: u64) -> Continuation {
        debug_assert!(fresh != 0);
        if self.stream_id == 0 {
            return Continuation {
                stream_id: fresh,
                first_seq: vec![Some(1); self.seq.len()],
                continues: false,
            };
        }
        let first_seq = (0..self.seq.len())
            .map(|s| self.first_seq(s, read.get(s).copied().unwrap_or(false)))
            .collect();
        Continuation {
            stream_id: self.stream_id,
            first_seq,
            continues: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_keeps_the_highest_sequence_of_the_current_stream() {
        let mut k = Known::new(3);
        k.price(0, 7, 1, 10);
        k.price(0, 7, 1, 12);
        k.price(0, 7, 1, 11);
        assert_eq!(k.seq(0), 12, "a late lower sequence does not win");
        // The same stream under a newer epoch (a takeover that continued).
        k.price(0, 7, 2, 1_000_013);
        assert_eq!((k.stream_id(), k.epoch(), k.seq(0)), (7, 2, 1_000_013));
        // An older epoch of the same stream still raises a sequence.
        k.price(1, 7, 1, 40);
        assert_eq!(k.seq(1), 40);
        // A newer epoch of another stream starts afresh.
        k.price(2, 9, 3, 5);
        assert_eq!((k.stream_id(), k.seq(0), k.seq(2)), (9, 0, 5));
        // An older epoch's other stream is ignored.
        k.price(0, 7, 2, 99);
        assert_eq!((k.stream_id(), k.seq(0)), (9, 0));
    }

    #[test]
    fn a_known_stream_continues_above_a_gap_and_an_unknown_symbol_waits() {
        let mut k = Known::new(3);
        let fresh = k.continuation(&[false; 3], 44);
        assert_eq!(
            (fresh.stream_id, fresh.continues),
            (44, false),
            "nothing known"
        );
        assert_eq!(fresh.first_seq, vec![Some(1); 3]);
        k.price(0, 7, 3, 112);
        k.price_live(1, 7, 3, 20);
        let c = k.continuation(&[true, false, false], 44);
        assert_eq!((c.stream_id, c.continues), (7, true));
        let gap = TAKEOVER_SEQ_GAP + 1;
        // Read; seen live; neither (its highest unknown: held back).
        assert_eq!(c.first_seq, vec![Some(112 + gap), Some(20 + gap), None]);
        // A symbol read and found absent starts the stream's numbering.
        assert_eq!(k.first_seq(2, true), Some(1));
        // After a lost connection nothing counts as seen live.
        k.disconnected();
        assert_eq!(k.first_seq(1, false), None);
        assert_eq!(k.first_seq(1, true), Some(20 + gap));
    }

    #[test]
    fn heartbeats_move_the_stream_on_without_a_price() {
        let mut k = Known::new(1);
        k.price(0, 7, 3, 112);
        k.heard(7, 4);
        assert_eq!((k.epoch(), k.seq(0)), (4, 112));
        k.heard(8, 5);
        assert_eq!((k.stream_id(), k.seq(0)), (8, 0));
        k.heard(7, 4);
        assert_eq!(k.stream_id(), 8);
    }
}
