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
//!
//! The shard is divided by the state each part owns; the loop holds the
//! parts and hands each what it needs:
//!
//! | part | file | owns |
//! |---|---|---|
//! | `Conns` | `conns.rs` | the slab, sessions, subscription index, writes |
//! | read path, sweep | `reads.rs` | (the loop's: dispatches to the parts) |
//! | `ReadTurn` | `read_turn.rs` | the turn's read order and account shares |
//! | `Subscribing` | `subscribe.rs` | Subscribe/Unsubscribe scratch |
//! | `RequestSide` | `queries.rs` | the request port and turn budget |
//! | `Logons` | `logon.rs` | the verifier's verdicts and tickets |
//! | `Revalidator` | `revoke.rs` | the revalidation rounds |
//! | `Mover` | `moves.rs` | the hand-over lanes between shards |
//! | `Spiller`, `Drainer` | `spill.rs`, `drain.rs` | when to move a session |
//! | `LagState` | `lag.rs` | the loop-lag detector and conflation |
//! | `Sweeps` | `sweep.rs` | the sweep clock and stalls |
//!
//! None of those files imports this one; `reads.rs` and `balance.rs` add
//! the loop's own steps (reading, rebalancing) that call several parts.
//!
//! [`Session`]: super::session::Session

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use hdrhistogram::Histogram;
use mio::{Events, Poll, Token, Waker};

use super::acceptor::Handoff;
use super::conns::{Conns, INTERLEAVE_EVERY};
use super::drain::{DrainPolicy, Drainer};
use super::fresh::{FreshGate, PassClock};
use super::lag::{LagState, CONFLATE_BATCH};
use super::lanes::{Lanes, Room};
use super::logon::Logons;
use super::moves::Mover;
use super::queries::RequestSide;
use super::read_turn::ReadTurn;
use super::revoke::Revalidator;
use super::spill::Spiller;
use super::subscribe::Subscribing;
use super::sweep::Sweeps;
use super::{ShardControl, ShardStats, Shared};
use crate::clock::monotonic_ns;
use crate::engine::ShardInput;
use crate::requests::service::RequestPort;
use crate::runtime::hosting::Readiness;
use crate::runtime::latency::{latency_histogram, HistogramExchange};
use crate::runtime::tls::Link;
use crate::runtime::{WaitStrategy, Waiter};

pub use super::sweep::{STALL_MIN_NS, SWEEP_NS};

const WAKER: Token = Token(0);
/// Tokens of hosted stages' sockets start here (see
/// [`crate::runtime::hosting::TASK_TOKENS`]). Connection tokens stay below
/// (1 + at most 2^20 connections).
const HOSTED_TOKEN_BASE: usize = 1 << 40;
/// Most prices taken from the engine ring per turn, so sockets are polled
/// regularly even under a flood of prices.
pub const PRICE_BATCH: usize = 4096;
/// Prices fanned out between two reads of the clock while a batch is
/// taken: the ring gate and the outbound runs see the time the fan-out has
/// reached, not the turn's start. (With one `now` per batch, an edge with
/// 10,000 terminals ran turns of about 100 ms (mean loop lag 106 ms),
/// fanning out prices the gate had judged fresh at the turn's start, and
/// its outbound gate then dropped 36 M of them before the write within
/// 10 s: `stale_queue` conflations; BENCHMARKS.md run 36.)
const CLOCK_EVERY: usize = 64;
/// Most new connections taken from the inbox per turn.
const ACCEPT_BATCH: usize = 256;

