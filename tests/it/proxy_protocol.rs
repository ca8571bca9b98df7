//! PROXY protocol v2 on the real binary's subscriber listener
//! (`--proxy-protocol --proxy-from`), over 127.0.0.1: the header's source
//! address is what per-IP admission counts (LOCAL keeps the balancer's);
//! a missing, malformed, late, truncated or untrusted header closes that
//! connection and is counted by reason while a logged-on terminal keeps
//! its prices; and a real haproxy (`send-proxy-v2`, an oracle we did not
//! write) in front of the binary, plaintext and TLS.

use crate::util::haproxy;
use crate::util::net;
use crate::util::pki;
use crate::util::server;
use crate::util::wait;

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use pricewire::runtime::proxy::header::{encode, SIGNATURE};
use pricewire::wire::{self, DisconnectReason, OwnedMessage, TIER_ACCOUNT_DEFAULT};
use server::{Raw, RawRead};

/// Bound of each wait.
const WAIT: Duration = Duration::from_secs(10);

struct Pw {
    _child: net::Server,
    addr: SocketAddr,
    ops: SocketAddr,
}

impl Pw {
    fn start(extra: &[&str]) -> Pw {
        let (addr, ops) = (net::free_addr(), net::free_addr());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
        cmd.args(["serve", "--synthetic-rate", "500", "--shards", "1"])
            .args(["--report-interval-ms", "60000", "--drain-delay-ms", "0"])
            .args([
                "--listen",
                &addr.to_string(),
                "--ops-listen",
                &ops.to_string(),
            ])
            .arg("--proxy-protocol")
            .args(extra)
            .env_remove("HOSTNAME");
        Pw {
            _child: net::start_ready(&mut cmd, ops),
            addr,
            ops,
        }
    }

