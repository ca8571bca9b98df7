//! One gateway shard: a mio event loop that owns a set of connections and
//! consumes one engine ring.
//!
//! Per loop turn: poll sockets (readable ones join the read list), drain
//! the engine ring (encode each price once, copy it into every subscribed
//! connection's buffer) and write those connections, then the request
//! work, bounded: read the listed sockets (a few reads and at most
//! `REQUESTS_PER_CONN_TURN` requests per connection, `REQUESTS_PER_TURN`
//! in all; the rest stays listed for the next turn), write the prices
//! that arrived meanwhile, copy a bounded batch of answers, write every
//! connection that got bytes, and every [`SWEEP_NS`] run the
//! timers (heartbeats, dead peers, logon and frame timeouts, slow
//! consumers, closing connections), which each connection's
//! [`Session`] judges from the time it is given. The fan-out path
//! allocates nothing.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use mio::{Events, Interest, Poll, Token, Waker};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::acceptor::Handoff;
use super::conn::Conn;
use super::drain::{Drain, DrainPolicy};
use super::fanout::Fanout;
use super::lanes::{Lanes, MovesClosedOnExit, Peer};
use super::outbound::OutBuf;
use super::session::{Session, SessionConfig};
use super::slab::Slab;
use super::spill::{BusyMeter, ShardLoad, SpillPolicy};
use super::{GatewayStats, ShardControl, ShardStats, Shared};
use crate::admission::RetryWindow;
use crate::clock::monotonic_ns;
use crate::engine::ShardInput;
use crate::requests::hops::HopRecorder;
use crate::requests::service::RequestPort;
use crate::runtime::hosting::Readiness;
use crate::runtime::latency::{latency_histogram, HistogramExchange};
use crate::runtime::tls::Link;
use crate::runtime::{WaitStrategy, Waiter};
use crate::wire::SubscribeResult;
use hdrhistogram::Histogram;

const WAKER: Token = Token(0);
/// With hosted stages, their [`crate::runtime::HostedTask::between`] runs
/// after every this many connection writes or events in one loop turn, so
/// a turn that writes to thousands of sessions (a reconnect herd) does not
/// hold quotes and the other shards' prices for its whole length.
pub(super) const INTERLEAVE_EVERY: usize = 32;
/// Tokens of hosted stages' sockets start here (see
/// [`crate::runtime::hosting::TASK_TOKENS`]). Connection tokens stay below
/// (1 + at most 2^20 connections).
const HOSTED_TOKEN_BASE: usize = 1 << 40;
/// Timer sweep period.
pub const SWEEP_NS: u64 = 50_000_000;
/// A sweep later than its period by more than this is a loop stall (the
/// process was stopped or starved of CPU): the sessions' deadlines move
/// out by it and idleness is judged only after the sockets are read.
pub const STALL_MIN_NS: u64 = 100_000_000;
/// Most prices taken from the engine ring per turn, so sockets are polled
/// regularly even under a flood of prices.
pub const PRICE_BATCH: usize = 4096;
/// Most new connections taken from the inbox per turn.
const ACCEPT_BATCH: usize = 256;

/// What [`spawn`] returns to the gateway.
pub struct SpawnedShard {
    /// Control messages to the shard (ring `waker` after sending).
    pub control: Sender<ShardControl>,
    /// Wakes the shard's poll.
    pub waker: Arc<Waker>,
    /// The shard's thread.
    pub thread: JoinHandle<()>,
    /// Where the acceptor sends the shard new connections.
    pub handoff: Handoff,
    /// The shard's counters.
    pub stats: Arc<ShardStats>,
}

