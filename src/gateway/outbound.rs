//! A connection's outbound byte buffer with Netty-style water marks.
//!
//! The buffer is allocated once, at accept, with a hard capacity; it never
//! grows. Below the low water mark prices are written through. Crossing the
//! high mark switches the connection to *conflating*: price updates are no
//! longer appended, only the (symbol, tier) keys that changed are marked,
//! and once the buffer drains below the low mark the latest price of every
//! marked key is sent as a snapshot flagged conflated. A connection that
//! stays above the high mark for longer than the slow-consumer limit, or
//! whose buffer cannot take a control message, is disconnected as a slow
//! consumer. Memory per connection is bounded by the hard capacity.

use std::io::{self, Write};

/// Default low water mark in bytes.
pub const LOW_WATER_BYTES_DEFAULT: usize = 32 * 1024;
/// Default high water mark in bytes.
pub const HIGH_WATER_BYTES_DEFAULT: usize = 64 * 1024;
/// Default hard capacity in bytes (room for control messages above high).
pub const OUT_CAP_BYTES_DEFAULT: usize = 128 * 1024;

/// Water-mark state of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Below the high mark (or back below low): prices are appended.
    WriteThrough,
    /// Went above high at `since_ns`; prices are conflated until the
    /// buffer drains below low.
    Conflating {
        /// When it went above high (monotonic ns).
        since_ns: u64,
    },
}

/// Outcome of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Append {
    /// The bytes were appended.
    Appended,
    /// No room even under the hard cap: the connection must be closed as a
    /// slow consumer.
    Overflow,
}

/// Fixed-capacity outbound buffer.
#[derive(Debug)]
pub struct OutBuf {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    low: usize,
    high: usize,
    flow: Flow,
    /// Bytes at the end only [`OutBuf::append_final`] may use.
    reserve: usize,
}

impl OutBuf {
    /// A buffer of `cap` bytes, allocated here, with water marks `low` and
    /// `high` (bytes). Panics unless `low < high <= cap` (a configuration
    /// checked at start-up).
    pub fn new(cap: usize, low: usize, high: usize) -> Self {
        assert!(
            low < high && high <= cap,
            "water marks must satisfy low < high <= cap"
        );
        OutBuf {
            buf: vec![0u8; cap].into_boxed_slice(),
            start: 0,
            end: 0,
            low,
            high,
            flow: Flow::WriteThrough,
            reserve: 0,
        }
    }

    /// Keeps the last `bytes` (at most half the capacity) for the frame
    /// that ends the connection (see [`OutBuf::append_final`]): a buffer
    /// filled by prices or answers still takes the Disconnect that says
    /// why it is closed.
    pub fn with_final_reserve(mut self, bytes: usize) -> Self {
        self.reserve = bytes.min(self.buf.len() / 2);
        self
    }

    /// Bytes waiting to be written.
    #[inline]
    pub fn len(&self) -> usize {
        debug_assert!(self.start <= self.end && self.end <= self.buf.len());
        self.end - self.start
    }

    /// Whether nothing is waiting to be written.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// The water-mark state.
    pub fn flow(&self) -> Flow {
        self.flow
    }

    /// Whether prices are being conflated (above high, not yet below low).
    pub fn is_conflating(&self) -> bool {
        matches!(self.flow, Flow::Conflating { .. })
    }

    /// Appends an encoded frame. Compacts when the tail lacks room.
    #[inline]
    pub fn append(&mut self, bytes: &[u8]) -> Append {
        let n = bytes.len();
        self.append_with(n, |b| {
            b[..n].copy_from_slice(bytes);
            n
        })
    }

    /// Lets an encoder write directly into the free tail: `f` gets the free
    /// space and returns how many bytes it wrote (0 = did not fit).
    #[inline]
    pub fn append_with(&mut self, need: usize, f: impl FnOnce(&mut [u8]) -> usize) -> Append {
        let limit = self.buf.len() - self.reserve;
        self.append_upto(limit, need, f)
    }

    /// [`OutBuf::append_with`] for the frame that ends the connection: it
    /// may use the reserve (see [`OutBuf::with_final_reserve`]).
    pub fn append_final(&mut self, need: usize, f: impl FnOnce(&mut [u8]) -> usize) -> Append {
        let limit = self.buf.len();
        self.append_upto(limit, need, f)
    }

    #[inline]
    fn append_upto(
        &mut self,
        limit: usize,
        need: usize,
        f: impl FnOnce(&mut [u8]) -> usize,
    ) -> Append {
        if limit.saturating_sub(self.end) < need {
            self.compact();
            if limit.saturating_sub(self.end) < need {
                return Append::Overflow;
            }
        }
        let free = limit - self.end;
        let n = f(&mut self.buf[self.end..limit]);
        if n == 0 {
            return Append::Overflow;
        }
        debug_assert!(n <= free, "encoder wrote {n} bytes into {free}");
        self.end += n;
        Append::Appended
    }

