//! Loop lag end to end (docs/overload.md, "Loop lag"): the real binary,
//! one shard, a 50-ms lag target. The server is made to lag by pulses of
//! SIGSTOP (120 ms stopped, 30 ms running): every timer sweep comes late,
//! while the shard's thread runs a fifth of the time at most. That lag is
//! not the shard's own work (shedding would not give it the time back),
//! so while it lags: `pricewire_shard_lagging` is 1 and
//! `pricewire_shard_lag_shedding` 0, a new client logs on, a request of a
//! logged-on subscriber is answered (no `sheds_total{reason="loop_lag"}`),
//! and the subscriber keeps its session and gets prices flagged conflated.
//! After the pulses stop the shard leaves lagging. (Shedding for the
//! shard's own work — paced logons, the heaviest accounts' requests — is
//! decided by `gateway::lag::cause` and `gateway::lag::shares`, unit-tested
//! on given readings; the drills exercise it.)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, Event};
use pricewire::wire::{RejectReason, TIER_ACCOUNT_DEFAULT};

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

/// Reads events until the answer to `rid` (bounded): `Some(reason)` for a
/// Reject, `None` for the snapshot; counts prices, and conflated ones.
fn answer_of(c: &mut Client, rid: u64, prices: &mut (u64, u64)) -> Option<RejectReason> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        match c.next_event(Duration::from_millis(50)) {
            Ok(Some(Event::Price(p))) => {
                prices.0 += 1;
                prices.1 += u64::from(p.body.flags & pricewire::model::price_flags::CONFLATED != 0);
            }
            Ok(Some(Event::Reject {
                request_id, reason, ..
            })) if request_id == rid => return Some(reason),
            Ok(Some(Event::SnapshotResponse { request_id, .. })) if request_id == rid => {
                return None
            }
            Ok(Some(Event::Disconnected { .. })) => panic!("the subscriber lost its session"),
            _ => {}
        }
    }
    panic!("no answer for request {rid}")
}

#[test]
fn a_stopped_shard_lags_conflates_and_refuses_nobody() {
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
    let shedding = "pricewire_shard_lag_shedding{shard=\"0\"}";
    assert_eq!(
        metric(ops, shedding),
        Some(0.0),
        "a stopped shard does not shed"
    );
    let cpu = "pricewire_shard_cpu_ratio{shard=\"0\"}";
    assert!(
        metric(ops, cpu).is_some_and(|c| c < 0.5),
        "{:?}",
        metric(ops, cpu)
    );

    let mut newcomer =
        Client::connect(config(addr, 2)).expect("a new client logs on while lagging");
    newcomer
        .subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD"])
        .unwrap();
    let mut prices = (0, 0);
    let rid = sub
        .request_snapshot(TIER_ACCOUNT_DEFAULT, &[0], 0, false)
        .unwrap();
    assert_eq!(
        answer_of(&mut sub, rid, &mut prices),
        None,
        "answered, not refused"
    );
    let sheds = "pricewire_sheds_total{reason=\"loop_lag\"}";
    assert_eq!(metric(ops, sheds), Some(0.0));
    let rejects = "pricewire_admission_rejects_total{stage=\"loop_lag\"}";
    assert_eq!(metric(ops, rejects), Some(0.0));
    // Prices while lagging come conflated (the latest per symbol a turn).
    let deadline = Instant::now() + Duration::from_secs(10);
    while prices.1 == 0 && Instant::now() < deadline {
        if let Ok(Some(Event::Price(p))) = sub.next_event(Duration::from_millis(50)) {
            prices.0 += 1;
            prices.1 += u64::from(p.body.flags & pricewire::model::price_flags::CONFLATED != 0);
        }
    }
    assert!(prices.1 > 0, "no conflated price while lagging: {prices:?}");

    stop.store(true, Relaxed);
    pulse.join().unwrap();
    wait_metric(ops, lagging, 0.0, Duration::from_secs(10));
    assert!(sub.is_connected(), "the subscriber kept its session");
    assert!(newcomer.is_connected(), "the newcomer kept its session");
}
