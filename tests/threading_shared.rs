//! `--threading shared`: the engine and the provider ingest listener run
//! inside gateway shard 0's thread. Real loopback TCP: bridges push quotes,
//! subscribers on both shards see every price in sequence, no engine or
//! ingest thread exists, and an orderly stop drains and ends the hosted
//! stages. Only shared-threading services run in this file.
//!
//! Owns its process: the thread check reads the names of every thread in
//! `/proc/self/task`, so no other test's service may run beside it.

// A binary of its own uses a part of the shared helpers.
#[allow(dead_code)]
#[path = "util/server.rs"]
mod server;
#[path = "util/wait.rs"]
mod wait;

use std::sync::Arc;
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, Event};
use pricewire::config::Config;
use pricewire::feed::bridge::Bridge;
use pricewire::feed::synthetic::SyntheticConfig;
use pricewire::gateway::GatewayStats;
use pricewire::model::{price_flags, Tick};
use pricewire::ops::Registry;
use pricewire::pipeline::PipelineConfig;
use pricewire::runtime::{CpuMap, Threading, WaitStrategy};
use pricewire::service::report::Totals;
use pricewire::service::{Service, ServiceConfig};

const CONFIG: &str = r#"
# Clear tokens: a loopback test (docs/security.md).
insecure_plain_tokens = true
[[providers]]
name = "bridge-a"
kind = "ingest"
token = "secret-a"
[[providers]]
name = "bridge-b"
kind = "ingest"
token = "secret-b"
"#;

const RAW_TIER: u8 = 0;
const QUOTES: i64 = 500;

fn shared_pipeline(shards: usize) -> PipelineConfig {
    PipelineConfig {
        shards,
        threading: Threading::Shared,
        ..PipelineConfig::default()
    }
}

fn start(shards: usize) -> Service {
    start_with(shards, WaitStrategy::SpinPark)
}

/// `park` is the `serve` default with shared threading.
fn start_with(shards: usize, wait: WaitStrategy) -> Service {
    server::ingest_service(CONFIG, shared_pipeline(shards), wait)
}

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

/// Names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect()
}

/// Runs `f` on a thread and waits for it at most `limit`.
fn bounded(limit: Duration, f: impl FnOnce() + Send + 'static) -> bool {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(limit).is_ok()
}

/// Collects raw-tier bids of `sym` until `last` arrives (bounded), checking
/// that sequence numbers never skip.
fn bids_until(c: &mut Client, sym: u16, last: i64) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut bids = Vec::new();
    let mut seq = 0u64;
    while Instant::now() < deadline {
        match c.next_event(Duration::from_millis(50)) {
            Ok(Some(Event::Price(p))) if p.body.symbol_id == sym => {
                if seq != 0 {
                    assert_eq!(p.body.seq, seq + 1, "sequence skipped");
                }
                seq = p.body.seq;
                bids.push(p.body.bid);
                if p.body.bid == last {
                    return bids;
                }
            }
            Ok(_) => {}
            Err(e) => panic!("subscriber: {e}"),
        }
    }
    panic!("last price {last} not seen; got {} prices", bids.len());
}

#[test]
fn ingest_and_engine_run_on_shard_zero_and_every_price_reaches_both_shards() {
    every_price_reaches_both_shards(WaitStrategy::Park);
    every_price_reaches_both_shards(WaitStrategy::SpinPark);
}

