//! The on-disk capture format: segment header and record framing.
//!
//! The byte layout is specified in `docs/capture-format.md`; this file is
//! its executable form. Encoding writes into a caller-owned fixed array
//! (no allocation); decoding borrows the mapped bytes.

use crate::model::{InstrumentTable, Tick, NO_PRICE};

/// First eight bytes of every segment (PNG style: a high byte catches 7-bit
/// transfers, CR LF catches newline translation).
pub const MAGIC: [u8; 8] = *b"\x89PWCAP\r\n";
/// Format version written by this build; readers accept exactly this one.
pub const VERSION: u16 = 1;
/// Fixed part of the header before the variable tables.
pub const HEADER_FIXED_LEN: usize = 64;
/// Largest header a reader accepts (4096 instruments at 18 bytes fit well).
pub const HEADER_LEN_MAX: usize = 1 << 20;
/// Longest source string stored in a header.
pub const SOURCE_LEN_MAX: usize = 1024;
/// Frame overhead: one length byte in front, a CRC-32 behind.
pub const FRAME_OVERHEAD: usize = 5;
/// Largest record body: every optional field present at its widest varint.
pub const BODY_LEN_MAX: usize = 1 + 2 + 2 + 10 * 7 + 5;
/// Largest whole record on disk.
pub const RECORD_LEN_MAX: usize = BODY_LEN_MAX + FRAME_OVERHEAD;

/// Bits of the record flag byte (first body byte).
pub mod record_flags {
    /// The bid is absent (`NO_PRICE`); no bid field follows.
    pub const BID_ABSENT: u8 = 1 << 0;
    /// The ask is absent (`NO_PRICE`); no ask field follows.
    pub const ASK_ABSENT: u8 = 1 << 1;
    /// `ask_size == bid_size`; no ask-size field follows.
    pub const ASK_SIZE_SAME: u8 = 1 << 2;
    /// `Tick::flags != 0`; a varint flags field closes the body.
    pub const HAS_TICK_FLAGS: u8 = 1 << 3;
    /// Bits a version-1 reader accepts; any other bit is corruption.
    pub const KNOWN: u8 = 0b1111;
}

/// Per-segment bases that make every record self-contained: times and
/// sequence numbers are stored as offsets from these, never from the
/// previous record, so one damaged record cannot shift the ones after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegmentBase {
    /// Provider time of the segment's first record (UTC ns).
    pub provider_ns: u64,
    /// `receive_time_ns - provider_time_ns` of the first record (wrapping):
    /// the two clocks move together, so the receive time is stored as the
    /// small drift from this skew.
    pub skew_ns: u64,
    /// Feed sequence number of the first record.
    pub feed_seq: u64,
}

impl SegmentBase {
    /// The bases for a segment whose first record is `t`.
    pub fn from_first(t: &Tick) -> Self {
        SegmentBase {
            provider_ns: t.provider_time_ns,
            skew_ns: t.receive_time_ns.wrapping_sub(t.provider_time_ns),
            feed_seq: t.feed_seq,
        }
    }
}

/// A decoded segment header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureHeader {
    /// Format version the segment was written with; this build reads only
    /// its own ([`HeaderError::Version`] otherwise).
    pub version: u16,
    /// 1-based segment number, the same as in the file name.
    pub segment_index: u32,
    /// Wall clock (UTC ns) when the segment was opened.
    pub created_wall_ns: u64,
    /// Bases every record of the segment is stored relative to.
    pub base: SegmentBase,
    /// Who wrote it: `recorder`, `import histdata EURUSD.csv`, ...
    pub source: String,
    /// Instruments by id: (name, digits).
    pub instruments: Vec<(String, u8)>,
    /// Provider names by id.
    pub providers: Vec<String>,
    /// Header length in bytes; records start at this offset.
    pub len: usize,
}

impl CaptureHeader {
    /// A header describing `table`, before the first record sets the base.
    pub fn for_table(table: &InstrumentTable, source: &str) -> Self {
        let mut source = source.to_string();
        truncate_utf8(&mut source, SOURCE_LEN_MAX);
        CaptureHeader {
            version: VERSION,
            segment_index: 0,
            created_wall_ns: 0,
            base: SegmentBase::default(),
            source,
            instruments: table
                .instruments()
                .iter()
                .map(|i| (i.name.clone(), i.digits))
                .collect(),
            providers: table.providers().iter().map(|p| p.name.clone()).collect(),
            len: 0,
        }
    }

