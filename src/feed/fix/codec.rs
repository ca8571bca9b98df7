//! FIX 4.4 tag=value framing, field iteration and encoding.
//!
//! Contract: decoding never allocates and never panics on any input — a
//! frame is located and verified ([`frame_len`]: BeginString, BodyLength,
//! CheckSum) in place in the caller's receive buffer, and its fields are
//! then read as `(tag, &[u8])` pairs by [`Fields`] borrowing that buffer.
//! Encoding writes into an [`Encoder`] whose two buffers are allocated once
//! at construction with a fixed capacity; a message that would not fit is
//! refused with [`EncodeError`] instead of growing them.

use std::io::Write;

/// Field separator.
pub(crate) const SOH: u8 = 0x01;
/// The only BeginString accepted and sent.
pub(crate) const BEGIN_STRING: &[u8] = b"8=FIX.4.4\x01";
/// Largest BodyLength accepted; a bigger claim is a decode failure (a
/// garbage length must not make us wait for megabytes that never come).
pub(crate) const BODY_LEN_MAX: usize = 16 * 1024;
/// `10=NNN<SOH>`.
const TRAILER_LEN: usize = 7;
/// Digits allowed in a BodyLength value.
const BODY_LEN_DIGITS_MAX: usize = 6;

/// Why bytes from a provider are not a FIX message. Every variant is a
/// decode failure for the feed breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The frame does not start with `8=FIX.4.4`.
    #[error("frame does not start with 8=FIX.4.4")]
    BadBeginString,
    /// BodyLength (9) is missing or not a number.
    #[error("BodyLength (9) missing or not a number")]
    BadBodyLength,
    /// BodyLength (the value, in bytes) is above the limit.
    #[error("BodyLength {0} above the limit")]
    BodyTooLong(usize),
    /// No CheckSum (10) where BodyLength puts it.
    #[error("CheckSum (10) missing where BodyLength says it is")]
    BadTrailer,
    /// The CheckSum does not match the bytes.
    #[error("CheckSum mismatch: computed {computed}, received {received}")]
    BadChecksum {
        /// The sum of the bytes, modulo 256.
        computed: u8,
        /// The value the message carries.
        received: u16,
    },
    /// A field has no `=`, or an empty or non-numeric tag.
    #[error("malformed field (no `=`, empty or non-numeric tag)")]
    MalformedField,
    /// MsgType (35) is not the first body field.
    #[error("MsgType (35) is not the first body field")]
    MissingMsgType,
    /// SenderCompID/TargetCompID do not match the session.
    #[error("SenderCompID/TargetCompID (49/56) do not match the session")]
    WrongCompId,
}

/// Finds the first complete frame at the start of `buf`.
///
/// `Ok(None)`: the bytes so far are a valid prefix; read more.
/// `Ok(Some(n))`: `buf[..n]` is one verified message.
/// `Err(_)`: the stream is broken; the session must disconnect.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, DecodeError> {
    let head = buf.len().min(BEGIN_STRING.len());
    if buf[..head] != BEGIN_STRING[..head] {
        return Err(DecodeError::BadBeginString);
    }
    if buf.len() <= BEGIN_STRING.len() {
        return Ok(None);
    }
    let rest = &buf[BEGIN_STRING.len()..];
    let Some((body_len, len_field)) = body_length(rest)? else {
        return Ok(None);
    };
    if body_len > BODY_LEN_MAX {
        return Err(DecodeError::BodyTooLong(body_len));
    }
    let body_start = BEGIN_STRING.len() + len_field;
    let checked_end = body_start + body_len;
    let total = checked_end + TRAILER_LEN;
    if buf.len() < total {
        return Ok(None);
    }
    let received = trailer_checksum(&buf[checked_end..total])?;
    let computed = checksum(&buf[..checked_end]);
    if u16::from(computed) != received {
        return Err(DecodeError::BadChecksum { computed, received });
    }
    Ok(Some(total))
}

