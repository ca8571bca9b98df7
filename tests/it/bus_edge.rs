//! What an edge serves besides live prices, over a real NATS bus: history
//! from its own ring, stale flags while the bus is gone, and terminals
//! that fail over from one edge to another by sequence.
//!
//! Real nats-server processes on loopback (`tests/util/nats.rs`),
//! in-process cores and edges (`tests/util/bus.rs`), SDK subscribers and
//! raw protocol connections over TCP. Every wait is a bounded condition;
//! nothing sleeps.

use crate::util::bus;
use crate::util::nats;
use crate::util::server;
use crate::util::wait;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pricewire::bus::BusRole;
use pricewire::client::{Client, ClientConfig, Event, SeqStatus};
use pricewire::feed::synthetic::SyntheticConfig;
use pricewire::model::price_flags;
use pricewire::pipeline::PipelineConfig;
use pricewire::resilience::backoff::Backoff;
use pricewire::runtime::Threading;
use pricewire::service::{Service, ServiceConfig};
use pricewire::wire::{self, HistoryTick, OwnedMessage, TIER_ACCOUNT_DEFAULT};

use bus::*;
use nats::NatsServer;
use server::Raw;
use wait::wait_until;

/// `count` most recent history ticks of `symbol` from `edge`, over TCP.
fn history(edge: &Service, symbol: &str, count: u16) -> Vec<HistoryTick> {
    let addr = edge.gateway.as_ref().unwrap().local_addr;
    let symbol_id = edge.config.table.by_name(symbol).unwrap().id;
    let mut raw = Raw::logon(addr, "demo", "demo", 0);
    raw.send_with(|b| {
        wire::encode_history_request(
            b,
            &wire::HistoryRequest {
                request_id: 7,
                budget_us: 2_000_000,
                critical: true,
                symbol_id,
                count,
            },
        )
    });
    match raw.until(WAIT, |m| matches!(m, OwnedMessage::HistoryResponse { .. })) {
        Some(OwnedMessage::HistoryResponse { ticks, .. }) => ticks,
        other => panic!("no history answer: {other:?}"),
    }
}

#[test]
fn history_on_two_edges_returns_the_same_ticks() {
    let node = NatsServer::start();
    let b = bus(&node.url(), "h1", 1);
    let core = core(b.clone(), 2_000);
    let (e1, e2) = (edge(b.clone()), edge(b));
    // An edge's history holds what it took since it started (its last
    // values first): wait for 60 more prices of every symbol than the
    // later edge had loaded.
    let started: Vec<u64> = table_view(&e2).iter().map(|v| v.0).collect();
    let far = |e: &Service| {
        table_view(e)
            .iter()
            .zip(&started)
            .all(|(v, s)| v.0 >= s + 60)
    };
    assert!(wait_until(WAIT, || far(&e1) && far(&e2)));
    // Prices stop; both edges settle on the same last prices.
    core.stop();
    assert!(wait_until(WAIT, || table_view(&e1) == table_view(&e2)));
    for symbol in SYMBOLS {
        let (h1, h2) = (history(&e1, symbol, 50), history(&e2, symbol, 50));
        assert_eq!(h1.len(), 50, "{symbol}: edge 1 served {} ticks", h1.len());
        assert_eq!(h1, h2, "{symbol}: the edges' histories differ");
        // The newest tick is the edge's current price.
        let id = e1.config.table.by_name(symbol).unwrap().id;
        let now = e1.pipeline.handles.table.read(id, 0).unwrap();
        let last = h1.last().unwrap();
        assert_eq!((last.bid, last.ask), (now.bid, now.ask), "{symbol}");
        assert_eq!(
            last.provider,
            pricewire::bus::edge::HISTORY_PROVIDER_AGGREGATED
        );
    }
    e1.stop();
    e2.stop();
}