/// Starts one shard thread on `input`; `exchange`, if given, receives the
/// shard's tick-to-shard latency histogram on request.
pub fn spawn(
    shared: Arc<Shared>,
    input: ShardInput,
    exchange: Option<HistogramExchange>,
    requests: RequestPort,
    lanes: &mut Lanes,
) -> io::Result<SpawnedShard> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    input.doorbell.bind_waker(waker.clone());
    // Hosted stages (`--threading shared`) put their sockets in this
    // shard's poller: one epoll_wait serves every stage of the thread.
    let mut input = input;
    input.hosted.register(poll.registry(), HOSTED_TOKEN_BASE)?;
    let (control_tx, control_rx) = crossbeam_channel::bounded(16);
    let (inbox_tx, inbox_rx) = crossbeam_channel::bounded(4096);
    let index = input.index;
    let stats = lanes.peers[index].stats.clone();
    let mut shard = Shard::new(
        shared,
        input,
        poll,
        control_rx,
        inbox_rx,
        stats.clone(),
        requests,
    );
    shard.exchange = exchange;
    shard.waker = Some(waker.clone());
    shard.peers = lanes.peers.clone();
    shard.loads = Vec::with_capacity(lanes.peers.len());
    shard.adopt_rx = lanes.take_inbox(index);
    shard.moves_open = lanes.moves_open.clone();
    let thread = std::thread::Builder::new()
        .name(format!("pw-shard{index}"))
        .spawn(move || {
            let stage = crate::runtime::Stage::Shard(index as u16);
            if let Err(e) = crate::runtime::affinity::place_current(stage, &shard.shared.cfg.cpus) {
                // Pinning or priority was asked for: running otherwise would
                // lie to the operator about where latency comes from.
                tracing::error!("{e}; exiting");
                std::process::exit(1);
            }
            // Even if this thread panics, the others stop waiting for
            // sessions from it at shutdown (see `Lanes`).
            let _moves = MovesClosedOnExit {
                open: shard.moves_open.clone(),
                sender: index == 0,
            };
            shard.run()
        })?;
    Ok(SpawnedShard {
        control: control_tx,
        waker: waker.clone(),
        thread,
        handoff: Handoff {
            tx: inbox_tx,
            waker,
            stats: stats.clone(),
        },
        stats,
    })
}

pub(super) struct Shard {
    pub(super) shared: Arc<Shared>,
    pub(super) poll: Poll,
    pub(super) events: Events,
    /// This turn's events (readable includes closed).
    pub(super) ready: Vec<(usize, Readiness)>,
    pub(super) input: ShardInput,
    /// Connections and this turn's write and read lists.
    pub(super) slab: Slab,
    /// Subscriptions and the price path.
    pub(super) fanout: Fanout,
    pub(super) frame: Box<[u8]>,
    pub(super) results: Vec<SubscribeResult>,
    pub(super) new_keys: Vec<u32>,
    pub(super) rng: SmallRng,
    /// What every session of this shard decides by.
    pub(super) session_cfg: SessionConfig,
    pub(super) stats: Arc<ShardStats>,
    pub(super) control: Receiver<ShardControl>,
    pub(super) inbox: Receiver<(Link, SocketAddr)>,
    pub(super) waiter: Waiter,
    pub(super) next_sweep_ns: u64,
    /// When the next revalidation round is due (`revoke.rs`).
    pub(super) next_revalidate_ns: u64,
    /// The next session a revalidation round looks at.
    pub(super) revalidate_cursor: usize,
    /// When the last sweep ran (0: none yet); a stall is measured from it.
    pub(super) last_sweep_ns: u64,
    pub(super) stopping: Option<u64>,
    /// Tick receive → shard latency of every price taken off the ring.
    pub(super) hist: Histogram<u64>,
    pub(super) exchange: Option<HistogramExchange>,
    pub(super) requests: RequestPort,
    /// Requests this loop turn may still handle (see
    /// [`super::queries::REQUESTS_PER_TURN`]).
    pub(super) requests_left: usize,
    /// The `gateway_write` hop: an answer popped to its last byte written.
    pub(super) write_hop: HopRecorder,
    /// Every shard's hand-over lane (this one's included, by index).
    pub(super) peers: Arc<[Peer]>,
    /// Sessions handed to this shard by another.
    pub(super) adopt_rx: Receiver<Conn>,
    pub(super) busy: BusyMeter,
    pub(super) spill: SpillPolicy,
    /// Decided by the last measurement: move one session there.
    pub(super) spill_to: Option<usize>,
    /// Sessions still to move on an operator's request.
    pub(super) spill_forced: u32,
    /// When a request-heavy session is drained off this shard.
    pub(super) drain_policy: DrainPolicy,
    /// The draining move under way, if any.
    pub(super) drain: Option<Drain>,
    /// Scratch for [`Shard::peer_loads`].
    pub(super) loads: Vec<ShardLoad>,
    /// See [`Lanes`]; cleared by shard 0 once it stops moving sessions.
    pub(super) moves_open: Arc<AtomicBool>,
    /// A DisconnectAll arrived: sessions adopted from now on are
    /// disconnected too.
    pub(super) disconnecting: bool,
    /// The last poll returned input (readable sockets or the waker), not
    /// only writable edges: such a turn counts as busy.
    pub(super) had_input: bool,
    /// The argon2 verifier's verdicts for this shard's logons, and the
    /// waker the verifier rings after sending one.
    pub(super) verdicts_tx: Sender<super::logon::Verdict>,
    pub(super) verdicts_rx: Receiver<super::logon::Verdict>,
    pub(super) waker: Option<Arc<Waker>>,
    /// The last logon ticket handed out (see `gateway::logon`).
    pub(super) next_ticket: u64,
    /// Loop-lag detector and conflation scratch (`lag.rs`).
    pub(super) lag: super::lag::LagState,
}

