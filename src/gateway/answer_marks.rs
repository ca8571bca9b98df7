//! The `gateway_write` hop of the request path: when each answer copied
//! into a connection's outbound buffer was handed to the socket.
//!
//! A connection keeps the stream position of the last byte of each answer
//! still in its buffer (bytes written so far plus the buffer's length right
//! after the append) with the time the shard popped it. When a write
//! passes that position, the time since the pop is recorded. The marks are
//! a fixed ring allocated at accept; while it is full, further answers of
//! that connection go unmeasured (counted nowhere, never blocking): the
//! hop's histogram samples the answers of connections with at most
//! [`MARKS`] answers unwritten.

use crate::requests::hops::HopRecorder;

/// Answers per connection whose write is timed at once.
pub(crate) const MARKS: usize = 64;

/// A connection's answers in its outbound buffer, oldest first.
pub(crate) struct AnswerMarks {
    /// Bytes of this connection handed to the socket so far.
    written: u64,
    /// (stream position of the answer's last byte, pop time in ns).
    marks: Box<[(u64, u64); MARKS]>,
    head: usize,
    len: usize,
}

impl AnswerMarks {
    pub(crate) fn new() -> AnswerMarks {
        AnswerMarks {
            written: 0,
            marks: Box::new([(0, 0); MARKS]),
            head: 0,
            len: 0,
        }
    }

    /// An answer popped at `popped_ns` was appended; the buffer now holds
    /// `out_len` bytes (the answer's last byte is the last of them).
    pub(crate) fn on_append(&mut self, out_len: usize, popped_ns: u64) {
        if self.len == MARKS {
            return;
        }
        let end = self.written + out_len as u64;
        self.marks[(self.head + self.len) % MARKS] = (end, popped_ns);
        self.len += 1;
    }

    /// `n` bytes were handed to the socket: records the hop of every
    /// answer now fully written (`now` read only if one is).
    pub(crate) fn on_written(&mut self, n: usize, hop: &mut HopRecorder, now: impl Fn() -> u64) {
        self.written += n as u64;
        if self.len == 0 || self.marks[self.head].0 > self.written {
            return;
        }
        let now = now();
        while self.len > 0 && self.marks[self.head].0 <= self.written {
            let popped = self.marks[self.head].1;
            hop.record(now.saturating_sub(popped), now);
            self.head = (self.head + 1) % MARKS;
            self.len -= 1;
        }
    }

    /// Answers appended and not yet fully written.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::hops::{Hop, HopStats};

    /// Values recorded (ns) per bucket: <= 7.5 us, <= 8.5 us, above.
    fn buckets(stats: &HopStats) -> Vec<u64> {
        let s = stats.shared(Hop::GatewayWrite);
        let snap = s.snapshot(&[7.5e-6, 8.5e-6, 1e3], 1e-9);
        snap.per_bucket().iter().map(|b| b.1).collect()
    }

    #[test]
    fn an_answer_is_timed_when_its_last_byte_is_written() {
        let stats = HopStats::default();
        let mut hop = stats.recorder(Hop::GatewayWrite);
        let mut m = AnswerMarks::new();
        // 100 bytes of prices, then a 50-byte answer popped at 0.1 s.
        let t = 100_000_000;
        m.on_append(150, t);
        m.on_written(149, &mut hop, || t + 4_000);
        assert_eq!(m.pending(), 1, "one byte of it still buffered");
        m.on_written(1, &mut hop, || t + 8_000);
        assert_eq!(m.pending(), 0);
        // 8 us from pop to the last byte; merged on the first record (its
        // last merge was at 0, more than 10 ms before).
        assert_eq!(buckets(&stats), vec![0, 1, 0]);
    }

    #[test]
    fn a_full_ring_leaves_answers_unmeasured_and_positions_right() {
        let stats = HopStats::default();
        let mut hop = stats.recorder(Hop::GatewayWrite);
        let mut m = AnswerMarks::new();
        for k in 1..=MARKS + 10 {
            m.on_append(k * 10, 0);
        }
        assert_eq!(m.pending(), MARKS);
        m.on_written(MARKS * 10, &mut hop, || 100_000_000);
        assert_eq!(m.pending(), 0);
        // Later answers are positioned after the bytes written.
        m.on_append(5, 0);
        m.on_written(4, &mut hop, || 150_000_000);
        assert_eq!(m.pending(), 1);
        // Late enough that the recorder merges what it holds.
        m.on_written(1, &mut hop, || 200_000_000);
        assert_eq!(m.pending(), 0);
        // Only the marked answers were timed: MARKS + 1 of MARKS + 11.
        let timed: u64 = buckets(&stats).iter().sum();
        assert_eq!(timed, MARKS as u64 + 1);
    }
}