#[test]
fn an_edge_without_its_bus_flags_prices_stale_until_fresh_ones_come() {
    const MAX_AGE_MS: u64 = 1_000;
    let mut node = NatsServer::start();
    let b = bus(&node.url(), "s1", 1);
    let core = core(b.clone(), 1_000);
    let e = edge(b.with_max_age_ms(MAX_AGE_MS).unwrap());
    let mut c = subscriber(&e);
    let mut seen = Seen::default();
    assert!(read_until(&mut c, &mut seen, |s| s.updates() >= 100));
    // (On a loaded machine a silence past the max age may already have
    // flagged prices; what counts is what follows the kill.)
    let flagged_before = e.bus.as_ref().unwrap().stats().stale_flagged.get();
    node.kill();
    let killed_at = Instant::now();
    let stale_from = seen.updates();
    let stale_seen = |s: &Seen| -> BTreeMap<u16, u64> {
        s.prices[stale_from..]
            .iter()
            .filter(|p| p.4 & price_flags::STALE != 0)
            .map(|p| (p.0, p.1))
            .collect()
    };
    assert!(
        read_until(&mut c, &mut seen, |s| stale_seen(s).len() == SYMBOLS.len()),
        "no stale flag on every symbol after the bus died"
    );
    let took = killed_at.elapsed();
    assert!(
        took <= Duration::from_millis(MAX_AGE_MS + 1_000),
        "stale flag after {took:?} (max age {MAX_AGE_MS} ms)"
    );
    let stats = e.bus.as_ref().unwrap().stats().clone();
    let flagged = stats.stale_flagged.get() - flagged_before;
    assert!(flagged >= e.config.table.len() as u64, "{flagged} flagged");
    // A new subscriber sees the stale flag in its first snapshot.
    let mut late = subscriber(&e);
    let mut late_seen = Seen::default();
    assert!(read_until(&mut late, &mut late_seen, |s| s.updates() >= SYMBOLS.len()));
    assert!(late_seen
        .prices
        .iter()
        .all(|p| p.4 & price_flags::STALE != 0));
    // The bus comes back: the core publishes again, fresh prices clear the
    // flag, and whatever was missed meanwhile is flagged, never silent.
    node.restart();
    let back_from = seen.updates();
    let fresh_after_stale = |s: &Seen| {
        SYMBOLS.len()
            == s.prices[back_from..]
                .iter()
                .filter(|p| p.4 & price_flags::STALE == 0)
                .map(|p| p.0)
                .collect::<std::collections::BTreeSet<_>>()
                .len()
    };
    assert!(
        read_until(&mut c, &mut seen, fresh_after_stale),
        "no fresh price after the bus came back"
    );
    seen.assert_ordered_and_gaps_flagged("edge");
    assert!(stats.reloads.get() >= 1, "the edge never reloaded");
    drop((c, late));
    e.stop();
    core.stop();
}

/// Last sequence seen per symbol.
fn last_seqs(seen: &Seen) -> BTreeMap<u16, u64> {
    seen.prices.iter().map(|p| (p.0, p.1)).collect()
}

#[test]
fn killing_an_edge_moves_its_terminals_to_another_resuming_by_sequence() {
    let node = NatsServer::start();
    let b = bus(&node.url(), "f1", 1);
    let core = core(b.clone(), 1_000);
    let listen = free_addr();
    let mut e1 = ServeProcess::edge(&node.url(), "f1", listen);
    let e2 = edge(b.with_max_age_ms(60_000).unwrap());
    let mut cfg = ClientConfig::new(listen, "demo", "demo");
    cfg.failover = vec![e2.gateway.as_ref().unwrap().local_addr];
    cfg.backoff = Backoff::new(20, 200);
    // Connects to edge 1 (no failure: not to edge 2) once it listens.
    let mut client = None;
    assert!(wait_until(WAIT, || {
        client = Client::connect(cfg.clone())
            .ok()
            .filter(|c| c.stats().snapshot().connect_failures == 0);
        client.is_some()
    }));
    let mut c = client.unwrap();
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &SYMBOLS).unwrap();
    let mut seen = Seen::default();
    assert!(read_until(&mut c, &mut seen, |s| s.updates() >= 200));
    // Prices stop, so none can be missed while the terminal moves: it
    // holds what edge 2 holds.
    core.stop();
    let e2_last = || -> BTreeMap<u16, u64> {
        SYMBOLS
            .iter()
            .map(|s| e2.config.table.by_name(s).unwrap().id)
            .map(|id| (id, e2.pipeline.handles.table.read(id, 0).unwrap().seq))
            .collect()
    };
    assert!(read_until(&mut c, &mut seen, |s| last_seqs(s) == e2_last()));
    e1.kill();
    let before = seen.updates();
    let moved = wait_until(WAIT, || {
        if let Ok(Some(Event::Price(p))) = c.next_event(Duration::from_millis(20)) {
            let b = p.body;
            seen.prices
                .push((b.symbol_id, b.seq, b.bid, b.ask, b.flags, p.seq));
        }
        let s = c.stats().snapshot();
        s.resumed + s.resume_resyncs >= SYMBOLS.len() as u64
    });
    assert!(moved, "the terminal did not come back on edge 2");
    let s = c.stats().snapshot();
    assert_eq!((s.logons, s.disconnects), (2, 1), "{s:?}");
    assert_eq!(s.resumed, SYMBOLS.len() as u64, "{s:?}");
    assert_eq!((s.resume_resyncs, s.gaps), (0, 0), "{s:?}");
    assert!(e2.open_connections() >= 1, "not connected to edge 2");
    let after = &seen.prices[before..];
    assert_eq!(after.len(), SYMBOLS.len(), "{after:?}");
    assert!(after.iter().all(|p| p.5 == SeqStatus::Resumed), "{after:?}");
    assert_eq!(last_seqs(&seen), e2_last(), "the sequences moved");
    drop(c);
    e2.stop();
}

