//! A FIX 4.4 market-data provider simulator (acceptor) for tests, drills
//! and the `fix-sim` tool.
//!
//! It accepts initiators on a loopback address, answers Logon, Heartbeat,
//! TestRequest and Logout, answers each MarketDataRequest with a snapshot
//! (35=W) and then streams incrementals (35=X) for the subscribed symbols;
//! a request for a symbol it does not quote gets a MarketDataRequestReject
//! (35=Y, reason 0 unknown symbol). Knobs, changeable while running (from
//! code or as text commands, see [`FixSim::command`]):
//! `rate <per_s>`, `latency <ms>` (stale SendingTime/MDEntryTime),
//! `stall on|off` (send nothing at all, not even heartbeats),
//! `disconnect` (close every connection), `refuse on|off` (close new
//! connections at once), `garbage <n>` (the next n messages carry a bad
//! checksum), `broken <n>` (the next n messages have a field without `=`),
//! `gap <n>` (skip n sequence numbers once).
//!
//! A test tool, not a hot-path component: blocking sockets with short read
//! timeouts, real time, one thread per connection, at most
//! [`CONNECTIONS_MAX`] connections. It never sleeps: pacing waits in the
//! socket read timeout.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::codec::{self, Encoder, Fields, Header};
use crate::clock::wall_ns;
use crate::model::price::{parse_price, FixedPrice};
use crate::model::Mantissa;

/// Why [`FixSim::command`] refused a line; the text follows `err `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimCommandError {
    /// A command that needs a number had none.
    #[error("missing number")]
    MissingNumber,
    /// The argument is not an unsigned number.
    #[error("{0}")]
    NotANumber(#[source] std::num::ParseIntError),
    /// `stall` or `refuse` without `on` or `off`.
    #[error("expected on|off")]
    ExpectedOnOff,
    /// No such command.
    #[error("unknown command `{0}`")]
    Unknown(String),
}

/// Most simultaneous connections.
pub const CONNECTIONS_MAX: u64 = 16;
/// Read timeout of a connection thread: the pacing and knob-check period.
pub const TURN_MS: u64 = 2;
/// Most quotes sent in one turn (bounds a burst after a pause).
pub const BURST_MAX: u64 = 256;

/// One symbol the simulator quotes.
#[derive(Debug, Clone)]
pub struct SimSymbol {
    /// The provider's name for it, e.g. `EUR/USD`.
    pub name: String,
    /// Decimal digits of its prices.
    pub digits: u8,
    /// Starting mid, in points.
    pub mid: Mantissa,
    /// Spread, in points.
    pub spread: Mantissa,
}

impl SimSymbol {
    /// `name`, decimal mid text, digits, spread in points.
    pub fn new(name: &str, mid: &str, digits: u8, spread: Mantissa) -> SimSymbol {
        SimSymbol {
            name: name.to_string(),
            digits,
            mid: parse_price(mid, digits).expect("valid simulator price"),
            spread,
        }
    }
}

/// Simulator settings.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Loopback listen address (port 0 = any free port).
    pub listen: SocketAddr,
    /// SenderCompID until a Logon names us otherwise (its TargetCompID).
    pub sender_comp_id: String,
    /// Symbols it quotes; others are answered with MarketDataRequestReject.
    pub symbols: Vec<SimSymbol>,
    /// Quotes per second per connection (round-robin over subscriptions).
    pub rate_per_s: u64,
    /// Seed of the quote random walk.
    pub seed: u64,
}

impl SimConfig {
    /// Defaults around `symbols`: any free loopback port, `LPSIM`, 200
    /// quotes/s, seed 7.
    pub fn new(symbols: Vec<SimSymbol>) -> SimConfig {
        SimConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            sender_comp_id: "LPSIM".into(),
            symbols,
            rate_per_s: 200,
            seed: 7,
        }
    }
}

