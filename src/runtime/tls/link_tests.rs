//! The record layer against a rustls client, one cipher suite at a time,
//! over loopback TCP: data both ways, records larger than the send
//! buffer, key updates asked by the client and forced on our side, both
//! close_notify directions, and a forged record refused.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::crypto::ring::cipher_suite as cs;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, SupportedCipherSuite};

use super::record::{Keys, Version, APP_DATA};
use super::{Link, TlsAcceptor, TlsFiles};

struct Pki {
    _dir: tempfile::TempDir,
    files: TlsFiles,
    ca: String,
}

fn pki() -> Pki {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = p.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = TlsFiles {
        cert: dir.path().join("chain.pem"),
        key: dir.path().join("key.pem"),
        client_ca: None,
    };
    std::fs::write(&files.cert, leaf.pem() + &ca.pem()).unwrap();
    std::fs::write(&files.key, leaf_key.serialize_pem()).unwrap();
    Pki {
        _dir: dir,
        files,
        ca: ca.pem(),
    }
}

struct Pair {
    client: ClientConnection,
    sock: TcpStream,
    server: Link,
    /// Plaintext each side received.
    at_server: Vec<u8>,
    at_client: Vec<u8>,
    client_eof: bool,
    server_eof: bool,
}

fn connect(pki: &Pki, suite: SupportedCipherSuite) -> Pair {
    let acceptor = TlsAcceptor::new("subscriber", pki.files.clone(), 5_000).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let sock = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    sock.set_nonblocking(true).unwrap();
    let (accepted, _) = listener.accept().unwrap();
    accepted.set_nonblocking(true).unwrap();
    let server = acceptor
        .link(mio::net::TcpStream::from_std(accepted), 0)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki.ca.as_bytes()).unwrap())
        .unwrap();
    let provider = rustls::crypto::CryptoProvider {
        cipher_suites: vec![suite],
        ..rustls::crypto::ring::default_provider()
    };
    let versions = [suite.version()];
    let mut cfg = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Tests that write records by hand take the client's keys.
    cfg.enable_secret_extraction = true;
    let name = ServerName::try_from("localhost").unwrap();
    let client = ClientConnection::new(Arc::new(cfg), name).unwrap();
    Pair {
        client,
        sock,
        server,
        at_server: Vec::new(),
        at_client: Vec::new(),
        client_eof: false,
        server_eof: false,
    }
}

fn would_block<T>(r: io::Result<T>) -> io::Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

impl Pair {
    /// One round of moving bytes both ways; server errors are returned.
    fn step(&mut self) -> io::Result<()> {
        while self.client.wants_write() {
            if would_block(self.client.write_tls(&mut self.sock))?.is_none() {
                break;
            }
        }
        if let Some(n) = would_block(self.client.read_tls(&mut self.sock))? {
            self.client
                .process_new_packets()
                .map_err(io::Error::other)?;
            self.client_eof |= n == 0;
        }
        let mut buf = [0u8; 4096];
        loop {
            match would_block(self.client.reader().read(&mut buf))? {
                Some(0) => {
                    self.client_eof = true;
                    break;
                }
                Some(n) => self.at_client.extend_from_slice(&buf[..n]),
                None => break,
            }
        }
        self.server.flush_pending()?;
        while !self.server_eof {
            match would_block(self.server.read(&mut buf))? {
                Some(0) => self.server_eof = true,
                Some(n) => self.at_server.extend_from_slice(&buf[..n]),
                None => break,
            }
        }
        Ok(())
    }

    /// Steps until `done` holds (panics after 10 s).
    fn until(&mut self, what: &str, done: impl Fn(&Pair) -> bool) {
        let end = Instant::now() + Duration::from_secs(10);
        while !done(self) {
            assert!(Instant::now() < end, "timed out waiting for {what}");
            self.step().unwrap();
        }
    }

