//! Cores and edges over a real NATS bus (`serve --role core|edge`).
//!
//! Every test starts real nats-server processes on loopback
//! (`tests/util/nats.rs`) and in-process pricewire services: a core with
//! the synthetic feed publishing to the bus, and edges with a subscriber
//! gateway on a loopback port. Subscribers are the SDK client over TCP.
//! Every wait is a bounded condition; nothing sleeps.

use crate::util::bus;
use crate::util::nats;
use crate::util::wait;

use std::collections::BTreeMap;
use std::time::Duration;

use pricewire::client::SeqStatus;
use pricewire::model::price_flags;
use pricewire::ops::Registry;
use pricewire::service::Service;

use bus::*;
use nats::{NatsCluster, NatsServer};
use wait::wait_until;

#[test]
fn nats_helper_starts_a_node_and_kills_it_on_drop() {
    let addr;
    {
        let node = NatsServer::start();
        addr = node.client_addr();
        assert!(node.healthy());
        assert!(std::net::TcpStream::connect(addr).is_ok());
    }
    assert!(
        wait_until(WAIT, || std::net::TcpStream::connect(addr).is_err()),
        "nats-server still answers after drop"
    );
}

#[test]
fn subscribers_on_two_edges_receive_identical_streams() {
    let node = NatsServer::start();
    let b = bus(&node.url(), "t1", 1);
    let core = core(b.clone(), 2_000);
    let (e1, e2) = (edge(b.clone()), edge(b));
    let (mut c1, mut c2) = (subscriber(&e1), subscriber(&e2));
    let (mut s1, mut s2) = (Seen::default(), Seen::default());
    assert!(read_until(&mut c1, &mut s1, |s| s.updates() >= 400));
    assert!(read_until(&mut c2, &mut s2, |s| s.updates() >= 400));
    // Both read on: compare every (symbol, seq) both subscribers saw.
    assert!(read_until(&mut c1, &mut s1, |s| s.updates() >= 800));
    let (k1, k2) = (s1.by_key(), s2.by_key());
    let common: Vec<_> = k1.keys().filter(|k| k2.contains_key(k)).collect();
    assert!(common.len() >= 200, "only {} common prices", common.len());
    for k in common {
        assert_eq!(k1[k], k2[k], "edges disagree on (symbol, seq) {k:?}");
    }
    s1.assert_ordered_and_gaps_flagged("edge 1");
    s2.assert_ordered_and_gaps_flagged("edge 2");
    assert!(published(&core) > 0);
    for e in [&e1, &e2] {
        assert_eq!(e.bus.as_ref().unwrap().stats().decode_errors.get(), 0);
    }
    // The bus counters are on /metrics, each under its documented family.
    for (svc, event) in [(&core, "published"), (&e1, "received")] {
        let r = Registry::new();
        svc.register_metrics(&r).unwrap();
        let text = r.scrape();
        let line = format!("pricewire_bus_messages_total{{event=\"{event}\"}} ");
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix(&line))
            .unwrap_or_else(|| panic!("no {line} in {text}"));
        assert!(value.trim().parse::<u64>().unwrap() > 0, "{line}{value}");
        assert!(text.contains("pricewire_bus_connected 1"), "{text}");
        // Every event once (the registry refuses a duplicate series).
        let events = text
            .lines()
            .filter(|l| l.starts_with("pricewire_bus_messages_total{"))
            .count();
        assert_eq!(events, 22, "{text}");
        let beats = text
            .lines()
            .filter(|l| l.starts_with("pricewire_bus_heartbeats_total{"))
            .count();
        assert_eq!(beats, 5, "{text}");
        assert!(
            text.contains("pricewire_bus_last_heartbeat_age_seconds "),
            "{text}"
        );
    }
    // The core beats and both edges take its heartbeats.
    assert!(wait_until(WAIT, || {
        [&e1, &e2]
            .iter()
            .all(|e| e.bus.as_ref().unwrap().stats().heartbeats_received.get() > 0)
    }));
    assert!(core.bus.as_ref().unwrap().stats().heartbeats_sent.get() > 0);
    drop((c1, c2));
    e1.stop();
    e2.stop();
    core.stop();
}