fn every_price_reaches_both_shards(wait: WaitStrategy) {
    let svc = start_with(2, wait);
    // A thread names itself when it first runs: under load the shard may
    // not have run yet, so wait (bounded) for its name to show.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut names = thread_names();
    while !names.iter().any(|n| n == "pw-shard0") && Instant::now() < deadline {
        std::thread::yield_now();
        names = thread_names();
    }
    assert!(names.iter().any(|n| n == "pw-shard0"), "{names:?}");
    assert!(
        !names.iter().any(|n| n == "pw-engine" || n == "pw-ingest"),
        "engine and ingest must be hosted by shard 0: {names:?}"
    );
    let gw = svc.gateway.as_ref().unwrap().local_addr;
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let sym = svc.config.table.by_name("EURUSD").unwrap().id;
    // The acceptor hands connections round-robin: one subscriber per shard.
    let mut subs: Vec<Client> = (0..2)
        .map(|_| {
            let mut c = Client::connect(ClientConfig::new(gw, "demo", "demo")).unwrap();
            c.subscribe_ids(RAW_TIER, &[sym]).unwrap();
            c
        })
        .collect();
    let stats = svc.gateway.as_ref().unwrap().shard_stats.clone();
    assert!(server::wait_until(Duration::from_secs(5), || {
        stats.iter().all(|s| s.connections.get() == 1)
    }));

    let mut bridge = Bridge::connect(ingest, 0, "secret-a", Duration::from_secs(5)).unwrap();
    let first = 108_000;
    // Both subscriptions are in place once the first price reached both.
    bridge.send(&[quote(sym, first)]).unwrap();
    for c in &mut subs {
        assert_eq!(bids_until(c, sym, first), vec![first]);
    }
    for k in 1..QUOTES {
        bridge.send(&[quote(sym, first + k)]).unwrap();
    }
    let last = first + QUOTES - 1;
    for c in &mut subs {
        let bids = bids_until(c, sym, last);
        // Conflation may merge updates (flagged); order never changes.
        assert!(bids.windows(2).all(|w| w[0] < w[1]), "out of order");
        assert!(bids.len() >= 2);
    }
    assert_eq!(svc.pipeline.handles.engine.ticks.get(), QUOTES as u64);

    let ingest_addr = ingest;
    assert!(
        bounded(Duration::from_secs(20), move || svc.stop()),
        "stop did not finish"
    );
    assert!(
        std::net::TcpStream::connect(ingest_addr).is_err(),
        "the hosted ingest listener is closed after stop"
    );
}

#[test]
fn headless_shared_threading_turns_the_engine_in_the_sink() {
    let config = Arc::new(Config::builtin(2));
    let mut cfg = ServiceConfig::new(config);
    cfg.synthetic = Some(SyntheticConfig {
        rate_per_s: 50_000,
        ..SyntheticConfig::default()
    });
    cfg.pipeline = shared_pipeline(2);
    let svc = Service::start(cfg).unwrap();
    let registry = Registry::new();
    svc.register_metrics(&registry).unwrap();
    assert!(!thread_names().iter().any(|n| n == "pw-engine"));
    assert!(server::wait_until(Duration::from_secs(10), || {
        let t = Totals::read(&registry.series());
        svc.sink_stats.iter().all(|s| s.prices.get() > 1_000) && t.ticks_in > 1_000
    }));
    for s in &svc.sink_stats {
        assert_eq!(s.unexplained_gaps.get(), 0);
    }
    assert!(
        bounded(Duration::from_secs(20), move || svc.stop()),
        "stop did not finish"
    );
}

#[test]
fn the_engine_cannot_be_pinned_apart_from_its_host() {
    let cfg = PipelineConfig {
        cpus: "engine=0".parse::<CpuMap>().unwrap(),
        ..shared_pipeline(1)
    };
    let err = cfg.validate().unwrap_err().to_string();
    assert!(err.contains("shard0"), "{err}");
    let dedicated = PipelineConfig {
        threading: Threading::Dedicated,
        ..cfg
    };
    assert!(dedicated.validate().is_ok());
    let small = PipelineConfig {
        feed_ring: 1024,
        ..shared_pipeline(1)
    };
    let err = small.validate().unwrap_err().to_string();
    assert!(err.contains("--feed-ring"), "{err}");
}

#[test]
fn a_burst_beyond_the_feed_ring_is_held_in_the_socket_not_dropped() {
    let pipeline = PipelineConfig {
        feed_ring: 4096,
        ..shared_pipeline(1)
    };
    let svc = server::ingest_service(CONFIG, pipeline, WaitStrategy::SpinPark);
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let eurusd = svc.config.table.by_name("EURUSD").unwrap().id;
    let gbpusd = svc.config.table.by_name("GBPUSD").unwrap().id;
    // Two bridges, 15 rings' worth between them, at once: the ingest
    // listener must stop reading while the engine (on the same thread)
    // catches up, and take both bridges in turn.
    let senders: Vec<_> = [(0u16, "secret-a", eurusd), (1, "secret-b", gbpusd)]
        .into_iter()
        .map(|(provider, token, sym)| {
            std::thread::spawn(move || {
                let burst: Vec<Tick> = (0..30_000).map(|k| quote(sym, 100_000 + k)).collect();
                let mut b =
                    Bridge::connect(ingest, provider, token, Duration::from_secs(5)).unwrap();
                b.send(&burst).unwrap();
                b
            })
        })
        .collect();
    let bridges: Vec<Bridge> = senders.into_iter().map(|t| t.join().unwrap()).collect();
    let engine = svc.pipeline.handles.engine.clone();
    assert!(
        server::wait_until(Duration::from_secs(20), || engine.ticks.get() == 60_000),
        "engine saw {} of 60000",
        engine.ticks.get()
    );
    drop(bridges);
    let (_, feed) = &svc.pipeline.handles.feeds[0];
    assert_eq!(feed.dropped.get(), 0, "nothing dropped");
    assert!(
        feed.full_waits.get() == 0,
        "the hosted listener never waits on itself"
    );
    let table = svc.pipeline.handles.table.clone();
    for sym in [eurusd, gbpusd] {
        assert_eq!(table.read(sym, RAW_TIER).unwrap().bid, 100_000 + 29_999);
    }
    assert!(bounded(Duration::from_secs(20), move || svc.stop()));
}

