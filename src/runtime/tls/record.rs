//! The TLS record layer of an established session, sealing and opening
//! records in place in caller-owned buffers (no allocation per record).
//!
//! Why this exists: rustls 0.23 (buffered `ServerConnection` and the
//! unbuffered API alike) encrypts every record into a freshly allocated
//! `Vec` (`MessageEncrypter::encrypt` returns an owned message) and the
//! unbuffered reader hands out decrypted records as owned `Vec`s too. So
//! rustls runs the handshake and owns the key schedule (its
//! `KernelConnection`, the API meant for kTLS, computes the next traffic
//! secrets on a key update), and this module does only the symmetric part
//! with ring's in-place AEAD, exactly as RFC 8446 §5.2 (TLS 1.3),
//! RFC 5288 (TLS 1.2 AES-GCM) and RFC 7905 (TLS 1.2 ChaCha20-Poly1305)
//! define it. The tests in `link_tests.rs` run every cipher suite against a
//! rustls client; `traffic_tests.rs` seals by hand what a client should
//! not send and checks the alert each refusal seals.

use std::ops::Range;

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::ConnectionTrafficSecrets;

/// Record header: type, legacy version, length.
pub(crate) const HEADER: usize = 5;
/// AEAD tag of every suite we negotiate.
const TAG: usize = 16;
/// Explicit nonce carried by a TLS 1.2 AES-GCM record.
const EXPLICIT_NONCE: usize = 8;
/// Largest plaintext of one record (RFC 8446 §5.1).
pub(crate) const MAX_PLAIN: usize = 16 * 1024;
/// Largest record on the wire: TLS 1.2 allows 2048 bytes of expansion
/// (TLS 1.3 only 256), plus the header.
pub(crate) const MAX_RECORD: usize = HEADER + MAX_PLAIN + 2048;
/// Largest TLS 1.3 ciphertext (RFC 8446 §5.2: 2^14 + 256).
const MAX_CIPHER_13: usize = MAX_PLAIN + 256;
/// The only record version after the handshake (`legacy_record_version`
/// in TLS 1.3, the negotiated version in TLS 1.2).
const RECORD_VERSION: [u8; 2] = [3, 3];

/// Content types (RFC 8446 §5.1).
pub(crate) const ALERT: u8 = 21;
/// Handshake messages (a TLS 1.3 KeyUpdate after the handshake).
pub(crate) const HANDSHAKE: u8 = 22;
/// Application data.
pub(crate) const APP_DATA: u8 = 23;

/// A record that cannot be opened: the session must end. Each names the
/// fatal alert the peer is sent ([`RecordError::alert`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordError {
    /// A header length below the suite's overhead, or a malformed alert
    /// or KeyUpdate: decode_error.
    BadLength,
    /// A ciphertext or plaintext longer than the version allows:
    /// record_overflow.
    Overflow,
    /// A header version other than 0x0303: protocol_version.
    BadVersion,
    /// The tag did not verify (tampered or out of order): bad_record_mac.
    Decrypt,
    /// A TLS 1.3 record whose inner plaintext is all padding, an outer
    /// type other than application data, or a content or handshake type
    /// not allowed after the handshake: unexpected_message.
    BadType,
    /// A field with a value the protocol does not define (an alert level,
    /// a KeyUpdate request): illegal_parameter.
    Illegal,
    /// More warnings or KeyUpdates than a peer has reason to send:
    /// unexpected_message.
    TooMany,
    /// The sequence number space of the key is used up: internal_error.
    Exhausted,
    /// The output buffer cannot hold the record (a caller bug):
    /// internal_error.
    NoRoom,
}

impl RecordError {
    /// The alert description (RFC 8446 §6.2) sent to the peer for it.
    pub(crate) fn alert(self) -> u8 {
        match self {
            Self::BadLength => 50,
            Self::Overflow => 22,
            Self::BadVersion => 70,
            Self::Decrypt => 20,
            Self::BadType | Self::TooMany => 10,
            Self::Illegal => 47,
            Self::Exhausted | Self::NoRoom => 80,
        }
    }
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Self::BadLength => "TLS record or message too short",
            Self::Overflow => "TLS record too long",
            Self::BadVersion => "TLS record of another version",
            Self::Illegal => "TLS message with an illegal value",
            Self::TooMany => "too many TLS warnings or key updates",
            Self::Decrypt => "TLS record failed to decrypt",
            Self::BadType => "TLS record of an unexpected type",
            Self::Exhausted => "TLS traffic keys exhausted",
            Self::NoRoom => "no room for a TLS record",
        };
        f.write_str(s)
    }
}

