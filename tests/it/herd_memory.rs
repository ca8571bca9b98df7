//! Memory comes back after herds (docs/operations.md, "Memory"): rounds of
//! clients connect, log on, subscribe to five symbols, read prices and
//! leave; after the last round the server's RSS returns to within
//! `RSS_SLACK_KIB` of what it was idle before the first.
//!
//! The default run uses rounds of `HERD` clients; `PRICEWIRE_DRILL_FULL=1`
//! runs the full drill (three rounds of 3,000). Both print RSS after each
//! round.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, Event};
use pricewire::wire::TIER_ACCOUNT_DEFAULT;

use crate::util::net;

const HERD: usize = 1_000;
const HERD_FULL: usize = 3_000;
const ROUNDS: usize = 3;
const DRIVERS: usize = 8;
/// The bound: RSS after the last herd at most idle + 64 MB.
const RSS_SLACK_KIB: u64 = 64 * 1024;
const SYMBOLS: [&str; 5] = ["EURUSD", "GBPUSD", "USDJPY", "AUDUSD", "XAUUSD"];

fn herd_size() -> usize {
    match std::env::var("PRICEWIRE_DRILL_FULL").as_deref() {
        Ok("1") => HERD_FULL,
        _ => HERD,
    }
}

fn start_server(addr: SocketAddr, ops: SocketAddr) -> net::Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.args(["serve", "--synthetic-rate", "500"])
        .args(["--report-interval-ms", "60000", "--drain-delay-ms", "0"])
        .args([
            "--listen",
            &addr.to_string(),
            "--ops-listen",
            &ops.to_string(),
        ])
        .args(["--shards", "2"])
        // Admission out of the way: this drill is about memory, and
        // every client comes from 127.0.0.1.
        .args(["--accept-rate-per-s", "100000", "--accept-burst", "100000"])
        .args(["--logon-rate-per-s", "100000"])
        .args(["--first-subscribe-rate-per-s", "100000"])
        .args(["--ip-connections-max", "100000"])
        .args([
            "--ip-connect-rate-per-s",
            "100000",
            "--ip-connect-burst",
            "100000",
        ])
        .args(["--max-connections-per-shard", "8192"])
        // Nor loop-lag shedding: a debug build on a loaded host lags under
        // a herd, and a refused client here is not what is measured
        // (tests/it/herd_cpu_hog.rs is the lag drill).
        .args(["--loop-lag-target-ms", "0"]);
    net::start_ready(&mut cmd, ops)
}

/// One round: `n` clients log on and subscribe, every client reads its
/// prices, then all leave. Returns how many prices they read and the
/// server's RSS while all of them were connected.
fn herd(addr: SocketAddr, n: usize, pid: u32, symbols: &'static [&'static str]) -> (u64, u64) {
    let all_in = std::sync::Arc::new(std::sync::Barrier::new(DRIVERS + 1));
    let drivers: Vec<_> = (0..DRIVERS)
        .map(|d| {
            let all_in = all_in.clone();
            std::thread::spawn(move || {
                let mut clients = Vec::new();
                for i in (d..n).step_by(DRIVERS) {
                    let mut cfg = ClientConfig::new(addr, "demo", "demo");
                    cfg.rng_seed = Some(i as u64);
                    cfg.heartbeat_ms = 30_000;
                    // A herd on a loaded 2-core host: generous, this is
                    // about memory, not admission time.
                    cfg.logon_timeout_ms = 30_000;
                    cfg.connect_timeout_ms = 30_000;
                    let mut c = Client::connect(cfg).expect("logon");
                    if !symbols.is_empty() {
                        c.subscribe_names(TIER_ACCOUNT_DEFAULT, symbols)
                            .expect("subscribe");
                    }
                    clients.push(c);
                }
                all_in.wait();
                let mut prices = 0u64;
                for c in &mut clients {
                    while let Ok(Some(e)) = c.next_event(Duration::from_millis(1)) {
                        prices += u64::from(matches!(e, Event::Price(_)));
                    }
                }
                prices
            })
        })
        .collect();
    all_in.wait();
    let with_herd = net::rss_kib(pid);
    let prices = drivers.into_iter().map(|d| d.join().unwrap()).sum();
    (prices, with_herd)
}

fn connections(ops: SocketAddr) -> Option<u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&ops, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let total = body
        .lines()
        .filter(|l| {
            l.starts_with("pricewire_connections{") || l.starts_with("pricewire_connections ")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    Some(total as u64)
}

/// Waits (bounded) for every connection to be gone from the server and
/// then for its RSS to settle at or under `bound_kib`; returns the RSS.
fn rss_after_leaving(server: &net::Server, ops: SocketAddr, bound_kib: u64) -> u64 {
    let pid = server.0.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while connections(ops) != Some(0) {
        assert!(Instant::now() < deadline, "connections never reached 0");
        std::thread::park_timeout(Duration::from_millis(50));
    }
    // The trim comes about a second after the last departure (ops loop).
    let settle = Instant::now() + Duration::from_secs(10);
    loop {
        let rss = net::rss_kib(pid);
        if rss <= bound_kib || Instant::now() >= settle {
            return rss;
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

#[test]
fn rss_returns_near_idle_after_herds_in_a_row() {
    let n = herd_size();
    net::raise_open_files_limit(2 * n + 256);
    let (addr, ops) = (net::free_addr(), net::free_addr());
    let server = start_server(addr, ops);
    let pid = server.0.id();
    // Idle: a handful of clients came and went, so every stage has run.
    herd(addr, 8, pid, &SYMBOLS);
    let idle_kib = rss_after_leaving(&server, ops, 0);
    let bound_kib = idle_kib + RSS_SLACK_KIB;
    if n == HERD_FULL {
        // Memory per connection, logged on with no subscription.
        let (_, with_herd) = herd(addr, n, pid, &[]);
        let rss = rss_after_leaving(&server, ops, bound_kib);
        eprintln!(
            "{n} idle connections: {with_herd} KiB, {:.1} KiB each; after: {rss} KiB",
            (with_herd - idle_kib) as f64 / n as f64
        );
    }
    let mut after = Vec::new();
    for _ in 0..ROUNDS {
        let (prices, with_herd) = herd(addr, n, pid, &SYMBOLS);
        assert!(prices > 0, "the herd read prices");
        after.push((with_herd, rss_after_leaving(&server, ops, bound_kib)));
    }
    eprintln!("herds of {n}: idle {idle_kib} KiB; (with the herd, after) per round {after:?} KiB");
    let each = (after[0].0.saturating_sub(idle_kib)) as f64 / n as f64;
    eprintln!("subscribed to 5 symbols: {each:.1} KiB per connection (first round)");
    let last = after.last().unwrap().1;
    assert!(
        last <= bound_kib,
        "RSS {last} KiB after {ROUNDS} herds of {n} > idle {idle_kib} + {RSS_SLACK_KIB} KiB"
    );
}
