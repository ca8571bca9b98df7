//! A terminal that records everything it is shown: a thread running the
//! client SDK (`pricewire::client`) against one edge (or a list, failing
//! over), subscribed to the drill's symbols at the raw tier, that keeps
//! every price event — (stream, symbol, seq, bid, ask, flags, snapshot or
//! update, the SDK's sequence verdict, arrival time) — for the checker.
//! It holds everything in memory: a drill runs minutes at a few hundred
//! prices per second.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, Event, SeqStatus};
use pricewire::resilience::backoff::Backoff;
use pricewire::wire::PriceKind;

/// The tier every recorder subscribes at (no markup: every edge's price
/// of a (stream, symbol, seq) is the core's).
pub const RAW_TIER: u8 = 0;

/// One price a terminal was shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Record {
    /// Nanoseconds since the drill's start when it arrived.
    pub at_ns: u64,
    /// The stream that numbered it.
    pub stream: u64,
    /// Symbol id.
    pub symbol: u16,
    /// Sequence number.
    pub seq: u64,
    /// Bid and ask mantissas.
    pub bid: i64,
    /// Ask mantissa.
    pub ask: i64,
    /// PriceFlags bits.
    pub flags: u8,
    /// A PriceSnapshot (else an update).
    pub snapshot: bool,
    /// The SDK's verdict on its sequence.
    #[serde(skip)]
    pub status: SeqStatus,
}

/// A session event a terminal saw (logon, disconnect), for the story.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMark {
    /// Nanoseconds since the drill's start.
    pub at_ns: u64,
    /// `logon STREAM` or `disconnect`.
    pub what: String,
}

/// Everything one terminal saw.
#[derive(Debug, Default)]
pub struct Tape {
    /// Prices, in arrival order.
    pub records: Vec<Record>,
    /// Logons and disconnects, in order.
    pub sessions: Vec<SessionMark>,
}

/// A running recorder.
pub struct Recorder {
    /// What the terminal is called in the verdicts (`edge-1`, …).
    pub name: String,
    tape: Arc<Mutex<Tape>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Recorder {
    /// A terminal on `addrs` (the first, then the others on failover)
    /// subscribed to `symbols`, its times counted from `epoch`. Connects
    /// in the background, retrying until stopped.
    pub fn start(name: &str, addrs: &[SocketAddr], symbols: &[u16], epoch: Instant) -> Recorder {
        let tape = Arc::new(Mutex::new(Tape::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, s) = (tape.clone(), stop.clone());
        let mut cfg = ClientConfig::new(addrs[0], "demo", "demo");
        cfg.failover = addrs[1..].to_vec();
        cfg.backoff = Backoff::new(20, 500);
        cfg.reconnect_attempts_max = u32::MAX;
        let symbols = symbols.to_vec();
        let thread = std::thread::Builder::new()
            .name(format!("rec-{name}"))
            .spawn(move || record(cfg, &symbols, epoch, &t, &s))
            .expect("recorder thread");
        Recorder {
            name: name.to_string(),
            tape,
            stop,
            thread: Some(thread),
        }
    }

    /// Prices recorded so far.
    pub fn len(&self) -> usize {
        self.tape.lock().expect("tape").records.len()
    }

    /// True before the first price.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the tape.
    pub fn snapshot(&self) -> (Vec<Record>, Vec<SessionMark>) {
        let t = self.tape.lock().expect("tape");
        (t.records.clone(), t.sessions.clone())
    }

    /// Stops the terminal; its tape stays readable.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop();
    }
}

fn since(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

fn record(
    cfg: ClientConfig,
    symbols: &[u16],
    epoch: Instant,
    tape: &Mutex<Tape>,
    stop: &AtomicBool,
) {
    let mut client = loop {
        if stop.load(Ordering::Acquire) {
            return;
        }
        match Client::connect(cfg.clone()) {
            Ok(c) => break c,
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    if let Some(info) = client.logon_info() {
        let what = format!("logon {:016x}", info.stream_id);
        tape.lock().expect("tape").sessions.push(SessionMark {
            at_ns: since(epoch),
            what,
        });
    }
    if client.subscribe_ids(RAW_TIER, symbols).is_err() {
        return;
    }
    while !stop.load(Ordering::Acquire) {
        let Ok(ev) = client.next_event(Duration::from_millis(50)) else {
            // Out of reconnect attempts (never: unlimited) or a fatal
            // error: the terminal is gone.
            return;
        };
        let Some(ev) = ev else { continue };
        let at_ns = since(epoch);
        let mut t = tape.lock().expect("tape");
        match ev {
            Event::Price(p) => t.records.push(Record {
                at_ns,
                stream: p.stream_id,
                symbol: p.body.symbol_id,
                seq: p.body.seq,
                bid: p.body.bid,
                ask: p.body.ask,
                flags: p.body.flags,
                snapshot: p.kind == PriceKind::Snapshot,
                status: p.seq,
            }),
            Event::LoggedOn(info) => t.sessions.push(SessionMark {
                at_ns,
                what: format!("logon {:016x}", info.stream_id),
            }),
            Event::Disconnected { .. } => t.sessions.push(SessionMark {
                at_ns,
                what: "disconnect".into(),
            }),
            _ => {}
        }
    }
}
