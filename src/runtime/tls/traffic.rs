//! An established TLS session: records sealed into and opened in the
//! connection's own buffers (see `record.rs` for why not rustls's).
//!
//! Contract: [`Traffic::seal_from`] encrypts as much plaintext as fits in
//! the send buffer, keeping [`CONTROL_RESERVE`] free for a key update or an
//! alert; [`Traffic::open_next`] opens one whole record in the receive
//! buffer and acts on alerts and TLS 1.3 key updates itself. A record that
//! cannot be accepted ends the session with the fatal alert RFC 8446 §6.2
//! names for it (bad_record_mac for a tag that does not verify), sealed
//! into the send buffer for the caller to push. A sending key at its limit
//! is replaced by a key update (TLS 1.3) or ends the session with
//! close_notify (TLS 1.2, as rustls does). A key update the peer asks for
//! is sent once, before our next data record, however often it asked
//! (RFC 8446 §4.6.3). As rustls does, a peer gets at most 32 KeyUpdates
//! between two records of data and 4 warning alerts in all. Nothing here
//! allocates except rustls's key schedule on a key update.

use std::io;
use std::ops::Range;

use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::{ConnectionTrafficSecrets, ProtocolVersion};

use super::buf::Bytes;
use super::record::{Keys, RecordError, Version, ALERT, APP_DATA, HANDSHAKE, MAX_PLAIN};

/// Send-buffer bytes kept free for control records: a KeyUpdate (27 bytes
/// sealed) and an alert (at most 31: TLS 1.2 GCM) fit together.
pub(crate) const CONTROL_RESERVE: usize = 64;

/// TLS 1.3 KeyUpdate handshake message type.
const KEY_UPDATE: u8 = 24;
/// Alert descriptions handled here (RFC 8446 §6).
const CLOSE_NOTIFY: u8 = 0;
const USER_CANCELED: u8 = 90;
/// KeyUpdates a peer may send between two records of data (rustls and
/// BoringSSL allow 32).
const KEY_UPDATES_IN_A_ROW: u8 = 32;
/// Warning alerts a peer may send in a session (rustls allows 4).
const WARNINGS: u8 = 4;

/// The key schedule behind a session: the next traffic secret of either
/// direction. rustls's `KernelConnection` in service; tests derive keys
/// of their own so the record layer runs without a handshake.
pub(crate) trait Schedule {
    /// Our next sending secret and its first sequence number.
    fn next_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error>;
    /// The peer's next sending secret and its first sequence number.
    fn next_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error>;
}

impl Schedule for KernelConnection<ServerConnectionData> {
    fn next_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        self.update_tx_secret()
    }

    fn next_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        self.update_rx_secret()
    }
}

/// Why a record was not accepted: one we answer with an alert, or an I/O
/// failure (the peer's own fatal alert, the key schedule).
enum Fail {
    Record(RecordError),
    Io(io::Error),
}

impl From<RecordError> for Fail {
    fn from(e: RecordError) -> Fail {
        Fail::Record(e)
    }
}

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
pub(crate) struct Traffic<S = KernelConnection<ServerConnectionData>> {
    schedule: S,
    pub(crate) tx: Keys,
    rx: Keys,
    version: Version,
    /// The peer's close_notify arrived.
    pub(crate) peer_closed: bool,
    /// Our close_notify or fatal alert was sealed: nothing follows it.
    close_sent: bool,
    /// The peer asked for our key update: it goes before our next record.
    update_due: bool,
    /// KeyUpdates the peer may still send before its next data.
    key_updates_left: u8,
    /// Warning alerts the peer may still send.
    warnings_left: u8,
    /// Sending keys replaced so far (0 at the hand-over).
    pub(crate) tx_updates: u64,
}

impl<S> std::fmt::Debug for Traffic<S> {
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
        Ok(Traffic::from_parts(
            version,
            Keys::new(version, tx_seq, tx).map_err(io_err)?,
            Keys::new(version, rx_seq, rx).map_err(io_err)?,
            kernel,
        ))
    }
}

