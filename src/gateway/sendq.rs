//! What a connection's kernel send queue holds, as the shard last saw it:
//! the bytes handed to the socket and not yet acknowledged by the peer
//! (`SIOCOUTQ`), and how long the oldest byte not yet sent (`SIOCOUTQNSD`)
//! has waited.
//!
//! The kernel's queue is a queue between the engine and the terminal like
//! the outbound buffer, and on loopback it auto-tunes to megabytes; the
//! water marks ([`super::outbound::OutBuf`]) count it with their own
//! bytes, and its age as well as its size, so a terminal that reads
//! slowly is conflated by what it has not taken, wherever that waits.
//! The socket's buffer is bounded too (`--sndbuf-bytes`).
//!
//! The byte count (for the water marks) includes bytes in flight; the age
//! does not: a byte sent and not yet acknowledged is on the network, and
//! a round trip longer than the age limit (a terminal 30 ms away) must
//! not read as a terminal that does not read. A terminal that stops
//! reading closes its window, and what it has not taken stays unsent.
//!
//! Ages come from a log of the last [`LOG`] writes (the byte count after
//! each, and when): the oldest unsent byte was written by the first
//! logged write that ends past the sent count. When more
//! writes wait than the log holds, the newest entry takes the new bytes
//! with its older time, so an age is never understated. On TLS the
//! kernel holds records (plaintext plus framing), so the queue reads a
//! little longer, and its age a little older, than the plaintext written.
//!
//! A look costs one `ioctl`; the shard looks after a write only while the
//! kernel held bytes at the last look, the write left bytes behind, or
//! [`LOOK_BYTES`] were written since the last look — not per heartbeat.

