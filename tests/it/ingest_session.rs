//! The provider session on the ingest listener over real loopback TCP
//! (protocol.md §7): heartbeats and the idle drop, one session per
//! provider id, refused quote entries, Disconnect before every close. Run
//! with the listener on its own thread and hosted by gateway shard 0.

use crate::util::server;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pricewire::feed::ingest::keepalive::{IDLE_INTERVALS, PROVIDER_HEARTBEAT_MS};
use pricewire::model::NO_PRICE;
use pricewire::pipeline::PipelineConfig;
use pricewire::runtime::{Threading, WaitStrategy};
use pricewire::service::Service;
use pricewire::wire::{
    self, template, DisconnectReason, LogonRejectReason, OwnedMessage, QuoteEntry, RejectReason,
};
use server::{Raw, RawRead};

const CONFIG: &str = r#"
# Clear tokens: a loopback test (docs/security.md).
insecure_plain_tokens = true
[[providers]]
name = "bridge-a"
kind = "ingest"
token = "secret-a"
"#;

const ANSWER: Duration = Duration::from_secs(3);

fn start(threading: Threading) -> Service {
    let pipeline = PipelineConfig {
        threading,
        ..PipelineConfig::default()
    };
    server::ingest_service(CONFIG, pipeline, WaitStrategy::SpinPark)
}

fn feed_addr(svc: &Service) -> SocketAddr {
    svc.ingest.as_ref().unwrap().local_addr
}

fn provider_logon(addr: SocketAddr) -> (Raw, OwnedMessage) {
    let mut r = Raw::connect(addr);
    let logon = wire::ProviderLogon {
        provider_id: 0,
        token: b"secret-a",
    };
    r.send_with(|b| wire::encode_provider_logon(b, &logon));
    match r.next(ANSWER) {
        RawRead::Msg(m) => (r, m),
        other => panic!("no answer to ProviderLogon: {other:?}"),
    }
}

fn entry(bid: i64, ask: i64) -> QuoteEntry {
    QuoteEntry {
        symbol_id: 0,
        flags: 0,
        bid,
        ask,
        bid_size: 1,
        ask_size: 1,
        provider_time_ns: 0,
    }
}

fn silent_bridge_is_heartbeated_then_dropped(threading: Threading) {
    let svc = start(threading);
    let (mut bridge, accepted) = provider_logon(feed_addr(&svc));
    let logged_on = Instant::now();
    match accepted {
        OwnedMessage::LogonAccepted(a) => {
            assert_eq!(a.heartbeat_interval_ms, PROVIDER_HEARTBEAT_MS)
        }
        other => panic!("{other:?}"),
    }
    let interval = Duration::from_millis(u64::from(PROVIDER_HEARTBEAT_MS));
    let first = bridge.next(interval * 2);
    assert_eq!(
        first,
        RawRead::Msg(OwnedMessage::Heartbeat),
        "server heartbeat"
    );
    let seen = bridge
        .read_to_close(interval * (IDLE_INTERVALS as u32 + 1))
        .expect("the silent bridge is dropped");
    let idle = logged_on.elapsed();
    assert!(
        matches!(
            seen.last(),
            Some(OwnedMessage::Disconnect {
                reason: DisconnectReason::IDLE_TIMEOUT,
                ..
            })
        ),
        "{seen:?}"
    );
    assert!(
        idle >= interval * IDLE_INTERVALS as u32,
        "dropped after {idle:?}"
    );
    let stats = &svc.ingest.as_ref().unwrap().stats;
    assert_eq!(stats.idle_disconnects.load(Ordering::Relaxed), 1);
    svc.stop();
}

#[test]
fn silent_bridge_is_heartbeated_then_dropped_own_thread() {
    silent_bridge_is_heartbeated_then_dropped(Threading::Dedicated);
}

#[test]
fn silent_bridge_is_heartbeated_then_dropped_hosted() {
    silent_bridge_is_heartbeated_then_dropped(Threading::Shared);
}

#[test]
fn a_provider_id_has_one_session_at_a_time() {
    let svc = start(Threading::Dedicated);
    let addr = feed_addr(&svc);
    let (mut first, m) = provider_logon(addr);
    assert!(matches!(m, OwnedMessage::LogonAccepted(_)), "{m:?}");
    let (mut second, m) = provider_logon(addr);
    match m {
        OwnedMessage::LogonRejected(r) => {
            assert_eq!(r.reason, LogonRejectReason::SESSION_LIMIT);
            assert!(r.retry_after_ms > 0);
        }
        other => panic!("second session: {other:?}"),
    }
    assert_eq!(second.read_to_close(ANSWER), Some(vec![]));
    first.send_with(wire::encode_logout);
    let bye = first.read_to_close(ANSWER).expect("closed after Logout");
    assert!(matches!(bye.last(), Some(OwnedMessage::Disconnect { .. })));
    let (_third, m) = provider_logon(addr);
    assert!(
        matches!(m, OwnedMessage::LogonAccepted(_)),
        "id free again: {m:?}"
    );
    svc.stop();
}

#[test]
fn refused_quote_entries_are_counted_and_answered_once_per_batch() {
    let svc = start(Threading::Dedicated);
    let (mut bridge, _) = provider_logon(feed_addr(&svc));
    let batch = [
        entry(NO_PRICE, 108_127),
        entry(108_130, 108_127),
        entry(108_121, 108_127),
    ];
    bridge.send_with(|b| wire::encode_provider_quote(b, batch));
    match bridge.next(ANSWER) {
        RawRead::Msg(OwnedMessage::Reject {
            reason,
            ref_template_id,
            text,
            ..
        }) => {
            assert_eq!(reason, RejectReason::INVALID_QUOTE);
            assert_eq!(ref_template_id, template::PROVIDER_QUOTE);
            let text = String::from_utf8(text).unwrap();
            assert_eq!(text, "2 quote(s) refused; first: symbol 0 one_sided");
        }
        other => panic!("{other:?}"),
    }
    let stats = &svc.ingest.as_ref().unwrap().stats;
    assert!(server::wait_until(ANSWER, || stats
        .quotes
        .load(Ordering::Relaxed)
        == 1));
    assert_eq!(stats.quotes_one_sided.load(Ordering::Relaxed), 1);
    assert_eq!(stats.quotes_crossed.load(Ordering::Relaxed), 1);
    svc.stop();
}

#[test]
fn errors_before_logon_end_with_a_disconnect() {
    let svc = start(Threading::Dedicated);
    let addr = feed_addr(&svc);
    // A quote before ProviderLogon, then garbage framing.
    let mut quote_first = Raw::connect(addr);
    quote_first.send_with(|b| wire::encode_provider_quote(b, [entry(1, 2)]));
    let mut garbage = Raw::connect(addr);
    garbage.send(b"GET / HTTP/1.1\r\n\r\n");
    for (mut r, want) in [
        (quote_first, RejectReason::NOT_LOGGED_ON),
        (garbage, RejectReason::FRAME_TOO_LARGE), // "GET " read as a length
    ] {
        let seen = r.read_to_close(ANSWER).expect("closed");
        match &seen[..] {
            [OwnedMessage::Reject { reason: got, .. }, OwnedMessage::Disconnect { reason, .. }] => {
                assert_eq!(*got, want);
                assert_eq!(*reason, DisconnectReason::PROTOCOL_ERROR);
            }
            other => panic!("{other:?}"),
        }
    }
    svc.stop();
}
