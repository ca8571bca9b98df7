//! The real binary against a real redis-server (behind the fault proxy
//! where a fault is injected), in real time, on default settings unless a
//! test says otherwise:
//!
//! - a kill and a blackhole of Redis each open the breaker within 30 s at
//!   a modest logon rate (10 logons/s), while the cached logons go on;
//! - a withdrawn symbol reaches a live session (unsolicited
//!   SubscribeResponse, `not_entitled`) and a deleted account gets
//!   Disconnect(auth), each within the documented bound;
//! - two processes started at once draw different backoff and
//!   retry-after sequences (entropy-seeded jitter).

use crate::util::net;
use crate::util::redis;
use crate::util::server;
use crate::util::wait;

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pricewire::config::Config;
use pricewire::resilience::proxy::{FaultProxy, Toxic};
use pricewire::wire::{
    self, DisconnectReason, LogonRejectReason, OwnedMessage, SubscribeResult, SubscribeStatus,
    SymbolRef, TIER_ACCOUNT_DEFAULT,
};

use redis::RedisServer;
use server::{Raw, RawRead};
use wait::wait_until;

/// The requirement: open within 30 s of the fault.
const OPEN_LIMIT: Duration = Duration::from_secs(30);
const START: Duration = Duration::from_secs(20);

struct Binary {
    child: Child,
    listen: SocketAddr,
    ops: SocketAddr,
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `pricewire serve --redis` with `config` (TOML) and stderr to `log`.
fn start(dir: &Path, redis: SocketAddr, config: &str, log: &str, rust_log: &str) -> Binary {
    let cfg = dir.join("pricewire.toml");
    std::fs::write(&cfg, config).unwrap();
    let (listen, ops) = (net::free_addr(), net::free_addr());
    let err = std::fs::File::create(dir.join(log)).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .args(["--redis", &format!("redis://{redis}")])
        .args(["--listen", &listen.to_string()])
        .args(["--ops-listen", &ops.to_string()])
        .args(["--report-interval-ms", "600000", "--drain-delay-ms", "0"])
        .args(["--synthetic-rate", "200", "--shards", "1"])
        .env("RUST_LOG", rust_log)
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    Binary { child, listen, ops }
}

fn metric(b: &Binary, line_start: &str) -> Option<f64> {
    let body = net::http_body(b.ops, "/metrics")?;
    body.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// One logon; true when accepted (the connection is then dropped).
fn logon_once(addr: SocketAddr, account: &str) -> Result<(), OwnedMessage> {
    let mut r = Raw::connect(addr);
    r.send_logon(account, "t", 30_000);
    match r.next(Duration::from_secs(5)) {
        RawRead::Msg(OwnedMessage::LogonAccepted(_)) => Ok(()),
        RawRead::Msg(m) => Err(m),
        other => panic!("logon of {account}: {other:?}"),
    }
}

/// Logs on as `account` once its record is loaded (busy answers retried
/// within `START`).
fn logon_when_loaded(addr: SocketAddr, account: &str) -> Raw {
    let mut raw = None;
    let ok = wait_until(START, || {
        if TcpStream::connect(addr).is_err() {
            return false; // not listening yet
        }
        let mut r = Raw::connect(addr);
        r.send_logon(account, "t", 30_000);
        match r.next(Duration::from_secs(5)) {
            RawRead::Msg(OwnedMessage::LogonAccepted(_)) => {
                raw = Some(r);
                true
            }
            _ => false,
        }
    });
    assert!(ok, "{account} never logged on");
    raw.unwrap()
}

fn accounts(server: &RedisServer, n: usize) {
    for i in 0..n {
        let name = format!("u{i:02}");
        server.put_account(&name, &[("token", redis::token_t_hash()), ("tiers", "raw")]);
    }
}

/// Logs on 10 times a second (round robin over `n` accounts) until
/// stopped; counts accepted and refused logons.
struct Logons {
    stop: crossbeam_channel::Sender<()>,
    thread: std::thread::JoinHandle<()>,
    accepted: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

fn logons(addr: SocketAddr, n: usize) -> Logons {
    let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
    let (accepted, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (a, r) = (accepted.clone(), refused.clone());
    let thread = std::thread::spawn(move || {
        let mut i = 0;
        // The stop channel paces the loop: one logon per 100 ms.
        while stopped.recv_timeout(Duration::from_millis(100)).is_err() {
            match logon_once(addr, &format!("u{:02}", i % n)) {
                Ok(()) => a.fetch_add(1, Relaxed),
                Err(_) => r.fetch_add(1, Relaxed),
            };
            i += 1;
        }
    });
    Logons {
        stop,
        thread,
        accepted,
        refused,
    }
}

impl Logons {
    fn finish(self) -> (u64, u64) {
        let _ = self.stop.send(());
        self.thread.join().unwrap();
        (self.accepted.load(Relaxed), self.refused.load(Relaxed))
    }
}

const OPEN: &str = "pricewire_breaker_state{dependency=\"redis\",state=\"open\"}";

/// Kills Redis or blackholes it at the proxy, with logons going on, and
/// returns how long the breaker took to open.
fn breaker_drill(blackhole: bool) -> Duration {
    let mut server = RedisServer::start();
    accounts(&server, 20);
    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), server.addr()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), proxy.local_addr(), "", "log", "warn");
    drop(logon_when_loaded(b.listen, "u19"));
    let load = logons(b.listen, 20);
    assert!(wait_until(START, || load.accepted.load(Relaxed) >= 5));
    assert_eq!(metric(&b, OPEN), Some(0.0));
    let onset = Instant::now();
    if blackhole {
        proxy.set_toxic(Toxic::Blackhole);
    } else {
        server.kill();
    }
    let opened = wait_until(OPEN_LIMIT, || metric(&b, OPEN) == Some(1.0));
    let took = onset.elapsed();
    let (accepted, refused) = load.finish();
    assert!(opened, "breaker not open {took:?} after the fault");
    assert_eq!(refused, 0, "cached logons refused ({accepted} accepted)");
    let rate = metric(&b, "pricewire_breaker_failure_rate{dependency=\"redis\"}");
    assert_eq!(rate, Some(-1.0), "rate gauge while open (no decision)");
    took
}

#[test]
fn a_killed_redis_opens_the_breaker_within_30_s_on_defaults() {
    let took = breaker_drill(false);
    eprintln!("killed: breaker open after {took:?}");
    assert!(took <= OPEN_LIMIT);
}

#[test]
fn a_blackholed_redis_opens_the_breaker_within_30_s_on_defaults() {
    let took = breaker_drill(true);
    eprintln!("blackholed: breaker open after {took:?}");
    assert!(took <= OPEN_LIMIT);
}

/// The documented bound with these settings: TTL plus its jitter, two
/// revalidation rounds (1 s each) and one Redis call at its longest.
fn revocation_bound(ttl_ms: u64) -> Duration {
    Duration::from_millis(ttl_ms * 120 / 100 + 2 * 1_000 + 850)
}

/// Sets one field of alice's Redis record and waits for the unsolicited
/// SubscribeResponse that ends the withdrawn subscriptions; its results.
fn withdraw(
    server: &RedisServer,
    s: &mut Raw,
    field: &[u8],
    value: &[u8],
    bound: Duration,
) -> Vec<SubscribeResult> {
    server.command(&[b"HSET", b"pricewire:account:alice", field, value]);
    let changed = Instant::now();
    let withdrawn = s.until(bound + Duration::from_secs(5), |m| {
        matches!(m, OwnedMessage::SubscribeResponse { request_id: 0, .. })
    });
    let took = changed.elapsed();
    let what = String::from_utf8_lossy(field);
    let Some(OwnedMessage::SubscribeResponse { results, .. }) = withdrawn else {
        panic!("no {what} withdrawal within {took:?}");
    };
    eprintln!("{what} withdrawn: reached the session after {took:?} (bound {bound:?})");
    assert!(took <= bound, "{took:?} > {bound:?}");
    results
}

#[test]
fn withdrawn_entitlements_and_deleted_accounts_reach_live_sessions() {
    let server = RedisServer::start();
    let fields = [
        ("token", redis::token_t_hash()),
        ("tiers", "raw,retail"),
        ("symbols", "EURUSD,USDJPY"),
    ];
    server.put_account("alice", &fields);
    let dir = tempfile::tempdir().unwrap();
    let ttl_ms = 2_000;
    let b = start(
        dir.path(),
        server.addr(),
        &format!("[refdata]\nttl_ms = {ttl_ms}\n"),
        "log",
        "info",
    );
    let table = Config::builtin(3).table;
    let eurusd = table.by_name("EURUSD").unwrap().id;
    let usdjpy = table.by_name("USDJPY").unwrap().id;
    let mut s = logon_when_loaded(b.listen, "alice");
    let entries = [SymbolRef::by_id(eurusd), SymbolRef::by_id(usdjpy)];
    s.send_with(|buf| wire::encode_subscribe(buf, 1, TIER_ACCOUNT_DEFAULT, entries));
    let ok = |id: u64| move |m: &OwnedMessage| matches!(m, OwnedMessage::SubscribeResponse { request_id, results } if *request_id == id && results.iter().all(|r| r.status == SubscribeStatus::OK));
    assert!(s.until(START, ok(1)).is_some(), "subscribe refused");
    let retail = table.tier_by_name("retail").unwrap().id;
    let entry = [SymbolRef::by_id(eurusd)];
    s.send_with(|buf| wire::encode_subscribe(buf, 2, retail, entry));
    assert!(s.until(START, ok(2)).is_some(), "retail subscribe refused");

    // A tier withdrawn (not the default): its subscriptions end.
    let bound = revocation_bound(ttl_ms);
    let results = withdraw(&server, &mut s, b"tiers", b"raw", bound);
    assert_eq!(results.len(), 1);
    assert_eq!(
        (results[0].symbol_id, results[0].status),
        (eurusd, SubscribeStatus::TIER_NOT_ENTITLED)
    );

    let results = withdraw(&server, &mut s, b"symbols", b"EURUSD", bound);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].symbol_id, usdjpy);
    assert_eq!(results[0].status, SubscribeStatus::NOT_ENTITLED);
    // EURUSD keeps updating at raw; USDJPY and the retail tier are gone.
    let mut eur = 0;
    let after = s.until(Duration::from_secs(2), |m| match m.price_body() {
        Some(p) => {
            eur += u32::from(p.symbol_id == eurusd);
            p.symbol_id == usdjpy || p.tier == retail || eur >= 5
        }
        None => false,
    });
    assert!(
        matches!(after.as_ref().and_then(|m| m.price_body()), Some(p) if p.symbol_id == eurusd && p.tier != retail),
        "after the withdrawal: {after:?}"
    );

    server.command(&[b"DEL", b"pricewire:account:alice"]);
    let deleted = Instant::now();
    let bye = s.until(bound + Duration::from_secs(5), |m| {
        matches!(m, OwnedMessage::Disconnect { .. })
    });
    let took = deleted.elapsed();
    eprintln!("account deleted: Disconnect after {took:?} (bound {bound:?})");
    assert!(
        matches!(
            bye,
            Some(OwnedMessage::Disconnect {
                reason: DisconnectReason::AUTH,
                ..
            })
        ),
        "{bye:?}"
    );
    assert!(took <= bound, "{took:?} > {bound:?}");
    let counted = metric(
        &b,
        "pricewire_refdata_revocations_total{action=\"disconnected\"}",
    );
    assert_eq!(counted, Some(1.0));
    // And a new logon is refused.
    assert!(matches!(
        logon_once(b.listen, "alice"),
        Err(OwnedMessage::LogonRejected(r)) if r.reason == LogonRejectReason::AUTH
    ));
}