/// First snapshot of every subscribed symbol, as (symbol, seq, bid, ask).
fn first_snapshots(e: &Service) -> BTreeMap<u16, (u64, i64, i64)> {
    let mut c = subscriber(e);
    let mut seen = Seen::default();
    assert!(read_until(&mut c, &mut seen, |s| {
        s.prices.iter().filter(|p| p.5 == SeqStatus::Reset).count() >= SYMBOLS.len()
    }));
    let mut first = BTreeMap::new();
    for &(s, q, b, a, _, st) in &seen.prices {
        if st == SeqStatus::Reset {
            first.entry(s).or_insert((q, b, a));
        }
    }
    first
}

#[test]
fn a_new_edge_is_ready_only_with_every_last_value_and_snapshots_like_the_others() {
    let node = NatsServer::start();
    let b = bus(&node.url(), "t2", 1);
    let core = core(b.clone(), 2_000);
    let e1 = edge(b.clone());
    let symbols = e1.config.table.len() as u64;
    assert!(wait_until(WAIT, || table_view(&e1).iter().all(|v| v.0 > 0)));
    // Started while prices flow: start() returns once loaded.
    let e2 = edge(b.clone());
    let loaded = e2.bus.as_ref().unwrap().stats().last_values_loaded.get();
    assert_eq!(loaded, symbols, "every symbol's last value loaded");
    assert!(table_view(&e2).iter().all(|v| v.0 > 0), "a symbol is empty");
    // Prices stop: both edges settle on the same table.
    core.stop();
    assert!(wait_until(WAIT, || table_view(&e1) == table_view(&e2)));
    // A third edge after the stop: its first snapshot is the others'.
    let e3 = edge(b);
    assert_eq!(first_snapshots(&e3), first_snapshots(&e1));
    for e in [e1, e2, e3] {
        e.stop();
    }
}

#[test]
fn killing_a_nats_node_leaves_edges_delivering_with_every_gap_flagged() {
    let mut cluster = NatsCluster::start();
    let urls: Vec<String> = cluster.nodes.iter().map(|n| n.url()).collect();
    let list = |order: [usize; 3]| order.map(|i| urls[i].clone()).join(",");
    // The core prefers node 0, edge 1 node 1 (the one killed), edge 2 node 2.
    let core = core(bus(&list([0, 1, 2]), "t3", 3), 2_000);
    let e1 = edge(bus(&list([1, 2, 0]), "t3", 3));
    let e2 = edge(bus(&list([2, 0, 1]), "t3", 3));
    let (mut c1, mut c2) = (subscriber(&e1), subscriber(&e2));
    let (mut s1, mut s2) = (Seen::default(), Seen::default());
    assert!(read_until(&mut c1, &mut s1, |s| s.updates() >= 200));
    assert!(read_until(&mut c2, &mut s2, |s| s.updates() >= 200));
    cluster.nodes[1].kill();
    // Delivery goes on through another node.
    let before = s1.updates();
    assert!(
        read_until(&mut c1, &mut s1, |s| s.updates() >= before + 400),
        "edge 1 stopped delivering after its node died"
    );
    assert!(read_until(&mut c2, &mut s2, |s| s.updates() >= before + 400));
    s1.assert_ordered_and_gaps_flagged("edge 1");
    s2.assert_ordered_and_gaps_flagged("edge 2");
    let st = e1.bus.as_ref().unwrap().stats();
    assert!(st.disconnects.get() >= 1, "edge 1 never lost its node");
    assert_eq!(st.connected.get(), 1, "edge 1 reconnected");
    assert!(
        wait_until(WAIT, || st.reloads.get() >= 1),
        "edge 1 did not reload last values after reconnecting"
    );
    let st2 = e2.bus.as_ref().unwrap().stats();
    assert_eq!(st2.disconnects.get(), 0, "edge 2's node was not killed");
    drop((c1, c2));
    e1.stop();
    e2.stop();
    core.stop();
}