    /// Writes all of `data` through the server link, stepping while it
    /// pushes back.
    fn server_write_all(&mut self, data: &[u8]) -> io::Result<()> {
        let end = Instant::now() + Duration::from_secs(10);
        let mut at = 0;
        while at < data.len() {
            assert!(Instant::now() < end, "server write stalled");
            match would_block(self.server.write(&data[at..]))? {
                Some(n) => at += n,
                None => self.step()?,
            }
        }
        Ok(())
    }
}

const SUITES: [SupportedCipherSuite; 6] = [
    cs::TLS13_AES_128_GCM_SHA256,
    cs::TLS13_AES_256_GCM_SHA384,
    cs::TLS13_CHACHA20_POLY1305_SHA256,
    cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
];

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn every_suite_carries_data_both_ways_and_closes_cleanly() {
    let pki = pki();
    for suite in SUITES {
        let mut p = connect(&pki, suite);
        p.client.writer().write_all(b"hello").unwrap();
        p.until("hello at the server", |p| p.at_server == b"hello");
        assert!(!p.server.has_pending());
        // Several full records and more than the send buffer.
        let big = pattern(100_000, 7);
        p.server_write_all(&big).unwrap();
        p.until("100 kB at the client", |p| p.at_client.len() >= big.len());
        assert_eq!(p.at_client, big, "{suite:?}");
        let up = pattern(40_000, 9);
        p.client.writer().write_all(&up).unwrap();
        p.until("40 kB at the server", |p| p.at_server.len() >= 5 + up.len());
        assert_eq!(&p.at_server[5..], &up[..], "{suite:?}");
        p.server.shutdown_write();
        p.until("close_notify at the client", |p| p.client_eof);
        p.client.send_close_notify();
        p.until("close_notify at the server", |p| p.server_eof);
    }
}

fn tx_seq(link: &mut Link) -> u64 {
    let Link::Tls(t) = link else { unreachable!() };
    t.traffic_mut().unwrap().tx.seq()
}

#[test]
fn key_updates_either_way_keep_the_session_going_on_tls13() {
    let pki = pki();
    for suite in &SUITES[..3] {
        let mut p = connect(&pki, *suite);
        p.client.writer().write_all(b"a").unwrap();
        p.until("a", |p| p.at_server == b"a");
        // The client rekeys and asks us to: both directions change keys.
        p.client.refresh_traffic_keys().unwrap();
        p.client.writer().write_all(b"b").unwrap();
        p.until("b", |p| p.at_server == b"ab");
        p.server_write_all(b"c").unwrap();
        p.until("c", |p| p.at_client == b"c");
        // We answered with a key update: "c" was the first record of the
        // new key.
        assert_eq!(tx_seq(&mut p.server), 1, "{suite:?}");
        // Our sending key reaches its limit every 3 records.
        for k in 0..10u8 {
            let Link::Tls(t) = &mut p.server else {
                unreachable!()
            };
            t.traffic_mut().unwrap().tx.set_limit(3);
            p.server_write_all(&[b'0' + k]).unwrap();
        }
        p.until("ten records over key updates", |p| p.at_client.len() == 11);
        assert_eq!(&p.at_client[1..], b"0123456789");
        assert!(tx_seq(&mut p.server) <= 3, "{suite:?}");
    }
}

#[test]
fn tls12_ends_the_session_when_its_key_is_used_up() {
    let pki = pki();
    let mut p = connect(&pki, cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256);
    p.client.writer().write_all(b"a").unwrap();
    p.until("a", |p| p.at_server == b"a");
    let Link::Tls(t) = &mut p.server else {
        unreachable!()
    };
    // Its Finished took sequence 0: "x" is 1, close_notify 2.
    t.traffic_mut().unwrap().tx.set_limit(3);
    p.server_write_all(b"x").unwrap();
    let e = p.server_write_all(b"y").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    // As rustls does, the session ends with close_notify, pushed by the
    // failing write itself (the gateway closes the socket after it).
    let end = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        assert!(Instant::now() < end, "no close_notify at the client");
        if let Some(n) = would_block(p.client.read_tls(&mut p.sock)).unwrap() {
            assert!(n > 0, "closed without close_notify");
            p.client.process_new_packets().unwrap();
        }
        match would_block(p.client.reader().read(&mut buf)).unwrap() {
            Some(0) => break,
            Some(n) => got.extend_from_slice(&buf[..n]),
            None => {}
        }
    }
    assert_eq!(got, b"x");
}