    /// Digits of a symbol id, if the header knows it.
    pub fn digits(&self, symbol: u16) -> Option<u8> {
        self.instruments.get(symbol as usize).map(|i| i.1)
    }

    /// Name of a symbol id, or `"?"`.
    pub fn symbol_name(&self, symbol: u16) -> &str {
        self.instruments
            .get(symbol as usize)
            .map_or("?", |i| i.0.as_str())
    }

    /// Name of a provider id, or `"?"`.
    pub fn provider_name(&self, provider: u16) -> &str {
        self.providers
            .get(provider as usize)
            .map_or("?", |p| p.as_str())
    }

    /// Checks that every instrument of this header has the same id, name
    /// and digits in `table`, so ticks can be fed to an engine built on it.
    pub fn check_table(&self, table: &InstrumentTable) -> Result<(), TableMismatch> {
        for (id, (name, digits)) in self.instruments.iter().enumerate() {
            match table.get(id as u16) {
                Some(i) if i.name == *name && i.digits == *digits => {}
                Some(i) => {
                    return Err(TableMismatch::Differs {
                        id: id as u16,
                        capture: (name.clone(), *digits),
                        table: (i.name.clone(), i.digits),
                    })
                }
                None => {
                    return Err(TableMismatch::Missing {
                        id: id as u16,
                        name: name.clone(),
                    })
                }
            }
        }
        Ok(())
    }

    /// Serialises the header (with its CRC) into a new buffer.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_FIXED_LEN + 64 + 18 * self.instruments.len());
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes()); // header_len, patched below
        b.extend_from_slice(&self.segment_index.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&self.created_wall_ns.to_le_bytes());
        b.extend_from_slice(&self.base.provider_ns.to_le_bytes());
        b.extend_from_slice(&self.base.skew_ns.to_le_bytes());
        b.extend_from_slice(&self.base.feed_seq.to_le_bytes());
        b.extend_from_slice(&(self.source.len() as u16).to_le_bytes());
        b.extend_from_slice(&(self.instruments.len() as u16).to_le_bytes());
        b.extend_from_slice(&(self.providers.len() as u16).to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        debug_assert_eq!(b.len(), HEADER_FIXED_LEN);
        b.extend_from_slice(self.source.as_bytes());
        for (name, digits) in &self.instruments {
            b.push(*digits);
            push_name(&mut b, name);
        }
        for name in &self.providers {
            push_name(&mut b, name);
        }
        let len = (b.len() + 4) as u32;
        b[12..16].copy_from_slice(&len.to_le_bytes());
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses a header from the start of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<CaptureHeader, HeaderError> {
        if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
            return Err(if bytes.len() < MAGIC.len() && MAGIC.starts_with(bytes) {
                HeaderError::Truncated
            } else {
                HeaderError::NotACapture
            });
        }
        if bytes.len() < HEADER_FIXED_LEN {
            return Err(HeaderError::Truncated);
        }
        let version = u16_at(bytes, 8);
        if version != VERSION {
            return Err(HeaderError::Version(version));
        }
        let len = u32_at(bytes, 12) as usize;
        if !(HEADER_FIXED_LEN + 4..=HEADER_LEN_MAX).contains(&len) {
            return Err(HeaderError::Malformed("header length out of range"));
        }
        if bytes.len() < len {
            return Err(HeaderError::Truncated);
        }
        let stored = u32_at(bytes, len - 4);
        if crc32fast::hash(&bytes[..len - 4]) != stored {
            return Err(HeaderError::Crc);
        }
        decode_tables(&bytes[..len - 4], version, len)
    }
}

fn decode_tables(b: &[u8], version: u16, len: usize) -> Result<CaptureHeader, HeaderError> {
    let source_len = u16_at(b, 56) as usize;
    let n_instruments = u16_at(b, 58) as usize;
    let n_providers = u16_at(b, 60) as usize;
    let mut pos = HEADER_FIXED_LEN;
    let source = take(b, &mut pos, source_len)?;
    let source = String::from_utf8_lossy(source).into_owned();
    let mut instruments = Vec::with_capacity(n_instruments);
    for _ in 0..n_instruments {
        let digits = *take(b, &mut pos, 1)?.first().unwrap_or(&0);
        instruments.push((take_name(b, &mut pos)?, digits));
    }
    let mut providers = Vec::with_capacity(n_providers);
    for _ in 0..n_providers {
        providers.push(take_name(b, &mut pos)?);
    }
    if pos != b.len() {
        return Err(HeaderError::Malformed("trailing bytes in header tables"));
    }
    Ok(CaptureHeader {
        version,
        segment_index: u32_at(b, 16),
        created_wall_ns: u64_at(b, 24),
        base: SegmentBase {
            provider_ns: u64_at(b, 32),
            skew_ns: u64_at(b, 40),
            feed_seq: u64_at(b, 48),
        },
        source,
        instruments,
        providers,
        len,
    })
}

