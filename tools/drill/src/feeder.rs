//! A price provider for one core: a thread that logs on to the core's
//! provider ingest port as a bridge and quotes every drill symbol on a
//! random walk at a fixed rate, until it is cut (the drill's "feeds
//! lost") or dropped. Reconnects while the core is not up yet.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pricewire::feed::bridge::Bridge;
use pricewire::model::Tick;

/// The provider's name and token in the cores' configuration.
pub const PROVIDER: &str = "drill";
/// Its token (clear: a loopback drill).
pub const TOKEN: &str = "drill-feed";

/// A running provider.
pub struct Feeder {
    stop: Arc<AtomicBool>,
    /// Quotes sent so far.
    pub sent: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Feeder {
    /// Quotes `symbols` (ids with their starting mids) to `feed`, `rate`
    /// quotes per second in all, the walk seeded by `seed`.
    pub fn start(feed: SocketAddr, symbols: Vec<(u16, i64)>, rate: u64, seed: u64) -> Feeder {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (s, n) = (stop.clone(), sent.clone());
        let thread = std::thread::Builder::new()
            .name("drill-feed".into())
            .spawn(move || run(feed, symbols, rate.max(1), seed, &s, &n))
            .expect("feeder thread");
        Feeder {
            stop,
            sent,
            thread: Some(thread),
        }
    }

    /// Stops quoting and closes the connection: the core's engine marks
    /// its prices stale after its max quote age.
    pub fn cut(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        self.cut();
    }
}

fn run(
    feed: SocketAddr,
    mut symbols: Vec<(u16, i64)>,
    rate: u64,
    seed: u64,
    stop: &AtomicBool,
    sent: &AtomicU64,
) {
    let every = Duration::from_nanos(1_000_000_000 / rate);
    let mut rng = seed | 1;
    let mut bridge: Option<Bridge> = None;
    let mut next = Instant::now();
    let mut k = 0usize;
    while !stop.load(Ordering::Acquire) {
        let Some(b) = bridge.as_mut() else {
            bridge = Bridge::connect(feed, 0, TOKEN, Duration::from_secs(1)).ok();
            if bridge.is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        };
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        next += every;
        if next + Duration::from_secs(1) < now {
            next = now; // a stalled thread does not burst to catch up
        }
        let n = symbols.len();
        let (symbol, mid) = &mut symbols[k % n];
        k += 1;
        // xorshift: a step of -2..=2 points.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        *mid = (*mid + (rng % 5) as i64 - 2).max(100);
        let tick = Tick {
            symbol: *symbol,
            bid: *mid - 4,
            ask: *mid + 4,
            bid_size: 1_000_000,
            ask_size: 1_000_000,
            provider_time_ns: pricewire::clock::wall_ns(),
            ..Tick::EMPTY
        };
        if b.send(&[tick]).and_then(|()| b.keepalive()).is_err() {
            bridge = None;
            continue;
        }
        sent.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(b) = bridge {
        let _ = b.close();
    }
}
