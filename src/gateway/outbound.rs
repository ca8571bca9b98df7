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
//!
//! The marks count every byte queued for the connection: this buffer's
//! and, as last seen, the kernel send queue's ([`SendQueue`]). Age counts
//! too: a connection whose kernel queue holds bytes older than the price
//! age limit (`--price-age-max-ms`) conflates whatever its byte count, and
//! leaves conflating only once the queue is back under half the limit.
//! The first price appended to a buffer with none unwritten starts a run
//! that lasts until the buffer empties; when that price has waited longer
//! than the limit, the run's unwritten price frames are dropped
//! ([`OutBuf::drop_stale_prices`]; control frames in it stay, in order),
//! so a price is handed to the kernel within the limit or not at all —
//! except the one frame the kernel took part of, which is finished.
//!
//! A price frame not yet handed to the kernel may be replaced in place by
//! a newer price of its key (merging, [`OutBuf::unwritten`] and
//! [`OutBuf::frame_mut`]): a frame is named by its absolute position, the
//! bytes appended before it since the buffer was made, which compactions
//! keep and a drop never gives to another frame, so a mark taken at an
//! append names that frame for as long as it is unwritten, and nothing
//! after.

use std::io::{self, Write};

use super::sendq::SendQueue;

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
    /// The kernel send queue as last seen.
    sendq: SendQueue,
    /// The age limit of queued bytes, ns (`u64::MAX`: none).
    age_max_ns: u64,
    /// The trailing run of unwritten price frames, if any.
    price_tail: Option<Run>,
    /// Absolute position of `buf[0]` (see the module).
    base: u64,
    /// Marks below this absolute position name dropped frames.
    floor: u64,
    /// How long a key's price may wait unwritten before a newer one
    /// replaces it instead of queueing behind (`--merge-after-us`), ns.
    merge_after_ns: u64,
}

/// The mark of no frame.
pub const NO_MARK: u64 = u64::MAX;

