//! Loop-lag shedding end to end (docs/overload.md, "Loop lag"): the real
//! binary, one shard, a 50-ms lag target. The server is made to lag by
//! pulses of SIGSTOP (120 ms stopped, 30 ms running): every timer sweep
//! comes late. Then, while it lags: `pricewire_shard_lagging` is 1, a new
//! connection gets Disconnect(busy) with a retry-after from the busy
//! window, a request of a logged-on subscriber gets Reject(overloaded)
//! (`sheds_total{reason="loop_lag"}`), and the subscriber keeps its session
//! and its prices. After the pulses stop the shard leaves lagging and a new
//! client logs on.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, ClientError, Event};
use pricewire::wire::{DisconnectReason, RejectReason, TIER_ACCOUNT_DEFAULT};

use crate::util::net;

const RETRY_MIN_MS: u32 = 200;
const RETRY_MAX_MS: u32 = 600;

/// SIGSTOP/SIGCONT pulses until `stop`; always leaves the server running.
fn pulses(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Relaxed) {
            net::signal(pid, "-STOP");
            // The stimulus's duty cycle (a starved server), not a wait for
            // anything to happen.
            std::thread::sleep(Duration::from_millis(120));
            net::signal(pid, "-CONT");
            std::thread::sleep(Duration::from_millis(30));
        }
    })
}

fn metric(ops: SocketAddr, series: &str) -> Option<f64> {
    let mut s = TcpStream::connect_timeout(&ops, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Waits (bounded) until `series` reads `want`.
fn wait_metric(ops: SocketAddr, series: &str, want: f64, within: Duration) {
    let deadline = Instant::now() + within;
    while metric(ops, series) != Some(want) {
        assert!(Instant::now() < deadline, "{series} never read {want}");
        std::thread::park_timeout(Duration::from_millis(20));
    }
}

fn config(addr: SocketAddr, seed: u64) -> ClientConfig {
    let mut cfg = ClientConfig::new(addr, "demo", "demo");
    cfg.rng_seed = Some(seed);
    cfg.heartbeat_ms = 1_000;
    cfg
}

fn start(addr: SocketAddr, ops: SocketAddr) -> net::Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.args(["serve", "--synthetic-rate", "1000", "--shards", "1"])
        .args(["--report-interval-ms", "60000", "--drain-delay-ms", "0"])
        .args([
            "--listen",
            &addr.to_string(),
            "--ops-listen",
            &ops.to_string(),
        ])
        .args(["--loop-lag-target-ms", "50"])
        .args(["--busy-retry-min-ms", &RETRY_MIN_MS.to_string()])
        .args(["--busy-retry-max-ms", &RETRY_MAX_MS.to_string()]);
    net::start_ready(&mut cmd, ops)
}

/// Reads events until a Reject for `rid` (bounded); counts prices seen.
fn reject_of(c: &mut Client, rid: u64, prices: &mut u64) -> (RejectReason, u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match c.next_event(Duration::from_millis(50)) {
            Ok(Some(Event::Price(_))) => *prices += 1,
            Ok(Some(Event::Reject {
                request_id,
                reason,
                retry_after_ms,
                ..
            })) if request_id == rid => return (reason, retry_after_ms),
            Ok(Some(Event::Disconnected { .. })) => panic!("the subscriber lost its session"),
            _ => {}
        }
    }
    panic!("no Reject for request {rid}")
}

#[test]
fn a_lagging_shard_refuses_sessions_and_requests_and_keeps_its_subscribers() {
    let (addr, ops) = (net::free_addr(), net::free_addr());
    let server = start(addr, ops);
    let mut sub = Client::connect(config(addr, 1)).unwrap();
    sub.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD"])
        .unwrap();
    let lagging = "pricewire_shard_lagging{shard=\"0\"}";
    assert_eq!(metric(ops, lagging), Some(0.0));

    let stop = Arc::new(AtomicBool::new(false));
    let pulse = pulses(server.0.id(), stop.clone());
    wait_metric(ops, lagging, 1.0, Duration::from_secs(10));

    match Client::connect(config(addr, 2)) {
        Err(ClientError::Refused {
            reason,
            retry_after_ms,
            ..
        }) => {
            assert_eq!(reason, DisconnectReason::BUSY);
            assert!((RETRY_MIN_MS..=RETRY_MAX_MS).contains(&retry_after_ms));
        }
        other => panic!("a new connection while lagging: {:?}", other.map(|_| ())),
    }
    let mut prices = 0;
    let rid = sub
        .request_snapshot(TIER_ACCOUNT_DEFAULT, &[0], 0, false)
        .unwrap();
    let (reason, retry) = reject_of(&mut sub, rid, &mut prices);
    assert_eq!(reason, RejectReason::OVERLOADED);
    assert!((RETRY_MIN_MS..=RETRY_MAX_MS).contains(&retry));
    let rejects = "pricewire_admission_rejects_total{stage=\"loop_lag\"}";
    assert!(metric(ops, rejects).is_some_and(|n| n >= 1.0));
    let sheds = "pricewire_sheds_total{reason=\"loop_lag\"}";
    assert!(metric(ops, sheds).is_some_and(|n| n >= 1.0));

    stop.store(true, Relaxed);
    pulse.join().unwrap();
    // Ten windows below half the target end it.
    wait_metric(ops, lagging, 0.0, Duration::from_secs(10));
    let later = Client::connect(config(addr, 3));
    assert!(
        later.is_ok(),
        "a client logs on after the lag: {:?}",
        later.err()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while prices == 0 && Instant::now() < deadline {
        if let Ok(Some(Event::Price(_))) = sub.next_event(Duration::from_millis(50)) {
            prices += 1;
        }
    }
    assert!(prices > 0, "the subscriber kept receiving prices");
    assert!(sub.is_connected(), "the subscriber kept its session");
}
