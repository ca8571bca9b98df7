//! TLS on the real binary's listeners with chains made here (rcgen):
//! prices through `watch --tls`, a client trusting another CA refused and
//! counted, plaintext on a TLS port refused and counted, a silent
//! connection cut at the handshake deadline and counted, a SIGHUP
//! certificate reload while a subscriber keeps receiving (no gap, no
//! disconnect; new connections see the new chain, a bad file keeps the
//! old one), provider client certificates required by
//! `--feed-tls-client-ca` (and a silent bridge cut at the handshake
//! deadline), and a plaintext ingest beside TLS subscribers.

use crate::util::net;
use crate::util::pki;
use crate::util::wait;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use pki::{Ca, ServerFiles};
use pricewire::client::tls::ClientTls;
use pricewire::client::{Client, ClientConfig, Event, SeqStatus};
use pricewire::wire::{self, Message, TIER_ACCOUNT_DEFAULT};

/// Bound of each wait on a condition.
const WAIT: Duration = Duration::from_secs(10);

struct Server {
    child: Child,
    addr: SocketAddr,
    ops: SocketAddr,
    feed: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(files: &ServerFiles, extra: &[&str]) -> Server {
        let (addr, ops, feed) = (net::free_addr(), net::free_addr(), net::free_addr());
        let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
            .args(["serve", "--synthetic-rate", "500", "--shards", "1"])
            .args(["--report-interval-ms", "60000", "--drain-delay-ms", "0"])
            .args(["--listen", &addr.to_string()])
            .args(["--ops-listen", &ops.to_string()])
            .args(["--feed-listen", &feed.to_string()])
            .arg("--tls-cert")
            .arg(&files.cert)
            .arg("--tls-key")
            .arg(&files.key)
            .args(extra)
            .env("RUST_LOG", "warn")
            .env_remove("HOSTNAME")
            .stdout(Stdio::null())
            .spawn()
            .expect("start pricewire");
        let s = Server {
            child,
            addr,
            ops,
            feed,
        };
        wait::expect(WAIT, "server ready", || {
            net::http_get(ops, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
        });
        s
    }

    /// Sum of the samples of `family` whose labels contain every `labels`
    /// entry (`name="value"`).
    fn metric(&self, family: &str, labels: &[&str]) -> f64 {
        let body = net::http_get(self.ops, "/metrics").unwrap_or_default();
        body.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .filter(|l| labels.iter().all(|want| l.contains(want)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn signal(&self, sig: &str) {
        net::signal(self.child.id(), sig);
    }
}

fn watch(addr: SocketAddr, ca: &Path) -> Output {
    watch_named(addr, ca, &[])
}

fn watch_named(addr: SocketAddr, ca: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["watch", "--once", "--once-timeout-ms", "5000", "--tls"])
        .arg("--ca")
        .arg(ca)
        .args(extra)
        .args(["--connect", &addr.to_string(), "EURUSD", "USDJPY"])
        .output()
        .expect("run watch")
}

fn sdk_config(addr: SocketAddr, ca: &Path) -> ClientConfig {
    let mut cfg = ClientConfig::new(addr, "demo", "demo");
    cfg.tls = Some(ClientTls::from_ca_file(ca, "127.0.0.1").unwrap());
    cfg.reconnect_attempts_max = 0;
    cfg
}

#[test]
fn watch_over_tls_shows_prices_and_another_ca_is_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, other) = (Ca::new("pricewire test CA"), Ca::new("someone else"));
    let files = ServerFiles::write(dir.path(), &ca);
    let ca_pem = pki::write_ca(dir.path(), "ca.pem", &ca);
    let other_pem = pki::write_ca(dir.path(), "other.pem", &other);
    let server = Server::start(&files, &["--tls-handshake-timeout-ms", "300"]);
    // A connection that never starts its handshake is cut at the deadline.
    let mut silent = TcpStream::connect(server.addr).unwrap();
    silent.set_read_timeout(Some(WAIT)).unwrap();

    let out = watch(server.addr, &ca_pem);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "watch --tls: {out:?}");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("EURUSD")).collect();
    assert_eq!(rows.len(), 1, "{text}");
    let bid = rows[0].split_whitespace().nth(1).unwrap();
    assert!(bid.parse::<f64>().is_ok(), "EURUSD has a bid: {text}");
    let ok = ["listener=\"subscriber\""];
    assert!(server.metric("pricewire_tls_handshakes_total", &ok) >= 1.0);
    // --tls-name: the certificate must carry the name asked for.
    let named = watch_named(server.addr, &ca_pem, &["--tls-name", "localhost"]);
    assert!(named.status.success(), "a name the certificate carries");
    let wrong = watch_named(server.addr, &ca_pem, &["--tls-name", "prices.example"]);
    assert!(
        !wrong.status.success(),
        "a name the certificate does not carry"
    );
    let alert = ["listener=\"subscriber\"", "reason=\"peer_alert\""];
    wait::expect(WAIT, "the wrong name's alert counted", || {
        server.metric("pricewire_tls_handshake_failures_total", &alert) == 1.0
    });

    // The chain does not verify to the client's CA: it refuses, sends an
    // alert, and the server counts it.
    let out = watch(server.addr, &other_pem);
    assert!(!out.status.success(), "another CA must not connect");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("certificate"), "names the certificate: {err}");
    wait::expect(WAIT, "the refused handshake counted", || {
        server.metric("pricewire_tls_handshake_failures_total", &alert) == 2.0
    });

    // A plaintext client on the TLS port gets no protocol answer.
    let mut raw = TcpStream::connect(server.addr).unwrap();
    raw.set_read_timeout(Some(WAIT)).unwrap();
    let mut frame = [0u8; 256];
    let logon = wire::Logon {
        heartbeat_interval_ms: 0,
        account: b"demo",
        token: b"demo",
    };
    let n = wire::encode_logon(&mut frame, &logon).unwrap();
    raw.write_all(&frame[..n]).unwrap();
    let mut buf = [0u8; 256];
    let got = raw.read(&mut buf).unwrap_or(0);
    assert!(
        got == 0 || buf[0] == 0x15,
        "plaintext is answered only with a TLS alert or a close"
    );
    let bad = ["listener=\"subscriber\"", "reason=\"bad_message\""];
    wait::expect(WAIT, "the plaintext handshake counted", || {
        server.metric("pricewire_tls_handshake_failures_total", &bad) >= 1.0
    });
    assert_eq!(
        silent.read(&mut buf).unwrap_or(0),
        0,
        "closed at the deadline"
    );
    let late = ["listener=\"subscriber\"", "reason=\"timeout\""];
    assert_eq!(
        server.metric("pricewire_tls_handshake_failures_total", &late),
        1.0
    );
}

