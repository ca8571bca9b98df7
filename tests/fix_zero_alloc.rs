//! Proof that the FIX quote path allocates nothing once warmed up:
//! framing, field parsing, books, breaker records and tick output for
//! 20,000 snapshot and incremental messages under a counting allocator.

#[path = "util/alloc.rs"]
mod alloc;

use pricewire::engine::ProviderHealth;
use pricewire::feed::fix::codec::{self, Encoder, Header};
use pricewire::feed::fix::{bound_slot, FixSession, FixSessionConfig, Io, SessionState};
use pricewire::model::{InstrumentTable, Tick};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

const MESSAGES: u64 = 20_000;
const WALL0: u64 = 1_764_424_800_000_000_000;

fn frame(seq: u64, msg_type: &[u8], body: impl FnOnce(&mut Encoder)) -> Vec<u8> {
    let mut e = Encoder::new(1024);
    let h = Header {
        sender_comp_id: b"LP",
        target_comp_id: b"PRICEWIRE",
        seq,
        sending_time_utc_ns: WALL0,
    };
    e.begin(msg_type, &h);
    body(&mut e);
    e.finish().unwrap().to_vec()
}

#[test]
fn steady_state_quote_path_allocates_nothing() {
    let t = InstrumentTable::default_with_providers(1);
    let mut cfg = FixSessionConfig::new(0, "lp", "127.0.0.1", 1)
        .map_symbol("EUR/USD", t.by_name("EURUSD").unwrap())
        .map_symbol("USD/JPY", t.by_name("USDJPY").unwrap());
    cfg.stagger_ms = 0;
    cfg.quote_sample_ms = 0;
    let mut s = FixSession::new(cfg, 0, 0, 1, bound_slot(ProviderHealth::new(1)));
    assert_eq!(s.poll(0, WALL0), Io::Connect);
    s.on_connected(0, WALL0);
    s.handle_frame(&frame(1, b"A", |e| e.uint(108, 5)), 0, WALL0);
    assert_eq!(s.state(), SessionState::Active);
    s.consume_outbound(s.outbound().len());
    // One byte stream of every message, framed up front.
    let mut stream = Vec::new();
    for seq in 2..2 + MESSAGES {
        let px = format!("1.08{:03}", 100 + seq % 50);
        let msg = if seq % 10 == 2 {
            frame(seq, b"W", |e| {
                e.bytes(55, b"EUR/USD");
                e.uint(268, 2);
                e.uint(269, 0);
                e.bytes(270, px.as_bytes());
                e.uint(271, 1_000_000);
                e.uint(269, 1);
                e.bytes(270, b"1.08160");
                e.uint(271, 1_000_000);
            })
        } else {
            frame(seq, b"X", |e| {
                e.uint(268, 1);
                e.uint(279, 1);
                e.uint(269, 0);
                e.bytes(55, b"EUR/USD");
                e.bytes(270, px.as_bytes());
                e.bytes(273, b"13:59:59.900");
            })
        };
        stream.extend_from_slice(&msg);
    }
    let mut out = vec![Tick::EMPTY; 64];
    let mut ticks = 0u64;
    let before = alloc::allocations();
    let mut rest = &stream[..];
    let mut now = 1_000u64;
    while let Ok(Some(len)) = codec::frame_len(rest) {
        now += 1_000;
        assert_eq!(s.handle_frame(&rest[..len], now, WALL0 + now), Io::Nothing);
        ticks += s.drain_ticks(&mut out) as u64;
        rest = &rest[len..];
    }
    let allocated = alloc::allocations() - before;
    assert!(rest.is_empty());
    assert_eq!(ticks, MESSAGES);
    assert_eq!(allocated, 0, "allocations on the quote path");
}
