//! A client cut as a slow consumer says so: the SDK, not driven while the
//! server's outbound buffer for it fills, later reads what the server
//! flushed before closing — prices, then Disconnect(slow_consumer) — and
//! reports `Event::Disconnected` with that reason (not a reset or a peer
//! close), reconnects no sooner than the server's retry-after, logs on
//! and resubscribes. Real gateway on loopback; the cut is awaited on the
//! gateway's own counter, never on time.

use crate::util::server;

use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, DisconnectCause, Event, SeqStatus};
use pricewire::gateway::GatewayConfig;
use pricewire::wire::DisconnectReason;
use server::{wait_until, ServerOpts, TestServer};

const T: Duration = Duration::from_secs(20);

#[test]
fn a_slow_consumer_cut_is_reported_with_its_reason_then_the_client_comes_back() {
    let server = TestServer::start_with(ServerOpts {
        gateway: GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            slow_consumer_ms: 300,
            low_water_bytes: 4 * 1024,
            high_water_bytes: 8 * 1024,
            out_cap_bytes: 16 * 1024,
            close_linger_ms: 5_000,
            ..Default::default()
        },
        shards: 1,
        ..Default::default()
    });
    let mut cfg = ClientConfig::new(server.addr, "demo", "demo");
    // The idle rule stays out of the way while the client is not driven.
    cfg.heartbeat_ms = 10_000;
    let mut c = Client::connect(cfg).unwrap();
    let ids: Vec<u16> = (0..server.config.table.len() as u16).collect();
    for tier in 0..3u8 {
        c.subscribe_ids(tier, &ids).unwrap();
    }
    // Not driven: the kernel buffers fill, then the server's.
    assert!(
        wait_until(T, || server.stat(|s| &s.disconnects_slow_consumer) == 1),
        "the client that did not read was not cut"
    );

    let deadline = Instant::now() + T;
    let mut prices = 0u64;
    let (cause, retry_after_ms, reconnect_in_ms) = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no Disconnected after {prices} prices");
        match c.next_event(left).unwrap() {
            Some(Event::Price(p)) => {
                assert!(!matches!(p.seq, SeqStatus::Gap { .. }), "{p:?}");
                prices += 1;
            }
            Some(Event::Disconnected {
                cause,
                retry_after_ms,
                reconnect_in_ms,
            }) => break (cause, retry_after_ms, reconnect_in_ms),
            _ => {}
        }
    };
    let DisconnectCause::Server { reason, .. } = &cause else {
        panic!("a slow-consumer cut taken for {cause}");
    };
    assert_eq!(*reason, DisconnectReason::SLOW_CONSUMER, "{cause}");
    assert!(
        cause.to_string().starts_with("server: slow_consumer"),
        "{cause}"
    );
    assert!(
        prices > 0,
        "the prices flushed before the Disconnect arrive first"
    );
    assert!(retry_after_ms > 0, "the server says when to come back");
    let wait = reconnect_in_ms.expect("a slow consumer may come back");
    assert!(
        wait >= u64::from(retry_after_ms),
        "{wait} < {retry_after_ms}"
    );
    let s = c.stats().snapshot();
    assert_eq!((s.disconnects, s.events_dropped), (1, 0), "{s:?}");

    // It comes back and resubscribes everything.
    let deadline = Instant::now() + T + Duration::from_millis(wait);
    let mut resubscribed = 0;
    while resubscribed < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "not back: {:?}", c.stats().snapshot());
        match c.next_event(left).unwrap() {
            Some(Event::LoggedOn(info)) => assert_eq!(info.reconnects, 1),
            Some(Event::SubscribeResponse { .. }) => resubscribed += 1,
            _ => {}
        }
    }
    assert_eq!(c.stats().snapshot().logons, 2);
}
