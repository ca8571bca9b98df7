//! TLS to a NATS server: rustls (ring) runs the handshake and verifies the
//! server's chain and name against `--bus-tls-ca` (presenting
//! `--bus-tls-cert` when the server asks for a client certificate); the
//! established session then seals and opens records in place in buffers
//! sized once per connection, so publishing and receiving over TLS
//! allocate nothing (`tests/bus_alloc.rs` holds it to 0).
//!
//! Why not rustls's own buffered connection after the handshake: it
//! encrypts every record into a freshly allocated `Vec` and hands out
//! received plaintext as owned chunks (see `src/runtime/tls/record.rs`,
//! which measured this for the listeners). The record layer here is that
//! same file, compiled a second time below because `runtime::tls` keeps
//! it private; the session logic around it is the client's: a NATS
//! server (Go's crypto/tls) sends NewSessionTicket messages after the
//! handshake, which a listener never receives and which are skipped here
//! (no resumption: each connect is a full handshake).
//!
//! Contract: [`TlsSession::read`] and [`TlsSession::write`] behave like a
//! non-blocking socket's (`WouldBlock` when the socket has nothing or no
//! room); [`TlsSession::write`] seals at most [`TX_BYTES`] ahead of the
//! socket and [`TlsSession::flush`] pushes the rest. A record that does
//! not open, a fatal alert or an unexpected message ends the connection
//! with an error (the client reconnects).

use std::io::{self, Read, Write};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use rustls::client::{ClientConnectionData, Resumption, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, ServerName};
use rustls::unbuffered::{ConnectionState, EncodeError, InsufficientSizeError};
use rustls::{ClientConfig, ProtocolVersion};

use crate::bus::security::{AccessError, BusTls};
use crate::runtime::tls::{load_certs, load_roots, provider};

// The listeners' in-place record layer (see the module doc), a second
// copy of the same file on purpose: `runtime::tls` keeps it private, and
// the client uses only its symmetric part. When `runtime::tls` exports it,
// this becomes a `use`.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../../runtime/tls/record.rs"]
mod record;

use record::{Keys, Version, ALERT, APP_DATA, HANDSHAKE, MAX_PLAIN, MAX_RECORD};

/// Encrypted bytes sealed ahead of the socket at most.
pub(crate) const TX_BYTES: usize = 64 * 1024;
/// Receive buffer: two records, so a whole one always fits behind the
/// tail of the last.
const RX_BYTES: usize = 2 * MAX_RECORD;
/// Handshake bytes buffered from the server at most (its chain).
const HANDSHAKE_RX_MAX: usize = 64 * 1024;
/// Handshake message types after the handshake (RFC 8446 §4).
const NEW_SESSION_TICKET: u8 = 4;
const KEY_UPDATE: u8 = 24;
/// Alert descriptions carried on (RFC 8446 §6).
const CLOSE_NOTIFY: u8 = 0;
const USER_CANCELED: u8 = 90;

/// The rustls client settings from `tls`: its CAs, its client
/// certificate if any, secret extraction on (the hand-over), resumption
/// off. Errors name the file.
pub(crate) fn client_config(tls: &BusTls) -> Result<Arc<ClientConfig>, AccessError> {
    let file = |flag| move |source| AccessError::TlsFile { flag, source };
    let roots = load_roots(&tls.ca).map_err(file("--bus-tls-ca"))?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(AccessError::TlsVersions)?
        .with_root_certificates(roots);
    let mut config = match &tls.client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = load_certs(cert).map_err(file("--bus-tls-cert"))?;
            let key = load_key(key)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(AccessError::TlsClientAuth)?
        }
    };
    config.enable_secret_extraction = true;
    config.resumption = Resumption::disabled();
    Ok(Arc::new(config))
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, AccessError> {
    // Names the file and the PEM problem, never key bytes.
    PrivateKeyDer::from_pem_file(path).map_err(|source| AccessError::TlsKey {
        path: path.to_path_buf(),
        source,
    })
}

/// The name the server's certificate must carry for `host` (a DNS name
/// or an IP address, brackets of an IPv6 literal removed).
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, ServerNameError> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|source| ServerNameError {
        host: host.to_string(),
        source,
    })
}

