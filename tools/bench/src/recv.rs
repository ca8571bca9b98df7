//! The subscribers: S connections on one receiver thread polling
//! non-blocking sockets with mio. Each delivery's latency (scheduled send
//! → receive, both on this process's clock) goes into the histogram of
//! the current phase with `saturating_record`; per-(subscriber, symbol)
//! sequence numbers count gaps (drops or conflation).
//!
//! Buffers are allocated at connect (inbound [`IN_BYTES`] per
//! connection); the receive path allocates nothing. The receive time is
//! read once per `read()` call, so every delivery in one read shares it.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use super::hist::{latency_histogram, record_latency, summarize};
use super::target::{self, Event, Target};
use super::BenchClock;
use pricewire::clock::monotonic_ns;

/// Inbound buffer per subscriber connection (the largest server frame).
pub const IN_BYTES: usize = pricewire::wire::SERVER_FRAME_LEN_MAX;
/// Phases a run records separately (herd: before, during, after).
pub const PHASES: usize = 3;
/// Interval of the subscribers' heartbeats (pricewire's default interval
/// is 1000 ms).
pub const HEARTBEAT_MS: u64 = 400;

/// Who subscribes to what.
#[derive(Debug, Clone)]
pub struct RecvPlan {
    pub target: Target,
    pub addr: SocketAddr,
    pub subscriptions: Vec<Vec<u16>>,
    pub symbols_total: u16,
    /// Progress line label; `None` = no progress line.
    pub label: Option<String>,
    /// Expected run length, for the progress bar.
    pub run_s: u64,
}

/// State shared between the receiver thread and the run driver.
#[derive(Debug, Default)]
pub struct RecvShared {
    pub stop: AtomicBool,
    /// Subscribers whose subscriptions are acknowledged.
    pub ready: AtomicUsize,
    /// Scheduled send time (UTC ns) from which a measured tick belongs to
    /// phase k (index k − 1; 0 = not begun); before the first, phase 0. A
    /// tick is classed by when it was due, not when it arrived, so one
    /// scheduled in a phase but delivered late still counts there.
    pub phase_from_ns: [AtomicU64; PHASES - 1],
    /// Ticks scheduled before this (UTC ns) are warm-up.
    pub measure_from_ns: AtomicU64,
    /// Ticks scheduled at or after this (UTC ns) are not measured.
    pub measure_to_ns: AtomicU64,
    /// Measured deliveries so far.
    pub received: AtomicU64,
    /// Ticks sent so far (written by the sender's progress).
    pub sent: AtomicU64,
}

impl RecvShared {
    /// Ticks due at or after `wall_ns` (UTC ns) belong to phase `k`
    /// (1..PHASES).
    pub fn begin_phase(&self, k: usize, wall_ns: u64) {
        self.phase_from_ns[k - 1].store(wall_ns.max(1), Ordering::Relaxed);
    }

    /// Ticks due at or after `wall_ns` are not measured.
    pub fn end_measuring(&self, wall_ns: u64) {
        self.measure_to_ns.fetch_min(wall_ns, Ordering::Relaxed);
    }

    /// The phase of a tick due at `scheduled_ns`: the latest begun phase
    /// whose start it is not before.
    pub fn phase_of(&self, scheduled_ns: u64) -> usize {
        let mut phase = 0;
        for (k, from) in self.phase_from_ns.iter().enumerate() {
            let from = from.load(Ordering::Relaxed);
            if from != 0 && scheduled_ns >= from {
                phase = k + 1;
            }
        }
        phase
    }
}

/// What the subscribers saw.
#[derive(Debug)]
pub struct RecvResult {
    pub phases: Vec<Histogram<u64>>,
    pub received_measured: u64,
    pub received_total: u64,
    pub gaps: u64,
    pub errors: u64,
    pub rejects: u64,
}

struct Sub {
    stream: TcpStream,
    inbuf: Box<[u8]>,
    have: usize,
    acks: usize,
    ready: bool,
    last_seq: Box<[u64]>,
    symbols: Vec<u16>,
    alive: bool,
}