/// Knobs and counters shared by the simulator's threads.
#[derive(Debug, Default)]
pub struct SimShared {
    /// Quotes per second per connection.
    pub rate_per_s: AtomicU64,
    /// Age given to SendingTime/MDEntryTime, in ms (stale quotes).
    pub latency_ms: AtomicU64,
    /// Send nothing at all, not even heartbeats.
    pub stall: AtomicBool,
    /// Close new connections at once.
    pub refuse: AtomicBool,
    /// Bumped to close every open connection.
    pub disconnect_gen: AtomicU64,
    /// Messages still to send with a bad checksum.
    pub garbage_pending: AtomicU64,
    /// Messages still to send with a field without `=`.
    pub broken_pending: AtomicU64,
    /// Sequence numbers to skip once.
    pub gap_pending: AtomicU64,
    shutdown: AtomicBool,
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections open.
    pub active: AtomicU64,
    /// Logons answered.
    pub logons: AtomicU64,
    /// Quotes sent (snapshot and incremental entries).
    pub quotes_sent: AtomicU64,
    /// MarketDataRequestRejects sent.
    pub rejects_sent: AtomicU64,
    /// TestRequests answered with a Heartbeat.
    pub test_requests_answered: AtomicU64,
    /// Logouts received.
    pub logouts: AtomicU64,
}

/// A running simulator; dropping it stops it.
pub struct FixSim {
    shared: Arc<SimShared>,
    addr: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl FixSim {
    /// Binds and starts accepting.
    pub fn start(cfg: SimConfig) -> io::Result<FixSim> {
        if !cfg.listen.ip().is_loopback() {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                "simulator listens on loopback only",
            ));
        }
        let listener = TcpListener::bind(cfg.listen)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(SimShared::default());
        shared.rate_per_s.store(cfg.rate_per_s, Relaxed);
        let sh = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("fix-sim-accept".into())
            .spawn(move || accept_loop(listener, sh, cfg))?;
        Ok(FixSim {
            shared,
            addr,
            accept: Some(accept),
        })
    }

    /// The address the simulator listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// Knobs and counters.
    pub fn shared(&self) -> &SimShared {
        &self.shared
    }
    /// Sets the quote rate per connection.
    pub(crate) fn set_rate(&self, per_s: u64) {
        self.shared.rate_per_s.store(per_s, Relaxed);
    }
    /// Makes quotes look `ms` old.
    pub fn set_latency_ms(&self, ms: u64) {
        self.shared.latency_ms.store(ms, Relaxed);
    }
    /// Stops (or resumes) sending anything.
    pub fn set_stall(&self, on: bool) {
        self.shared.stall.store(on, Relaxed);
    }
    /// Refuses (or accepts again) new connections.
    pub fn set_refuse(&self, on: bool) {
        self.shared.refuse.store(on, Relaxed);
    }
    /// Closes every open connection.
    pub fn disconnect_all(&self) {
        self.shared.disconnect_gen.fetch_add(1, Relaxed);
    }
    /// Gives the next `messages` messages a bad checksum.
    pub fn send_garbage(&self, messages: u64) {
        self.shared.garbage_pending.fetch_add(messages, Relaxed);
    }
    /// Gives the next `messages` messages a field without `=`.
    pub fn send_broken(&self, messages: u64) {
        self.shared.broken_pending.fetch_add(messages, Relaxed);
    }
    /// Skips `numbers` sequence numbers once.
    pub fn skip_seq(&self, numbers: u64) {
        self.shared.gap_pending.fetch_add(numbers, Relaxed);
    }

    /// Applies one text command (grammar in the module docs); returns a
    /// reply line.
    pub fn command(&self, line: &str) -> Result<String, SimCommandError> {
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or("");
        let arg = words.next();
        let num = || -> Result<u64, SimCommandError> {
            let raw = arg.ok_or(SimCommandError::MissingNumber)?;
            raw.parse().map_err(SimCommandError::NotANumber)
        };
        let on = || match arg {
            Some("on") => Ok(true),
            Some("off") => Ok(false),
            _ => Err(SimCommandError::ExpectedOnOff),
        };
        match cmd {
            "rate" => self.set_rate(num()?),
            "latency" => self.set_latency_ms(num()?.min(60_000)),
            "stall" => self.set_stall(on()?),
            "refuse" => self.set_refuse(on()?),
            "disconnect" => self.disconnect_all(),
            "garbage" => self.send_garbage(num()?.min(1_000)),
            "broken" => self.send_broken(num()?.min(1_000)),
            "gap" => self.skip_seq(num()?.min(1_000_000)),
            "status" => {}
            other => return Err(SimCommandError::Unknown(other.to_string())),
        }
        Ok(self.status())
    }

    /// One status line: `ok` and the counters and knobs.
    pub fn status(&self) -> String {
        let s = &self.shared;
        format!(
            "ok accepted={} active={} logons={} quotes_sent={} rejects_sent={} stall={} latency_ms={} rate_per_s={}",
            s.accepted.load(Relaxed),
            s.active.load(Relaxed),
            s.logons.load(Relaxed),
            s.quotes_sent.load(Relaxed),
            s.rejects_sent.load(Relaxed),
            s.stall.load(Relaxed),
            s.latency_ms.load(Relaxed),
            s.rate_per_s.load(Relaxed),
        )
    }

    /// Stops accepting and closes every connection (bounded: each
    /// connection thread sees the flag within [`TURN_MS`]).
    pub fn shutdown(&mut self) {
        self.shared.shutdown.store(true, Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(500));
            let _ = h.join();
        }
    }
}

