//! The record layer without sockets or a handshake: a test key schedule
//! gives both sides the same keys, a peer seals what a client would send
//! (or what no client should), and every refusal is checked for the fatal
//! alert it seals. The proptest feeds random and mutated record streams,
//! split at random points, into the open path.

use proptest::prelude::*;
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::crypto::cipher::{AeadKey, Iv};
use rustls::ConnectionTrafficSecrets;

use super::buf::Bytes;
use super::record::{Keys, Version, ALERT, APP_DATA, HANDSHAKE, MAX_RECORD};
use super::traffic::{Opened, Schedule, Traffic};

const C2S: u8 = 1;
const S2C: u8 = 2;

/// Key and IV of one direction's generation `gen`.
fn key_iv(dir: u8, gen: u64) -> ([u8; 32], [u8; 12]) {
    let mut k = [0x11u8; 32];
    k[0] = dir;
    k[1..9].copy_from_slice(&gen.to_be_bytes());
    let mut iv = [0x5au8; 12];
    iv[0] = dir;
    iv[11] = gen as u8;
    (k, iv)
}

fn secrets(chacha: bool, dir: u8, gen: u64) -> ConnectionTrafficSecrets {
    let (k, iv) = key_iv(dir, gen);
    let (key, iv) = (AeadKey::from(k), Iv::new(iv));
    if chacha {
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv }
    } else {
        ConnectionTrafficSecrets::Aes256Gcm { key, iv }
    }
}

struct TestSchedule {
    chacha: bool,
    tx_gen: u64,
    rx_gen: u64,
}

impl Schedule for TestSchedule {
    fn next_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        self.tx_gen += 1;
        Ok((0, secrets(self.chacha, S2C, self.tx_gen)))
    }

    fn next_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        self.rx_gen += 1;
        Ok((0, secrets(self.chacha, C2S, self.rx_gen)))
    }
}

/// The client's side of the session.
struct Peer {
    version: Version,
    chacha: bool,
    tx: Keys,
    rx: Keys,
    tx_gen: u64,
    rx_gen: u64,
}

impl Peer {
    fn seal(&mut self, typ: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![0; MAX_RECORD];
        let n = self.tx.seal(typ, body, &mut out).unwrap();
        out.truncate(n);
        out
    }

    fn key_update(&mut self, requested: bool) -> Vec<u8> {
        let r = self.seal(HANDSHAKE, &[24, 0, 0, 1, u8::from(requested)]);
        self.tx_gen += 1;
        let s = secrets(self.chacha, C2S, self.tx_gen);
        self.tx = Keys::new(self.version, 0, s).unwrap();
        r
    }

    /// Every record the server sealed into `out`, following its key updates.
    fn open_all(&mut self, out: &mut Bytes) -> Vec<(u8, Vec<u8>)> {
        let mut got = Vec::new();
        while let Some(len) = self.rx.record_len(out.filled()).unwrap() {
            let (typ, range) = self.rx.open(&mut out.filled_mut()[..len]).unwrap();
            let body = out.filled()[range].to_vec();
            if typ == HANDSHAKE && body.first() == Some(&24) {
                self.rx_gen += 1;
                let s = secrets(self.chacha, S2C, self.rx_gen);
                self.rx = Keys::new(self.version, 0, s).unwrap();
            }
            got.push((typ, body));
            out.consume(len);
        }
        got
    }
}

fn session(version: Version, chacha: bool) -> (Traffic<TestSchedule>, Peer) {
    let keys = |dir| Keys::new(version, 0, secrets(chacha, dir, 0)).unwrap();
    let schedule = TestSchedule {
        chacha,
        tx_gen: 0,
        rx_gen: 0,
    };
    let traffic = Traffic::from_parts(version, keys(S2C), keys(C2S), schedule);
    let peer = Peer {
        version,
        chacha,
        tx: keys(C2S),
        rx: keys(S2C),
        tx_gen: 0,
        rx_gen: 0,
    };
    (traffic, peer)
}

/// What the server made of a stream: its data, how it ended, and the
/// records it sealed for the peer.
#[derive(Debug, Default)]
struct Outcome {
    data: Vec<u8>,
    closed: bool,
    error: Option<std::io::Error>,
}

