//! Simple Open Framing Header (SOFH): finding whole frames in a byte stream.
//!
//! Every frame starts with a 6-byte SOFH: the message length as a big-endian
//! `u32` that *includes* the header itself, then the encoding type as a
//! big-endian `u16` (0xEB50, SBE 1.0 little-endian). [`split`] inspects only
//! the front of a receive buffer, allocates nothing and returns at once; a
//! bad length or encoding type is reported as soon as the bytes that show it
//! have arrived, so a gateway never buffers a hostile frame.

use super::codes::RejectReason;

/// Size of the SOFH.
pub const SOFH_LEN: usize = 6;
/// Size of the SBE message header (blockLength, templateId, schemaId, version).
pub const SBE_HEADER_LEN: usize = 8;
/// SOFH plus SBE header: where the root block starts.
pub const HEADER_LEN: usize = SOFH_LEN + SBE_HEADER_LEN;
/// SOFH encoding type for SBE 1.0 little-endian.
pub const ENCODING_TYPE_SBE_LE: u16 = 0xEB50;
/// Smallest valid frame: headers and an empty root block.
pub const FRAME_LEN_MIN: usize = HEADER_LEN;
/// Largest frame a server accepts from a subscriber or provider (64 KiB,
/// SOFH included). Enforced by [`split`].
pub const FRAME_LEN_MAX: usize = 64 * 1024;
/// Largest frame a server sends (1 MiB, SOFH included); responses such as
/// SymbolDirectory and SnapshotResponse may exceed [`FRAME_LEN_MAX`]. A
/// client reads with `split_with_max(buf, SERVER_FRAME_LEN_MAX)`.
pub const SERVER_FRAME_LEN_MAX: usize = 1024 * 1024;

/// A frame that cannot be accepted, detected from its SOFH alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The SOFH length is below [`FRAME_LEN_MIN`].
    #[error("frame length {len} below the minimum {FRAME_LEN_MIN}")]
    TooSmall {
        /// Frame length in bytes, as the SOFH states it.
        len: u32,
    },
    /// The SOFH length is above the limit the reader set.
    #[error("frame length {len} above the maximum {max}")]
    TooLarge {
        /// Frame length in bytes, as the SOFH states it.
        len: u32,
        /// The reader's limit in bytes ([`FRAME_LEN_MAX`] on a server).
        max: u32,
    },
    /// The SOFH encoding type is not [`ENCODING_TYPE_SBE_LE`].
    #[error("encoding type {0:#06x} is not SBE little-endian (0xeb50)")]
    BadEncodingType(u16),
}

impl FrameError {
    /// The reason code to put in the Reject sent to the peer.
    pub fn reason(&self) -> RejectReason {
        match self {
            FrameError::TooSmall { .. } => RejectReason::FRAME_TOO_SMALL,
            FrameError::TooLarge { .. } => RejectReason::FRAME_TOO_LARGE,
            FrameError::BadEncodingType(_) => RejectReason::BAD_ENCODING_TYPE,
        }
    }
}

/// Looks for one whole frame at the front of `buf`, at most
/// [`FRAME_LEN_MAX`] long.
///
/// `Ok(None)`: more bytes are needed. `Ok(Some(n))`: `buf[..n]` is one
/// whole frame, ready for [`decode()`](super::decode()). `Err`: the stream is
/// unusable (the framing is lost); reject and close.
#[inline]
pub fn split(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    split_with_max(buf, FRAME_LEN_MAX)
}

/// [`split`] with a caller-chosen maximum frame length (for clients reading
/// server frames: [`SERVER_FRAME_LEN_MAX`]).
#[inline]
pub fn split_with_max(buf: &[u8], frame_len_max: usize) -> Result<Option<usize>, FrameError> {
    let Some(len_bytes) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(*len_bytes);
    check_len(len, frame_len_max)?;
    let Some(enc) = buf.get(4..).and_then(|s| s.first_chunk::<2>()) else {
        return Ok(None);
    };
    let encoding_type = u16::from_be_bytes(*enc);
    if encoding_type != ENCODING_TYPE_SBE_LE {
        return Err(FrameError::BadEncodingType(encoding_type));
    }
    let len = len as usize;
    Ok((buf.len() >= len).then_some(len))
}

fn check_len(len: u32, frame_len_max: usize) -> Result<(), FrameError> {
    if (len as usize) < FRAME_LEN_MIN {
        return Err(FrameError::TooSmall { len });
    }
    if len as usize > frame_len_max {
        let max = u32::try_from(frame_len_max).unwrap_or(u32::MAX);
        return Err(FrameError::TooLarge { len, max });
    }
    Ok(())
}

/// The SOFH for a frame of `frame_len` bytes.
#[inline(always)]
pub const fn sofh(frame_len: u32) -> [u8; SOFH_LEN] {
    let l = frame_len.to_be_bytes();
    let e = ENCODING_TYPE_SBE_LE.to_be_bytes();
    [l[0], l[1], l[2], l[3], e[0], e[1]]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_of(len: u32) -> Vec<u8> {
        let mut v = sofh(len).to_vec();
        v.resize(len.max(6) as usize, 0);
        v
    }

    #[test]
    fn needs_more_bytes_until_whole_frame() {
        let f = frame_of(20);
        for cut in 0..20 {
            assert_eq!(split(&f[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(split(&f), Ok(Some(20)));
    }

    #[test]
    fn whole_frame_at_front_of_longer_buffer() {
        let mut f = frame_of(14);
        f.extend_from_slice(&frame_of(30));
        assert_eq!(split(&f), Ok(Some(14)));
        assert_eq!(split(&f[14..]), Ok(Some(30)));
    }

    #[test]
    fn short_length_is_rejected_from_four_bytes() {
        let f = frame_of(13);
        assert_eq!(split(&f[..4]), Err(FrameError::TooSmall { len: 13 }));
        assert_eq!(split(&[0, 0, 0, 0]), Err(FrameError::TooSmall { len: 0 }));
        assert_eq!(
            FrameError::TooSmall { len: 0 }.reason(),
            RejectReason::FRAME_TOO_SMALL
        );
    }

    #[test]
    fn oversize_length_is_rejected_before_the_body_arrives() {
        let len = FRAME_LEN_MAX as u32 + 1;
        let head = sofh(len);
        let err = split(&head[..4]).unwrap_err();
        assert_eq!(
            err,
            FrameError::TooLarge {
                len,
                max: FRAME_LEN_MAX as u32
            }
        );
        assert_eq!(err.reason(), RejectReason::FRAME_TOO_LARGE);
        assert_eq!(
            split(&sofh(u32::MAX)).unwrap_err().reason(),
            RejectReason::FRAME_TOO_LARGE
        );
        // The client-side bound is larger.
        assert_eq!(split_with_max(&head, SERVER_FRAME_LEN_MAX), Ok(None));
    }

    #[test]
    fn exactly_the_maximum_is_accepted() {
        let f = frame_of(FRAME_LEN_MAX as u32);
        assert_eq!(split(&f), Ok(Some(FRAME_LEN_MAX)));
    }

    #[test]
    fn bad_encoding_type_is_rejected_at_six_bytes() {
        let mut f = frame_of(20);
        f[4] = 0x5B;
        f[5] = 0xE0; // big-endian SBE, not what the schema says
        assert_eq!(split(&f[..5]), Ok(None));
        let err = split(&f[..6]).unwrap_err();
        assert_eq!(err, FrameError::BadEncodingType(0x5BE0));
        assert_eq!(err.reason(), RejectReason::BAD_ENCODING_TYPE);
    }
}