impl Shard {
    fn new(
        shared: Arc<Shared>,
        input: ShardInput,
        poll: Poll,
        control: Receiver<ShardControl>,
        inbox: Receiver<(Link, SocketAddr)>,
        stats: Arc<ShardStats>,
        requests: RequestPort,
    ) -> Self {
        let cap = shared.cfg.max_connections_per_shard;
        let max_entries = shared.cfg.max_frame_bytes / 18 + 1;
        let mut waiter = Waiter::new(shared.cfg.shard_wait, input.doorbell.clone());
        let shared_spill = shared.cfg.shard0_spill_permille;
        // Sockets, the waker and the doorbell wake it; a park ends by its
        // next sweep (every SWEEP_NS) or hosted timer. (A host parks
        // briefly while its engine holds prices for a full ring: see
        // `poll_once`.)
        waiter.set_retrying(false);
        let (verdicts_tx, verdicts_rx) = crossbeam_channel::unbounded();
        let lag_target = shared.cfg.loop_lag_target_ms * 1_000_000;
        // Checked when the gateway started (`GatewayConfig::validate`).
        let drain_policy = DrainPolicy::from_config(&shared.cfg).unwrap_or(DrainPolicy::DEFAULT);
        let lag = super::lag::LagState::new(lag_target, shared.config.table.len(), monotonic_ns());
        Shard {
            lag,
            slab: Slab::new(cap),
            fanout: Fanout::new(
                &shared.config,
                shared.table.clone(),
                input.interest.clone(),
                shared.wall_offset_ns,
                shared.cfg.max_update_hz,
                monotonic_ns(),
            ),
            ready: Vec::with_capacity(1024),
            events: Events::with_capacity(1024),
            frame: vec![0u8; shared.cfg.max_frame_bytes].into_boxed_slice(),
            results: Vec::with_capacity(max_entries),
            new_keys: Vec::with_capacity(max_entries),
            rng: SmallRng::from_entropy(),
            session_cfg: SessionConfig::from(&shared.cfg),
            waiter,
            shared,
            poll,
            input,
            stats,
            control,
            inbox,
            next_sweep_ns: 0,
            next_revalidate_ns: 0,
            revalidate_cursor: 0,
            last_sweep_ns: 0,
            stopping: None,
            hist: latency_histogram(),
            exchange: None,
            write_hop: requests.gateway_write_recorder(),
            requests_left: super::queries::REQUESTS_PER_TURN,
            requests,
            peers: Arc::new([]),
            adopt_rx: crossbeam_channel::never(),
            busy: BusyMeter::new(SWEEP_NS, monotonic_ns(), 0),
            spill: SpillPolicy {
                threshold_permille: shared_spill,
            },
            spill_to: None,
            spill_forced: 0,
            drain_policy,
            drain: None,
            loads: Vec::new(),
            moves_open: Arc::new(AtomicBool::new(false)),
            disconnecting: false,
            had_input: false,
            verdicts_tx,
            verdicts_rx,
            waker: None,
            next_ticket: 0,
        }
    }

    fn run(&mut self) {
        let mut busy = false;
        loop {
            self.poll_once(busy || !self.slab.read_list.is_empty());
            let woke = monotonic_ns();
            // Sockets that became readable join the read list; they are
            // read after this turn's prices are out.
            self.handle_events();
            // Hosted stages (`--threading shared`): the ingest listener reads
            // what its sockets got and the engine turns it into prices in
            // this shard's ring, which is drained and written in this turn.
            let now = monotonic_ns();
            let hosted = self.input.hosted.turn(now);
            let mut got = hosted + self.drain_prices(now);
            // Held prices of rate-limited subscriptions whose slot came.
            got += self.fanout.release_due(&mut self.slab, &self.stats, now);
            // Prices first: written before any request work of this turn,
            // which is bounded (see `queries::REQUESTS_PER_TURN`).
            self.flush_writes(monotonic_ns());
            self.requests_left = super::queries::REQUESTS_PER_TURN;
            let reads = monotonic_ns();
            self.read_again();
            self.busy.requests(reads, monotonic_ns());
            // Prices that arrived during the request reads go out before
            // the answers are copied.
            let late = self.drain_prices(monotonic_ns());
            if late > 0 {
                self.flush_writes(monotonic_ns());
            }
            let answers = monotonic_ns();
            got += late + self.drain_answers();
            self.busy.requests(answers, monotonic_ns());
            got += self.drain_verdicts(now);
            // `park` sleeps in epoll_wait right after a turn with work (it
            // returns at once if anything is ready); other strategies poll
            // once more without sleeping first.
            let spins = self.waiter.strategy() != WaitStrategy::Park;
            busy = (got > 0 && spins) || self.input.hosted.has_work();
            self.flush_writes(monotonic_ns());
            let now = monotonic_ns();
            if got > 0 || self.had_input {
                self.busy.worked(woke, now);
            }
            if self.spill_forced > 0 || self.spill_to.is_some() {
                self.spill_step(now);
            }
            if self.drain.is_some() {
                self.drain_step(now);
            }
            if now >= self.next_sweep_ns {
                self.lag_on_sweep(now);
                if self.note_stall(now) {
                    // Sweep next turn, after its poll has read every
                    // socket that became readable during the stall.
                    self.next_sweep_ns = now;
                } else {
                    self.next_sweep_ns = now + SWEEP_NS;
                    self.sweep(now);
                    self.measure(now);
                    self.revalidate(now);
                }
            }
            if self.should_exit(now) {
                break;
            }
        }
        self.close_all();
    }

