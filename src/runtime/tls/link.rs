//! One connection's byte link: a plain socket or a rustls server session
//! over it, behind the same non-blocking `Read`/`Write` the event loops
//! already use.
//!
//! TLS path: `read` drains plaintext rustls already holds, else
//! `read_tls` from the socket (until `WouldBlock`), `process_new_packets`,
//! and sends what the handshake wants sent. `write` hands plaintext to
//! rustls (which encrypts it into a record) and pushes records to the
//! socket; when rustls holds [`TLS_SEND_BUFFER_BYTES`](super::TLS_SEND_BUFFER_BYTES)
//! it takes nothing more and `write` says `WouldBlock`, so back-pressure
//! stays in the caller's outbound buffer. Encrypted bytes the socket did
//! not take are pushed by [`Link::flush_pending`] on the next writable
//! edge.

use std::io::{self, Read, Write};
use std::sync::Arc;

use mio::event::Source;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use rustls::ServerConnection;

use super::{HandshakeFailure, TlsStats};

/// A connection's transport.
#[derive(Debug)]
pub enum Link {
    /// Plaintext: reads and writes go straight to the socket.
    Plain(TcpStream),
    /// TLS: see [`TlsLink`].
    Tls(Box<TlsLink>),
}

/// A server-side TLS session over a non-blocking socket.
pub struct TlsLink {
    stream: TcpStream,
    tls: ServerConnection,
    /// Monotonic deadline of the handshake.
    deadline_ns: u64,
    /// The handshake failed or expired: counted once, nothing more is read.
    failed: bool,
    /// The client's address when it is not the socket's peer (a PROXY
    /// header named it); logs use it.
    client: Option<std::net::SocketAddr>,
    listener: &'static str,
    stats: Arc<TlsStats>,
}

impl std::fmt::Debug for TlsLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsLink")
            .field("listener", &self.listener)
            .field("handshaking", &self.tls.is_handshaking())
            .finish_non_exhaustive()
    }
}

impl TlsLink {
    pub(super) fn new(
        stream: TcpStream,
        tls: ServerConnection,
        deadline_ns: u64,
        listener: &'static str,
        stats: Arc<TlsStats>,
    ) -> TlsLink {
        TlsLink {
            stream,
            tls,
            deadline_ns,
            failed: false,
            client: None,
            listener,
            stats,
        }
    }

    /// Counts and logs a failed handshake (once per connection). The log
    /// line carries the peer, the listener and rustls's reason, never key
    /// material; it is thinned to the first 16 of each reason and then
    /// every power of two, so a flood of bad handshakes cannot flood the log.
    fn fail(&mut self, why: HandshakeFailure, detail: &dyn std::fmt::Display) {
        if self.failed {
            return;
        }
        self.failed = true;
        let n = self.stats.count_failure(why);
        if n <= 16 || n.is_power_of_two() {
            let peer = self.client.or_else(|| self.stream.peer_addr().ok());
            tracing::warn!(listener = self.listener, ?peer, reason = why.label(),
                count = n, detail = %detail, "TLS handshake failed");
        }
    }