#[test]
fn a_bridge_that_sends_and_closes_at_once_is_read_to_the_end_and_closed() {
    // Quotes and the FIN arrive together: a short read must not be taken
    // as "drained" then, or the close would never be seen.
    let svc = start(1);
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let stats = svc.ingest.as_ref().unwrap().stats.clone();
    let sym = svc.config.table.by_name("EURUSD").unwrap().id;
    use std::sync::atomic::Ordering::Relaxed;
    for round in 1..=20u64 {
        let mut bridge = Bridge::connect(ingest, 0, "secret-a", Duration::from_secs(5)).unwrap();
        let quotes: Vec<Tick> = (0..10).map(|k| quote(sym, 100_000 + k)).collect();
        bridge.send(&quotes).unwrap();
        drop(bridge);
        assert!(
            server::wait_until(Duration::from_secs(5), || {
                stats.quotes.load(Relaxed) == round * 10 && stats.connections.load(Relaxed) == 0
            }),
            "round {round}: quotes {} connections {}",
            stats.quotes.load(Relaxed),
            stats.connections.load(Relaxed)
        );
    }
    assert!(bounded(Duration::from_secs(20), move || svc.stop()));
}

#[test]
fn a_turn_writing_to_many_sessions_runs_the_hosted_stages_between_writes() {
    let svc = start(1);
    let gw = svc.gateway.as_ref().unwrap().local_addr;
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let sym = svc.config.table.by_name("EURUSD").unwrap().id;
    let mut subs: Vec<Client> = (0..80)
        .map(|_| {
            let mut c = Client::connect(ClientConfig::new(gw, "demo", "demo")).unwrap();
            c.subscribe_ids(RAW_TIER, &[sym]).unwrap();
            c
        })
        .collect();
    let stats = svc.gateway.as_ref().unwrap().shard_stats[0].clone();
    assert!(server::wait_until(Duration::from_secs(5), || {
        stats.connections.get() == 80
    }));
    let mut bridge = Bridge::connect(ingest, 0, "secret-a", Duration::from_secs(5)).unwrap();
    let last = 200_000 + 49;
    for k in 0..50 {
        bridge.send(&[quote(sym, 200_000 + k)]).unwrap();
    }
    // Each price is written to 80 sessions in one turn: the hosted stages
    // ran between the writes, and every session still got every price.
    for c in &mut subs {
        let bids = bids_until(c, sym, last);
        assert!(bids.windows(2).all(|w| w[0] < w[1]));
    }
    assert!(
        stats.interleaves.get() > 0,
        "hosted stages never interleaved"
    );
    assert!(bounded(Duration::from_secs(20), move || svc.stop()));
}