    fn poll_once(&mut self, busy: bool) {
        // A host parks until an input or its sweep, unless a hosted task
        // must retry something nothing will wake it for (the engine's
        // prices parked for another shard's full ring; no tasks: false).
        self.waiter.set_retrying(self.input.hosted.retry_pending());
        let mut timeout = if busy || !self.slab.write_list.is_empty() {
            Some(Duration::ZERO)
        } else {
            self.waiter.poll_timeout()
        };
        let mut sleeping = timeout != Some(Duration::ZERO);
        if sleeping {
            // Wake for this shard's sweep, a hosted task's timer (the
            // engine's stale sweep) or a held price's slot, whichever comes
            // first: an idle park must not make them late.
            let due = [self.input.hosted.next_timer_ns(), self.fanout.next_due_ns()]
                .into_iter()
                .flatten()
                .fold(self.next_sweep_ns, u64::min);
            timeout = crate::runtime::wait::until_due(timeout, monotonic_ns(), due);
            sleeping = timeout != Some(Duration::ZERO);
        }
        let consumer = &self.input.consumer;
        let answers = &self.requests.answers;
        let hosted = &self.input.hosted;
        let adopt = &self.adopt_rx;
        let verdicts = &self.verdicts_rx;
        let pending = || {
            !consumer.is_empty()
                || !verdicts.is_empty()
                || answers.iter().any(|a| !a.is_empty())
                || hosted.has_work()
                || !adopt.is_empty()
        };
        if sleeping && !self.input.doorbell.prepare_sleep(pending) {
            timeout = Some(Duration::ZERO);
        }
        let res = self.poll.poll(&mut self.events, timeout);
        if sleeping {
            self.input.doorbell.woke();
        }
        // Only input counts as activity: every write produces a writable
        // edge, and resetting on those kept a busy shard from ever parking
        // (an epoll_wait(0) per turn; see BENCHMARKS.md).
        let input = self
            .events
            .iter()
            .any(|e| e.token() == WAKER || e.is_readable() || e.is_read_closed());
        if busy || input {
            self.waiter.reset();
        }
        // Reads left over from last turn's budget are input too.
        self.had_input = input || !self.slab.read_list.is_empty();
        self.ready.clear();
        if res.is_ok() {
            for e in self.events.iter() {
                let closed = e.is_read_closed() || e.is_error();
                let r = Readiness {
                    readable: e.is_readable() || closed,
                    writable: e.is_writable(),
                    closed,
                };
                self.ready.push((e.token().0, r));
            }
        }
    }

    fn handle_events(&mut self) {
        let hosting = !self.input.hosted.is_empty();
        for n in 0..self.ready.len() {
            if hosting && n % INTERLEAVE_EVERY == INTERLEAVE_EVERY - 1 {
                self.input.hosted.between(monotonic_ns());
                self.stats.interleaves.inc();
            }
            let (token, r) = self.ready[n];
            if token == WAKER.0 {
                self.on_wake();
                continue;
            }
            if token >= HOSTED_TOKEN_BASE {
                self.input.hosted.on_event(token - HOSTED_TOKEN_BASE, r);
                continue;
            }
            let i = token - 1;
            if r.writable {
                self.write_conn(i, monotonic_ns());
            }
            if r.readable {
                self.slab.queue_read(i);
            }
        }
    }

