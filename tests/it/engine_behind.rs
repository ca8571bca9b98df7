//! Fresh or flagged when a stage stops: the real binary's engine thread
//! (fed by the synthetic feed), or its provider listener's (fed by a
//! bridge on the ingest port), is stalled by the stall drill
//! (`PRICEWIRE_FAULT_STALL`) for 4 s while its shard runs on. The
//! invariant, checked over every price the terminals receive: no price
//! arrives unflagged while the stage is stalled past the shard's limit
//! (2 × `--price-age-max-ms`, plus an idle stage's trust and scheduling
//! slack); a terminal that subscribes during the stall gets its snapshots
//! flagged stale; one that was already watching is told its prices are
//! stale once the stall has lasted the max quote age (2 s) — with the
//! engine stopped, at the sequence it last had; and after the stall every
//! symbol of both ends unflagged (restated or newer).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, Event};
use pricewire::feed::bridge::Bridge;
use pricewire::model::{price_flags, Tick};
use pricewire::wire::TIER_ACCOUNT_DEFAULT;

use crate::util::{net, wait};

const STALL_AFTER_MS: u64 = 3_000;
const STALL_FOR_MS: u64 = 4_000;
/// Bound of each wait on a condition.
const WAIT: Duration = Duration::from_secs(15);
/// After the stall's start, by when a shard must flag: its limit (40 ms)
/// plus an idle engine's trust (100 ms) plus scheduling slack.
const FLAG_BY: Duration = Duration::from_millis(600);
const SYMBOLS: [&str; 3] = ["EURUSD", "GBPUSD", "XAUUSD"];

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// When the drill's two log lines (stall, stall over) were read.
#[derive(Default)]
struct Drill {
    start: Option<Instant>,
    end: Option<Instant>,
}

/// Clear tokens: a loopback test (docs/security.md).
const BRIDGE_CONFIG: &str = r#"
insecure_plain_tokens = true
[[providers]]
name = "bridge-a"
kind = "ingest"
token = "secret-a"
"#;

/// Which stage stalls, and what feeds the server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stalled {
    /// The engine; the synthetic feed.
    Engine,
    /// The provider listener; one bridge quoting on the ingest port.
    Listener,
}

/// The server's subscriber, ops and feed addresses.
struct Addrs {
    subscribers: SocketAddr,
    ops: SocketAddr,
    feed: SocketAddr,
}

fn start_server(stalled: Stalled, dir: &Path) -> (Server, Addrs, Arc<Mutex<Drill>>) {
    let (addr, ops, feed) = (net::free_addr(), net::free_addr(), net::free_addr());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.args(["serve", "--threading", "dedicated", "--shards", "1"])
        .args(["--report-interval-ms", "60000", "--drain-delay-ms", "0"])
        .args(["--listen", &addr.to_string()])
        .args(["--ops-listen", &ops.to_string()]);
    let target = match stalled {
        Stalled::Engine => {
            cmd.args(["--synthetic-rate", "500"]);
            "engine"
        }
        Stalled::Listener => {
            let config = dir.join("bridge.toml");
            std::fs::write(&config, BRIDGE_CONFIG).unwrap();
            cmd.args(["--config", config.to_str().unwrap()])
                .args(["--feed-listen", &feed.to_string()]);
            "ingest"
        }
    };
    let stall = format!("{target}:{STALL_AFTER_MS}:{STALL_FOR_MS}");
    let mut child = cmd
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .env("PRICEWIRE_FAULT_STALL", stall)
        .env_remove("HOSTNAME")
        .env_remove("PRICEWIRE_INGEST_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pricewire");
    let drill = Arc::new(Mutex::new(Drill::default()));
    let (d, stderr) = (drill.clone(), child.stderr.take().expect("stderr"));
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let now = Instant::now();
            let mut d = d.lock().unwrap();
            if line.contains("drill: stall over") {
                d.end.get_or_insert(now);
            } else if line.contains("drill: stage stalls") {
                d.start.get_or_insert(now);
            }
        }
    });
    let server = Server(child);
    wait::expect(WAIT, "server ready", || {
        net::http_get(ops, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    });
    let addrs = Addrs {
        subscribers: addr,
        ops,
        feed,
    };
    (server, addrs, drill)
}

