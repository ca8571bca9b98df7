//! The herd-beside-a-CPU-hog drill (#18, docs/overload.md "Loop lag"): the
//! real binary on loopback; steady subscribers connected first; then a
//! herd of raw protocol clients from 15 source addresses (127.0.0.2 to
//! 127.0.0.16, each socket bound to its address before connect) logs on,
//! subscribes, heartbeats and reads, while threads of this process spin on
//! every core. Refused clients come back after the retryAfterMs they were
//! given.
//!
//! Must hold: every herd client logged on in the end, 0 idle_timeout
//! disconnects of receiving clients, the steady subscribers' worst gap
//! between prices ≤ 1 s, and the loop-lag metrics are exposed for every
//! shard. The figures (herd time, refusals, lag histogram, lagging
//! episodes, sheds) are printed (`-- --nocapture`).
//!
//! Default: 450 clients (30 per address), bounded to 30 s.
//! `PRICEWIRE_DRILL_FULL=1`: 3,000 clients (200 per address), bounded to
//! 120 s, with the default busy window (3–8 s). `PRICEWIRE_BIN=path` runs
//! another build of the server (e.g. `target/release/pricewire`).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, DisconnectCause, Event};
use pricewire::wire::{self, DisconnectReason, Message, TIER_ACCOUNT_DEFAULT};

use crate::util::net;

/// Source addresses 127.0.0.2 ..= 127.0.0.(1 + SOURCES).
const SOURCES: usize = 15;
const HERD: usize = 450;
const HERD_FULL: usize = 3_000;
/// Driver threads of the herd (each owns a share of every address).
const DRIVERS: usize = 3;
const STEADY: usize = 4;
/// The herd stays connected (heartbeating, reading) this long after the
/// last client logged on: longer than the 3-heartbeat idle cut.
const HOLD: Duration = Duration::from_secs(4);
const MAX_GAP: Duration = Duration::from_secs(1);
const HEARTBEAT_MS: u32 = 1_000;

fn full() -> bool {
    std::env::var("PRICEWIRE_DRILL_FULL").as_deref() == Ok("1")
}

/// Counts of the herd, shared by the driver threads.
#[derive(Default)]
struct Tally {
    /// Herd clients logged on now.
    on: AtomicU64,
    logons: AtomicU64,
    /// LogonRejected or Disconnect before logon (busy, rate limits).
    refusals: AtomicU64,
    refused_without_retry: AtomicU64,
    /// Disconnect(idle_timeout) of a logged-on client.
    idle_cuts: AtomicU64,
    /// Any other end of a logged-on client's session.
    other_cuts: AtomicU64,
    connect_errors: AtomicU64,
    prices: AtomicU64,
}