#[test]
fn killing_the_leader_hands_over_to_a_younger_standby_that_continues_every_sequence() {
    // A 10-s lease: the standby must not wait for the key to expire.
    const LEASE_MS: u64 = 10_000;
    let node = NatsServer::start();
    let mut a = ServeProcess::start(&node.url(), "t4", LEASE_MS);
    assert!(
        wait_until(WAIT, || a.bus_count("published") > 3_000),
        "the first core never led"
    );
    // Started later: its engine's own sequences are far below the leader's.
    let b = ServeProcess::start(&node.url(), "t4", LEASE_MS);
    assert!(
        wait_until(WAIT, || b.bus_count("standby_discarded") > 0),
        "the second core is not a warm standby"
    );
    assert_eq!(b.bus_count("published"), 0, "two cores published at once");
    let beats = |p: &ServeProcess| p.metric("pricewire_bus_heartbeats_total", "sent");
    assert!(beats(&a) > 0, "the leader sends no heartbeat");
    assert_eq!(beats(&b), 0, "a standby sent heartbeats");
    let e = edge(bus(&node.url(), "t4", 1));
    let edge_stats = e.bus.as_ref().unwrap().stats().clone();
    let mut c = subscriber(&e);
    let mut seen = Seen::default();
    assert!(read_until(&mut c, &mut seen, |s| s.updates() >= 200));
    let before = seen.updates();
    let held: BTreeMap<u16, u64> = seen.prices.iter().map(|p| (p.0, p.1)).collect();
    let stream = seen.streams[before - 1];
    let dups = edge_stats.duplicates_dropped.get();
    a.kill();
    let killed_at = std::time::Instant::now();
    assert!(
        wait_until(WAIT, || b.bus_count("published") > 0),
        "the standby never took over"
    );
    let took = killed_at.elapsed();
    assert!(
        took < Duration::from_millis(LEASE_MS),
        "takeover took {took:?}: it waited for the key to expire"
    );
    // Until every symbol has the new leader's first price (flagged): the
    // old leader's last prices, published before the kill and read after
    // `before`, come first and are not (on a busy host, many of them).
    let takeover_seen = |s: &Seen| {
        s.updates() >= before + 200
            && held.keys().all(|&sym| {
                s.prices[before..]
                    .iter()
                    .any(|p| p.0 == sym && p.4 & price_flags::CONFLATED != 0)
            })
    };
    assert!(
        read_until(&mut c, &mut seen, takeover_seen),
        "a symbol got no flagged price from the new leader"
    );
    assert!(beats(&b) > 0, "the new leader sends no heartbeat");
    seen.assert_ordered_and_gaps_flagged("edge");
    // Nothing of the new leader was dropped as a duplicate: it numbers
    // above every sequence the old one published, in the same stream.
    assert_eq!(
        edge_stats.duplicates_dropped.get(),
        dups,
        "prices dropped as duplicates"
    );
    let after = &seen.prices[before..];
    assert!(
        seen.streams[before..].iter().all(|&s| s == stream),
        "a new stream"
    );
    for (&sym, &last) in &held {
        // The takeover's skip is flagged once, numbered above what the
        // old leader had published when it was read; the rest of the
        // symbol's prices are in sequence (checked above).
        let flagged: Vec<u64> = after
            .iter()
            .filter(|p| p.0 == sym && p.4 & price_flags::CONFLATED != 0)
            .map(|p| p.1)
            .collect();
        assert_eq!(flagged.len(), 1, "symbol {sym}: flagged prices {flagged:?}");
        assert!(flagged[0] > last, "symbol {sym}: {flagged:?} after {last}");
    }
    drop(c);
    e.stop();
}

#[test]
fn an_orderly_stop_hands_the_lease_over_at_the_standbys_next_attempt() {
    // A 9-s lease: expiry would hand over 6 s or more after the stop; the
    // deleted key lets the standby in at its next attempt (every 3 s).
    const LEASE_MS: u64 = 9_000;
    let node = NatsServer::start();
    let b = bus(&node.url(), "t6", 1).with_lease_ms(LEASE_MS).unwrap();
    let first = core(b.clone(), 2_000);
    assert!(
        wait_until(WAIT, || published(&first) > 0),
        "the first core never led"
    );
    let second = core(b, 2_000);
    let st = second.bus.as_ref().unwrap().stats().clone();
    assert!(
        wait_until(WAIT, || st.standby_discarded.get() > 0),
        "no warm standby"
    );
    assert_eq!(st.published.get(), 0, "two cores published at once");
    first.stop();
    let stopped_at = std::time::Instant::now();
    assert!(
        wait_until(WAIT, || st.published.get() > 0),
        "the standby never took over"
    );
    let took = stopped_at.elapsed();
    assert!(
        took < Duration::from_millis(LEASE_MS / 3 + 1_000),
        "takeover took {took:?}"
    );
    assert_eq!(st.leases_taken.get(), 1);
    second.stop();
}