/// A bridge quoting the test's symbols every 2 ms (its own pace: it
/// waits on `stop` that long), each quote a new bid, until `stop` is
/// sent or dropped; its sends block while the stalled listener reads
/// none.
fn bridge(feed: SocketAddr, stop: mpsc::Receiver<()>) -> JoinHandle<()> {
    let config = pricewire::config::Config::parse(BRIDGE_CONFIG, 0).unwrap();
    let ids: Vec<u16> = SYMBOLS
        .iter()
        .map(|s| config.table.by_name(s).unwrap().id)
        .collect();
    let mut b = Bridge::connect(feed, 0, "secret-a", WAIT).expect("bridge logon");
    std::thread::spawn(move || {
        let mut bid = 100_000;
        while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(Duration::from_millis(2))
        {
            bid += 1;
            let quote = |symbol| Tick {
                symbol,
                bid,
                ask: bid + 8,
                bid_size: 1_000_000,
                ask_size: 1_000_000,
                provider_time_ns: 1_700_000_000_000_000_000,
                ..Tick::EMPTY
            };
            let quotes: Vec<Tick> = ids.iter().map(|&s| quote(s)).collect();
            if b.send(&quotes).is_err() {
                return;
            }
        }
    })
}

/// One price a terminal received: when, which symbol, its sequence and
/// whether it was flagged stale.
#[derive(Debug, Clone, Copy)]
struct Got {
    at: Instant,
    symbol: u16,
    seq: u64,
    stale: bool,
}

fn terminal(
    addr: SocketAddr,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> (Arc<Mutex<Vec<Got>>>, JoinHandle<()>) {
    let mut cfg = ClientConfig::new(addr, "demo", "demo");
    cfg.rng_seed = Some(seed);
    let mut c = Client::connect(cfg).expect("connect and log on");
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &SYMBOLS)
        .expect("subscribe");
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let t = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match c.next_event(Duration::from_millis(20)) {
                Ok(Some(Event::Price(p))) => g.lock().unwrap().push(Got {
                    at: Instant::now(),
                    symbol: p.body.symbol_id,
                    seq: p.body.seq,
                    stale: p.body.flags & price_flags::STALE != 0,
                }),
                Ok(Some(Event::Disconnected { cause, .. })) => {
                    panic!("terminal {seed} disconnected: {cause:?}")
                }
                Ok(_) => {}
                Err(e) => panic!("terminal {seed}: {e:?}"),
            }
        }
    });
    (got, t)
}

/// The last price received per symbol.
fn last_per_symbol(got: &[Got]) -> Vec<Got> {
    let mut last: Vec<Got> = Vec::new();
    for g in got {
        match last.iter_mut().find(|l| l.symbol == g.symbol) {
            Some(l) => *l = *g,
            None => last.push(*g),
        }
    }
    last
}

#[test]
fn a_stalled_engine_flags_what_its_shard_sends_and_restates_it_after() {
    drill_a_stall(Stalled::Engine);
}

#[test]
fn a_stalled_listener_flags_what_its_shard_sends_and_restates_it_after() {
    drill_a_stall(Stalled::Listener);
}

