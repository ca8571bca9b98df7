//! A reconnect herd against the real binary: 2,000 SDK clients connect,
//! log on and subscribe within about a second while a few subscribers that
//! were already connected keep receiving prices in order. Admission refuses
//! the excess at once with a jittered retryAfterMs; following the SDK's
//! reconnect policy every client is logged on in the end; the server's RSS
//! stays bounded and it never crashes.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pricewire::client::{
    Client, ClientConfig, ClientError, DisconnectCause, DisconnectInfo, Event, ReconnectPolicy,
    SeqStatus,
};
use pricewire::resilience::backoff::Backoff;
use pricewire::wire::TIER_ACCOUNT_DEFAULT;
use rand::SeedableRng;

const HERD: usize = 2_000;
const DRIVERS: usize = 8;
const STEADY: usize = 4;
/// Bound of the whole herd: every client must be logged on by then.
const HERD_DEADLINE: Duration = Duration::from_secs(60);
const RSS_BOUND_KIB: u64 = 600 * 1024;

use crate::util::net;

fn client_config(addr: SocketAddr, seed: u64) -> ClientConfig {
    let mut cfg = ClientConfig::new(addr, "demo", "demo");
    cfg.rng_seed = Some(seed);
    cfg.heartbeat_ms = 30_000;
    cfg.connect_timeout_ms = 5_000;
    cfg.logon_timeout_ms = 5_000;
    cfg
}

/// Counts of the herd, shared by the driver threads.
#[derive(Default)]
struct Tally {
    logged_on: AtomicU64,
    refused: AtomicU64,
    refused_without_retry: AtomicU64,
    other_errors: AtomicU64,
}

/// One driver connects its share of clients; a refused client waits out
/// the delay the SDK's reconnect policy chose (the server's retryAfterMs is
/// its floor) and tries again. Logged-on clients are kept open and drained.
fn drive(addr: SocketAddr, first: usize, count: usize, tally: Arc<Tally>) -> Vec<Client> {
    let mut policy: Vec<ReconnectPolicy> = (0..count)
        .map(|_| {
            ReconnectPolicy::new(
                Backoff {
                    base_ms: 100,
                    cap_ms: 2_000,
                },
                100,
                60_000,
            )
        })
        .collect();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(first as u64);
    let start = Instant::now();
    let mut due: Vec<(Duration, usize)> = (0..count).map(|i| (Duration::ZERO, i)).collect();
    let mut done = Vec::with_capacity(count);
    while let Some(pos) = (0..due.len()).min_by_key(|&k| due[k].0) {
        let (at, i) = due.swap_remove(pos);
        let now = start.elapsed();
        if at > now {
            // Waiting out a backoff delay the client chose: the behaviour
            // under test, not a synchronisation.
            std::thread::park_timeout(at - now);
        }
        let mut c = match Client::connect(client_config(addr, (first + i) as u64)) {
            Ok(c) => c,
            Err(e) => {
                let retry = match &e {
                    ClientError::Refused { retry_after_ms, .. }
                    | ClientError::LogonRejected { retry_after_ms, .. } => {
                        tally.refused.fetch_add(1, Ordering::Relaxed);
                        if *retry_after_ms == 0 {
                            tally.refused_without_retry.fetch_add(1, Ordering::Relaxed);
                        }
                        *retry_after_ms
                    }
                    _ => {
                        tally.other_errors.fetch_add(1, Ordering::Relaxed);
                        0
                    }
                };
                let info = DisconnectInfo {
                    retry: true,
                    retry_after_ms: retry,
                };
                let now_ns = start.elapsed().as_nanos() as u64;
                let delay = policy[i]
                    .next_delay(now_ns, &info, &mut rng)
                    .expect("client gave up");
                due.push((start.elapsed() + Duration::from_millis(delay), i));
                continue;
            }
        };
        c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD"])
            .unwrap();
        tally.logged_on.fetch_add(1, Ordering::Relaxed);
        done.push(c);
        // Keep the logged-on clients read so none turns slow consumer.
        for c in done.iter_mut().rev().take(16) {
            while let Ok(Some(_)) = c.next_event(Duration::from_millis(0)) {}
        }
    }
    done
}

