//! The open-loop sender: one thread, one connection, acting as the price
//! provider of every symbol. Tick `i` goes to symbol `i mod N`; its bid and
//! ask move by one point each tick (up, down, up, ...) so every tick
//! changes the price and pricewire's engine publishes it (and the 100 bps
//! spike filter never fires).
//!
//! The sender sleeps (with the timer slack lowered to 1 ns) until the next
//! tick is due, then sends every due tick in one write, up to
//! `batch_max`. It never reads replies on the sending thread: a drain
//! thread discards whatever the server sends back (Redis answers each
//! PUBLISH). Buffers are allocated before the first tick.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;

use super::hist::{latency_histogram, record_latency, Schedule};
use super::target::{self, BenchTick, Target};
use super::BenchClock;
use pricewire::clock::monotonic_ns;
use pricewire::model::instruments::default_instruments;

/// Connect and logon timeout of the sender.
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;

/// What to send.
#[derive(Debug, Clone)]
pub struct SendPlan {
    pub target: Target,
    pub addr: SocketAddr,
    pub rate_per_s: u64,
    pub symbols_total: u16,
    /// Ticks per write at most (a late sender catches up in batches).
    pub batch_max: usize,
    /// pricewire provider id and ingest token.
    pub provider: u16,
    pub token: String,
}

/// What the sender did.
#[derive(Debug)]
pub struct SendResult {
    /// Ticks sent in total and inside the measured window.
    pub sent_total: u64,
    pub sent_measured: u64,
    /// Measured ticks per symbol (for the expected delivery count).
    pub measured_per_symbol: Vec<u64>,
    /// Scheduled → actual send time of measured ticks: the generator's
    /// own lag.
    pub lag: Histogram<u64>,
    pub writes: u64,
}

/// A connected, logged-on publisher.
pub struct Publisher {
    stream: TcpStream,
    drain: Option<std::thread::JoinHandle<()>>,
    target: Target,
}

impl Publisher {
    /// Connects, sends the target's hello and waits for its reply where
    /// there is one; starts the drain thread.
    pub fn connect(plan: &SendPlan) -> io::Result<Publisher> {
        let t = Duration::from_millis(CONNECT_TIMEOUT_MS);
        let mut stream = TcpStream::connect_timeout(&plan.addr, t)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(t))?;
        stream.set_read_timeout(Some(t))?;
        let mut hello = Vec::with_capacity(512);
        let wait = target::publisher_hello(plan.target, plan.provider, &plan.token, &mut hello);
        stream.write_all(&hello)?;
        if wait {
            let mut buf = vec![0u8; 4096];
            let n = pricewire::feed::bridge::read_frame(&mut stream, &mut buf)?;
            match target::parse(plan.target, &buf[..n]) {
                Ok(Some((target::Event::LoggedOn, _))) => {}
                other => {
                    return Err(io::Error::other(format!(
                        "publisher logon refused: {other:?}"
                    )))
                }
            }
        }
        let mut reader = stream.try_clone()?;
        reader.set_read_timeout(None)?;
        let drain = std::thread::Builder::new()
            .name("bench-drain".into())
            .spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
            })?;
        Ok(Publisher {
            stream,
            drain: Some(drain),
            target: plan.target,
        })
    }

    /// Closes the connection and joins the drain thread.
    pub fn close(mut self) {
        if self.target == Target::Pricewire {
            let mut buf = [0u8; 32];
            if let Ok(n) = pricewire::wire::encode_logout(&mut buf) {
                let _ = self.stream.write_all(&buf[..n]);
            }
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        if let Some(d) = self.drain.take() {
            let _ = d.join();
        }
    }
}

/// Per-symbol price state: base and spread from the instrument table
/// (for every target, so payloads are identical).
struct Prices {
    base: Vec<(i64, i64)>,
    seq: Vec<u64>,
}

impl Prices {
    fn new(symbols_total: u16) -> Prices {
        let table = default_instruments();
        let base = (0..symbols_total as usize)
            .map(|i| {
                table
                    .get(i)
                    .map_or((100_000, 10), |x| (x.base_price, x.spread_points))
            })
            .collect();
        Prices {
            base,
            seq: vec![0; symbols_total as usize],
        }
    }

    #[inline]
    fn tick(&mut self, symbol: u16, scheduled_ns: u64) -> BenchTick {
        let s = symbol as usize;
        self.seq[s] += 1;
        let seq = self.seq[s];
        let (base, spread) = self.base[s];
        let bid = base + (seq & 1) as i64;
        BenchTick {
            symbol,
            seq,
            bid,
            ask: bid + spread,
            scheduled_ns,
        }
    }
}

fn lower_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only
    // affects the calling thread's sleep rounding.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Sleeps or spins until `mono_ns` (or `stop`).
fn wait_until(mono_ns: u64) {
    let now = monotonic_ns();
    if mono_ns > now + 2_000 {
        std::thread::sleep(Duration::from_nanos(mono_ns - now - 1_000));
    } else {
        std::hint::spin_loop();
    }
}

/// The measured window on the monotonic clock: `[start, end)`.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Runs the schedule from `schedule.start_ns` until `window.end_ns`
/// (monotonic) or `stop`; ticks scheduled inside `window` are measured.
pub fn run(
    publisher: &mut Publisher,
    plan: &SendPlan,
    clock: BenchClock,
    schedule: Schedule,
    window: Window,
    stop: &AtomicBool,
    sent_counter: &AtomicU64,
) -> io::Result<SendResult> {
    lower_timer_slack();
    let mut prices = Prices::new(plan.symbols_total);
    let mut batch: Vec<BenchTick> = Vec::with_capacity(plan.batch_max);
    let mut out = Vec::with_capacity(plan.batch_max * 160 + 64);
    let mut r = SendResult {
        sent_total: 0,
        sent_measured: 0,
        measured_per_symbol: vec![0; plan.symbols_total as usize],
        lag: latency_histogram(),
        writes: 0,
    };
    let n = u64::from(plan.symbols_total.max(1));
    let end_ns = window.end_ns;
    let mut next = 0u64;
    loop {
        let sched = schedule.scheduled_ns(next);
        if sched >= end_ns || stop.load(Ordering::Relaxed) {
            break;
        }
        let now = monotonic_ns();
        let due = schedule.due_count(now);
        if due <= next {
            wait_until(sched);
            continue;
        }
        batch.clear();
        while next < due && batch.len() < plan.batch_max {
            let s = schedule.scheduled_ns(next);
            if s >= end_ns {
                break;
            }
            let symbol = (next % n) as u16;
            batch.push(prices.tick(symbol, clock.to_wall(s)));
            if s >= window.start_ns && s < window.end_ns {
                record_latency(&mut r.lag, s, now);
                r.sent_measured += 1;
                r.measured_per_symbol[symbol as usize] += 1;
            }
            next += 1;
        }
        out.clear();
        target::encode_publish(plan.target, &batch, &mut out);
        publisher.stream.write_all(&out)?;
        r.writes += 1;
        r.sent_total += batch.len() as u64;
        sent_counter.store(r.sent_total, Ordering::Relaxed);
    }
    Ok(r)
}
