//! The handshake of a TLS connection, driven through rustls's unbuffered
//! API with the connection's own buffers, and the hand-over to
//! [`Traffic`] once it completes.
//!
//! Contract (docs/tls.md, "The hand-over"): rustls is given whole records,
//! one at a time, and never a record after the one that completes its
//! handshake. So at the hand-over rustls holds no input of ours (no
//! fragment, no application data, no KeyUpdate it would answer), its
//! output queue is empty (every ticket encoded into the send buffer
//! first), and the first record the record layer opens is the first one
//! the peer sealed under its traffic key. rustls is only ever called with
//! the exact bytes it has not released plus at most one whole record.
//! After rustls fails it is not driven again: the one further call, made
//! only while its output queue holds the alert it sealed when it failed,
//! pops that alert and touches neither its state nor its input. Records
//! refused by the framer here (while our side still sends plaintext) get
//! our own plaintext alert and never reach rustls.

use std::io;

use mio::net::TcpStream;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, InsufficientSizeError};
use rustls::{HandshakeKind, ProtocolVersion};

use super::buf::Bytes;
use super::record::{ALERT, APP_DATA, HANDSHAKE, HEADER, MAX_RECORD};
use super::traffic::Traffic;

/// Largest handshake message rustls takes (its limit, 2^16 − 1 bytes of
/// body, plus the 4-byte message header).
const HANDSHAKE_MESSAGE_MAX: usize = 4 + 0xffff;

/// The most bytes the receive buffer grows to while handshaking: the
/// largest message rustls holds in pieces, and the next record whole.
pub(crate) const HANDSHAKE_RX_MAX: usize = HEADER + HANDSHAKE_MESSAGE_MAX + MAX_RECORD;

/// ChangeCipherSpec content type.
const CHANGE_CIPHER_SPEC: u8 = 20;
/// Alert descriptions this module sends itself (RFC 8446 §6.2).
const UNEXPECTED_MESSAGE: u8 = 10;
const RECORD_OVERFLOW: u8 = 22;
const DECODE_ERROR: u8 = 50;

/// Where one call of [`Handshake::drive`] left the handshake.
pub(crate) enum Driven {
    /// Finished: the session's keys.
    Done(Box<Traffic>),
    /// Waiting for the peer (the socket said `WouldBlock`).
    Blocked,
    /// The peer closed before the handshake finished.
    PeerClosed,
    /// rustls refused the handshake; its alert, if one is due, is in the
    /// send buffer. The handshake must not be driven again.
    Failed(rustls::Error),
    /// A record refused here, before rustls saw it (its alert is in the
    /// send buffer): counted as a malformed message.
    Refused(&'static str),
}

/// The parts of a connection the handshake works on.
pub(crate) struct Parts<'a> {
    /// The socket.
    pub(crate) stream: &'a mut TcpStream,
    /// Bytes from the socket.
    pub(crate) rx: &'a mut Bytes,
    /// Bytes for the socket (pushed by the caller's flush too).
    pub(crate) tx: &'a mut Bytes,
}

/// A server handshake in progress.
pub(crate) struct Handshake {
    conn: Box<UnbufferedServerConnection>,
    /// Bytes at the front of the receive buffer that rustls has processed
    /// but not released: a handshake message still in pieces (rustls
    /// joins the pieces in place, in our buffer).
    held: usize,
}

/// What the framer makes of the bytes after `held`.
enum Next {
    /// A whole record of this many bytes (or, for a header rustls refuses
    /// on sight, just the header).
    Record(usize),
    /// Not all of the next record has arrived.
    Partial,
    /// A record refused here with this alert (our side is plaintext).
    Refuse(u8, &'static str),
}

/// Where [`Handshake::step`] stopped.
enum Stepped {
    /// The handshake is complete (see [`Fed::Complete`]).
    Complete { trailing: usize },
    /// Blocked, or over (then dropped).
    Ended(Driven),
}

/// What rustls made of the input it was given.
enum Fed {
    /// It needs the next record.
    More,
    /// The handshake is complete; `trailing` bytes of the last record
    /// followed the peer's Finished (TLS 1.2 only: TLS 1.3 refuses them).
    Complete { trailing: usize },
    /// The peer closed.
    PeerClosed,
    /// rustls refused; `end` bytes of input are still before it.
    Failed { error: rustls::Error, end: usize },
}

impl Handshake {
    /// A handshake for a freshly accepted connection.
    pub(crate) fn new(conn: UnbufferedServerConnection) -> Handshake {
        Handshake {
            conn: Box::new(conn),
            held: 0,
        }
    }

