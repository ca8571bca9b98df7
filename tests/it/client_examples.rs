//! The Rust client's examples (`examples/`) run against the real binary
//! (`pricewire serve` as a child process, real TCP on loopback): each
//! example's `run` is compiled into this test from its own file, so the
//! code a reader copies is the code tested.
//!
//! - `subscriber`: prices with their sequence status; a restarted server
//!   is reported as `resync: new stream` on every symbol, never `resumed`.
//! - `requests`: rounds of snapshot, history and symbol-list requests
//!   while prices stream; every round answered, no gap among the prices.
//! - `bridge`: quotes pushed into the provider ingest are the prices a
//!   raw-tier subscriber sees (the bridge being the only provider).
//!
//! Every wait is a bounded wait on a line of the example's output or on a
//! condition; nothing sleeps, no verdict depends on the host's speed.

use crate::util::net;

#[allow(dead_code)] // `main` and the flag parsing are the example's own
#[path = "../../examples/subscriber.rs"]
mod subscriber;

#[allow(dead_code)]
#[path = "../../examples/requests.rs"]
mod requests;

#[allow(dead_code)]
#[path = "../../examples/bridge.rs"]
mod bridge;

use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use pricewire::client::{Client, ClientConfig, Event};
use pricewire::wire::SubscribeStatus;

/// The ports of one server: subscribers, provider ingest, ops.
#[derive(Clone, Copy)]
struct Ports {
    listen: SocketAddr,
    feed: SocketAddr,
    ops: SocketAddr,
}

impl Ports {
    fn free() -> Self {
        Ports {
            listen: net::free_addr(),
            feed: net::free_addr(),
            ops: net::free_addr(),
        }
    }
}

/// `pricewire serve` on `ports`, ready; `synthetic`: with its synthetic
/// feed (else prices come only from the ingest listener).
fn serve(ports: Ports, synthetic: bool) -> net::Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.arg("serve")
        .args(["--report-interval-ms", "60000", "--drain-delay-ms", "0"])
        .args(["--listen", &ports.listen.to_string()])
        .args(["--feed-listen", &ports.feed.to_string()])
        .args(["--ops-listen", &ports.ops.to_string()]);
    if synthetic {
        cmd.args(["--synthetic-rate", "2000"]);
    } else {
        cmd.arg("--no-synthetic");
    }
    net::start_ready(&mut cmd, ports.ops)
}

/// An example's output, one line per message, readable from the test.
struct Lines(Sender<String>, Vec<u8>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.1.extend_from_slice(buf);
        while let Some(i) = self.1.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.1.drain(..=i).collect();
            let text = String::from_utf8_lossy(&line[..i]).into_owned();
            // The test may have stopped listening: the line is not needed.
            let _ = self.0.send(text);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Waits up to `within` for a line that `pred` accepts; panics with the
/// lines seen meanwhile otherwise.
fn expect_line(
    rx: &Receiver<String>,
    within: Duration,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if pred(&line) => return line,
            Ok(line) => {
                seen.push(line);
                if seen.len() > 40 {
                    seen.remove(0);
                }
            }
            Err(_) => panic!("no line {what} within {within:?}; last lines: {seen:#?}"),
        }
    }
}

const WITHIN: Duration = Duration::from_secs(60);