/// The first instrument of a segment header that differs from the table
/// a reader was given ([`CaptureHeader::check_table`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableMismatch {
    /// The id names another instrument, or the same with other digits.
    #[error(
        "symbol id {id} is {} ({} digits) in the capture but {} ({} digits) in the \
         instrument table",
        capture.0, capture.1, table.0, table.1
    )]
    Differs {
        /// The symbol id.
        id: u16,
        /// (name, digits) in the capture.
        capture: (String, u8),
        /// (name, digits) in the table.
        table: (String, u8),
    },
    /// The table has no instrument at the id.
    #[error("symbol {name} (id {id}) is not in the table")]
    Missing {
        /// The symbol id.
        id: u16,
        /// The capture's name for it.
        name: String,
    },
}

/// Why a segment header could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The file does not start with the capture magic.
    #[error("not a pricewire capture (bad magic)")]
    NotACapture,
    /// The file ends inside the header.
    #[error("header cut short")]
    Truncated,
    /// The header's version is not the one this build reads.
    #[error("unsupported capture version {0} (this build reads {VERSION})")]
    Version(u16),
    /// The header's CRC does not match its bytes.
    #[error("header CRC mismatch")]
    Crc,
    /// A length or table in the header is inconsistent; the text says which.
    #[error("malformed header: {0}")]
    Malformed(&'static str),
}

fn push_name(b: &mut Vec<u8>, name: &str) {
    let n = name.len().min(255);
    b.push(n as u8);
    b.extend_from_slice(&name.as_bytes()[..n]);
}

fn take<'a>(b: &'a [u8], pos: &mut usize, n: usize) -> Result<&'a [u8], HeaderError> {
    let end = pos
        .checked_add(n)
        .filter(|&e| e <= b.len())
        .ok_or(HeaderError::Malformed("header tables overrun the header"))?;
    let s = &b[*pos..end];
    *pos = end;
    Ok(s)
}

fn take_name(b: &[u8], pos: &mut usize) -> Result<String, HeaderError> {
    let n = *take(b, pos, 1)?.first().unwrap_or(&0) as usize;
    Ok(String::from_utf8_lossy(take(b, pos, n)?).into_owned())
}

fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[inline]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}
#[inline]
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[inline]
fn put_varint(buf: &mut [u8; RECORD_LEN_MAX], pos: &mut usize, mut v: u64) {
    while v >= 0x80 {
        buf[*pos] = (v as u8) | 0x80;
        *pos += 1;
        v >>= 7;
    }
    buf[*pos] = v as u8;
    *pos += 1;
}

#[inline]
fn get_varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            // The tenth byte may carry only the top bit of a u64.
            return (shift < 63 || byte <= 1).then_some(v);
        }
    }
    None
}

