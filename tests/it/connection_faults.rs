//! Fault isolation per connection, on the real binary: with the drill
//! switch `PRICEWIRE_FAULT_PANIC=conn`, a connection that names the drill
//! name panics inside its own processing — a subscriber Logon (shard), a
//! ProviderLogon (ingest listener), a PROXY v2 header (acceptor). Each
//! such connection must be closed and counted in
//! `pricewire_connection_faults_total{listener,stage}`, while terminals
//! already connected keep their prices with no sequence gap, new
//! connections are served, `/livez` stays 200 and the process runs on.

use crate::util::net;
use crate::util::server;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use pricewire::client::{Client, ClientConfig, Event, SeqStatus};
use pricewire::model::price_flags::CONFLATED;
use pricewire::runtime::drill::{DRILL_NAME, DRILL_PROXY_PORT};
use pricewire::wire::{self, OwnedMessage, TIER_ACCOUNT_DEFAULT};
use server::{Raw, RawRead};

/// Faulting connections per case.
const FAULTS: u64 = 5;
const ANSWER: Duration = Duration::from_secs(10);

struct Serve {
    server: net::Server,
    ops: SocketAddr,
    listen: SocketAddr,
    feed: SocketAddr,
}

/// Starts the server on free ports, trying new ones (twice at most) if it
/// exits before it is ready: another test may take a port between its
/// pick and the bind.
fn serve(threading: &str, extra: &[&str]) -> Serve {
    let mut tries = 0;
    loop {
        match try_serve(threading, extra) {
            Ok(s) => return s,
            Err(status) if tries < 2 => {
                eprintln!("server exited before it was ready ({status}): new ports");
                tries += 1;
            }
            Err(status) => panic!("server exited before it was ready ({status}), 3 times"),
        }
    }
}

fn try_serve(threading: &str, extra: &[&str]) -> Result<Serve, std::process::ExitStatus> {
    let (ops, listen, feed) = (net::free_addr(), net::free_addr(), net::free_addr());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.arg("serve")
        .args(["--threading", threading, "--synthetic-rate", "2000"])
        .args(["--report-interval-ms", "600000"])
        .args([
            "--ops-listen",
            &ops.to_string(),
            "--listen",
            &listen.to_string(),
        ])
        .args(["--feed-listen", &feed.to_string()])
        .args(extra)
        .env("PRICEWIRE_FAULT_PANIC", "conn")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Ok(Serve {
        server: net::try_start_ready(&mut cmd, ops)?,
        ops,
        listen,
        feed,
    })
}

impl Serve {
    fn faults(&self, listener: &str, stage: &str) -> u64 {
        let body = net::http_body(self.ops, "/metrics").unwrap_or_default();
        let key = format!(
            "pricewire_connection_faults_total{{listener=\"{listener}\",stage=\"{stage}\"}} "
        );
        body.lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    }

    fn assert_alive(&mut self) {
        assert!(
            self.server.0.try_wait().unwrap().is_none(),
            "the process exited"
        );
        assert_eq!(net::http_status(self.ops, "/livez"), Some(200), "/livez");
    }
}

/// A terminal on its own thread, counting in-order prices and noting
/// anything else (a gap, an error, a disconnect).
struct Terminal {
    stop: Arc<AtomicBool>,
    prices: Arc<AtomicU64>,
    thread: JoinHandle<Vec<String>>,
}

impl Terminal {
    fn start(addr: SocketAddr) -> Terminal {
        let mut c = Client::connect(ClientConfig::new(addr, "demo", "demo")).unwrap();
        c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD", "GBPUSD"])
            .unwrap();
        let (stop, prices) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (s, p) = (stop.clone(), prices.clone());
        let thread = std::thread::spawn(move || {
            let mut problems = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match c.next_event(Duration::from_millis(50)) {
                    Ok(Some(Event::Price(price))) => match price.seq {
                        SeqStatus::InOrder => {
                            p.fetch_add(1, Ordering::Relaxed);
                        }
                        SeqStatus::Reset => {}
                        other => problems.push(format!("{other:?}")),
                    },
                    Ok(Some(Event::SubscribeResponse { .. }) | None) => {}
                    Ok(Some(other)) => problems.push(format!("{other:?}")),
                    Err(e) => problems.push(e.to_string()),
                }
            }
            problems
        });
        let t = Terminal {
            stop,
            prices,
            thread,
        };
        t.wait_for(20);
        t
    }

    fn wait_for(&self, more: u64) {
        let target = self.prices.load(Ordering::Relaxed) + more;
        let ok = server::wait_until(ANSWER, || self.prices.load(Ordering::Relaxed) >= target);
        assert!(ok, "a terminal stopped receiving prices");
    }

    fn finish(self) {
        self.wait_for(20);
        self.stop.store(true, Ordering::Relaxed);
        let problems = self.thread.join().unwrap();
        assert!(
            problems.is_empty(),
            "a terminal was disturbed: {problems:?}"
        );
    }
}