#[test]
fn subscriber_reports_a_restarted_server_as_a_new_stream_on_every_symbol() {
    let ports = Ports::free();
    let first = serve(ports, true);
    let listen = ports.listen.to_string();
    let args =
        subscriber::Args::try_parse_from(["subscriber", "--connect", &listen, "EURUSD", "GBPUSD"])
            .unwrap();
    let (tx, rx) = channel();
    let stop = Arc::new(AtomicBool::new(false));
    let run = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || subscriber::run(&args, &mut Lines(tx, Vec::new()), &stop))
    };
    expect_line(&rx, WITHIN, "logon", |l| l.starts_with("logon session="));
    for name in ["EURUSD", "GBPUSD"] {
        let ok = format!("subscribed {name} ok");
        expect_line(&rx, WITHIN, &ok, |l| l == ok);
    }
    let snapshot = expect_line(&rx, WITHIN, "a first snapshot", |l| {
        l.ends_with(" snapshot")
    });
    assert!(snapshot.starts_with("price "), "{snapshot}");
    expect_line(&rx, WITHIN, "an in-order update", |l| {
        l.ends_with(" in-order")
    });

    drop(first);
    let _second = serve(ports, true);
    expect_line(&rx, WITHIN, "the lost session", |l| {
        l.starts_with("disconnected (")
    });
    expect_line(&rx, WITHIN, "a logon to the new server", |l| {
        l.starts_with("logon session=") && l.contains("reconnects=1")
    });
    let mut new_streams = Vec::new();
    while new_streams.len() < 2 {
        let line = expect_line(&rx, WITHIN, "a resync on the new stream", |l| {
            l.starts_with("price ") && !l.ends_with(" in-order")
        });
        assert!(
            line.ends_with(" resync: new stream"),
            "never resumed: {line}"
        );
        let name = line.split_whitespace().nth(1).unwrap().to_string();
        if !new_streams.contains(&name) {
            new_streams.push(name);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let sum = run.join().unwrap().unwrap();
    assert!(
        sum.new_streams >= 2 && sum.resyncs >= sum.new_streams,
        "{sum:?}"
    );
    assert_eq!((sum.resumed, sum.gaps), (0, 0), "{sum:?}");
    assert!(sum.disconnects >= 1 && sum.prices > 2, "{sum:?}");
    expect_line(&rx, WITHIN, "the summary", |l| {
        l.starts_with("summary prices=")
    });
}

#[test]
fn requests_example_has_every_round_answered_and_no_gap_among_prices() {
    let ports = Ports::free();
    let _server = serve(ports, true);
    let listen = ports.listen.to_string();
    let args = requests::Args::try_parse_from([
        "requests",
        "--connect",
        &listen,
        "--every",
        "20",
        "--rounds",
        "6",
        "--deadline-ms",
        "30000",
        "EURUSD",
        "GBPUSD",
        "USDJPY",
    ])
    .unwrap();
    let mut out = Vec::new();
    let sum = requests::run(&args, &mut out, &AtomicBool::new(false)).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(sum.rounds, 6, "{text}");
    assert_eq!(sum.gaps, 0, "{text}");
    assert_eq!(sum.expired, 0, "{text}");
    // One snapshot, one history and one symbol list per round (a later
    // round may have had some answered before the sixth was complete).
    assert!(sum.answers.iter().all(|&n| n >= 6), "{sum:?}\n{text}");
    assert!(sum.prices >= 6 * 20, "{sum:?}");
    let snapshot = text
        .lines()
        .find(|l| l.starts_with("answer snapshot"))
        .unwrap();
    for name in ["EURUSD@", "GBPUSD@", "USDJPY@"] {
        assert!(snapshot.contains(name), "{snapshot}");
    }
    assert!(
        text.lines().last().unwrap().starts_with("summary prices="),
        "{text}"
    );
}

#[test]
fn bridge_quotes_are_the_prices_a_raw_subscriber_sees() {
    let ports = Ports::free();
    let _server = serve(ports, false);
    let mut watcher = Client::connect(ClientConfig::new(ports.listen, "demo", "demo")).unwrap();
    let rid = watcher.request_symbols(2_000_000, false).unwrap();
    let Some(Event::SymbolDirectory { tiers, .. }) = watcher.await_response(rid, WITHIN).unwrap()
    else {
        panic!("no SymbolDirectory");
    };
    let raw = tiers.iter().find(|t| t.name.as_str() == Some("raw"));
    let raw = raw.expect("the demo account has a raw tier").tier_id;
    watcher.subscribe_names(raw, &["EURUSD"]).unwrap();

    let feed = ports.feed.to_string();
    let args = bridge::Args::try_parse_from([
        "bridge",
        "--feed",
        &feed,
        "--rate-per-s",
        "200",
        "--count",
        "40",
        "EURUSD=1.08000",
    ])
    .unwrap();
    let mut out = Vec::new();
    let sum = bridge::run(&args, &mut out, &AtomicBool::new(false)).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        (sum.batches, sum.quotes.len(), sum.rejects),
        (40, 40, 0),
        "{text}"
    );
    assert!(text.starts_with("logon provider=0\n"), "{text}");
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("summary batches=40"),
        "{text}"
    );
    let sent: Vec<(i64, i64)> = sum.quotes.iter().map(|&(_, b, a)| (b, a)).collect();
    assert!(
        sent.iter().all(|&(b, a)| a - b == 4),
        "--spread-points 4: {sent:?}"
    );

    // Every price the subscriber sees is one the bridge sent, up to its last.
    let last = *sent.last().unwrap();
    let deadline = Instant::now() + WITHIN;
    let mut seen = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "the last quote {last:?} never arrived ({seen} prices)"
        );
        match watcher.next_event(left).unwrap() {
            Some(Event::Price(p)) => {
                let got = (p.body.bid, p.body.ask);
                assert!(sent.contains(&got), "{got:?} was never quoted: {sent:?}");
                seen += 1;
                if got == last {
                    break;
                }
            }
            Some(Event::SubscribeResponse { results, .. }) => {
                assert_eq!(results[0].status, SubscribeStatus::OK);
            }
            _ => {}
        }
    }
}
