use std::net::SocketAddr;

use proptest::prelude::*;

use super::header::{encode, MAX_BLOCK_LEN, MAX_HEADER_LEN, SIGNATURE};
use super::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn header(p: Parse) -> Header {
    match p {
        Parse::Header(h) => h,
        other => panic!("expected a header, got {other:?}"),
    }
}

/// The decision made when the bytes arrive in pieces cut at `cuts`: the
/// first answer that is not `Incomplete`, reading no further than each
/// `Incomplete` asks (as the listener does).
fn split_parse(bytes: &[u8], cuts: &[usize]) -> Parse {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.push(bytes.len());
    cuts.sort_unstable();
    let mut have = 0;
    let mut last = parse(&[]);
    for cut in cuts {
        while have < cut {
            let Parse::Incomplete { need } = last else {
                return last;
            };
            assert!(
                need > have && need <= MAX_HEADER_LEN,
                "need {need} at {have}"
            );
            have = need.min(cut);
            last = parse(&bytes[..have]);
        }
    }
    last
}

#[test]
fn ipv4_proxy_header_names_the_client() {
    let bytes = encode(Some((sa("127.0.0.9:5000"), sa("10.0.0.1:9400"))), &[]).unwrap();
    assert_eq!(bytes.len(), 28);
    let h = header(parse(&bytes));
    assert_eq!(h.command, Command::Proxy);
    assert_eq!(h.len, 28);
    assert_eq!(h.src, Some(sa("127.0.0.9:5000")));
    assert_eq!(h.dst, Some(sa("10.0.0.1:9400")));
    assert_eq!(h.client(sa("127.0.0.1:1")), sa("127.0.0.9:5000"));
}

#[test]
fn ipv6_proxy_header_names_the_client() {
    let bytes = encode(Some((sa("[2001:db8::7]:41000"), sa("[fd00::1]:9400"))), &[]).unwrap();
    assert_eq!(bytes.len(), 52);
    let h = header(parse(&bytes));
    assert_eq!(h.src, Some(sa("[2001:db8::7]:41000")));
    assert_eq!(h.dst, Some(sa("[fd00::1]:9400")));
}

#[test]
fn local_keeps_the_balancers_own_address() {
    let bytes = encode(None, &[]).unwrap();
    let h = header(parse(&bytes));
    assert_eq!((h.command, h.len, h.src), (Command::Local, 16, None));
    assert_eq!(h.client(sa("10.9.0.2:33000")), sa("10.9.0.2:33000"));
    // LOCAL with an address block (haproxy's health checks may send one):
    // the block is skipped, the real endpoints stand.
    let mut b = encode(Some((sa("1.2.3.4:1"), sa("5.6.7.8:2"))), &[]).unwrap();
    b[12] = 0x20;
    let h = header(parse(&b));
    assert_eq!((h.command, h.len, h.src), (Command::Local, 28, None));
}

#[test]
fn tlvs_are_skipped_and_following_bytes_are_not_the_headers() {
    // PP2_TYPE_UNIQUE_ID (0x05) and PP2_TYPE_NOOP (0x04) TLVs.
    let tlv = [0x05, 0x00, 0x03, b'a', b'b', b'c', 0x04, 0x00, 0x00];
    let mut bytes = encode(Some((sa("192.0.2.5:7"), sa("192.0.2.6:8"))), &tlv).unwrap();
    let len = bytes.len();
    assert_eq!(len, 16 + 12 + tlv.len());
    bytes.extend_from_slice(b"\x16\x03\x01 a TLS ClientHello follows");
    let h = header(parse(&bytes));
    assert_eq!(h.len, len);
    assert_eq!(h.src, Some(sa("192.0.2.5:7")));
}

#[test]
fn unspec_and_unix_families_keep_the_real_address() {
    let mut b = SIGNATURE.to_vec();
    b.extend_from_slice(&[0x21, 0x00, 0, 0]);
    assert_eq!(header(parse(&b)).src, None, "PROXY over UNSPEC");
    let mut b = SIGNATURE.to_vec();
    b.extend_from_slice(&[0x21, 0x31, 0, 216]);
    b.extend_from_slice(&[0u8; 216]);
    assert_eq!(header(parse(&b)).src, None, "PROXY over UNIX stream");
}

#[test]
fn truncated_headers_ask_for_exactly_what_they_miss() {
    let bytes = encode(Some((sa("127.0.0.9:5000"), sa("127.0.0.1:9400"))), &[]).unwrap();
    for n in 0..FIXED_LEN_FOR_TEST {
        assert_eq!(parse(&bytes[..n]), Parse::Incomplete { need: 16 }, "{n}");
    }
    for n in 16..bytes.len() {
        assert_eq!(parse(&bytes[..n]), Parse::Incomplete { need: 28 }, "{n}");
    }
}

const FIXED_LEN_FOR_TEST: usize = header::FIXED_LEN;

#[test]
fn a_bad_signature_is_refused_at_its_first_wrong_byte() {
    // A client speaking the price protocol straight to the listener: its
    // first frame starts with a SOFH length, not the signature.
    assert_eq!(parse(&[0x00]), Parse::Error(ProxyFailure::BadSignature));
    assert_eq!(
        parse(b"\r\n\r\n\0\r\nQUIX\n"),
        Parse::Error(ProxyFailure::BadSignature)
    );
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\n"),
        Parse::Error(ProxyFailure::BadSignature)
    );
    assert_eq!(
        parse(b"\x16\x03\x01"),
        Parse::Error(ProxyFailure::BadSignature)
    );
}

