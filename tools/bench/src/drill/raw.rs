//! Raw herd clients over the documented protocol (docs/protocol.md), many
//! per driver thread on one mio loop: each connects from its own source
//! address, logs on, subscribes to one symbol, heartbeats and reads, and
//! comes back after the retry-after it was given. Used by the drills that
//! need thousands of sessions (`herd-starved`).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pricewire::wire::{self, DisconnectReason, Message, TIER_ACCOUNT_DEFAULT};

pub const HEARTBEAT_MS: u32 = 1_000;

#[derive(Default)]
pub struct Tally {
    pub on: AtomicU64,
    pub logons: AtomicU64,
    pub refusals: AtomicU64,
    pub idle_cuts: AtomicU64,
    pub other_cuts: AtomicU64,
    pub connect_errors: AtomicU64,
}

/// Source address of client `i`: 127.0.0.2 + i mod `sources`.
pub fn source(i: usize, sources: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 2 + (i % sources) as u8)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting(Instant),
    AwaitingLogon(Instant),
    LoggedOn,
}

/// One herd client over the documented protocol (docs/protocol.md).
pub struct Raw {
    src: Ipv4Addr,
    stream: Option<std::net::TcpStream>,
    buf: Vec<u8>,
    len: usize,
    state: State,
    last_tx: Instant,
}

impl Raw {
    /// A client from `src` that connects at `at` and reads into a buffer
    /// of `buf_len` bytes (updates past it are dropped unparsed).
    pub fn new(src: Ipv4Addr, at: Instant, buf_len: usize) -> Raw {
        Raw {
            src,
            stream: None,
            buf: vec![0; buf_len],
            len: 0,
            state: State::Waiting(at),
            last_tx: at,
        }
    }

    fn send(&mut self, bytes: &[u8], now: Instant) {
        if let Some(s) = self.stream.as_mut() {
            let _ = s.write_all(bytes);
        }
        self.last_tx = now;
    }

    fn open(&mut self, dst: SocketAddrV4, reg: (&mio::Registry, usize), t: &Tally, now: Instant) {
        let Ok(s) = super::conn::connect(SocketAddr::V4(dst), Some(self.src)) else {
            t.connect_errors.fetch_add(1, Relaxed);
            self.state = State::Waiting(now + Duration::from_millis(200));
            return;
        };
        let _ = s.set_nodelay(true);
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        self.stream = Some(s);
        self.len = 0;
        self.send(&super::conn::logon_frame("herd", "herd", HEARTBEAT_MS), now);
        if let Some(s) = self.stream.as_ref() {
            use std::os::fd::AsRawFd;
            let _ = s.set_nonblocking(true);
            let fd = s.as_raw_fd();
            let (registry, token) = reg;
            let mut source = mio::unix::SourceFd(&fd);
            let _ = registry.register(&mut source, mio::Token(token), mio::Interest::READABLE);
        }
        self.state = State::AwaitingLogon(now);
    }

    fn ended(&mut self, retry_ms: u32, t: &Tally, now: Instant) {
        if matches!(self.state, State::LoggedOn) {
            t.on.fetch_sub(1, Relaxed);
        }
        self.stream = None;
        self.state = State::Waiting(now + Duration::from_millis(u64::from(retry_ms.max(100))));
    }

    fn on_frame(&mut self, frame: &[u8], t: &Tally, now: Instant) -> bool {
        let on = matches!(self.state, State::LoggedOn);
        match wire::decode(frame) {
            Ok(Message::LogonAccepted(_)) => {
                self.state = State::LoggedOn;
                t.on.fetch_add(1, Relaxed);
                t.logons.fetch_add(1, Relaxed);
                let mut b = [0u8; 128];
                let n = wire::encode_subscribe_names(&mut b, 1, TIER_ACCOUNT_DEFAULT, ["EURUSD"])
                    .unwrap();
                self.send(&b[..n], now);
            }
            Ok(Message::LogonRejected(r)) => {
                t.refusals.fetch_add(1, Relaxed);
                self.ended(r.retry_after_ms, t, now);
                return false;
            }
            Ok(Message::Disconnect(d)) => {
                if on && d.reason == DisconnectReason::IDLE_TIMEOUT {
                    t.idle_cuts.fetch_add(1, Relaxed);
                } else if on {
                    t.other_cuts.fetch_add(1, Relaxed);
                } else {
                    t.refusals.fetch_add(1, Relaxed);
                }
                self.ended(d.retry_after_ms, t, now);
                return false;
            }
            _ => {}
        }
        true
    }