#[test]
fn a_core_under_shared_threading_publishes_from_its_bus_thread() {
    let node = NatsServer::start();
    let b = bus(&node.url(), "c1", 1);
    let mut cfg = ServiceConfig::new(config());
    cfg.synthetic = Some(SyntheticConfig {
        rate_per_s: 2_000,
        ..SyntheticConfig::default()
    });
    cfg.pipeline = PipelineConfig {
        shards: 1,
        threading: Threading::Shared,
        ..PipelineConfig::default()
    };
    cfg.bus = Some(BusRole::Core(b.clone()));
    let core = Service::start(cfg).expect("a shared-threading core starts");
    let e = edge(b);
    let mut c = subscriber(&e);
    let mut seen = Seen::default();
    assert!(read_until(&mut c, &mut seen, |s| s.updates() >= 300));
    seen.assert_ordered_and_gaps_flagged("edge");
    assert!(published(&core) >= 300);
    drop(c);
    e.stop();
    // An orderly stop: the hosted engine finishes inside the bus thread.
    core.stop();
}

/// A core fed only by a bridge on its provider ingest port, whose quotes
/// stay fresh for ten minutes (`[engine] max_quote_age_ms`): it leads
/// once quoted and then stays healthy through a quiet market. Beats every
/// 100 ms.
struct QuietCore {
    process: ServeProcess,
    feed: std::net::SocketAddr,
    _config: tempfile::NamedTempFile,
}

const QUIET_CONFIG: &str = r#"
# Clear tokens: a loopback test (docs/security.md).
insecure_plain_tokens = true
[engine]
max_quote_age_ms = 600000
[[providers]]
name = "bridge"
kind = "ingest"
token = "quiet"
"#;

impl QuietCore {
    fn start(url: &str, prefix: &str) -> QuietCore {
        use std::io::Write;
        let mut config = tempfile::NamedTempFile::new().unwrap();
        config.write_all(QUIET_CONFIG.as_bytes()).unwrap();
        let feed = free_addr();
        let (feed_s, path) = (feed.to_string(), config.path().display().to_string());
        let flags = [
            "--no-synthetic",
            "--feed-listen",
            &feed_s,
            "--config",
            &path,
        ];
        let beat = ["--bus-heartbeat-ms", "100"];
        let process = ServeProcess::core(url, prefix, &[&flags[..], &beat].concat());
        QuietCore {
            process,
            feed,
            _config: config,
        }
    }

    /// One quote for each of `symbols` at `bid`, then the market is quiet.
    fn quote(&self, symbols: &[&str], bid: i64) {
        use pricewire::feed::bridge::Bridge;
        use pricewire::model::Tick;
        let table = config().table.clone();
        let deadline = Instant::now() + WAIT;
        let mut bridge = loop {
            match Bridge::connect(self.feed, 0, "quiet", Duration::from_secs(2)) {
                Ok(b) => break b,
                Err(e) if Instant::now() > deadline => panic!("no feed port: {e}"),
                Err(_) => std::thread::yield_now(),
            }
        };
        let ticks: Vec<Tick> = symbols
            .iter()
            .map(|s| Tick {
                symbol: table.by_name(s).unwrap().id,
                bid,
                ask: bid + 8,
                bid_size: 1_000_000,
                ask_size: 1_000_000,
                provider_time_ns: pricewire::clock::wall_ns(),
                ..Tick::EMPTY
            })
            .collect();
        bridge.send(&ticks).unwrap();
        // The bridge stays logged on (its provider healthy) until dropped.
        std::mem::forget(bridge);
    }

    fn beats(&self) -> u64 {
        self.process
            .metric("pricewire_bus_heartbeats_total", "sent")
    }
}

/// True once every subscribed symbol had a price since `from` whose STALE
/// flag is `stale`.
fn every_symbol_since(from: usize, stale: bool) -> impl Fn(&Seen) -> bool {
    symbols_since(from, stale, &SYMBOLS)
}