    /// Runs until the peer must send more, the handshake completes or it
    /// fails; in the last two cases `Some(outcome)`.
    fn step(&mut self, p: &mut Parts<'_>) -> io::Result<Stepped> {
        loop {
            let len = match self.next(p.rx.filled()) {
                Next::Record(len) => len,
                Next::Partial => match read_more(p)? {
                    Some(d) => return Ok(Stepped::Ended(d)),
                    None => continue,
                },
                Next::Refuse(desc, why) => {
                    plain_alert(p.tx, desc);
                    let _ = p.tx.write_to(p.stream);
                    return Ok(Stepped::Ended(Driven::Refused(why)));
                }
            };
            match self.feed(p, self.held + len)? {
                Fed::More => {}
                Fed::Complete { trailing } => return Ok(Stepped::Complete { trailing }),
                Fed::PeerClosed => return Ok(Stepped::Ended(Driven::PeerClosed)),
                Fed::Failed { error, end } => {
                    self.rustls_alert(p, end, &error);
                    return Ok(Stepped::Ended(Driven::Failed(error)));
                }
            }
        }
    }

    /// Whether our side still sends plaintext, so that an alert of ours
    /// needs no key: before the ServerHello, and through a full TLS 1.2
    /// handshake (our ChangeCipherSpec follows the client's Finished). The
    /// framer checks records only then: afterwards it cannot see inside
    /// them, and refusals are rustls's (its alerts sealed under its keys).
    fn plaintext(&self) -> bool {
        match self.conn.protocol_version() {
            None => true,
            Some(ProtocolVersion::TLSv1_2) => {
                self.conn.handshake_kind() != Some(HandshakeKind::Resumed)
            }
            Some(_) => false,
        }
    }

    /// Frames the record after the held bytes.
    fn next(&self, rx: &[u8]) -> Next {
        let rest = &rx[self.held..];
        if rest.len() < HEADER {
            return Next::Partial;
        }
        let typ = rest[0];
        let body = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if self.plaintext() {
            if let Some((desc, why)) = refused_in_plaintext(typ, body, self.held > 0) {
                return Next::Refuse(desc, why);
            }
        }
        if HEADER + body > MAX_RECORD {
            // rustls refuses it from the header, with its own alert.
            return Next::Record(HEADER);
        }
        if rest.len() < HEADER + body {
            return Next::Partial;
        }
        Next::Record(HEADER + body)
    }

    /// Runs rustls over the first `end` bytes of the receive buffer (the
    /// held bytes and one whole record) until it wants more input, finishes
    /// or fails. Handshake bytes it encodes go to the send buffer.
    fn feed(&mut self, p: &mut Parts<'_>, mut end: usize) -> io::Result<Fed> {
        loop {
            let status = self.conn.process_tls_records(&mut p.rx.filled_mut()[..end]);
            let discard = status.discard;
            let fed = match status.state {
                Err(error) => Some(Err(error)),
                Ok(ConnectionState::EncodeTlsData(mut e)) => {
                    encode(p.tx, |out| e.encode(out));
                    None
                }
                Ok(ConnectionState::TransmitTlsData(t)) => {
                    // The bytes are ours now: pushed here or on the next
                    // writable edge.
                    t.done();
                    p.tx.write_to(p.stream)?;
                    None
                }
                Ok(ConnectionState::BlockedHandshake) => Some(Ok(Fed::More)),
                Ok(ConnectionState::WriteTraffic(_)) => Some(Ok(Fed::Complete { trailing: 0 })),
                Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                    Some(Ok(Fed::PeerClosed))
                }
                // Application data (early or not) cannot come out: rustls
                // is never given a record after its handshake, and early
                // data is not enabled.
                Ok(other) => Some(Err(rustls::Error::General(format!("unexpected {other:?}")))),
            };
            p.rx.consume(discard);
            end -= discard;
            match fed {
                None => {}
                Some(Ok(Fed::More)) => {
                    self.held = end;
                    return Ok(Fed::More);
                }
                Some(Ok(Fed::Complete { .. })) => return Ok(Fed::Complete { trailing: end }),
                Some(Ok(other)) => return Ok(other),
                Some(Err(error)) => return Ok(Fed::Failed { error, end }),
            }
        }
    }

    /// After rustls refused: the alert it sealed into its output queue
    /// when it failed, if it did. `wants_write` reads that queue, and a
    /// non-empty queue is what `process_tls_records` pops before anything
    /// else, so this call only hands the alert out; it is made with the
    /// same `end` bytes rustls was given, the only input it is ever shown.
    fn rustls_alert(&mut self, p: &mut Parts<'_>, end: usize, error: &rustls::Error) {
        if self.conn.wants_write() {
            let status = self.conn.process_tls_records(&mut p.rx.filled_mut()[..end]);
            if let Ok(ConnectionState::EncodeTlsData(mut e)) = status.state {
                encode(p.tx, |out| e.encode(out));
            }
        } else if let Some(desc) = self.plaintext().then(|| alert_for(error)).flatten() {
            // rustls refused without an alert (a message over its size
            // limit, a record out of place): ours, while ours need no key.
            plain_alert(p.tx, desc);
        }
        let _ = p.tx.write_to(p.stream);
    }

