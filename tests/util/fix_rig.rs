//! The sans-IO FIX session driven by hand, for the session tests: a
//! [`Rig`] holds one `FixSession`, plays the provider's side message by
//! message and keeps the time (`now` monotonic, `wall()` UTC).
//!
//! Include with `#[path = "util/fix_rig.rs"] mod fix_rig;`.

#![allow(dead_code)] // each test binary uses a different part

use std::sync::Arc;

use pricewire::engine::ProviderHealth;
use pricewire::feed::fix::codec::{self, Encoder, Fields, Header};
use pricewire::feed::fix::{bound_slot, FixSession, FixSessionConfig, Io, SessionState};
use pricewire::model::{InstrumentTable, Tick};

pub const MS: u64 = 1_000_000;
/// 2025-11-29T14:00:00Z
pub const WALL0: u64 = 1_764_424_800_000_000_000;

/// One message we sent: (MsgType, fields).
pub type Sent = (Vec<u8>, Vec<(u32, Vec<u8>)>);

pub struct Rig {
    pub s: FixSession,
    pub health: Arc<ProviderHealth>,
    pub peer_seq: u64,
    pub now: u64,
}

pub fn config() -> FixSessionConfig {
    let t = InstrumentTable::default_with_providers(2);
    let mut c = FixSessionConfig::new(0, "lp1", "127.0.0.1", 1)
        .map_symbol("EUR/USD", t.by_name("EURUSD").unwrap())
        .map_symbol("USD/JPY", t.by_name("USDJPY").unwrap());
    c.heartbeat_s = 1;
    c.stagger_ms = 0;
    c.quote_sample_ms = 0;
    c.breaker.minimum_calls = 3;
    c.breaker.open_wait_ms = 1_000;
    c.breaker.half_open_permitted_calls = 2;
    c.with_read_timeout_ms(2_000)
}

impl Rig {
    pub fn new(cfg: FixSessionConfig) -> Rig {
        let health = ProviderHealth::new(2);
        let s = FixSession::new(cfg, 0, 0, 1, bound_slot(health.clone()));
        Rig {
            s,
            health,
            peer_seq: 1,
            now: 0,
        }
    }

    pub fn wall(&self) -> u64 {
        WALL0 + self.now
    }

    pub fn poll(&mut self) -> Io {
        self.s.poll(self.now, self.wall())
    }

    pub fn advance_ms(&mut self, ms: u64) -> Io {
        self.now += ms * MS;
        self.poll()
    }

    /// Connect + Logon exchanged; outbound drained.
    pub fn active() -> Rig {
        Rig::active_with(config())
    }

    pub fn active_with(cfg: FixSessionConfig) -> Rig {
        let mut r = Rig::new(cfg);
        assert_eq!(r.poll(), Io::Connect);
        assert_eq!(r.s.on_connected(r.now, r.wall()), Io::Nothing);
        r.sent();
        assert_eq!(r.peer(b"A", |e| e.uint(108, 1)), Io::Nothing);
        assert_eq!(r.s.state(), SessionState::Active);
        r.sent();
        r
    }

    /// A message from the provider with the next sequence number.
    pub fn peer(&mut self, msg_type: &[u8], body: impl FnOnce(&mut Encoder)) -> Io {
        let seq = self.peer_seq;
        self.peer_seq += 1;
        self.peer_seq_n(seq, msg_type, body)
    }

    pub fn peer_seq_n(&mut self, seq: u64, msg_type: &[u8], body: impl FnOnce(&mut Encoder)) -> Io {
        let frame = build(seq, self.wall(), msg_type, body);
        assert_eq!(codec::frame_len(&frame), Ok(Some(frame.len())));
        self.s.handle_frame(&frame, self.now, self.wall())
    }

    /// Messages we sent since the last call: (MsgType, fields).
    pub fn sent(&mut self) -> Vec<Sent> {
        let mut out = Vec::new();
        let bytes = self.s.outbound().to_vec();
        self.s.consume_outbound(bytes.len());
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let len = codec::frame_len(rest).unwrap().expect("complete frame");
            let fields: Vec<(u32, Vec<u8>)> = Fields::of_frame(&rest[..len])
                .map(|f| f.unwrap())
                .map(|(t, v)| (t, v.to_vec()))
                .collect();
            out.push((fields[0].1.clone(), fields));
            rest = &rest[len..];
        }
        out
    }

    pub fn ticks(&mut self) -> Vec<Tick> {
        let mut buf = [Tick::EMPTY; 16];
        let n = self.s.drain_ticks(&mut buf);
        buf[..n].to_vec()
    }

    pub fn snapshot(&mut self, sym: &str, bid: &str, ask: &str) -> Io {
        self.peer(b"W", |e| {
            e.bytes(55, sym.as_bytes());
            e.uint(268, 2);
            e.uint(269, 0);
            e.bytes(270, bid.as_bytes());
            e.uint(271, 1_000_000);
            e.uint(269, 1);
            e.bytes(270, ask.as_bytes());
            e.uint(271, 2_000_000);
        })
    }
}

pub fn build(seq: u64, wall: u64, msg_type: &[u8], body: impl FnOnce(&mut Encoder)) -> Vec<u8> {
    let mut e = Encoder::new(1024);
    e.begin(
        msg_type,
        &Header {
            sender_comp_id: b"LP1",
            target_comp_id: b"PRICEWIRE",
            seq,
            sending_time_utc_ns: wall,
        },
    );
    body(&mut e);
    e.finish().unwrap().to_vec()
}

pub fn field(fields: &[(u32, Vec<u8>)], tag: u32) -> Vec<&[u8]> {
    fields
        .iter()
        .filter(|(t, _)| *t == tag)
        .map(|(_, v)| &v[..])
        .collect()
}
