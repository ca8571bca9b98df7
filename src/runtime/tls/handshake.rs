//! The handshake of a TLS connection, driven through rustls's unbuffered
//! API with the connection's own buffers, and the hand-over to
//! [`Traffic`] once it completes.

use std::io;

use mio::net::TcpStream;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, InsufficientSizeError};

use super::buf::Bytes;
use super::traffic::Traffic;

/// The most handshake bytes buffered from a client (a message may span
/// records: a client certificate chain); past this the handshake fails.
pub(crate) const HANDSHAKE_RX_MAX: usize = 64 * 1024;

/// Where one call of [`drive`] left the handshake.
pub(crate) enum Driven {
    /// Finished: the session's keys, and any application data the peer
    /// sent with its last flight (rare; owned because rustls hands it out so).
    Done(Box<Traffic>, Vec<u8>),
    /// Waiting for the peer (the socket said `WouldBlock`).
    Blocked,
    /// The peer closed before the handshake finished.
    PeerClosed,
    /// rustls refused the handshake; its alert is in the send buffer.
    Failed(rustls::Error),
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

enum Step {
    Again,
    Read,
    Done,
    PeerClosed,
    Failed(rustls::Error),
}

/// Drives `conn` as far as the socket allows.
pub(crate) fn drive(
    conn: &mut Option<Box<UnbufferedServerConnection>>,
    p: &mut Parts<'_>,
) -> io::Result<Driven> {
    let mut early = Vec::new();
    loop {
        let Some(c) = conn.as_mut() else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let status = c.process_tls_records(p.rx.filled_mut());
        let mut discard = status.discard;
        let step = match status.state {
            Err(e) => Step::Failed(e),
            Ok(ConnectionState::ReadTraffic(mut r)) => {
                while let Some(rec) = r.next_record() {
                    match rec {
                        Ok(rec) => {
                            discard += rec.discard;
                            early.extend_from_slice(rec.payload);
                        }
                        Err(e) => return Ok(Driven::Failed(e)),
                    }
                }
                Step::Again
            }
            Ok(ConnectionState::EncodeTlsData(mut e)) => {
                encode(p.tx, |out| e.encode(out));
                Step::Again
            }
            Ok(ConnectionState::TransmitTlsData(t)) => {
                // The bytes are ours now: pushed below or on the next
                // writable edge.
                t.done();
                p.tx.write_to(p.stream)?;
                Step::Again
            }
            Ok(ConnectionState::BlockedHandshake) => Step::Read,
            Ok(ConnectionState::WriteTraffic(_)) => Step::Done,
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => Step::PeerClosed,
            Ok(other) => Step::Failed(rustls::Error::General(format!("unexpected {other:?}"))),
        };
        p.rx.consume(discard);
        match step {
            Step::Again => {}
            Step::Read => {
                if let Some(d) = read_more(p)? {
                    return Ok(d);
                }
            }
            Step::Done => return finish(conn, early),
            Step::PeerClosed => return Ok(Driven::PeerClosed),
            Step::Failed(e) => {
                queue_alert(conn, p);
                return Ok(Driven::Failed(e));
            }
        }
    }
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

/// After a refusal rustls holds its alert: encode it for the peer and push
/// what the socket takes.
fn queue_alert(conn: &mut Option<Box<UnbufferedServerConnection>>, p: &mut Parts<'_>) {
    if let Some(c) = conn.as_mut() {
        let status = c.process_tls_records(&mut []);
        if let Ok(ConnectionState::EncodeTlsData(mut e)) = status.state {
            encode(p.tx, |out| e.encode(out));
        }
    }
    *conn = None;
    let _ = p.tx.write_to(p.stream);
}

fn finish(
    conn: &mut Option<Box<UnbufferedServerConnection>>,
    early: Vec<u8>,
) -> io::Result<Driven> {
    let Some(c) = conn.take() else {
        return Err(io::ErrorKind::NotConnected.into());
    };
    match c.dangerous_into_kernel_connection() {
        Ok((secrets, kernel)) => Ok(Driven::Done(
            Box::new(Traffic::new(secrets, kernel)?),
            early,
        )),
        Err(e) => Ok(Driven::Failed(e)),
    }
}
