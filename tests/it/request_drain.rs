//! `--threading shared`: a session flooding requests on shard 0 (the
//! engine's shard) is drained off it (`gateway::drain`): held until its
//! answers are in, then moved to shard 1. Real loopback TCP: every one of
//! its requests is answered exactly once, before and after the move, and a
//! subscriber that stays on shard 0 gets every price in order meanwhile.

use crate::util::server;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, Event};
use pricewire::feed::bridge::Bridge;
use pricewire::gateway::{GatewayConfig, ShardStats};
use pricewire::model::{price_flags, Tick};
use pricewire::pipeline::PipelineConfig;
use pricewire::runtime::{Threading, WaitStrategy};
use pricewire::service::Service;

// A loopback test server: a clear provider token is allowed with the switch.
const CONFIG: &str = r#"
insecure_plain_tokens = true
[[providers]]
name = "bridge-a"
kind = "ingest"
token = "secret-a"
"#;

const RAW_TIER: u8 = 0;
/// Requests the flooding client keeps outstanding.
const WINDOW: usize = 16;
/// Answers the flood must get after its move before it stops.
const AFTER_MOVE: u64 = 2_000;

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

/// What the flooding client saw.
#[derive(Default)]
struct Flood {
    sent: u64,
    /// Answers (or Rejects) per request id.
    answers: HashMap<u64, u32>,
    /// Answers that came before `marked` held.
    before: u64,
}

/// How the flooding client runs: `window` requests outstanding for
/// `symbols` until `stop`; answers that arrive once `marked` holds (shard 0
/// moved or aborted drains) are counted in `after`.
struct FloodPlan<M> {
    symbols: Vec<u16>,
    window: usize,
    marked: M,
    stop: Arc<AtomicBool>,
    after: Arc<AtomicU64>,
}

/// Sends SnapshotRequests as `plan` says, then waits (bounded) for every
/// outstanding answer.
fn flood<M: Fn() -> bool>(mut c: Client, plan: FloodPlan<M>) -> Flood {
    let mut f = Flood::default();
    let mut outstanding = 0usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let stopping = plan.stop.load(Ordering::SeqCst);
        if stopping && outstanding == 0 {
            return f;
        }
        while !stopping && outstanding < plan.window {
            let rid = c.request_snapshot(RAW_TIER, &plan.symbols, 0, false);
            f.answers.insert(rid.unwrap(), 0);
            f.sent += 1;
            outstanding += 1;
        }
        let ev = c.next_event(Duration::from_millis(50)).unwrap();
        let rid = match ev {
            Some(Event::SnapshotResponse { request_id, .. }) => request_id,
            Some(Event::Reject { request_id, .. }) => request_id,
            Some(Event::Disconnected { .. }) => panic!("flood session lost: {ev:?}"),
            _ => continue,
        };
        *f.answers
            .get_mut(&rid)
            .expect("answer to a request never sent") += 1;
        outstanding -= 1;
        if (plan.marked)() {
            plan.after.fetch_add(1, Ordering::SeqCst);
        } else {
            f.before += 1;
        }
    }
    panic!("flood answers still outstanding: {outstanding}");
}

/// Every request answered exactly once: none lost, none answered twice.
fn assert_each_answered_once(f: &Flood) {
    let lost = f.answers.values().filter(|&&n| n == 0).count();
    let doubled = f.answers.values().filter(|&&n| n > 1).count();
    assert_eq!((lost, doubled), (0, 0), "of {} requests", f.sent);
}

/// Stops the service, bounded.
fn stop_service(svc: Service) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        svc.stop();
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(20)).is_ok(),
        "stop hung"
    );
}

/// Shared threading, every session on shard 0, the subscriber spill only
/// at 100 % busy (so only a drain, at its own 20 % mark, moves anyone),
/// the per-connection and per-account request limits out of the way;
/// `drain` adjusts the gateway's settings further.
fn start(drain: impl FnOnce(&mut GatewayConfig)) -> Service {
    server::ingest_service_tuned(
        CONFIG,
        PipelineConfig {
            shards: 2,
            threading: Threading::Shared,
            ..PipelineConfig::default()
        },
        |g| {
            g.shard_wait = WaitStrategy::Park;
            g.shard0_fill = 100;
            g.shard0_spill_permille = 1000;
            g.msg_rate_per_s = 1_000_000;
            g.msg_burst = 1_000_000;
            drain(g);
        },
        |s| {
            s.requests.queue.account_rate_per_s = 1_000_000;
            s.requests.queue.account_burst = 1_000_000;
        },
    )
}