/// The client's sending key, taken from rustls once its session is idle:
/// the test seals records by hand with it.
fn client_keys(client: ClientConnection) -> Keys {
    let secrets = client.dangerous_extract_secrets().unwrap();
    let (seq, tx) = secrets.tx;
    Keys::new(Version::Tls13, seq, tx).unwrap()
}

#[test]
fn a_flood_of_empty_records_hands_the_loop_back() {
    let pki = pki();
    let mut p = connect(&pki, cs::TLS13_AES_128_GCM_SHA256);
    p.client.writer().write_all(b"a").unwrap();
    p.until("a", |p| p.at_server == b"a");
    let (mut keys, mut sock, mut server) = (client_keys(p.client), p.sock, p.server);
    // 100 empty data records (allowed in TLS 1.3) ahead of "b": one read
    // opens at most 64 of them before handing the loop back.
    let mut rec = [0u8; 64];
    for _ in 0..100 {
        let n = keys.seal(APP_DATA, b"", &mut rec).unwrap();
        sock.write_all(&rec[..n]).unwrap();
    }
    let n = keys.seal(APP_DATA, b"b", &mut rec).unwrap();
    sock.write_all(&rec[..n]).unwrap();
    let mut buf = [0u8; 16];
    let end = Instant::now() + Duration::from_secs(10);
    let mut interrupted = 0;
    let mut got = Vec::new();
    while got != b"b" {
        assert!(Instant::now() < end, "b never arrived");
        match server.read(&mut buf) {
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => interrupted += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(interrupted >= 1, "100 empty records in one read");
}

#[test]
fn a_forged_record_is_refused() {
    let pki = pki();
    let mut p = connect(&pki, cs::TLS13_AES_128_GCM_SHA256);
    p.client.writer().write_all(b"a").unwrap();
    p.until("a", |p| p.at_server == b"a");
    let mut forged = vec![23u8, 3, 3, 0, 40];
    forged.extend_from_slice(&[0x55; 40]);
    p.sock.write_all(&forged).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let e = loop {
        assert!(Instant::now() < end, "forged record not refused");
        if let Err(e) = p.step() {
            break e;
        }
    };
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    // The client is told why: bad_record_mac (RFC 8446 §5.2).
    let end = Instant::now() + Duration::from_secs(10);
    let alert = loop {
        assert!(Instant::now() < end, "no alert at the client");
        if let Some(0) = would_block(p.client.read_tls(&mut p.sock)).unwrap() {
            panic!("closed without an alert");
        }
        if let Err(e) = p.client.process_new_packets() {
            break e;
        }
    };
    let want = rustls::Error::AlertReceived(rustls::AlertDescription::BadRecordMac);
    assert_eq!(alert, want);
}

#[test]
fn data_sent_with_the_clients_finished_arrives_once() {
    let pki = pki();
    for suite in &SUITES[..3] {
        let mut p = connect(&pki, *suite);
        // Written before the handshake: rustls sends it right after its
        // Finished, in the same write.
        p.client.writer().write_all(b"early").unwrap();
        p.client.write_tls(&mut p.sock).unwrap();
        let mut buf = [0u8; 64];
        let end = Instant::now() + Duration::from_secs(10);
        while p.client.is_handshaking() {
            assert!(Instant::now() < end, "no server flight");
            let e = p.server.read(&mut buf).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
            if let Some(n) = would_block(p.client.read_tls(&mut p.sock)).unwrap() {
                assert!(n > 0, "server closed");
                p.client.process_new_packets().unwrap();
            }
        }
        while p.client.wants_write() {
            p.client.write_tls(&mut p.sock).unwrap();
        }
        // Finished and the data are in the socket: the read that completes
        // the handshake returns the data, once.
        let n = p.server.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"early", "{suite:?}");
        let e = p.server.read(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{suite:?}: {e}");
    }
}