#[test]
fn a_shard_gets_only_the_symbols_its_sessions_subscribe_to() {
    let svc = start(2);
    let gw = svc.gateway.as_ref().unwrap().local_addr;
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let eurusd = svc.config.table.by_name("EURUSD").unwrap().id;
    let gbpusd = svc.config.table.by_name("GBPUSD").unwrap().id;
    let stats = svc.gateway.as_ref().unwrap().shard_stats.clone();
    let mut bridge = Bridge::connect(ingest, 0, "secret-a", Duration::from_secs(5)).unwrap();
    // No sessions: the engine publishes, no shard takes anything.
    bridge
        .send(&[quote(eurusd, 1_000), quote(gbpusd, 2_000)])
        .unwrap();
    let engine = svc.pipeline.handles.engine.clone();
    assert!(server::wait_until(Duration::from_secs(5), || {
        engine.published.get() >= 2
    }));
    assert!(stats.iter().all(|s| s.prices_in.get() == 0));
    // One session (on shard 1: ties go away from shard 0) wants EURUSD.
    let mut c = Client::connect(ClientConfig::new(gw, "demo", "demo")).unwrap();
    c.subscribe_ids(RAW_TIER, &[eurusd]).unwrap();
    assert!(server::wait_until(Duration::from_secs(5), || {
        stats[1].connections.get() == 1
    }));
    // The subscription is in place once its snapshot (the table's price)
    // arrived.
    assert_eq!(bids_until(&mut c, eurusd, 1_000), vec![1_000]);
    for k in 1..=20 {
        bridge
            .send(&[quote(eurusd, 1_000 + k), quote(gbpusd, 2_000 + k)])
            .unwrap();
    }
    let bids = bids_until(&mut c, eurusd, 1_020);
    assert_eq!(
        bids,
        (1_001..=1_020).collect::<Vec<i64>>(),
        "every update, in order"
    );
    server::wait_until(Duration::from_secs(2), || stats[1].prices_in.get() == 20);
    assert_eq!(
        stats[1].prices_in.get(),
        20,
        "only EURUSD reached shard 1: {:?}",
        stats.iter().map(|s| s.prices_in.get()).collect::<Vec<_>>()
    );
    assert_eq!(stats[0].prices_in.get(), 0, "shard 0 has no session");
    assert!(bounded(Duration::from_secs(20), move || svc.stop()));
}

/// A shared-threading service on two shards whose shard 0 takes the
/// first 100 sessions, moving them away at `spill_permille` busy (0: only
/// when asked).
fn start_filled(spill_permille: u32) -> Service {
    server::ingest_service_with(CONFIG, shared_pipeline(2), |g| {
        g.shard_wait = WaitStrategy::Park;
        // These tests count every update across moves: a price that
        // waited through a move's pause is not merged into a newer one
        // (`--merge-after-us`, tested on its own), so any gap is a move's.
        g.merge_after_us = pricewire::gateway::fresh::MERGE_AFTER_US_MAX;
        g.shard0_fill = 100;
        g.shard0_spill_permille = spill_permille;
    })
}

/// `n` subscribers, all on shard 0, each holding its snapshot of the
/// first of `syms` (bid `first`); the first `extra_for` of them subscribe
/// to `extra` as well.
fn filled_subscribers(
    svc: &Service,
    n: usize,
    syms: &[u16],
    first: i64,
    (extra, extra_for): (&[u16], usize),
) -> Vec<Client> {
    let gw = svc.gateway.as_ref().unwrap().local_addr;
    let stats = svc.gateway.as_ref().unwrap().shard_stats.clone();
    let mut subs: Vec<Client> = (0..n)
        .map(|k| {
            let mut c = Client::connect(ClientConfig::new(gw, "demo", "demo")).unwrap();
            c.subscribe_ids(RAW_TIER, syms).unwrap();
            if k < extra_for {
                c.subscribe_ids(RAW_TIER, extra).unwrap();
            }
            c
        })
        .collect();
    assert!(server::wait_until(Duration::from_secs(5), || {
        stats[0].connections.get() == n as u64
    }));
    for c in &mut subs {
        assert_eq!(bids_until(c, syms[0], first), vec![first]);
    }
    subs
}

/// A reader thread: it hands back its client and the bids it saw, in order.
type Reader = std::thread::JoinHandle<(Client, Vec<i64>)>;

