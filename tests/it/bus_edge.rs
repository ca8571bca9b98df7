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

/// A core whose only feed is a provider ingest port that no provider
/// sends to (a quiet market; a core with no feed at all would finish its
/// engine), beating every 100 ms, with a 1-s lease.
fn quiet_core(url: &str, prefix: &str) -> ServeProcess {
    let feed = free_addr().to_string();
    let beat = ["--no-synthetic", "--feed-listen", &feed];
    let flags = ["--bus-heartbeat-ms", "100", "--bus-lease-ms", "1000"];
    ServeProcess::core(url, prefix, &[&beat[..], &flags].concat())
}

/// True once every subscribed symbol had a price since `from` whose STALE
/// flag is `stale`.
fn every_symbol_since(from: usize, stale: bool) -> impl Fn(&Seen) -> bool {
    move |s: &Seen| {
        let symbols: std::collections::BTreeSet<u16> = s.prices[from..]
            .iter()
            .filter(|p| (p.4 & price_flags::STALE != 0) == stale)
            .map(|p| p.0)
            .collect();
        symbols.len() == SYMBOLS.len()
    }
}

#[test]
fn a_quiet_market_is_flagged_stale_only_while_no_core_beats() {
    // Ten heartbeat periods: a loaded machine may delay a few.
    const MAX_AGE_MS: u64 = 1_000;
    let node = NatsServer::start();
    let b = bus(&node.url(), "hb1", 1);
    // A first core leaves every symbol's last value in the stream, then
    // stops in order (handing the lease on at once). The market goes
    // quiet: a core with no ticks takes the lease.
    let first = core(b.clone(), 2_000);
    assert!(wait_until(WAIT, || published(&first) >= 500));
    first.stop();
    let mut quiet = quiet_core(&node.url(), "hb1");
    let beating = || quiet.metric("pricewire_bus_heartbeats_total", "sent") >= 1;
    assert!(
        wait_until(WAIT, beating),
        "the quiet core sent no heartbeat"
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
    quiet.kill();
    let killed_at = Instant::now();
    assert!(read_until(&mut c, &mut seen, all_stale), "no stale flag");
    let took = killed_at.elapsed();
    assert!(
        took <= Duration::from_millis(MAX_AGE_MS + 1_000),
        "stale flag {took:?} after the core died (max age {MAX_AGE_MS} ms)"
    );
    assert!(stats.stale_flagged.get() >= SYMBOLS.len() as u64);
    let stale_seqs = last_seqs(&seen);
    // A core comes back (once the dead one's lease expired) and the market
    // is still quiet: its heartbeats alone clear the flag, each symbol
    // restated with the same sequence.
    let all_fresh = every_symbol_since(seen.updates(), false);
    let _back = quiet_core(&node.url(), "hb1");
    assert!(read_until(&mut c, &mut seen, all_fresh), "still stale");
    assert_eq!(stats.received.get(), prices0, "the market was not quiet");
    assert_eq!(last_seqs(&seen), stale_seqs, "restated at other sequences");
    assert!(stats.stale_cleared.get() >= SYMBOLS.len() as u64);
    seen.assert_ordered_and_gaps_flagged("edge");
    drop(c);
    e.stop();
}
