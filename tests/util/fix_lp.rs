//! A scripted FIX LP against the sans-IO session, with the real engine
//! aggregator behind it, all on hand-driven time (10-ms steps, no sockets,
//! no sleeping).
//!
//! Provider 0 is the FIX session under test: its LP quotes EUR/USD tight
//! (1.08120 / 1.08124, spread 4 points). Provider 1 quotes wide (1.08092 /
//! 1.08152, spread 60) into the engine directly, every 100 ms. So the
//! published spread says whether provider 0 is in the best price — the
//! issue's "4 <-> 60". The engine is swept every 100 ms as the engine
//! thread does (`STALE_SWEEP_NS`), and health flips reach it through the
//! session's own `ProviderHealth`.
//!
//! Include with `#[path = "util/fix_lp.rs"] mod fix_lp;`.

#![allow(dead_code)] // each test binary uses a different part

use std::sync::Arc;

use pricewire::config::EngineConfig;
use pricewire::engine::{Aggregator, EngineStats, ProviderHealth};
use pricewire::feed::fix::codec::{self, Encoder, Fields, Header};
use pricewire::feed::fix::{bound_slot, FixSession, FixSessionConfig, Io, SessionState};
use pricewire::model::{InstrumentTable, Price, Tick};

pub const MS: u64 = 1_000_000;
pub const STEP: u64 = 10 * MS;
const WALL0: u64 = 1_764_425_045_000_000_000;

/// What the scripted LP does.
#[derive(Debug, Clone, Copy)]
pub struct Script {
    /// Logs each session out this long after its Logon (a flapping LP).
    pub session_ms: Option<u64>,
    /// One quote this often while logged on and subscribed.
    pub quote_every_ms: u64,
    /// TCP connects are refused (RST) before this time (an LP restarting).
    pub refuse_until_ms: u64,
    /// Answers Logon.
    pub logon_reply: bool,
}

impl Default for Script {
    fn default() -> Script {
        Script {
            session_ms: None,
            quote_every_ms: 20,
            refuse_until_ms: 0,
            logon_reply: true,
        }
    }
}

pub struct Lp {
    pub s: FixSession,
    pub health: Arc<ProviderHealth>,
    pub agg: Aggregator,
    pub script: Script,
    pub now: u64,
    peer_seq: u64,
    connected: bool,
    logged_on_at: Option<u64>,
    subscribed: Vec<Vec<u8>>,
    next_quote: u64,
    next_lp1: u64,
    next_sweep: u64,
    last: Option<Price>,
    /// Monotonic times of every connect attempt.
    pub connects: Vec<u64>,
    /// Monotonic times of every Logon the LP received.
    pub logons: Vec<u64>,
    /// Time (ns) provider 0 was in the published price, and the number of
    /// times it entered it.
    pub in_price_ns: u64,
    pub entries: u32,
    was_in: bool,
}

/// Every timing setting at its default, EUR/USD mapped.
pub fn config() -> FixSessionConfig {
    let t = InstrumentTable::default_with_providers(2);
    FixSessionConfig::new(0, "lp1", "127.0.0.1", 1)
        .map_symbol("EUR/USD", t.by_name("EURUSD").unwrap())
}

impl Lp {
    pub fn new(cfg: FixSessionConfig, script: Script, seed: u64) -> Lp {
        let health = ProviderHealth::new(2);
        // What the session publishes at its first poll (the flags start
        // healthy): so `health.is_healthy(0)` means "in" from the start.
        health.set(0, false);
        let table = InstrumentTable::default_with_providers(2);
        let agg = Aggregator::new(
            &table,
            &EngineConfig::default(),
            health.clone(),
            Arc::new(EngineStats::default()),
        );
        Lp {
            s: FixSession::new(cfg, 0, 0, seed, bound_slot(health.clone())),
            health,
            agg,
            script,
            now: 0,
            peer_seq: 1,
            connected: false,
            logged_on_at: None,
            subscribed: Vec::new(),
            next_quote: 0,
            next_lp1: 0,
            next_sweep: 0,
            last: None,
            connects: Vec::new(),
            logons: Vec::new(),
            in_price_ns: 0,
            entries: 0,
            was_in: false,
        }
    }

    pub fn wall(&self) -> u64 {
        WALL0 + self.now
    }

    /// Provider 0 is in the last published price (spread 4 points).
    pub fn in_price(&self) -> bool {
        self.last.is_some_and(|p| p.spread() == Some(4))
    }

    pub fn price(&self) -> Option<Price> {
        self.last
    }

    /// One 10-ms step: session timers, the LP, provider 1, the sweep.
    pub fn step(&mut self) {
        self.now += STEP;
        let io = self.s.poll(self.now, self.wall());
        self.apply(io);
        self.lp_turn();
        self.lp1_and_sweep();
        let inside = self.in_price();
        if inside {
            self.in_price_ns += STEP;
        }
        if inside && !self.was_in {
            self.entries += 1;
        }
        self.was_in = inside;
    }

    /// Steps for `ms` of session time.
    pub fn run_ms(&mut self, ms: u64) {
        let until = self.now + ms * MS;
        while self.now < until {
            self.step();
        }
    }

    /// Steps until `cond` or `limit_ms`; the time it took, or `None`.
    pub fn until(&mut self, limit_ms: u64, mut cond: impl FnMut(&mut Lp) -> bool) -> Option<u64> {
        let start = self.now;
        while self.now - start <= limit_ms * MS {
            if cond(self) {
                return Some(self.now - start);
            }
            self.step();
        }
        None
    }

