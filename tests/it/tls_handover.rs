//! The TLS hand-over and the handshake's refusals on the real binary
//! (docs/tls.md, "The hand-over"): the 21-byte record family and its
//! alert, ChangeCipherSpec and application-data variants on both TLS
//! listeners, under shared and dedicated threading, refused with
//! unexpected_message and a clean close while a subscriber logged on
//! throughout keeps its prices and /livez stays 200; Finished, KeyUpdate
//! (update_requested) and Logon in one write decrypting on the client; a
//! NewSessionTicket in both orders and a resumption; a TLS 1.3 failure
//! after the ServerHello reaching the client as an alert; our
//! close_notify answering the client's; a loose --tls-key warned about.

use crate::util::net;
use crate::util::pki;
use crate::util::tls_serve;

use std::io::Write;
use std::process::{Command, Stdio};

use pricewire::wire::{self, Message, SymbolRef, TIER_ACCOUNT_DEFAULT};
use rustls::version::{TLS12, TLS13};
use tls_serve::{raw_conversation, Answer, Manual, TlsServe, Watch};

/// The first 14 bytes of a ClientHello as one record.
const HELLO_PIECE: [u8; 14] = [
    0x16, 0x03, 0x01, 0x00, 0x09, 0x01, 0x00, 0x00, 0xc8, 0x03, 0x03, 0xaa, 0xbb, 0xcc,
];
/// What follows it: each ends the handshake before the message is whole.
const TAILS: [(&str, &[u8]); 3] = [
    ("alert", &[0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x28]),
    ("ccs", &[0x14, 0x03, 0x01, 0x00, 0x01, 0x01]),
    ("appdata", &[0x17, 0x03, 0x03, 0x00, 0x05, 1, 2, 3, 4, 5]),
];
const UNEXPECTED_MESSAGE: u8 = 10;

fn twenty_one_bytes_on_both_listeners(threading: &str) {
    let mut server = TlsServe::start(threading, &[]);
    let watch = Watch::start(server.sdk());
    for (listener, addr) in [("subscriber", server.addr), ("feed", server.feed)] {
        for (name, tail) in TAILS {
            // Three times each: the second used to take the acceptor too.
            for round in 0..3 {
                let joined = [HELLO_PIECE.as_slice(), tail].concat();
                let one = raw_conversation(addr, &[joined], false);
                let split = [HELLO_PIECE.to_vec(), tail.to_vec()];
                let two = raw_conversation(addr, &split, false);
                let what = format!("{threading} {listener} {name} #{round}");
                assert_eq!(one, Answer::Alert(UNEXPECTED_MESSAGE), "{what}, one write");
                assert_eq!(two, Answer::Alert(UNEXPECTED_MESSAGE), "{what}, two writes");
                server.assert_healthy(&watch, &what);
            }
        }
        let refused = [
            &format!("listener=\"{listener}\"")[..],
            "reason=\"bad_message\"",
        ];
        assert!(server.metric("pricewire_tls_handshake_failures_total", &refused) >= 18.0);
    }
}

#[test]
fn the_21_byte_family_closes_only_its_connection_under_shared_threading() {
    twenty_one_bytes_on_both_listeners("shared");
}

#[test]
fn the_21_byte_family_closes_only_its_connection_under_dedicated_threading() {
    twenty_one_bytes_on_both_listeners("dedicated");
}

fn logon_frame() -> Vec<u8> {
    let mut b = [0u8; 128];
    let logon = wire::Logon {
        heartbeat_interval_ms: 0,
        account: b"demo",
        token: b"demo",
    };
    let n = wire::encode_logon(&mut b, &logon).unwrap();
    b[..n].to_vec()
}

fn subscribe_frame() -> Vec<u8> {
    let mut b = [0u8; 256];
    let names = ["EURUSD", "GBPUSD"].map(|s| SymbolRef::by_name(s).unwrap());
    let n = wire::encode_subscribe(&mut b, 1, TIER_ACCOUNT_DEFAULT, names).unwrap();
    b[..n].to_vec()
}

/// Reads frames until a LogonAccepted, then subscribes and decrypts 20
/// more frames.
fn logged_on_and_pricing(m: &mut Manual) {
    let first = m.next_frame();
    assert!(
        matches!(wire::decode(&first), Ok(Message::LogonAccepted(_))),
        "the Logon was answered"
    );
    m.conn.writer().write_all(&subscribe_frame()).unwrap();
    m.write_all_tls();
    let prices = (0..20)
        .map(|_| m.next_frame())
        .filter(|f| {
            matches!(
                wire::decode(f),
                Ok(Message::PriceUpdate(_) | Message::PriceSnapshot(_))
            )
        })
        .count();
    assert!(prices > 0, "prices decrypt after the key update");
}

