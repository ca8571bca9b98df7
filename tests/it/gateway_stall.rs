//! Issue #18 item 1 against the real binary: the server is stopped
//! (SIGSTOP) for 6 s while 10 subscribers heartbeat every 500 ms (server
//! dead interval 1.5 s); their heartbeats wait in the socket buffers. After
//! SIGCONT no subscriber is disconnected and none sees a sequence gap: the
//! server's stall is its own silence, not theirs.

use crate::util::wait;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, Event, SeqStatus};
use pricewire::wire::TIER_ACCOUNT_DEFAULT;

use crate::util::net;

const SUBSCRIBERS: usize = 10;
const STOP_FOR: Duration = Duration::from_secs(6);
/// Bound of each wait on a condition.
const WAIT: Duration = Duration::from_secs(8);

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        // A stopped child cannot die of SIGKILL until continued.
        net::signal(self.0.id(), "-CONT");
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server() -> (Server, SocketAddr, SocketAddr) {
    let (addr, ops) = (net::free_addr(), net::free_addr());
    let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["serve", "--synthetic-rate", "500"])
        .args(["--report-interval-ms", "60000", "--drain-delay-ms", "0"])
        .args(["--listen", &addr.to_string()])
        .args(["--ops-listen", &ops.to_string(), "--shards", "1"])
        .env("RUST_LOG", "warn")
        .env_remove("HOSTNAME")
        .stdout(Stdio::null())
        .spawn()
        .expect("start pricewire");
    let server = Server(child);
    wait::expect(WAIT, "server ready", || {
        net::http_get(ops, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    });
    (server, addr, ops)
}

/// What one subscriber saw.
#[derive(Default)]
struct Seen {
    prices: AtomicU64,
    gaps: AtomicU64,
    disconnects: AtomicU64,
}

fn subscriber(addr: SocketAddr, seed: u64, stop: Arc<AtomicBool>) -> (Arc<Seen>, JoinHandle<()>) {
    let mut cfg = ClientConfig::new(addr, "demo", "demo");
    cfg.rng_seed = Some(seed);
    // The server cuts after 3 x 500 ms of silence; the client is patient
    // with the stopped server (its own dead-peer rule is not under test).
    cfg.heartbeat_ms = 500;
    cfg.dead_after_heartbeats = 100;
    let mut c = Client::connect(cfg).expect("connect and log on");
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
                Ok(Some(Event::Disconnected { cause, .. })) => {
                    eprintln!("subscriber {seed} disconnected: {cause:?}");
                    s.disconnects.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {}
                Err(e) => panic!("subscriber {seed}: {e:?}"),
            }
        }
    });
    (seen, t)
}

#[test]
fn a_six_second_sigstop_disconnects_no_heartbeating_subscriber() {
    let started = Instant::now();
    let (server, addr, ops) = start_server();
    let pid = server.0.id();
    let stop = Arc::new(AtomicBool::new(false));
    let subs: Vec<_> = (0..SUBSCRIBERS as u64)
        .map(|k| subscriber(addr, k, stop.clone()))
        .collect();
    wait::expect(WAIT, "every subscriber receiving", || {
        subs.iter()
            .all(|(s, _)| s.prices.load(Ordering::Relaxed) > 0)
    });

    net::signal(pid, "-STOP");
    // The drill itself: the server stays stopped this long (not a wait
    // for a condition).
    std::thread::sleep(STOP_FOR);
    let before: Vec<u64> = subs
        .iter()
        .map(|(s, _)| s.prices.load(Ordering::Relaxed))
        .collect();
    net::signal(pid, "-CONT");

    // Past the first sweeps after the stall: every subscriber receives
    // again, and the server measured the stall.
    wait::expect(WAIT, "every subscriber receiving after the stop", || {
        subs.iter()
            .zip(&before)
            .all(|((s, _), b)| s.prices.load(Ordering::Relaxed) >= b + 50)
    });
    wait::expect(WAIT, "the stall counted", || {
        net::metric_sum(ops, "pricewire_shard_stalls_total") >= 1.0
    });
    stop.store(true, Ordering::Relaxed);
    let (mut disconnects, mut gaps) = (0, 0);
    for (s, t) in subs {
        t.join().expect("subscriber thread");
        disconnects += s.disconnects.load(Ordering::Relaxed);
        gaps += s.gaps.load(Ordering::Relaxed);
    }
    let max_stall = net::metric_sum(ops, "pricewire_shard_max_stall_seconds");
    eprintln!(
        "stall: max {max_stall:.3} s measured; {disconnects} disconnects, {gaps} gaps; took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(disconnects, 0, "a subscriber was disconnected");
    assert_eq!(gaps, 0, "a subscriber saw a sequence gap");
    assert!(max_stall >= 5.0, "the 6-s stop measured as {max_stall} s");
    assert!(started.elapsed() < Duration::from_secs(30));
}