/// After a framing error at the start of `buf`: how many bytes to drop so
/// that `buf` starts at the next `8=FIX.4.4<SOH>` (searched from offset 1),
/// or, when there is none, everything but a trailing partial prefix of it.
/// Always at least 1 for a non-empty `buf`, so resyncing makes progress.
pub fn resync(buf: &[u8]) -> usize {
    if buf.is_empty() {
        return 0;
    }
    let n = BEGIN_STRING.len();
    for start in 1..buf.len() {
        let tail = &buf[start..];
        let m = tail.len().min(n);
        if tail[..m] == BEGIN_STRING[..m] {
            return start;
        }
    }
    buf.len()
}

/// Parses `9=<digits><SOH>`; returns the value and the field's length.
fn body_length(rest: &[u8]) -> Result<Option<(usize, usize)>, DecodeError> {
    let head = rest.len().min(2);
    if rest[..head] != b"9="[..head] {
        return Err(DecodeError::BadBodyLength);
    }
    let digits = &rest[head..];
    let mut value = 0usize;
    for (i, &b) in digits.iter().enumerate() {
        match b {
            SOH if i > 0 => return Ok(Some((value, 2 + i + 1))),
            b'0'..=b'9' if i < BODY_LEN_DIGITS_MAX => value = value * 10 + usize::from(b - b'0'),
            _ => return Err(DecodeError::BadBodyLength),
        }
    }
    Ok(None)
}

fn trailer_checksum(trailer: &[u8]) -> Result<u16, DecodeError> {
    debug_assert_eq!(trailer.len(), TRAILER_LEN);
    if &trailer[..3] != b"10=" || trailer[6] != SOH {
        return Err(DecodeError::BadTrailer);
    }
    let mut v = 0u16;
    for &b in &trailer[3..6] {
        if !b.is_ascii_digit() {
            return Err(DecodeError::BadTrailer);
        }
        v = v * 10 + u16::from(b - b'0');
    }
    Ok(v)
}

/// Sum of the bytes modulo 256, as FIX defines CheckSum.
#[inline]
pub fn checksum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |acc, &b| acc.wrapping_add(b))
}

/// The fields of one verified frame after the header fields 8 and 9 and
/// before the trailer 10. Yields `Err(MalformedField)` once and then stops.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    /// `frame` is `buf[..n]` from [`frame_len`].
    pub fn of_frame(frame: &'a [u8]) -> Self {
        let body = frame
            .get(BEGIN_STRING.len()..frame.len().saturating_sub(TRAILER_LEN))
            .unwrap_or(&[]);
        let mut f = Fields { rest: body };
        // Skip the BodyLength field (already verified by `frame_len`).
        let _ = f.next();
        f
    }

    /// The raw body (after 9=, before 10=), e.g. for tests.
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, &'a [u8]), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let parsed = split_field(self.rest);
        match parsed {
            Some((tag, value, used)) => {
                self.rest = &self.rest[used..];
                Some(Ok((tag, value)))
            }
            None => {
                self.rest = &[];
                Some(Err(DecodeError::MalformedField))
            }
        }
    }
}

/// `tag=value<SOH>` at the start of `s`: (tag, value, bytes used).
fn split_field(s: &[u8]) -> Option<(u32, &[u8], usize)> {
    let eq = s.iter().position(|&b| b == b'=')?;
    let tag = parse_u32(&s[..eq])?;
    let value_start = eq + 1;
    let soh = s[value_start..].iter().position(|&b| b == SOH)?;
    if tag == 0 {
        return None;
    }
    Some((
        tag,
        &s[value_start..value_start + soh],
        value_start + soh + 1,
    ))
}

/// Unsigned decimal without sign or spaces; `None` when empty, non-digit
/// or overflowing.
pub(crate) fn parse_u32(s: &[u8]) -> Option<u32> {
    parse_u64(s).and_then(|v| u32::try_from(v).ok())
}

/// Unsigned decimal without sign or spaces.
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v = 0u64;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

/// A size such as `1000000` or `1000000.00`: the integer part, the
/// fraction must be zeros (sizes are whole units of the base instrument).
pub fn parse_size(s: &[u8]) -> Option<u64> {
    match s.iter().position(|&b| b == b'.') {
        None => parse_u64(s),
        Some(dot) if s[dot + 1..].iter().all(|&b| b == b'0') => parse_u64(&s[..dot]),
        Some(_) => None,
    }
}

