//! The thundering herd against pricewire: N clients connect, log on and
//! subscribe within one second while the steady subscribers of a run are
//! measured. A refused client backs off and retries: it waits at least
//! the server's `retryAfterMs`, plus a jittered exponential backoff
//! (full jitter, base [`BACKOFF_BASE_MS`], cap [`BACKOFF_CAP_MS`]).
//!
//! One thread runs every herd client on one mio loop; each client owns a
//! small buffer allocated when the herd is set up. The herd is bounded by
//! `timeout_ms`; clients still not subscribed then are counted.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::recv::RecvShared;
use super::run::DuringRun;
use super::send::Window;
use super::target::{self, Event, Target};
use super::BenchClock;
use pricewire::clock::monotonic_ns;

pub const BACKOFF_BASE_MS: u64 = 50;
pub const BACKOFF_CAP_MS: u64 = 2_000;
/// A connect + logon + subscribe attempt that takes longer is abandoned.
pub const ATTEMPT_TIMEOUT_MS: u64 = 5_000;
const CLIENT_IN_BYTES: usize = 16 * 1024;
const HEARTBEAT_NS: u64 = super::recv::HEARTBEAT_MS * 1_000_000;

/// Herd settings.
#[derive(Debug, Clone)]
pub struct HerdSpec {
    pub addr: SocketAddr,
    pub clients: usize,
    /// The clients start evenly spread over this many ms.
    pub spread_ms: u64,
    pub timeout_ms: u64,
    /// Steady measurement before the herd starts, in ms.
    pub before_ms: u64,
    /// Steady measurement once every client is subscribed, with the whole
    /// herd still connected and reading, in ms: the load the herd leaves
    /// behind, told apart from the cost of letting it in.
    pub after_ms: u64,
    /// Clients subscribe round-robin to the ticked symbols
    /// `0..symbols_total`, or all to `symbol` (one the generator never
    /// ticks, for the cost of session set-up without the fan-out it brings).
    pub symbols_total: u16,
    pub symbol: Option<u16>,
    pub seed: u64,
}

/// What the herd saw.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct HerdResult {
    pub clients: usize,
    pub logged_on: usize,
    pub subscribed: usize,
    /// From the herd's start until the last client was logged on /
    /// subscribed; `None` if some never were within the timeout.
    pub all_logged_on_ms: Option<f64>,
    pub all_subscribed_ms: Option<f64>,
    pub attempts: u64,
    pub rejected_at_logon: u64,
    pub rejected_at_subscribe: u64,
    pub connect_failures: u64,
    pub timeouts: u64,
    /// Price updates the herd's clients received (snapshots not counted):
    /// 0 for a herd on a symbol nobody ticks.
    pub updates_received: u64,
    /// Connections lost after every client was subscribed (the after
    /// phase): such clients reconnect, and the phase no longer measures
    /// the whole herd connected.
    pub dropped_after: u64,
    /// Updates the server skipped for a herd client: sequence gaps between
    /// consecutive updates on one connection (conflated or lost; the
    /// snapshot at subscribe starts nothing, the first update does).
    pub update_gaps: u64,
    /// CPU seconds of the generator thread that runs the herd's clients:
    /// the load the herd puts on the same cores as the server.
    pub herd_thread_cpu_s: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting { at_ns: u64 },
    Connecting { since_ns: u64 },
    LoggingOn { since_ns: u64 },
    Subscribing { since_ns: u64 },
    SubscribeRetry { at_ns: u64 },
    Done,
}

struct Client {
    state: State,
    stream: Option<TcpStream>,
    inbuf: Box<[u8]>,
    have: usize,
    failures: u32,
    logged_on: bool,
    /// Sequence number of the last update on this connection (0: none).
    last_seq: u64,
    /// When this client's next heartbeat is due: each client keeps its own
    /// phase from its logon, as real terminals do, rather than the whole
    /// herd writing in one burst.
    next_hb_ns: u64,
    symbol: u16,
}

struct Herd<'a> {
    spec: &'a HerdSpec,
    poll: Poll,
    clients: Vec<Client>,
    rng: SmallRng,
    r: HerdResult,
    t0: u64,
    /// When the after phase ends; `Some` once every client was subscribed.
    after_end_ns: Option<u64>,
    scratch: Vec<u8>,
    /// One heartbeat frame, encoded once.
    heartbeat: Vec<u8>,
}

