//! The subscribers: S connections on one or more receiver threads, each
//! polling its share of non-blocking sockets with mio. Each delivery's latency (scheduled send
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
/// Shortest wait before a refused subscriber connects again, in ms.
pub const RETRY_MIN_MS: u64 = 50;
/// How often a receiver looks for retries that are due, in ms.
const RETRY_SCAN_MS: u64 = 10;
/// The smallest inbound buffer a plan may ask for ([`RecvPlan::in_bytes`]):
/// a subscribe answer for a few symbols and a read's worth of updates.
pub const IN_BYTES_MIN: usize = 16 * 1024;
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
    /// Inbound buffer per connection ([`IN_BYTES`] unless the run knows
    /// its largest frame is smaller: thousands of subscribers that only
    /// receive prices need far less than the largest server frame).
    pub in_bytes: usize,
    /// Read with `recvmsg` and the kernel's arrival stamp
    /// (`SO_TIMESTAMPNS`): each measured delivery's age at the socket, apart
    /// from its age when this process got round to reading it.
    pub rx_stamps: bool,
    /// From one tick of a symbol to its next (symbols × 1 s ÷ rate; tick
    /// `i` goes to symbol `i mod N`): for how long a delivery was behind
    /// the feed's latest price of its symbol.
    pub next_tick_ns: u64,
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
    /// Deliveries so far, measured or not, counted when they arrive (a
    /// throughput by arrival time; added once per read).
    pub arrived: AtomicU64,
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
    /// Connections opened again after a refusal or a close before the
    /// subscription was acknowledged.
    pub retries: u64,
    /// Measured deliveries' age when the kernel put them in the socket
    /// (empty unless [`RecvPlan::rx_stamps`]).
    pub at_socket: Histogram<u64>,
    /// From the engine's publish to the socket, for the same deliveries
    /// (empty unless [`RecvPlan::rx_stamps`]): the fan-out's part of
    /// `at_socket`, the rest being the feed's and the ingest's.
    pub engine_to_socket: Histogram<u64>,
    /// How long after the feed sent a newer tick of its symbol each
    /// measured delivery arrived (1 ns when none was sent before it
    /// arrived): its age behind the latest price, which a paced
    /// subscription's last price before a quiet spell does not have,
    /// however long it waited for its slot.
    pub behind_latest: Histogram<u64>,
    /// Deliveries the server flagged stale: counted, not latency samples.
    pub stale: u64,
    /// The latest tick any delivery carried (its scheduled time, UTC ns)
    /// and the latest arrival of any delivery (stale ones not counted):
    /// how long deliveries went on after the feed's last tick.
    pub last_scheduled_ns: u64,
    pub last_arrival_ns: u64,
}

impl RecvResult {
    /// Adds another receiver thread's result to this one: histograms
    /// phase by phase, counters summed.
    pub fn merge(&mut self, other: RecvResult) {
        for (mine, theirs) in self.phases.iter_mut().zip(&other.phases) {
            // Same bounds on both sides: adding cannot overflow them.
            let _ = mine.add(theirs);
        }
        self.received_measured += other.received_measured;
        self.received_total += other.received_total;
        self.gaps += other.gaps;
        self.errors += other.errors;
        self.rejects += other.rejects;
        self.retries += other.retries;
        let _ = self.at_socket.add(&other.at_socket);
        let _ = self.engine_to_socket.add(&other.engine_to_socket);
        let _ = self.behind_latest.add(&other.behind_latest);
        self.stale += other.stale;
        self.last_scheduled_ns = self.last_scheduled_ns.max(other.last_scheduled_ns);
        self.last_arrival_ns = self.last_arrival_ns.max(other.last_arrival_ns);
    }
}

