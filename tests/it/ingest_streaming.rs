//! A streaming provider bridge is read between chunks of its host's long
//! turns, even when the last of those reads found its socket empty.
//!
//! With `--threading shared` the ingest listener is a task of gateway
//! shard 0, whose turn writes to thousands of connections; the host runs
//! [`HostedTask::between`] every few writes so quotes do not wait for the
//! whole turn. A feed that sends in bursts is often empty at one `between`
//! and full at the next: when an empty read took the bridge out of the
//! `between` reads, its quotes waited for the next poll, a whole turn
//! (120–280 ms with 5,000 subscribers per shard; the standalone server's
//! price table then aged past the fan-out's bound, issue #28).
//!
//! This test is the host: it polls until the bridge has logged on and
//! streamed a quote, then stops polling — a turn that never ends — and
//! calls only `between`, once with the socket empty, then after the
//! bridge's next quote until the quote reaches the feed ring.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use mio::{Events, Poll};
use pricewire::clock::monotonic_ns;
use pricewire::config::Config;
use pricewire::feed::bridge::Bridge;
use pricewire::feed::ingest::{self, IngestConfig};
use pricewire::model::Tick;
use pricewire::runtime::hosting::Readiness;
use pricewire::runtime::{Doorbell, FeedPort, Supervisor, WaitStrategy};

const CONFIG: &str = r#"
# Clear tokens: a loopback test (docs/security.md).
insecure_plain_tokens = true
[[providers]]
name = "bridge-a"
kind = "ingest"
token = "secret-a"
"#;

const BASE: usize = 1 << 20;

fn quote(symbol: u16, bid: i64) -> Tick {
    Tick {
        symbol,
        bid,
        ask: bid + 8,
        bid_size: 1_000_000,
        ask_size: 1_000_000,
        provider_time_ns: 1_700_000_000_000_000_000,
        ..Tick::EMPTY
    }
}

/// Runs `step` until the ring holds a tick with bid `bid` (true) or 5 s
/// passed (false). (The bridge stays streaming for one heartbeat
/// interval, 1 s, after its first quote: the second is sent at once.)
fn until_tick(ring: &mut rtrb::Consumer<Tick>, bid: i64, mut step: impl FnMut()) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        step();
        while let Ok(t) = ring.pop() {
            if t.bid == bid {
                return true;
            }
        }
    }
    false
}

#[test]
fn a_streaming_bridge_is_read_between_chunks_of_a_turn_after_an_empty_read() {
    let config = Config::parse(CONFIG, 0).unwrap();
    let sym = config.table.by_name("EURUSD").unwrap().id;
    let cfg = IngestConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        default_token: "unused".into(),
        wait: WaitStrategy::Park,
        cpus: Default::default(),
        tls: None,
        auth: pricewire::auth::AuthLimits::feed_default(),
    };
    let (port, mut ring) = FeedPort::new(4096, 0, Doorbell::new());
    let supervisor = Supervisor::new();
    let (handle, mut task) =
        ingest::hosted(cfg, Arc::new(config.table.clone()), port, &supervisor).unwrap();
    let mut poll = Poll::new().unwrap();
    task.register(poll.registry(), BASE).unwrap();

    let addr = handle.local_addr;
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let bridge = thread::spawn(move || {
        let mut b = Bridge::connect(addr, 0, "secret-a", Duration::from_secs(5)).unwrap();
        b.send(&[quote(sym, 100_000)]).unwrap();
        // The host's long turn has begun and found the socket empty.
        go_rx.recv().unwrap();
        b.send(&[quote(sym, 100_001)]).unwrap();
        // Kept open until the host is done.
        let _ = go_rx.recv();
    });

    // An ordinary host: poll, route events, turn.
    let mut events = Events::with_capacity(64);
    let polled = until_tick(&mut ring, 100_000, || {
        poll.poll(&mut events, Some(Duration::from_millis(10)))
            .unwrap();
        for e in events.iter() {
            let r = Readiness {
                readable: e.is_readable(),
                writable: e.is_writable(),
                closed: e.is_read_closed() || e.is_error(),
            };
            task.on_event(e.token().0 - BASE, r);
        }
        task.turn(monotonic_ns());
    });
    assert!(
        polled,
        "the first quote reached the ring through the poller"
    );

    // A turn that does not end: no poll, only `between`.
    task.between(monotonic_ns());
    go_tx.send(()).unwrap();
    let between = until_tick(&mut ring, 100_001, || {
        task.between(monotonic_ns());
        // A host's turn does other work between these calls.
        thread::yield_now();
    });
    assert!(
        between,
        "the quote sent during the turn was read by `between` alone"
    );
    drop(go_tx);
    bridge.join().unwrap();
    drop(task);
    handle.stop();
}