/// Per subscriber a thread that reads EURUSD until `last`, checking that
/// no sequence number is skipped, and publishes the last bid it saw in
/// `progress` (the sender paces itself on the slowest). Each thread hands
/// back its client and the bids in order.
fn spawn_readers(
    subs: Vec<Client>,
    eurusd: u16,
    first: i64,
    last: i64,
) -> (Arc<Vec<std::sync::atomic::AtomicI64>>, Vec<Reader>) {
    let progress: Arc<Vec<std::sync::atomic::AtomicI64>> = Arc::new(
        (0..subs.len())
            .map(|_| std::sync::atomic::AtomicI64::new(first))
            .collect(),
    );
    let readers: Vec<_> = subs
        .into_iter()
        .enumerate()
        .map(|(k, mut c)| {
            let progress = progress.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(30);
                let (mut bids, mut seq) = (Vec::new(), 0u64);
                while bids.last() != Some(&last) {
                    assert!(Instant::now() < deadline, "last price not seen");
                    match c.next_event(Duration::from_millis(50)) {
                        Ok(Some(Event::Price(p))) if p.body.symbol_id == eurusd => {
                            if seq != 0 {
                                assert_eq!(p.body.seq, seq + 1, "sequence skipped");
                            }
                            seq = p.body.seq;
                            bids.push(p.body.bid);
                            progress[k].store(p.body.bid, std::sync::atomic::Ordering::SeqCst);
                        }
                        Ok(_) => {}
                        Err(e) => panic!("subscriber: {e}"),
                    }
                }
                (c, bids)
            })
        })
        .collect();
    (progress, readers)
}

/// A moved session is a whole session: it gets a second symbol's price and
/// a snapshot answered through its new shard.
fn second_symbol_and_a_request(c: &mut Client, gbpusd: u16, eurusd: u16, last: i64) {
    assert_eq!(bids_until(c, gbpusd, 7_000), vec![7_000]);
    let rid = c.request_snapshot(RAW_TIER, &[eurusd], 0, false).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "no snapshot answer");
        match c.next_event(Duration::from_millis(50)).unwrap() {
            Some(Event::SnapshotResponse { request_id, prices }) if request_id == rid => {
                assert_eq!(prices[0].bid, last);
                break;
            }
            _ => {}
        }
    }
}

/// Streams 3,000 EURUSD quotes after `first`, at most 100 ahead of the
/// slowest reader, and moves two sessions off shard 0 halfway.
fn stream_with_a_move(
    bridge: &mut Bridge,
    gw: &pricewire::gateway::Gateway,
    progress: &[std::sync::atomic::AtomicI64],
    eurusd: u16,
    first: i64,
) {
    let slowest = || {
        progress
            .iter()
            .map(|p| p.load(std::sync::atomic::Ordering::SeqCst))
            .min()
            .unwrap()
    };
    for k in 1..=3_000 {
        bridge.send(&[quote(eurusd, first + k)]).unwrap();
        if k == 1_500 {
            gw.spill(2);
        }
        if k % 100 == 0 {
            assert!(server::wait_until(Duration::from_secs(10), || slowest() >= first + k - 100));
        }
    }
}

#[test]
fn sessions_moved_off_shard_zero_mid_stream_miss_no_update() {
    let svc = start_filled(0);
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let eurusd = svc.config.table.by_name("EURUSD").unwrap().id;
    let gbpusd = svc.config.table.by_name("GBPUSD").unwrap().id;
    let gw = svc.gateway.as_ref().unwrap();
    let stats = gw.shard_stats.clone();
    let mut bridge = Bridge::connect(ingest, 0, "secret-a", Duration::from_secs(5)).unwrap();
    let first = 300_000;
    bridge.send(&[quote(eurusd, first)]).unwrap();
    let usdjpy = svc.config.table.by_name("USDJPY").unwrap().id;
    // The two with a third symbol are moved (the most subscriptions): the
    // first two in every index list, so the other sessions' entries are
    // shifted into their places.
    let subs = filled_subscribers(&svc, 4, &[eurusd, gbpusd], first, (&[usdjpy], 2));

    // Readers drain while quotes stream in; two sessions move in the
    // middle of the stream. The sender stays within 100 quotes of the
    // slowest reader, so no session falls behind far enough to conflate:
    // any gap would be the move's.
    let last = first + 3_000;
    let (progress, readers) = spawn_readers(subs, eurusd, first, last);
    stream_with_a_move(&mut bridge, gw, &progress, eurusd, first);
    let mut subs: Vec<(Client, Vec<i64>)> =
        readers.into_iter().map(|r| r.join().unwrap()).collect();
    for (_, bids) in &subs {
        assert_eq!(
            bids,
            &((first + 1)..=last).collect::<Vec<i64>>(),
            "every update, in order, across the move"
        );
    }
    assert_eq!(stats[0].sessions_moved_out.get(), 2);
    assert_eq!(stats[1].sessions_moved_in.get(), 2);
    assert_eq!(stats[0].connections.get(), 2);
    assert_eq!(stats[1].connections.get(), 2);
    // Shard 0 took every quote; shard 1 only those after the first move.
    assert_eq!(stats[0].prices_in.get(), 3_000);
    assert!((1..3_000).contains(&stats[1].prices_in.get()));
    // Each shard holds each symbol once for its own sessions; the moves'
    // holds are gone; USDJPY left shard 0 with its two subscribers.
    let holds = |sym| [gw.symbol_holds(0, sym), gw.symbol_holds(1, sym)];
    assert_eq!(holds(eurusd), [1, 1]);
    assert_eq!(holds(gbpusd), [1, 1]);
    assert_eq!(holds(usdjpy), [0, 1]);

    // The moved sessions are whole sessions on shard 1: a second symbol,
    // a request answered through shard 1's lane, and a clean close.
    bridge.send(&[quote(gbpusd, 7_000)]).unwrap();
    for (c, _) in &mut subs {
        second_symbol_and_a_request(c, gbpusd, eurusd, last);
    }
    let shared = gw.shared.clone();
    assert_eq!(GatewayStats::get(&shared.stats.logged_on), 4);
    drop(subs);
    assert!(server::wait_until(Duration::from_secs(10), || {
        GatewayStats::get(&shared.stats.open) == 0
    }));
    assert_eq!(GatewayStats::get(&shared.stats.logged_on), 0);
    assert!(stats.iter().all(|s| s.connections.get() == 0));
    // Nobody wants any symbol any more, on either shard.
    for sym in [eurusd, gbpusd, usdjpy] {
        assert_eq!(holds(sym), [0, 0], "symbol {sym}");
    }
    drop(bridge);
    assert!(bounded(Duration::from_secs(20), move || svc.stop()));
}

