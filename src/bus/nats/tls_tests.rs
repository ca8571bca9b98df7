//! The client session against a rustls server on loopback, every cipher
//! suite of both versions: data both ways, the server's session tickets
//! skipped, a TLS 1.3 KeyUpdate of the server followed (a key not
//! followed fails to open the next record; ours, which it asks for, goes
//! before our next record and the server takes it), its close_notify
//! the end; and a chain from another CA, or for another name, refused in
//! the handshake. The real
//! nats-server (Go's crypto/tls) is the other peer in
//! `tests/it/bus_security.rs` and `tests/bus_alloc.rs`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::crypto::ring::cipher_suite as cs;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, SupportedCipherSuite};

use super::*;

struct Pki {
    dir: tempfile::TempDir,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

/// A CA (its PEM in `dir/ca.pem`) and a leaf for 127.0.0.1 signed by it.
fn pki() -> Pki {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
    Pki {
        dir,
        chain: vec![leaf_cert.der().clone()],
        key: PrivateKeyDer::from_pem_slice(leaf_key.serialize_pem().as_bytes()).unwrap(),
    }
}

fn server_config(p: &Pki, suite: SupportedCipherSuite) -> Arc<ServerConfig> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = vec![suite];
    let versions: &[&rustls::SupportedProtocolVersion] = match suite {
        SupportedCipherSuite::Tls13(_) => &[&rustls::version::TLS13],
        SupportedCipherSuite::Tls12(_) => &[&rustls::version::TLS12],
    };
    let cfg = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(p.chain.clone(), p.key.clone_key())
        .unwrap();
    Arc::new(cfg)
}

/// Reads from `c` over `s` until `want` bytes came.
fn server_read(c: &mut ServerConnection, s: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < want {
        c.complete_io(s).unwrap();
        let mut buf = [0u8; 256];
        match c.reader().read(&mut buf) {
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
    }
    got
}

fn server_write(c: &mut ServerConnection, s: &mut TcpStream, data: &[u8]) {
    c.writer().write_all(data).unwrap();
    while c.wants_write() {
        c.write_tls(s).unwrap();
    }
}

/// The scripted server: echo, a KeyUpdate it requests (TLS 1.3), echo
/// again under the new keys, close_notify.
fn serve(l: TcpListener, cfg: Arc<ServerConfig>, tls13: bool) {
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut c = ServerConnection::new(cfg).unwrap();
    while c.is_handshaking() {
        c.complete_io(&mut s).unwrap();
    }
    assert_eq!(server_read(&mut c, &mut s, 5), b"ping1");
    server_write(&mut c, &mut s, b"pong1");
    if tls13 {
        c.refresh_traffic_keys().unwrap();
    }
    server_write(&mut c, &mut s, b"pong2");
    assert_eq!(server_read(&mut c, &mut s, 5), b"ping3");
    server_write(&mut c, &mut s, b"pong3");
    c.send_close_notify();
    while c.wants_write() {
        c.write_tls(&mut s).unwrap();
    }
}

fn client_read(t: &mut TlsSession, s: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < want {
        let mut buf = [0u8; 64];
        let n = t.read(s, &mut buf).unwrap();
        assert!(n > 0, "closed early");
        got.extend_from_slice(&buf[..n]);
    }
    got
}

fn send(t: &mut TlsSession, s: &mut TcpStream, data: &[u8]) {
    assert_eq!(t.write(s, data).unwrap(), data.len());
    t.flush(s).unwrap();
}

fn tls(p: &Pki) -> BusTls {
    BusTls {
        ca: p.dir.path().join("ca.pem"),
        client: None,
    }
}

#[test]
fn every_suite_carries_data_follows_a_key_update_and_ends_at_close_notify() {
    let p = pki();
    let suites = [
        (cs::TLS13_AES_128_GCM_SHA256, true),
        (cs::TLS13_AES_256_GCM_SHA384, true),
        (cs::TLS13_CHACHA20_POLY1305_SHA256, true),
        (cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, false),
        (cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, false),
        (cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, false),
    ];
    let config = client_config(&tls(&p)).unwrap();
    for (suite, tls13) in suites {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let cfg = server_config(&p, suite);
        let server = std::thread::spawn(move || serve(l, cfg, tls13));
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let name = server_name("127.0.0.1").unwrap();
        let mut t = handshake(&mut s, &config, name).unwrap();
        send(&mut t, &mut s, b"ping1");
        assert_eq!(client_read(&mut t, &mut s, 10), b"pong1pong2", "{suite:?}");
        send(&mut t, &mut s, b"ping3");
        assert_eq!(client_read(&mut t, &mut s, 5), b"pong3", "{suite:?}");
        let mut rest = [0u8; 8];
        assert_eq!(
            t.read(&mut s, &mut rest).unwrap(),
            0,
            "close_notify ends it"
        );
        server.join().unwrap();
    }
}

#[test]
fn a_chain_from_another_ca_or_for_another_name_is_refused_in_the_handshake() {
    let (ours, theirs) = (pki(), pki());
    let config = client_config(&tls(&ours)).unwrap();
    for (server_pki, name) in [(&theirs, "127.0.0.1"), (&ours, "127.0.0.2")] {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let cfg = server_config(server_pki, cs::TLS13_AES_128_GCM_SHA256);
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut c = ServerConnection::new(cfg).unwrap();
            while c.is_handshaking() {
                if c.complete_io(&mut s).is_err() {
                    return;
                }
            }
        });
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let e = handshake(&mut s, &config, server_name(name).unwrap()).unwrap_err();
        assert!(e.to_string().contains("invalid peer certificate"), "{e}");
        drop(s);
        server.join().unwrap();
    }
}