impl std::error::Error for RecordError {}

/// The protocol version of the session: it decides the record format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// TLS 1.2 (AAD carries the sequence number; GCM has an explicit nonce).
    Tls12,
    /// TLS 1.3 (inner content type, header as AAD).
    Tls13,
}

/// One direction's key: the AEAD key, the static IV and the sequence.
pub(crate) struct Keys {
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
    version: Version,
    /// TLS 1.2 AES-GCM: 8 bytes of explicit nonce in every record.
    explicit_nonce: bool,
    /// Records this key may seal before it must be replaced (TLS 1.3: a
    /// key update; TLS 1.2: the session ends, as rustls does).
    limit: u64,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key or the IV.
        f.debug_struct("Keys")
            .field("seq", &self.seq)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        // ring offers no way to wipe the expanded key inside `LessSafeKey`;
        // the static IV at least does not outlive the key.
        zeroize::Zeroize::zeroize(&mut self.iv);
    }
}

impl Keys {
    /// The key of one direction from rustls's extracted secrets, starting
    /// at sequence number `seq`.
    pub(crate) fn new(
        version: Version,
        seq: u64,
        secrets: ConnectionTrafficSecrets,
    ) -> Result<Keys, RecordError> {
        // Records per key: AES-GCM's confidentiality limit as rustls's ring
        // suites state it (2^23 is the lowest of them); ChaCha20 has none.
        let (alg, key, iv, gcm) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv, true),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv, true),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv, false)
            }
            _ => return Err(RecordError::BadType),
        };
        let unbound = UnboundKey::new(alg, key.as_ref()).map_err(|_| RecordError::BadLength)?;
        let iv: [u8; 12] = iv.as_ref().try_into().map_err(|_| RecordError::BadLength)?;
        Ok(Keys {
            key: LessSafeKey::new(unbound),
            iv,
            seq,
            version,
            explicit_nonce: gcm && version == Version::Tls12,
            limit: if gcm { 1 << 23 } else { u64::MAX - 1 },
        })
    }

    /// Whether this key has one record left within its limit: the
    /// KeyUpdate (TLS 1.3) or close_notify (TLS 1.2) that retires it, so
    /// no key ever seals more than its limit.
    pub(crate) fn exhausted(&self) -> bool {
        self.seq.saturating_add(1) >= self.limit
    }

    #[cfg(test)]
    pub(crate) fn set_limit(&mut self, limit: u64) {
        self.limit = limit;
    }

    #[cfg(test)]
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// Checks the header at the front of `h` (at least [`HEADER`] bytes)
    /// before the body arrives: version 0x0303, a TLS 1.3 outer type of
    /// application data, a length within the version's bounds. Returns
    /// the whole record's length.
    pub(crate) fn check_header(&self, h: &[u8]) -> Result<usize, RecordError> {
        if h[1..3] != RECORD_VERSION {
            return Err(RecordError::BadVersion);
        }
        if self.version == Version::Tls13 && h[0] != APP_DATA {
            return Err(RecordError::BadType);
        }
        let body = usize::from(u16::from_be_bytes([h[3], h[4]]));
        let max = match self.version {
            Version::Tls13 => MAX_CIPHER_13,
            Version::Tls12 => MAX_RECORD - HEADER,
        };
        if body > max {
            return Err(RecordError::Overflow);
        }
        if body + HEADER < self.overhead() {
            return Err(RecordError::BadLength);
        }
        Ok(HEADER + body)
    }

    /// Length of the whole record at the front of `buf`, its header
    /// checked ([`Keys::check_header`]) as soon as it is in: `Ok(None)`
    /// while the record's bytes have not all arrived.
    pub(crate) fn record_len(&self, buf: &[u8]) -> Result<Option<usize>, RecordError> {
        if buf.len() < HEADER {
            return Ok(None);
        }
        let len = self.check_header(buf)?;
        Ok((buf.len() >= len).then_some(len))
    }

    /// Bytes a record adds to its plaintext.
    pub(crate) fn overhead(&self) -> usize {
        let inner_type = usize::from(self.version == Version::Tls13);
        let explicit = if self.explicit_nonce {
            EXPLICIT_NONCE
        } else {
            0
        };
        HEADER + explicit + inner_type + TAG
    }

    fn nonce(&self) -> [u8; 12] {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        n
    }

    fn tls12_aad(&self, typ: u8, len: usize) -> [u8; 13] {
        let mut a = [0u8; 13];
        a[..8].copy_from_slice(&self.seq.to_be_bytes());
        a[8] = typ;
        a[9..11].copy_from_slice(&[3, 3]);
        a[11..13].copy_from_slice(&(len as u16).to_be_bytes());
        a
    }

    /// Seals `plain` (at most [`MAX_PLAIN`] bytes) as one record of content
    /// type `typ` into the front of `out`; returns the record's length.
    pub(crate) fn seal(
        &mut self,
        typ: u8,
        plain: &[u8],
        out: &mut [u8],
    ) -> Result<usize, RecordError> {
        let total = plain.len() + self.overhead();
        if plain.len() > MAX_PLAIN || out.len() < total {
            return Err(RecordError::NoRoom);
        }
        if self.seq == u64::MAX {
            return Err(RecordError::Exhausted);
        }
        let nonce = self.nonce();
        let (outer, body_at) = match self.version {
            Version::Tls13 => (APP_DATA, HEADER),
            Version::Tls12 if self.explicit_nonce => {
                out[HEADER..HEADER + EXPLICIT_NONCE].copy_from_slice(&nonce[4..]);
                (typ, HEADER + EXPLICIT_NONCE)
            }
            Version::Tls12 => (typ, HEADER),
        };
        out[0] = outer;
        out[1..3].copy_from_slice(&[3, 3]);
        out[3..5].copy_from_slice(&((total - HEADER) as u16).to_be_bytes());
        let mut end = body_at + plain.len();
        out[body_at..end].copy_from_slice(plain);
        let tls12_aad;
        let aad: &[u8] = match self.version {
            Version::Tls13 => {
                out[end] = typ;
                end += 1;
                &out[..HEADER]
            }
            Version::Tls12 => {
                tls12_aad = self.tls12_aad(typ, plain.len());
                &tls12_aad
            }
        };
        let mut header = [0u8; 13];
        header[..aad.len()].copy_from_slice(aad);
        let aad_len = aad.len();
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&header[..aad_len]),
                &mut out[body_at..end],
            )
            .map_err(|_| RecordError::Decrypt)?;
        out[end..end + TAG].copy_from_slice(tag.as_ref());
        self.seq += 1;
        Ok(total)
    }

    /// Opens the record at the front of `rec` (exactly one whole record, as
    /// [`record_len`] measured it) in place; returns its content type and
    /// where its plaintext now lies in `rec`.
    pub(crate) fn open(&mut self, rec: &mut [u8]) -> Result<(u8, Range<usize>), RecordError> {
        if rec.len() < HEADER || self.check_header(rec)? != rec.len() {
            return Err(RecordError::BadLength);
        }
        if self.seq == u64::MAX {
            return Err(RecordError::Exhausted);
        }
        let mut header = [0u8; HEADER];
        header.copy_from_slice(&rec[..HEADER]);
        let outer = header[0];
        let mut nonce = self.nonce();
        let body_at = if self.explicit_nonce {
            nonce[4..].copy_from_slice(&rec[HEADER..HEADER + EXPLICIT_NONCE]);
            HEADER + EXPLICIT_NONCE
        } else {
            HEADER
        };
        let aad: [u8; 13];
        let aad: &[u8] = match self.version {
            Version::Tls13 => &header,
            Version::Tls12 => {
                aad = self.tls12_aad(outer, rec.len() - body_at - TAG);
                &aad
            }
        };
        let plain_len = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut rec[body_at..],
            )
            .map_err(|_| RecordError::Decrypt)?
            .len();
        self.seq += 1;
        let plain = &rec[body_at..body_at + plain_len];
        match self.version {
            Version::Tls12 if plain_len > MAX_PLAIN => Err(RecordError::Overflow),
            Version::Tls12 => Ok((outer, body_at..body_at + plain_len)),
            // The whole TLSInnerPlaintext (content, type, padding) is at
            // most 2^14 + 1 bytes (RFC 8446 §5.4).
            Version::Tls13 if plain_len > MAX_PLAIN + 1 => Err(RecordError::Overflow),
            Version::Tls13 => {
                // TLSInnerPlaintext: content, type, zero padding.
                let at = plain
                    .iter()
                    .rposition(|&b| b != 0)
                    .ok_or(RecordError::BadType)?;
                Ok((plain[at], body_at..body_at + at))
            }
        }
    }
}