/// Connects every subscriber and sends its hello (blocking connect, then
/// non-blocking).
fn connect(plan: &RecvPlan, poll: &Poll) -> io::Result<Vec<Sub>> {
    let mut subs = Vec::with_capacity(plan.subscriptions.len());
    let mut hello = Vec::with_capacity(1024);
    for (i, symbols) in plan.subscriptions.iter().enumerate() {
        let std = std::net::TcpStream::connect_timeout(&plan.addr, Duration::from_secs(5))?;
        std.set_nodelay(true)?;
        hello.clear();
        target::subscriber_hello(plan.target, symbols, &mut hello);
        (&std).write_all(&hello)?;
        std.set_nonblocking(true)?;
        let mut stream = TcpStream::from_std(std);
        poll.registry()
            .register(&mut stream, Token(i), Interest::READABLE)?;
        let ready = target::acks_expected(plan.target, symbols.len()) == 0;
        subs.push(Sub {
            stream,
            inbuf: vec![0u8; IN_BYTES].into_boxed_slice(),
            have: 0,
            acks: 0,
            ready,
            last_seq: vec![0u64; plan.symbols_total as usize].into_boxed_slice(),
            symbols: symbols.clone(),
            alive: true,
        });
    }
    Ok(subs)
}

struct Receiver<'a> {
    plan: &'a RecvPlan,
    shared: &'a RecvShared,
    clock: BenchClock,
    phases: Vec<Histogram<u64>>,
    interval: Histogram<u64>,
    r: RecvResult,
    scratch: Vec<u8>,
}

/// Runs the subscribers until `shared.stop`; returns what they saw.
pub fn run(plan: &RecvPlan, shared: &RecvShared, clock: BenchClock) -> io::Result<RecvResult> {
    let mut poll = Poll::new()?;
    let mut subs = connect(plan, &poll)?;
    let ready0 = subs.iter().filter(|s| s.ready).count();
    shared.ready.store(ready0, Ordering::Relaxed);
    let mut rx = Receiver {
        plan,
        shared,
        clock,
        phases: (0..PHASES).map(|_| latency_histogram()).collect(),
        interval: latency_histogram(),
        r: RecvResult {
            phases: Vec::new(),
            received_measured: 0,
            received_total: 0,
            gaps: 0,
            errors: 0,
            rejects: 0,
        },
        scratch: Vec::with_capacity(4096),
    };
    let mut events = Events::with_capacity(1024);
    let t0 = monotonic_ns();
    let (mut next_hb, mut next_progress) = (t0, t0 + 1_000_000_000);
    let mut last_sent = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        match poll.poll(&mut events, Some(Duration::from_millis(5))) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for ev in events.iter() {
            if let Some(sub) = subs.get_mut(ev.token().0) {
                rx.drain(sub);
            }
        }
        let now = monotonic_ns();
        if now >= next_hb {
            next_hb = now + HEARTBEAT_MS * 1_000_000;
            rx.heartbeats(&mut subs);
        }
        if now >= next_progress {
            next_progress += 1_000_000_000;
            last_sent = rx.progress(now - t0, last_sent);
        }
    }
    if plan.label.is_some() {
        eprintln!();
    }
    rx.r.phases = std::mem::take(&mut rx.phases);
    Ok(rx.r)
}