    fn compact(&mut self) {
        debug_assert!(self.start <= self.end && self.end <= self.buf.len());
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// Updates the water-mark state after appends or writes. Returns true
    /// when the connection just drained below low after conflating (the
    /// caller now sends the conflated snapshots).
    #[inline]
    pub fn update_flow(&mut self, now_ns: u64) -> bool {
        match self.flow {
            Flow::WriteThrough if self.len() > self.high => {
                self.flow = Flow::Conflating { since_ns: now_ns };
                false
            }
            Flow::Conflating { .. } if self.len() < self.low => {
                self.flow = Flow::WriteThrough;
                true
            }
            _ => false,
        }
    }

    /// How long the connection has been above the high mark, if it is.
    pub fn above_high_for_ns(&self, now_ns: u64) -> Option<u64> {
        match self.flow {
            Flow::Conflating { since_ns } if self.len() > self.low => {
                Some(now_ns.saturating_sub(since_ns))
            }
            _ => None,
        }
    }

    /// Writes as much as the socket takes. `Ok(true)` when fully drained;
    /// `Ok(false)` on `WouldBlock` with bytes left.
    pub fn write_to(&mut self, w: &mut impl Write) -> io::Result<bool> {
        while self.start < self.end {
            match w.write(&self.buf[self.start..self.end]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    debug_assert!(n <= self.end - self.start, "wrote more than given");
                    self.start += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        self.start = 0;
        self.end = 0;
        Ok(true)
    }

    /// Drops everything pending (used when closing).
    pub fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
        self.flow = Flow::WriteThrough;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket that takes at most `quota` bytes, then would block.
    struct Slow {
        quota: usize,
        got: Vec<u8>,
    }

    impl Write for Slow {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if self.quota == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = b.len().min(self.quota);
            self.quota -= n;
            self.got.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_final_frame_fits_a_buffer_others_filled() {
        let mut b = OutBuf::new(100, 20, 50).with_final_reserve(30);
        assert_eq!(b.append(&[1; 70]), Append::Appended);
        // Only the final frame may use the last 30 bytes.
        assert_eq!(b.append(&[2; 1]), Append::Overflow);
        assert_eq!(b.append_with(1, |_| 1), Append::Overflow);
        assert_eq!(b.append_final(30, |t| t.len()), Append::Appended);
        assert_eq!(b.len(), 100);
        assert_eq!(b.append_final(1, |_| 1), Append::Overflow);
        // The reserve is at most half the buffer.
        let mut c = OutBuf::new(100, 20, 50).with_final_reserve(1_000);
        assert_eq!(c.append(&[1; 50]), Append::Appended);
        assert_eq!(c.append(&[1; 1]), Append::Overflow);
    }

    #[test]
    fn hysteresis_between_high_and_low() {
        let mut b = OutBuf::new(100, 20, 50);
        for _ in 0..5 {
            assert_eq!(b.append(&[1; 10]), Append::Appended);
        }
        assert!(!b.update_flow(1));
        assert_eq!(b.flow(), Flow::WriteThrough);
        b.append(&[2; 10]);
        assert!(!b.update_flow(7));
        assert_eq!(b.flow(), Flow::Conflating { since_ns: 7 });
        assert_eq!(b.above_high_for_ns(10), Some(3));
        // Draining to 30 (between low and high) stays conflating.
        let mut s = Slow {
            quota: 30,
            got: Vec::new(),
        };
        assert!(!b.write_to(&mut s).unwrap());
        assert!(!b.update_flow(8));
        assert!(b.is_conflating());
        // Below low: back to write-through, and the caller is told.
        s.quota = 15;
        b.write_to(&mut s).unwrap();
        assert!(b.update_flow(9));
        assert_eq!(b.flow(), Flow::WriteThrough);
        assert_eq!(s.got.len(), 45);
    }

    #[test]
    fn never_grows_past_the_hard_cap() {
        let mut b = OutBuf::new(64, 8, 32);
        for _ in 0..4 {
            assert_eq!(b.append(&[0; 16]), Append::Appended);
        }
        assert_eq!(b.append(&[0; 1]), Append::Overflow);
        assert_eq!(b.len(), 64);
    }

    #[test]
    fn compacts_to_reuse_space_and_keeps_order() {
        let mut b = OutBuf::new(32, 4, 16);
        b.append(&[1; 20]);
        let mut s = Slow {
            quota: 15,
            got: Vec::new(),
        };
        b.write_to(&mut s).unwrap();
        assert_eq!(b.append(&[2; 20]), Append::Appended); // needs compaction
        s.quota = usize::MAX;
        assert!(b.write_to(&mut s).unwrap());
        let mut want = vec![1u8; 20];
        want.extend([2u8; 20]);
        assert_eq!(s.got, want);
    }

    #[test]
    fn append_with_writes_in_place() {
        let mut b = OutBuf::new(32, 4, 16);
        assert_eq!(
            b.append_with(4, |buf| {
                buf[..4].copy_from_slice(b"abcd");
                4
            }),
            Append::Appended
        );
        assert_eq!(b.append_with(64, |_| 64), Append::Overflow);
        assert_eq!(b.append_with(4, |_| 0), Append::Overflow);
        assert_eq!(b.len(), 4);
    }
}