/// Feeds `stream` in chunks of the given sizes (cycled), opening records
/// as they complete, as the link does.
fn feed(
    t: &mut Traffic<TestSchedule>,
    out: &mut Bytes,
    stream: &[u8],
    chunks: &[usize],
) -> Outcome {
    let mut rx = Bytes::with_len(MAX_RECORD);
    let mut o = Outcome::default();
    let mut at = 0;
    for &chunk in chunks.iter().cycle() {
        let spare = rx.spare_mut();
        assert!(!spare.is_empty(), "a record that cannot complete");
        let n = chunk.max(1).min(spare.len()).min(stream.len() - at);
        spare[..n].copy_from_slice(&stream[at..at + n]);
        rx.commit(n);
        at += n;
        loop {
            match t.open_next(&mut rx, out) {
                Ok(None) => break,
                Ok(Some((Opened::Data(r), len))) => {
                    o.data.extend_from_slice(&rx.filled()[r]);
                    rx.consume(len);
                }
                Ok(Some((Opened::Control, _))) => {}
                Ok(Some((Opened::Closed, _))) => {
                    o.closed = true;
                    return o;
                }
                Err(e) => {
                    o.error = Some(e);
                    return o;
                }
            }
        }
        if at == stream.len() {
            return o;
        }
    }
    o
}

fn run(
    version: Version,
    chacha: bool,
    build: impl Fn(&mut Peer) -> Vec<u8>,
) -> (Outcome, Vec<(u8, Vec<u8>)>) {
    let (mut t, mut peer) = session(version, chacha);
    let stream = build(&mut peer);
    let mut out = Bytes::with_len(32 * 1024);
    let o = feed(&mut t, &mut out, &stream, &[7, 1, 4096]);
    // Nothing but the alert after a refusal: data is not sealed.
    if o.error.is_some() {
        assert_eq!(t.seal_from(b"more", &mut out, 32 * 1024).unwrap(), 0);
    }
    (o, peer.open_all(&mut out))
}

/// A TLS 1.3 record sealed by hand around `inner` (TLSInnerPlaintext as
/// given: content, type, padding) under the client's first key.
fn raw13(chacha: bool, inner: &[u8], header: [u8; 3]) -> Vec<u8> {
    let (k, iv) = key_iv(C2S, 0);
    let alg = if chacha {
        &aead::CHACHA20_POLY1305
    } else {
        &aead::AES_256_GCM
    };
    let key = LessSafeKey::new(UnboundKey::new(alg, &k).unwrap());
    let len = (inner.len() + 16) as u16;
    let mut rec = vec![header[0], header[1], header[2]];
    rec.extend_from_slice(&len.to_be_bytes());
    let mut body = inner.to_vec();
    let h: [u8; 5] = rec[..5].try_into().unwrap();
    key.seal_in_place_append_tag(Nonce::assume_unique_for_key(iv), Aad::from(h), &mut body)
        .unwrap();
    rec.extend_from_slice(&body);
    rec
}

/// A TLS 1.2 ChaCha20-Poly1305 record (RFC 7905) sealed by hand at
/// sequence 0: AAD is seq, type, version, plaintext length.
fn raw12_chacha(typ: u8, plain: &[u8]) -> Vec<u8> {
    let (k, iv) = key_iv(C2S, 0);
    let key = LessSafeKey::new(UnboundKey::new(&aead::CHACHA20_POLY1305, &k).unwrap());
    let mut aad = [0u8; 13];
    aad[8] = typ;
    aad[9..11].copy_from_slice(&[3, 3]);
    aad[11..].copy_from_slice(&(plain.len() as u16).to_be_bytes());
    let mut body = plain.to_vec();
    key.seal_in_place_append_tag(Nonce::assume_unique_for_key(iv), Aad::from(aad), &mut body)
        .unwrap();
    let mut rec = vec![typ, 3, 3];
    rec.extend_from_slice(&(body.len() as u16).to_be_bytes());
    rec.extend_from_slice(&body);
    rec
}

fn fatal(desc: u8) -> Vec<(u8, Vec<u8>)> {
    vec![(ALERT, vec![2, desc])]
}

