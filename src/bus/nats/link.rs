//! One server connection's bytes: plain TCP, or TLS over it (`tls.rs`),
//! behind the same non-blocking read and write the client loop uses.
//! Plaintext pays one enum match per socket call.

use std::io::{self, Read, Write};

use super::tls::TlsSession;

/// The connection's transport.
#[derive(Debug)]
pub(crate) enum Link {
    Plain,
    Tls(Box<TlsSession>),
}

impl Link {
    /// Bytes from the server (plaintext) into `dst`; `Ok(0)` at its end.
    pub(crate) fn read<S: Read>(&mut self, sock: &mut S, dst: &mut [u8]) -> io::Result<usize> {
        match self {
            Link::Plain => sock.read(dst),
            Link::Tls(t) => t.read(sock, dst),
        }
    }

    /// Takes a prefix of `src` for the server.
    pub(crate) fn write<S: Write>(&mut self, sock: &mut S, src: &[u8]) -> io::Result<usize> {
        match self {
            Link::Plain => sock.write(src),
            Link::Tls(t) => t.write(sock, src),
        }
    }

    /// Pushes what [`Link::write`] took but the socket did not.
    pub(crate) fn flush<S: Write>(&mut self, sock: &mut S) -> io::Result<()> {
        match self {
            Link::Plain => Ok(()),
            Link::Tls(t) => t.flush(sock),
        }
    }

    /// Bytes taken wait for the socket.
    pub(crate) fn pending(&self) -> bool {
        match self {
            Link::Plain => false,
            Link::Tls(t) => t.pending(),
        }
    }

    /// All of `buf`, on a blocking socket (the handshake).
    pub(crate) fn write_all<S: Write>(&mut self, sock: &mut S, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write(sock, buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.flush(sock)
    }
}
