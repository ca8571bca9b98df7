//! The FIX tag=value codec: framing, checksum, body length, repeating
//! groups, and malformed input that must never panic.

use pricewire::feed::fix::codec::{self, DecodeError, Encoder, Fields, Header};
use proptest::prelude::*;

fn msg(body: &[u8]) -> Vec<u8> {
    let mut e = Encoder::new(4096);
    e.begin(
        b"W",
        &Header {
            sender_comp_id: b"LP",
            target_comp_id: b"PW",
            seq: 12,
            sending_time_utc_ns: 1_764_424_800_000_000_000,
        },
    );
    e.raw(body);
    e.finish().unwrap().to_vec()
}

/// The well-known example frame with a hand-computed checksum.
fn literal(body: &str) -> Vec<u8> {
    let body = body.replace('|', "\x01");
    let head = format!("8=FIX.4.4\x019={}\x01{}", body.len(), body);
    let sum = head.bytes().fold(0u32, |a, b| a + u32::from(b)) % 256;
    format!("{head}10={sum:03}\x01").into_bytes()
}

#[test]
fn a_complete_frame_is_found_and_verified() {
    let m = literal("35=0|49=A|56=B|34=1|52=20251129-14:00:00.000|");
    assert_eq!(codec::frame_len(&m), Ok(Some(m.len())));
    let mut two = m.clone();
    two.extend_from_slice(&m);
    assert_eq!(
        codec::frame_len(&two),
        Ok(Some(m.len())),
        "first frame only"
    );
}

#[test]
fn every_prefix_of_a_frame_asks_for_more() {
    let m = msg(b"55=EUR/USD\x01");
    for cut in 0..m.len() {
        assert_eq!(
            codec::frame_len(&m[..cut]),
            Ok(None),
            "prefix of {cut} bytes"
        );
    }
}

#[test]
fn a_wrong_checksum_is_a_decode_failure() {
    let mut m = msg(b"55=EUR/USD\x01");
    let n = m.len();
    m[n - 4] = if m[n - 4] == b'9' { b'0' } else { m[n - 4] + 1 };
    assert!(matches!(
        codec::frame_len(&m),
        Err(DecodeError::BadChecksum { .. })
    ));
    // A flipped body byte is caught the same way.
    let mut m = msg(b"55=EUR/USD\x01");
    m[30] ^= 0x20;
    assert!(matches!(
        codec::frame_len(&m),
        Err(DecodeError::BadChecksum { .. })
    ));
}

#[test]
fn a_wrong_body_length_is_a_decode_failure() {
    let m = literal("35=0|34=1|");
    let text = String::from_utf8(m).unwrap();
    let short = text.replacen("9=10", "9=9", 1).into_bytes();
    assert_eq!(codec::frame_len(&short), Err(DecodeError::BadTrailer));
    assert_eq!(
        codec::frame_len(b"8=FIX.4.4\x019=x\x01"),
        Err(DecodeError::BadBodyLength)
    );
    assert_eq!(
        codec::frame_len(b"8=FIX.4.4\x019=\x01"),
        Err(DecodeError::BadBodyLength)
    );
    assert_eq!(
        codec::frame_len(b"8=FIX.4.4\x019=99999\x01"),
        Err(DecodeError::BodyTooLong(99_999))
    );
    assert_eq!(
        codec::frame_len(b"8=FIX.4.2\x01"),
        Err(DecodeError::BadBeginString)
    );
    assert_eq!(
        codec::frame_len(b"9=5\x01"),
        Err(DecodeError::BadBeginString)
    );
}

#[test]
fn repeating_groups_come_out_in_order() {
    let m = msg(b"55=EUR/USD\x01268=2\x01269=0\x01270=1.08120\x01271=1000000\x01269=1\x01270=1.08128\x01271=2000000\x01");
    let fields: Vec<(u32, &[u8])> = Fields::of_frame(&m).map(|f| f.unwrap()).collect();
    let group: Vec<(u32, &[u8])> = fields
        .iter()
        .copied()
        .skip_while(|(t, _)| *t != 268)
        .collect();
    assert_eq!(
        group,
        vec![
            (268, &b"2"[..]),
            (269, b"0"),
            (270, b"1.08120"),
            (271, b"1000000"),
            (269, b"1"),
            (270, b"1.08128"),
            (271, b"2000000"),
        ]
    );
    assert_eq!(fields[0], (35, &b"W"[..]));
}

#[test]
fn a_field_without_equals_is_reported_once() {
    let m = msg(b"270\x0155=X\x01");
    let items: Vec<_> = Fields::of_frame(&m).collect();
    assert_eq!(items.last(), Some(&Err(DecodeError::MalformedField)));
    assert_eq!(items.iter().filter(|i| i.is_err()).count(), 1);
}

#[test]
fn sizes_and_numbers_parse_strictly() {
    assert_eq!(codec::parse_size(b"1000000"), Some(1_000_000));
    assert_eq!(codec::parse_size(b"1000000.00"), Some(1_000_000));
    assert_eq!(codec::parse_size(b"1.5"), None);
    assert_eq!(codec::parse_u64(b"-1"), None);
    assert_eq!(codec::parse_u64(b"99999999999999999999"), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = codec::frame_len(&bytes);
        for f in Fields::of_frame(&bytes) {
            let _ = f;
        }
        let _ = codec::parse_utc_timestamp(&bytes);
        let _ = codec::parse_time_only(&bytes);
    }

    #[test]
    fn mutated_frames_never_panic_and_never_verify_wrongly(
        body in proptest::collection::vec(any::<u8>(), 0..120),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let good = msg(&body);
        let mut bad = good.clone();
        let i = at.index(bad.len());
        let changed = bad[i] != byte;
        bad[i] = byte;
        // One changed byte moves the sum by 1..=255 or breaks the framing,
        // so a changed frame never verifies as a whole.
        let verdict = codec::frame_len(&bad);
        prop_assert!(!changed || verdict != Ok(Some(bad.len())), "{verdict:?}");
        for f in Fields::of_frame(&bad) {
            let _ = f;
        }
    }
}