/// Joins every receiver thread and merges what they saw; the first
/// error (or panic) wins.
pub fn join(
    receivers: Vec<std::thread::ScopedJoinHandle<'_, std::io::Result<RecvResult>>>,
) -> anyhow::Result<RecvResult> {
    let mut merged: Option<RecvResult> = None;
    let mut first_err = None;
    for r in receivers {
        match r.join() {
            Ok(Ok(res)) => match merged.as_mut() {
                Some(m) => m.merge(res),
                None => merged = Some(res),
            },
            Ok(Err(e)) => first_err = first_err.or(Some(anyhow::Error::from(e))),
            Err(_) => first_err = first_err.or(Some(anyhow::anyhow!("receiver panicked"))),
        }
    }
    match (first_err, merged) {
        (Some(e), _) => Err(e),
        (None, Some(m)) => Ok(m),
        (None, None) => Err(anyhow::anyhow!("no receiver thread")),
    }
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
    /// When a refused or closed subscriber not yet subscribed connects
    /// again (monotonic ns; 0: no retry pending).
    retry_at_ns: u64,
    /// The server's retryAfterMs of its last refusal.
    retry_after_ms: u32,
}

/// Subscribers a receiver connects between two polls while it is still
/// connecting: the sessions connected so far are served (logon answers
/// read, subscriptions sent) while the rest connect, so a large run does
/// not connect thousands of sockets before reading any of them.
pub const CONNECT_CHUNK: usize = 64;

/// Opens one subscriber connection: blocking connect, its hello, then
/// non-blocking and registered for reads under `token`.
fn open(plan: &RecvPlan, poll: &Poll, symbols: &[u16], token: usize) -> io::Result<TcpStream> {
    let std = std::net::TcpStream::connect_timeout(&plan.addr, Duration::from_secs(5))?;
    std.set_nodelay(true)?;
    let mut hello = Vec::with_capacity(1024);
    target::subscriber_hello(plan.target, symbols, &mut hello);
    (&std).write_all(&hello)?;
    std.set_nonblocking(true)?;
    let mut stream = TcpStream::from_std(std);
    poll.registry()
        .register(&mut stream, Token(token), Interest::READABLE)?;
    Ok(stream)
}

/// Connects the next [`CONNECT_CHUNK`] subscribers of the plan (the first
/// alone) and sends each its hello.
fn connect_some(
    plan: &RecvPlan,
    poll: &Poll,
    subs: &mut Vec<Sub>,
    shared: &RecvShared,
) -> io::Result<()> {
    let from = subs.len();
    let chunk = if from == 0 { 1 } else { CONNECT_CHUNK };
    let to = (from + chunk).min(plan.subscriptions.len());
    for (i, symbols) in plan.subscriptions[from..to].iter().enumerate() {
        let stream = open(plan, poll, symbols, from + i)?;
        let ready = target::acks_expected(plan.target, symbols.len()) == 0;
        if ready {
            shared.ready.fetch_add(1, Ordering::Relaxed);
        }
        subs.push(Sub {
            stream,
            inbuf: vec![0u8; plan.in_bytes.max(IN_BYTES_MIN)].into_boxed_slice(),
            have: 0,
            acks: 0,
            ready,
            last_seq: vec![0u64; plan.symbols_total as usize].into_boxed_slice(),
            symbols: symbols.clone(),
            alive: true,
            retry_at_ns: 0,
            retry_after_ms: 0,
        });
    }
    Ok(())
}

struct Receiver<'a> {
    plan: &'a RecvPlan,
    shared: &'a RecvShared,
    clock: BenchClock,
    phases: Vec<Histogram<u64>>,
    interval: Histogram<u64>,
    r: RecvResult,
    scratch: Vec<u8>,
    /// Subscribers waiting for [`Receiver::retry_due`].
    pending_retries: usize,
    /// When the kernel stamped the bytes of the current read (UTC ns; the
    /// read's own time without a stamp).
    stamp_wall: u64,
}

