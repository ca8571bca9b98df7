//! Provider ingest end to end and the request path over real loopback TCP:
//! bridges push quotes into the ingest listener, subscribers see the
//! aggregated price; snapshot, symbol-list and history requests go through
//! the request queue and workers and come back to the right connection.

use crate::util::server;

use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, Event};
use pricewire::feed::bridge::Bridge;
use pricewire::model::{price_flags, Tick};
use pricewire::pipeline::PipelineConfig;
use pricewire::runtime::WaitStrategy;
use pricewire::service::Service;
use pricewire::wire::{self, OwnedMessage, RejectReason};
use server::Raw;

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

fn start() -> Service {
    server::ingest_service(CONFIG, PipelineConfig::default(), WaitStrategy::SpinPark)
}

fn quote(symbol: u16, bid: i64, ask: i64) -> Tick {
    Tick {
        symbol,
        bid,
        ask,
        bid_size: 1_000_000,
        ask_size: 2_000_000,
        provider_time_ns: 1_700_000_000_000_000_000,
        ..Tick::EMPTY
    }
}

fn eurusd(s: &Service) -> u16 {
    s.config.table.by_name("EURUSD").unwrap().id
}

/// Waits for a price event matching `pred` (bounded).
fn price_where(
    c: &mut Client,
    timeout: Duration,
    pred: impl Fn(&wire::PriceBody) -> bool,
) -> Option<wire::PriceBody> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(Event::Price(p))) = c.next_event(Duration::from_millis(50)) {
            if pred(&p.body) {
                return Some(p.body);
            }
        }
    }
    None
}

#[test]
fn bridges_push_quotes_and_subscribers_see_the_aggregated_price() {
    let svc = start();
    let gw = svc.gateway.as_ref().unwrap().local_addr;
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let sym = eurusd(&svc);
    let mut sub = Client::connect(ClientConfig::new(gw, "demo", "demo")).unwrap();
    sub.subscribe_ids(RAW_TIER, &[sym]).unwrap();

    let mut a = Bridge::connect(ingest, 0, "secret-a", Duration::from_secs(5)).unwrap();
    let mut b = Bridge::connect(ingest, 1, "secret-b", Duration::from_secs(5)).unwrap();
    a.send(&[quote(sym, 108_120, 108_128)]).unwrap();
    let single = price_where(&mut sub, Duration::from_secs(5), |p| p.providers == 1).unwrap();
    assert_eq!((single.bid, single.ask), (108_120, 108_128));
    assert_ne!(single.flags & price_flags::SINGLE_PROVIDER, 0);

    // Best bid from b, best ask from a.
    b.send(&[quote(sym, 108_121, 108_130)]).unwrap();
    let best = price_where(&mut sub, Duration::from_secs(5), |p| p.providers == 2).unwrap();
    assert_eq!((best.bid, best.ask), (108_121, 108_128));
    assert_eq!(best.flags & price_flags::SINGLE_PROVIDER, 0);
    assert_eq!(best.provider_time_ns, 1_700_000_000_000_000_000);
    svc.stop();
}