impl Receiver<'_> {
    fn drain(&mut self, sub: &mut Sub) {
        while sub.alive {
            match sub.stream.read(&mut sub.inbuf[sub.have..]) {
                Ok(0) => sub.alive = false,
                Ok(n) => {
                    sub.have += n;
                    let now = self.clock.now_wall();
                    self.consume(sub, now);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => sub.alive = false,
            }
            if !sub.alive {
                self.r.errors += 1;
            }
        }
    }

    fn consume(&mut self, sub: &mut Sub, now_wall: u64) {
        let mut used = 0;
        loop {
            match target::parse(self.plan.target, &sub.inbuf[used..sub.have]) {
                Ok(Some((ev, n))) => {
                    used += n;
                    self.event(sub, ev, now_wall);
                }
                Ok(None) => break,
                Err(_) => {
                    sub.alive = false;
                    break;
                }
            }
        }
        sub.inbuf.copy_within(used..sub.have, 0);
        sub.have -= used;
    }

    #[inline]
    fn event(&mut self, sub: &mut Sub, ev: Event, now_wall: u64) {
        match ev {
            Event::Update(d) => self.delivery(sub, d, now_wall),
            Event::LoggedOn if self.plan.target == Target::Pricewire => {
                self.scratch.clear();
                target::encode_subscribe(self.plan.target, &sub.symbols, &mut self.scratch);
                self.write(sub);
            }
            Event::Subscribed => {
                sub.acks += 1;
                let need = target::acks_expected(self.plan.target, sub.symbols.len());
                if !sub.ready && sub.acks >= need {
                    sub.ready = true;
                    self.shared.ready.fetch_add(1, Ordering::Relaxed);
                }
            }
            Event::Ping => {
                self.scratch.clear();
                self.scratch.extend_from_slice(target::pong());
                self.write(sub);
            }
            Event::Rejected { .. } => self.r.rejects += 1,
            Event::Closed => sub.alive = false,
            Event::LoggedOn | Event::Other => {}
        }
    }

    #[inline]
    fn delivery(&mut self, sub: &mut Sub, d: target::Delivery, now_wall: u64) {
        self.r.received_total += 1;
        if let Some(last) = sub.last_seq.get_mut(d.symbol as usize) {
            let (gap, next) = target::seq_gap(*last, d.seq);
            self.r.gaps += gap;
            *last = next;
        }
        record_latency(&mut self.interval, d.scheduled_ns, now_wall);
        let from = self.shared.measure_from_ns.load(Ordering::Relaxed);
        let to = self.shared.measure_to_ns.load(Ordering::Relaxed);
        if d.scheduled_ns >= from && d.scheduled_ns < to {
            let phase = self.shared.phase_of(d.scheduled_ns);
            record_latency(&mut self.phases[phase], d.scheduled_ns, now_wall);
            self.r.received_measured += 1;
            self.shared.received.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Writes `scratch` to a subscriber; small control messages fit the
    /// socket buffer, so a short write marks the connection broken.
    fn write(&mut self, sub: &mut Sub) {
        if sub.stream.write(&self.scratch).ok() != Some(self.scratch.len()) {
            sub.alive = false;
            self.r.errors += 1;
        }
    }

    fn heartbeats(&mut self, subs: &mut [Sub]) {
        self.scratch.clear();
        target::heartbeat(self.plan.target, &mut self.scratch);
        if self.scratch.is_empty() {
            return;
        }
        for sub in subs.iter_mut().filter(|s| s.alive) {
            let _ = sub.stream.write(&self.scratch);
        }
    }

    /// One progress line on stderr: elapsed, send rate, receive rate and
    /// the p99 of the last second.
    fn progress(&mut self, elapsed_ns: u64, last_sent: u64) -> u64 {
        let sent = self.shared.sent.load(Ordering::Relaxed);
        let Some(label) = &self.plan.label else {
            return sent;
        };
        let s = summarize(&self.interval);
        let secs = elapsed_ns / 1_000_000_000;
        let total = self.plan.run_s.max(1);
        let filled = ((secs * 20) / total).min(20) as usize;
        eprint!(
            "\r{label} [{}{}] {secs:>3}/{total}s  rate {:>8}/s  recv {:>9}/s  p99 {:>9.1} us  max {:>9.1} us ",
            "#".repeat(filled),
            ".".repeat(20 - filled),
            sent.saturating_sub(last_sent),
            s.count,
            s.p99_ns as f64 / 1e3,
            s.max_ns as f64 / 1e3,
        );
        self.interval.reset();
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tick belongs to the phase it was due in, whenever it arrives.
    #[test]
    fn ticks_are_classed_by_when_they_were_due() {
        let s = RecvShared::default();
        assert_eq!(s.phase_of(5), 0, "no phase begun: phase 0");
        s.begin_phase(1, 100);
        assert_eq!((s.phase_of(99), s.phase_of(100)), (0, 1));
        s.begin_phase(2, 200);
        assert_eq!(
            (s.phase_of(150), s.phase_of(199), s.phase_of(200)),
            (1, 1, 2)
        );
        assert_eq!(s.phase_of(u64::MAX), 2);
        // Measuring ends at the earlier of the window's end and the hook's.
        s.measure_to_ns.store(1_000, Ordering::Relaxed);
        s.end_measuring(500);
        s.end_measuring(800);
        assert_eq!(s.measure_to_ns.load(Ordering::Relaxed), 500);
    }
}