#[test]
fn refused_records_seal_the_alert_rfc_8446_names() {
    use Version::{Tls12, Tls13};
    type Build = fn(&mut Peer) -> Vec<u8>;
    let cases: Vec<(&str, Version, bool, Build, u8)> = vec![
        (
            "forged tag",
            Tls13,
            false,
            |p| {
                let mut r = p.seal(APP_DATA, b"price");
                r[7] ^= 1;
                r
            },
            20,
        ),
        (
            "TLS 1.2 header version 0x0301",
            Tls12,
            false,
            |p| {
                let mut r = p.seal(APP_DATA, b"price");
                r[2] = 1;
                r
            },
            70,
        ),
        (
            "TLS 1.3 header version 0x0301",
            Tls13,
            true,
            |p| {
                let mut r = p.seal(APP_DATA, b"price");
                r[2] = 1;
                r
            },
            70,
        ),
        (
            "TLS 1.3 outer type handshake",
            Tls13,
            false,
            |p| {
                let mut r = p.seal(APP_DATA, b"price");
                r[0] = HANDSHAKE;
                r
            },
            10,
        ),
        (
            "TLS 1.3 ciphertext over 2^14+256",
            Tls13,
            false,
            |_| {
                let mut inner = vec![7u8; 16 * 1024];
                inner.push(APP_DATA);
                inner.resize(inner.len() + 300, 0);
                raw13(false, &inner, [23, 3, 3])
            },
            22,
        ),
        (
            "TLS 1.3 inner plaintext over 2^14+1",
            Tls13,
            true,
            |_| {
                let mut inner = vec![7u8; 16 * 1024];
                inner.push(APP_DATA);
                inner.resize(inner.len() + 100, 0);
                raw13(true, &inner, [23, 3, 3])
            },
            22,
        ),
        // Refused on the header, before the body arrives.
        (
            "TLS 1.3 header of 2^14+257",
            Tls13,
            false,
            |_| vec![23, 3, 3, 0x41, 0x01],
            22,
        ),
        (
            "TLS 1.2 header of 2^14+2049",
            Tls12,
            true,
            |_| vec![23, 3, 3, 0x48, 0x01],
            22,
        ),
        (
            "TLS 1.2 plaintext over 2^14",
            Tls12,
            true,
            |_| raw12_chacha(APP_DATA, &[7u8; 16 * 1024 + 1]),
            22,
        ),
        (
            "TLS 1.3 inner plaintext of zeros",
            Tls13,
            false,
            |_| raw13(false, &[0; 9], [23, 3, 3]),
            10,
        ),
        (
            "alert of three bytes",
            Tls13,
            false,
            |p| p.seal(ALERT, &[1, 0, 0]),
            50,
        ),
        (
            "alert level 3",
            Tls13,
            false,
            |p| p.seal(ALERT, &[3, 0]),
            47,
        ),
        (
            "KeyUpdate request 2",
            Tls13,
            false,
            |p| p.seal(HANDSHAKE, &[24, 0, 0, 1, 2]),
            47,
        ),
        (
            "KeyUpdate fragment",
            Tls13,
            false,
            |p| p.seal(HANDSHAKE, &[24, 0, 0]),
            50,
        ),
        (
            "two KeyUpdates in a record",
            Tls13,
            false,
            |p| p.seal(HANDSHAKE, &[24, 0, 0, 1, 0, 24, 0, 0, 1, 0]),
            50,
        ),
        (
            "NewSessionTicket from a client",
            Tls13,
            false,
            |p| p.seal(HANDSHAKE, &[4, 0, 0, 0]),
            10,
        ),
        (
            "TLS 1.2 renegotiation",
            Tls12,
            false,
            |p| p.seal(HANDSHAKE, &[1, 0, 0, 0]),
            10,
        ),
        (
            "change_cipher_spec after the handshake",
            Tls12,
            true,
            |p| p.seal(20, &[1]),
            10,
        ),
    ];
    for (name, version, chacha, build, desc) in cases {
        let (o, sent) = run(version, chacha, build);
        let e = o.error.unwrap_or_else(|| panic!("{name}: accepted"));
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{name}: {e}");
        assert_eq!(sent, fatal(desc), "{name}");
    }
}