/// What [`spawn`] returns to the gateway.
pub struct SpawnedShard {
    /// Control messages to the shard (ring `waker` after sending).
    pub control: Sender<ShardControl>,
    /// Wakes the shard's poll.
    pub waker: Arc<Waker>,
    /// The shard's thread.
    pub thread: crate::runtime::Supervised<()>,
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
    let wiring = Wiring {
        poll,
        control: control_rx,
        inbox: inbox_rx,
        waker: waker.clone(),
        exchange,
    };
    let supervisor = shared.supervisor.clone();
    let mut shard = Shard::new(shared, input, wiring, requests, lanes)?;
    let permanent = crate::runtime::Policy::Permanent;
    let thread = supervisor.spawn(format!("pw-shard{index}"), permanent, move || {
        let stage = crate::runtime::Stage::Shard(index as u16);
        let cpus = &shard.conns.shared.cfg.cpus;
        if let Err(e) = crate::runtime::affinity::place_current(stage, cpus) {
            // Pinning or priority was asked for: running otherwise would
            // lie to the operator about where latency comes from.
            tracing::error!("{e}; exiting");
            std::process::exit(1);
        }
        // Even if this thread panics, the others stop waiting for
        // sessions from it at shutdown (see `Lanes`).
        let _moves = shard.mover.closed_on_exit();
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

/// The loop's channels and poller, made by [`spawn`].
struct Wiring {
    poll: Poll,
    control: Receiver<ShardControl>,
    inbox: Receiver<(Link, SocketAddr)>,
    waker: Arc<Waker>,
    exchange: Option<HistogramExchange>,
}

pub(super) struct Shard {
    pub(super) poll: Poll,
    pub(super) events: Events,
    /// This turn's events (readable includes closed).
    pub(super) ready: Vec<(usize, Readiness)>,
    pub(super) waiter: Waiter,
    /// The last poll returned input (readable sockets or the waker), not
    /// only writable edges: such a turn counts as busy.
    pub(super) had_input: bool,
    pub(super) input: ShardInput,
    pub(super) control: Receiver<ShardControl>,
    pub(super) inbox: Receiver<(Link, SocketAddr)>,
    /// Rings this shard's poll (the inbox re-rings it past a batch).
    pub(super) waker: Arc<Waker>,
    /// Tick receive → shard latency of every price taken off the ring.
    pub(super) hist: Histogram<u64>,
    pub(super) exchange: Option<HistogramExchange>,
    /// Stopping: the deadline by which the shard exits.
    pub(super) stopping: Option<u64>,
    /// A DisconnectAll arrived: sessions adopted from now on are
    /// disconnected too.
    pub(super) disconnecting: bool,
    /// Scratch for one inbound frame.
    pub(super) frame: Box<[u8]>,
    pub(super) sweeps: Sweeps,
    /// The connections and what acts on one of them.
    pub(super) conns: Conns,
    pub(super) subscribing: Subscribing,
    pub(super) requests: RequestSide,
    pub(super) logons: Logons,
    pub(super) revalidator: Revalidator,
    pub(super) mover: Mover,
    pub(super) spiller: Spiller,
    pub(super) drainer: Drainer,
    /// Loop-lag detector and conflation scratch.
    pub(super) lag: LagState,
    /// The order and shares of the turn's reads (`read_turn.rs`).
    pub(super) read_turn: ReadTurn,
    /// Prices off the ring too old to fan out (`fresh.rs`).
    pub(super) fresh: FreshGate,
}

impl Shard {
    fn new(
        shared: Arc<Shared>,
        input: ShardInput,
        w: Wiring,
        requests: RequestPort,
        lanes: &mut Lanes,
    ) -> io::Result<Self> {
        let index = input.index;
        let conns = Conns::new(
            shared.clone(),
            w.poll.registry().try_clone()?,
            input.interest.clone(),
            lanes.peers[index].stats.clone(),
            requests.gateway_write_recorder(),
            Room::new(lanes.peers.clone(), index),
        );
        let cfg = &shared.cfg;
        let max_entries = cfg.max_frame_bytes / 18 + 1;
        let lag_target = cfg.loop_lag_target_ms * 1_000_000;
        // Checked when the gateway started (`GatewayConfig::validate`).
        let drain_policy = DrainPolicy::from_config(cfg).unwrap_or(DrainPolicy::DEFAULT);
        let now = monotonic_ns();
        Ok(Shard {
            events: Events::with_capacity(1024),
            ready: Vec::with_capacity(1024),
            waiter: Self::waiter(&shared, &input),
            had_input: false,
            poll: w.poll,
            control: w.control,
            inbox: w.inbox,
            hist: latency_histogram(),
            exchange: w.exchange,
            stopping: None,
            disconnecting: false,
            frame: vec![0u8; cfg.max_frame_bytes].into_boxed_slice(),
            sweeps: Sweeps::new(),
            subscribing: Subscribing::new(max_entries),
            requests: RequestSide::new(requests, index),
            logons: Logons::new(w.waker.clone()),
            waker: w.waker,
            revalidator: Revalidator::new(),
            mover: Mover::new(index, lanes),
            spiller: Spiller::new(cfg.shard0_spill_permille, SWEEP_NS, now),
            drainer: Drainer::new(drain_policy),
            lag: LagState::new(lag_target, shared.config.table.len(), now),
            read_turn: ReadTurn::new(cfg.max_connections_per_shard),
            fresh: FreshGate::new(cfg.price_age_max_ms * 1_000_000, shared.config.table.len()),
            conns,
            input,
        })
    }

    fn waiter(shared: &Shared, input: &ShardInput) -> Waiter {
        let mut waiter = Waiter::new(shared.cfg.shard_wait, input.doorbell.clone());
        // Sockets, the waker and the doorbell wake it; a park ends by its
        // next sweep (every SWEEP_NS) or hosted timer. (A host parks
        // briefly while its engine holds prices for a full ring: see
        // `poll_once`.)
        waiter.set_retrying(false);
        waiter
    }

    /// The shard is stopping or disconnecting everyone.
    pub(super) fn closing(&self) -> bool {
        self.stopping.is_some() || self.disconnecting
    }

    /// Only the shard that runs the engine moves sessions away: the engine
    /// publishing on this same thread is what keeps a move gap-free.
    pub(super) fn hosts_engine(&self) -> bool {
        !self.input.hosted.is_empty()
    }

    fn run(&mut self) {
        let mut busy = false;
        loop {
            let now;
            (busy, now) = self.turn(busy);
            if self.should_exit(now) {
                break;
            }
        }
        self.close_all();
    }

    /// One loop turn; `busy`: the last turn did work and the wait
    /// strategy spins. Returns whether this one did, and when it ended.
    fn turn(&mut self, busy: bool) -> (bool, u64) {
        self.poll_once(busy || !self.conns.slab.read_list.is_empty());
        let woke = monotonic_ns();
        // Sockets that became readable join the read list; they are
        // read after this turn's prices are out.
        self.handle_events(woke);
        // Hosted stages (`--threading shared`): the ingest listener reads
        // what its sockets got and the engine turns it into prices in
        // this shard's ring, which is drained and written in this turn.
        let now = monotonic_ns();
        let hosted = self.input.hosted.turn(now);
        let mut got = hosted + self.drain_prices(now);
        // Held prices of rate-limited subscriptions whose slot came.
        let c = &mut self.conns;
        got += c.fanout.release_due(&mut c.slab, &c.stats, now);
        // Prices first: written before any request work of this turn,
        // which is bounded (see `queries::REQUESTS_PER_TURN`).
        self.flush_writes(monotonic_ns());
        self.requests.begin_turn();
        let reads = monotonic_ns();
        self.read_again();
        self.spiller.busy.requests(reads, monotonic_ns());
        // Prices that arrived during the request reads go out before
        // the answers are copied.
        let late = self.drain_prices(monotonic_ns());
        if late > 0 {
            self.flush_writes(monotonic_ns());
        }
        let answers = monotonic_ns();
        got += late + self.requests.drain_answers(&mut self.conns);
        self.spiller.busy.requests(answers, monotonic_ns());
        got += self.drain_verdicts(now);
        // `park` sleeps in epoll_wait right after a turn with work (it
        // returns at once if anything is ready); other strategies poll
        // once more without sleeping first.
        let spins = self.waiter.strategy() != WaitStrategy::Park;
        let busy = (got > 0 && spins) || self.input.hosted.has_work();
        self.flush_writes(monotonic_ns());
        let now = monotonic_ns();
        if got > 0 || self.had_input {
            self.spiller.busy.worked(woke, now);
        }
        self.housekeeping(now);
        (busy, now)
    }

    /// The end of a turn: a move due, and the timers when their sweep is.
    fn housekeeping(&mut self, now: u64) {
        if self.spiller.is_due() {
            self.spill_step(now);
        }
        if self.drainer.is_active() {
            self.drain_step(now);
        }
        if now >= self.sweeps.next_ns {
            self.lag.on_sweep(&self.conns, self.sweeps.next_ns, now);
            if self.sweeps.note_stall(&mut self.conns, now) {
                // Sweep next turn, after its poll has read every
                // socket that became readable during the stall.
                self.sweeps.next_ns = now;
            } else {
                self.sweeps.next_ns = now + SWEEP_NS;
                crate::runtime::drill::point("shard", self.input.index as u32);
                self.sweep(now);
                self.measure(now);
                let (conns, subscribing) = (&mut self.conns, &mut self.subscribing);
                self.revalidator.revalidate(conns, subscribing, now);
            }
        }
    }

    fn poll_once(&mut self, busy: bool) {
        // A host parks until an input or its sweep, unless a hosted task
        // must retry something nothing will wake it for (the engine's
        // prices parked for another shard's full ring; no tasks: false).
        self.waiter.set_retrying(self.input.hosted.retry_pending());
        let mut timeout = if busy || !self.conns.slab.write_list.is_empty() {
            Some(Duration::ZERO)
        } else {
            self.waiter.poll_timeout()
        };
        let mut sleeping = timeout != Some(Duration::ZERO);
        if sleeping {
            // Wake for this shard's sweep, a hosted task's timer (the
            // engine's stale sweep) or a held price's slot, whichever comes
            // first: an idle park must not make them late.
            let due = [
                self.input.hosted.next_timer_ns(),
                self.conns.fanout.next_due_ns(),
            ]
            .into_iter()
            .flatten()
            .fold(self.sweeps.next_ns, u64::min);
            timeout = crate::runtime::wait::until_due(timeout, monotonic_ns(), due);
            sleeping = timeout != Some(Duration::ZERO);
        }
        let (consumer, hosted) = (&self.input.consumer, &self.input.hosted);
        let (requests, logons, mover) = (&self.requests, &self.logons, &self.mover);
        let pending = || {
            !consumer.is_empty()
                || logons.has_verdicts()
                || requests.has_answers()
                || hosted.has_work()
                || mover.has_arrivals()
        };
        if sleeping && !self.input.doorbell.prepare_sleep(pending) {
            timeout = Some(Duration::ZERO);
        }
        let res = self.poll.poll(&mut self.events, timeout);
        if sleeping {
            self.input.doorbell.woke();
        }
        self.note_events(busy, res.is_ok());
    }

    /// Takes the poll's events into `ready` and notes whether they were
    /// input.
    fn note_events(&mut self, busy: bool, polled: bool) {
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
        self.had_input = input || !self.conns.slab.read_list.is_empty();
        self.ready.clear();
        if polled {
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

    fn handle_events(&mut self, woke: u64) {
        let hosting = !self.input.hosted.is_empty();
        for n in 0..self.ready.len() {
            if hosting && n % INTERLEAVE_EVERY == INTERLEAVE_EVERY - 1 {
                self.input.hosted.between(monotonic_ns());
                self.conns.stats.interleaves.inc();
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
                self.conns.contained(i, |c| c.write_conn(i, monotonic_ns()));
            }
            if r.readable {
                // Input reported now: its wait starts here (see
                // `Conn::unread_since_ns`), unless some was already waiting.
                if let Some(c) = self.conns.slab.conns.get_mut(i).and_then(Option::as_mut) {
                    if c.unread_since_ns == 0 {
                        c.unread_since_ns = woke;
                    }
                }
                self.conns.slab.queue_read(i);
            }
        }
    }

    fn should_exit(&mut self, now: u64) -> bool {
        match self.stopping {
            None => false,
            Some(deadline) => {
                now >= deadline || (self.conns.slab.is_empty() && self.mover.settled())
            }
        }
    }

    // ---- control and accept ------------------------------------------

    fn on_wake(&mut self) {
        while let Ok(msg) = self.control.try_recv() {
            match msg {
                ShardControl::DisconnectAll => self.disconnect_all(),
                ShardControl::Stop => {
                    let linger = self.conns.shared.cfg.close_linger_ms * 1_000_000;
                    self.stopping = Some(monotonic_ns() + linger);
                    self.close_moves();
                }
                ShardControl::Spill(n) => self.spiller.ask(n),
            }
        }
        for _ in 0..ACCEPT_BATCH {
            let Ok((stream, peer)) = self.inbox.try_recv() else {
                break;
            };
            self.conns.accept(stream, peer);
        }
        // More than a batch was waiting: the acceptor's wakes coalesced
        // into this one, and no further wake comes once a herd has
        // arrived. Ring again so the next turn takes the next batch,
        // rather than strand the rest in the inbox (not logged on, not
        // read) until some later accept.
        if !self.inbox.is_empty() {
            let _ = self.waker.wake();
        }
    }

    /// Writes every connection in the write list.
    pub(super) fn flush_writes(&mut self, now: u64) {
        self.conns.flush_writes(&mut self.input.hosted, now);
    }

    /// Takes the sessions other shards handed over.
    pub(super) fn adopt(&mut self) {
        let closing = self.closing();
        self.mover.adopt(&mut self.conns, closing);
    }

    pub(super) fn disconnect_all(&mut self) {
        // Sessions in this shard's lane are told too (on adoption), and
        // shard 0 sends no more.
        self.disconnecting = true;
        self.close_moves();
        self.adopt();
        let now = monotonic_ns();
        self.conns.disconnect_open(now);
        self.flush_writes(now);
    }

    pub(super) fn close_all(&mut self) {
        self.close_moves();
        self.adopt();
        self.conns.close_every();
    }

    // ---- prices -------------------------------------------------------

    /// Takes up to a batch of prices off the engine ring and fans them
    /// out; stops early once half the price age limit went on it (the
    /// rest waits for the next turn, after this turn's writes, where the
    /// ring gate judges it by its age then). Returns the prices taken.
    pub(super) fn drain_prices(&mut self, now: u64) -> usize {
        let c = &mut self.conns;
        c.fanout.check_progress(&mut c.slab, &c.stats, now);
        let lagging = self.lag.detector.is_lagging();
        let batch = if lagging { CONFLATE_BATCH } else { PRICE_BATCH };
        let n = self.input.consumer.slots().min(batch);
        // After reading the ring's fill: a session handed over before the
        // first price published after its hand-over is attached before that
        // price is delivered (the push that made it visible came after the
        // send into the lane).
        self.adopt();
        if lagging {
            let ring = &mut self.input.consumer;
            let n = self
                .lag
                .drain_conflated(&mut self.conns, ring, &mut self.hist, n, now);
            self.swap_histogram();
            return n;
        }
        let mut clock = PassClock::new(now, self.fresh.fan_out_budget_ns(), CLOCK_EVERY);
        for k in 0..n {
            let Some(now) = clock.step(monotonic_ns) else {
                break;
            };
            if let Ok(p) = self.input.consumer.pop() {
                if k == 0 {
                    // The oldest unserved price's age: the ring's lag.
                    let age = now.saturating_sub(p.engine_time_ns);
                    self.lag.sample(&self.conns, age, now);
                }
                self.hist
                    .saturating_record(now.saturating_sub(p.receive_time_ns).max(1));
                let c = &mut self.conns;
                if self.fresh.admit(&p, now) {
                    c.fanout.on_price(&p, &mut c.slab, &c.stats, now);
                } else {
                    c.stats.stale.inc();
                }
            }
        }
        // Each symbol whose prices were too old: its latest, once.
        self.fresh.flush(&mut self.conns, clock.now());
        if clock.steps() > 0 {
            self.swap_histogram();
        }
        clock.steps()
    }

    /// Hands the histogram to the reporter when it asked.
    fn swap_histogram(&mut self) {
        if let Some(x) = &self.exchange {
            x.swap(&mut self.hist);
        }
    }
}