/// Reads every price of `sym` in order, no skip, no merge, publishing the
/// last bid in `seen`, until the bid in `last`; returns the count and the
/// client (still connected).
fn read_prices(
    mut sub: Client,
    sym: u16,
    seen: Arc<AtomicI64>,
    last: Arc<AtomicI64>,
) -> std::thread::JoinHandle<(u64, Client)> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        let (mut bid, mut seq, mut n) = (0i64, 0u64, 0u64);
        while bid != last.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "last quote not seen");
            match sub.next_event(Duration::from_millis(50)).unwrap() {
                Some(Event::Price(p)) if p.body.symbol_id == sym => {
                    assert_eq!(p.body.flags & price_flags::CONFLATED, 0, "merged");
                    assert!(seq == 0 || p.body.seq == seq + 1, "sequence skipped");
                    assert!(p.body.bid > bid, "out of order");
                    (bid, seq) = (p.body.bid, p.body.seq);
                    n += 1;
                    seen.store(bid, Ordering::SeqCst);
                }
                Some(Event::Disconnected { .. }) => panic!("subscriber lost"),
                _ => {}
            }
        }
        (n, sub)
    })
}

/// Sends quotes from `bid` on in batches of 20, each once the subscriber
/// has the last one (`seen`), until shard 0 has moved a drained session,
/// the flood has had [`AFTER_MOVE`] answers since (`after`) and at least
/// 200 prices went out after the move. Returns the last bid sent.
fn quote_until_moved(
    bridge: &mut Bridge,
    sym: u16,
    mut bid: i64,
    (seen, after): (&AtomicI64, &AtomicU64),
    stats0: &ShardStats,
) -> i64 {
    let moved_by = Instant::now() + Duration::from_secs(30);
    let mut moved_at = None;
    loop {
        let batch: Vec<Tick> = (1..=20).map(|k| quote(sym, bid + k)).collect();
        bridge.send(&batch).unwrap();
        bid += 20;
        let got = || seen.load(Ordering::SeqCst) == bid;
        assert!(
            server::wait_until(Duration::from_secs(10), got),
            "subscriber stuck before {bid}"
        );
        let moved = stats0.drains_moved.get() > 0;
        assert!(
            moved || Instant::now() < moved_by,
            "no drain: shard 0 busy {} per mille, aborted {}",
            stats0.busy_permille.get(),
            stats0.drains_aborted.get()
        );
        if moved {
            let since = *moved_at.get_or_insert(bid);
            if bid >= since + 200 && after.load(Ordering::SeqCst) >= AFTER_MOVE {
                return bid;
            }
        }
        let limit = moved_by + Duration::from_secs(30);
        assert!(Instant::now() < limit, "flood stalled after the move");
    }
}

#[test]
fn a_flooding_session_is_drained_off_the_engines_shard_without_losing_a_request() {
    // The move is under test, not the threshold that starts it (the
    // policy's unit tests in `gateway::drain` give it the figures): at
    // the default 20 % a flood with 16 requests in flight did not make
    // shard 0 busy enough on a host with two CPU hogs beside the test
    // (busy 5 %, no drain in 30 s). 1 % is met by any flood.
    let svc = start(|g| g.drain_busy_permille = 10);
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let gw = svc.gateway.as_ref().unwrap().local_addr;
    let eurusd = svc.config.table.by_name("EURUSD").unwrap().id;
    let stats = svc.gateway.as_ref().unwrap().shard_stats.clone();
    let mut bridge = Bridge::connect(ingest, 0, "secret-a", Duration::from_secs(5)).unwrap();
    let first = 100_000;
    bridge.send(&[quote(eurusd, first)]).unwrap();
    let mut sub = Client::connect(ClientConfig::new(gw, "demo", "demo")).unwrap();
    sub.subscribe_ids(RAW_TIER, &[eurusd]).unwrap();
    let flooder = Client::connect(ClientConfig::new(gw, "demo", "demo")).unwrap();
    assert!(server::wait_until(Duration::from_secs(5), || {
        stats[0].connections.get() == 2
    }));
    let (seen, last) = (
        Arc::new(AtomicI64::new(0)),
        Arc::new(AtomicI64::new(i64::MAX)),
    );
    let reader = read_prices(sub, eurusd, seen.clone(), last.clone());
    assert!(server::wait_until(Duration::from_secs(10), || {
        seen.load(Ordering::SeqCst) == first
    }));

    let stop = Arc::new(AtomicBool::new(false));
    let after = Arc::new(AtomicU64::new(0));
    let flood = {
        let stats0 = stats[0].clone();
        let plan = FloodPlan {
            symbols: vec![eurusd],
            window: WINDOW,
            marked: move || stats0.drains_moved.get() > 0,
            stop: stop.clone(),
            after: after.clone(),
        };
        std::thread::spawn(move || flood(flooder, plan))
    };
    let bid = quote_until_moved(&mut bridge, eurusd, first, (&seen, &after), &stats[0]);
    stop.store(true, Ordering::SeqCst);
    last.store(bid, Ordering::SeqCst);
    let f = flood.join().unwrap();
    let (prices, _sub) = reader.join().unwrap();
    let after_move = after.load(Ordering::SeqCst);

    assert_each_answered_once(&f);
    assert!(f.before > 0, "no answer before the move");
    assert!(after_move >= AFTER_MOVE);
    assert_eq!(prices as i64, bid - first + 1, "every price");
    // The flood went, the subscriber stayed with the engine.
    assert_eq!(stats[0].drains_moved.get(), 1);
    assert_eq!(stats[0].sessions_moved_out.get(), 1);
    assert_eq!(stats[0].connections.get(), 1);
    assert_eq!(stats[1].sessions_moved_in.get(), 1);
    eprintln!(
        "flood: {} sent, {} answered before the move, {} after; \
         subscriber: {prices} prices; drains aborted {}",
        f.sent,
        f.before,
        after_move,
        stats[0].drains_aborted.get()
    );
    drop(bridge);
    stop_service(svc);
}

