//! The active core's heartbeat on the bus: proof that the core is alive
//! when the market is quiet.
//!
//! An edge judges the bus alive on prices of the current lease epoch, but
//! a market with no ticks for longer than the edge's max age (a closed
//! market, a holiday) sends none. So the core that holds the lease also
//! publishes a small fixed message on `<prefix>.heartbeat` every
//! `--bus-heartbeat-ms` (500 ms by default, a quarter of the default max
//! age), whatever the prices do; a standby or a fenced leader sends none.
//! The subject is outside `<prefix>.price.>`, so heartbeats are not kept
//! in the last-value stream.
//!
//! The message is 72 bytes, little-endian, allocated nowhere (encoded
//! into a caller's array, decoded from a borrowed slice); version 1 (an
//! earlier core) sent the first 64, read with stream id 0:
//!
//! | offset | field | meaning |
//! |---|---|---|
//! | 0 | magic `PWHB` | not a price frame |
//! | 4 | version (u16) | [`VERSION`]; an edge refuses a newer one |
//! | 6 | flags (u16) | bit 0: sent by the lease holder ([`FLAG_LEADER`]); an edge refuses a heartbeat without it |
//! | 8 | interval (u32) | the sender's heartbeat period, ms |
//! | 12 | fresh symbols (u32) | symbols whose latest price from the sender's engine is not stale (its feed health; version 2) |
//! | 16 | epoch (u64) | the sender's lease epoch, as on its prices |
//! | 24 | core id (u64) | random per core process |
//! | 32 | sequence (u64) | 1, 2, … per core process |
//! | 40 | published (u64) | prices this core has published so far |
//! | 48 | newest price time (u64) | UTC ns of the newest price it published, 0 before any |
//! | 56 | sent time (u64) | UTC ns when the heartbeat was built |
//! | 64 | stream id (u64) | the stream the sender's prices are numbered by (version 2) |

/// Length of a heartbeat message.
pub const HEARTBEAT_LEN: usize = 72;
/// Length of a version-1 heartbeat (no stream id, no health).
pub const HEARTBEAT_LEN_V1: usize = 64;
/// The heartbeat layout's version.
pub const VERSION: u16 = 2;
/// Flags bit: the sender held the leader lease.
pub const FLAG_LEADER: u16 = 1;
const MAGIC: &[u8; 4] = b"PWHB";

/// Default `--bus-heartbeat-ms`: a quarter of the default max age.
pub const HEARTBEAT_MS_DEFAULT: u64 = super::MAX_AGE_MS_DEFAULT / 4;
/// Shortest `--bus-heartbeat-ms`.
pub const HEARTBEAT_MS_MIN: u64 = 10;
/// Longest `--bus-heartbeat-ms` (a quarter of the longest max age).
pub const HEARTBEAT_MS_MAX: u64 = super::MAX_AGE_MS_MAX / 4;

/// One heartbeat's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Heartbeat {
    /// [`FLAG_LEADER`] when sent by the lease holder.
    pub flags: u16,
    /// The sender's heartbeat period, in milliseconds.
    pub interval_ms: u32,
    /// The sender's lease epoch (edges drop an older epoch's heartbeats).
    pub epoch: u64,
    /// The sending core process's random id.
    pub core_id: u64,
    /// 1, 2, … per core process.
    pub seq: u64,
    /// Prices the core has published since it started.
    pub published: u64,
    /// UTC nanoseconds of the newest price it published (0 before any).
    pub newest_price_utc_ns: u64,
    /// UTC nanoseconds when the heartbeat was built.
    pub sent_utc_ns: u64,
    /// Symbols whose latest price from the sender's engine is not stale.
    pub fresh_symbols: u32,
    /// The stream the sender's prices are numbered by (0 from version 1).
    pub stream_id: u64,
}

/// Why a message on the heartbeat subject was refused (counted by edges).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    /// Neither [`HEARTBEAT_LEN`] nor [`HEARTBEAT_LEN_V1`] bytes, or a
    /// length its version does not have.
    #[error("{0} bytes, a heartbeat has {HEARTBEAT_LEN}")]
    Length(usize),
    /// The first four bytes are not `PWHB`.
    #[error("not a heartbeat (magic)")]
    Magic,
    /// A newer layout than this build reads.
    #[error("heartbeat version {0}, this build reads {VERSION}")]
    Version(u16),
}

fn put(out: &mut [u8], at: usize, bytes: &[u8]) {
    out[at..at + bytes.len()].copy_from_slice(bytes);
}

/// Encodes `hb` into `out`; returns [`HEARTBEAT_LEN`].
pub fn encode(out: &mut [u8; HEARTBEAT_LEN], hb: &Heartbeat) -> usize {
    *out = [0; HEARTBEAT_LEN];
    put(out, 0, MAGIC);
    put(out, 4, &VERSION.to_le_bytes());
    put(out, 6, &hb.flags.to_le_bytes());
    put(out, 8, &hb.interval_ms.to_le_bytes());
    put(out, 12, &hb.fresh_symbols.to_le_bytes());
    let words = [
        hb.epoch,
        hb.core_id,
        hb.seq,
        hb.published,
        hb.newest_price_utc_ns,
        hb.sent_utc_ns,
        hb.stream_id,
    ];
    for (i, w) in words.iter().enumerate() {
        put(out, 16 + 8 * i, &w.to_le_bytes());
    }
    HEARTBEAT_LEN
}