/// The client's Finished, then (in the same write) a KeyUpdate asking for
/// ours when `update`, and the Logon when `logon_too`.
fn finished_with(
    server: &TlsServe,
    cfg: &std::sync::Arc<rustls::ClientConfig>,
    update: bool,
    logon_too: bool,
) -> Manual {
    let mut m = Manual::connect(server.addr, cfg.clone());
    m.handshake_holding_finished();
    if update {
        m.conn.refresh_traffic_keys().unwrap();
    }
    if logon_too {
        m.conn.writer().write_all(&logon_frame()).unwrap();
    }
    m.write_all_tls();
    if !logon_too {
        m.conn.writer().write_all(&logon_frame()).unwrap();
        m.write_all_tls();
    }
    m
}

#[test]
fn finished_keyupdate_and_logon_in_one_write_keep_the_session() {
    let mut server = TlsServe::start("shared", &[]);
    let watch = Watch::start(server.sdk());
    for update in [true, false] {
        for logon_too in [true, false] {
            // A fresh ticket store each time: the first handshake is full.
            let cfg = tls_serve::client_config(&server.ca, &[&TLS13]);
            let mut m = finished_with(&server, &cfg, update, logon_too);
            logged_on_and_pricing(&mut m);
            let what = format!("update {update}, logon with Finished {logon_too}");
            assert_eq!(
                m.conn.handshake_kind(),
                Some(rustls::HandshakeKind::Full),
                "{what}"
            );
            // The ticket came (in either order): the next session resumes.
            let mut again = Manual::connect(server.addr, cfg.clone());
            again.handshake_holding_finished();
            again.conn.writer().write_all(&logon_frame()).unwrap();
            again.write_all_tls();
            logged_on_and_pricing(&mut again);
            assert_eq!(
                again.conn.handshake_kind(),
                Some(rustls::HandshakeKind::Resumed),
                "{what}: resumed with the ticket"
            );
            server.assert_healthy(&watch, &what);
        }
    }
}

#[test]
fn tls12_resumes_by_session_id() {
    let mut server = TlsServe::start("shared", &[]);
    let watch = Watch::start(server.sdk());
    let cfg = tls_serve::client_config(&server.ca, &[&TLS12]);
    for kind in [rustls::HandshakeKind::Full, rustls::HandshakeKind::Resumed] {
        let mut m = Manual::connect(server.addr, cfg.clone());
        m.handshake_holding_finished();
        m.conn.writer().write_all(&logon_frame()).unwrap();
        m.write_all_tls();
        logged_on_and_pricing(&mut m);
        assert_eq!(m.conn.handshake_kind(), Some(kind));
    }
    server.assert_healthy(&watch, "TLS 1.2 resumption");
}

#[test]
fn close_notify_is_answered_with_ours() {
    let mut server = TlsServe::start("shared", &[]);
    let cfg = tls_serve::client_config(&server.ca, &[&TLS13, &TLS12]);
    let mut m = Manual::connect(server.addr, cfg);
    m.handshake_holding_finished();
    m.conn.writer().write_all(&logon_frame()).unwrap();
    m.write_all_tls();
    logged_on_and_pricing(&mut m);
    m.conn.send_close_notify();
    m.write_all_tls();
    while m.read_some().expect("records until the close") {}
    assert!(
        m.peer_closed,
        "the server's close_notify came before its FIN"
    );
    assert!(server.alive());
}

#[test]
fn a_tls13_refusal_after_the_server_hello_reaches_the_client_as_an_alert() {
    let dir = tempfile::tempdir().unwrap();
    let bridges = pki::Ca::new("bridges");
    let bridges_pem = pki::write_ca(dir.path(), "bridges.pem", &bridges);
    let server = TlsServe::start(
        "shared",
        &["--feed-tls-client-ca", bridges_pem.to_str().unwrap()],
    );
    // No client certificate: the client's side of the handshake finishes,
    // then the server refuses; its alert (sealed under its handshake keys)
    // must arrive, not a bare EOF or a reset.
    let cfg = tls_serve::client_config(&server.ca, &[&TLS13]);
    let mut m = Manual::connect(server.feed, cfg);
    m.handshake_holding_finished();
    m.write_all_tls();
    let err = loop {
        match m.read_some() {
            Ok(true) => {}
            Ok(false) => panic!("EOF without an alert"),
            Err(e) => break e,
        }
    };
    assert_eq!(
        err,
        rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired)
    );
}

#[test]
fn a_loose_tls_key_draws_the_token_file_warning() {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let files = pki::ServerFiles::write(dir.path(), &pki::Ca::new("ca"));
    std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let ops = net::free_addr();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["serve", "--listen", &net::free_addr().to_string()])
        .args(["--ops-listen", &ops.to_string()])
        .arg("--tls-cert")
        .arg(&files.cert)
        .arg("--tls-key")
        .arg(&files.key)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    crate::util::wait::expect(tls_serve::WAIT, "ready", || {
        net::http_status(ops, "/readyz") == Some(200)
    });
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let want = format!(
        "warning: --tls-key {}: readable by other users (mode 644); chmod 600 it",
        files.key.display()
    );
    assert!(err.contains(&want), "{err}");
}