/// Sends `first` on a fresh connection and reads to its close: the
/// faulting connection must be closed by the server.
fn faulting(mut r: Raw, first: impl FnOnce(&mut Raw)) {
    first(&mut r);
    loop {
        match r.next(ANSWER) {
            RawRead::Closed => return,
            RawRead::Msg(_) => {}
            RawRead::Timeout => panic!("the faulting connection was not closed"),
        }
    }
}

fn subscriber_logons_that_panic_close_only_themselves(threading: &str) {
    let mut s = serve(threading, &["--shards", "2"]);
    let terminals: Vec<Terminal> = (0..3).map(|_| Terminal::start(s.listen)).collect();
    for _ in 0..FAULTS {
        faulting(Raw::connect(s.listen), |r| {
            r.send_logon(DRILL_NAME, "x", 1000)
        });
        s.assert_alive();
    }
    assert_eq!(s.faults("subscriber", "shard"), FAULTS);
    // New terminals are served after the faults, on every shard.
    let late: Vec<Terminal> = (0..2).map(|_| Terminal::start(s.listen)).collect();
    for t in terminals.into_iter().chain(late) {
        t.finish();
    }
    s.assert_alive();
}

#[test]
fn subscriber_logons_that_panic_close_only_themselves_shared() {
    subscriber_logons_that_panic_close_only_themselves("shared");
}

#[test]
fn subscriber_logons_that_panic_close_only_themselves_dedicated() {
    subscriber_logons_that_panic_close_only_themselves("dedicated");
}

/// A provider bridge for `provider_id` that logs on and answers
/// heartbeats (one session per id).
fn good_bridge(feed: SocketAddr, provider_id: u16) -> Raw {
    let mut r = Raw::connect(feed);
    let logon = wire::ProviderLogon {
        provider_id,
        token: b"demo-feed",
    };
    r.send_with(|b| wire::encode_provider_logon(b, &logon));
    match r.next(ANSWER) {
        RawRead::Msg(OwnedMessage::LogonAccepted(_)) => r,
        other => panic!("the good bridge was refused: {other:?}"),
    }
}

fn heartbeat_answered(r: &mut Raw) -> bool {
    r.send_with(wire::encode_heartbeat);
    r.until(ANSWER, |m| matches!(m, OwnedMessage::Heartbeat))
        .is_some()
}

fn provider_logons_that_panic_close_only_themselves(threading: &str) {
    let mut s = serve(threading, &[]);
    let terminal = Terminal::start(s.listen);
    let mut bridge = good_bridge(s.feed, 1);
    for _ in 0..FAULTS {
        faulting(Raw::connect(s.feed), |r| {
            let logon = wire::ProviderLogon {
                provider_id: 2,
                token: DRILL_NAME.as_bytes(),
            };
            r.send_with(|b| wire::encode_provider_logon(b, &logon));
        });
        s.assert_alive();
    }
    assert_eq!(s.faults("feed", "ingest"), FAULTS);
    assert!(
        heartbeat_answered(&mut bridge),
        "the good bridge was disturbed"
    );
    let mut late = good_bridge(s.feed, 0);
    assert!(heartbeat_answered(&mut late));
    terminal.finish();
    s.assert_alive();
}

#[test]
fn provider_logons_that_panic_close_only_themselves_hosted() {
    provider_logons_that_panic_close_only_themselves("shared");
}

#[test]
fn provider_logons_that_panic_close_only_themselves_own_thread() {
    provider_logons_that_panic_close_only_themselves("dedicated");
}

/// A raw connection that sent a PROXY v2 header naming client `port`.
fn proxied(listen: SocketAddr, port: u16) -> Raw {
    let client: SocketAddr = ([192, 0, 2, 7], port).into();
    let header = pricewire::runtime::proxy::header::encode(Some((client, listen)), &[]).unwrap();
    let mut r = Raw::connect(listen);
    r.send(&header);
    r
}

/// A proxied terminal read on a thread: its in-order updates so far, and
/// what went wrong once stopped.
struct Watched {
    in_order: Arc<AtomicU64>,
    thread: JoinHandle<Vec<String>>,
}

fn watch_prices(mut r: Raw, stop: Arc<AtomicBool>) -> Watched {
    let in_order = Arc::new(AtomicU64::new(0));
    let n = in_order.clone();
    let thread = std::thread::spawn(move || {
        let (mut last, mut problems): (Option<u64>, Vec<String>) = (None, Vec::new());
        while !stop.load(Ordering::Relaxed) {
            match r.next(Duration::from_millis(100)) {
                RawRead::Msg(OwnedMessage::PriceSnapshot(p)) => last = Some(p.body.seq),
                RawRead::Msg(OwnedMessage::PriceUpdate(p)) => {
                    let expected = last.map(|s| s + 1);
                    if expected.is_some_and(|e| p.seq == e) || p.flags & CONFLATED != 0 {
                        n.fetch_add(1, Ordering::Relaxed);
                    } else {
                        problems.push(format!("seq {} after {last:?}", p.seq));
                    }
                    last = Some(p.seq);
                }
                RawRead::Msg(_) | RawRead::Timeout => {}
                RawRead::Closed => {
                    problems.push("closed".into());
                    break;
                }
            }
        }
        problems
    });
    Watched { in_order, thread }
}