/// What the long-lived subscriber saw.
#[derive(Default)]
struct Seen {
    prices: AtomicU64,
    gaps: AtomicU64,
    disconnects: AtomicU64,
}

fn subscriber(cfg: ClientConfig, stop: Arc<AtomicBool>) -> (Arc<Seen>, JoinHandle<()>) {
    let mut c = Client::connect(cfg).expect("connect over TLS and log on");
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD", "GBPUSD", "XAUUSD"])
        .expect("subscribe");
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let t = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match c.next_event(Duration::from_millis(50)) {
                Ok(Some(Event::Price(p))) => {
                    s.prices.fetch_add(1, Ordering::Relaxed);
                    if matches!(p.seq, SeqStatus::Gap { .. }) {
                        s.gaps.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(Some(Event::Disconnected { .. })) | Err(_) => {
                    s.disconnects.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                _ => {}
            }
        }
    });
    (seen, t)
}

#[test]
fn sighup_reload_keeps_the_subscriber_and_new_connections_get_the_new_chain() {
    let dir = tempfile::tempdir().unwrap();
    let (old_ca, new_ca) = (Ca::new("old CA"), Ca::new("new CA"));
    let files = ServerFiles::write(dir.path(), &old_ca);
    let old_pem = pki::write_ca(dir.path(), "old.pem", &old_ca);
    let new_pem = pki::write_ca(dir.path(), "new.pem", &new_ca);
    let server = Server::start(&files, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let (seen, t) = subscriber(sdk_config(server.addr, &old_pem), stop.clone());
    wait::expect(WAIT, "prices before the reload", || {
        seen.prices.load(Ordering::Relaxed) >= 20
    });

    files.replace(&new_ca);
    server.signal("-HUP");
    let ok = ["result=\"ok\""];
    wait::expect(WAIT, "the reload", || {
        server.metric("pricewire_tls_cert_reloads_total", &ok) >= 1.0
    });
    let before = seen.prices.load(Ordering::Relaxed);
    wait::expect(WAIT, "prices after the reload", || {
        seen.prices.load(Ordering::Relaxed) >= before + 20
    });
    // New handshakes present the new chain only.
    assert!(Client::connect(sdk_config(server.addr, &old_pem)).is_err());
    Client::connect(sdk_config(server.addr, &new_pem)).expect("the new chain");

    // A broken file is refused and the chain in use stays.
    pki::write_atomic(&files.cert, "not a certificate\n");
    server.signal("-HUP");
    let failed = ["result=\"failed\""];
    wait::expect(WAIT, "the refused reload", || {
        server.metric("pricewire_tls_cert_reloads_total", &failed) >= 1.0
    });
    Client::connect(sdk_config(server.addr, &new_pem)).expect("still the new chain");

    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    assert_eq!(seen.disconnects.load(Ordering::Relaxed), 0, "session kept");
    assert_eq!(
        seen.gaps.load(Ordering::Relaxed),
        0,
        "no gap across reloads"
    );
}

/// ProviderLogon over `s`; true when the server answered it with a
/// LogonAccepted or LogonRejected (the TLS session carried the protocol).
fn provider_logon<S: Read + Write>(s: &mut S) -> bool {
    let mut frame = [0u8; 256];
    let logon = wire::ProviderLogon {
        provider_id: 0,
        token: b"demo-feed",
    };
    let n = wire::encode_provider_logon(&mut frame, &logon).unwrap();
    match pki::round_trip(s, &frame[..n]) {
        Ok(reply) => matches!(
            wire::decode(&reply),
            Ok(Message::LogonAccepted(_) | Message::LogonRejected(_))
        ),
        Err(_) => false,
    }
}

#[test]
fn a_provider_must_present_a_certificate_from_the_feed_client_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, clients, stranger) = (Ca::new("server CA"), Ca::new("bridges"), Ca::new("x"));
    let files = ServerFiles::write(dir.path(), &ca);
    let clients_pem = pki::write_ca(dir.path(), "bridges.pem", &clients);
    let extra = [
        "--feed-tls-client-ca",
        clients_pem.to_str().unwrap(),
        "--tls-handshake-timeout-ms",
        "300",
    ];
    let server = Server::start(&files, &extra);
    // A bridge that never starts its handshake is cut at the deadline.
    let mut silent = TcpStream::connect(server.feed).unwrap();
    silent.set_read_timeout(Some(WAIT)).unwrap();

    // No client certificate: TLS 1.3 finishes the client's side of the
    // handshake, then the server refuses before any protocol answer.
    let refused = pki::tls_connect(server.feed, &ca.pem(), None)
        .map(|mut s| provider_logon(&mut s))
        .unwrap_or(false);
    assert!(!refused, "a bridge without a certificate got an answer");
    let none = ["listener=\"feed\"", "reason=\"no_client_certificate\""];
    wait::expect(WAIT, "the missing certificate counted", || {
        server.metric("pricewire_tls_handshake_failures_total", &none) >= 1.0
    });
    // A certificate from another CA: refused too.
    let (chain, key) = stranger.leaf(&["bridge-x"], true);
    let refused = pki::tls_connect(server.feed, &ca.pem(), Some((&chain, &key)))
        .map(|mut s| provider_logon(&mut s))
        .unwrap_or(false);
    assert!(
        !refused,
        "a bridge with a stranger's certificate got an answer"
    );
    let bad = ["listener=\"feed\"", "reason=\"bad_certificate\""];
    wait::expect(WAIT, "the bad certificate counted", || {
        server.metric("pricewire_tls_handshake_failures_total", &bad) >= 1.0
    });
    // A certificate from the bridges' CA: the session carries the protocol.
    let (chain, key) = clients.leaf(&["bridge-a"], true);
    let mut s = pki::tls_connect(server.feed, &ca.pem(), Some((&chain, &key))).unwrap();
    assert!(provider_logon(&mut s), "an entitled bridge gets its answer");

    assert_eq!(silent.read(&mut [0u8; 64]).unwrap_or(0), 0, "cut");
    let late = ["listener=\"feed\"", "reason=\"timeout\""];
    wait::expect(WAIT, "the silent bridge counted", || {
        server.metric("pricewire_tls_handshake_failures_total", &late) == 1.0
    });
}

#[test]
fn feed_plaintext_keeps_the_ingest_listener_plain_beside_tls_subscribers() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("server CA");
    let files = ServerFiles::write(dir.path(), &ca);
    let ca_pem = pki::write_ca(dir.path(), "ca.pem", &ca);
    let server = Server::start(&files, &["--feed-plaintext"]);
    let mut raw = TcpStream::connect(server.feed).unwrap();
    raw.set_read_timeout(Some(WAIT)).unwrap();
    assert!(provider_logon(&mut raw), "plaintext ingest answers");
    assert!(watch(server.addr, &ca_pem).status.success());
    // Without TLS on the feed listener it registers no TLS series.
    let body = net::http_get(server.ops, "/metrics").unwrap_or_default();
    let feed_tls = body
        .lines()
        .any(|l| l.starts_with("pricewire_tls_") && l.contains("listener=\"feed\""));
    assert!(!feed_tls, "no feed TLS series");
}