/// Default of `--sndbuf-bytes`: 64 KiB asked, 128 KiB granted (the
/// kernel doubles it), a few milliseconds of a busy terminal's prices and
/// a 50-ms round trip at 2.6 MB/s; without it loopback auto-tunes to 4 MiB,
/// a queue of seconds for a terminal that reads slowly (issue #28).
pub const SNDBUF_BYTES_DEFAULT: usize = 64 * 1024;
/// Largest `--sndbuf-bytes`.
pub const SNDBUF_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Refuses a send buffer out of range (the flag's check).
pub(super) fn check_sndbuf_bytes(bytes: usize) -> Result<(), super::SettingsError> {
    if bytes != 0 && !(4096..=SNDBUF_BYTES_MAX).contains(&bytes) {
        return Err(super::SettingsError::value(
            "--sndbuf-bytes",
            bytes as u64,
            format!("0 (kernel auto-tuning) or 4096..={SNDBUF_BYTES_MAX}"),
        ));
    }
    Ok(())
}

/// Writes remembered for the age of the oldest unacknowledged byte.
pub const LOG: usize = 8;
/// Bytes written since the last look after which the next write looks
/// again (a peer that stopped reading is seen within this many bytes).
pub const LOOK_BYTES: u64 = 4096;

/// A connection's kernel send queue as last seen.
#[derive(Debug, Clone, Default)]
pub struct SendQueue {
    /// Bytes handed to the kernel so far.
    written: u64,
    /// Of those, held by the kernel at the last look.
    queued: u64,
    /// Of those, not yet sent at the last look.
    unsent: u64,
    /// Bytes written since the last look.
    unseen: u64,
    /// (value of `written` after a write, when), oldest first, in a ring.
    log: [(u64, u64); LOG],
    head: usize,
    len: usize,
}

impl SendQueue {
    /// `n` bytes handed to the kernel at `now_ns`.
    #[inline]
    pub fn on_written(&mut self, n: usize, now_ns: u64) {
        if n == 0 {
            return;
        }
        self.written += n as u64;
        self.unseen += n as u64;
        if self.len == LOG {
            // Full: the newest entry takes the bytes, keeping its time.
            let newest = (self.head + LOG - 1) % LOG;
            self.log[newest].0 = self.written;
        } else {
            self.log[(self.head + self.len) % LOG] = (self.written, now_ns);
            self.len += 1;
        }
    }

    /// Whether the next write should look at the kernel's queue:
    /// `left_behind` is whether the write could not take everything.
    #[inline]
    pub fn wants_look(&self, left_behind: bool) -> bool {
        self.queued > 0 || left_behind || self.unseen >= LOOK_BYTES
    }

    /// The kernel said it holds `held` bytes (unsent or unacknowledged),
    /// `unsent` of them not yet sent.
    pub fn on_look(&mut self, held: u64, unsent: u64) {
        self.queued = held.min(self.written);
        self.unsent = unsent.min(self.queued);
        self.unseen = 0;
        let sent = self.written - self.unsent;
        while self.len > 0 && self.log[self.head].0 <= sent {
            self.head = (self.head + 1) % LOG;
            self.len -= 1;
        }
        if self.unsent == 0 {
            self.len = 0;
        }
    }

    /// Bytes the kernel held at the last look.
    #[inline]
    pub fn bytes(&self) -> u64 {
        self.queued
    }

    /// How long the oldest byte the kernel had not sent at the last look
    /// has waited at `now_ns` (0 when there was none).
    #[inline]
    pub fn age_ns(&self, now_ns: u64) -> u64 {
        if self.unsent == 0 || self.len == 0 {
            return 0;
        }
        now_ns.saturating_sub(self.log[self.head].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_age_is_the_oldest_unacknowledged_write() {
        let mut q = SendQueue::default();
        q.on_written(100, 10);
        q.on_written(100, 20);
        q.on_written(100, 30);
        q.on_look(150, 150);
        assert_eq!(q.bytes(), 150);
        // Bytes 150..200 are from the write at 20.
        assert_eq!(q.age_ns(50), 30);
        q.on_look(100, 100);
        assert_eq!(q.age_ns(50), 20, "the write at 30 is the oldest left");
        q.on_look(100, 0);
        assert_eq!((q.bytes(), q.age_ns(50)), (100, 0), "in flight: no age");
        q.on_look(0, 0);
        assert_eq!((q.bytes(), q.age_ns(50)), (0, 0));
    }

    #[test]
    fn it_looks_while_the_kernel_holds_bytes_or_after_enough_writes() {
        let mut q = SendQueue::default();
        q.on_written(10, 1);
        assert!(!q.wants_look(false));
        assert!(q.wants_look(true));
        q.on_written(LOOK_BYTES as usize, 2);
        assert!(q.wants_look(false));
        q.on_look(5, 0);
        assert!(q.wants_look(false), "the kernel holds bytes");
        q.on_look(0, 0);
        assert!(!q.wants_look(false));
    }

    /// The two `ioctl`s on a real socket with the default send buffer: a
    /// peer that does not read leaves bytes unsent behind its closed
    /// window; once it has read them, none are held.
    #[test]
    fn the_kernel_counts_what_a_peer_has_not_taken() {
        use crate::runtime::sys::{send_queue_bytes, set_send_buffer};
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut ours, _) = listener.accept().unwrap();
        set_send_buffer(&ours, SNDBUF_BYTES_DEFAULT).unwrap();
        ours.set_nonblocking(true).unwrap();
        let chunk = [7u8; 4096];
        let mut written = 0usize;
        // Write whenever the socket takes bytes until the peer's window
        // closes (its receive buffer full): what is left is unsent.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let (held, unsent) = loop {
            match ours.write(&chunk) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let (held, unsent) = send_queue_bytes(&ours).unwrap();
                    if unsent > 0 {
                        break (held, unsent);
                    }
                    assert!(std::time::Instant::now() < deadline, "nothing left unsent");
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert!(
            unsent <= held && held <= written as u64,
            "{unsent} {held} {written}"
        );
        let mut buf = vec![0u8; 64 * 1024];
        let mut read = 0;
        while read < written {
            read += peer.read(&mut buf).unwrap();
        }
        // The peer took everything: the last acknowledgement empties it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while send_queue_bytes(&ours).unwrap() != (0, 0) {
            assert!(std::time::Instant::now() < deadline, "never acknowledged");
            std::thread::yield_now();
        }
    }

    proptest! {
        /// Whatever the writes and looks, the age is never younger than
        /// the oldest byte not yet sent, and 0 when every byte was sent.
        #[test]
        fn an_age_is_never_understated(
            ops in proptest::collection::vec((1usize..500, 0u64..2, 0u64..100), 1..60)
        ) {
            let mut q = SendQueue::default();
            // Every write as (end, time), to find the true oldest.
            let mut all: Vec<(u64, u64)> = Vec::new();
            let mut now = 0u64;
            for (n, look, dt) in ops {
                now += dt;
                q.on_written(n, now);
                all.push((q.written, now));
                if look == 1 {
                    let unsent = q.written / 2;
                    q.on_look(unsent + unsent / 2, unsent);
                    let sent = q.written - unsent;
                    let truth = all.iter().find(|(end, _)| *end > sent).map(|(_, t)| *t);
                    match truth {
                        Some(t) if unsent > 0 => {
                            prop_assert!(q.age_ns(now) >= now - t);
                        }
                        _ => prop_assert_eq!(q.age_ns(now), 0),
                    }
                }
            }
        }
    }
}