impl Drop for FixSim {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<SimShared>, cfg: SimConfig) {
    let mut next_seed = cfg.seed;
    for stream in listener.incoming() {
        if shared.shutdown.load(Relaxed) {
            break;
        }
        let Ok(stream) = stream else { continue };
        shared.accepted.fetch_add(1, Relaxed);
        if shared.refuse.load(Relaxed) || shared.active.load(Relaxed) >= CONNECTIONS_MAX {
            let _ = stream.shutdown(std::net::Shutdown::Both);
            continue; // dropped: RST
        }
        shared.active.fetch_add(1, Relaxed);
        next_seed = next_seed.wrapping_add(1);
        let (sh, c) = (Arc::clone(&shared), cfg.clone());
        let seed = next_seed;
        let spawned = std::thread::Builder::new()
            .name("fix-sim-conn".into())
            .spawn(move || {
                let _ = SimConn::new(stream, &c, seed).and_then(|mut conn| conn.run(&sh));
                sh.active.fetch_sub(1, Relaxed);
            });
        if spawned.is_err() {
            shared.active.fetch_sub(1, Relaxed);
        }
    }
}

/// One subscription on a connection.
struct Sub {
    symbol: usize,
    req_id: String,
}

struct SimConn {
    stream: TcpStream,
    rx: Vec<u8>,
    enc: Encoder,
    seq: u64,
    target: String,
    sender: String,
    symbols: Vec<SimSymbol>,
    subs: Vec<Sub>,
    logged_on: bool,
    heartbeat: Duration,
    last_sent: Instant,
    started: Instant,
    quotes: u64,
    next_sub: usize,
    rng: SmallRng,
}

impl SimConn {
    fn new(stream: TcpStream, cfg: &SimConfig, seed: u64) -> io::Result<SimConn> {
        stream.set_read_timeout(Some(Duration::from_millis(TURN_MS)))?;
        stream.set_nodelay(true)?;
        Ok(SimConn {
            stream,
            rx: Vec::with_capacity(64 * 1024),
            enc: Encoder::new(4_096),
            seq: 1,
            target: String::new(),
            sender: cfg.sender_comp_id.clone(),
            symbols: cfg.symbols.clone(),
            subs: Vec::new(),
            logged_on: false,
            heartbeat: Duration::from_secs(30),
            last_sent: Instant::now(),
            started: Instant::now(),
            quotes: 0,
            next_sub: 0,
            rng: SmallRng::seed_from_u64(seed),
        })
    }

    fn run(&mut self, shared: &SimShared) -> io::Result<()> {
        let gen = shared.disconnect_gen.load(Relaxed);
        let mut buf = [0u8; 8_192];
        loop {
            if shared.shutdown.load(Relaxed) || shared.disconnect_gen.load(Relaxed) != gen {
                let _ = self.stream.shutdown(std::net::Shutdown::Both);
                return Ok(());
            }
            match self.stream.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    if self.rx.len() + n > 1 << 20 {
                        return Ok(()); // a peer flooding us: drop it
                    }
                    self.rx.extend_from_slice(&buf[..n]);
                    if !self.handle_input(shared)? {
                        return Ok(());
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => return Err(e),
            }
            if !shared.stall.load(Relaxed) {
                self.send_due(shared)?;
            }
        }
    }