    /// Pushes encrypted bytes to the socket. `Ok(true)` when none are left.
    fn push(&mut self) -> io::Result<bool> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.stream) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if self.failed {
                return Err(io::ErrorKind::ConnectionAborted.into());
            }
            let handshaking = self.tls.is_handshaking();
            match self.tls.read_tls(&mut self.stream) {
                Ok(0) => {
                    if handshaking {
                        self.fail(HandshakeFailure::PeerClosed, &"closed by peer");
                    }
                    return Ok(0);
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            if let Err(e) = self.tls.process_new_packets() {
                if handshaking {
                    self.fail(HandshakeFailure::of(&e), &e);
                }
                // rustls queued an alert for the peer: send it if it fits.
                let _ = self.push();
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            if handshaking && !self.tls.is_handshaking() {
                self.stats
                    .handshakes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            // Handshake replies (and key updates); a full socket leaves
            // them for the next writable edge.
            self.push()?;
        }
    }

    fn write_plain(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.push()?;
        let n = self.tls.writer().write(buf)?;
        self.push()?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }
}

impl Link {
    /// The socket under the link.
    pub fn socket(&self) -> &TcpStream {
        match self {
            Link::Plain(s) => s,
            Link::Tls(t) => &t.stream,
        }
    }

    /// Names the client when it is not the socket's peer (the address a
    /// PROXY header gave): a failed handshake is logged with it. No effect
    /// on plaintext.
    pub fn set_client(&mut self, client: std::net::SocketAddr) {
        if let Link::Tls(t) = self {
            t.client = Some(client);
        }
    }

    /// Whether this is a TLS link.
    pub fn is_tls(&self) -> bool {
        matches!(self, Link::Tls(_))
    }

    /// Pushes encrypted bytes the socket did not take before. `Ok(true)`
    /// when nothing is left (always for plaintext).
    #[inline]
    pub fn flush_pending(&mut self) -> io::Result<bool> {
        match self {
            Link::Plain(_) => Ok(true),
            Link::Tls(t) => t.push(),
        }
    }

    /// Whether encrypted bytes wait for the socket (never for plaintext).
    #[inline]
    pub fn has_pending(&self) -> bool {
        match self {
            Link::Plain(_) => false,
            Link::Tls(t) => t.tls.wants_write(),
        }
    }

    /// Whether a read shorter than asked means the socket is drained. Not
    /// for TLS: one plaintext read may leave socket bytes unread.
    #[inline]
    pub fn short_read_drains(&self) -> bool {
        !self.is_tls()
    }

    /// Whether the handshake is still running at monotonic `now_ns` past its
    /// deadline; counted (once) as [`HandshakeFailure::Timeout`]. The caller
    /// closes the connection. Never for plaintext.
    pub fn handshake_expired(&mut self, now_ns: u64) -> bool {
        let Link::Tls(t) = self else {
            return false;
        };
        if t.failed || !t.tls.is_handshaking() || now_ns < t.deadline_ns {
            return false;
        }
        t.fail(HandshakeFailure::Timeout, &"handshake deadline passed");
        true
    }

    /// Moves the handshake deadline out by `ns` (the loop stalled: the
    /// peer's bytes may be waiting unread).
    pub fn extend_deadline(&mut self, ns: u64) {
        if let Link::Tls(t) = self {
            t.deadline_ns = t.deadline_ns.saturating_add(ns);
        }
    }

    /// Ends our sending side: TLS close_notify (as far as the socket
    /// takes it) and then the socket's write half.
    pub fn shutdown_write(&mut self) {
        if let Link::Tls(t) = self {
            if !t.tls.is_handshaking() {
                t.tls.send_close_notify();
                let _ = t.push();
            }
        }
        let _ = self.socket().shutdown(std::net::Shutdown::Write);
    }

    /// Best-effort write of one small frame on a connection being refused
    /// (a fresh socket's send buffer takes it). A TLS link still
    /// handshaking cannot carry it and is closed without it.
    pub fn write_last(&mut self, bytes: &[u8]) {
        match self {
            Link::Plain(s) => {
                let _ = s.write(bytes);
            }
            Link::Tls(t) if !t.tls.is_handshaking() => {
                let _ = t.tls.writer().write(bytes);
                let _ = t.push();
            }
            Link::Tls(_) => {}
        }
    }
}

impl Read for Link {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.read(buf),
            Link::Tls(t) => t.read_plain(buf),
        }
    }
}

impl Write for Link {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.write(buf),
            Link::Tls(t) => t.write_plain(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.flush_pending()? {
            true => Ok(()),
            false => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Source for Link {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Link::Plain(s) => s.register(r, t, i),
            Link::Tls(l) => l.stream.register(r, t, i),
        }
    }

    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Link::Plain(s) => s.reregister(r, t, i),
            Link::Tls(l) => l.stream.reregister(r, t, i),
        }
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Link::Plain(s) => s.deregister(r),
            Link::Tls(l) => l.stream.deregister(r),
        }
    }
}