const NS_PER_S: u64 = 1_000_000_000;
const NS_PER_DAY: u64 = 86_400 * NS_PER_S;

/// `YYYYMMDD-HH:MM:SS[.fff[fff[fff]]]` (UTCTimestamp) to UTC ns since the
/// Unix epoch; `None` when malformed or before 1970.
pub fn parse_utc_timestamp(s: &[u8]) -> Option<u64> {
    if s.len() < 17 || s[8] != b'-' {
        return None;
    }
    let days = parse_date(&s[..8])?;
    let tod = parse_time_only(&s[9..])?;
    days.checked_mul(NS_PER_DAY)?.checked_add(tod)
}

/// `YYYYMMDD` (UTCDateOnly) to days since the Unix epoch.
pub(crate) fn parse_date(s: &[u8]) -> Option<u64> {
    if s.len() != 8 {
        return None;
    }
    let y = parse_u64(&s[..4])? as i64;
    let m = parse_u64(&s[4..6])? as u32;
    let d = parse_u64(&s[6..8])? as u32;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    u64::try_from(days_from_civil(y, m, d)).ok()
}

/// `HH:MM:SS[.fff[fff[fff]]]` (UTCTimeOnly) to ns since midnight.
pub fn parse_time_only(s: &[u8]) -> Option<u64> {
    if s.len() < 8 || s[2] != b':' || s[5] != b':' {
        return None;
    }
    let h = parse_u64(&s[..2])?;
    let m = parse_u64(&s[3..5])?;
    let sec = parse_u64(&s[6..8])?;
    // 60 allows a leap second.
    if h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let frac_ns = match &s[8..] {
        [] => 0,
        [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
            parse_u64(digits)? * crate::model::price::POW10[9 - digits.len()] as u64
        }
        _ => return None,
    };
    Some(((h * 60 + m) * 60 + sec) * NS_PER_S + frac_ns)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Inverse of [`days_from_civil`]: (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Writes UTC ns as `YYYYMMDD-HH:MM:SS.fff` (millisecond precision, the
/// FIX 4.4 default).
pub fn write_utc_timestamp(out: &mut impl Write, utc_ns: u64) -> std::io::Result<()> {
    let (y, mo, d) = civil_from_days((utc_ns / NS_PER_DAY) as i64);
    let tod = utc_ns % NS_PER_DAY;
    let (s, ms) = (tod / NS_PER_S, (tod % NS_PER_S) / 1_000_000);
    write!(
        out,
        "{y:04}{mo:02}{d:02}-{:02}:{:02}:{:02}.{ms:03}",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

/// The encoder refused a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The message does not fit the encode buffer (its capacity, in bytes).
    #[error("message does not fit the {0}-byte encode buffer")]
    TooLong(usize),
}

/// Builds outgoing messages in two fixed buffers: the body, then the
/// framed message (8, 9, body, 10). Reused for every message.
#[derive(Debug)]
pub struct Encoder {
    body: Vec<u8>,
    out: Vec<u8>,
    capacity: usize,
}

impl Encoder {
    /// `capacity`: largest body in bytes; both buffers are allocated now.
    pub fn new(capacity: usize) -> Self {
        assert!(capacity >= 64, "encode buffer too small for any message");
        Encoder {
            body: Vec::with_capacity(capacity),
            out: Vec::with_capacity(capacity + 32),
            capacity,
        }
    }

    /// Starts a message: MsgType, then the standard header fields.
    pub fn begin(&mut self, msg_type: &[u8], header: &Header<'_>) {
        self.body.clear();
        self.bytes(35, msg_type);
        self.bytes(49, header.sender_comp_id);
        self.bytes(56, header.target_comp_id);
        self.uint(34, header.seq);
        self.body.extend_from_slice(b"52=");
        // Writing into a Vec with spare capacity cannot fail.
        let _ = write_utc_timestamp(&mut self.body, header.sending_time_utc_ns);
        self.body.push(SOH);
    }

    /// A field with a raw byte value: `tag=value<SOH>`.
    pub fn bytes(&mut self, tag: u32, value: &[u8]) {
        let _ = write!(self.body, "{tag}=");
        self.body.extend_from_slice(value);
        self.body.push(SOH);
    }

    /// A field with an unsigned integer value.
    pub fn uint(&mut self, tag: u32, value: u64) {
        let _ = write!(self.body, "{tag}={value}\x01");
    }

    /// A field whose value is formatted (`format_args!`), without allocating.
    pub fn fmt(&mut self, tag: u32, value: std::fmt::Arguments<'_>) {
        let _ = write!(self.body, "{tag}=");
        let _ = self.body.write_fmt(value);
        self.body.push(SOH);
    }

    /// A UTCTimestamp field (millisecond precision).
    pub fn timestamp(&mut self, tag: u32, utc_ns: u64) {
        let _ = write!(self.body, "{tag}=");
        let _ = write_utc_timestamp(&mut self.body, utc_ns);
        self.body.push(SOH);
    }

    /// Appends raw `tag=value<SOH>` text (tests and the simulator use it
    /// to build deliberately odd messages).
    pub fn raw(&mut self, text: &[u8]) {
        self.body.extend_from_slice(text);
    }

    /// Frames the body; returns the message bytes.
    pub fn finish(&mut self) -> Result<&[u8], EncodeError> {
        if self.body.len() > self.capacity {
            return Err(EncodeError::TooLong(self.capacity));
        }
        self.out.clear();
        self.out.extend_from_slice(BEGIN_STRING);
        let _ = write!(self.out, "9={}\x01", self.body.len());
        self.out.extend_from_slice(&self.body);
        let sum = checksum(&self.out);
        let _ = write!(self.out, "10={sum:03}\x01");
        Ok(&self.out)
    }
}

/// Standard header values of one outgoing message.
#[derive(Debug, Clone, Copy)]
pub struct Header<'a> {
    /// SenderCompID (49).
    pub sender_comp_id: &'a [u8],
    /// TargetCompID (56).
    pub target_comp_id: &'a [u8],
    /// MsgSeqNum (34).
    pub seq: u64,
    /// SendingTime (52), in ns since the Unix epoch (UTC); sent in ms.
    pub sending_time_utc_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        let ns = 1_764_425_045_123_000_000; // 2025-11-29T14:04:05.123Z
        let mut s = Vec::new();
        write_utc_timestamp(&mut s, ns).unwrap();
        assert_eq!(s, b"20251129-14:04:05.123");
        assert_eq!(parse_utc_timestamp(&s), Some(ns));
        assert_eq!(parse_utc_timestamp(b"19700101-00:00:00"), Some(0));
        assert_eq!(
            parse_utc_timestamp(b"20240229-23:59:59.5"),
            Some(1_709_251_199_500_000_000)
        );
        assert_eq!(parse_utc_timestamp(b"20241301-00:00:00"), None);
        assert_eq!(parse_time_only(b"00:00:01.000000001"), Some(1_000_000_001));
        assert_eq!(parse_time_only(b"24:00:00"), None);
    }

    #[test]
    fn resync_finds_the_next_message_or_keeps_a_partial_prefix() {
        let mut buf = b"8=FIX.4.4\x019=5\x01junk".to_vec();
        let next = buf.len();
        buf.extend_from_slice(b"8=FIX.4.4\x019=");
        assert_eq!(resync(&buf), next);
        assert_eq!(resync(b"xx8=FI"), 2, "a partial prefix is kept");
        assert_eq!(resync(b"xyz"), 3);
        assert_eq!(resync(b"8=FIX.4.4\x01"), 10, "the broken frame itself goes");
        assert_eq!(resync(b""), 0);
    }

    #[test]
    fn encoder_frames_with_length_and_checksum() {
        let mut e = Encoder::new(256);
        let h = Header {
            sender_comp_id: b"PW",
            target_comp_id: b"LP",
            seq: 7,
            sending_time_utc_ns: 0,
        };
        e.begin(b"0", &h);
        let msg = e.finish().unwrap().to_vec();
        assert_eq!(frame_len(&msg), Ok(Some(msg.len())));
        let fields: Vec<_> = Fields::of_frame(&msg).map(|f| f.unwrap().0).collect();
        assert_eq!(fields, vec![35, 49, 56, 34, 52]);
    }
}
