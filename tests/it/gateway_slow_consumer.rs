//! A subscriber that never reads is conflated, then disconnected as a slow
//! consumer, while a normal subscriber on the same shard keeps receiving
//! in order. The slow one finally reads what is left and finds
//! Disconnect(slow_consumer) at the end.

use crate::util::server;

use std::time::Duration;

use pricewire::gateway::GatewayConfig;
use pricewire::wire::{self, DisconnectReason, OwnedMessage};
use server::{wait_until, Healthy, Raw, ServerOpts, TestServer};

const T: Duration = Duration::from_secs(8);

#[test]
fn never_reading_subscriber_is_conflated_then_disconnected() {
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
    // The normal subscriber, polled on its own thread.
    let normal = Healthy::start_on(&server, &["EURUSD"]);

    // The slow subscriber: everything at every tier, then it stops reading.
    // A long heartbeat keeps the idle rule out of the way.
    let mut slow = Raw::logon(server.addr, "demo", "demo", 10_000);
    let ids: Vec<u16> = (0..server.config.table.len() as u16).collect();
    for tier in 0..3u8 {
        let refs = ids.iter().map(|&id| wire::SymbolRef::by_id(id));
        slow.send_with(|b| wire::encode_subscribe(b, u64::from(tier), tier, refs));
    }
    assert!(
        wait_until(T, || server.stat(|s| &s.disconnects_slow_consumer) == 1),
        "the never-reading subscriber was not disconnected"
    );
    let conflated = server.shard_stats()[0].conflated.get();
    assert!(
        conflated > 0,
        "updates were conflated before the disconnect"
    );

    // The normal subscriber is still receiving, in order.
    normal.finish();

    // The slow one reads what is left: the server lingered to flush the
    // Disconnect behind the backlog, then closed.
    let msgs = slow
        .read_to_close(T)
        .expect("the server closes after the flush");
    match msgs.last() {
        Some(OwnedMessage::Disconnect {
            reason,
            retry_after_ms,
            ..
        }) => {
            assert_eq!(*reason, DisconnectReason::SLOW_CONSUMER);
            assert!(*retry_after_ms > 0, "come back later, jittered");
        }
        other => panic!("expected Disconnect(slow_consumer) last, got {other:?}"),
    }
    assert!(msgs
        .iter()
        .any(|m| matches!(m, OwnedMessage::PriceUpdate(_))));
    assert_eq!(
        server.stat(|s| &s.disconnects_slow_consumer),
        1,
        "only the slow one"
    );
}
