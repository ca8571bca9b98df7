//! NKeys, NATS's Ed25519 keys in text form, as the NATS tools (`nk`,
//! `nsc`) write them and nats-server reads them.
//!
//! A key is base32 (RFC 4648 alphabet, no padding) of a prefix, the
//! 32-byte key and a CRC-16/XMODEM of both, little-endian. A public key's
//! prefix is one byte naming its kind (`U` user, `A` account, `O`
//! operator, `N` server, `C` cluster); a seed's is two bytes, the seed
//! marker `S` and then the kind, packed so the text starts `SU…` for a
//! user seed. The client signs the server's `nonce` with the seed's
//! Ed25519 key and sends the signature base64url without padding.
//!
//! Contract: [`Seed::parse`] refuses anything but a well-formed seed with
//! a valid checksum, naming what is wrong and never echoing the text; a
//! [`Seed`] wipes its bytes on drop and never prints them.

use ring::signature::{Ed25519KeyPair, KeyPair};

/// Prefix byte of a seed (base32 `S`).
const PREFIX_SEED: u8 = 18 << 3;
/// Prefix byte of a user's public key (base32 `U`).
pub(crate) const PREFIX_USER: u8 = 20 << 3;
/// Prefix byte of an account's public key (base32 `A`).
pub(crate) const PREFIX_ACCOUNT: u8 = 0;
/// Prefix byte of an operator's public key (base32 `O`).
pub(crate) const PREFIX_OPERATOR: u8 = 14 << 3;
const PREFIX_SERVER: u8 = 13 << 3;
const PREFIX_CLUSTER: u8 = 2 << 3;
/// Raw length of a seed: two prefix bytes, the seed, the checksum.
const SEED_RAW: usize = 2 + 32 + 2;
/// Text length of a seed (36 bytes in base32 without padding).
pub(crate) const SEED_TEXT: usize = 58;

const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// CRC-16/XMODEM (polynomial 0x1021, initial 0), as the NKey checksum.
pub(crate) fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// RFC 4648 base32 without padding.
pub(crate) fn base32(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(5) * 8);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &b in data {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((acc >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((acc << (5 - bits)) & 31) as usize]));
    }
    out
}

/// Decodes RFC 4648 base32 without padding into `out`; the bytes written,
/// or `None` for a character outside the alphabet, too long an input or
/// non-zero trailing bits.
fn unbase32(text: &[u8], out: &mut [u8]) -> Option<usize> {
    let (mut acc, mut bits, mut n) = (0u32, 0u32, 0usize);
    for &c in text {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        acc = ((acc << 5) | v) & 0xFFFF;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            *out.get_mut(n)? = (acc >> bits) as u8;
            n += 1;
        }
    }
    // The bits past the last byte are zero in a canonical encoding (what
    // every NATS tool writes), so one text is one key.
    (acc & ((1 << bits) - 1) == 0).then_some(n)
}

/// Base64url without padding (RFC 4648 §5), as NATS sends signatures.
pub(crate) fn base64url(data: &[u8]) -> String {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(B64[((v >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Why a text is not an NKey seed (never the text itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedError {
    /// Not 58 characters of base32.
    Encoding,
    /// The checksum does not match: a typo or a truncated copy.
    Checksum,
    /// A public key, or a seed of an unknown kind.
    NotASeed,
    /// A seed, but not of a user (`SU…`): the client logs on as a user.
    NotAUser,
}

impl std::error::Error for SeedError {}

impl std::fmt::Display for SeedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SeedError::Encoding => "not an NKey seed (58 characters of base32, starting SU)",
            SeedError::Checksum => "NKey seed checksum does not match (a typo or a truncated copy)",
            SeedError::NotASeed => "not an NKey seed (a public key? seeds start with S)",
            SeedError::NotAUser => "an NKey seed, but not a user's (user seeds start SU)",
        })
    }
}

/// A user's NKey seed. Not `Debug`-printable; wiped on drop.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Seed {
    raw: [u8; 32],
}

impl std::fmt::Debug for Seed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seed(<redacted>)")
    }
}

impl Drop for Seed {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.raw);
    }
}

impl Seed {
    /// Parses a user seed (surrounding whitespace ignored).
    pub(crate) fn parse(text: &str) -> Result<Seed, SeedError> {
        let text = text.trim().as_bytes();
        if text.len() != SEED_TEXT {
            return Err(SeedError::Encoding);
        }
        let mut raw = [0u8; SEED_RAW + 1];
        let n = unbase32(text, &mut raw).ok_or(SeedError::Encoding)?;
        let result = Seed::from_raw(&raw[..n]);
        zeroize::Zeroize::zeroize(&mut raw);
        result
    }

    fn from_raw(raw: &[u8]) -> Result<Seed, SeedError> {
        if raw.len() != SEED_RAW {
            return Err(SeedError::Encoding);
        }
        let (body, sum) = raw.split_at(SEED_RAW - 2);
        if crc16(body) != u16::from_le_bytes([sum[0], sum[1]]) {
            return Err(SeedError::Checksum);
        }
        let marker = body[0] & 0b1111_1000;
        let kind = ((body[0] & 0b111) << 5) | (body[1] >> 3);
        if marker != PREFIX_SEED
            || ![
                PREFIX_USER,
                PREFIX_ACCOUNT,
                PREFIX_OPERATOR,
                PREFIX_SERVER,
                PREFIX_CLUSTER,
            ]
            .contains(&kind)
        {
            return Err(SeedError::NotASeed);
        }
        if kind != PREFIX_USER {
            return Err(SeedError::NotAUser);
        }
        let mut seed = [0u8; 32];
        seed.copy_from_slice(&body[2..]);
        Ok(Seed { raw: seed })
    }

    /// A seed from its 32 bytes.
    #[cfg(test)]
    pub(crate) fn from_bytes(raw: [u8; 32]) -> Seed {
        Seed { raw }
    }

    fn key_pair(&self) -> Ed25519KeyPair {
        Ed25519KeyPair::from_seed_unchecked(&self.raw).expect("any 32 bytes are an Ed25519 seed")
    }

    /// The seed's text form (`SU…`).
    #[cfg(test)]
    pub(crate) fn encode(&self) -> String {
        let mut raw = Vec::with_capacity(SEED_RAW);
        raw.push(PREFIX_SEED | (PREFIX_USER >> 5));
        raw.push((PREFIX_USER & 31) << 3);
        raw.extend_from_slice(&self.raw);
        raw.extend_from_slice(&crc16(&raw).to_le_bytes());
        let text = base32(&raw);
        zeroize::Zeroize::zeroize(&mut raw);
        text
    }

    /// The user's public key (`U…`), as the server's configuration names it.
    pub(crate) fn public_key(&self) -> String {
        encode_public(PREFIX_USER, self.key_pair().public_key().as_ref())
    }

    /// The Ed25519 signature of `message`, base64url without padding.
    pub(crate) fn sign(&self, message: &[u8]) -> String {
        base64url(self.key_pair().sign(message).as_ref())
    }
}

/// The text form of a public key of kind `prefix`.
pub(crate) fn encode_public(prefix: u8, key: &[u8]) -> String {
    let mut raw = Vec::with_capacity(1 + key.len() + 2);
    raw.push(prefix);
    raw.extend_from_slice(key);
    raw.extend_from_slice(&crc16(&raw).to_le_bytes());
    base32(&raw)
}

#[cfg(test)]
#[path = "nkey_tests.rs"]
mod tests;