/// Decodes a heartbeat; never panics on any input.
pub fn decode(message: &[u8]) -> Result<Heartbeat, HeartbeatError> {
    let len = message.len();
    if len != HEARTBEAT_LEN && len != HEARTBEAT_LEN_V1 {
        return Err(HeartbeatError::Length(len));
    }
    let mut m = [0u8; HEARTBEAT_LEN];
    m[..len].copy_from_slice(message);
    if &m[..4] != MAGIC {
        return Err(HeartbeatError::Magic);
    }
    let u16_at = |at: usize| u16::from_le_bytes([m[at], m[at + 1]]);
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&m[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let version = u16_at(4);
    if version > VERSION {
        return Err(HeartbeatError::Version(version));
    }
    // Version 1 is 64 bytes (its offset 12 reserved, 0), version 2 is 72.
    if (version < 2) != (len == HEARTBEAT_LEN_V1) {
        return Err(HeartbeatError::Length(len));
    }
    Ok(Heartbeat {
        flags: u16_at(6),
        interval_ms: u32::from_le_bytes([m[8], m[9], m[10], m[11]]),
        fresh_symbols: u32::from_le_bytes([m[12], m[13], m[14], m[15]]),
        stream_id: u64_at(64),
        epoch: u64_at(16),
        core_id: u64_at(24),
        seq: u64_at(32),
        published: u64_at(40),
        newest_price_utc_ns: u64_at(48),
        sent_utc_ns: u64_at(56),
    })
}

/// When the next heartbeat is due, over injected monotonic time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pacer {
    every_ns: u64,
    next_ns: u64,
}

impl Pacer {
    /// A pacer of one heartbeat every `every_ms` (the first at once).
    pub(crate) fn new(every_ms: u64) -> Pacer {
        Pacer {
            every_ns: every_ms.max(1).saturating_mul(1_000_000),
            next_ns: 0,
        }
    }

    /// True when a heartbeat is due at `now_ns`; the next is then one
    /// period later (not earlier than one period after `now_ns`, so a
    /// stalled thread does not send a burst to catch up).
    #[inline]
    pub(crate) fn due(&mut self, now_ns: u64) -> bool {
        if now_ns < self.next_ns {
            return false;
        }
        self.next_ns = now_ns.saturating_add(self.every_ns);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn sample() -> Heartbeat {
        Heartbeat {
            flags: FLAG_LEADER,
            interval_ms: 500,
            epoch: 42,
            core_id: 0xdead_beef_0bad_f00d,
            seq: 7,
            published: 123_456,
            newest_price_utc_ns: 1_700_000_000_000_000_000,
            sent_utc_ns: 1_700_000_000_500_000_000,
            fresh_symbols: 25,
            stream_id: 0x5eed,
        }
    }

    #[test]
    fn a_heartbeat_encodes_to_72_bytes_and_back() {
        let mut out = [0xffu8; HEARTBEAT_LEN];
        assert_eq!(encode(&mut out, &sample()), 72);
        assert_eq!(&out[..4], b"PWHB");
        assert_eq!(decode(&out), Ok(sample()));
    }

    #[test]
    fn a_version_1_heartbeat_reads_with_no_stream_and_no_health() {
        let mut out = [0u8; HEARTBEAT_LEN];
        encode(&mut out, &sample());
        let mut v1 = [0u8; HEARTBEAT_LEN_V1];
        v1.copy_from_slice(&out[..64]);
        v1[4] = 1;
        v1[12..16].fill(0);
        let want = Heartbeat {
            fresh_symbols: 0,
            stream_id: 0,
            ..sample()
        };
        assert_eq!(decode(&v1), Ok(want));
        // A version-2 heartbeat cut to 64 bytes is not a version 1.
        assert_eq!(decode(&out[..64]), Err(HeartbeatError::Length(64)));
    }

    #[test]
    fn anything_else_on_the_subject_is_refused_without_panicking() {
        let mut out = [0u8; HEARTBEAT_LEN];
        encode(&mut out, &sample());
        assert_eq!(decode(&out[..63]), Err(HeartbeatError::Length(63)));
        assert_eq!(decode(&[]), Err(HeartbeatError::Length(0)));
        let mut price = [0u8; 92];
        price[..72].copy_from_slice(&out);
        assert_eq!(decode(&price), Err(HeartbeatError::Length(92)));
        let mut bad = out;
        bad[0] = b'X';
        assert_eq!(decode(&bad), Err(HeartbeatError::Magic));
        let mut newer = out;
        newer[4] = 3;
        assert_eq!(decode(&newer), Err(HeartbeatError::Version(3)));
        for len in 0..=HEARTBEAT_LEN {
            let _ = decode(&out[..len]);
        }
    }

    #[test]
    fn the_pacer_beats_at_once_then_every_period_without_bursts() {
        let mut p = Pacer::new(100);
        assert!(p.due(5 * MS), "the first heartbeat goes at once");
        assert!(!p.due(104 * MS));
        assert!(p.due(105 * MS));
        // A thread stalled for a second sends one heartbeat, not ten.
        assert!(p.due(1_200 * MS));
        assert!(!p.due(1_250 * MS));
        assert!(p.due(1_300 * MS));
    }
}
