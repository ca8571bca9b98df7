//! An established TLS session: records sealed into and opened in the
//! connection's own buffers (see `record.rs` for why not rustls's).
//!
//! Contract: [`Traffic::seal_from`] encrypts as much plaintext as fits in
//! the send buffer, keeping [`CONTROL_RESERVE`] free for a key update or a
//! close_notify; [`Traffic::open_next`] opens one whole record in the
//! receive buffer and acts on alerts and TLS 1.3 key updates itself. A
//! sending key at its limit is replaced by a key update (TLS 1.3) or ends
//! the session (TLS 1.2, as rustls does). Nothing here allocates.

use std::io;
use std::ops::Range;

use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::ProtocolVersion;

use super::buf::Bytes;
use super::record::{self, Keys, RecordError, Version, ALERT, APP_DATA, HANDSHAKE, MAX_PLAIN};

/// Send-buffer bytes kept free for control records (a key update is 26
/// bytes sealed, a close_notify 24).
pub(crate) const CONTROL_RESERVE: usize = 64;

/// TLS 1.3 KeyUpdate handshake message type.
const KEY_UPDATE: u8 = 24;

/// What one opened record was.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// Application data at this range of the receive buffer's filled bytes.
    Data(Range<usize>),
    /// A record handled here (a key update, a warning alert).
    Control,
    /// The peer's close_notify: no more data will come.
    Closed,
}

/// Keys of both directions and rustls's key schedule.
pub(crate) struct Traffic {
    kernel: KernelConnection<ServerConnectionData>,
    pub(crate) tx: Keys,
    rx: Keys,
    version: Version,
    /// The peer's close_notify arrived.
    pub(crate) peer_closed: bool,
    /// Ours was sealed.
    close_sent: bool,
}

impl std::fmt::Debug for Traffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traffic")
            .field("version", &self.version)
            .field("tx", &self.tx)
            .field("rx", &self.rx)
            .finish_non_exhaustive()
    }
}