/// The prices appended since the buffer was last empty (or since its
/// last drop): where the first starts, when it was appended, and the
/// earliest receive time (monotonic ns) of any price put in the run —
/// the age of the oldest price a write hands over, at most.
#[derive(Debug, Clone, Copy)]
struct Run {
    at: usize,
    since_ns: u64,
    rx_min_ns: u64,
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
            sendq: SendQueue::default(),
            age_max_ns: u64::MAX,
            price_tail: None,
            base: 0,
            floor: 0,
            merge_after_ns: u64::MAX,
        }
    }

    /// Merges a key's newer price into its unwritten one once that has
    /// waited `ns` (see the module; `u64::MAX`: never).
    pub fn with_merge_after(mut self, ns: u64) -> Self {
        self.merge_after_ns = ns;
        self
    }

    /// How long a price waits unwritten before newer ones merge into it.
    #[inline]
    pub fn merge_after_ns(&self) -> u64 {
        self.merge_after_ns
    }

    /// Where in the buffer the frame appended at absolute position `mark`
    /// starts, if no byte of it has been handed to the kernel (and it was
    /// not dropped).
    #[inline]
    pub fn unwritten(&self, mark: u64) -> Option<usize> {
        let lo = self.floor.max(self.base + self.start as u64);
        (mark >= lo && mark < self.base + self.end as u64).then(|| (mark - self.base) as usize)
    }

    /// The `len` unwritten bytes at `at` (from [`OutBuf::unwritten`]) to
    /// rewrite in place.
    #[inline]
    pub fn frame_mut(&mut self, at: usize, len: usize) -> Option<&mut [u8]> {
        if at < self.start || at + len > self.end {
            return None;
        }
        self.buf.get_mut(at..at + len)
    }

    /// Conflates when queued bytes are older than `ns` (see the module).
    pub fn with_age_max(mut self, ns: u64) -> Self {
        self.age_max_ns = ns;
        self
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

    /// Bytes an append may still use (the final reserve excluded).
    #[inline]
    pub fn room(&self) -> usize {
        (self.buf.len() - self.reserve).saturating_sub(self.len())
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
            .map_or(Append::Overflow, |_| Append::Appended)
    }

    /// [`OutBuf::append_with`] for one price frame at `now_ns`: it joins
    /// the tail of unwritten prices that [`OutBuf::drop_stale_prices`]
    /// may drop.
    #[inline]
    pub fn append_price_with(
        &mut self,
        need: usize,
        now_ns: u64,
        f: impl FnOnce(&mut [u8]) -> usize,
    ) -> Append {
        match self.append_price_mark(need, (now_ns, now_ns), f) {
            Some(_) => Append::Appended,
            None => Append::Overflow,
        }
    }

    /// [`OutBuf::append_price_with`] at `now_ns` of a price this process
    /// received at `rx_ns`; returns the frame's mark (its absolute
    /// position, for [`OutBuf::unwritten`]), `None` on overflow.
    #[inline]
    pub fn append_price_mark(
        &mut self,
        need: usize,
        (now_ns, rx_ns): (u64, u64),
        f: impl FnOnce(&mut [u8]) -> usize,
    ) -> Option<u64> {
        let limit = self.buf.len() - self.reserve;
        let at = self.append_upto(limit, need, f).ok()?;
        // A run in progress keeps its start and its first time.
        let run = self.price_tail.get_or_insert(Run {
            at,
            since_ns: now_ns,
            rx_min_ns: rx_ns,
        });
        run.rx_min_ns = run.rx_min_ns.min(rx_ns);
        Some(self.base + at as u64)
    }

    /// Drops the unwritten price frames of the run that began with the
    /// first price appended since the buffer was last empty, if that price
    /// was appended longer ago than the age limit. Returns whether it did;
    /// see [`OutBuf::drop_prices`] for `f`.
    pub fn drop_stale_prices(
        &mut self,
        now_ns: u64,
        f: impl FnOnce(&mut [u8], usize) -> usize,
    ) -> bool {
        match self.price_tail {
            Some(run) if now_ns.saturating_sub(run.since_ns) > self.age_max_ns => {
                self.drop_prices(f)
            }
            _ => false,
        }
    }

    /// Drops the unwritten price frames of the run (see the module):
    /// `f` gets the run's bytes (whole frames from its first price to the
    /// end of the buffer) and how many of them the kernel already took;
    /// it moves the frames it keeps (every control frame, and the frame
    /// the kernel took part of) down in place, never before that count,
    /// and returns the run's new length. Returns whether there was a run.
    pub fn drop_prices(&mut self, f: impl FnOnce(&mut [u8], usize) -> usize) -> bool {
        let Some(Run { at, .. }) = self.price_tail.take() else {
            return false;
        };
        debug_assert!(at <= self.end, "the run is in the buffer");
        let written = self.start.saturating_sub(at);
        let kept = f(&mut self.buf[at..self.end], written);
        assert!(
            kept >= written && at + kept <= self.end,
            "kept {kept} of a run"
        );
        // Later frames moved down: no position of a dropped frame is
        // given to another, and no mark from before names a frame.
        self.base += (self.end - (at + kept)) as u64;
        self.end = at + kept;
        self.floor = self.base + self.end as u64;
        true
    }

    /// A price this process received at `rx_ns` was merged into a frame
    /// of the run (an appended one is noted by its append).
    #[inline]
    pub fn note_price_rx(&mut self, rx_ns: u64) {
        if let Some(run) = self.price_tail.as_mut() {
            run.rx_min_ns = run.rx_min_ns.min(rx_ns);
        }
    }

    /// At most how old, at `now_ns`, the oldest price the next write
    /// hands over is, since this process received it — the earliest
    /// receive time of the prices appended since the buffer was last
    /// empty (some may be written already, so this never understates) —
    /// or `None` with no price unwritten.
    #[inline]
    pub fn handoff_age_ns(&self, now_ns: u64) -> Option<u64> {
        self.price_tail
            .map(|run| now_ns.saturating_sub(run.rx_min_ns))
    }

    /// How long the oldest byte queued for the connection has waited: the
    /// unwritten prices' or the kernel queue's (as last seen).
    #[inline]
    pub fn age_ns(&self, now_ns: u64) -> u64 {
        let tail = self
            .price_tail
            .map_or(0, |run| now_ns.saturating_sub(run.since_ns));
        tail.max(self.sendq.age_ns(now_ns))
    }

    /// `n` bytes were handed to the kernel at `now_ns`.
    #[inline]
    pub fn on_written(&mut self, n: usize, now_ns: u64) {
        self.sendq.on_written(n, now_ns);
    }

    /// Whether the kernel's queue should be looked at after this write.
    #[inline]
    pub fn wants_look(&self) -> bool {
        self.sendq.wants_look(!self.is_empty())
    }

    /// The kernel holds `held` bytes of this connection (`SIOCOUTQ`),
    /// `unsent` of them not yet sent (`SIOCOUTQNSD`).
    #[inline]
    pub fn on_look(&mut self, held: u64, unsent: u64) {
        self.sendq.on_look(held, unsent);
    }

    /// Bytes queued for the connection: this buffer's and the kernel's.
    #[inline]
    pub fn queued(&self) -> usize {
        self.len() + self.sendq.bytes() as usize
    }

    /// The kernel queue as last seen.
    pub fn sendq(&self) -> &SendQueue {
        &self.sendq
    }

    /// [`OutBuf::append_with`] for the frame that ends the connection: it
    /// may use the reserve (see [`OutBuf::with_final_reserve`]).
    pub fn append_final(&mut self, need: usize, f: impl FnOnce(&mut [u8]) -> usize) -> Append {
        let limit = self.buf.len();
        match self.append_upto(limit, need, f) {
            Ok(_) => Append::Appended,
            Err(()) => Append::Overflow,
        }
    }

    /// Appends below `limit`; the offset the frame starts at, or `Err`
    /// when it does not fit.
    #[inline]
    fn append_upto(
        &mut self,
        limit: usize,
        need: usize,
        f: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<usize, ()> {
        if limit.saturating_sub(self.end) < need {
            self.compact();
            if limit.saturating_sub(self.end) < need {
                return Err(());
            }
        }
        let free = limit - self.end;
        let at = self.end;
        let n = f(&mut self.buf[self.end..limit]);
        if n == 0 {
            return Err(());
        }
        debug_assert!(n <= free, "encoder wrote {n} bytes into {free}");
        self.end += n;
        Ok(at)
    }

    fn compact(&mut self) {
        debug_assert!(self.start <= self.end && self.end <= self.buf.len());
        if self.start > 0 {
            // The run keeps the start of the frame the kernel is in.
            let from = match self.price_tail {
                Some(run) if run.at < self.start => self.frame_at(run.at),
                _ => self.start,
            };
            self.buf.copy_within(from..self.end, 0);
            self.base += from as u64;
            if let Some(run) = self.price_tail.as_mut() {
                run.at = run.at.max(from) - from;
            }
            self.end -= from;
            self.start -= from;
        }
    }

    /// The start of the frame that holds byte `start`, walking SOFH frames
    /// from `at` (a run holds whole SOFH frames: every frame the gateway
    /// appends is one). O(frames the kernel took since the run began), on
    /// a compaction only.
    fn frame_at(&self, mut at: usize) -> usize {
        while let Some(h) = self.buf.get(at..at + 4).filter(|_| at < self.start) {
            let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
            if len == 0 || at + len > self.start {
                break;
            }
            at += len;
        }
        at
    }

    /// Updates the water-mark state after appends or writes. Returns true
    /// when the connection just drained below low after conflating (the
    /// caller now sends the conflated snapshots).
    ///
    /// Bytes count this buffer's and the kernel's; queued bytes older than
    /// the age limit ([`OutBuf::age_ns`]) conflate too, and older than
    /// half of it keep conflating.
    #[inline]
    pub fn update_flow(&mut self, now_ns: u64) -> bool {
        let queued = self.queued();
        let age = self.age_ns(now_ns);
        match self.flow {
            Flow::WriteThrough if queued > self.high || age > self.age_max_ns => {
                self.flow = Flow::Conflating { since_ns: now_ns };
                false
            }
            Flow::Conflating { .. } if queued < self.low && age <= self.age_max_ns / 2 => {
                self.flow = Flow::WriteThrough;
                true
            }
            _ => false,
        }
    }

    /// How long the connection has been conflating with more than the low
    /// mark queued (or its kernel queue still too old), if it is.
    pub fn above_high_for_ns(&self, now_ns: u64) -> Option<u64> {
        let behind = self.queued() > self.low || self.age_ns(now_ns) > self.age_max_ns / 2;
        match self.flow {
            Flow::Conflating { since_ns } if behind => Some(now_ns.saturating_sub(since_ns)),
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
        self.base += self.end as u64;
        self.start = 0;
        self.end = 0;
        self.price_tail = None;
        Ok(true)
    }

    /// Drops everything pending (used when closing).
    pub fn clear(&mut self) {
        self.base += self.end as u64;
        self.floor = self.base;
        self.start = 0;
        self.end = 0;
        self.flow = Flow::WriteThrough;
        self.price_tail = None;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A socket that takes at most `quota` bytes, then would block (the
    /// age and merge tests write to it too).
    pub(in crate::gateway) struct Slow {
        pub(in crate::gateway) quota: usize,
        pub(in crate::gateway) got: Vec<u8>,
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

#[cfg(test)]
#[path = "outbound_age_tests.rs"]
mod age_tests;