/// Encodes one tick as a framed record into `buf`; returns its length.
/// Never fails: every `Tick` has an encoding of at most [`RECORD_LEN_MAX`].
#[inline]
pub fn encode_record(t: &Tick, base: &SegmentBase, buf: &mut [u8; RECORD_LEN_MAX]) -> usize {
    let mut flags = 0u8;
    if t.bid == NO_PRICE {
        flags |= record_flags::BID_ABSENT;
    }
    if t.ask == NO_PRICE {
        flags |= record_flags::ASK_ABSENT;
    }
    if t.ask_size == t.bid_size {
        flags |= record_flags::ASK_SIZE_SAME;
    }
    if t.flags != 0 {
        flags |= record_flags::HAS_TICK_FLAGS;
    }
    buf[1] = flags;
    buf[2..4].copy_from_slice(&t.symbol.to_le_bytes());
    buf[4..6].copy_from_slice(&t.provider.to_le_bytes());
    let mut pos = 6;
    let provider_off = t.provider_time_ns.wrapping_sub(base.provider_ns) as i64;
    put_varint(buf, &mut pos, zigzag(provider_off));
    let skew = t.receive_time_ns.wrapping_sub(t.provider_time_ns);
    put_varint(
        buf,
        &mut pos,
        zigzag(skew.wrapping_sub(base.skew_ns) as i64),
    );
    if t.bid != NO_PRICE {
        put_varint(buf, &mut pos, zigzag(t.bid));
    }
    if t.ask != NO_PRICE {
        let ask = if t.bid != NO_PRICE {
            t.ask.wrapping_sub(t.bid)
        } else {
            t.ask
        };
        put_varint(buf, &mut pos, zigzag(ask));
    }
    put_varint(buf, &mut pos, t.bid_size);
    if t.ask_size != t.bid_size {
        put_varint(buf, &mut pos, t.ask_size);
    }
    put_varint(
        buf,
        &mut pos,
        zigzag(t.feed_seq.wrapping_sub(base.feed_seq) as i64),
    );
    if t.flags != 0 {
        put_varint(buf, &mut pos, u64::from(t.flags));
    }
    let body_len = pos - 1;
    debug_assert!((1..=BODY_LEN_MAX).contains(&body_len));
    buf[0] = body_len as u8;
    let crc = crc32fast::hash(&buf[..pos]);
    buf[pos..pos + 4].copy_from_slice(&crc.to_le_bytes());
    pos + 4
}

/// Why the bytes at an offset are not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Fewer bytes remain than the frame needs (a torn tail).
    #[error("record cut short")]
    Short,
    /// The length byte is outside `1..=BODY_LEN_MAX`.
    #[error("record length {0} out of range 1..={BODY_LEN_MAX}")]
    Length(u8),
    /// The record's CRC does not match its bytes.
    #[error("record CRC mismatch")]
    Crc,
    /// The CRC matched but the body does not decode (unknown flag bits, too
    /// short, or a varint that runs past the end).
    #[error("record body malformed")]
    Body,
}

/// Decodes the record at the start of `b`; returns the tick and the number
/// of bytes consumed. Checks length, CRC and body before returning a tick.
#[inline]
pub fn decode_record(b: &[u8], base: &SegmentBase) -> Result<(Tick, usize), RecordError> {
    let body_len = *b.first().ok_or(RecordError::Short)?;
    if body_len == 0 || body_len as usize > BODY_LEN_MAX {
        return Err(RecordError::Length(body_len));
    }
    let end = 1 + body_len as usize;
    if b.len() < end + 4 {
        return Err(RecordError::Short);
    }
    let stored = u32::from_le_bytes(b[end..end + 4].try_into().expect("4 bytes"));
    if crc32fast::hash(&b[..end]) != stored {
        return Err(RecordError::Crc);
    }
    let tick = decode_body(&b[1..end], base).ok_or(RecordError::Body)?;
    Ok((tick, end + 4))
}