fn io_err(e: RecordError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

fn tls_err(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl Traffic {
    /// Takes over from a finished rustls handshake.
    pub(crate) fn new(
        secrets: rustls::ExtractedSecrets,
        kernel: KernelConnection<ServerConnectionData>,
    ) -> io::Result<Traffic> {
        let version = match kernel.protocol_version() {
            ProtocolVersion::TLSv1_3 => Version::Tls13,
            ProtocolVersion::TLSv1_2 => Version::Tls12,
            v => return Err(io::Error::other(format!("unsupported TLS version {v:?}"))),
        };
        let (tx_seq, tx) = secrets.tx;
        let (rx_seq, rx) = secrets.rx;
        Ok(Traffic {
            tx: Keys::new(version, tx_seq, tx).map_err(io_err)?,
            rx: Keys::new(version, rx_seq, rx).map_err(io_err)?,
            kernel,
            version,
            peer_closed: false,
            close_sent: false,
        })
    }

    /// Seals a prefix of `plain` into `out` as records of at most
    /// [`MAX_PLAIN`] bytes, within `out`'s first `limit` bytes; returns the
    /// plaintext bytes taken (0 when there is no room).
    pub(crate) fn seal_from(
        &mut self,
        plain: &[u8],
        out: &mut Bytes,
        limit: usize,
    ) -> io::Result<usize> {
        let mut taken = 0;
        while taken < plain.len() && !self.close_sent {
            if self.tx.exhausted() {
                self.rekey_tx(out)?;
            }
            let room = limit
                .min(out.capacity())
                .saturating_sub(out.len() + CONTROL_RESERVE + self.tx.overhead());
            if room == 0 {
                break;
            }
            let n = (plain.len() - taken).min(MAX_PLAIN).min(room);
            let w = self
                .tx
                .seal(APP_DATA, &plain[taken..taken + n], out.spare_mut())
                .map_err(io_err)?;
            out.commit(w);
            taken += n;
        }
        Ok(taken)
    }

    /// Seals one control record (uses the reserve).
    fn seal_control(&mut self, typ: u8, body: &[u8], out: &mut Bytes) -> io::Result<()> {
        let w = self.tx.seal(typ, body, out.spare_mut()).map_err(io_err)?;
        out.commit(w);
        Ok(())
    }

    /// The sending key is used up: TLS 1.3 announces a new one with a
    /// KeyUpdate (sealed under the old key); TLS 1.2 cannot rekey.
    fn rekey_tx(&mut self, out: &mut Bytes) -> io::Result<()> {
        if self.version == Version::Tls12 {
            return Err(io_err(RecordError::Exhausted));
        }
        // update_not_requested: we only replace our own key.
        self.seal_control(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0], out)?;
        let (seq, secrets) = self.kernel.update_tx_secret().map_err(tls_err)?;
        self.tx = Keys::new(self.version, seq, secrets).map_err(io_err)?;
        Ok(())
    }

    /// Seals close_notify once (best effort: dropped when the send buffer
    /// has no room even in its reserve).
    pub(crate) fn close_notify(&mut self, out: &mut Bytes) {
        if !self.close_sent {
            self.close_sent = true;
            let _ = self.seal_control(ALERT, &[1, 0], out);
        }
    }

    /// Opens the whole record at the front of `rx` (`Ok(None)`: not all of
    /// it has arrived). On `Data` the caller reads the range and then
    /// consumes the record's `len` bytes; for the other outcomes the
    /// record is consumed here. Replies (a key update) go to `out`.
    pub(crate) fn open_next(
        &mut self,
        rx: &mut Bytes,
        out: &mut Bytes,
    ) -> io::Result<Option<(Opened, usize)>> {
        let Some(len) = record::record_len(rx.filled()).map_err(io_err)? else {
            return Ok(None);
        };
        let (typ, range) = self.rx.open(&mut rx.filled_mut()[..len]).map_err(io_err)?;
        let opened = match typ {
            APP_DATA => return Ok(Some((Opened::Data(range), len))),
            ALERT => self.on_alert(&rx.filled()[range])?,
            HANDSHAKE => {
                let mut msg = [0u8; 5];
                let body = &rx.filled()[range];
                if body.len() != msg.len() {
                    return Err(io_err(RecordError::BadType));
                }
                msg.copy_from_slice(body);
                self.on_key_update(msg, out)?;
                Opened::Control
            }
            _ => return Err(io_err(RecordError::BadType)),
        };
        rx.consume(len);
        Ok(Some((opened, len)))
    }

    fn on_alert(&mut self, body: &[u8]) -> io::Result<Opened> {
        match body {
            [_, 0] => {
                self.peer_closed = true;
                Ok(Opened::Closed)
            }
            // user_canceled, and TLS 1.2 warnings, carry on.
            [_, 90] => Ok(Opened::Control),
            [1, _] if self.version == Version::Tls12 => Ok(Opened::Control),
            [_, desc] => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("peer sent TLS alert {desc}"),
            )),
            _ => Err(io_err(RecordError::BadLength)),
        }
    }

    /// A TLS 1.3 KeyUpdate, alone in its record: the peer's next records
    /// use the next key; when it asks, ours change too. Any other
    /// post-handshake message (or any in TLS 1.2, a renegotiation) ends
    /// the session.
    fn on_key_update(&mut self, msg: [u8; 5], out: &mut Bytes) -> io::Result<()> {
        let requested = match (self.version, msg) {
            (Version::Tls13, [KEY_UPDATE, 0, 0, 1, r @ (0 | 1)]) => r == 1,
            _ => return Err(io_err(RecordError::BadType)),
        };
        let (seq, secrets) = self.kernel.update_rx_secret().map_err(tls_err)?;
        self.rx = Keys::new(self.version, seq, secrets).map_err(io_err)?;
        if requested && !self.close_sent {
            self.rekey_tx(out)?;
        }
        Ok(())
    }
}
