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
}

/// How a new leader numbers its prices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    /// The stream it publishes.
    pub stream_id: u64,
    /// Per symbol: the sequence its first price takes (the price after
    /// that continues by one).
    pub first_seq: Vec<u64>,
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
        if epoch <= self.epoch && self.stream_id != 0 {
            return;
        }
        if epoch < self.epoch {
            return;
        }
        self.epoch = epoch;
        if stream_id != self.stream_id {
            self.stream_id = stream_id;
            self.seq.fill(0);
        }
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

    /// How to number prices on taking the lease. `proved` says that what
    /// is known covers every price of the current stream (every last value
    /// was read, or this core itself was its last leader). An unproved
    /// stream is not continued: a fresh stream id (`fresh`, nonzero) whose
    /// sequences start again, which clients resync to. Nothing known at
    /// all (a new deployment) starts the fresh stream too.
    pub fn continuation(&self, proved: bool, fresh: u64) -> Continuation {
        debug_assert!(fresh != 0);
        if self.stream_id == 0 || !proved {
            return Continuation {
                stream_id: fresh,
                first_seq: vec![1; self.seq.len()],
                continues: false,
            };
        }
        let first_seq = self
            .seq
            .iter()
            .map(|&s| match s {
                0 => 1,
                s => s.saturating_add(TAKEOVER_SEQ_GAP + 1),
            })
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
    fn a_proved_stream_continues_above_a_gap_and_an_unproved_one_starts_afresh() {
        let mut k = Known::new(2);
        let fresh = k.continuation(true, 44);
        assert_eq!(
            (fresh.stream_id, fresh.continues),
            (44, false),
            "nothing known"
        );
        k.price(0, 7, 3, 112);
        let c = k.continuation(true, 44);
        assert_eq!(c.stream_id, 7);
        assert!(c.continues);
        assert_eq!(c.first_seq, vec![112 + TAKEOVER_SEQ_GAP + 1, 1]);
        let c = k.continuation(false, 44);
        assert_eq!((c.stream_id, c.first_seq), (44, vec![1, 1]));
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