/// `pricewire serve` with two shards and the market-open limits under
/// test: a herd far above the accept, logon and subscribe budgets.
fn serve_with_market_open_limits(
    addr: std::net::SocketAddr,
    ops_addr: std::net::SocketAddr,
) -> net::Server {
    let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args([
            "serve",
            "--synthetic-rate",
            "2000",
            "--report-interval-ms",
            "60000",
        ])
        .args([
            "--listen",
            &addr.to_string(),
            "--ops-listen",
            &ops_addr.to_string(),
        ])
        .args(["--shards", "2", "--drain-delay-ms", "0"])
        // The market-open limits under test: a herd far above the budget.
        .args(["--accept-rate-per-s", "400", "--accept-burst", "400"])
        .args([
            "--logon-rate-per-s",
            "400",
            "--first-subscribe-rate-per-s",
            "1000",
        ])
        .args(["--busy-retry-min-ms", "200", "--busy-retry-max-ms", "1500"])
        // Every client is on 127.0.0.1: per-IP limits out of the way.
        .args([
            "--ip-connections-max",
            "100000",
            "--ip-connect-rate-per-s",
            "100000",
        ])
        .args(["--ip-connect-burst", "100000"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    net::Server(child)
}

/// Subscribers of three symbols, each read by its own thread until `stop`,
/// counting prices in `received` and gaps in `out_of_order`; each thread
/// returns the sessions it lost other than by a server Disconnect.
fn steady_subscribers(
    addr: std::net::SocketAddr,
    stop: &Arc<AtomicBool>,
    out_of_order: &Arc<AtomicU64>,
    received: &Arc<AtomicU64>,
) -> Vec<std::thread::JoinHandle<u64>> {
    (0..STEADY)
        .map(|k| {
            let mut c = Client::connect(client_config(addr, 10_000 + k as u64)).unwrap();
            c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD", "GBPUSD", "XAUUSD"])
                .unwrap();
            let (stop, ooo, rx) = (stop.clone(), out_of_order.clone(), received.clone());
            std::thread::spawn(move || {
                let mut disconnects = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match c.next_event(Duration::from_millis(50)) {
                        Ok(Some(Event::Price(p))) => {
                            rx.fetch_add(1, Ordering::Relaxed);
                            if matches!(p.seq, SeqStatus::Gap { .. }) {
                                ooo.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Ok(Some(Event::Disconnected { cause, .. }))
                            if !matches!(cause, DisconnectCause::Server { .. }) =>
                        {
                            disconnects += 1;
                        }
                        _ => {}
                    }
                }
                disconnects
            })
        })
        .collect()
}

/// The herd: `DRIVERS` threads log `HERD` clients on within
/// `HERD_DEADLINE`; returns the clients, the time taken and the server's
/// largest RSS seen meanwhile, in KiB.
fn herd(addr: std::net::SocketAddr, pid: u32, tally: &Arc<Tally>) -> (Vec<Client>, Duration, u64) {
    let herd_start = Instant::now();
    let drivers: Vec<_> = (0..DRIVERS)
        .map(|d| {
            let per = HERD / DRIVERS;
            let t = tally.clone();
            std::thread::spawn(move || drive(addr, d * per, per, t))
        })
        .collect();
    let mut rss_max = 0;
    while !drivers.iter().all(|d| d.is_finished()) {
        assert!(
            herd_start.elapsed() < HERD_DEADLINE,
            "herd not logged on in time"
        );
        rss_max = rss_max.max(net::rss_kib(pid));
        std::thread::park_timeout(Duration::from_millis(50));
    }
    let herd_took = herd_start.elapsed();
    let clients: Vec<Client> = drivers
        .into_iter()
        .flat_map(|d| d.join().unwrap())
        .collect();
    rss_max = rss_max.max(net::rss_kib(pid));
    (clients, herd_took, rss_max)
}

#[test]
fn reconnect_herd_all_log_on_while_subscribers_keep_receiving_in_order() {
    net::raise_open_files_limit(2 * HERD + 256);
    let (addr, ops_addr) = (net::free_addr(), net::free_addr());
    let server = serve_with_market_open_limits(addr, ops_addr);
    let pid = server.0.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !net::ready(ops_addr) {
        assert!(Instant::now() < deadline, "server never became ready");
        std::thread::yield_now();
    }

    // Steady subscribers, connected before the herd, read throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let out_of_order = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let steady = steady_subscribers(addr, &stop, &out_of_order, &received);

    let tally = Arc::new(Tally::default());
    let (clients, herd_took, rss_max) = herd(addr, pid, &tally);
    let rx_before_stop = received.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let steady_drops: u64 = steady.into_iter().map(|t| t.join().unwrap()).sum();

    eprintln!(
        "herd: {HERD} logged on in {:.2} s; refused {} times; server RSS max {} MiB; steady received {}",
        herd_took.as_secs_f64(),
        tally.refused.load(Ordering::Relaxed),
        rss_max / 1024,
        rx_before_stop
    );
    assert_eq!(clients.len(), HERD);
    assert_eq!(tally.logged_on.load(Ordering::Relaxed), HERD as u64);
    assert!(
        tally.refused.load(Ordering::Relaxed) > 0,
        "admission never pushed back"
    );
    assert_eq!(
        tally.refused_without_retry.load(Ordering::Relaxed),
        0,
        "a reject without retryAfterMs"
    );
    assert_eq!(
        out_of_order.load(Ordering::Relaxed),
        0,
        "a steady subscriber saw a gap"
    );
    assert_eq!(steady_drops, 0, "a steady subscriber lost its session");
    assert!(rx_before_stop > 0);
    assert!(
        rss_max > 0 && rss_max < RSS_BOUND_KIB,
        "server RSS {rss_max} KiB"
    );
    let mut server = server;
    assert!(
        matches!(server.0.try_wait(), Ok(None)),
        "server died during the herd"
    );
    drop(clients);
}