#[test]
fn key_update_requests_are_answered_once_before_our_next_record() {
    let (mut t, mut peer) = session(Version::Tls13, false);
    let mut stream = Vec::new();
    for _ in 0..5 {
        stream.extend(peer.key_update(true));
    }
    stream.extend(peer.seal(APP_DATA, b"after five"));
    let mut out = Bytes::with_len(32 * 1024);
    let o = feed(&mut t, &mut out, &stream, &[4096]);
    assert_eq!(o.data, b"after five");
    assert!(out.is_empty(), "nothing sealed until we send");
    assert_eq!(t.seal_from(b"price", &mut out, 32 * 1024).unwrap(), 5);
    let sent = peer.open_all(&mut out);
    let update = (HANDSHAKE, vec![24, 0, 0, 1, 0]);
    assert_eq!(sent, vec![update, (APP_DATA, b"price".to_vec())]);
    assert_eq!(t.tx_updates, 1);
}

#[test]
fn a_peer_gets_32_key_updates_between_records_of_data() {
    let (o, sent) = run(Version::Tls13, true, |p| {
        let mut s = Vec::new();
        for round in 0..2 {
            for _ in 0..32 {
                s.extend(p.key_update(false));
            }
            s.extend(p.seal(APP_DATA, &[b'0' + round]));
        }
        s
    });
    assert!(o.error.is_none(), "{:?}", o.error);
    assert_eq!(o.data, b"01");
    assert!(sent.is_empty());
    let (o, sent) = run(Version::Tls13, true, |p| {
        (0..33).flat_map(|_| p.key_update(false)).collect()
    });
    assert!(o.error.is_some());
    assert_eq!(sent, fatal(10));
}

#[test]
fn alerts_close_warn_or_end_as_each_version_says() {
    use Version::{Tls12, Tls13};
    // (version, alerts, data after them arrives, clean close, error)
    let cases: [(Version, &[[u8; 2]], bool, bool); 7] = [
        (Tls13, &[[1, 90], [2, 90]], true, false),
        (Tls13, &[[1, 0]], false, true),
        (Tls13, &[[1, 100]], false, false),
        (Tls12, &[[1, 100], [1, 100], [1, 90], [1, 100]], true, false),
        (Tls12, &[[1, 100]; 5], false, false),
        (Tls12, &[[2, 90]], false, false),
        (Tls12, &[[2, 0]], false, true),
    ];
    for (i, (version, alerts, data, closed)) in cases.into_iter().enumerate() {
        let (o, sent) = run(version, false, |p| {
            let mut s: Vec<u8> = alerts.iter().flat_map(|a| p.seal(ALERT, a)).collect();
            s.extend(p.seal(APP_DATA, b"x"));
            s
        });
        assert_eq!(o.data == b"x", data, "case {i}: {o:?}");
        assert_eq!(o.closed, closed, "case {i}: {o:?}");
        assert_eq!(o.error.is_some(), !data && !closed, "case {i}: {o:?}");
        // A peer's own fatal alert is not answered; too many warnings are.
        let too_many = alerts.len() > 4;
        assert_eq!(sent, if too_many { fatal(10) } else { vec![] }, "case {i}");
    }
}

#[test]
fn tls12_sends_close_notify_when_its_key_is_used_up() {
    let (mut t, mut peer) = session(Version::Tls12, false);
    t.tx.set_limit(2);
    let mut out = Bytes::with_len(32 * 1024);
    assert_eq!(t.seal_from(b"a", &mut out, 32 * 1024).unwrap(), 1);
    assert!(t.seal_from(b"b", &mut out, 32 * 1024).is_err());
    let sent = peer.open_all(&mut out);
    assert_eq!(sent, vec![(APP_DATA, b"a".to_vec()), (ALERT, vec![1, 0])]);
}

