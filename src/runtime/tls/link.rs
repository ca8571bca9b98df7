//! One connection's byte link: a plain socket or a TLS session over it,
//! behind the same non-blocking `Read`/`Write` the event loops already use.
//!
//! TLS path: until the handshake completes, rustls's unbuffered server
//! connection drives it (`handshake.rs`) with the connection's own receive
//! and send buffers; then rustls hands over the traffic keys and
//! `traffic.rs` seals and opens records in those same buffers, so an
//! established session allocates nothing per read or write. `read` opens
//! the records the socket holds (until `WouldBlock`); `write` seals
//! plaintext into the send buffer, at most
//! [`super::TLS_SEND_BUFFER_BYTES`] of it, and
//! pushes it to the socket; past that it takes nothing and says
//! `WouldBlock`, so back-pressure stays in the caller's outbound buffer.
//! Encrypted bytes the socket did not take are pushed by
//! [`Link::flush_pending`] on the next writable edge.

use std::io::{self, Read, Write};
use std::sync::Arc;

use mio::event::Source;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use rustls::server::UnbufferedServerConnection;

use super::buf::Bytes;
use super::handshake::{self, Driven, Handshake, Parts};
use super::record::MAX_RECORD;
use super::traffic::{Opened, Traffic};
use super::{HandshakeFailure, TlsStats, TLS_SEND_BUFFER_BYTES};

/// Records carrying no application data one `read` opens at most.
const EMPTY_RECORDS_PER_READ: u32 = 64;
/// How long a refused handshake waits for the peer to close after our
/// alert and FIN (counted from the first sweep that sees it).
pub const LINGER_MS: u64 = 1_000;
/// Input dropped while waiting for the peer to close; past it the
/// connection is closed at once.
pub const LINGER_DISCARD_BYTES: usize = 256 * 1024;

/// The way out of a refused handshake ([`TlsLink::linger_read`]).
#[derive(Debug, Default)]
struct Linger {
    /// Our write half is shut (after the alert).
    shut: bool,
    /// Input dropped so far.
    discarded: usize,
    /// Monotonic end of the wait, set by the first sweep after the refusal.
    until_ns: Option<u64>,
}

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
    /// The handshake, until it completes or fails (then `None`).
    hs: Option<Box<Handshake>>,
    /// The established session, once the handshake completed.
    traffic: Option<Box<Traffic>>,
    /// Encrypted bytes from the socket, not yet opened.
    rx: Bytes,
    /// Encrypted bytes for the socket, not yet taken by it.
    tx: Bytes,
    /// Plaintext of the record at the front of `rx` not yet read, and the
    /// record's length.
    plain: std::ops::Range<usize>,
    record: usize,
    /// Monotonic deadline of the handshake.
    deadline_ns: u64,
    /// The handshake failed or expired: counted once, never driven again.
    failed: bool,
    /// A refused handshake's way out (see [`Linger`]).
    linger: Option<Linger>,
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
            .field("handshaking", &self.is_handshaking())
            .finish_non_exhaustive()
    }
}

impl TlsLink {
    pub(super) fn new(
        stream: TcpStream,
        conn: UnbufferedServerConnection,
        deadline_ns: u64,
        listener: &'static str,
        stats: Arc<TlsStats>,
    ) -> TlsLink {
        TlsLink {
            stream,
            hs: Some(Box::new(Handshake::new(conn))),
            traffic: None,
            rx: Bytes::with_len(MAX_RECORD),
            tx: Bytes::with_len(TLS_SEND_BUFFER_BYTES),
            plain: 0..0,
            record: 0,
            deadline_ns,
            failed: false,
            linger: None,
            client: None,
            listener,
            stats,
        }
    }

    /// The established session's keys (tests drive key limits with it).
    #[cfg(test)]
    pub(crate) fn traffic_mut(&mut self) -> Option<&mut Traffic> {
        self.traffic.as_deref_mut()
    }

    fn is_handshaking(&self) -> bool {
        self.traffic.is_none()
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
        self.hs = None;
        let n = self.stats.count_failure(why);
        if n <= 16 || n.is_power_of_two() {
            let peer = self.client.or_else(|| self.stream.peer_addr().ok());
            tracing::warn!(listener = self.listener, ?peer, reason = why.label(),
                count = n, detail = %crate::runtime::esc(detail), "TLS handshake failed");
        }
    }

    /// Pushes encrypted bytes to the socket. `Ok(true)` when none are left.
    fn push(&mut self) -> io::Result<bool> {
        self.tx.write_to(&mut self.stream)
    }

    /// Runs the handshake as far as the socket allows: `Ok` once it is
    /// complete, `WouldBlock` while it waits for the peer, `UnexpectedEof`
    /// when the peer closed first; failures are counted here.
    fn handshake(&mut self) -> io::Result<()> {
        if self.failed {
            return Err(io::ErrorKind::ConnectionAborted.into());
        }
        let mut parts = Parts {
            stream: &mut self.stream,
            rx: &mut self.rx,
            tx: &mut self.tx,
        };
        match handshake::drive(&mut self.hs, &mut parts)? {
            Driven::Done(traffic) => {
                self.traffic = Some(traffic);
                // Grown for a long flight: back to one record (what is
                // left in it is the peer's first traffic records).
                self.rx.shrink_to(MAX_RECORD);
                self.stats
                    .handshakes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.push()?;
                Ok(())
            }
            Driven::Blocked => Err(io::ErrorKind::WouldBlock.into()),
            Driven::PeerClosed => {
                self.fail(HandshakeFailure::PeerClosed, &"closed by peer");
                Err(io::ErrorKind::UnexpectedEof.into())
            }
            Driven::Failed(e) => {
                self.fail(HandshakeFailure::of(&e), &e);
                self.linger = Some(Linger::default());
                Err(io::Error::new(io::ErrorKind::InvalidData, e))
            }
            Driven::Refused(why) => {
                self.fail(HandshakeFailure::BadMessage, &why);
                self.linger = Some(Linger::default());
                Err(io::Error::new(io::ErrorKind::InvalidData, why))
            }
        }
    }