    /// Handles the complete frames received; false to close.
    fn handle_input(&mut self, shared: &SimShared) -> io::Result<bool> {
        loop {
            let len = match codec::frame_len(&self.rx) {
                Ok(Some(len)) => len,
                Ok(None) => return Ok(true),
                Err(_) => return Ok(false),
            };
            let frame: Vec<u8> = self.rx.drain(..len).collect();
            if !self.handle_frame(&frame, shared)? {
                return Ok(false);
            }
        }
    }

    fn handle_frame(&mut self, frame: &[u8], shared: &SimShared) -> io::Result<bool> {
        let fields: Vec<(u32, Vec<u8>)> = Fields::of_frame(frame)
            .filter_map(Result::ok)
            .map(|(t, v)| (t, v.to_vec()))
            .collect();
        let get = |tag: u32| {
            fields
                .iter()
                .find(|(t, _)| *t == tag)
                .map(|(_, v)| v.clone())
        };
        let msg_type = get(35).unwrap_or_default();
        let stalled = shared.stall.load(Relaxed);
        match msg_type.as_slice() {
            b"A" => {
                self.target = String::from_utf8_lossy(&get(49).unwrap_or_default()).into_owned();
                // An acceptor answers as whoever the initiator addressed.
                if let Some(us) = get(56).filter(|v| !v.is_empty()) {
                    self.sender = String::from_utf8_lossy(&us).into_owned();
                }
                let hb = get(108)
                    .and_then(|v| codec::parse_u64(&v))
                    .unwrap_or(30)
                    .max(1);
                self.heartbeat = Duration::from_secs(hb);
                self.seq = 1;
                self.logged_on = true;
                shared.logons.fetch_add(1, Relaxed);
                if !stalled {
                    self.send(shared, b"A", |e| {
                        e.uint(98, 0);
                        e.uint(108, hb);
                        e.bytes(141, b"Y");
                    })?;
                }
            }
            b"1" if !stalled => {
                shared.test_requests_answered.fetch_add(1, Relaxed);
                let id = get(112).unwrap_or_default();
                self.send(shared, b"0", |e| e.bytes(112, &id))?;
            }
            b"5" => {
                shared.logouts.fetch_add(1, Relaxed);
                if !stalled {
                    self.send(shared, b"5", |_| {})?;
                }
                return Ok(false);
            }
            b"V" if self.logged_on => self.on_request(&fields, shared)?,
            _ => {}
        }
        Ok(true)
    }