/// Runs the subscribers until `shared.stop`; returns what they saw.
pub fn run(plan: &RecvPlan, shared: &RecvShared, clock: BenchClock) -> io::Result<RecvResult> {
    let mut poll = Poll::new()?;
    let mut subs = Vec::with_capacity(plan.subscriptions.len());
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
            retries: 0,
            at_socket: latency_histogram(),
            engine_to_socket: latency_histogram(),
            behind_latest: latency_histogram(),
            stale: 0,
            last_scheduled_ns: 0,
            last_arrival_ns: 0,
        },
        pending_retries: 0,
        stamp_wall: 0,
        scratch: Vec::with_capacity(4096),
    };
    let mut events = Events::with_capacity(1024);
    let t0 = monotonic_ns();
    let (mut next_hb, mut next_progress) = (t0, t0 + 1_000_000_000);
    let mut next_retry = t0;
    let mut last_sent = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let connecting = subs.len() < plan.subscriptions.len();
        // Each receiver connects one subscriber, then waits until some
        // subscriber is subscribed: the first logon of the account pays
        // the server's one password verification, and the rest find it
        // cached instead of queueing behind it.
        if connecting && (subs.is_empty() || shared.ready.load(Ordering::Relaxed) > 0) {
            connect_some(plan, &poll, &mut subs, shared)?;
        }
        let wait = Duration::from_millis(if connecting { 0 } else { 5 });
        match poll.poll(&mut events, Some(wait)) {
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
        if rx.pending_retries > 0 && now >= next_retry {
            next_retry = now + RETRY_SCAN_MS * 1_000_000;
            rx.retry_due(&poll, &mut subs);
        }
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
            let read = if self.plan.rx_stamps {
                crate::rxstamp::recv(&sub.stream, &mut sub.inbuf[sub.have..])
            } else {
                sub.stream
                    .read(&mut sub.inbuf[sub.have..])
                    .map(|n| (n, None))
            };
            match read {
                Ok((0, _)) => sub.alive = false,
                Ok((n, stamp)) => {
                    sub.have += n;
                    let now = self.clock.now_wall();
                    self.stamp_wall = stamp
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map_or(now, |d| (d.as_nanos() as u64).min(now));
                    self.consume(sub, now);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => sub.alive = false,
            }
            if !sub.alive {
                self.lost(sub);
            }
        }
    }

    fn consume(&mut self, sub: &mut Sub, now_wall: u64) {
        let total0 = self.r.received_total;
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
        let arrived = self.r.received_total - total0;
        if arrived > 0 {
            self.shared.arrived.fetch_add(arrived, Ordering::Relaxed);
        }
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
            Event::Rejected { retry_after_ms, .. } => {
                self.r.rejects += 1;
                if !sub.ready {
                    // Refused at logon or first subscribe: the connection
                    // is done; it connects again after the server's
                    // retryAfterMs, as a terminal would.
                    sub.retry_after_ms = retry_after_ms;
                    sub.alive = false;
                }
            }
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
        if d.stale {
            self.r.stale += 1;
            return;
        }
        self.r.last_scheduled_ns = self.r.last_scheduled_ns.max(d.scheduled_ns);
        self.r.last_arrival_ns = now_wall;
        record_latency(&mut self.interval, d.scheduled_ns, now_wall);
        let from = self.shared.measure_from_ns.load(Ordering::Relaxed);
        let to = self.shared.measure_to_ns.load(Ordering::Relaxed);
        if d.scheduled_ns >= from && d.scheduled_ns < to {
            let phase = self.shared.phase_of(d.scheduled_ns);
            record_latency(&mut self.phases[phase], d.scheduled_ns, now_wall);
            let behind = behind_latest_ns(d.scheduled_ns, self.plan.next_tick_ns, to, now_wall);
            self.r.behind_latest.saturating_record(behind.max(1));
            if self.plan.rx_stamps {
                record_latency(&mut self.r.at_socket, d.scheduled_ns, self.stamp_wall);
                if d.engine_ns != 0 {
                    record_latency(&mut self.r.engine_to_socket, d.engine_ns, self.stamp_wall);
                }
            }
            self.r.received_measured += 1;
            self.shared.received.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A connection ended: an error once subscribed; before that (refused
    /// or closed while logging on), a retry after the server's
    /// retryAfterMs (at least [`RETRY_MIN_MS`]).
    fn lost(&mut self, sub: &mut Sub) {
        if sub.ready || sub.retry_at_ns != 0 {
            if sub.ready {
                self.r.errors += 1;
            }
            return;
        }
        let wait_ms = u64::from(sub.retry_after_ms).max(RETRY_MIN_MS);
        sub.retry_at_ns = monotonic_ns() + wait_ms * 1_000_000;
        self.pending_retries += 1;
    }

    /// Connects again every subscriber whose retry is due; a failed
    /// connect waits for another retry.
    fn retry_due(&mut self, poll: &Poll, subs: &mut [Sub]) {
        let now = monotonic_ns();
        for (i, sub) in subs.iter_mut().enumerate() {
            if sub.retry_at_ns == 0 || sub.retry_at_ns > now {
                continue;
            }
            self.pending_retries -= 1;
            sub.retry_at_ns = 0;
            self.r.retries += 1;
            // Dropping the old stream closes it and leaves the poll.
            match open(self.plan, poll, &sub.symbols, i) {
                Ok(stream) => {
                    sub.stream = stream;
                    sub.have = 0;
                    sub.acks = 0;
                    sub.last_seq.fill(0);
                    sub.alive = true;
                }
                Err(_) => self.lost(sub),
            }
        }
    }

    /// Writes `scratch` to a subscriber; small control messages fit the
    /// socket buffer, so a short write marks the connection broken.
    fn write(&mut self, sub: &mut Sub) {
        if sub.stream.write(&self.scratch).ok() != Some(self.scratch.len()) {
            // The drain loop this runs in calls `lost` once it sees it.
            sub.alive = false;
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

/// How long a delivery of the tick scheduled at `scheduled_ns` arrived
/// (at `arrival_ns`) after its symbol's next tick was due, `next_tick_ns`
/// later; 0 if that was after the arrival or at or past `window_end_ns`
/// (the feed runs on past the window, so a successor inside it was sent).
fn behind_latest_ns(
    scheduled_ns: u64,
    next_tick_ns: u64,
    window_end_ns: u64,
    arrival_ns: u64,
) -> u64 {
    let next = scheduled_ns + next_tick_ns;
    if next < window_end_ns {
        arrival_ns.saturating_sub(next)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Behind the latest: only once a newer tick of the symbol was due.
    #[test]
    fn a_delivery_is_behind_only_once_a_newer_tick_was_due() {
        // Next tick due at 1,500; the window ends at 10,000.
        assert_eq!(behind_latest_ns(1_000, 500, 10_000, 1_200), 0);
        assert_eq!(behind_latest_ns(1_000, 500, 10_000, 4_000), 2_500);
        // The symbol's last tick in the window: nothing newer came.
        assert_eq!(behind_latest_ns(9_800, 500, 10_000, 60_000), 0);
    }

    fn result(latency_ns: u64, gaps: u64) -> RecvResult {
        let mut phases: Vec<Histogram<u64>> = (0..PHASES).map(|_| latency_histogram()).collect();
        phases[0].saturating_record(latency_ns);
        let mut at_socket = latency_histogram();
        at_socket.saturating_record(latency_ns / 2);
        let behind_latest = at_socket.clone();
        RecvResult {
            phases,
            received_measured: 1,
            received_total: 2,
            gaps,
            errors: 1,
            rejects: 0,
            retries: 0,
            at_socket,
            engine_to_socket: latency_histogram(),
            behind_latest,
            stale: 1,
            last_scheduled_ns: latency_ns,
            last_arrival_ns: latency_ns * 2,
        }
    }

    /// Receiver threads' results add up: every sample, every counter.
    #[test]
    fn merged_results_hold_every_thread() {
        let mut a = result(1_000, 3);
        a.merge(result(9_000, 4));
        assert_eq!(a.phases[0].len(), 2);
        assert!(a.phases[0].max() >= 9_000);
        assert_eq!(a.behind_latest.len(), 2);
        assert_eq!((a.received_measured, a.received_total), (2, 4));
        assert_eq!((a.gaps, a.errors), (7, 2));
        assert_eq!((a.at_socket.len(), a.stale), (2, 2));
        assert_eq!((a.last_scheduled_ns, a.last_arrival_ns), (9_000, 18_000));
        assert!(a.at_socket.max() >= 4_500);
    }

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