    /// A refused handshake: its alert goes out, then our FIN, and the
    /// peer's input is read and dropped until it closes (`Ok(0)`), at most
    /// [`LINGER_DISCARD_BYTES`] of it, and at most [`LINGER_MS`] (the
    /// caller's sweep, [`Link::handshake_expired`]). Closing with unread
    /// input would send a reset, and a reset can make the peer's stack
    /// discard the alert it has not read yet.
    fn linger_read(&mut self) -> io::Result<usize> {
        if !self.push()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let Some(l) = self.linger.as_mut() else {
            return Err(io::ErrorKind::ConnectionAborted.into());
        };
        if !l.shut {
            l.shut = true;
            let _ = self.stream.shutdown(std::net::Shutdown::Write);
        }
        loop {
            self.rx.consume(self.rx.len());
            match self.rx.read_from(&mut self.stream) {
                Ok(0) => return Ok(0),
                Ok(n) => {
                    l.discarded += n;
                    if l.discarded > LINGER_DISCARD_BYTES {
                        return Err(io::ErrorKind::ConnectionAborted.into());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// After a record the session refused (its alert sealed), or once the
    /// peer's close_notify is answered: our FIN after the alert, and the
    /// input already here dropped (at most [`LINGER_DISCARD_BYTES`]), so
    /// the caller's close does not turn into a reset that destroys it.
    fn end_session(&mut self) {
        let _ = self.push();
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        let mut left = LINGER_DISCARD_BYTES;
        while left > 0 {
            self.rx.consume(self.rx.len());
            match self.rx.read_from(&mut self.stream) {
                Ok(n) if n > 0 => left = left.saturating_sub(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => return,
            }
        }
    }

    fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.linger.is_some() {
            return self.linger_read();
        }
        if self.traffic.is_none() {
            match self.handshake() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(_) if self.linger.is_some() => return self.linger_read(),
                Err(e) => return Err(e),
            }
        }
        // Records without data (empty, key updates, warnings) handled in
        // this call: past the bound the caller gets `Interrupted`. The
        // gateway counts that against its per-turn read budget, so a
        // subscriber sending only such records cannot hold its shard.
        let mut empty = 0;
        loop {
            if empty >= EMPTY_RECORDS_PER_READ {
                return Err(io::ErrorKind::Interrupted.into());
            }
            if !self.plain.is_empty() {
                let n = buf.len().min(self.plain.len());
                let at = self.plain.start;
                buf[..n].copy_from_slice(&self.rx.filled()[at..at + n]);
                self.plain.start += n;
                if self.plain.is_empty() {
                    self.rx.consume(self.record);
                }
                return Ok(n);
            }
            let Some(t) = self.traffic.as_mut() else {
                return Err(io::ErrorKind::NotConnected.into());
            };
            if t.peer_closed {
                return Ok(0);
            }
            let opened = match t.open_next(&mut self.rx, &mut self.tx) {
                Ok(opened) => opened,
                Err(e) => {
                    // The fatal alert sealed for a refused record.
                    self.end_session();
                    return Err(e);
                }
            };
            match opened {
                Some((Opened::Data(range), len)) => {
                    if range.is_empty() {
                        self.rx.consume(len);
                        empty += 1;
                    } else {
                        self.plain = range;
                        self.record = len;
                    }
                }
                Some((Opened::Closed, _)) => {
                    // Answered with ours (RFC 8446 §6.1), then our FIN.
                    t.close_notify(&mut self.tx);
                    self.end_session();
                    return Ok(0);
                }
                Some((Opened::Control, _)) => empty += 1,
                None => match self.rx.read_from(&mut self.stream) {
                    Ok(0) => return Ok(0),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                },
            }
        }
    }

    fn write_plain(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.push()?;
        let Some(t) = self.traffic.as_mut() else {
            // Nothing is sent before the handshake completes.
            return Err(io::ErrorKind::WouldBlock.into());
        };
        let n = match t.seal_from(buf, &mut self.tx, TLS_SEND_BUFFER_BYTES) {
            Ok(n) => n,
            Err(e) => {
                // The close_notify sealed when a TLS 1.2 key is used up.
                let _ = self.push();
                return Err(e);
            }
        };
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

    /// Whether this is a TLS link whose handshake has not completed (it
    /// cannot carry a frame yet). Never for plaintext.
    pub fn is_handshaking(&self) -> bool {
        matches!(self, Link::Tls(t) if t.is_handshaking())
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
            Link::Tls(t) => !t.tx.is_empty(),
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
        if let Some(l) = t.linger.as_mut() {
            let until = *l.until_ns.get_or_insert(now_ns + LINGER_MS * 1_000_000);
            return now_ns >= until;
        }
        if t.failed || !t.is_handshaking() || now_ns < t.deadline_ns {
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
            if let Some(traffic) = t.traffic.as_mut() {
                traffic.close_notify(&mut t.tx);
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
            Link::Tls(t) if !t.is_handshaking() => {
                let _ = t.write_plain(bytes);
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