    fn on_request(&mut self, fields: &[(u32, Vec<u8>)], shared: &SimShared) -> io::Result<()> {
        let get = |tag: u32| {
            fields
                .iter()
                .find(|(t, _)| *t == tag)
                .map(|(_, v)| v.clone())
        };
        let req_id = String::from_utf8_lossy(&get(262).unwrap_or_default()).into_owned();
        let action = get(263).unwrap_or_default();
        let names: Vec<Vec<u8>> = fields
            .iter()
            .filter(|(t, _)| *t == 55)
            .map(|(_, v)| v.clone())
            .collect();
        for name in names {
            let found = self
                .symbols
                .iter()
                .position(|s| s.name.as_bytes() == name.as_slice());
            match (found, action.as_slice()) {
                (_, b"2") => self.subs.retain(|s| s.req_id != req_id),
                (Some(symbol), _) => {
                    self.subs.push(Sub {
                        symbol,
                        req_id: req_id.clone(),
                    });
                    self.send_snapshot(symbol, &req_id, shared)?;
                }
                (None, _) => {
                    shared.rejects_sent.fetch_add(1, Relaxed);
                    let text = format!("unknown symbol {}", String::from_utf8_lossy(&name));
                    self.send(shared, b"Y", |e| {
                        e.bytes(262, req_id.as_bytes());
                        e.uint(281, 0);
                        e.bytes(58, text.as_bytes());
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Quotes due by the configured rate, and a heartbeat when idle.
    fn send_due(&mut self, shared: &SimShared) -> io::Result<()> {
        if !self.logged_on {
            return Ok(());
        }
        let rate = shared.rate_per_s.load(Relaxed);
        let elapsed_ns = self.started.elapsed().as_nanos() as u64;
        let due = (elapsed_ns as u128 * rate as u128 / 1_000_000_000) as u64;
        if due > self.quotes + BURST_MAX {
            self.quotes = due - BURST_MAX; // do not catch up on a backlog
        }
        while self.quotes < due && !self.subs.is_empty() {
            self.quotes += 1;
            let k = self.next_sub % self.subs.len();
            self.next_sub += 1;
            self.send_increment(k, shared)?;
        }
        if self.last_sent.elapsed() >= self.heartbeat {
            self.send(shared, b"0", |_| {})?;
        }
        Ok(())
    }

    fn step(&mut self, symbol: usize) -> (String, String) {
        let s = &mut self.symbols[symbol];
        s.mid += self.rng.gen_range(-2..=2);
        s.mid = s.mid.max(s.spread * 4);
        let bid = FixedPrice(s.mid - s.spread / 2, s.digits).to_string();
        let ask = FixedPrice(s.mid - s.spread / 2 + s.spread, s.digits).to_string();
        (bid, ask)
    }

    fn entry_time(shared: &SimShared) -> u64 {
        wall_ns().saturating_sub(shared.latency_ms.load(Relaxed) * 1_000_000)
    }

    fn send_snapshot(&mut self, symbol: usize, req_id: &str, shared: &SimShared) -> io::Result<()> {
        let (bid, ask) = self.step(symbol);
        let name = self.symbols[symbol].name.clone();
        let t = Self::entry_time(shared);
        shared.quotes_sent.fetch_add(1, Relaxed);
        self.send(shared, b"W", |e| {
            e.bytes(262, req_id.as_bytes());
            e.bytes(55, name.as_bytes());
            e.uint(268, 2);
            for (side, px) in [(0, &bid), (1, &ask)] {
                e.uint(269, side);
                e.bytes(270, px.as_bytes());
                e.uint(271, 1_000_000);
                time_fields(e, t);
            }
        })
    }

    fn send_increment(&mut self, k: usize, shared: &SimShared) -> io::Result<()> {
        let symbol = self.subs[k].symbol;
        let (bid, ask) = self.step(symbol);
        let name = self.symbols[symbol].name.clone();
        let req_id = self.subs[k].req_id.clone();
        let t = Self::entry_time(shared);
        shared.quotes_sent.fetch_add(1, Relaxed);
        self.send(shared, b"X", |e| {
            e.bytes(262, req_id.as_bytes());
            e.uint(268, 2);
            for (side, px) in [(0, &bid), (1, &ask)] {
                e.uint(279, 1);
                e.uint(269, side);
                e.bytes(55, name.as_bytes());
                e.bytes(270, px.as_bytes());
                e.uint(271, 1_000_000);
                time_fields(e, t);
            }
        })
    }

    /// Frames and writes one message, applying the garbage/gap knobs.
    fn send(
        &mut self,
        shared: &SimShared,
        msg_type: &[u8],
        body: impl FnOnce(&mut Encoder),
    ) -> io::Result<()> {
        let gap = shared.gap_pending.swap(0, Relaxed);
        self.seq += gap;
        let header = Header {
            sender_comp_id: self.sender.as_bytes(),
            target_comp_id: self.target.as_bytes(),
            seq: self.seq,
            sending_time_utc_ns: Self::entry_time(shared),
        };
        self.seq += 1;
        self.enc.begin(msg_type, &header);
        body(&mut self.enc);
        if take_one(&shared.broken_pending) {
            self.enc.raw(b"270\x01");
        }
        let msg = self
            .enc
            .finish()
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut msg = msg.to_vec();
        if take_one(&shared.garbage_pending) {
            let i = msg.len() - 2; // last checksum digit
            msg[i] = if msg[i] == b'9' { b'0' } else { msg[i] + 1 };
        }
        self.last_sent = Instant::now();
        self.stream.write_all(&msg)
    }
}

/// MDEntryDate (272) and MDEntryTime (273) of `utc_ns`.
fn time_fields(e: &mut Encoder, utc_ns: u64) {
    let mut ts = Vec::with_capacity(24);
    let _ = codec::write_utc_timestamp(&mut ts, utc_ns);
    e.bytes(272, &ts[..8]);
    e.bytes(273, &ts[9..]);
}

fn take_one(counter: &AtomicU64) -> bool {
    counter
        .fetch_update(Relaxed, Relaxed, |v| v.checked_sub(1))
        .is_ok()
}