    /// Hands the keys over. Bytes after the peer's Finished in its record
    /// (the start of another handshake message) are refused by the record
    /// layer with unexpected_message: no handshake message may follow.
    fn finish(self, p: &mut Parts<'_>, trailing: usize) -> io::Result<Driven> {
        match self.conn.dangerous_into_kernel_connection() {
            Ok((secrets, kernel)) => {
                let mut traffic = Box::new(Traffic::new(secrets, kernel)?);
                if trailing == 0 {
                    return Ok(Driven::Done(traffic));
                }
                p.rx.consume(trailing);
                traffic.fatal_alert(UNEXPECTED_MESSAGE, p.tx);
                let _ = p.tx.write_to(p.stream);
                Ok(Driven::Refused("handshake message after Finished"))
            }
            Err(e) => Ok(Driven::Failed(e)),
        }
    }
}

/// Drives the handshake in `slot` as far as the socket allows. Once it
/// completes, fails or the peer closes, the handshake is taken out of
/// `slot` and dropped: a refused rustls connection is never driven again.
pub(crate) fn drive(slot: &mut Option<Box<Handshake>>, p: &mut Parts<'_>) -> io::Result<Driven> {
    let Some(hs) = slot.as_mut() else {
        return Err(io::ErrorKind::NotConnected.into());
    };
    let stepped = hs.step(p);
    let blocked = matches!(stepped, Ok(Stepped::Ended(Driven::Blocked)));
    if blocked {
        return Ok(Driven::Blocked);
    }
    let Some(hs) = slot.take() else {
        return Err(io::ErrorKind::NotConnected.into());
    };
    match stepped? {
        Stepped::Complete { trailing } => (*hs).finish(p, trailing),
        Stepped::Ended(d) => Ok(d),
    }
}

/// The checks of a record while our side is plaintext: what RFC 8446 §5
/// and §5.1 name unexpected_message (an unknown type, application data
/// before the handshake keys, a record between the pieces of a handshake
/// message, an empty handshake or ChangeCipherSpec record), decode_error
/// for an empty alert, record_overflow past the largest record.
fn refused_in_plaintext(typ: u8, body: usize, in_pieces: bool) -> Option<(u8, &'static str)> {
    if !matches!(typ, CHANGE_CIPHER_SPEC | ALERT | HANDSHAKE | APP_DATA) {
        return Some((UNEXPECTED_MESSAGE, "unknown record type"));
    }
    if typ == APP_DATA {
        return Some((UNEXPECTED_MESSAGE, "application data before the keys"));
    }
    if in_pieces && typ != HANDSHAKE {
        let why = "record between the pieces of a handshake message";
        return Some((UNEXPECTED_MESSAGE, why));
    }
    if body == 0 {
        return Some(match typ {
            ALERT => (DECODE_ERROR, "empty alert record"),
            HANDSHAKE => (UNEXPECTED_MESSAGE, "empty handshake record"),
            _ => (UNEXPECTED_MESSAGE, "empty ChangeCipherSpec record"),
        });
    }
    if HEADER + body > MAX_RECORD {
        return Some((RECORD_OVERFLOW, "record too long"));
    }
    None
}

/// The alert for a refusal rustls sent none for: decode_error (or what
/// rustls itself names) for a malformed message, record_overflow,
/// unexpected_message for a message out of place; none for the peer's own
/// alert.
fn alert_for(e: &rustls::Error) -> Option<u8> {
    use rustls::Error as E;
    match e {
        E::AlertReceived(_) => None,
        E::InvalidMessage(m) => Some(u8::from(rustls::AlertDescription::from(*m))),
        E::PeerSentOversizedRecord => Some(RECORD_OVERFLOW),
        E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. }
        | E::PeerMisbehaved(_) => Some(UNEXPECTED_MESSAGE),
        _ => None,
    }
}

/// Appends a plaintext fatal alert record (TLS 1.2 record version, as
/// rustls writes its own before the keys).
fn plain_alert(tx: &mut Bytes, desc: u8) {
    let rec = [ALERT, 3, 3, 0, 2, 2, desc];
    tx.reserve(rec.len());
    tx.spare_mut()[..rec.len()].copy_from_slice(&rec);
    tx.commit(rec.len());
}

/// Encodes one handshake record into `tx`, growing it if the record does
/// not fit (handshake flights are bounded by rustls).
fn encode(tx: &mut Bytes, mut f: impl FnMut(&mut [u8]) -> Result<usize, EncodeError>) {
    loop {
        match f(tx.spare_mut()) {
            Ok(n) => return tx.commit(n),
            Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size })) => {
                tx.reserve(required_size)
            }
            Err(_) => return,
        }
    }
}

/// Reads more of the peer's flight: `Some` when the handshake cannot go on.
fn read_more(p: &mut Parts<'_>) -> io::Result<Option<Driven>> {
    if p.rx.spare_mut().is_empty() {
        if p.rx.capacity() >= HANDSHAKE_RX_MAX {
            // Cannot happen while rustls keeps its message limit (it
            // refuses a longer message from its header).
            let e = rustls::Error::General("handshake message too large".into());
            return Ok(Some(Driven::Failed(e)));
        }
        p.rx.reserve((p.rx.capacity() * 2).min(HANDSHAKE_RX_MAX) - p.rx.len());
    }
    match p.rx.read_from(p.stream) {
        Ok(0) => Ok(Some(Driven::PeerClosed)),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Some(Driven::Blocked)),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
        Err(e) => Err(e),
    }
}
