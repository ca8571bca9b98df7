//! The real binary at a descriptor limit (docs/operations.md,
//! "Descriptor limits"): started with a limit of 2,000 descriptors, soft
//! and hard, it takes 2,500 connection attempts, and every one is
//! answered — logged on or refused with Disconnect(busy) — while `/livez`
//! and `/metrics` answer throughout, because the acceptor refuses at the
//! limit less `--fd-reserve` (shipped default) instead of running out.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pricewire::client::{Client, ClientConfig, ClientError};
use pricewire::wire::DisconnectReason;

use crate::util::net;

const FD_LIMIT: u64 = 2_000;
const ATTEMPTS: usize = 2_500;
const DRIVERS: usize = 8;

fn start_server(addr: SocketAddr, ops: SocketAddr) -> net::Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.args(["serve", "--synthetic-rate", "100"])
        .args(["--report-interval-ms", "60000", "--drain-delay-ms", "0"])
        .args(["--listen", &addr.to_string()])
        .args(["--ops-listen", &ops.to_string()])
        .args(["--shards", "2"])
        // Admission out of the way: every client comes from 127.0.0.1,
        // and the limit under test is the descriptors'.
        .args(["--accept-rate-per-s", "100000", "--accept-burst", "100000"])
        .args(["--logon-rate-per-s", "100000"])
        .args(["--first-subscribe-rate-per-s", "100000"])
        .args(["--ip-connections-max", "100000"])
        .args(["--ip-connect-rate-per-s", "100000"])
        .args(["--ip-connect-burst", "100000"])
        .args(["--loop-lag-target-ms", "0"]);
    // SAFETY: setrlimit is async-signal-safe; the closure touches only
    // its own stack between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: FD_LIMIT,
                rlim_max: FD_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    net::start_ready(&mut cmd, ops)
}

/// `GET path` with generous timeouts: the status code, and the body.
fn get(ops: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&ops, Duration::from_secs(10)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text.split(' ').nth(1)?.parse().ok()?;
    Some((status, text.split_once("\r\n\r\n")?.1.to_string()))
}

/// The sum of the samples of `series` (a name with its labels) in `body`.
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[derive(Default)]
struct Tally {
    logged_on: AtomicU64,
    busy: AtomicU64,
}

/// Connects attempts `d, d + DRIVERS, ...`, holding every logged-on
/// client until `release`; returns the errors that were not busy.
fn drive(d: usize, addr: SocketAddr, tally: &Tally, release: &AtomicBool) -> Vec<String> {
    let mut held = Vec::new();
    let mut other = Vec::new();
    for i in (d..ATTEMPTS).step_by(DRIVERS) {
        let mut cfg = ClientConfig::new(addr, "demo", "demo");
        cfg.rng_seed = Some(i as u64);
        cfg.heartbeat_ms = 30_000;
        cfg.logon_timeout_ms = 60_000;
        cfg.connect_timeout_ms = 60_000;
        match Client::connect(cfg) {
            Ok(c) => {
                tally.logged_on.fetch_add(1, Ordering::Relaxed);
                held.push(c);
            }
            Err(ClientError::Refused { reason, .. }) if reason == DisconnectReason::BUSY => {
                tally.busy.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => other.push(format!("attempt {i}: {e}")),
        }
    }
    while !release.load(Ordering::Acquire) {
        std::thread::park_timeout(Duration::from_millis(20));
    }
    other
}

#[test]
fn at_a_2000_descriptor_limit_every_attempt_is_answered_and_probes_answer() {
    net::raise_open_files_limit(ATTEMPTS + 500);
    let (addr, ops) = (net::free_addr(), net::free_addr());
    let _server = start_server(addr, ops);
    let tally = Arc::new(Tally::default());
    let (done, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let prober = {
        let done = done.clone();
        std::thread::spawn(move || {
            let (mut answered, mut failed) = (0u32, Vec::new());
            while !done.load(Ordering::Acquire) {
                for path in ["/livez", "/metrics"] {
                    match get(ops, path) {
                        Some((200, _)) => answered += 1,
                        other => failed.push(format!("{path}: {:?}", other.map(|a| a.0))),
                    }
                }
            }
            (answered, failed)
        })
    };
    let drivers: Vec<_> = (0..DRIVERS)
        .map(|d| {
            let (tally, release) = (tally.clone(), release.clone());
            std::thread::spawn(move || drive(d, addr, &tally, &release))
        })
        .collect();
    // Every attempt answered, the logged-on clients still held.
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let answered = || tally.logged_on.load(Ordering::Relaxed) + tally.busy.load(Ordering::Relaxed);
    while answered() < ATTEMPTS as u64 && drivers.iter().any(|d| !d.is_finished()) {
        assert!(
            std::time::Instant::now() < deadline,
            "attempts left unanswered"
        );
        std::thread::park_timeout(Duration::from_millis(50));
    }
    // Probes answer while the server is full, too.
    let (status, body) = get(ops, "/metrics").expect("a scrape while full");
    assert_eq!(status, 200);
    assert_eq!(get(ops, "/livez").map(|a| a.0), Some(200));
    done.store(true, Ordering::Release);
    release.store(true, Ordering::Release);
    let other: Vec<String> = drivers
        .into_iter()
        .flat_map(|d| d.join().unwrap())
        .collect();
    let (probes, failed) = prober.join().unwrap();
    let (on, busy) = (
        tally.logged_on.load(Ordering::Relaxed),
        tally.busy.load(Ordering::Relaxed),
    );
    println!("logged on {on}, refused busy {busy}, probes answered {probes}");
    assert!(
        other.is_empty(),
        "answers other than logon or busy: {other:?}"
    );
    assert_eq!(on + busy, ATTEMPTS as u64, "every attempt answered");
    assert!(
        busy > 0 && on > 0,
        "the limit was reached: {on} on, {busy} busy"
    );
    assert!(on < FD_LIMIT, "the reserve was kept: {on} on");
    assert!(failed.is_empty(), "probes failed: {failed:?}");
    assert!(probes > 0);
    let refused = sample(
        &body,
        "pricewire_admission_rejects_total{stage=\"fd_limit\"}",
    );
    assert!(
        refused >= 1.0,
        "refusals at the limit are counted: {refused}"
    );
}