/// Per subscriber a thread that reads EURUSD until the bid in `last`,
/// allowing skips only on prices flagged conflated; each hands back its
/// client.
fn spawn_conflation_readers(
    subs: Vec<Client>,
    eurusd: u16,
    first: i64,
    last: &Arc<std::sync::atomic::AtomicI64>,
) -> Vec<std::thread::JoinHandle<Client>> {
    let readers: Vec<_> = subs
        .into_iter()
        .map(|mut c| {
            let last = Arc::clone(last);
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(40);
                let (mut bid, mut seq) = (first, 0u64);
                while bid != last.load(std::sync::atomic::Ordering::SeqCst) {
                    assert!(Instant::now() < deadline, "last quote not seen");
                    match c.next_event(Duration::from_millis(50)) {
                        Ok(Some(Event::Price(p))) if p.body.symbol_id == eurusd => {
                            // Under this load updates may be merged, and
                            // then the price says so; no other skip.
                            let merged = p.body.flags & price_flags::CONFLATED != 0;
                            assert!(
                                seq == 0 || p.body.seq == seq + 1 || merged,
                                "{} after {seq}, not flagged conflated",
                                p.body.seq
                            );
                            // A sender stalled past the quote age on a
                            // loaded host: the same bid is republished
                            // once, flagged stale, at the next sequence.
                            let restated =
                                p.body.flags & price_flags::STALE != 0 && p.body.bid == bid;
                            assert!(
                                p.body.bid > bid || restated,
                                "out of order: seq {} bid {} flags {:#x} after seq {seq} bid {bid}",
                                p.body.seq,
                                p.body.bid,
                                p.body.flags
                            );
                            (bid, seq) = (p.body.bid, p.body.seq);
                        }
                        Ok(_) => {}
                        Err(e) => panic!("subscriber: {e}"),
                    }
                }
                c
            })
        })
        .collect();
    readers
}