fn drill_a_stall(stalled: Stalled) {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addrs, drill) = start_server(stalled, dir.path());
    let (addr, ops) = (addrs.subscribers, addrs.ops);
    let stop = Arc::new(AtomicBool::new(false));
    let (stop_quoting, quoting_stopped) = mpsc::channel();
    let quoting = (stalled == Stalled::Listener).then(|| bridge(addrs.feed, quoting_stopped));
    let (early, early_t) = terminal(addr, 1, stop.clone());
    wait::expect(WAIT, "the watching terminal receiving", || {
        early.lock().unwrap().len() > 10
    });
    assert!(
        drill.lock().unwrap().start.is_none(),
        "the stall began before the terminal received (a slow start)"
    );
    // The shard has seen the engine behind (the gauge is the mark's lag).
    wait::expect(WAIT, "the engine seen behind", || {
        net::metric_sum(ops, "pricewire_engine_behind_seconds") > 0.3
    });
    let (late, late_t) = terminal(addr, 2, stop.clone());
    wait::expect(
        WAIT,
        "the watching terminal told its prices are stale",
        || {
            let got = early.lock().unwrap();
            let (start, end) = {
                let d = drill.lock().unwrap();
                (d.start, d.end)
            };
            // Told while the engine was stopped, not by the engine's own
            // stale sweep once it ran again.
            let during = |at: Instant| start.is_some_and(|t| at > t) && end.is_none_or(|t| at < t);
            let told = |s: u16| got.iter().any(|g| g.symbol == s && g.stale && during(g.at));
            let symbols = last_per_symbol(&got);
            symbols.len() == SYMBOLS.len() && symbols.iter().all(|l| told(l.symbol))
        },
    );
    wait::expect(WAIT, "the stall over", || {
        drill.lock().unwrap().end.is_some()
    });
    wait::expect(
        WAIT,
        "every symbol unflagged again on both terminals",
        || {
            [&early, &late].iter().all(|t| {
                let last = last_per_symbol(&t.lock().unwrap());
                last.len() == SYMBOLS.len() && last.iter().all(|l| !l.stale)
            })
        },
    );
    stop.store(true, Ordering::Relaxed);
    early_t.join().expect("early terminal");
    late_t.join().expect("late terminal");
    drop(stop_quoting);
    if let Some(q) = quoting {
        q.join().expect("bridge");
    }

    let (start, end) = {
        let d = drill.lock().unwrap();
        (d.start.unwrap(), d.end.unwrap())
    };
    assert!(end - start >= Duration::from_millis(STALL_FOR_MS - 100));
    // The invariant over every price: none unflagged while the engine was
    // stopped past the shard's limit (the end's log line can reach this
    // test after the first fresh price, hence the margin there).
    let window = (start + FLAG_BY, end - Duration::from_millis(100));
    for (name, t) in [("early", &early), ("late", &late)] {
        let got = t.lock().unwrap();
        let live: Vec<_> = got
            .iter()
            .filter(|g| g.at > window.0 && g.at < window.1 && !g.stale)
            .collect();
        assert!(
            live.is_empty(),
            "{name}: shown live during the stall: {live:?}"
        );
    }
    // The late terminal subscribed during the stall: its snapshots were
    // flagged, then restated unflagged with the same or a newer sequence.
    let late = late.lock().unwrap();
    for s in last_per_symbol(&late) {
        let first = late.iter().find(|g| g.symbol == s.symbol).unwrap();
        assert!(first.stale, "late: first price of {} unflagged", s.symbol);
        assert!(s.seq >= first.seq);
    }
    // The watching terminal's stale prices were never older than what it
    // had; with the engine stopped they repeated its last sequence:
    // nothing new was made up. (A stalled listener's engine republishes
    // its silent provider's prices stale, with new sequences.)
    let early = early.lock().unwrap();
    let fresh_before: Vec<Got> = early
        .iter()
        .filter(|b| !b.stale && b.at < window.0)
        .copied()
        .collect();
    let last_fresh = last_per_symbol(&fresh_before);
    for g in early.iter().filter(|g| g.stale && g.at < window.1) {
        let before = last_fresh
            .iter()
            .find(|b| b.symbol == g.symbol)
            .expect("a price before the stall")
            .seq;
        match stalled {
            Stalled::Engine => assert_eq!(before, g.seq, "early: restatement {g:?}"),
            Stalled::Listener => assert!(g.seq >= before, "early: older {g:?}"),
        }
    }
    assert!(
        net::metric_sum(
            ops,
            "pricewire_table_behind_prices_total{shard=\"0\",event=\"flagged\""
        ) > 0.0
    );
    assert!(
        net::metric_sum(
            ops,
            "pricewire_table_behind_prices_total{shard=\"0\",event=\"restated\""
        ) > 0.0
    );
}