impl<S: Schedule> Traffic<S> {
    /// A session from its two keys and its key schedule.
    pub(crate) fn from_parts(version: Version, tx: Keys, rx: Keys, schedule: S) -> Traffic<S> {
        Traffic {
            schedule,
            tx,
            rx,
            version,
            peer_closed: false,
            close_sent: false,
            update_due: false,
            key_updates_left: KEY_UPDATES_IN_A_ROW,
            warnings_left: WARNINGS,
            tx_updates: 0,
        }
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
            let room = limit
                .min(out.capacity())
                .saturating_sub(out.len() + CONTROL_RESERVE + self.tx.overhead());
            if room == 0 {
                break;
            }
            if self.update_due || self.tx.exhausted() {
                // Sealed in the reserve; the room is measured again.
                self.rekey_tx(out)?;
                continue;
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
            self.close_notify(out);
            return Err(io_err(RecordError::Exhausted));
        }
        // update_not_requested: we only replace our own key.
        self.seal_control(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0], out)?;
        let (seq, secrets) = self.schedule.next_tx().map_err(tls_err)?;
        self.tx = Keys::new(self.version, seq, secrets).map_err(io_err)?;
        self.update_due = false;
        self.tx_updates += 1;
        Ok(())
    }

    /// Seals a fatal alert once, in place of any later close_notify (best
    /// effort, as close_notify).
    pub(crate) fn fatal_alert(&mut self, desc: u8, out: &mut Bytes) {
        if !self.close_sent {
            self.close_sent = true;
            let _ = self.seal_control(ALERT, &[2, desc], out);
        }
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
    /// record is consumed here. A record refused seals its fatal alert
    /// into `out` (the caller pushes it and ends the session).
    pub(crate) fn open_next(
        &mut self,
        rx: &mut Bytes,
        out: &mut Bytes,
    ) -> io::Result<Option<(Opened, usize)>> {
        match self.open_checked(rx) {
            Ok(v) => Ok(v),
            Err(Fail::Record(e)) => {
                self.fatal_alert(e.alert(), out);
                Err(io_err(e))
            }
            Err(Fail::Io(e)) => Err(e),
        }
    }

    fn open_checked(&mut self, rx: &mut Bytes) -> Result<Option<(Opened, usize)>, Fail> {
        let Some(len) = self.rx.record_len(rx.filled())? else {
            return Ok(None);
        };
        let (typ, range) = self.rx.open(&mut rx.filled_mut()[..len])?;
        let opened = match typ {
            APP_DATA => {
                if !range.is_empty() {
                    self.key_updates_left = KEY_UPDATES_IN_A_ROW;
                }
                return Ok(Some((Opened::Data(range), len)));
            }
            ALERT => self.on_alert(&rx.filled()[range])?,
            HANDSHAKE => {
                let requested = key_update(self.version, &rx.filled()[range])?;
                self.on_key_update(requested)?;
                Opened::Control
            }
            _ => return Err(RecordError::BadType.into()),
        };
        rx.consume(len);
        Ok(Some((opened, len)))
    }

    /// An alert (RFC 8446 §6, RFC 5246 §7.2): close_notify ends the stream;
    /// user_canceled (and in TLS 1.2 any warning) carries on, counted; any
    /// other ends the session.
    fn on_alert(&mut self, body: &[u8]) -> Result<Opened, Fail> {
        let [level, desc] = *body else {
            return Err(RecordError::BadLength.into());
        };
        if !matches!(level, 1 | 2) {
            return Err(RecordError::Illegal.into());
        }
        if desc == CLOSE_NOTIFY {
            self.peer_closed = true;
            return Ok(Opened::Closed);
        }
        // TLS 1.3 ignores the level: every alert but the two closures is
        // an error.
        let warning = match self.version {
            Version::Tls13 => desc == USER_CANCELED,
            Version::Tls12 => level == 1,
        };
        if !warning {
            // Nothing more is sent on a session the peer ended.
            self.close_sent = true;
            return Err(Fail::Io(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("peer sent TLS alert {desc}"),
            )));
        }
        self.warnings_left = self
            .warnings_left
            .checked_sub(1)
            .ok_or(RecordError::TooMany)?;
        Ok(Opened::Control)
    }

    /// A TLS 1.3 KeyUpdate: the peer's next records use its next key; when
    /// it asks, ours changes before our next record.
    fn on_key_update(&mut self, requested: bool) -> Result<(), Fail> {
        self.key_updates_left = self
            .key_updates_left
            .checked_sub(1)
            .ok_or(RecordError::TooMany)?;
        let (seq, secrets) = self.schedule.next_rx().map_err(|e| Fail::Io(tls_err(e)))?;
        self.rx = Keys::new(self.version, seq, secrets)?;
        self.update_due |= requested;
        Ok(())
    }
}

/// The only handshake message a server takes after the handshake: a TLS
/// 1.3 KeyUpdate, whole and alone in its record (it precedes a key change,
/// so RFC 8446 §5.1 aligns it with the record's end; a fragmented one is
/// refused). Returns whether the peer asked for our update. Anything else
/// (a TLS 1.2 renegotiation, a TLS 1.3 NewSessionTicket or
/// post-handshake authentication) is unexpected.
fn key_update(version: Version, body: &[u8]) -> Result<bool, RecordError> {
    match (version, body) {
        (Version::Tls13, [KEY_UPDATE, 0, 0, 1, 0]) => Ok(false),
        (Version::Tls13, [KEY_UPDATE, 0, 0, 1, 1]) => Ok(true),
        (Version::Tls13, [KEY_UPDATE, 0, 0, 1, _]) => Err(RecordError::Illegal),
        (Version::Tls13, [KEY_UPDATE, ..]) => Err(RecordError::BadLength),
        _ => Err(RecordError::BadType),
    }
}