impl Watched {
    fn count(&self) -> u64 {
        self.in_order.load(Ordering::Relaxed)
    }
}

fn logged_on(mut r: Raw) -> Raw {
    r.send_logon("demo", "demo", 1000);
    let accepted = r.until(ANSWER, |m| matches!(m, OwnedMessage::LogonAccepted(_)));
    assert!(accepted.is_some(), "a proxied terminal was not logged on");
    r.send_with(|b| wire::encode_subscribe_names(b, 1, TIER_ACCOUNT_DEFAULT, ["EURUSD"]));
    r
}

#[test]
fn proxy_headers_that_panic_close_only_their_connection() {
    let proxy = ["--proxy-protocol", "--proxy-from", "127.0.0.1/32"];
    let mut s = serve("shared", &proxy);
    let stop = Arc::new(AtomicBool::new(false));
    let steady = watch_prices(logged_on(proxied(s.listen, 40_000)), stop.clone());
    assert!(
        server::wait_until(ANSWER, || steady.count() >= 5),
        "no prices"
    );
    for _ in 0..FAULTS {
        faulting(proxied(s.listen, DRILL_PROXY_PORT), |_| {});
        s.assert_alive();
    }
    assert_eq!(s.faults("subscriber", "acceptor"), FAULTS);
    let before = steady.count();
    // A connection after the faults is admitted and served.
    let late = watch_prices(logged_on(proxied(s.listen, 40_001)), stop.clone());
    let flowing = || late.count() >= 5 && steady.count() >= before + 5;
    assert!(
        server::wait_until(ANSWER, flowing),
        "prices stopped after the faults"
    );
    stop.store(true, Ordering::Relaxed);
    for (who, t) in [("steady", steady), ("late", late)] {
        let problems = t.thread.join().unwrap();
        assert!(
            problems.is_empty(),
            "{who} terminal disturbed: {problems:?}"
        );
    }
    s.assert_alive();
}

/// Connects and logs on as the demo account (raw).
fn raw_logon(listen: SocketAddr) -> Raw {
    let mut r = Raw::connect(listen);
    r.send_logon("demo", "demo", 1000);
    let accepted = r.until(ANSWER, |m| matches!(m, OwnedMessage::LogonAccepted(_)));
    assert!(accepted.is_some(), "not logged on");
    r
}

/// The symbol of a price message.
fn price_symbol(m: &OwnedMessage) -> Option<u16> {
    match m {
        OwnedMessage::PriceUpdate(p) => Some(p.symbol_id),
        OwnedMessage::PriceSnapshot(p) => Some(p.body.symbol_id),
        _ => None,
    }
}

/// A fault in the middle of a Subscribe — after some of its symbols were
/// added to the shard's index, before the rest — must take every one of
/// them out with the connection: over generated rounds (seeded), each a
/// faulting connection with a random set of symbols before the drill name,
/// then a clean connection in the same shard (the freed slot is reused)
/// subscribed to USDJPY alone must receive USDJPY prices and nothing else.
/// The binary (a debug build) also checks the whole index against every
/// connection after each discard, and would die on a mismatch.
#[test]
fn subscriptions_cut_by_a_fault_are_taken_out_whole() {
    use rand::{seq::SliceRandom, Rng, SeedableRng};
    const POOL: [&str; 6] = ["EURUSD", "GBPUSD", "USDCHF", "AUDUSD", "USDCAD", "NZDUSD"];
    const USDJPY: u16 = 2;
    let mut s = serve("shared", &["--shards", "1"]);
    let terminal = Terminal::start(s.listen);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(26);
    let rounds = 8;
    for round in 0..rounds {
        let k = rng.gen_range(1..=POOL.len());
        let mut names: Vec<&str> = POOL.choose_multiple(&mut rng, k).copied().collect();
        names.push(DRILL_NAME);
        faulting(raw_logon(s.listen), |r| {
            let names = names.clone();
            r.send_with(|b| wire::encode_subscribe_names(b, 1, TIER_ACCOUNT_DEFAULT, names))
        });
        let mut clean = raw_logon(s.listen);
        clean.send_with(|b| wire::encode_subscribe_names(b, 1, TIER_ACCOUNT_DEFAULT, ["USDJPY"]));
        let mut usdjpy = 0;
        let mut others = Vec::new();
        let got = clean.until(ANSWER, |m| {
            match price_symbol(m) {
                Some(USDJPY) => usdjpy += 1,
                Some(other) => others.push(other),
                None => {}
            }
            usdjpy >= 10
        });
        assert!(
            got.is_some(),
            "round {round}: the clean connection got no USDJPY prices"
        );
        assert!(
            others.is_empty(),
            "round {round} ({names:?}): leaked {others:?}"
        );
        s.assert_alive();
    }
    assert_eq!(s.faults("subscriber", "shard"), rounds);
    terminal.finish();
    s.assert_alive();
}
