//! NKeys against another implementation: the vectors below were made with
//! the NATS project's Python `nkeys` 0.2.1 (`encode_seed(bytes(range(1,
//! 33)), PREFIX_BYTE_USER)`, its `public_key`, and `sign(b"nonce-Xy12")`
//! base64url without padding); the real nats-server checks the rest
//! (`tests/it/bus_security.rs` logs on with an NKey).

use super::*;
use proptest::prelude::*;

const RAW: [u8; 32] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
    27, 28, 29, 30, 31, 32,
];
const SEED: &str = "SUAACAQDAQCQMBYIBEFAWDANBYHRAEISCMKBKFQXDAMRUGY4DUPB6IC5CQ";
const PUBLIC: &str = "UB43KVROR7TFJ6KAPCYRF2FJROTZAH4FHLTJLPWX4DRZCC5NASLGJBFE";
const SIG: &str =
    "cZ2xJINevHLrneM7E3QqOHem8Wztw8AuMjUrabXaOMf6_hVhRy26-EtFtGFZfpyZI6UzZXkhGRvlyMTxzQS5Aw";
const ACCOUNT_SEED: &str = "SAAACAQDAQCQMBYIBEFAWDANBYHRAEISCMKBKFQXDAMRUGY4DUPB6IFO3A";

#[test]
fn a_user_seed_gives_the_reference_public_key_and_signature() {
    assert_eq!(crc16(b"123456789"), 0x31C3, "CRC-16/XMODEM check value");
    let seed = Seed::parse(SEED).unwrap();
    assert_eq!(seed, Seed::from_bytes(RAW));
    assert_eq!(seed.encode(), SEED);
    assert_eq!(seed.public_key(), PUBLIC);
    assert_eq!(seed.sign(b"nonce-Xy12"), SIG);
    assert_eq!(Seed::parse(&format!("  {SEED}\n")).unwrap(), seed);
    assert_eq!(format!("{seed:?}"), "Seed(<redacted>)");
}

#[test]
fn what_is_not_a_user_seed_is_refused_by_reason() {
    assert_eq!(Seed::parse(ACCOUNT_SEED), Err(SeedError::NotAUser));
    assert_eq!(Seed::parse(PUBLIC), Err(SeedError::Encoding));
    assert_eq!(Seed::parse(""), Err(SeedError::Encoding));
    assert_eq!(Seed::parse(&SEED.to_lowercase()), Err(SeedError::Encoding));
    // One character changed: the checksum catches it.
    let typo = SEED.replacen('M', "N", 1);
    assert_eq!(Seed::parse(&typo), Err(SeedError::Checksum));
    // A public key padded to a seed's length is no seed.
    let mut raw = vec![PREFIX_USER, 0];
    raw.extend_from_slice(&RAW);
    raw.extend_from_slice(&crc16(&raw).to_le_bytes());
    assert_eq!(Seed::parse(&base32(&raw)), Err(SeedError::NotASeed));
}

#[test]
fn base64url_has_no_padding_and_the_url_alphabet() {
    assert_eq!(base64url(b""), "");
    assert_eq!(base64url(b"f"), "Zg");
    assert_eq!(base64url(b"fo"), "Zm8");
    assert_eq!(base64url(b"foo"), "Zm9v");
    assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
}

proptest! {
    #[test]
    fn every_seed_round_trips_and_every_one_character_change_is_caught(
        raw in proptest::array::uniform32(any::<u8>()),
        at in 0usize..SEED_TEXT,
        with in 0usize..32,
    ) {
        let seed = Seed::from_bytes(raw);
        let text = seed.encode();
        prop_assert!(text.starts_with("SU") && text.len() == SEED_TEXT);
        prop_assert_eq!(Seed::parse(&text).unwrap(), seed);
        let mut bytes = text.into_bytes();
        let c = ALPHABET[with];
        prop_assume!(bytes[at] != c);
        bytes[at] = c;
        let changed = String::from_utf8(bytes).unwrap();
        prop_assert!(Seed::parse(&changed).is_err());
    }
}