/// Runs the herd until every client is subscribed (or the timeout); then,
/// if `spec.after_ms` is not 0, calls `subscribed` and keeps every client
/// connected and reading for `spec.after_ms` (not if the herd timed out).
pub fn run(spec: &HerdSpec, subscribed: impl FnOnce()) -> io::Result<HerdResult> {
    let cpu0 = super::thread_cpu_s();
    let mut herd = Herd::new(spec)?;
    herd.run(subscribed)?;
    herd.r.herd_thread_cpu_s = super::thread_cpu_s() - cpu0;
    Ok(herd.r)
}

/// Backoff before retry `failures` (1-based): at least `retry_after_ms`,
/// plus full jitter over the exponential window.
pub fn backoff_ms(rng: &mut impl Rng, failures: u32, retry_after_ms: u32) -> u64 {
    let exp = BACKOFF_BASE_MS.saturating_mul(1u64 << failures.min(16));
    let window = exp.min(BACKOFF_CAP_MS);
    u64::from(retry_after_ms) + rng.gen_range(0..=window)
}

impl<'a> Herd<'a> {
    fn new(spec: &'a HerdSpec) -> io::Result<Herd<'a>> {
        let t0 = monotonic_ns();
        let n = spec.clients.max(1) as u64;
        let clients = (0..spec.clients)
            .map(|i| Client {
                state: State::Waiting {
                    at_ns: t0 + spec.spread_ms * 1_000_000 * i as u64 / n,
                },
                stream: None,
                inbuf: vec![0u8; CLIENT_IN_BYTES].into_boxed_slice(),
                have: 0,
                failures: 0,
                logged_on: false,
                last_seq: 0,
                next_hb_ns: 0,
                symbol: spec
                    .symbol
                    .unwrap_or((i % usize::from(spec.symbols_total.max(1))) as u16),
            })
            .collect();
        Ok(Herd {
            spec,
            poll: Poll::new()?,
            clients,
            rng: SmallRng::seed_from_u64(spec.seed),
            r: HerdResult {
                clients: spec.clients,
                ..HerdResult::default()
            },
            t0,
            after_end_ns: None,
            scratch: Vec::with_capacity(256),
            heartbeat: {
                let mut hb = Vec::new();
                target::heartbeat(Target::Pricewire, &mut hb);
                hb
            },
        })
    }

    fn run(&mut self, subscribed: impl FnOnce()) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let deadline = self.t0 + self.spec.timeout_ms * 1_000_000;
        let mut next_timers_ns = self.t0;
        let mut subscribed = Some(subscribed);
        loop {
            let now = monotonic_ns();
            match self.after_end_ns {
                Some(end) if now >= end => break,
                Some(_) => {}
                None if self.r.subscribed >= self.spec.clients => {
                    if self.spec.after_ms == 0 {
                        break;
                    }
                    if let Some(f) = subscribed.take() {
                        f();
                    }
                    self.after_end_ns = Some(now + self.spec.after_ms * 1_000_000);
                }
                None if now >= deadline => break,
                None => {}
            }
            self.poll
                .poll(&mut events, Some(Duration::from_millis(1)))?;
            for ev in events.iter() {
                self.ready(ev.token().0, ev.is_writable());
            }
            // Timers walk every client: at most once a millisecond, so a
            // large herd does not eat the CPU the measured subscribers need.
            let now = monotonic_ns();
            if now >= next_timers_ns {
                next_timers_ns = now + 1_000_000;
                self.timers(now);
            }
        }
        Ok(())
    }

    fn elapsed_ms(&self) -> f64 {
        (monotonic_ns() - self.t0) as f64 / 1e6
    }

    /// Connects, retries and times out clients whose time has come, and
    /// sends the heartbeats that are due (logged-on clients must not look
    /// idle while the herd lasts).
    fn timers(&mut self, now: u64) {
        for i in 0..self.clients.len() {
            let c = &mut self.clients[i];
            if c.logged_on && now >= c.next_hb_ns {
                c.next_hb_ns = now + HEARTBEAT_NS;
                if let Some(s) = c.stream.as_mut() {
                    let _ = s.write(&self.heartbeat);
                }
            }
            match self.clients[i].state {
                State::Waiting { at_ns } if now >= at_ns => self.connect(i, now),
                State::SubscribeRetry { at_ns } if now >= at_ns => self.subscribe(i, now),
                State::Connecting { since_ns }
                | State::LoggingOn { since_ns }
                | State::Subscribing { since_ns }
                    if now > since_ns + ATTEMPT_TIMEOUT_MS * 1_000_000 =>
                {
                    self.r.timeouts += 1;
                    self.fail(i, 0, now);
                }
                _ => {}
            }
        }
    }