    fn engine(&mut self, t: &Tick) {
        if self.agg.on_tick(t, self.now) == pricewire::engine::TickOutcome::Published {
            self.last = self.agg.output().copied();
        }
    }

    fn lp1_and_sweep(&mut self) {
        if self.now >= self.next_lp1 {
            self.next_lp1 = self.now + 100 * MS;
            let t = Tick {
                bid: 108_092,
                ask: 108_152,
                bid_size: 1,
                ask_size: 1,
                receive_time_ns: self.now,
                provider: 1,
                ..Tick::EMPTY
            };
            self.engine(&t);
        }
        if self.now >= self.next_sweep {
            self.next_sweep = self.now + 100 * MS;
            if self.agg.reevaluate(0, self.now) == pricewire::engine::TickOutcome::Published {
                self.last = self.agg.output().copied();
            }
        }
    }

    fn drain(&mut self) {
        let mut buf = [Tick::EMPTY; 16];
        loop {
            let n = self.s.drain_ticks(&mut buf);
            if n == 0 {
                break;
            }
            for t in &buf[..n] {
                self.engine(t);
            }
        }
    }

    fn apply(&mut self, io: Io) {
        match io {
            Io::Nothing => {}
            Io::Close => self.hang_up(),
            Io::Connect => {
                self.connects.push(self.now);
                if self.now < self.script.refuse_until_ms * MS {
                    let io = self.s.on_connect_failed(self.now);
                    return self.apply(io);
                }
                self.connected = true;
                self.peer_seq = 1;
                self.subscribed.clear();
                let io = self.s.on_connected(self.now, self.wall());
                self.apply(io);
            }
        }
    }

    fn hang_up(&mut self) {
        self.connected = false;
        self.logged_on_at = None;
        self.s.consume_outbound(self.s.outbound().len());
    }

    /// The LP drops the connection (a restart): the session sees EOF.
    pub fn drop_connection(&mut self) {
        if self.connected {
            self.hang_up();
            let io = self.s.on_disconnected(self.now);
            self.apply(io);
        }
    }

    fn lp_turn(&mut self) {
        if !self.connected {
            return;
        }
        let bytes = self.s.outbound().to_vec();
        self.s.consume_outbound(bytes.len());
        let mut rest = &bytes[..];
        while let Ok(Some(len)) = codec::frame_len(rest) {
            let fields: Vec<(u32, Vec<u8>)> = Fields::of_frame(&rest[..len])
                .filter_map(Result::ok)
                .map(|(t, v)| (t, v.to_vec()))
                .collect();
            rest = &rest[len..];
            self.answer(&fields);
            if !self.connected {
                return;
            }
        }
        if let (Some(ms), Some(at)) = (self.script.session_ms, self.logged_on_at) {
            if self.now >= at + ms * MS {
                self.send(b"5", |e| e.bytes(58, b"scripted logout"));
                if self.connected {
                    // The initiator answers; the LP then closes.
                    self.lp_turn_flush();
                    self.drop_connection();
                }
                return;
            }
        }
        if !self.subscribed.is_empty() && self.now >= self.next_quote {
            self.next_quote = self.now + self.script.quote_every_ms * MS;
            self.send(b"X", |e| {
                e.uint(268, 2);
                for (side, px) in [(0, &b"1.08120"[..]), (1, &b"1.08124"[..])] {
                    e.uint(279, 1);
                    e.uint(269, side);
                    e.bytes(55, b"EUR/USD");
                    e.bytes(270, px);
                }
            });
        }
    }

    fn lp_turn_flush(&mut self) {
        let n = self.s.outbound().len();
        self.s.consume_outbound(n);
    }

    fn answer(&mut self, fields: &[(u32, Vec<u8>)]) {
        let get = |tag: u32| {
            fields
                .iter()
                .find(|(t, _)| *t == tag)
                .map(|(_, v)| v.clone())
        };
        match &fields[0].1[..] {
            b"A" => {
                self.logons.push(self.now);
                if self.script.logon_reply {
                    self.logged_on_at = Some(self.now);
                    self.send(b"A", |e| {
                        e.uint(98, 0);
                        e.uint(108, 5);
                        e.bytes(141, b"Y");
                    });
                }
            }
            b"V" if get(263).as_deref() == Some(b"1") => {
                let sym = get(55).unwrap_or_default();
                self.send(b"W", |e| {
                    e.bytes(55, &sym);
                    e.uint(268, 2);
                    e.uint(269, 0);
                    e.bytes(270, b"1.08120");
                    e.uint(269, 1);
                    e.bytes(270, b"1.08124");
                });
                self.subscribed.push(sym);
            }
            b"1" => {
                let id = get(112).unwrap_or_default();
                self.send(b"0", |e| e.bytes(112, &id));
            }
            b"5" => {
                // Our Logout: answered, then the LP closes.
                self.send(b"5", |_| {});
                self.drop_connection();
            }
            _ => {}
        }
    }

    fn send(&mut self, msg_type: &[u8], body: impl FnOnce(&mut Encoder)) {
        if !self.connected {
            return;
        }
        let mut e = Encoder::new(1024);
        let header = Header {
            sender_comp_id: b"LP1",
            target_comp_id: b"PRICEWIRE",
            seq: self.peer_seq,
            sending_time_utc_ns: self.wall(),
        };
        self.peer_seq += 1;
        e.begin(msg_type, &header);
        body(&mut e);
        let frame = e.finish().unwrap().to_vec();
        let io = self.s.handle_frame(&frame, self.now, self.wall());
        self.drain();
        self.apply(io);
    }

    pub fn logged_on(&self) -> bool {
        self.s.state() == SessionState::Active
    }
}