/// A TCP connection from `src` (bound before connect) to `dst`.
fn connect_from(src: Ipv4Addr, dst: SocketAddrV4) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let sa = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let (local, remote) = (sa(src, 0), sa(*dst.ip(), dst.port()));
    // SAFETY: a fresh socket owned by the TcpStream at once (closed on
    // every error path by its drop); bind and connect get pointers to
    // sockaddr_in values that live on this frame, with their exact size.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let p = |a: &libc::sockaddr_in| a as *const libc::sockaddr_in as *const libc::sockaddr;
        if libc::bind(fd, p(&local), len) != 0 || libc::connect(fd, p(&remote), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

enum State {
    /// Not connected; (re)connect at this time.
    Waiting(Instant),
    /// Logon sent at this time.
    AwaitingLogon(Instant),
    LoggedOn,
}

/// One herd client over the documented protocol (docs/protocol.md).
struct Raw {
    src: Ipv4Addr,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
    len: usize,
    state: State,
    last_tx: Instant,
}

impl Raw {
    fn new(src: Ipv4Addr, at: Instant) -> Raw {
        Raw {
            src,
            stream: None,
            buf: vec![0; 256 * 1024],
            len: 0,
            state: State::Waiting(at),
            last_tx: at,
        }
    }

    fn send(&mut self, bytes: &[u8], now: Instant) {
        if let Some(s) = self.stream.as_mut() {
            // A frame of a few dozen bytes into a socket whose buffer the
            // server drains: WouldBlock would only delay a heartbeat.
            let _ = s.write_all(bytes);
        }
        self.last_tx = now;
    }

    /// Connects, sends Logon and registers the socket for readability
    /// under `token`.
    fn open(&mut self, dst: SocketAddrV4, reg: (&mio::Registry, usize), t: &Tally, now: Instant) {
        let Ok(s) = connect_from(self.src, dst) else {
            t.connect_errors.fetch_add(1, Relaxed);
            self.state = State::Waiting(now + Duration::from_millis(200));
            return;
        };
        let _ = s.set_nodelay(true);
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        self.stream = Some(s);
        self.len = 0;
        let mut b = [0u8; 128];
        let logon = wire::Logon {
            heartbeat_interval_ms: HEARTBEAT_MS,
            account: b"demo",
            token: b"demo",
        };
        let n = wire::encode_logon(&mut b, &logon).unwrap();
        self.send(&b[..n], now);
        if let Some(s) = self.stream.as_ref() {
            use std::os::fd::AsRawFd;
            let _ = s.set_nonblocking(true);
            let fd = s.as_raw_fd();
            let (registry, token) = reg;
            let mut source = mio::unix::SourceFd(&fd);
            // Closing the socket (`ended`) takes it out of the poller.
            registry
                .register(&mut source, mio::Token(token), mio::Interest::READABLE)
                .unwrap();
        }
        self.state = State::AwaitingLogon(now);
    }

    /// The session ended (refused, cut or closed): come back after
    /// `retry_ms` (the server's retryAfterMs; a short pause if none).
    fn ended(&mut self, retry_ms: u32, t: &Tally, now: Instant) {
        if matches!(self.state, State::LoggedOn) {
            t.on.fetch_sub(1, Relaxed);
        }
        self.stream = None;
        self.state = State::Waiting(now + Duration::from_millis(u64::from(retry_ms.max(100))));
    }

    /// One server frame; returns false once the session ended.
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
                self.refused(r.retry_after_ms, t);
                self.ended(r.retry_after_ms, t, now);
                return false;
            }
            Ok(Message::Disconnect(d)) => {
                if on && d.reason == DisconnectReason::IDLE_TIMEOUT {
                    t.idle_cuts.fetch_add(1, Relaxed);
                } else if on {
                    t.other_cuts.fetch_add(1, Relaxed);
                } else {
                    self.refused(d.retry_after_ms, t);
                }
                self.ended(d.retry_after_ms, t, now);
                return false;
            }
            Ok(Message::PriceSnapshot(_) | Message::PriceUpdate(_)) => {
                t.prices.fetch_add(1, Relaxed);
            }
            _ => {}
        }
        true
    }

    fn refused(&self, retry_ms: u32, t: &Tally) {
        t.refusals.fetch_add(1, Relaxed);
        if retry_ms == 0 {
            t.refused_without_retry.fetch_add(1, Relaxed);
        }
    }

    /// Reads what arrived and handles every whole frame.
    fn read(&mut self, t: &Tally, now: Instant) {
        loop {
            let Some(s) = self.stream.as_mut() else {
                return;
            };
            match s.read(&mut self.buf[self.len..]) {
                Ok(n) if n > 0 => self.len += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // Closed without a Disconnect (or reset).
                _ => {
                    if matches!(self.state, State::LoggedOn) {
                        t.other_cuts.fetch_add(1, Relaxed);
                    }
                    return self.ended(500, t, now);
                }
            }
            let mut at = 0;
            let max = wire::SERVER_FRAME_LEN_MAX;
            while let Ok(Some(n)) = wire::split_with_max(&self.buf[at..self.len], max) {
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

    /// The client's timers: (re)connect, logon timeout, heartbeat.
    fn timers(&mut self, dst: SocketAddrV4, reg: (&mio::Registry, usize), t: &Tally, now: Instant) {
        match self.state {
            State::Waiting(at) if now >= at => self.open(dst, reg, t, now),
            State::AwaitingLogon(since) if now - since > Duration::from_secs(10) => {
                // No answer at all: a failure the drill reports.
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

/// One driver: its clients, read when their sockets are readable (epoll)
/// and their timers run every 10 ms, until `stop`.
fn drive(dst: SocketAddrV4, mut clients: Vec<Raw>, t: Arc<Tally>, stop: Arc<AtomicBool>) {
    let mut poll = mio::Poll::new().unwrap();
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

/// Threads spinning on every core until `stop`.
fn cpu_hog(stop: Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<u64>> {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (0..cores)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut spins = 0u64;
                while !stop.load(Relaxed) {
                    spins = std::hint::black_box(spins.wrapping_add(1));
                }
                spins
            })
        })
        .collect()
}

/// A steady subscriber's reader: (worst gap between prices, prices,
/// sessions lost), read until `stop`.
fn steady(
    addr: SocketAddr,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(Duration, u64, u64)> {
    let mut cfg = ClientConfig::new(addr, "demo", "demo");
    cfg.rng_seed = Some(seed);
    cfg.heartbeat_ms = HEARTBEAT_MS;
    let mut c = Client::connect(cfg).expect("steady subscriber logs on");
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD", "GBPUSD", "XAUUSD"])
        .unwrap();
    std::thread::spawn(move || {
        let (mut last, mut worst, mut prices, mut lost) = (None::<Instant>, Duration::ZERO, 0, 0);
        while !stop.load(Relaxed) {
            match c.next_event(Duration::from_millis(20)) {
                Ok(Some(Event::Price(_))) => {
                    let now = Instant::now();
                    if let Some(l) = last {
                        worst = worst.max(now - l);
                    }
                    last = Some(now);
                    prices += 1;
                }
                Ok(Some(Event::Disconnected { cause, .. }))
                    if !matches!(cause, DisconnectCause::Server { .. }) =>
                {
                    lost += 1;
                }
                Ok(Some(Event::Disconnected { .. })) => lost += 1,
                _ => {}
            }
        }
        if let Some(l) = last {
            worst = worst.max(l.elapsed());
        }
        (worst, prices, lost)
    })
}

fn start_server(addr: SocketAddr, ops: SocketAddr) -> net::Server {
    let bin = std::env::var("PRICEWIRE_BIN").unwrap_or(env!("CARGO_BIN_EXE_pricewire").into());
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--synthetic-rate", "2000", "--shards", "2"])
        .args(["--report-interval-ms", "60000", "--drain-delay-ms", "0"])
        .args([
            "--listen",
            &addr.to_string(),
            "--ops-listen",
            &ops.to_string(),
        ])
        // The market-open defaults, with a shorter busy window so the
        // short drill fits its bound (the full drill keeps the default).
        .args(if full() {
            vec![]
        } else {
            vec!["--busy-retry-min-ms", "500", "--busy-retry-max-ms", "2000"]
        });
    net::start_ready(&mut cmd, ops)
}

/// `GET /metrics`.
fn scrape(ops: SocketAddr) -> String {
    let mut s = TcpStream::connect_timeout(&ops, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// The sum of the samples of series starting with `prefix`.
fn sum_of(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The lag figures of the scrape, one line per shard and the totals.
fn lag_report(text: &str) -> (Vec<String>, f64) {
    let mut lines = Vec::new();
    let mut samples = 0.0;
    for k in 0..2 {
        let l = format!("{{shard=\"{k}\"}}");
        let count = sum_of(text, &format!("pricewire_shard_loop_lag_seconds_count{l}"));
        let sum = sum_of(text, &format!("pricewire_shard_loop_lag_seconds_sum{l}"));
        let over = count
            - sum_of(
                text,
                &format!("pricewire_shard_loop_lag_seconds_bucket{{shard=\"{k}\",le=\"0.1\"}}"),
            );
        let episodes = sum_of(text, &format!("pricewire_shard_lag_episodes_total{l}"));
        let conflated = sum_of(
            text,
            &format!("pricewire_conflations_total{{reason=\"loop_lag_shard{k}\"}}"),
        );
        samples += count;
        lines.push(format!(
            "shard {k}: {count} lag samples, mean {:.1} ms, {over} over 100 ms; \
             {episodes} lagging episodes; {conflated} updates conflated",
            if count > 0.0 { sum / count * 1e3 } else { 0.0 }
        ));
    }
    (lines, samples)
}

/// What one drill run saw.
struct Outcome {
    n: usize,
    bound: Duration,
    herd_took: Duration,
    /// Herd clients logged on when the herd phase ended, and after the hold.
    all_on: u64,
    still_on: u64,
    spins: u64,
    tally: Arc<Tally>,
    /// (worst gap, prices, sessions lost) per steady subscriber.
    steady: Vec<(Duration, u64, u64)>,
    /// The scrape at the end of the hold.
    metrics: String,
}

/// Steady subscribers, then the herd beside the hog until every client is
/// on (or `bound`), then the hold; every thread stopped and joined.
fn run_drill(addr: SocketAddr, ops: SocketAddr, n: usize, bound: Duration) -> Outcome {
    let SocketAddr::V4(dst) = addr else {
        panic!("loopback v4")
    };
    let stop_steady = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..STEADY)
        .map(|k| steady(addr, 1_000 + k as u64, stop_steady.clone()))
        .collect();
    let stop_hog = Arc::new(AtomicBool::new(false));
    let hog = cpu_hog(stop_hog.clone());
    let tally = Arc::new(Tally::default());
    let stop_herd = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let drivers: Vec<_> = (0..DRIVERS)
        .map(|d| {
            let clients = (d..n)
                .step_by(DRIVERS)
                .map(|i| Raw::new(Ipv4Addr::new(127, 0, 0, 2 + (i % SOURCES) as u8), start))
                .collect();
            let (t, stop) = (tally.clone(), stop_herd.clone());
            std::thread::spawn(move || drive(dst, clients, t, stop))
        })
        .collect();
    while tally.on.load(Relaxed) < n as u64 && start.elapsed() < bound {
        std::thread::park_timeout(Duration::from_millis(20));
    }
    let herd_took = start.elapsed();
    let all_on = tally.on.load(Relaxed);
    // Held: heartbeating and reading, beside the hog, past the idle cut.
    let held = Instant::now() + HOLD;
    while Instant::now() < held {
        std::thread::park_timeout(Duration::from_millis(20));
    }
    let still_on = tally.on.load(Relaxed);
    stop_hog.store(true, Relaxed);
    let spins = hog.into_iter().map(|h| h.join().unwrap()).sum();
    let metrics = scrape(ops);
    stop_herd.store(true, Relaxed);
    stop_steady.store(true, Relaxed);
    for d in drivers {
        d.join().unwrap();
    }
    let steady = readers.into_iter().map(|r| r.join().unwrap()).collect();
    Outcome {
        n,
        bound,
        herd_took,
        all_on,
        still_on,
        spins,
        tally,
        steady,
        metrics,
    }
}

/// Prints the figures; returns the loop-lag report lines and samples.
fn report(o: &Outcome) -> (Vec<String>, f64) {
    let (t, m) = (&o.tally, &o.metrics);
    let (lines, samples) = lag_report(m);
    let rejects = sum_of(m, "pricewire_admission_rejects_total{stage=\"loop_lag\"}");
    let sheds = sum_of(m, "pricewire_sheds_total{reason=\"loop_lag\"}");
    eprintln!(
        "herd of {} from {SOURCES} addresses beside {} hog spins: {} logged on in \
         {:.2} s, {} still on after {HOLD:?}; {} refusals ({} without retry), \
         {} connect errors, {} idle cuts, {} other cuts, {} herd prices",
        o.n,
        o.spins,
        o.all_on,
        o.herd_took.as_secs_f64(),
        o.still_on,
        t.refusals.load(Relaxed),
        t.refused_without_retry.load(Relaxed),
        t.connect_errors.load(Relaxed),
        t.idle_cuts.load(Relaxed),
        t.other_cuts.load(Relaxed),
        t.prices.load(Relaxed),
    );
    for l in &lines {
        eprintln!("{l}");
    }
    eprintln!("loop_lag admission rejects {rejects}, request sheds {sheds}");
    eprintln!("steady (worst gap, prices, sessions lost): {:?}", o.steady);
    (lines, samples)
}

#[test]
fn herd_from_15_addresses_beside_a_cpu_hog_logs_on_without_idle_cuts() {
    let (n, bound) = if full() {
        (HERD_FULL, Duration::from_secs(120))
    } else {
        (HERD, Duration::from_secs(20))
    };
    net::raise_open_files_limit(2 * n + 256);
    let (addr, ops) = (net::free_addr(), net::free_addr());
    let mut server = start_server(addr, ops);
    let o = run_drill(addr, ops, n, bound);
    let (lines, samples) = report(&o);
    let t = &o.tally;
    assert_eq!(
        o.all_on, n as u64,
        "every herd client logged on within {:?}",
        o.bound
    );
    assert_eq!(
        o.still_on, n as u64,
        "every herd client still on after {HOLD:?}"
    );
    assert_eq!(
        t.idle_cuts.load(Relaxed),
        0,
        "a receiving client was cut as idle"
    );
    assert_eq!(
        t.other_cuts.load(Relaxed),
        0,
        "a logged-on client lost its session"
    );
    assert_eq!(
        t.refused_without_retry.load(Relaxed),
        0,
        "a refusal without retryAfterMs"
    );
    assert!(t.prices.load(Relaxed) > 0, "the herd read prices");
    for (worst, prices, lost) in &o.steady {
        assert!(*prices > 0, "a steady subscriber got no price");
        assert_eq!(*lost, 0, "a steady subscriber lost its session");
        assert!(
            *worst <= MAX_GAP,
            "a steady subscriber's worst gap {worst:?} > {MAX_GAP:?}"
        );
    }
    assert!(samples > 0.0, "loop-lag histogram exposed: {lines:?}");
    assert!(
        matches!(server.0.try_wait(), Ok(None)),
        "server died during the drill"
    );
}