/// The `backoff_ms=` values of a log, in order.
fn backoffs(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("backing off") && !l.contains("call failed"))
        .map(strip_ansi)
        .filter_map(|l| {
            let at = l.find("backoff_ms=")? + "backoff_ms=".len();
            let digits: String = l[at..]
                .chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(|c| c.is_ascii_digit())
                .collect();
            digits.parse().ok()
        })
        .collect()
}

/// `line` without terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn two_processes_draw_different_backoff_and_retry_after_sequences() {
    // Nothing listens there: every Redis call of both fails at once.
    let dead = net::free_addr();
    let dir = tempfile::tempdir().unwrap();
    let rust_log = "info,pricewire::refdata=debug";
    let procs: Vec<Binary> = ["a.log", "b.log"]
        .iter()
        .map(|log| start(dir.path(), dead, "", log, rust_log))
        .collect();
    let mut retries: Vec<Vec<u32>> = Vec::new();
    for b in &procs {
        let mut seq = Vec::new();
        let ok = wait_until(START, || {
            if TcpStream::connect(b.listen).is_err() {
                return false; // not listening yet
            }
            let mut r = Raw::connect(b.listen);
            r.send_logon("nobody", "t", 30_000);
            if let RawRead::Msg(OwnedMessage::LogonRejected(m)) = r.next(Duration::from_secs(5)) {
                assert_eq!(m.reason, LogonRejectReason::BUSY);
                seq.push(m.retry_after_ms);
            }
            seq.len() >= 8
        });
        assert!(ok, "no busy refusals: {seq:?}");
        retries.push(seq);
    }
    // The first backoffs come before the breaker opens (after 5 failures
    // its open wait floors every later delay).
    let mut seqs = Vec::new();
    for log in ["a.log", "b.log"] {
        let path = dir.path().join(log);
        let mut seq = Vec::new();
        let ok = wait_until(START, || {
            seq = backoffs(&std::fs::read_to_string(&path).unwrap_or_default());
            seq.len() >= 4
        });
        assert!(ok, "{log}: backoffs {seq:?}");
        seq.truncate(4);
        seqs.push(seq);
    }
    eprintln!("backoffs {:?} vs {:?}", seqs[0], seqs[1]);
    eprintln!("retry-after {:?} vs {:?}", retries[0], retries[1]);
    assert_ne!(seqs[0], seqs[1], "same backoff sequence in two processes");
    assert_ne!(
        retries[0], retries[1],
        "same retry-after sequence in two processes"
    );
    drop(procs);
}

#[test]
fn a_bad_refdata_table_is_refused_at_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pricewire.toml");
    for (table, key) in [
        ("io_timeout_ms = 0", "refdata.io_timeout_ms"),
        ("ttl = 5", "unknown field `ttl`"),
        (
            "breaker_consecutive_failures = 0",
            "refdata.breaker_minimum_calls",
        ),
    ] {
        std::fs::write(&cfg, format!("[refdata]\n{table}\n")).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_pricewire"))
            .arg("serve")
            .arg("--config")
            .arg(&cfg)
            .args(["--listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0"])
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{table}: started");
        assert!(err.contains(key), "{table}: {err}");
    }
}