    /// Sum of `family`'s samples whose labels contain every `labels` entry.
    fn metric(&self, family: &str, labels: &[&str]) -> f64 {
        let body = net::http_get(self.ops, "/metrics").unwrap_or_default();
        body.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .filter(|l| labels.iter().all(|want| l.contains(want)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn failures(&self, reason: &str) -> f64 {
        let label = format!("reason=\"{reason}\"");
        self.metric("pricewire_proxy_header_failures_total", &[&label])
    }

    fn headers(&self, command: &str) -> f64 {
        let label = format!("command=\"{command}\"");
        self.metric("pricewire_proxy_headers_total", &[&label])
    }
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A connection to `to` (from 127.0.0.1) that first sends `header`.
fn with_header(to: SocketAddr, header: &[u8]) -> Raw {
    let mut r = Raw::connect(to);
    r.send(header);
    r
}

/// A connection to `to` whose PROXY header says it comes from `client`.
fn as_client(to: SocketAddr, client: &str) -> Raw {
    let h = encode(Some((sa(client), to)), &[]).unwrap();
    with_header(to, &h)
}

fn logon(r: &mut Raw) -> RawRead {
    r.send_logon("demo", "demo", 0);
    r.next(WAIT)
}

fn assert_logged_on(r: &mut Raw, who: &str) {
    match logon(r) {
        RawRead::Msg(OwnedMessage::LogonAccepted(_)) => {}
        other => panic!("{who}: expected LogonAccepted, got {other:?}"),
    }
}

/// Subscribes to EURUSD and waits for one of its prices.
fn assert_prices(r: &mut Raw, who: &str) {
    r.send_with(|b| wire::encode_subscribe_names(b, 1, TIER_ACCOUNT_DEFAULT, ["EURUSD"]));
    let price = r.until(WAIT, |m| {
        matches!(
            m,
            OwnedMessage::PriceSnapshot(_) | OwnedMessage::PriceUpdate(_)
        )
    });
    assert!(price.is_some(), "{who}: no EURUSD price");
}

/// The connection is refused at admission: Disconnect(busy), then closed.
fn assert_busy(r: &mut Raw, who: &str) {
    let got = r.read_to_close(WAIT);
    let busy = got.as_deref().is_some_and(|m| {
        matches!(m, [OwnedMessage::Disconnect { reason, .. }] if *reason == DisconnectReason::BUSY)
    });
    assert!(
        busy,
        "{who}: expected Disconnect(busy) and a close, got {got:?}"
    );
}

fn assert_closed(r: &mut Raw, who: &str) {
    let got = r.read_to_close(WAIT);
    assert_eq!(got, Some(vec![]), "{who}: closed without a message");
}

#[test]
fn the_headers_address_is_what_per_ip_limits_count() {
    let pw = Pw::start(&["--proxy-from", "127.0.0.1/32", "--ip-connections-max", "1"]);
    let mut a = as_client(pw.addr, "127.0.0.9:40001");
    assert_logged_on(&mut a, "first terminal of 127.0.0.9");
    // Every connection comes from 127.0.0.1; the header decides.
    let mut b = as_client(pw.addr, "127.0.0.9:40002");
    assert_busy(&mut b, "second terminal of 127.0.0.9");
    let mut c = as_client(pw.addr, "127.0.0.10:40003");
    assert_logged_on(&mut c, "a terminal of 127.0.0.10");
    assert_prices(&mut c, "a terminal of 127.0.0.10");
    // IPv6 clients are counted by their own address too.
    let mut v6 = with_header(
        pw.addr,
        &encode(
            Some((sa("[2001:db8::9]:5000"), sa("[2001:db8::1]:9400"))),
            &[],
        )
        .unwrap(),
    );
    assert_logged_on(&mut v6, "a terminal of 2001:db8::9");
    // LOCAL (a balancer health check) is the balancer itself: one
    // connection of 127.0.0.1 is admitted, a second is over its limit.
    let local = encode(None, &[]).unwrap();
    let mut d = with_header(pw.addr, &local);
    assert_logged_on(&mut d, "the balancer's own connection");
    let mut e = with_header(pw.addr, &local);
    assert_busy(&mut e, "the balancer's second connection");
    assert_eq!(pw.headers("proxy"), 4.0);
    assert_eq!(pw.headers("local"), 2.0);
    let failures = pw.metric("pricewire_proxy_header_failures_total", &[]);
    assert_eq!(failures, 0.0, "every header here is valid");
    assert_prices(&mut a, "the first terminal, still on");
}

#[test]
fn the_headers_address_is_what_the_logon_lockout_locks() {
    let pw = Pw::start(&["--proxy-from", "127.0.0.1"]);
    let mut rejected = 0;
    // Bad tokens from 127.0.0.40 until its address is locked (5 failures).
    let locked = (0..8).any(|i| {
        let mut r = as_client(pw.addr, &format!("127.0.0.40:{}", 42000 + i));
        r.send_logon("demo", "not-the-token", 0);
        match r.next(WAIT) {
            RawRead::Msg(OwnedMessage::LogonRejected(_)) => rejected += 1,
            other => panic!("a bad token: {other:?}"),
        }
        pw.metric("pricewire_lockouts_total", &["scope=\"address\""]) == 1.0
    });
    assert!(locked, "no address lockout after {rejected} bad logons");
    // The good token from the locked address is refused without a check...
    let mut r = as_client(pw.addr, "127.0.0.40:42100");
    r.send_logon("demo", "demo", 0);
    match r.next(WAIT) {
        RawRead::Msg(OwnedMessage::LogonRejected(lr)) => {
            assert_eq!(lr.reason, wire::LogonRejectReason::RATE_LIMITED)
        }
        other => panic!("the locked address: {other:?}"),
    }
    // ...while another terminal behind the same balancer logs on.
    let mut other = as_client(pw.addr, "127.0.0.41:42101");
    assert_logged_on(&mut other, "a terminal of 127.0.0.41");
}

#[test]
fn missing_bad_late_and_untrusted_headers_are_closed_and_counted() {
    let pw = Pw::start(&[
        "--proxy-from",
        "127.0.0.1",
        "--proxy-header-timeout-ms",
        "300",
    ]);
    let mut steady = as_client(pw.addr, "127.0.0.20:41000");
    assert_logged_on(&mut steady, "the steady terminal");
    assert_prices(&mut steady, "the steady terminal");

    // A terminal speaking the protocol straight to the listener.
    let mut direct = Raw::connect(pw.addr);
    direct.send_logon("demo", "demo", 0);
    assert_closed(&mut direct, "no header");
    let mut v1 = with_header(pw.addr, b"PROXY TCP4 127.0.0.9 127.0.0.1 5000 9400\r\n");
    assert_closed(&mut v1, "v1 header");
    let mut version = [SIGNATURE.as_slice(), &[0x11, 0x11, 0, 12]].concat();
    version.extend_from_slice(&[0u8; 12]);
    assert_closed(
        &mut with_header(pw.addr, &version),
        "version 1 in a v2 header",
    );
    let long = [SIGNATURE.as_slice(), &[0x21, 0x11, 0xff, 0xff]].concat();
    assert_closed(&mut with_header(pw.addr, &long), "65535-byte block");
    let mut truncated = with_header(pw.addr, &SIGNATURE[..8]);
    truncated
        .stream
        .shutdown(std::net::Shutdown::Write)
        .unwrap();
    assert_closed(&mut truncated, "header cut short");
    let started = Instant::now();
    let mut silent = Raw::connect(pw.addr);
    assert_closed(&mut silent, "no byte at all");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "cut at the deadline, not before"
    );
    // A valid header from a peer outside --proxy-from: it could name any
    // address, so it is refused before any byte is read.
    let mut outsider = Raw::from_stream(net::connect_from(Ipv4Addr::new(127, 0, 0, 2), pw.addr));
    outsider.send(&encode(Some((sa("127.0.0.30:1"), pw.addr)), &[]).unwrap());
    assert_closed(&mut outsider, "untrusted peer");

    for reason in [
        "bad_signature",
        "v1_unsupported",
        "bad_version",
        "too_long",
        "peer_closed",
        "timeout",
        "untrusted",
    ] {
        wait::expect(WAIT, reason, || pw.failures(reason) == 1.0);
    }
    let all = pw.metric("pricewire_proxy_header_failures_total", &[]);
    assert_eq!(all, 7.0, "one failure each, nothing else");
    assert_eq!(pw.headers("proxy"), 1.0);
    // The logged-on terminal was not disturbed: prices keep coming.
    let more = steady.until(WAIT, |m| matches!(m, OwnedMessage::PriceUpdate(_)));
    assert!(more.is_some(), "the steady terminal still gets prices");
}

#[test]
fn connections_waiting_for_their_header_are_bounded() {
    let pw = Pw::start(&["--proxy-from", "127.0.0.1", "--proxy-pending-max", "2"]);
    let silent: Vec<Raw> = (0..2).map(|_| Raw::connect(pw.addr)).collect();
    // The two silent ones are waiting once a third is refused for them.
    let mut third = Raw::connect(pw.addr);
    assert_busy(&mut third, "a third connection while two wait");
    assert_eq!(pw.failures("overflow"), 1.0);
    drop(silent);
    wait::expect(WAIT, "the waits end with their peers", || {
        pw.failures("peer_closed") == 2.0
    });
    let mut next = as_client(pw.addr, "127.0.0.50:1");
    assert_logged_on(&mut next, "a connection once the waits ended");
}

#[test]
fn haproxy_relays_terminals_and_the_limits_see_their_addresses() {
    let dir = tempfile::tempdir().unwrap();
    // haproxy reaches pricewire from 127.0.0.5, the only trusted peer.
    let pw = Pw::start(&["--proxy-from", "127.0.0.5", "--ip-connections-max", "1"]);
    let lb = haproxy::Haproxy::start(
        dir.path(),
        net::free_addr(),
        pw.addr,
        Ipv4Addr::new(127, 0, 0, 5),
    );
    let from =
        |last: u8| Raw::from_stream(net::connect_from(Ipv4Addr::new(127, 0, 0, last), lb.addr));

    let mut a = from(9);
    assert_logged_on(&mut a, "a terminal of 127.0.0.9 through haproxy");
    assert_prices(&mut a, "a terminal of 127.0.0.9 through haproxy");
    // Without the header both would be 127.0.0.5 and the second refused.
    let mut b = from(10);
    assert_logged_on(&mut b, "a terminal of 127.0.0.10 through haproxy");
    assert_prices(&mut b, "a terminal of 127.0.0.10 through haproxy");
    let mut again = from(9);
    assert_busy(&mut again, "a second terminal of 127.0.0.9 through haproxy");
    assert_eq!(
        pw.headers("proxy"),
        3.0,
        "haproxy sent a v2 PROXY header each time"
    );
    // Straight to pricewire, past the balancer: not trusted.
    let mut bypass = Raw::connect(pw.addr);
    bypass.send_logon("demo", "demo", 0);
    assert_closed(&mut bypass, "a terminal bypassing the balancer");
    wait::expect(WAIT, "the bypass counted", || {
        pw.failures("untrusted") == 1.0
    });
    let more = a.until(WAIT, |m| matches!(m, OwnedMessage::PriceUpdate(_)));
    assert!(more.is_some(), "the first terminal still gets prices");
}

#[test]
fn haproxy_sends_the_header_before_the_tls_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki::Ca::new("pricewire test CA");
    let files = pki::ServerFiles::write(dir.path(), &ca);
    let ca_pem = pki::write_ca(dir.path(), "ca.pem", &ca);
    let (cert, key) = (
        files.cert.display().to_string(),
        files.key.display().to_string(),
    );
    let pw = Pw::start(&[
        "--proxy-from",
        "127.0.0.5",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    let lb = haproxy::Haproxy::start(
        dir.path(),
        net::free_addr(),
        pw.addr,
        Ipv4Addr::new(127, 0, 0, 5),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args([
            "watch",
            "--once",
            "--once-timeout-ms",
            "5000",
            "--tls",
            "--tls-name",
            "127.0.0.1",
        ])
        .arg("--ca")
        .arg(&ca_pem)
        .args(["--connect", &lb.addr.to_string(), "EURUSD"])
        .output()
        .expect("run watch");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "watch --tls through haproxy: {out:?}");
    let row = text.lines().find(|l| l.starts_with("EURUSD"));
    let bid = row.and_then(|r| r.split_whitespace().nth(1));
    assert!(
        bid.is_some_and(|b| b.parse::<f64>().is_ok()),
        "EURUSD has a bid: {text}"
    );
    assert_eq!(pw.headers("proxy"), 1.0);
    let tls = ["listener=\"subscriber\""];
    assert_eq!(pw.metric("pricewire_tls_handshakes_total", &tls), 1.0);
    assert_eq!(pw.metric("pricewire_proxy_header_failures_total", &[]), 0.0);
}

#[test]
fn the_proxy_flags_are_refused_when_incomplete_or_malformed() {
    let refused = |extra: &[&str], says: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_pricewire"))
            .args(["serve", "--duration-s", "1", "--ops-listen", "127.0.0.1:0"])
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .output()
            .expect("run serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} must be refused");
        assert!(err.contains(says), "{extra:?}: {err}");
    };
    refused(&["--proxy-protocol"], "--proxy-from");
    refused(&["--proxy-from", "10.0.0.0/8"], "--proxy-protocol");
    refused(
        &["--proxy-protocol", "--proxy-from", "10.0.0.0/33"],
        "10.0.0.0/33",
    );
    refused(
        &["--proxy-protocol", "--proxy-from", "10.0.0.0/8,balancer"],
        "balancer",
    );
    let slow = [
        "--proxy-protocol",
        "--proxy-from",
        "10.0.0.0/8",
        "--proxy-header-timeout-ms",
        "0",
    ];
    refused(&slow, "--proxy-header-timeout-ms");
}

#[test]
fn every_failure_reason_is_documented_and_in_the_metric_help() {
    use pricewire::ops::metrics::catalogue;
    use pricewire::runtime::proxy::ProxyFailure;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/security.md");
    let doc = std::fs::read_to_string(path).expect("docs/security.md");
    let family = catalogue::FAMILIES
        .iter()
        .find(|f| f.name == catalogue::PROXY_HEADER_FAILURES)
        .expect("the failures family is in the catalogue");
    for why in ProxyFailure::ALL {
        let label = why.label();
        assert!(
            doc.contains(&format!("`{label}`")),
            "security.md lacks {label}"
        );
        assert!(family.help.contains(label), "the metric help lacks {label}");
    }
}
