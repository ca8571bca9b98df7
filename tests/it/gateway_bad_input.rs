//! Bad input from one peer: it gets a Reject with the reason (and a
//! Disconnect(protocol_error) where the framing is lost), while a healthy
//! session on the same shard keeps receiving its prices in order.

use crate::util::server;

use std::time::Duration;

use pricewire::gateway::GatewayConfig;
use pricewire::wire::{
    self, DisconnectReason, OwnedMessage, RejectReason, SymbolRef, TIER_ACCOUNT_DEFAULT,
};
use server::{Healthy, Raw, RawRead, ServerOpts, TestServer};

const T: Duration = Duration::from_secs(5);

/// A SOFH (big-endian length, SBE encoding type) written by hand.
fn sofh(len: u32) -> [u8; 6] {
    let l = len.to_be_bytes();
    [l[0], l[1], l[2], l[3], 0xEB, 0x50]
}

fn server_with(gateway: GatewayConfig) -> TestServer {
    TestServer::start_with(ServerOpts {
        gateway: GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..gateway
        },
        shards: 1,
        ..Default::default()
    })
}

/// Reads to the close: a Reject(reason), then Disconnect(protocol_error).
fn expect_reject_then_disconnect(raw: &mut Raw, reason: RejectReason) {
    let msgs = raw
        .read_to_close(T)
        .expect("the server closes the connection");
    let reject = msgs
        .iter()
        .position(|m| matches!(m, OwnedMessage::Reject { reason: r, .. } if *r == reason));
    let reject = reject.unwrap_or_else(|| panic!("no Reject({reason}) in {msgs:?}"));
    match msgs.last() {
        Some(OwnedMessage::Disconnect { reason, .. }) => {
            assert_eq!(*reason, DisconnectReason::PROTOCOL_ERROR)
        }
        other => panic!("expected Disconnect(protocol_error) last, got {other:?}"),
    }
    assert!(
        reject < msgs.len() - 1,
        "the Reject comes before the Disconnect"
    );
}

/// One framing violation, before or after logon.
fn framing_case(bytes: &[u8], reason: RejectReason, logged_on: bool) {
    let server = server_with(GatewayConfig::default());
    let healthy = Healthy::start(&server);
    let mut raw = if logged_on {
        Raw::logon(server.addr, "demo", "demo", 0)
    } else {
        Raw::connect(server.addr)
    };
    raw.send(bytes);
    expect_reject_then_disconnect(&mut raw, reason);
    assert_eq!(server.stat(|s| &s.disconnects_protocol_error), 1);
    healthy.finish();
}

#[test]
fn garbage_bytes_lose_the_framing() {
    framing_case(
        b"GET / HTTP/1.1\r\nHost: pricewire\r\n\r\n",
        RejectReason::FRAME_TOO_LARGE,
        false,
    );
}

#[test]
fn garbage_after_logon_closes_only_that_session() {
    framing_case(
        &[0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04],
        RejectReason::FRAME_TOO_LARGE,
        true,
    );
}

#[test]
fn length_below_the_header_size() {
    let mut f = sofh(10).to_vec();
    f.extend_from_slice(&[0; 4]);
    framing_case(&f, RejectReason::FRAME_TOO_SMALL, true);
}

#[test]
fn length_above_the_maximum() {
    // The SOFH alone is enough: the server refuses before the body comes.
    framing_case(&sofh(1 << 20), RejectReason::FRAME_TOO_LARGE, true);
}

#[test]
fn wrong_encoding_type() {
    let mut f = 14u32.to_be_bytes().to_vec();
    f.extend_from_slice(&[0x12, 0x34, 0, 0, 4, 0, 0x57, 0x50, 1, 0]);
    framing_case(&f, RejectReason::BAD_ENCODING_TYPE, true);
}