#[test]
fn a_busy_shard_zero_evens_its_sessions_out_by_itself() {
    // 5 % busy: quotes streamed as fast as a bridge sends them keep shard
    // 0 (engine, ingest and four sessions) far above it; four logons and
    // subscriptions take well under 2.5 ms of a 50-ms window.
    let svc = start_filled(50);
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let eurusd = svc.config.table.by_name("EURUSD").unwrap().id;
    let stats = svc.gateway.as_ref().unwrap().shard_stats.clone();
    let mut bridge = Bridge::connect(ingest, 0, "secret-a", Duration::from_secs(5)).unwrap();
    let first = 500_000;
    bridge.send(&[quote(eurusd, first)]).unwrap();
    let subs = filled_subscribers(&svc, 4, &[eurusd], first, (&[], 0));
    // The last quote's bid, once the sender knows it.
    let last = Arc::new(std::sync::atomic::AtomicI64::new(i64::MAX));
    let readers = spawn_conflation_readers(subs, eurusd, first, &last);
    let mut bid = first;
    let deadline = Instant::now() + Duration::from_secs(20);
    while stats[1].connections.get() < 2 && Instant::now() < deadline {
        let batch: Vec<Tick> = (1..=50).map(|k| quote(eurusd, bid + k)).collect();
        bridge.send(&batch).unwrap();
        bid += 50;
    }
    // Half of shard 0's sessions moved, and no more: two against two.
    assert_eq!(
        stats[1].connections.get(),
        2,
        "shard 0 busy {} per mille",
        stats[0].busy_permille.get()
    );
    for _ in 0..20 {
        let batch: Vec<Tick> = (1..=50).map(|k| quote(eurusd, bid + k)).collect();
        bridge.send(&batch).unwrap();
        bid += 50;
    }
    last.store(bid, std::sync::atomic::Ordering::SeqCst);
    let subs: Vec<Client> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    assert_eq!(
        subs.len(),
        4,
        "every session, moved or not, got the last quote"
    );
    assert_eq!(stats[0].sessions_moved_out.get(), 2);
    assert_eq!(stats[1].sessions_moved_in.get(), 2);
    assert_eq!(stats[0].connections.get(), 2);
    assert!(bounded(Duration::from_secs(20), move || svc.stop()));
}

#[test]
fn a_session_moves_only_into_a_shard_with_room() {
    // Two slots per shard, two sessions filling shard 0, then two on
    // shard 1: shard 1 is full, so an asked-for move does not happen, and
    // happens once a slot there is free.
    let svc = server::ingest_service_with(CONFIG, shared_pipeline(2), |g| {
        g.shard_wait = WaitStrategy::Park;
        g.shard0_fill = 2;
        g.max_connections_per_shard = 2;
    });
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let eurusd = svc.config.table.by_name("EURUSD").unwrap().id;
    let gw = svc.gateway.as_ref().unwrap();
    let stats = gw.shard_stats.clone();
    let mut bridge = Bridge::connect(ingest, 0, "secret-a", Duration::from_secs(5)).unwrap();
    let first = 900_000;
    bridge.send(&[quote(eurusd, first)]).unwrap();
    let mut on0 = filled_subscribers(&svc, 2, &[eurusd], first, (&[], 0));
    let mut on1: Vec<Client> = (0..2)
        .map(|_| {
            let mut c = Client::connect(ClientConfig::new(gw.local_addr, "demo", "demo")).unwrap();
            c.subscribe_ids(RAW_TIER, &[eurusd]).unwrap();
            assert_eq!(bids_until(&mut c, eurusd, first), vec![first]);
            c
        })
        .collect();
    assert_eq!(stats[1].connections.get(), 2);

    gw.spill(1);
    // The request is handled on shard 0's next wake-up, at the end of
    // that turn: two quotes later, one by one, that turn is over. Nothing
    // moved, and everyone is still served.
    for k in 1..=2 {
        bridge.send(&[quote(eurusd, first + k)]).unwrap();
        for c in on0.iter_mut().chain(on1.iter_mut()) {
            assert_eq!(bids_until(c, eurusd, first + k), vec![first + k]);
        }
    }
    assert_eq!(stats[0].sessions_moved_out.get(), 0);
    assert_eq!(stats[0].connections.get(), 2);

    drop(on1.pop());
    assert!(server::wait_until(Duration::from_secs(10), || {
        stats[1].connections.get() == 1
    }));
    gw.spill(1);
    // The receiving shard may count the session before the sending one
    // counts the move (it adopts once the session is in the lane).
    assert!(server::wait_until(Duration::from_secs(10), || {
        stats[1].connections.get() == 2 && stats[0].sessions_moved_out.get() == 1
    }));
    assert_eq!(stats[0].connections.get(), 1);
    // The moved session goes on getting every price.
    bridge.send(&[quote(eurusd, first + 3)]).unwrap();
    for c in on0.iter_mut().chain(on1.iter_mut()) {
        assert_eq!(bids_until(c, eurusd, first + 3), vec![first + 3]);
    }
    assert!(bounded(Duration::from_secs(20), move || svc.stop()));
}