/// A `--bus` host that is neither a DNS name nor an IP address.
#[derive(Debug, thiserror::Error)]
#[error("TLS server name {host:?}: {source}")]
pub(crate) struct ServerNameError {
    /// The host, brackets removed.
    pub(crate) host: String,
    /// Why rustls refused it.
    pub(crate) source: rustls::pki_types::InvalidDnsNameError,
}

/// Runs the handshake over `sock` (blocking, its read timeout the
/// caller's deadline) and takes the session over from rustls.
pub(crate) fn handshake(
    sock: &mut std::net::TcpStream,
    config: &Arc<ClientConfig>,
    name: ServerName<'static>,
) -> io::Result<TlsSession> {
    let mut conn = UnbufferedClientConnection::new(config.clone(), name).map_err(tls_err)?;
    let (mut rx, mut rx_len, mut tx) = (vec![0u8; 16 * 1024], 0usize, Vec::new());
    loop {
        let status = conn.process_tls_records(&mut rx[..rx_len]);
        let discard = status.discard;
        let done = match status.state.map_err(tls_err)? {
            ConnectionState::EncodeTlsData(mut e) => {
                encode(&mut tx, |out| e.encode(out));
                false
            }
            ConnectionState::TransmitTlsData(t) => {
                sock.write_all(&tx)?;
                tx.clear();
                t.done();
                false
            }
            ConnectionState::BlockedHandshake => {
                rx.copy_within(discard..rx_len, 0);
                rx_len -= discard;
                rx_len += read_more(sock, &mut rx, rx_len)?;
                continue;
            }
            ConnectionState::WriteTraffic(_) => true,
            ConnectionState::PeerClosed | ConnectionState::Closed => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "closed by the server during the TLS handshake",
                ))
            }
            other => return Err(tls_err(format!("unexpected TLS state {other:?}"))),
        };
        rx.copy_within(discard..rx_len, 0);
        rx_len -= discard;
        if done {
            let (secrets, kernel) = conn.dangerous_into_kernel_connection().map_err(tls_err)?;
            return TlsSession::new(secrets, kernel, &rx[..rx_len]);
        }
    }
}

fn encode(tx: &mut Vec<u8>, mut f: impl FnMut(&mut [u8]) -> Result<usize, EncodeError>) {
    let at = tx.len();
    tx.resize(at + 4096, 0);
    loop {
        match f(&mut tx[at..]) {
            Ok(n) => return tx.truncate(at + n),
            Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size })) => {
                tx.resize(at + required_size, 0)
            }
            Err(_) => return tx.truncate(at),
        }
    }
}

/// One blocking read of the server's flight into `rx` after `len` bytes.
fn read_more(sock: &mut std::net::TcpStream, rx: &mut Vec<u8>, len: usize) -> io::Result<usize> {
    if len == rx.len() {
        if rx.len() >= HANDSHAKE_RX_MAX {
            return Err(tls_err("TLS handshake message too large"));
        }
        rx.resize((rx.len() * 2).min(HANDSHAKE_RX_MAX), 0);
    }
    match sock.read(&mut rx[len..])? {
        0 => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "closed by the server during the TLS handshake",
        )),
        n => Ok(n),
    }
}

fn tls_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

/// An alert the server ends a session with, named (RFC 8446 §6.2), with
/// what it usually means here.
fn alert_name(desc: u8) -> String {
    let what = match desc {
        40 => "handshake_failure",
        42 => {
            "bad_certificate: it refused this client's certificate, or wants one (--bus-tls-cert)"
        }
        46 => "certificate_unknown: it could not verify this client's certificate",
        48 => "unknown_ca: this client's certificate is not from a CA it trusts",
        116 => "certificate_required: give --bus-tls-cert and --bus-tls-key",
        _ => "",
    };
    if what.is_empty() {
        desc.to_string()
    } else {
        format!("{desc} {what}")
    }
}

/// What one record at the front of the receive buffer was.
enum Opened {
    Data,
    Control,
    Closed,
}