#[test]
fn records_match_nonces_built_by_hand() {
    // TLS 1.3: IV XOR the sequence, left-padded; the header is the AAD.
    let (_, mut peer) = session(Version::Tls13, true);
    assert_eq!(
        peer.seal(APP_DATA, b"px"),
        raw13(true, b"px\x17", [23, 3, 3])
    );
    // TLS 1.2 ChaCha20 (RFC 7905): the same nonce, the AAD of RFC 5246.
    let (_, mut peer) = session(Version::Tls12, true);
    assert_eq!(peer.seal(APP_DATA, b"px"), raw12_chacha(APP_DATA, b"px"));
    // TLS 1.2 AES-GCM (RFC 5288): the explicit nonce is IV[4..] XOR seq.
    let (_, mut peer) = session(Version::Tls12, false);
    let (_, iv) = key_iv(C2S, 0);
    for seq in 0..3u64 {
        let r = peer.seal(APP_DATA, b"px");
        let mut want = [0u8; 8];
        for (w, (i, s)) in want.iter_mut().zip(iv[4..].iter().zip(seq.to_be_bytes())) {
            *w = i ^ s;
        }
        assert_eq!(r[5..13], want);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Data(Vec<u8>),
    KeyUpdate(bool),
    Alert([u8; 2]),
    Junk(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..300).prop_map(Op::Data),
        1 => any::<bool>().prop_map(Op::KeyUpdate),
        1 => any::<[u8; 2]>().prop_map(Op::Alert),
        1 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Op::Junk),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn hostile_record_streams_end_in_data_or_an_error(
        tls13 in any::<bool>(),
        chacha in any::<bool>(),
        ops in proptest::collection::vec(op(), 0..12),
        flips in proptest::collection::vec((any::<usize>(), 1u8..), 0..3),
        chunks in proptest::collection::vec(1usize..600, 1..8),
    ) {
        let version = if tls13 { Version::Tls13 } else { Version::Tls12 };
        let (mut t, mut peer) = session(version, chacha);
        let mut stream = Vec::new();
        let mut want = Vec::new();
        let mut clean = flips.is_empty();
        for op in &ops {
            match op {
                Op::Data(d) => {
                    stream.extend(peer.seal(APP_DATA, d));
                    want.extend_from_slice(d);
                }
                Op::KeyUpdate(r) if tls13 => stream.extend(peer.key_update(*r)),
                Op::KeyUpdate(_) => {}
                Op::Alert(a) => {
                    stream.extend(peer.seal(ALERT, a));
                    clean = false;
                }
                Op::Junk(j) => {
                    stream.extend_from_slice(j);
                    clean = false;
                }
            }
        }
        for (at, x) in &flips {
            if !stream.is_empty() {
                let i = at % stream.len();
                stream[i] ^= x;
            }
        }
        let mut out = Bytes::with_len(32 * 1024);
        let o = feed(&mut t, &mut out, &stream, &chunks);
        // Whatever was accepted came from the peer, in order.
        prop_assert!(want.starts_with(&o.data));
        if clean {
            prop_assert!(o.error.is_none(), "{:?}", o.error);
            prop_assert_eq!(o.data, want);
        }
        if let Some(e) = &o.error {
            let kinds = [std::io::ErrorKind::InvalidData, std::io::ErrorKind::ConnectionAborted];
            prop_assert!(kinds.contains(&e.kind()), "{e}");
        }
    }

    #[test]
    fn random_bytes_never_panic(
        tls13 in any::<bool>(),
        stream in proptest::collection::vec(any::<u8>(), 0..20_000),
        chunks in proptest::collection::vec(1usize..5000, 1..4),
    ) {
        let version = if tls13 { Version::Tls13 } else { Version::Tls12 };
        let (mut t, _) = session(version, false);
        let mut out = Bytes::with_len(32 * 1024);
        let o = feed(&mut t, &mut out, &stream, &chunks);
        prop_assert!(o.data.is_empty());
    }
}

#[test]
fn no_key_seals_more_records_than_its_limit() {
    let (mut t, mut peer) = session(Version::Tls13, false);
    let mut out = Bytes::with_len(32 * 1024);
    for k in 0..10u8 {
        t.tx.set_limit(3);
        assert_eq!(t.seal_from(&[b'0' + k], &mut out, 32 * 1024).unwrap(), 1);
    }
    let sent = peer.open_all(&mut out);
    // Records under each key, the KeyUpdate that retires it included.
    let mut per_key = vec![0];
    for (typ, _) in &sent {
        *per_key.last_mut().unwrap() += 1;
        if *typ == HANDSHAKE {
            per_key.push(0);
        }
    }
    assert!(per_key.iter().all(|&n| n <= 3), "{per_key:?}");
    let data: Vec<u8> = sent
        .iter()
        .filter(|(t, _)| *t == APP_DATA)
        .flat_map(|(_, b)| b.clone())
        .collect();
    assert_eq!(data, b"0123456789");
}