#[test]
fn v1_text_headers_are_refused_with_their_own_reason() {
    assert_eq!(parse(b"PRO"), Parse::Incomplete { need: 6 });
    assert_eq!(
        parse(b"PROXY TCP4 127.0.0.9 127.0.0.1 5000 9400\r\n"),
        Parse::Error(ProxyFailure::V1Unsupported)
    );
    assert_eq!(parse(b"PROXI"), Parse::Error(ProxyFailure::BadSignature));
}

#[test]
fn wrong_version_or_command_is_refused_before_the_rest_arrives() {
    let mut b = SIGNATURE.to_vec();
    b.push(0x11);
    assert_eq!(parse(&b), Parse::Error(ProxyFailure::BadVersion));
    b[12] = 0x31;
    assert_eq!(parse(&b), Parse::Error(ProxyFailure::BadVersion));
    b[12] = 0x22;
    assert_eq!(parse(&b), Parse::Error(ProxyFailure::BadCommand));
    b[12] = 0x2f;
    assert_eq!(parse(&b), Parse::Error(ProxyFailure::BadCommand));
}

#[test]
fn oversized_length_is_refused_without_waiting_for_it() {
    let mut b = SIGNATURE.to_vec();
    b.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
    assert_eq!(parse(&b), Parse::Error(ProxyFailure::TooLong));
    let over = (MAX_BLOCK_LEN + 1) as u16;
    b[14..16].copy_from_slice(&over.to_be_bytes());
    assert_eq!(parse(&b), Parse::Error(ProxyFailure::TooLong));
    let max = MAX_BLOCK_LEN as u16;
    b[14..16].copy_from_slice(&max.to_be_bytes());
    assert_eq!(
        parse(&b),
        Parse::Incomplete {
            need: MAX_HEADER_LEN
        }
    );
}

#[test]
fn address_blocks_shorter_than_their_family_and_odd_transports_are_refused() {
    for (ft, len) in [
        (0x11u8, 11u8),
        (0x21, 35),
        (0x31, 215),
        (0x12, 12),
        (0x41, 12),
        (0x10, 12),
    ] {
        let mut b = SIGNATURE.to_vec();
        b.extend_from_slice(&[0x21, ft, 0, len]);
        b.extend_from_slice(&vec![0u8; usize::from(len)]);
        assert_eq!(
            parse(&b),
            Parse::Error(ProxyFailure::BadAddress),
            "{ft:#x}/{len}"
        );
    }
}

#[test]
fn encode_refuses_mixed_families() {
    assert!(encode(Some((sa("1.2.3.4:1"), sa("[::1]:2"))), &[]).is_none());
    assert!(encode(None, &vec![0u8; MAX_BLOCK_LEN + 1]).is_none());
}

#[test]
fn every_reason_has_its_own_slot_and_label() {
    let s = ProxyStats::default();
    for (k, why) in ProxyFailure::ALL.iter().enumerate() {
        assert_eq!(why.index(), k);
        for _ in 0..=k {
            s.count_failure(*why);
        }
        assert!(!why.describe().is_empty());
    }
    for (k, why) in ProxyFailure::ALL.iter().enumerate() {
        assert_eq!(s.failures(*why), k as u64 + 1, "{}", why.label());
    }
    let labels: std::collections::BTreeSet<_> =
        ProxyFailure::ALL.iter().map(|r| r.label()).collect();
    assert_eq!(labels.len(), ProxyFailure::ALL.len());
    s.count_header(Command::Local);
    assert_eq!(
        (s.headers(Command::Local), s.headers(Command::Proxy)),
        (1, 0)
    );
}

/// Valid headers of every kind, optionally with TLVs and trailing bytes.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    let v4 = (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<u16>(),
        any::<u16>(),
    )
        .prop_map(|(s, d, sp, dp)| (SocketAddr::from((s, sp)), SocketAddr::from((d, dp))));
    let v6 = (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u16>(),
        any::<u16>(),
    )
        .prop_map(|(s, d, sp, dp)| (SocketAddr::from((s, sp)), SocketAddr::from((d, dp))));
    (
        prop_oneof![Just(None), v4.prop_map(Some), v6.prop_map(Some)],
        proptest::collection::vec(any::<u8>(), 0..64),
        proptest::collection::vec(any::<u8>(), 0..32),
    )
        .prop_map(|(addrs, tlv, tail)| {
            let mut b = encode(addrs, &tlv).expect("same family, short block");
            b.extend_from_slice(&tail);
            b
        })
}

/// Bytes near a header: a valid one with one byte changed, or noise.
fn near_header() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (header_bytes(), any::<usize>(), any::<u8>()).prop_map(|(mut b, at, v)| {
            let i = at % b.len();
            b[i] = v;
            b
        }),
        proptest::collection::vec(any::<u8>(), 0..300),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(|t| {
            let mut b = SIGNATURE.to_vec();
            b.extend_from_slice(&t);
            b
        }),
    ]
}

proptest! {
    #[test]
    fn valid_headers_parse_the_same_however_they_are_split(
        bytes in header_bytes(),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let whole = parse(&bytes);
        prop_assert!(matches!(whole, Parse::Header(_)), "{:?}", whole);
        prop_assert_eq!(split_parse(&bytes, &cuts), whole);
    }

    #[test]
    fn random_bytes_never_panic_and_splitting_changes_nothing(
        bytes in near_header(),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let whole = parse(&bytes);
        let split = split_parse(&bytes, &cuts);
        prop_assert_eq!(split, whole);
        if let Parse::Header(h) = whole {
            prop_assert!(h.len <= bytes.len() && h.len <= MAX_HEADER_LEN);
        }
        if let Parse::Incomplete { need } = whole {
            prop_assert!(need > bytes.len() && need <= MAX_HEADER_LEN);
        }
    }
}