/// An established client session; see the module doc.
pub(crate) struct TlsSession {
    kernel: KernelConnection<ClientConnectionData>,
    version: Version,
    tx_keys: Keys,
    rx_keys: Keys,
    rx: Box<[u8]>,
    /// Unread encrypted bytes are `rx[rx_at..rx_len]`.
    rx_at: usize,
    rx_len: usize,
    /// Plaintext of the opened record at `rx_at` not yet read, and that
    /// record's length (0: none opened).
    plain: Range<usize>,
    record: usize,
    tx: Box<[u8]>,
    /// Sealed bytes the socket has not taken are `tx[tx_at..tx_len]`.
    tx_at: usize,
    tx_len: usize,
    /// The server asked for our key update.
    update_due: bool,
}

impl std::fmt::Debug for TlsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSession")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl TlsSession {
    fn new(
        secrets: rustls::ExtractedSecrets,
        kernel: KernelConnection<ClientConnectionData>,
        early: &[u8],
    ) -> io::Result<TlsSession> {
        let version = match kernel.protocol_version() {
            ProtocolVersion::TLSv1_3 => Version::Tls13,
            ProtocolVersion::TLSv1_2 => Version::Tls12,
            v => return Err(tls_err(format!("unsupported version {v:?}"))),
        };
        let keys = |(seq, s)| Keys::new(version, seq, s).map_err(tls_err);
        let mut rx = vec![0u8; RX_BYTES.max(early.len())].into_boxed_slice();
        rx[..early.len()].copy_from_slice(early);
        Ok(TlsSession {
            tx_keys: keys(secrets.tx)?,
            rx_keys: keys(secrets.rx)?,
            kernel,
            version,
            rx,
            rx_at: 0,
            rx_len: early.len(),
            plain: 0..0,
            record: 0,
            tx: vec![0u8; TX_BYTES].into_boxed_slice(),
            tx_at: 0,
            tx_len: 0,
            update_due: false,
        })
    }

    /// Plaintext from the server into `dst`: `Ok(0)` when the server
    /// closed (close_notify or EOF), `WouldBlock` when the socket is dry.
    pub(crate) fn read(&mut self, sock: &mut impl Read, dst: &mut [u8]) -> io::Result<usize> {
        loop {
            if !self.plain.is_empty() {
                let n = self.plain.len().min(dst.len());
                dst[..n].copy_from_slice(&self.rx[self.plain.start..self.plain.start + n]);
                self.plain.start += n;
                if self.plain.is_empty() {
                    self.consume_record();
                }
                return Ok(n);
            }
            match self.open_next()? {
                Some(Opened::Data) | Some(Opened::Control) => continue,
                Some(Opened::Closed) => return Ok(0),
                None => {}
            }
            if self.rx_len + MAX_RECORD > self.rx.len() {
                self.rx.copy_within(self.rx_at..self.rx_len, 0);
                self.rx_len -= self.rx_at;
                self.rx_at = 0;
            }
            match sock.read(&mut self.rx[self.rx_len..])? {
                0 => return Ok(0),
                n => self.rx_len += n,
            }
        }
    }

    fn consume_record(&mut self) {
        self.rx_at += self.record;
        self.record = 0;
        self.plain = 0..0;
        if self.rx_at == self.rx_len {
            (self.rx_at, self.rx_len) = (0, 0);
        }
    }

    /// Opens the record at the front, if whole.
    fn open_next(&mut self) -> io::Result<Option<Opened>> {
        let at = self.rx_at;
        let buf = &mut self.rx[at..self.rx_len];
        let Some(len) = self.rx_keys.record_len(buf).map_err(tls_err)? else {
            return Ok(None);
        };
        let (typ, range) = self.rx_keys.open(&mut buf[..len]).map_err(tls_err)?;
        self.record = len;
        let body = at + range.start..at + range.end;
        let opened = match typ {
            APP_DATA => {
                self.plain = body;
                if self.plain.is_empty() {
                    self.consume_record();
                }
                return Ok(Some(Opened::Data));
            }
            ALERT => self.on_alert(body)?,
            HANDSHAKE => self.on_handshake(body)?,
            _ => return Err(tls_err(format!("record of content type {typ}"))),
        };
        self.consume_record();
        Ok(Some(opened))
    }

    fn on_alert(&mut self, body: Range<usize>) -> io::Result<Opened> {
        match self.rx[body] {
            [_, CLOSE_NOTIFY] => Ok(Opened::Closed),
            [_, USER_CANCELED] => Ok(Opened::Control),
            [1, _] if self.version == Version::Tls12 => Ok(Opened::Control),
            [_, desc] => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("TLS: the server sent alert {}", alert_name(desc)),
            )),
            _ => Err(tls_err("malformed alert")),
        }
    }

    /// Post-handshake messages: a KeyUpdate changes the server's key (and
    /// ours when it asks); a NewSessionTicket is skipped. Each must lie
    /// whole in its record; anything else ends the session.
    fn on_handshake(&mut self, body: Range<usize>) -> io::Result<Opened> {
        let mut at = body.start;
        while at < body.end {
            let m = &self.rx[at..body.end];
            if m.len() < 4 {
                return Err(tls_err("fragmented handshake message"));
            }
            let len = (usize::from(m[1]) << 16) | (usize::from(m[2]) << 8) | usize::from(m[3]);
            let Some(msg) = m.get(4..4 + len) else {
                return Err(tls_err("fragmented handshake message"));
            };
            match (self.version, m[0], msg) {
                (Version::Tls13, NEW_SESSION_TICKET, _) => {}
                (Version::Tls13, KEY_UPDATE, [requested @ (0 | 1)]) => {
                    let requested = *requested == 1;
                    let (seq, s) = self.kernel.update_rx_secret().map_err(tls_err)?;
                    self.rx_keys = Keys::new(self.version, seq, s).map_err(tls_err)?;
                    self.update_due |= requested;
                }
                (_, typ, _) => {
                    return Err(tls_err(format!(
                        "handshake message {typ} after the handshake"
                    )))
                }
            }
            at += 4 + len;
        }
        Ok(Opened::Control)
    }

    /// Seals a prefix of `src` (as much as [`TX_BYTES`] holds) and pushes
    /// what the socket takes; `WouldBlock` when nothing could be sealed.
    pub(crate) fn write(&mut self, sock: &mut impl Write, src: &[u8]) -> io::Result<usize> {
        match self.flush(sock) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        let mut taken = 0;
        while taken < src.len() {
            // Room for a KeyUpdate record and a data record of one byte.
            let overhead = self.tx_keys.overhead();
            if self.tx.len() - self.tx_len <= 2 * overhead + 5 {
                break;
            }
            if self.update_due || self.tx_keys.exhausted() {
                self.rekey_tx()?;
                continue;
            }
            let room = self.tx.len() - self.tx_len - overhead;
            let n = (src.len() - taken).min(MAX_PLAIN).min(room);
            let w = self
                .tx_keys
                .seal(
                    APP_DATA,
                    &src[taken..taken + n],
                    &mut self.tx[self.tx_len..],
                )
                .map_err(tls_err)?;
            self.tx_len += w;
            taken += n;
        }
        if taken == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        match self.flush(sock) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(taken),
        }
    }

    /// TLS 1.3: a KeyUpdate under the old key, then the next key; TLS 1.2
    /// cannot rekey, so the connection ends (and the client reconnects).
    fn rekey_tx(&mut self) -> io::Result<()> {
        if self.version == Version::Tls12 {
            return Err(tls_err("TLS 1.2 traffic keys used up"));
        }
        let w = self
            .tx_keys
            .seal(
                HANDSHAKE,
                &[KEY_UPDATE, 0, 0, 1, 0],
                &mut self.tx[self.tx_len..],
            )
            .map_err(tls_err)?;
        self.tx_len += w;
        let (seq, s) = self.kernel.update_tx_secret().map_err(tls_err)?;
        self.tx_keys = Keys::new(self.version, seq, s).map_err(tls_err)?;
        self.update_due = false;
        Ok(())
    }

    /// Pushes sealed bytes to the socket: `Ok` when all are out.
    pub(crate) fn flush(&mut self, sock: &mut impl Write) -> io::Result<()> {
        while self.tx_at < self.tx_len {
            match sock.write(&self.tx[self.tx_at..self.tx_len]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.tx_at += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        (self.tx_at, self.tx_len) = (0, 0);
        Ok(())
    }

    /// Sealed bytes wait for the socket.
    pub(crate) fn pending(&self) -> bool {
        self.tx_at < self.tx_len
    }
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