/// Requests the flooding client keeps outstanding in the abort test: more
/// than the request path answers within the 1-ms wait.
const ABORT_WINDOW: usize = 64;
/// Aborted holds to see, and answers after them (more than the window,
/// so the session's socket was read again after its hold). One: when a
/// later hold's answers all come within the 1-ms wait the session moves
/// to shard 1, where no more holds happen (seen on a loaded CI host), so
/// more aborts cannot be waited for; `Drain::step`'s unit tests cover
/// repeated holds deterministically.
const ABORTS: u64 = 1;
const AFTER_ABORTS: u64 = 1_000;

/// A drain whose wait (1 ms here, `--shard0-drain-abort-ms`) runs out
/// before the held session's answers are in is aborted: the session is
/// read again (on shard 0, or on shard 1 if a later drain moves it), and
/// every one of its requests is answered exactly once through it all. On
/// a busy host the first hold's answers may all come within the wait, and
/// the session moves instead: then only the exactly-once promise is
/// checked here (the abort decision itself is `Drain::step`'s, unit-tested
/// with the clock given).
#[test]
fn a_hold_whose_answers_do_not_come_in_time_is_aborted_and_read_again() {
    let svc = start(|g| {
        g.drain_abort_ms = 1;
        g.drain_busy_permille = 10;
        g.drain_request_share_permille = 10;
        g.drain_min_requests = 8;
    });
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let gw = svc.gateway.as_ref().unwrap().local_addr;
    let stats = svc.gateway.as_ref().unwrap().shard_stats.clone();
    let symbols: Vec<u16> = svc
        .config
        .table
        .instruments()
        .iter()
        .map(|i| i.id)
        .take(32)
        .collect();
    let mut bridge = Bridge::connect(ingest, 0, "secret-a", Duration::from_secs(5)).unwrap();
    let quotes: Vec<Tick> = symbols.iter().map(|&s| quote(s, 100_000)).collect();
    bridge.send(&quotes).unwrap();
    let flooder = Client::connect(ClientConfig::new(gw, "demo", "demo")).unwrap();
    assert!(server::wait_until(Duration::from_secs(5), || {
        stats[0].connections.get() == 1
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let after = Arc::new(AtomicU64::new(0));
    let flood = {
        let stats0 = stats[0].clone();
        let plan = FloodPlan {
            symbols,
            window: ABORT_WINDOW,
            marked: move || stats0.drains_aborted.get() >= ABORTS || stats0.drains_moved.get() > 0,
            stop: stop.clone(),
            after: after.clone(),
        };
        std::thread::spawn(move || flood(flooder, plan))
    };
    // Held or moved: a hold whose answers all came within the 1-ms wait
    // moves the session instead (a busy host can run the worker and not
    // the shard for that long), and then no abort can follow on shard 0.
    let drained = server::wait_until(Duration::from_secs(30), || {
        stats[0].drains_aborted.get() >= ABORTS || stats[0].drains_moved.get() > 0
    });
    let aborted = stats[0].drains_aborted.get() >= ABORTS;
    if !aborted {
        eprintln!("the first hold's answers came within the wait: moved, not aborted");
    }
    assert!(
        drained,
        "aborted {}, moved {}, shard 0 busy {} per mille",
        stats[0].drains_aborted.get(),
        stats[0].drains_moved.get(),
        stats[0].busy_permille.get()
    );
    let resumed = server::wait_until(Duration::from_secs(30), || {
        after.load(Ordering::SeqCst) >= AFTER_ABORTS
    });
    stop.store(true, Ordering::SeqCst);
    let f = flood.join().unwrap();
    assert!(resumed, "the session was not read again after its holds");
    assert_each_answered_once(&f);
    // Only drains moved anyone; the aborts left the session where it was.
    assert_eq!(
        stats[0].sessions_moved_out.get(),
        stats[0].drains_moved.get()
    );
    eprintln!(
        "flood: {} sent, {} answered before the first abort, {} after; \
         drains aborted {}, moved {}",
        f.sent,
        f.before,
        after.load(Ordering::SeqCst),
        stats[0].drains_aborted.get(),
        stats[0].drains_moved.get()
    );
    drop(bridge);
    stop_service(svc);
}