    fn connect(&mut self, i: usize, now: u64) {
        self.r.attempts += 1;
        let c = &mut self.clients[i];
        c.have = 0;
        c.last_seq = 0; // a new connection starts from a snapshot
        let mut stream = match TcpStream::connect(self.spec.addr) {
            Ok(s) => s,
            Err(_) => {
                self.r.connect_failures += 1;
                return self.fail(i, 0, now);
            }
        };
        let interest = Interest::READABLE | Interest::WRITABLE;
        if self
            .poll
            .registry()
            .register(&mut stream, Token(i), interest)
            .is_err()
        {
            self.r.connect_failures += 1;
            return self.fail(i, 0, now);
        }
        c.stream = Some(stream);
        c.state = State::Connecting { since_ns: now };
    }

    /// Closes the connection and schedules a retry after the backoff; a
    /// client that was logged on or subscribed no longer counts as such.
    fn fail(&mut self, i: usize, retry_after_ms: u32, now: u64) {
        let c = &mut self.clients[i];
        if c.logged_on {
            c.logged_on = false;
            self.r.logged_on -= 1;
        }
        if c.state == State::Done {
            self.r.subscribed -= 1;
            if self.after_end_ns.is_some() {
                self.r.dropped_after += 1;
            }
        }
        if let Some(mut s) = c.stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        c.failures += 1;
        let wait = backoff_ms(&mut self.rng, c.failures, retry_after_ms);
        c.state = State::Waiting {
            at_ns: now + wait * 1_000_000,
        };
    }

    fn send(&mut self, i: usize) -> bool {
        let Some(s) = self.clients[i].stream.as_mut() else {
            return false;
        };
        s.write(&self.scratch).ok() == Some(self.scratch.len())
    }

    fn subscribe(&mut self, i: usize, now: u64) {
        self.scratch.clear();
        let symbol = self.clients[i].symbol;
        target::encode_subscribe(Target::Pricewire, &[symbol], &mut self.scratch);
        if self.send(i) {
            self.clients[i].state = State::Subscribing { since_ns: now };
        } else {
            self.fail(i, 0, now);
        }
    }

    fn ready(&mut self, i: usize, writable: bool) {
        let now = monotonic_ns();
        if writable && matches!(self.clients[i].state, State::Connecting { .. }) {
            let connected = self.clients[i]
                .stream
                .as_ref()
                .is_some_and(|s| s.peer_addr().is_ok());
            if !connected {
                return; // spurious, or the connect failed: the read sees it
            }
            self.scratch.clear();
            target::subscriber_hello(Target::Pricewire, &[], &mut self.scratch);
            if !self.send(i) {
                return self.fail(i, 0, now);
            }
            self.clients[i].state = State::LoggingOn { since_ns: now };
        }
        self.read(i, now);
    }

