//! Gap resync end to end: a scripted server sends a snapshot, updates and
//! then skips sequence numbers; the client flags the gap and asks for a
//! critical snapshot of exactly that (symbol, tier). The answer reaches the
//! caller but moves no expectation: it overtook updates already on their
//! way (the server read its table for it), and those still reach the
//! caller in order; only a duplicate is dropped. And `await_response`
//! with a full set-aside room stops with `Backlog` instead of dropping.

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

/// Accepts one client, answers its Logon and its Subscribe (EURUSD ok).
fn handshake(listener: &TcpListener) -> (TcpStream, Vec<u8>) {
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
    (s, buf)
}

fn scripted_server(listener: TcpListener) -> OwnedMessage {
    let (mut s, mut buf) = handshake(&listener);
    let mut out = [0u8; 1024];
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
    // Queued before the table read: the stream the answer overtook, with
    // one duplicate.
    for seq in [16, 17, 18, 18, 19, 20, 21] {
        send_price(&mut s, PriceKind::Update, seq);
    }
    // Hold the connection until the client is done.
    let _ = s.read(&mut out);
    request
}

#[test]
fn gap_triggers_one_critical_snapshot_request_and_loses_no_update() {
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
            (16, SeqStatus::InOrder),
            (17, SeqStatus::InOrder),
            (18, SeqStatus::InOrder),
            (19, SeqStatus::InOrder),
            (20, SeqStatus::InOrder),
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

/// `await_response` with room for 2 set-aside events and 6 prices before
/// the answer: it stops with `Backlog(2)` each time the room is full, the
/// caller takes the 2 prices and waits again, and the answer comes after
/// every price, in order, none dropped.
#[test]
fn a_full_set_aside_room_stops_the_wait_and_drops_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, mut buf) = handshake(&listener);
        send_price(&mut s, PriceKind::Snapshot, 1);
        let OwnedMessage::SnapshotRequest { request_id, .. } = next_request(&mut s, &mut buf)
        else {
            panic!("expected SnapshotRequest");
        };
        for seq in 2..=7 {
            send_price(&mut s, PriceKind::Update, seq);
        }
        let mut out = [0u8; 1024];
        let n = wire::encode_snapshot_response(&mut out, request_id, [body(7)]).unwrap();
        s.write_all(&out[..n]).unwrap();
        let _ = s.read(&mut out);
    });
    let mut cfg = ClientConfig::new(addr, "demo", "demo");
    cfg.events_queued_max = 2;
    let mut c = Client::connect(cfg).unwrap();
    c.subscribe_names(TIER, &["EURUSD"]).unwrap();
    // Up to the subscribe snapshot, taken as usual.
    let deadline = Instant::now() + T;
    while Instant::now() < deadline {
        if let Some(Event::Price(p)) = c.next_event(Duration::from_millis(100)).unwrap() {
            assert_eq!((p.body.seq, p.seq), (1, SeqStatus::Reset));
            break;
        }
    }
    let rid = c.request_snapshot(TIER, &[EUR], 500_000, false).unwrap();
    let (mut backlogs, mut seqs) = (Vec::new(), Vec::new());
    let answer = loop {
        match c.await_response(rid, T) {
            Ok(answer) => break answer,
            Err(pricewire::client::ClientError::Backlog(n)) => {
                backlogs.push(n);
                for _ in 0..n {
                    let ev = c.next_event(Duration::ZERO).unwrap();
                    let p = *ev
                        .as_ref()
                        .and_then(Event::price)
                        .expect("a set-aside price");
                    seqs.push((p.body.seq, p.seq));
                }
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(backlogs, [2, 2, 2]);
    let in_order: Vec<_> = (2..=7).map(|seq| (seq, SeqStatus::InOrder)).collect();
    assert_eq!(seqs, in_order);
    assert!(
        matches!(&answer, Some(Event::SnapshotResponse { request_id, prices }) if *request_id == rid && prices[0].seq == 7),
        "{answer:?}"
    );
    let st = c.stats().snapshot();
    assert_eq!((st.prices, st.events_dropped, st.old_dropped), (7, 0, 0));
    drop(c);
    server.join().unwrap();
}