    fn read(&mut self, t: &Tally, now: Instant) {
        loop {
            let Some(s) = self.stream.as_mut() else {
                return;
            };
            match s.read(&mut self.buf[self.len..]) {
                Ok(n) if n > 0 => self.len += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                _ => {
                    if matches!(self.state, State::LoggedOn) {
                        t.other_cuts.fetch_add(1, Relaxed);
                    }
                    return self.ended(500, t, now);
                }
            }
            let mut at = 0;
            while let Ok(Some(n)) =
                wire::split_with_max(&self.buf[at..self.len], wire::SERVER_FRAME_LEN_MAX)
            {
                let frame = std::mem::take(&mut self.buf);
                let open = self.on_frame(&frame[at..at + n], t, now);
                self.buf = frame;
                at += n;
                if !open {
                    return;
                }
            }
            self.buf.copy_within(at..self.len, 0);
            self.len -= at;
        }
    }

    fn timers(&mut self, dst: SocketAddrV4, reg: (&mio::Registry, usize), t: &Tally, now: Instant) {
        match self.state {
            State::Waiting(at) if now >= at => self.open(dst, reg, t, now),
            State::AwaitingLogon(since) if now - since > Duration::from_secs(20) => {
                t.connect_errors.fetch_add(1, Relaxed);
                self.ended(0, t, now);
            }
            State::LoggedOn
                if now - self.last_tx >= Duration::from_millis(u64::from(HEARTBEAT_MS)) =>
            {
                let mut b = [0u8; 32];
                let n = wire::encode_heartbeat(&mut b).unwrap();
                self.send(&b[..n], now);
            }
            _ => {}
        }
    }
}

/// One driver thread: its clients read when readable, timers every 10 ms.
pub fn drive(dst: SocketAddrV4, mut clients: Vec<Raw>, t: Arc<Tally>, stop: Arc<AtomicBool>) {
    let Ok(mut poll) = mio::Poll::new() else {
        return;
    };
    let mut events = mio::Events::with_capacity(1024);
    let mut next_timers = Instant::now();
    while !stop.load(Relaxed) {
        let now = Instant::now();
        if now >= next_timers {
            for (k, c) in clients.iter_mut().enumerate() {
                c.timers(dst, (poll.registry(), k), &t, now);
            }
            next_timers = now + Duration::from_millis(10);
        }
        let wait = next_timers.saturating_duration_since(Instant::now());
        if poll.poll(&mut events, Some(wait)).is_err() {
            continue;
        }
        let now = Instant::now();
        for e in events.iter() {
            if let Some(c) = clients.get_mut(e.token().0) {
                c.read(&t, now);
            }
        }
    }
}

/// Spreads clients `0..clients` (client `i` made by `make(i)`) over
/// `drivers` threads named `name`, each running [`drive`] until `stop`.
pub fn spawn_drivers(
    (dst, name): (SocketAddrV4, &str),
    clients: usize,
    drivers: usize,
    make: impl Fn(usize) -> Raw,
    (t, stop): (&Arc<Tally>, &Arc<AtomicBool>),
) -> std::io::Result<Vec<std::thread::JoinHandle<()>>> {
    (0..drivers)
        .map(|k| {
            let mine: Vec<Raw> = (k..clients).step_by(drivers).map(&make).collect();
            let (t, stop) = (t.clone(), stop.clone());
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || drive(dst, mine, t, stop))
        })
        .collect()
}

/// Waits until `clients` are logged on at once, at most until `give_up`:
/// how long after `t0` that was (`None`: never).
pub fn await_all_on(t: &Tally, clients: usize, t0: Instant, give_up: Instant) -> Option<Duration> {
    while Instant::now() < give_up {
        if t.on.load(Relaxed) as usize >= clients {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}
