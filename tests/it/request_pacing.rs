//! A client that pipelines requests faster than it reads their answers
//! (docs/protocol.md §6): the gateway takes a connection's next frame only
//! while the answers of the requests it has in flight are sure to fit its
//! outbound buffer, so TCP paces the client and every request is answered.
//! Without that, the answers of requests the server had read would overflow
//! the buffer and the client would be cut as a slow consumer while it reads.

use crate::util::server;

use std::io::Write;
use std::time::Duration;

use pricewire::gateway::GatewayConfig;
use pricewire::wire::{self, OwnedMessage, RejectReason};
use server::{Raw, RawRead, ServerOpts, TestServer};

const T: Duration = Duration::from_secs(10);
/// Under the account's request burst (200) and the connection's message
/// burst (400): no rate limit refuses any of them.
const REQUESTS: u64 = 190;

/// A gateway whose buffers are small enough that 190 answers overflow
/// them many times over: a 16 KiB outbound buffer, a 4 KiB send buffer.
fn small_buffers() -> ServerOpts {
    ServerOpts {
        gateway: GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            loop_lag_target_ms: 0,
            out_cap_bytes: 16 * 1024,
            high_water_bytes: 8 * 1024,
            low_water_bytes: 4 * 1024,
            sndbuf_bytes: 4096,
            ..GatewayConfig::default()
        },
        ..Default::default()
    }
}

/// Every request is answered, none is lost to a slow-consumer cut, while the
/// client writes them all before reading any answer.
#[test]
fn a_client_that_writes_every_request_before_reading_gets_every_answer() {
    let server = TestServer::start_with(small_buffers());
    let ids: Vec<u16> = (0..server.config.table.len().min(32) as u16).collect();
    assert!(server::wait_until(T, || {
        let table = &server.gateway().shared.table;
        ids.iter().all(|&s| table.read(s, 0).is_some())
    }));
    let mut raw = Raw::logon(server.addr, "demo", "demo", 0);
    let mut frames = Vec::new();
    let mut b = [0u8; 512];
    for rid in 1..=REQUESTS {
        let n = wire::encode_snapshot_request(&mut b, rid, 0, false, 0, ids.iter().copied())
            .expect("encode");
        frames.extend_from_slice(&b[..n]);
    }
    let mut writer = raw.stream.try_clone().unwrap();
    let write = std::thread::spawn(move || writer.write_all(&frames));
    // The client reads nothing until the server has either held its input
    // (the answers would not fit) or cut it.
    assert!(server::wait_until(T, || {
        server.stat(|s| &s.input_held_for_answers) > 0
            || server.stat(|s| &s.disconnects_slow_consumer) > 0
    }));
    // Each request gets exactly one answer. A snapshot is the answer a
    // healthy host gives; Reject(overloaded) is the request queue's own
    // verdict when its worker was starved of a CPU long enough to form a
    // standing queue (a fresh-clone CI beside two CPU hogs: a Reject after
    // 135 answers), and is an answer too. What the pacing must prevent, a
    // slow-consumer cut, or any other refusal, fails the test.
    let mut answered = std::collections::BTreeSet::new();
    let mut shed = 0;
    while answered.len() < REQUESTS as usize {
        match raw.next(T) {
            RawRead::Msg(OwnedMessage::SnapshotResponse { request_id, .. }) => {
                assert!(answered.insert(request_id), "{request_id} answered twice");
            }
            RawRead::Msg(OwnedMessage::Reject {
                request_id, reason, ..
            }) if reason == RejectReason::OVERLOADED => {
                assert!(answered.insert(request_id), "{request_id} answered twice");
                shed += 1;
            }
            RawRead::Msg(m @ (OwnedMessage::Reject { .. } | OwnedMessage::Disconnect { .. })) => {
                panic!("after {} answers: {m:?}", answered.len())
            }
            RawRead::Msg(_) => {}
            other => panic!("after {} answers: {other:?}", answered.len()),
        }
    }
    write.join().unwrap().expect("every request written");
    assert_eq!(server.stat(|s| &s.disconnects_slow_consumer), 0);
    assert!(server.stat(|s| &s.input_held_for_answers) > 0);
    eprintln!(
        "{REQUESTS} requests: {} answered, {shed} of them Reject(overloaded)",
        answered.len()
    );
}