fn symbols_since(from: usize, stale: bool, want: &[&str]) -> impl Fn(&Seen) -> bool {
    let table = config().table.clone();
    let want: std::collections::BTreeSet<u16> =
        want.iter().map(|s| table.by_name(s).unwrap().id).collect();
    move |s: &Seen| {
        let got: std::collections::BTreeSet<u16> = s.prices[from..]
            .iter()
            .filter(|p| (p.4 & price_flags::STALE != 0) == stale)
            .map(|p| p.0)
            .collect();
        want.is_subset(&got)
    }
}

#[test]
fn a_quiet_market_is_stale_only_where_no_live_core_stands_behind_it() {
    // Ten heartbeat periods: a loaded machine may delay a few.
    const MAX_AGE_MS: u64 = 1_000;
    let node = NatsServer::start();
    let b = bus(&node.url(), "hb1", 1);
    // A core quoted once per symbol leads, then the market goes quiet.
    let mut quiet = QuietCore::start(&node.url(), "hb1");
    quiet.quote(&SYMBOLS, 108_000);
    assert!(
        wait_until(WAIT, || quiet.beats() >= 1),
        "the quiet core never led"
    );
    let e = edge(b.with_max_age_ms(MAX_AGE_MS).unwrap());
    let stats = e.bus.as_ref().unwrap().stats().clone();
    let mut c = subscriber(&e);
    let mut seen = Seen::default();
    assert!(read_until(&mut c, &mut seen, |s| s.updates() >= SYMBOLS.len()));
    // Four max ages without a single price: no stale flag, because the
    // core's heartbeats keep coming.
    let (beats0, prices0) = (stats.heartbeats_received.get(), stats.received.get());
    let watch = Instant::now();
    let window = Duration::from_millis(4 * MAX_AGE_MS);
    read_until(&mut c, &mut seen, |_| watch.elapsed() >= window);
    assert!(watch.elapsed() >= window, "the watch ended early");
    assert_eq!(stats.received.get(), prices0, "the market was not quiet");
    assert_eq!(stats.stale_flagged.get(), 0, "flagged stale while beating");
    let beats = stats.heartbeats_received.get() - beats0;
    assert!(beats >= 10, "{beats} heartbeats in {window:?}");
    assert!(
        seen.prices.iter().all(|p| p.4 & price_flags::STALE == 0),
        "a subscriber saw STALE while the core was alive"
    );
    // The core dies (no standby): the subscriber sees every symbol
    // flagged within the max age and a margin for the bus thread's turn.
    let all_stale = every_symbol_since(seen.updates(), true);
    quiet.process.kill();
    let killed_at = Instant::now();
    assert!(read_until(&mut c, &mut seen, all_stale), "no stale flag");
    let took = killed_at.elapsed();
    assert!(
        took <= Duration::from_millis(MAX_AGE_MS + 1_000),
        "stale flag {took:?} after the core died (max age {MAX_AGE_MS} ms)"
    );
    assert!(stats.stale_flagged.get() >= SYMBOLS.len() as u64);
    let stale_seqs = last_seqs(&seen);
    // Another core comes up quoting only EURUSD: it restates EURUSD
    // (fresh, higher in the same stream); its heartbeats do not clear
    // GBPUSD, whose price no live core stands behind.
    let from = seen.updates();
    let back = QuietCore::start(&node.url(), "hb1");
    back.quote(&["EURUSD"], 108_100);
    assert!(
        read_until(&mut c, &mut seen, symbols_since(from, false, &["EURUSD"])),
        "EURUSD never fresh again"
    );
    let beats0 = stats.heartbeats_received.get();
    assert!(wait_until(WAIT, || stats.heartbeats_received.get() >= beats0 + 10));
    let drain = Instant::now();
    read_until(&mut c, &mut seen, |_| {
        drain.elapsed() >= Duration::from_secs(1)
    });
    let gbp = config().table.by_name("GBPUSD").unwrap().id;
    let eur = config().table.by_name("EURUSD").unwrap().id;
    let after: Vec<_> = seen.prices[from..].iter().collect();
    assert!(
        after
            .iter()
            .filter(|p| p.0 == gbp)
            .all(|p| p.4 & price_flags::STALE != 0),
        "GBPUSD shown fresh while no core stands behind it: {after:?}"
    );
    let new_eur = after.iter().rev().find(|p| p.0 == eur).unwrap();
    assert!(
        new_eur.1 > stale_seqs[&eur],
        "EURUSD went back: {new_eur:?}"
    );
    seen.assert_ordered_and_gaps_flagged("edge");
    drop(c);
    e.stop();
}