/// A heartbeat frame with one header field patched.
fn patched_heartbeat(offset: usize, value: u16) -> Vec<u8> {
    let mut f = [0u8; 14];
    wire::encode_heartbeat(&mut f).unwrap();
    f[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
    f.to_vec()
}

#[test]
fn unknown_template_schema_and_version_are_rejected_and_the_session_goes_on() {
    let server = server_with(GatewayConfig::default());
    let healthy = Healthy::start(&server);
    let mut raw = Raw::logon(server.addr, "demo", "demo", 0);
    let cases = [
        (8, 999, RejectReason::UNKNOWN_TEMPLATE),
        (10, 0x1234, RejectReason::UNKNOWN_SCHEMA),
        (12, 0, RejectReason::UNSUPPORTED_VERSION),
    ];
    for (offset, value, reason) in cases {
        raw.send(&patched_heartbeat(offset, value));
        let got = raw.until(T, |m| matches!(m, OwnedMessage::Reject { .. }));
        match got {
            Some(OwnedMessage::Reject { reason: r, .. }) => assert_eq!(r, reason),
            other => panic!("expected Reject({reason}), got {other:?}"),
        }
    }
    // Nothing was lost: the session still subscribes and streams.
    raw.send_with(|b| {
        wire::encode_subscribe(
            b,
            42,
            TIER_ACCOUNT_DEFAULT,
            [SymbolRef::by_name("EURUSD").unwrap()],
        )
    });
    let got = raw.until(T, |m| matches!(m, OwnedMessage::PriceUpdate(_)));
    assert!(got.is_some(), "prices flow after the rejects");
    assert_eq!(server.stat(|s| &s.disconnects_protocol_error), 0);
    assert_eq!(server.stat(|s| &s.rejects_sent), 3);
    healthy.finish();
}

#[test]
fn unknown_template_before_logon_closes() {
    let server = server_with(GatewayConfig::default());
    let mut raw = Raw::connect(server.addr);
    raw.send(&patched_heartbeat(8, 999));
    expect_reject_then_disconnect(&mut raw, RejectReason::UNKNOWN_TEMPLATE);
}

#[test]
fn message_before_logon_is_not_logged_on() {
    let server = server_with(GatewayConfig::default());
    let healthy = Healthy::start(&server);
    let mut raw = Raw::connect(server.addr);
    raw.send_with(|b| wire::encode_subscribe(b, 1, TIER_ACCOUNT_DEFAULT, [SymbolRef::by_id(0)]));
    expect_reject_then_disconnect(&mut raw, RejectReason::NOT_LOGGED_ON);
    healthy.finish();
}

#[test]
fn frame_that_never_completes_times_out() {
    let server = server_with(GatewayConfig {
        frame_timeout_ms: 300,
        ..Default::default()
    });
    let healthy = Healthy::start(&server);
    let mut raw = Raw::logon(server.addr, "demo", "demo", 0);
    let mut f = [0u8; 64];
    let n = wire::encode_subscribe(&mut f, 1, TIER_ACCOUNT_DEFAULT, [SymbolRef::by_id(0)]).unwrap();
    raw.send(&f[..n / 2]); // half a frame, then silence (slowloris)
    let started = std::time::Instant::now();
    expect_reject_then_disconnect(&mut raw, RejectReason::MALFORMED);
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "not before the frame timeout"
    );
    healthy.finish();
}

#[test]
fn subscribe_flood_is_rate_limited_then_disconnected() {
    let server = server_with(GatewayConfig {
        msg_rate_per_s: 10,
        msg_burst: 5,
        flood_disconnect_after: 3,
        ..Default::default()
    });
    let healthy = Healthy::start(&server);
    let mut raw = Raw::logon(server.addr, "demo", "demo", 0);
    raw.send(&server::subscribe_burst(30));
    let msgs = raw.read_to_close(T).expect("the flooder is closed");
    let responses = msgs
        .iter()
        .filter(|m| matches!(m, OwnedMessage::SubscribeResponse { .. }))
        .count();
    let limited: Vec<_> = msgs
        .iter()
        .filter_map(|m| match m {
            OwnedMessage::Reject {
                reason,
                retry_after_ms,
                ..
            } => Some((*reason, *retry_after_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(responses, 5, "the burst is served");
    assert_eq!(limited.len(), 3, "then rate-limited: {limited:?}");
    // One to two refills of 10/s: 100–200 ms (the window's time left for
    // the ones refused inside it).
    assert!(
        limited
            .iter()
            .all(|&(r, ms)| r == RejectReason::RATE_LIMITED && (1..=200).contains(&ms)),
        "{limited:?}"
    );
    // A flood has its own reason and a jittered floor (protocol.md §4.2).
    assert!(matches!(
        msgs.last(),
        Some(OwnedMessage::Disconnect {
            reason: DisconnectReason::MESSAGE_FLOOD,
            retry_after_ms: 1_000..=5_000,
            ..
        })
    ));
    assert_eq!(server.stat(|s| &s.disconnects_flood), 1);
    assert!(matches!(
        raw.next(Duration::from_millis(100)),
        RawRead::Closed | RawRead::Timeout
    ));
    healthy.finish();
}