/// `GET path` on `addr`: (status line, body); empty if not answering.
fn http_get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return (String::new(), String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes());
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

#[test]
fn an_edge_binary_reports_ready_only_with_every_last_value_loaded() {
    let node = NatsServer::start();
    let core = core(bus(&node.url(), "t5", 1), 2_000);
    let symbols = core.config.table.len() as u64;
    assert!(wait_until(WAIT, || published(&core) >= 500));
    let ops = free_addr();
    let mut edge = ServeProcess {
        child: std::process::Command::new(env!("CARGO_BIN_EXE_pricewire"))
            .args(["serve", "--role", "edge", "--bus", &node.url()])
            .args(["--bus-prefix", "t5", "--listen", &free_addr().to_string()])
            .args(["--ops-listen", &ops.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
        ops,
    };
    // Once /readyz says 200, every last value is already in (read after
    // the probe: the counter only grows).
    assert!(wait_until(WAIT, || http_get(ops, "/readyz")
        .0
        .contains(" 200")));
    assert_eq!(edge.bus_count("last_value_loaded"), symbols);
    edge.kill();
    core.stop();
}

#[test]
fn an_edge_without_a_reachable_bus_exits_with_the_reason() {
    // Port 1: no test's server is ever given it (a port picked as free
    // could be taken by another test's nats-server before the edge
    // connects), and nothing listens there. The edge's own listeners take
    // any free port, for the same reason.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["serve", "--role", "edge", "--bus", "nats://127.0.0.1:1"])
        .args(["--listen", "127.0.0.1:0"])
        .args(["--ops-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("connecting to NATS"), "{err}");
}

#[test]
fn an_edge_takes_a_new_stream_once_the_lease_store_and_last_values_are_lost() {
    let node = NatsServer::start();
    let b = bus(&node.url(), "t9", 1).with_max_age_ms(1_000).unwrap();
    let first = core(b.clone(), 2_000);
    assert!(wait_until(WAIT, || published(&first) > 200));
    let e = edge(b.clone());
    let stats = e.bus.as_ref().unwrap().stats().clone();
    let mut c = subscriber(&e);
    let mut seen = Seen::default();
    assert!(read_until(&mut c, &mut seen, |s| s.updates() >= 100));
    let old = *seen.streams.last().unwrap();
    assert_eq!(e.pipeline.handles.table.stream_id(), old);
    first.stop();
    // Everything the cores kept is lost: the lease bucket and the stream
    // of last values. A new core can prove nothing: a new stream, whose
    // epoch starts again below the one the edge remembers.
    for stream in ["KV_T9_LEASE", "T9_PRICES"] {
        let reply = nats::request(
            node.client_addr(),
            &format!("$JS.API.STREAM.DELETE.{stream}"),
            b"",
        );
        assert!(
            String::from_utf8_lossy(&reply).contains("\"success\":true"),
            "{stream}"
        );
    }
    let second = core(b, 2_000);
    let from = seen.updates();
    let new_stream = |s: &Seen| s.streams[from..].iter().filter(|&&x| x != old).count() >= 20;
    assert!(
        read_until(&mut c, &mut seen, new_stream),
        "the edge never took the new stream"
    );
    let fresh = seen.streams[from..]
        .iter()
        .find(|&&x| x != old)
        .copied()
        .unwrap();
    assert_eq!(e.pipeline.handles.table.stream_id(), fresh);
    assert_eq!(stats.streams_adopted.get(), 1);
    // Each symbol's first price of the new stream is a resync snapshot.
    for sym in seen.prices[from..]
        .iter()
        .map(|p| p.0)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let first_new = (from..seen.updates())
            .find(|&i| seen.prices[i].0 == sym && seen.streams[i] == fresh)
            .unwrap();
        assert_eq!(seen.prices[first_new].5, SeqStatus::Reset, "symbol {sym}");
    }
    drop(c);
    e.stop();
    second.stop();
}
