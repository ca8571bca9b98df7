//! A byte buffer owned by one TLS connection: allocated when the
//! connection is accepted, grown only while the handshake needs more, and
//! reused for every record after that.

use std::io::{self, Read, Write};

/// Bytes `[start, end)` of `buf` are filled; the rest is spare.
#[derive(Debug)]
pub(crate) struct Bytes {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Bytes {
    /// A buffer of `len` bytes, allocated once here.
    pub(crate) fn with_len(len: usize) -> Bytes {
        Bytes {
            buf: vec![0; len],
            start: 0,
            end: 0,
        }
    }

    /// The filled bytes.
    pub(crate) fn filled(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The filled bytes, mutable (records are opened in place).
    pub(crate) fn filled_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.end]
    }

    /// Filled byte count.
    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether nothing is filled.
    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Total size.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Drops `n` bytes from the front of the filled part.
    pub(crate) fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// The spare bytes after the filled part, moving the filled part to the
    /// front first when that gives more room. [`Bytes::commit`] what was
    /// written.
    pub(crate) fn spare_mut(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    /// Marks `n` spare bytes as filled.
    pub(crate) fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Grows the buffer so that at least `extra` spare bytes follow the
    /// filled part (handshake only: it allocates).
    pub(crate) fn reserve(&mut self, extra: usize) {
        let need = self.len() + extra;
        if need > self.buf.len() {
            self.buf.resize(need, 0);
        }
    }

    /// Gives back what [`Bytes::reserve`] grew past `len` bytes, keeping
    /// the filled part (which must fit); allocates when it shrinks.
    pub(crate) fn shrink_to(&mut self, len: usize) {
        if self.buf.len() <= len || self.len() > len {
            return;
        }
        let mut buf = vec![0; len];
        buf[..self.len()].copy_from_slice(self.filled());
        self.end = self.len();
        self.start = 0;
        self.buf = buf;
    }

    /// Reads once from `r` into the spare bytes: `Ok(0)` is end of stream.
    pub(crate) fn read_from(&mut self, r: &mut impl Read) -> io::Result<usize> {
        let spare = self.spare_mut();
        if spare.is_empty() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        let n = r.read(spare)?;
        self.commit(n);
        Ok(n)
    }

    /// Writes filled bytes to `w` until none are left (`Ok(true)`) or `w`
    /// would block (`Ok(false)`).
    pub(crate) fn write_to(&mut self, w: &mut impl Write) -> io::Result<bool> {
        while !self.is_empty() {
            match w.write(self.filled()) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.consume(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::Bytes;

    #[test]
    fn consumed_bytes_make_room_at_the_front() {
        let mut b = Bytes::with_len(8);
        b.spare_mut()[..6].copy_from_slice(b"abcdef");
        b.commit(6);
        b.consume(4);
        assert_eq!(b.filled(), b"ef");
        assert_eq!(b.spare_mut().len(), 6, "compacted");
        assert_eq!(b.filled(), b"ef");
        b.consume(2);
        assert!(b.is_empty());
        b.reserve(20);
        assert_eq!(b.capacity(), 20);
    }
}