    fn should_exit(&mut self, now: u64) -> bool {
        match self.stopping {
            None => false,
            Some(deadline) => {
                now >= deadline
                    || (self.slab.is_empty()
                        && !self.moves_open.load(Ordering::SeqCst)
                        && self.adopt_rx.is_empty())
            }
        }
    }

    // ---- control and accept ------------------------------------------

    fn on_wake(&mut self) {
        while let Ok(msg) = self.control.try_recv() {
            match msg {
                ShardControl::DisconnectAll => self.disconnect_all(),
                ShardControl::Stop => {
                    let linger = self.shared.cfg.close_linger_ms * 1_000_000;
                    self.stopping = Some(monotonic_ns() + linger);
                    self.close_moves();
                }
                ShardControl::Spill(n) => {
                    self.spill_forced = self.spill_forced.saturating_add(n);
                }
            }
        }
        for _ in 0..ACCEPT_BATCH {
            let Ok((stream, peer)) = self.inbox.try_recv() else {
                break;
            };
            self.accept(stream, peer);
        }
        // More than a batch was waiting: the acceptor's wakes coalesced
        // into this one, and no further wake comes once a herd has
        // arrived. Ring again so the next turn takes the next batch,
        // rather than strand the rest in the inbox (not logged on, not
        // read) until some later accept.
        if !self.inbox.is_empty() {
            if let Some(w) = &self.waker {
                let _ = w.wake();
            }
        }
    }

    fn accept(&mut self, mut stream: Link, peer: SocketAddr) {
        // No slot while every free one is promised to a moving session.
        let slot = if self.take_room() {
            self.slab.free.pop()
        } else {
            None
        };
        let Some(i) = slot else {
            self.release_ip(peer);
            let retry = self.jitter(self.shared.cfg.admission.retry_after);
            super::acceptor::refuse_busy(stream, retry, &self.shared);
            return;
        };
        let i = i as usize;
        let token = Token(i + 1);
        if self
            .poll
            .registry()
            .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
            .is_err()
        {
            self.slab.free.push(i as u32);
            self.give_room();
            self.release_ip(peer);
            return;
        }
        let cfg = &self.shared.cfg;
        let now = monotonic_ns();
        let conn = Conn {
            stream,
            peer,
            session: Session::new(&self.session_cfg, now),
            out: OutBuf::new(cfg.out_cap_bytes, cfg.low_water_bytes, cfg.high_water_bytes)
                .with_final_reserve(super::session::CONTROL_FRAME_MAX),
            subs: Vec::with_capacity(cfg.max_subscriptions.min(64)),
            dirty_subs: 0,
            in_write_list: false,
            fin_sent: false,
            in_read_list: false,
            requests_out: 0,
            last_request_ns: 0,
            answer_marks: super::answer_marks::AnswerMarks::new(),
            logon_ticket: 0,
            window_requests: 0,
            heavy_windows: 0,
            held_since_ns: None,
        };
        self.slab.put(i, conn);
        GatewayStats::add(&self.shared.stats.open, 1);
        self.stats.connections.set(self.slab.in_use() as u64);
    }

    // ---- prices -------------------------------------------------------

    pub(super) fn drain_prices(&mut self, now: u64) -> usize {
        if self.lag.detector.is_lagging() {
            let n = self.drain_conflated(now);
            self.swap_histogram();
            return n;
        }
        let n = self.input.consumer.slots().min(PRICE_BATCH);
        // After reading the ring's fill: a session handed over before the
        // first price published after its hand-over is attached before that
        // price is delivered (the push that made it visible came after the
        // send into the lane).
        self.adopt();
        for k in 0..n {
            if let Ok(p) = self.input.consumer.pop() {
                if k == 0 {
                    // The oldest unserved price's age: the ring's lag.
                    self.lag_sample(now.saturating_sub(p.engine_time_ns), now);
                }
                self.hist
                    .saturating_record(now.saturating_sub(p.receive_time_ns).max(1));
                self.fanout.on_price(&p, &mut self.slab, &self.stats, now);
            }
        }
        if n > 0 {
            self.swap_histogram();
        }
        n
    }

    /// Hands the histogram to the reporter when it asked.
    fn swap_histogram(&mut self) {
        if let Some(x) = &self.exchange {
            x.swap(&mut self.hist);
        }
    }

    pub(super) fn release_ip(&self, peer: SocketAddr) {
        self.shared
            .admission
            .lock()
            .expect("admission lock")
            .on_close(peer.ip());
    }

    pub(super) fn jitter(&mut self, w: RetryWindow) -> u32 {
        self.rng.gen_range(w.min_ms..=w.max_ms)
    }
}
