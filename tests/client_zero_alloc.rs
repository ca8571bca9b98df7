//! Per-update decoding in the client allocates nothing after warm-up: the
//! sans-IO session on scripted bytes, and the blocking client reading a
//! price stream over loopback. One test in this binary, so nothing else
//! allocates concurrently.

#[path = "util/alloc.rs"]
mod alloc;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use pricewire::client::{Client, ClientConfig, ClientStats, Event, SeqStatus, Session};
use pricewire::wire::{self, LogonAccepted, PriceBody, PriceKind, PRICE_SLOT_LEN};

const UPDATES: u64 = 20_000;
const WARM_UP: u64 = 100;

/// Snapshots for two keys, then alternating contiguous updates.
fn price_stream() -> Vec<u8> {
    let mut out = Vec::with_capacity((UPDATES as usize + 2) * PRICE_SLOT_LEN);
    let mut put = |kind, symbol_id, seq| {
        let b = PriceBody {
            symbol_id,
            tier: 1,
            digits: 5,
            seq,
            bid: 108_000,
            ask: 108_010,
            ..Default::default()
        };
        let mut f = [0u8; PRICE_SLOT_LEN];
        let n = wire::encode_price(&mut f, kind, &b, 1);
        out.extend_from_slice(&f[..n]);
    };
    put(PriceKind::Snapshot, 1, 1);
    put(PriceKind::Snapshot, 2, 1);
    for i in 0..UPDATES {
        put(PriceKind::Update, 1 + (i % 2) as u16, 2 + i / 2);
    }
    out
}

fn session_decodes_without_allocating(stream: &[u8]) {
    let mut s = Session::new(64, Arc::new(ClientStats::default()));
    let mut fed = 0;
    let pull = |s: &mut Session, fed: &mut usize| loop {
        if let Some(Event::Price(p)) = s.next_event().unwrap() {
            return p;
        }
        *fed += s.feed(&stream[*fed..(*fed + 4096).min(stream.len())]);
    };
    for _ in 0..WARM_UP {
        pull(&mut s, &mut fed);
    }
    let before = alloc::allocations();
    for _ in WARM_UP..UPDATES {
        let p = pull(&mut s, &mut fed);
        assert_eq!(p.seq, SeqStatus::InOrder);
    }
    assert_eq!(
        alloc::allocations() - before,
        0,
        "session allocated per update"
    );
}

#[test]
fn client_price_path_allocates_nothing() {
    let stream = price_stream();
    session_decodes_without_allocating(&stream);

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf);
        let m = LogonAccepted {
            session_id: 1,
            heartbeat_interval_ms: 5_000,
            server_time_ns: 0,
            default_tier: 1,
            stream_id: 1,
        };
        let n = wire::encode_logon_accepted(&mut buf, &m).unwrap();
        s.write_all(&buf[..n]).unwrap();
        s.write_all(&stream).unwrap();
        let _ = s.read(&mut buf); // until the client closes
    });
    let mut c = Client::connect(ClientConfig::new(addr, "demo", "demo")).unwrap();
    let next_price = |c: &mut Client| loop {
        if let Some(Event::Price(p)) = c.next_event(Duration::from_secs(5)).unwrap() {
            return p;
        }
    };
    for _ in 0..WARM_UP {
        next_price(&mut c);
    }
    let before = alloc::allocations();
    for _ in WARM_UP..UPDATES {
        assert_eq!(next_price(&mut c).seq, SeqStatus::InOrder);
    }
    let allocated = alloc::allocations() - before;
    assert_eq!(
        allocated,
        0,
        "the blocking client allocated {allocated} times over {} updates",
        UPDATES - WARM_UP
    );
    drop(c);
    server.join().unwrap();
}
