//! A session cut for a message flood is told when to come back
//! (Disconnect(message_flood, retryAfterMs)), and the server holds the
//! client to it: the account's logons from the same address inside that
//! window are refused with LogonRejected(rate_limited) and the time left,
//! each one lengthening the hold, so ignoring the retry-after costs more
//! than honouring it. The same account from another address, and a client
//! that waits what it was told, log on at once.

use crate::util::net;
use crate::util::server;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use pricewire::admission::RetryWindow;
use pricewire::gateway::GatewayConfig;
use pricewire::wire::{DisconnectReason, LogonRejectReason, OwnedMessage};
use server::{Raw, RawRead, ServerOpts, TestServer};

const T: Duration = Duration::from_secs(5);

fn flood_server() -> TestServer {
    TestServer::start_with(ServerOpts {
        gateway: GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            msg_rate_per_s: 10,
            msg_burst: 5,
            flood_disconnect_after: 3,
            // Short, so that honouring it keeps the test short.
            error_retry: RetryWindow::new(400, 600),
            loop_lag_target_ms: 0,
            ..Default::default()
        },
        shards: 1,
        ..Default::default()
    })
}

/// Logs on as `demo`, floods Subscribes and reads to the cut: the
/// retry-after the Disconnect(message_flood) gave.
fn flood_until_cut(addr: SocketAddr) -> u32 {
    let mut raw = Raw::logon(addr, "demo", "demo", 0);
    raw.send(&server::subscribe_burst(30));
    let msgs = raw.read_to_close(T).expect("the flooder is closed");
    match msgs.last() {
        Some(OwnedMessage::Disconnect {
            reason: DisconnectReason::MESSAGE_FLOOD,
            retry_after_ms,
            ..
        }) => *retry_after_ms,
        other => panic!("not cut for a flood: {other:?}"),
    }
}

/// One logon of `demo` on `raw`: `Ok(())` if accepted, else the
/// LogonRejected's reason and retry-after.
fn logon(mut raw: Raw) -> Result<(), (LogonRejectReason, u32)> {
    raw.send_logon("demo", "demo", 0);
    match raw.next(T) {
        RawRead::Msg(OwnedMessage::LogonAccepted(_)) => Ok(()),
        RawRead::Msg(OwnedMessage::LogonRejected(r)) => Err((r.reason, r.retry_after_ms)),
        other => panic!("no logon answer: {other:?}"),
    }
}

#[test]
fn a_flood_cut_holds_its_retry_after_and_ignoring_it_costs_more() {
    let server = flood_server();
    let told = flood_until_cut(server.addr);
    assert!((400..=600).contains(&told), "told {told} ms");
    let cut = Instant::now();

    // Straight back, ignoring what it was told: refused, for longer.
    let first = logon(Raw::connect(server.addr));
    let Err((LogonRejectReason::RATE_LIMITED, r1)) = first else {
        panic!("a logon inside the retry-after was answered {first:?}");
    };
    assert!(r1 > told, "ignoring costs more: {r1} ms after {told} ms");
    let second = logon(Raw::connect(server.addr));
    let Err((LogonRejectReason::RATE_LIMITED, r2)) = second else {
        panic!("a second early logon was answered {second:?}");
    };
    assert!(
        r2 > r1,
        "each early logon lengthens the hold: {r2} after {r1}"
    );
    assert!(r2 <= 60_000, "the hold is capped at 60 s: {r2}");

    // The same account from another address was not the flooder.
    let other = Raw::from_stream(net::connect_from(Ipv4Addr::new(127, 0, 0, 2), server.addr));
    assert_eq!(logon(other), Ok(()), "another address is not held");

    // A client that waits what it was told last is let in. The wait is
    // the client's side of the contract under test, not synchronisation.
    std::thread::sleep(Duration::from_millis(u64::from(r2)));
    assert_eq!(logon(Raw::connect(server.addr)), Ok(()), "honoured");
    eprintln!(
        "flood cut told {told} ms; early logons told {r1} then {r2} ms; \
         honoured after {:?}",
        cut.elapsed()
    );
}

#[test]
fn a_client_that_honours_the_flood_cut_is_never_refused() {
    let server = flood_server();
    let told = flood_until_cut(server.addr);
    // Waiting exactly what it was told, counted from reading the cut
    // (after the server started the hold), is enough.
    std::thread::sleep(Duration::from_millis(u64::from(told)));
    assert_eq!(logon(Raw::connect(server.addr)), Ok(()));
}
