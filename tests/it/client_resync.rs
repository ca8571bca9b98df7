//! Gap resync end to end: a scripted server sends a snapshot, updates and
//! then skips sequence numbers; the client flags the gap, asks for a
//! critical snapshot of exactly that (symbol, tier) and resumes from the
//! answer.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, Event, SeqStatus};
use pricewire::wire::{
    self, LogonAccepted, OwnedMessage, PriceBody, PriceKind, SubscribeResult, SubscribeStatus,
    PRICE_SLOT_LEN,
};

const T: Duration = Duration::from_secs(5);
const EUR: u16 = 1;
const TIER: u8 = 2;

fn body(seq: u64) -> PriceBody {
    PriceBody {
        symbol_id: EUR,
        tier: TIER,
        digits: 5,
        seq,
        bid: 108_000,
        ask: 108_012,
        ..Default::default()
    }
}

fn send_price(s: &mut TcpStream, kind: PriceKind, seq: u64) {
    let mut f = [0u8; PRICE_SLOT_LEN];
    let n = wire::encode_price(&mut f, kind, &body(seq), 1);
    s.write_all(&f[..n]).unwrap();
}

/// Reads client frames until one that is not a Heartbeat.
fn next_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> OwnedMessage {
    s.set_read_timeout(Some(T)).unwrap();
    loop {
        if let Ok(Some(n)) = wire::split(buf) {
            let m = wire::decode(&buf[..n]).unwrap().to_owned_message();
            buf.drain(..n);
            if m != OwnedMessage::Heartbeat {
                return m;
            }
            continue;
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).expect("client request");
        assert!(n > 0, "client closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn scripted_server(listener: TcpListener) -> OwnedMessage {
    let (mut s, _) = listener.accept().unwrap();
    let mut buf = Vec::new();
    assert!(matches!(
        next_request(&mut s, &mut buf),
        OwnedMessage::Logon { .. }
    ));
    let mut out = [0u8; 1024];
    let m = LogonAccepted {
        session_id: 9,
        heartbeat_interval_ms: 1_000,
        server_time_ns: 0,
        default_tier: TIER,
        stream_id: 1,
    };
    let n = wire::encode_logon_accepted(&mut out, &m).unwrap();
    s.write_all(&out[..n]).unwrap();
    let OwnedMessage::Subscribe { request_id, .. } = next_request(&mut s, &mut buf) else {
        panic!("expected Subscribe");
    };
    let ok = SubscribeResult {
        symbol_id: EUR,
        name: wire::Name16::new("EURUSD").unwrap(),
        status: SubscribeStatus::OK,
    };
    let n = wire::encode_subscribe_response(&mut out, request_id, [ok]).unwrap();
    s.write_all(&out[..n]).unwrap();
    send_price(&mut s, PriceKind::Snapshot, 10);
    send_price(&mut s, PriceKind::Update, 11);
    send_price(&mut s, PriceKind::Update, 14); // 12 and 13 missed
    send_price(&mut s, PriceKind::Update, 15);
    let request = next_request(&mut s, &mut buf);
    let OwnedMessage::SnapshotRequest { request_id, .. } = &request else {
        panic!("expected SnapshotRequest, got {request:?}");
    };
    let n = wire::encode_snapshot_response(&mut out, *request_id, [body(20)]).unwrap();
    s.write_all(&out[..n]).unwrap();
    send_price(&mut s, PriceKind::Update, 19); // queued before the table read: old
    send_price(&mut s, PriceKind::Update, 21);
    // Hold the connection until the client is done.
    let _ = s.read(&mut out);
    request
}

#[test]
fn gap_triggers_one_critical_snapshot_request_and_resumes() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || scripted_server(listener));
    let mut c = Client::connect(ClientConfig::new(addr, "demo", "demo")).unwrap();
    c.subscribe_names(TIER, &["EURUSD"]).unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + T;
    while Instant::now() < deadline && !seen.iter().any(|(s, _)| *s == 21) {
        match c.next_event(Duration::from_millis(100)).unwrap() {
            Some(Event::Price(p)) => seen.push((p.body.seq, p.seq)),
            Some(Event::SnapshotResponse { prices, .. }) => {
                seen.push((prices[0].seq, SeqStatus::Reset))
            }
            _ => {}
        }
    }
    assert_eq!(
        seen,
        vec![
            (10, SeqStatus::Reset),
            (11, SeqStatus::InOrder),
            (
                14,
                SeqStatus::Gap {
                    expected: 12,
                    resync: true
                }
            ),
            (15, SeqStatus::InOrder),
            (20, SeqStatus::Reset),
            (21, SeqStatus::InOrder),
        ]
    );
    let s = c.stats().snapshot();
    assert_eq!((s.gaps, s.resync_requests, s.old_dropped), (1, 1, 1));
    drop(c);
    let request = server.join().unwrap();
    match request {
        OwnedMessage::SnapshotRequest {
            critical,
            tier,
            symbols,
            budget_us,
            ..
        } => {
            assert!(critical, "a resync is critical");
            assert_eq!((tier, symbols), (TIER, vec![EUR]));
            assert!(budget_us > 0);
        }
        other => panic!("{other:?}"),
    }
}