#[inline]
fn decode_body(b: &[u8], base: &SegmentBase) -> Option<Tick> {
    let flags = *b.first()?;
    if flags & !record_flags::KNOWN != 0 || b.len() < 5 {
        return None;
    }
    let symbol = u16::from_le_bytes([b[1], b[2]]);
    let provider = u16::from_le_bytes([b[3], b[4]]);
    let mut pos = 5;
    let provider_off = unzigzag(get_varint(b, &mut pos)?);
    let provider_time_ns = base.provider_ns.wrapping_add(provider_off as u64);
    let skew_off = unzigzag(get_varint(b, &mut pos)?) as u64;
    let receive_time_ns = provider_time_ns.wrapping_add(base.skew_ns.wrapping_add(skew_off));
    let bid = if flags & record_flags::BID_ABSENT == 0 {
        unzigzag(get_varint(b, &mut pos)?)
    } else {
        NO_PRICE
    };
    let ask = if flags & record_flags::ASK_ABSENT != 0 {
        NO_PRICE
    } else if bid != NO_PRICE {
        bid.wrapping_add(unzigzag(get_varint(b, &mut pos)?))
    } else {
        unzigzag(get_varint(b, &mut pos)?)
    };
    let bid_size = get_varint(b, &mut pos)?;
    let ask_size = if flags & record_flags::ASK_SIZE_SAME != 0 {
        bid_size
    } else {
        get_varint(b, &mut pos)?
    };
    let seq_off = unzigzag(get_varint(b, &mut pos)?) as u64;
    let tick_flags = if flags & record_flags::HAS_TICK_FLAGS != 0 {
        u32::try_from(get_varint(b, &mut pos)?).ok()?
    } else {
        0
    };
    // Both sides of the flag/field pairing must agree, or it is corruption.
    let consistent = pos == b.len()
        && (bid != NO_PRICE) == (flags & record_flags::BID_ABSENT == 0)
        && (ask != NO_PRICE) == (flags & record_flags::ASK_ABSENT == 0)
        && (tick_flags != 0) == (flags & record_flags::HAS_TICK_FLAGS != 0)
        && (ask_size == bid_size) == (flags & record_flags::ASK_SIZE_SAME != 0);
    consistent.then_some(Tick {
        bid,
        ask,
        bid_size,
        ask_size,
        provider_time_ns,
        receive_time_ns,
        feed_seq: base.feed_seq.wrapping_add(seq_off),
        symbol,
        provider,
        flags: tick_flags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick() -> Tick {
        Tick {
            bid: 108_123,
            ask: 108_131,
            bid_size: 1_000_000,
            ask_size: 2_000_000,
            provider_time_ns: 1_705_323_600_123_000_000,
            receive_time_ns: 5_000_123_456,
            feed_seq: 42,
            symbol: 3,
            provider: 1,
            flags: 1,
        }
    }

    #[test]
    fn record_round_trips_including_extremes() {
        let base = SegmentBase::from_first(&tick());
        let mut odd = tick();
        odd.bid = NO_PRICE;
        odd.ask = i64::MAX;
        odd.bid_size = u64::MAX;
        odd.ask_size = 0;
        odd.provider_time_ns = 0;
        odd.receive_time_ns = u64::MAX;
        odd.feed_seq = u64::MAX;
        odd.flags = u32::MAX;
        let mut neg = tick();
        neg.bid = i64::MIN + 1;
        neg.ask = i64::MAX;
        for t in [tick(), odd, neg, Tick::EMPTY] {
            let mut buf = [0u8; RECORD_LEN_MAX];
            let n = encode_record(&t, &base, &mut buf);
            assert!(n <= RECORD_LEN_MAX);
            assert_eq!(decode_record(&buf[..n], &base), Ok((t, n)));
            assert_eq!(decode_record(&buf[..n - 1], &base), Err(RecordError::Short));
        }
    }

    #[test]
    fn a_normal_tick_fits_in_48_bytes() {
        // The documented bound: prices < 2^34 points, spread < 2^20, sizes
        // < 2^35, provider time within 2^48 ns of the base, clock drift
        // within 2^27 ns, sequence within 2^34, flags < 128.
        let first = tick();
        let base = SegmentBase::from_first(&first);
        let mut t = first;
        t.bid = (1 << 34) - 1;
        t.ask = t.bid + (1 << 20) - 1;
        t.bid_size = (1 << 35) - 1;
        t.ask_size = (1 << 35) - 2;
        t.provider_time_ns += (1 << 48) - 1;
        t.receive_time_ns = t.receive_time_ns + (1 << 48) - 1 + (1 << 27) - 1;
        t.feed_seq += (1 << 34) - 1;
        t.flags = 127;
        let mut buf = [0u8; RECORD_LEN_MAX];
        assert!(encode_record(&t, &base, &mut buf) <= 48);
    }

    #[test]
    fn header_round_trips_and_detects_damage() {
        let table = InstrumentTable::default_with_providers(2);
        let mut h = CaptureHeader::for_table(&table, "test source");
        h.segment_index = 7;
        h.created_wall_ns = 99;
        h.base = SegmentBase::from_first(&tick());
        let bytes = h.encode();
        h.len = bytes.len();
        assert_eq!(CaptureHeader::decode(&bytes), Ok(h));
        assert_eq!(
            CaptureHeader::decode(&bytes[..bytes.len() - 1]),
            Err(HeaderError::Truncated)
        );
        let mut bad = bytes.clone();
        bad[70] ^= 0x10;
        assert_eq!(CaptureHeader::decode(&bad), Err(HeaderError::Crc));
        assert_eq!(
            CaptureHeader::decode(b"hello world, not a capture at all........................"),
            Err(HeaderError::NotACapture)
        );
    }

    #[test]
    fn varint_rejects_overlong() {
        let b = [0xffu8; 11];
        assert_eq!(get_varint(&b, &mut 0), None);
        let mut max = [0xffu8; 10];
        max[9] = 1;
        assert_eq!(get_varint(&max, &mut 0), Some(u64::MAX));
    }
}