#[test]
fn a_bridge_with_a_wrong_token_is_refused_and_others_carry_on() {
    let svc = start();
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let err = Bridge::connect(ingest, 0, "wrong", Duration::from_secs(5))
        .err()
        .expect("wrong token accepted");
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(
        Bridge::connect(ingest, 9, "secret-a", Duration::from_secs(5)).is_err(),
        "unknown provider"
    );
    let mut ok = Bridge::connect(ingest, 1, "secret-b", Duration::from_secs(5)).unwrap();
    ok.send(&[quote(eurusd(&svc), 1, 2)]).unwrap();
    let stats = svc.ingest.as_ref().unwrap().stats.clone();
    assert!(server::wait_until(Duration::from_secs(5), || {
        stats.quotes.load(std::sync::atomic::Ordering::Relaxed) == 1
    }));
    assert_eq!(
        stats
            .logons_rejected
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    svc.stop();
}

/// A bridge that sent ten quotes of `sym`, once the last is priced.
fn ten_quotes_priced(svc: &Service, ingest: std::net::SocketAddr, sym: u16) -> Bridge {
    let mut bridge = Bridge::connect(ingest, 0, "secret-a", Duration::from_secs(5)).unwrap();
    let quotes: Vec<Tick> = (0..10)
        .map(|k| quote(sym, 108_100 + k, 108_110 + k))
        .collect();
    bridge.send(&quotes).unwrap();
    let table = svc.pipeline.handles.table.clone();
    assert!(server::wait_until(Duration::from_secs(5), || {
        table.read(sym, RAW_TIER).is_some_and(|p| p.bid == 108_109)
    }));
    bridge
}

/// The SDK's snapshot and symbol list answers, through the request path.
fn sdk_snapshot_and_symbols(svc: &Service, gw: std::net::SocketAddr, sym: u16) {
    let mut c = Client::connect(ClientConfig::new(gw, "demo", "demo")).unwrap();
    let rid = c
        .request_snapshot(RAW_TIER, &[sym], 1_000_000, false)
        .unwrap();
    match c.await_response(rid, Duration::from_secs(5)).unwrap() {
        Some(Event::SnapshotResponse { prices, .. }) => {
            assert_eq!(prices.len(), 1);
            assert_eq!((prices[0].bid, prices[0].ask), (108_109, 108_119));
        }
        other => panic!("snapshot: {other:?}"),
    }
    let rid = c.request_symbols(1_000_000, false).unwrap();
    match c.await_response(rid, Duration::from_secs(5)).unwrap() {
        Some(Event::SymbolDirectory { symbols, tiers, .. }) => {
            assert_eq!(symbols.len(), svc.config.table.len());
            assert_eq!(tiers.len(), svc.config.table.tiers().len());
        }
        other => panic!("symbol list: {other:?}"),
    }
}

/// A HistoryRequest for the last 5 ticks of `sym`.
fn send_history(raw: &mut Raw, request_id: u64, budget_us: u32, sym: u16) {
    raw.send_with(|b| {
        wire::encode_history_request(
            b,
            &wire::HistoryRequest {
                request_id,
                budget_us,
                critical: false,
                symbol_id: sym,
                count: 5,
            },
        )
    });
}

#[test]
fn snapshot_symbol_list_and_history_go_through_the_request_path() {
    let svc = start();
    let gw = svc.gateway.as_ref().unwrap().local_addr;
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let sym = eurusd(&svc);
    let _bridge = ten_quotes_priced(&svc, ingest, sym);

    sdk_snapshot_and_symbols(&svc, gw, sym);

    // History (raw protocol: the SDK has no history call).
    let mut raw = Raw::logon(gw, "demo", "demo", 0);
    send_history(&mut raw, 77, 1_000_000, sym);
    let answer = raw.until(Duration::from_secs(5), |m| {
        matches!(m, OwnedMessage::HistoryResponse { .. })
    });
    let Some(OwnedMessage::HistoryResponse {
        request_id, ticks, ..
    }) = answer
    else {
        panic!("no history answer");
    };
    assert_eq!(request_id, 77);
    let bids: Vec<i64> = ticks.iter().map(|t| t.bid).collect();
    assert_eq!(bids, vec![108_105, 108_106, 108_107, 108_108, 108_109]);

    // A request whose budget is gone before it can be served is dropped
    // before the work and answered Reject(deadline_expired).
    send_history(&mut raw, 78, 1, sym);
    let reject = raw.until(Duration::from_secs(5), |m| {
        matches!(m, OwnedMessage::Reject { request_id: 78, .. })
    });
    match reject {
        Some(OwnedMessage::Reject { reason, .. }) => {
            assert_eq!(reason, RejectReason::DEADLINE_EXPIRED)
        }
        other => panic!("expected a deadline reject: {other:?}"),
    }
    let served = svc.overload.snapshot();
    assert!(
        served.expired() >= 1
            || svc
                .gateway
                .as_ref()
                .unwrap()
                .request_stats()
                .unwrap()
                .expired_at_worker
                .get()
                >= 1
    );
    svc.stop();
}