    fn read(&mut self, i: usize, now: u64) {
        loop {
            let c = &mut self.clients[i];
            let Some(s) = c.stream.as_mut() else { return };
            if c.have == c.inbuf.len() {
                c.have = 0; // updates we do not measure: drop them
            }
            match s.read(&mut c.inbuf[c.have..]) {
                Ok(0) => return self.fail(i, 0, now),
                Ok(n) => {
                    c.have += n;
                    if !self.parse(i, now) {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(_) => {
                    self.r.connect_failures += 1;
                    return self.fail(i, 0, now);
                }
            }
        }
    }

    /// Handles whole frames; false when the connection was closed.
    fn parse(&mut self, i: usize, now: u64) -> bool {
        let mut used = 0;
        loop {
            let c = &self.clients[i];
            let ev = match target::parse(Target::Pricewire, &c.inbuf[used..c.have]) {
                Ok(Some((ev, n))) => {
                    used += n;
                    ev
                }
                Ok(None) => break,
                Err(_) => {
                    self.fail(i, 0, now);
                    return false;
                }
            };
            if !self.event(i, ev, now) {
                return false;
            }
        }
        let c = &mut self.clients[i];
        c.inbuf.copy_within(used..c.have, 0);
        c.have -= used;
        true
    }

    fn event(&mut self, i: usize, ev: Event, now: u64) -> bool {
        match ev {
            Event::LoggedOn => {
                if !self.clients[i].logged_on {
                    self.clients[i].logged_on = true;
                    self.clients[i].next_hb_ns = now + HEARTBEAT_NS;
                    self.r.logged_on += 1;
                    if self.r.logged_on == self.spec.clients && self.r.all_logged_on_ms.is_none() {
                        self.r.all_logged_on_ms = Some(self.elapsed_ms());
                    }
                }
                self.subscribe(i, now);
            }
            Event::Rejected {
                retry_after_ms,
                at_logon: true,
            } => {
                self.r.rejected_at_logon += 1;
                self.fail(i, retry_after_ms, now);
                return false;
            }
            Event::Rejected { retry_after_ms, .. } => {
                self.r.rejected_at_subscribe += 1;
                let c = &mut self.clients[i];
                c.failures += 1;
                let wait = backoff_ms(&mut self.rng, c.failures, retry_after_ms);
                c.state = State::SubscribeRetry {
                    at_ns: now + wait * 1_000_000,
                };
            }
            Event::Subscribed if self.clients[i].state != State::Done => {
                self.clients[i].state = State::Done;
                self.r.subscribed += 1;
                if self.r.subscribed == self.spec.clients && self.r.all_subscribed_ms.is_none() {
                    self.r.all_subscribed_ms = Some(self.elapsed_ms());
                }
            }
            Event::Closed => {
                self.fail(i, 0, now);
                return false;
            }
            Event::Update(d) => {
                self.r.updates_received += 1;
                let c = &mut self.clients[i];
                let (gap, last) = target::seq_gap(c.last_seq, d.seq);
                self.r.update_gaps += gap;
                c.last_seq = last;
            }
            _ => {}
        }
        true
    }
}

/// The herd as a run hook: steady measurement into phase 0 for
/// `before_ms`, then the herd with measurement into phase 1 until every
/// client is subscribed (or the timeout), then phase 2 for `after_ms`
/// with the herd connected, then recording stops.
pub struct HerdHook {
    pub spec: HerdSpec,
    pub result: Option<io::Result<HerdResult>>,
}

impl DuringRun for HerdHook {
    fn during(&mut self, shared: &RecvShared, window: Window, clock: BenchClock) {
        let herd_at = window.start_ns + self.spec.before_ms * 1_000_000;
        let now = monotonic_ns();
        if herd_at > now {
            std::thread::sleep(Duration::from_nanos(herd_at - now));
        }
        shared.begin_phase(1, clock.to_wall(monotonic_ns()));
        self.result = Some(run(&self.spec, || {
            shared.begin_phase(2, clock.to_wall(monotonic_ns()));
        }));
        shared.end_measuring(clock.to_wall(monotonic_ns()));
    }
}

/// Reads `pricewire_admission_rejects_total{stage=...}` from the ops
/// listener's /metrics (plain HTTP/1.0 on loopback).
pub fn admission_rejects(ops: SocketAddr) -> io::Result<Vec<(String, f64)>> {
    let mut s = std::net::TcpStream::connect_timeout(&ops, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    Ok(parse_rejects(&body))
}

/// The reject counters by stage from a Prometheus text exposition.
pub fn parse_rejects(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| l.starts_with("pricewire_admission_rejects_total{"))
        .filter_map(|l| {
            let stage = l.split("stage=\"").nth(1)?.split('"').next()?;
            let v: f64 = l.rsplit(' ').next()?.parse().ok()?;
            Some((stage.to_string(), v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_honours_retry_after_and_caps_the_jitter() {
        let mut rng = SmallRng::seed_from_u64(7);
        for failures in 1..20 {
            let b = backoff_ms(&mut rng, failures, 3_000);
            assert!((3_000..=3_000 + BACKOFF_CAP_MS).contains(&b), "{b}");
        }
        let first: Vec<u64> = (0..50).map(|_| backoff_ms(&mut rng, 1, 0)).collect();
        assert!(first.iter().all(|&b| b <= 100));
        assert!(
            first.iter().any(|&b| b != first[0]),
            "jitter spreads retries"
        );
    }

    #[test]
    fn rejects_parse_by_stage() {
        let text = "# HELP x\npricewire_admission_rejects_total{stage=\"accept\"} 12\n\
                    pricewire_admission_rejects_total{stage=\"logon\"} 3\nother 1\n";
        assert_eq!(
            parse_rejects(text),
            vec![("accept".into(), 12.0), ("logon".into(), 3.0)]
        );
    }
}
