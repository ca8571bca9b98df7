//! One gateway shard: a mio event loop that owns a set of connections and
//! consumes one engine ring.
//!
//! Per loop turn: drain the engine ring (encode each price once, copy it
//! into every subscribed connection's buffer), poll sockets (reads are
//! drained until `WouldBlock`, spurious events tolerated), write every
//! connection that got bytes this turn, and every [`SWEEP_NS`] run the
//! timers (heartbeats, dead peers, logon and frame timeouts, slow
//! consumers, closing connections). The fan-out path allocates nothing.

use std::io::{self, Read};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::acceptor::Handoff;
use super::conn::{Conn, SessionState, Sub, ANSWER_WAIT_NS};
use super::outbound::{Append, OutBuf};
use super::spill::{self, BusyMeter, ShardLoad, SpillPolicy};
use super::subs::{SubIndex, Subscriber};
use super::{GatewayStats, ShardControl, ShardStats, Shared};
use crate::admission::{RetryWindow, TokenBucket};
use crate::clock::{monotonic_ns, wall_ns};
use crate::engine::SymbolInterest;
use crate::model::{price_flags, Price};
use crate::pipeline::hosted::Readiness;
use crate::pipeline::sink::{latency_histogram, HistogramExchange};
use crate::pipeline::wait::Doorbell;
use crate::pipeline::{ShardInput, WaitStrategy, Waiter};
use crate::refdata::Lookup;
use crate::requests::service::{
    RequestKind, RequestMsg, RequestPort, ACCOUNT_NAME_MAX, SNAPSHOT_SYMBOLS_MAX,
};
use crate::wire::{
    self, DisconnectReason, LogonAccepted, LogonRejectReason, LogonRejected, Message, PriceBody,
    PriceKind, RejectReason, SubscribeResult, SubscribeStatus, PRICE_FRAME_LEN, SYMBOL_BY_NAME,
    TIER_ACCOUNT_DEFAULT,
};
use hdrhistogram::Histogram;

const WAKER: Token = Token(0);
/// With hosted stages, their [`crate::pipeline::HostedTask::between`] runs
/// after every this many connection writes or events in one loop turn, so
/// a turn that writes to thousands of sessions (a reconnect herd) does not
/// hold quotes and the other shards' prices for its whole length.
const INTERLEAVE_EVERY: usize = 32;
/// Tokens of hosted stages' sockets start here (see
/// [`crate::pipeline::hosted::TASK_TOKENS`]). Connection tokens stay below
/// (1 + at most 2^20 connections).
const HOSTED_TOKEN_BASE: usize = 1 << 40;
/// Timer sweep period.
pub const SWEEP_NS: u64 = 50_000_000;
/// Most prices taken from the engine ring per turn, so sockets are polled
/// regularly even under a flood of prices.
pub const PRICE_BATCH: usize = 4096;
/// Most new connections taken from the inbox per turn.
const ACCEPT_BATCH: usize = 256;
/// Most ticks one HistoryRequest may ask for (the answer fits one
/// request-path answer frame).
pub const HISTORY_COUNT_MAX: u16 = 190;
/// Socket reads per connection per loop turn (each up to the inbound
/// buffer's size).
const READS_PER_TURN: usize = 8;
/// Offset of the SBE templateId in a frame (after the 6-byte SOFH and the
/// 2-byte blockLength).
const TEMPLATE_ID_OFFSET: usize = 8;
/// Room reserved for one control message in an outbound buffer.
const CONTROL_FRAME_MAX: usize = 512;

/// Sessions in transit to one shard (moved off a busy shard 0).
const ADOPT_SLOTS: usize = 64;

/// What another shard needs to hand this shard a session.
pub struct Peer {
    adopt: Sender<Conn>,
    doorbell: Arc<Doorbell>,
    interest: Arc<SymbolInterest>,
    stats: Arc<ShardStats>,
    /// Slab slots neither in use nor promised to a session in this
    /// shard's lane. Taken before a slot is used or promised, by the shard
    /// itself (accept) or by shard 0 (a move), so a moved session always
    /// finds its slot; given back when a slot is freed or a promise is not
    /// kept.
    room: AtomicU64,
}

impl Peer {
    /// One slot, if there is room.
    fn take_room(&self) -> bool {
        self.room
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| r.checked_sub(1))
            .is_ok()
    }

    fn give_room(&self) {
        self.room.fetch_add(1, Ordering::SeqCst);
    }

    /// Holds on `symbol` in this shard's interest (tests, diagnostics).
    pub fn symbol_holds(&self, symbol: u16) -> u32 {
        self.interest.holds(symbol)
    }
}

/// Each shard's [`Peer`] and its end of the hand-over lane, made before
/// any shard starts so every shard knows the others.
pub struct Lanes {
    pub peers: Arc<[Peer]>,
    inboxes: Vec<Receiver<Conn>>,
    /// True while shard 0 may still send sessions: the other shards do not
    /// exit on an empty slab before it is false and their lane is empty.
    moves_open: Arc<AtomicBool>,
}

impl Lanes {
    /// `slots`: each shard's slab size (`max_connections_per_shard`).
    pub fn new(inputs: &[ShardInput], slots: usize) -> Lanes {
        // Only a shard 0 that runs the engine moves sessions.
        let moves = inputs.len() >= 2 && !inputs[0].hosted.is_empty();
        let (peers, inboxes): (Vec<Peer>, Vec<Receiver<Conn>>) = inputs
            .iter()
            .map(|input| {
                let (tx, rx) = crossbeam_channel::bounded(ADOPT_SLOTS);
                let peer = Peer {
                    adopt: tx,
                    doorbell: input.doorbell.clone(),
                    interest: input.interest.clone(),
                    stats: Arc::new(ShardStats::default()),
                    room: AtomicU64::new(slots as u64),
                };
                (peer, rx)
            })
            .unzip();
        Lanes {
            peers: peers.into(),
            inboxes,
            moves_open: Arc::new(AtomicBool::new(moves)),
        }
    }

    /// Shard `index`'s inbox (taken once).
    fn take_inbox(&mut self, index: usize) -> Receiver<Conn> {
        std::mem::replace(&mut self.inboxes[index], crossbeam_channel::never())
    }
}

/// Clears [`Lanes`]' `moves_open` when shard 0's thread ends, however it
/// ends.
struct MovesClosedOnExit {
    open: Arc<AtomicBool>,
    sender: bool,
}

impl Drop for MovesClosedOnExit {
    fn drop(&mut self) {
        if self.sender {
            self.open.store(false, Ordering::SeqCst);
        }
    }
}

/// What [`spawn`] returns to the gateway.
pub struct SpawnedShard {
    pub control: Sender<ShardControl>,
    pub waker: Arc<Waker>,
    pub thread: JoinHandle<()>,
    pub handoff: Handoff,
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
    shard.peers = lanes.peers.clone();
    shard.loads = Vec::with_capacity(lanes.peers.len());
    shard.adopt_rx = lanes.take_inbox(index);
    shard.moves_open = lanes.moves_open.clone();
    let thread = std::thread::Builder::new()
        .name(format!("pw-shard{index}"))
        .spawn(move || {
            let stage = crate::pipeline::Stage::Shard(index as u16);
            if let Err(e) = crate::pipeline::affinity::place_current(stage, &shard.shared.cfg.cpus)
            {
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

struct Shard {
    shared: Arc<Shared>,
    poll: Poll,
    events: Events,
    /// This turn's events (readable includes closed).
    ready: Vec<(usize, Readiness)>,
    input: ShardInput,
    conns: Vec<Option<Conn>>,
    free: Vec<u32>,
    /// Subscriptions per symbol (all tiers): the first and the last one
    /// switch the symbol in `input.interest`.
    sym_subs: Box<[u32]>,
    /// One past the highest slot in use: the timer sweep walks
    /// `conns[..live_end]`, not every slot of the (large) slab.
    live_end: usize,
    index: SubIndex,
    write_list: Vec<u32>,
    /// Connections with unread input left after their per-turn budget.
    read_list: Vec<u32>,
    tiers: usize,
    digits: Box<[u8]>,
    scratch: [u8; PRICE_FRAME_LEN],
    frame: Box<[u8]>,
    results: Vec<SubscribeResult>,
    new_keys: Vec<u32>,
    rng: SmallRng,
    stats: Arc<ShardStats>,
    control: Receiver<ShardControl>,
    inbox: Receiver<(TcpStream, SocketAddr)>,
    waiter: Waiter,
    next_sweep_ns: u64,
    stopping: Option<u64>,
    /// Tick receive → shard latency of every price taken off the ring.
    hist: Histogram<u64>,
    exchange: Option<HistogramExchange>,
    requests: RequestPort,
    /// Every shard's hand-over lane (this one's included, by index).
    peers: Arc<[Peer]>,
    /// Sessions handed to this shard by another.
    adopt_rx: Receiver<Conn>,
    busy: BusyMeter,
    spill: SpillPolicy,
    /// Decided by the last measurement: move one session there.
    spill_to: Option<usize>,
    /// Sessions still to move on an operator's request.
    spill_forced: u32,
    /// Scratch for [`Shard::peer_loads`].
    loads: Vec<ShardLoad>,
    /// See [`Lanes`]; cleared by shard 0 once it stops moving sessions.
    moves_open: Arc<AtomicBool>,
    /// A DisconnectAll arrived: sessions adopted from now on are
    /// disconnected too.
    disconnecting: bool,
    /// The last poll returned input (readable sockets or the waker), not
    /// only writable edges: such a turn counts as busy.
    had_input: bool,
}

impl Shard {
    fn new(
        shared: Arc<Shared>,
        input: ShardInput,
        poll: Poll,
        control: Receiver<ShardControl>,
        inbox: Receiver<(TcpStream, SocketAddr)>,
        stats: Arc<ShardStats>,
        requests: RequestPort,
    ) -> Self {
        let table = &shared.config.table;
        let cap = shared.cfg.max_connections_per_shard;
        let tiers = table.tiers().len();
        let digits = table.instruments().iter().map(|i| i.digits).collect();
        let max_entries = shared.cfg.max_frame_bytes / 18 + 1;
        let mut waiter = Waiter::new(shared.cfg.shard_wait, input.doorbell.clone());
        let shared_spill = shared.cfg.shard0_spill_permille;
        // Sockets, the waker and the doorbell wake it; a park ends by its
        // next sweep (every SWEEP_NS) or hosted timer. (A host parks
        // briefly while its engine holds prices for a full ring: see
        // `poll_once`.)
        waiter.set_retrying(false);
        Shard {
            index: SubIndex::new(table.len() * tiers),
            conns: (0..cap).map(|_| None).collect(),
            free: (0..cap as u32).rev().collect(),
            live_end: 0,
            sym_subs: vec![0; table.len()].into_boxed_slice(),
            write_list: Vec::with_capacity(cap),
            read_list: Vec::with_capacity(cap),
            ready: Vec::with_capacity(1024),
            events: Events::with_capacity(1024),
            tiers,
            digits,
            scratch: [0; PRICE_FRAME_LEN],
            frame: vec![0u8; shared.cfg.max_frame_bytes].into_boxed_slice(),
            results: Vec::with_capacity(max_entries),
            new_keys: Vec::with_capacity(max_entries),
            rng: SmallRng::from_entropy(),
            waiter,
            shared,
            poll,
            input,
            stats,
            control,
            inbox,
            next_sweep_ns: 0,
            stopping: None,
            hist: latency_histogram(),
            exchange: None,
            requests,
            peers: Arc::new([]),
            adopt_rx: crossbeam_channel::never(),
            busy: BusyMeter::new(SWEEP_NS, monotonic_ns()),
            spill: SpillPolicy {
                threshold_permille: shared_spill,
            },
            spill_to: None,
            spill_forced: 0,
            loads: Vec::new(),
            moves_open: Arc::new(AtomicBool::new(false)),
            disconnecting: false,
            had_input: false,
        }
    }

    fn run(&mut self) {
        let mut busy = false;
        loop {
            self.poll_once(busy || !self.read_list.is_empty());
            let woke = monotonic_ns();
            self.handle_events();
            self.read_again();
            // Hosted stages (`--threading shared`): the ingest listener reads
            // what its sockets got and the engine turns it into prices in
            // this shard's ring, which is drained and written in this turn.
            let now = monotonic_ns();
            let hosted = self.input.hosted.turn(now);
            let got = hosted + self.drain_prices(now) + self.drain_answers();
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
            if now >= self.next_sweep_ns {
                self.next_sweep_ns = now + SWEEP_NS;
                self.sweep(now);
                self.measure(now);
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
        let mut timeout = if busy || !self.write_list.is_empty() {
            Some(Duration::ZERO)
        } else {
            self.waiter.poll_timeout()
        };
        let mut sleeping = timeout != Some(Duration::ZERO);
        if sleeping {
            // Wake for this shard's sweep or a hosted task's timer (the
            // engine's stale sweep), whichever comes first: an idle park
            // must not make them late.
            let due = self
                .input
                .hosted
                .next_timer_ns()
                .map_or(self.next_sweep_ns, |t| t.min(self.next_sweep_ns));
            timeout = crate::pipeline::wait::until_due(timeout, monotonic_ns(), due);
            sleeping = timeout != Some(Duration::ZERO);
        }
        let consumer = &self.input.consumer;
        let answers = &self.requests.answers;
        let hosted = &self.input.hosted;
        let adopt = &self.adopt_rx;
        let pending = || {
            !consumer.is_empty()
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
        // (an epoll_wait(0) per turn; see BENCHMARKS-PEERS.md).
        let input = self
            .events
            .iter()
            .any(|e| e.token() == WAKER || e.is_readable() || e.is_read_closed());
        if busy || input {
            self.waiter.reset();
        }
        // Reads left over from last turn's budget are input too.
        self.had_input = input || !self.read_list.is_empty();
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
                self.on_readable(i, monotonic_ns());
            }
        }
    }

    fn should_exit(&mut self, now: u64) -> bool {
        match self.stopping {
            None => false,
            Some(deadline) => {
                now >= deadline
                    || (self.free.len() == self.conns.len()
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
    }

    fn accept(&mut self, mut stream: TcpStream, peer: SocketAddr) {
        // No slot while every free one is promised to a moving session.
        let slot = if self.take_room() {
            self.free.pop()
        } else {
            None
        };
        let Some(i) = slot else {
            self.release_ip(peer);
            let retry = self.jitter(self.shared.cfg.admission.retry_after);
            super::acceptor::refuse_busy(stream, retry, &self.shared.stats);
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
            self.free.push(i as u32);
            self.give_room();
            self.release_ip(peer);
            return;
        }
        let cfg = &self.shared.cfg;
        let now = monotonic_ns();
        self.live_end = self.live_end.max(i + 1);
        self.conns[i] = Some(Conn {
            stream,
            peer,
            state: SessionState::AwaitingLogon,
            session_id: 0,
            inbuf: vec![0u8; cfg.max_frame_bytes].into_boxed_slice(),
            in_len: 0,
            out: OutBuf::new(cfg.out_cap_bytes, cfg.low_water_bytes, cfg.high_water_bytes),
            subs: Vec::with_capacity(cfg.max_subscriptions.min(64)),
            dirty_subs: 0,
            default_tier: 0,
            heartbeat_ns: u64::from(cfg.heartbeat_ms) * 1_000_000,
            connected_ns: now,
            last_rx_ns: now,
            last_tx_ns: now,
            partial_since_ns: None,
            msg_bucket: TokenBucket::new(cfg.msg_rate_per_s, cfg.msg_burst, now),
            flood_strikes: 0,
            first_subscribe_done: false,
            in_write_list: false,
            closing_reason: None,
            fin_sent: false,
            in_read_list: false,
            acct: None,
            requests_out: 0,
            last_request_ns: 0,
        });
        GatewayStats::add(&self.shared.stats.open, 1);
        self.stats
            .connections
            .set((self.conns.len() - self.free.len()) as u64);
    }

    fn release_ip(&self, peer: SocketAddr) {
        self.shared
            .admission
            .lock()
            .expect("admission lock")
            .on_close(peer.ip());
    }

    // ---- prices -------------------------------------------------------

    fn drain_prices(&mut self, now: u64) -> usize {
        let n = self.input.consumer.slots().min(PRICE_BATCH);
        // After reading the ring's fill: a session handed over before the
        // first price published after its hand-over is attached before that
        // price is delivered (the push that made it visible came after the
        // send into the lane).
        self.adopt();
        for _ in 0..n {
            if let Ok(p) = self.input.consumer.pop() {
                self.hist
                    .saturating_record(now.saturating_sub(p.receive_time_ns).max(1));
                self.on_price(&p, now);
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

    /// Encodes `p` once and copies it to every subscriber of its key.
    #[inline]
    fn on_price(&mut self, p: &Price, now: u64) {
        self.stats.prices_in.inc();
        // The engine sends one price per symbol change (its first tier);
        // every tier is the same top of book with its own markup.
        for tier in 0..self.tiers as u8 {
            let tp = self.shared.table.for_tier(p, tier);
            self.fan_out_tier(&tp, now);
        }
    }

    /// Encodes one (symbol, tier) price once and copies it to every
    /// subscriber of that key.
    #[inline]
    fn fan_out_tier(&mut self, p: &Price, now: u64) {
        let key = p.symbol as usize * self.tiers + p.tier as usize;
        let subscribers = self.index.subscribers(key);
        if subscribers.is_empty() {
            return;
        }
        // The engine conflated this key: send a resync point, not a delta.
        let kind = if p.flags & price_flags::CONFLATED != 0 {
            PriceKind::Snapshot
        } else {
            PriceKind::Update
        };
        let digits = self.digits[p.symbol as usize];
        let n = wire::encode_model_price(
            &mut self.scratch,
            kind,
            p,
            digits,
            self.shared.wall_offset_ns,
        );
        let bytes = &self.scratch[..n];
        for s in subscribers {
            if let Some(conn) = self.conns[s.conn as usize].as_mut() {
                if deliver(conn, s.slot, p.seq, bytes, now, &self.stats) && !conn.in_write_list {
                    conn.in_write_list = true;
                    self.write_list.push(s.conn);
                }
            }
        }
    }

    // ---- writes -------------------------------------------------------

    fn flush_writes(&mut self, now: u64) {
        let mut list = std::mem::take(&mut self.write_list);
        let hosting = !self.input.hosted.is_empty();
        for (k, &i) in list.iter().enumerate() {
            if let Some(c) = self.conns[i as usize].as_mut() {
                c.in_write_list = false;
            }
            self.write_conn(i as usize, now);
            if hosting && k % INTERLEAVE_EVERY == INTERLEAVE_EVERY - 1 {
                self.input.hosted.between(monotonic_ns());
                self.stats.interleaves.inc();
            }
        }
        list.clear();
        self.write_list = list;
    }

    fn write_conn(&mut self, i: usize, now: u64) {
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        for _ in 0..2 {
            let before = conn.out.len();
            let res = conn.out.write_to(&mut conn.stream);
            self.stats
                .bytes_written
                .add((before - conn.out.len()) as u64);
            if res.is_err() {
                self.close_now(i);
                return;
            }
            // Drained below low after conflating, or owed keys left by an
            // overflow while writing through: send the latest of each.
            let drained = conn.out.update_flow(now);
            if (drained || !conn.out.is_conflating()) && conn.dirty_subs > 0 {
                resync(
                    conn,
                    &self.shared,
                    self.tiers,
                    &self.digits,
                    &self.stats,
                    now,
                );
                continue;
            }
            break;
        }
        if matches!(conn.state, SessionState::Closing { .. })
            && conn.out.is_empty()
            && !conn.fin_sent
        {
            // Half-close after the last byte (our FIN follows the Disconnect)
            // and keep reading until the peer closes or the linger ends:
            // closing with unread input would send a reset, and a reset
            // makes the peer's stack discard the Disconnect it has not read.
            let _ = conn.stream.shutdown(std::net::Shutdown::Write);
            conn.fin_sent = true;
        }
    }

    fn queue_write(&mut self, i: usize) {
        if let Some(c) = self.conns[i].as_mut() {
            if !c.in_write_list {
                c.in_write_list = true;
                self.write_list.push(i as u32);
            }
        }
    }

    /// Appends a control message built by `encode`; closes the connection
    /// as a slow consumer if even that does not fit.
    fn send(
        &mut self,
        i: usize,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, wire::EncodeError>,
    ) {
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        let r = conn
            .out
            .append_with(CONTROL_FRAME_MAX, |b| encode(b).unwrap_or(0));
        conn.last_tx_ns = monotonic_ns();
        let closing = matches!(conn.state, SessionState::Closing { .. });
        self.queue_write(i);
        if r == Append::Overflow && !closing {
            // Not even a control message fits: the client is not reading.
            GatewayStats::add(&self.shared.stats.disconnects_slow_consumer, 1);
            self.begin_close(i, Some(DisconnectReason::SLOW_CONSUMER), monotonic_ns());
        }
    }

    // ---- reads --------------------------------------------------------

    fn on_readable(&mut self, i: usize, now: u64) {
        // A bounded number of reads per turn, so one fast sender cannot
        // keep the shard from its prices and its other connections; the
        // rest is read next turn (edge-triggered: remembered here).
        for _ in 0..READS_PER_TURN {
            let Some(conn) = self.conns[i].as_mut() else {
                return;
            };
            if conn.in_len == conn.inbuf.len() {
                // Cannot happen while max frame <= buffer; treat as abuse.
                self.protocol_error(i, RejectReason::FRAME_TOO_LARGE, 0, "frame does not fit");
                return;
            }
            match conn.stream.read(&mut conn.inbuf[conn.in_len..]) {
                Ok(0) => {
                    GatewayStats::add(&self.shared.stats.peer_closed, 1);
                    self.close_now(i);
                    return;
                }
                Ok(n) => {
                    conn.in_len += n;
                    conn.last_rx_ns = now;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    GatewayStats::add(&self.shared.stats.peer_closed, 1);
                    self.close_now(i);
                    return;
                }
            }
            self.process_frames(i, now);
        }
        if let Some(conn) = self.conns[i].as_mut() {
            if !conn.in_read_list {
                conn.in_read_list = true;
                self.read_list.push(i as u32);
            }
        }
    }

    /// Continues reading connections that used up last turn's budget.
    fn read_again(&mut self) {
        let mut list = std::mem::take(&mut self.read_list);
        for &i in &list {
            if let Some(c) = self.conns[i as usize].as_mut() {
                c.in_read_list = false;
            }
            self.on_readable(i as usize, monotonic_ns());
        }
        list.clear();
        // Entries pushed while reading went to the (empty) replacement.
        list.append(&mut self.read_list);
        self.read_list = list;
    }

    fn process_frames(&mut self, i: usize, now: u64) {
        let max = self.shared.cfg.max_frame_bytes;
        let mut off = 0;
        loop {
            let Some(conn) = self.conns[i].as_mut() else {
                return;
            };
            if matches!(conn.state, SessionState::Closing { .. }) {
                conn.in_len = 0;
                return;
            }
            let len = match wire::split_with_max(&conn.inbuf[off..conn.in_len], max) {
                Ok(None) => break,
                Ok(Some(len)) => len,
                Err(e) => {
                    self.protocol_error(i, e.reason(), 0, "bad framing");
                    return;
                }
            };
            self.frame[..len].copy_from_slice(&conn.inbuf[off..off + len]);
            off += len;
            let frame = std::mem::take(&mut self.frame);
            self.on_frame(i, &frame[..len], now);
            self.frame = frame;
        }
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        conn.inbuf.copy_within(off..conn.in_len, 0);
        conn.in_len -= off;
        conn.partial_since_ns = match (conn.in_len, off, conn.partial_since_ns) {
            (0, _, _) => None,
            (_, 0, Some(t)) => Some(t),
            _ => Some(now),
        };
    }

    fn on_frame(&mut self, i: usize, frame: &[u8], now: u64) {
        let Some(conn) = self.conns[i].as_ref() else {
            return;
        };
        let state = conn.state;
        let msg = match wire::decode(frame) {
            Ok(m) => m,
            Err(e) => {
                let tid = e.template_id();
                if state == SessionState::AwaitingLogon {
                    self.protocol_error(i, e.reason(), tid, "bad message before logon");
                } else {
                    self.reject(i, 0, tid, e.reason(), 0, "bad message");
                }
                return;
            }
        };
        match state {
            SessionState::AwaitingLogon => match msg {
                Message::Logon(l) => self.on_logon(i, &l, now),
                other => self.protocol_error(
                    i,
                    RejectReason::NOT_LOGGED_ON,
                    other.template_id(),
                    "logon first",
                ),
            },
            SessionState::Active { account } => self.on_active(i, account, msg, now),
            SessionState::Closing { .. } => {}
        }
    }

    fn on_active(&mut self, i: usize, account: u32, msg: Message<'_>, now: u64) {
        // Every message, heartbeats included, spends a token: a heartbeat
        // flood is a flood.
        if !self.take_msg_token(i, &msg, now) {
            return;
        }
        match msg {
            Message::Heartbeat => {}
            Message::Logout => self.disconnect(i, DisconnectReason::LOGOUT, 0, "logout", now),
            Message::Logon(_) => self.reject(
                i,
                0,
                wire::template::LOGON,
                RejectReason::ALREADY_LOGGED_ON,
                0,
                "",
            ),
            Message::Subscribe(s) => self.on_subscribe(i, &s, now),
            Message::Unsubscribe(s) => self.on_unsubscribe(i, &s),
            Message::SymbolListRequest(r) => self.on_symbol_list(i, account, r.request_id, now),
            Message::SnapshotRequest(r) => self.on_snapshot_request(i, account, &r, now),
            Message::HistoryRequest(r) => self.on_history_request(i, account, &r, now),
            other => {
                let rid = other.request_id().unwrap_or(0);
                self.reject(
                    i,
                    rid,
                    other.template_id(),
                    RejectReason::UNEXPECTED_MESSAGE,
                    0,
                    "",
                )
            }
        }
    }

    /// Per-connection message rate limit; a sustained flood disconnects.
    fn take_msg_token(&mut self, i: usize, msg: &Message<'_>, now: u64) -> bool {
        let Some(conn) = self.conns[i].as_mut() else {
            return false;
        };
        if conn.msg_bucket.try_take(now) {
            conn.flood_strikes = 0;
            return true;
        }
        conn.flood_strikes += 1;
        let strikes = conn.flood_strikes;
        if strikes > self.shared.cfg.flood_disconnect_after {
            GatewayStats::add(&self.shared.stats.disconnects_flood, 1);
            let retry = self.jitter(self.shared.cfg.error_retry);
            self.disconnect(
                i,
                DisconnectReason::PROTOCOL_ERROR,
                retry,
                "message flood",
                now,
            );
        } else {
            // [requests hunk 1/4] jittered, counted (requests::port).
            let retry = self
                .requests
                .conn_rate_retry_ms(self.shared.cfg.msg_rate_per_s);
            let rid = msg.request_id().unwrap_or(0);
            self.reject(
                i,
                rid,
                msg.template_id(),
                RejectReason::RATE_LIMITED,
                retry,
                "",
            );
        }
        false
    }

    // ---- session ------------------------------------------------------

    fn on_logon(&mut self, i: usize, logon: &wire::Logon<'_>, now: u64) {
        let shared = self.shared.clone();
        if let Err(r) = shared
            .admission
            .lock()
            .expect("admission lock")
            .on_logon(now)
        {
            return self.reject_logon(i, LogonRejectReason::RATE_LIMITED, r.retry_after_ms, now);
        }
        let name = std::str::from_utf8(logon.account).unwrap_or("");
        let acct = match shared.refdata.lookup(name, now) {
            Lookup::Found(a) if constant_time_eq(a.token.as_bytes(), logon.token) => a,
            Lookup::Unavailable { retry_after_ms } => {
                // Reference data is unreachable: come back later, not "wrong".
                let retry = u32::try_from(retry_after_ms).unwrap_or(u32::MAX);
                return self.reject_logon(i, LogonRejectReason::BUSY, retry, now);
            }
            _ => {
                // 0: wrong credentials do not get better by retrying.
                return self.reject_logon(i, LogonRejectReason::AUTH, 0, now);
            }
        };
        let idx = account_index(&shared, name);
        let opened = shared
            .admission
            .lock()
            .expect("admission lock")
            .on_session_open(idx);
        if let Err(r) = opened {
            return self.reject_logon(i, LogonRejectReason::SESSION_LIMIT, r.retry_after_ms, now);
        }
        let cfg = &shared.cfg;
        let hb = match logon.heartbeat_interval_ms {
            0 => cfg.heartbeat_ms,
            ms => ms.clamp(cfg.heartbeat_min_ms, cfg.heartbeat_max_ms),
        };
        let session_id = shared
            .next_session_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let default_tier = acct.tiers[0];
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        conn.state = SessionState::Active { account: idx };
        conn.acct = Some(acct);
        conn.session_id = session_id;
        conn.default_tier = default_tier;
        conn.heartbeat_ns = u64::from(hb) * 1_000_000;
        GatewayStats::add(&shared.stats.logons_accepted, 1);
        GatewayStats::add(&shared.stats.logged_on, 1);
        let m = LogonAccepted {
            session_id,
            heartbeat_interval_ms: hb,
            server_time_ns: wall_ns(),
            default_tier,
        };
        self.send(i, |b| wire::encode_logon_accepted(b, &m));
    }

    fn reject_logon(&mut self, i: usize, reason: LogonRejectReason, retry_after_ms: u32, now: u64) {
        GatewayStats::add(&self.shared.stats.logons_rejected, 1);
        let m = LogonRejected {
            reason,
            retry_after_ms,
        };
        self.send(i, |b| wire::encode_logon_rejected(b, &m));
        self.begin_close(i, None, now);
    }

    fn on_subscribe(&mut self, i: usize, s: &wire::Subscribe<'_>, now: u64) {
        let shared = self.shared.clone();
        if !self.conns[i]
            .as_ref()
            .is_some_and(|c| c.first_subscribe_done)
        {
            let ok = shared
                .admission
                .lock()
                .expect("admission lock")
                .on_first_subscribe(now);
            if let Err(r) = ok {
                let t = wire::template::SUBSCRIBE;
                return self.reject(
                    i,
                    s.request_id,
                    t,
                    RejectReason::RATE_LIMITED,
                    r.retry_after_ms,
                    "",
                );
            }
        }
        let Some(acct) = self.conns[i].as_ref().and_then(|c| c.acct.clone()) else {
            return;
        };
        let acct = &*acct;
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        conn.first_subscribe_done = true;
        let tier = if s.tier == TIER_ACCOUNT_DEFAULT {
            conn.default_tier
        } else {
            s.tier
        };
        self.results.clear();
        self.new_keys.clear();
        for entry in s.entries.clone() {
            let (id, status) = self.resolve(acct, tier, &entry);
            let status = if status == SubscribeStatus::OK {
                self.add_sub(i, id as usize * self.tiers + tier as usize)
            } else {
                status
            };
            self.results.push(SubscribeResult {
                symbol_id: id,
                name: entry.name,
                status,
            });
        }
        self.send_subscribe_response(i, s.request_id);
        self.send_snapshots(i, now);
    }

    /// Sends the per-symbol results collected in `self.results`.
    fn send_subscribe_response(&mut self, i: usize, request_id: u64) {
        let results = std::mem::take(&mut self.results);
        self.send(i, |b| {
            wire::encode_subscribe_response(b, request_id, results.iter())
        });
        self.results = results;
    }

    /// Resolves a symbol reference against the table and entitlements.
    fn resolve(
        &self,
        acct: &crate::config::Account,
        tier: u8,
        entry: &wire::SymbolRef,
    ) -> (u16, SubscribeStatus) {
        let table = &self.shared.config.table;
        let id = if entry.symbol_id == SYMBOL_BY_NAME {
            entry
                .name
                .as_str()
                .and_then(|n| table.by_name(n))
                .map(|i| i.id)
        } else {
            table.get(entry.symbol_id).map(|i| i.id)
        };
        let Some(id) = id else {
            return (entry.symbol_id, SubscribeStatus::UNKNOWN_SYMBOL);
        };
        if (tier as usize) >= self.tiers || !acct.entitled_tier(tier) {
            return (id, SubscribeStatus::TIER_NOT_ENTITLED);
        }
        if !acct.entitled_symbol(id) {
            return (id, SubscribeStatus::NOT_ENTITLED);
        }
        (id, SubscribeStatus::OK)
    }

    fn add_sub(&mut self, i: usize, key: usize) -> SubscribeStatus {
        let max = self.shared.cfg.max_subscriptions;
        let Some(conn) = self.conns[i].as_mut() else {
            return SubscribeStatus::LIMIT_REACHED;
        };
        if conn.subs.iter().any(|s| s.key as usize == key) {
            return SubscribeStatus::OK;
        }
        if conn.subs.len() >= max {
            return SubscribeStatus::LIMIT_REACHED;
        }
        let slot = conn.subs.len() as u32;
        let pos = self.index.add(
            key,
            Subscriber {
                conn: i as u32,
                slot,
            },
        );
        conn.subs.push(Sub {
            key: key as u32,
            pos,
            last_seq: 0,
            dirty: false,
        });
        // Before the snapshot is read (send_snapshots): see SymbolInterest.
        let symbol = key / self.tiers;
        self.sym_subs[symbol] += 1;
        if self.sym_subs[symbol] == 1 {
            self.input.interest.hold(symbol as u16);
        }
        self.new_keys.push(key as u32);
        SubscribeStatus::OK
    }

    /// Sends a PriceSnapshot for every key subscribed by the last request.
    fn send_snapshots(&mut self, i: usize, now: u64) {
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        for &key in &self.new_keys {
            let slot = conn.subs.iter().position(|s| s.key == key);
            if let Some(slot) = slot {
                conn.subs[slot].dirty = true;
                conn.dirty_subs += 1;
            }
        }
        if !conn.out.is_conflating() {
            resync_fresh(conn, &self.shared, self.tiers, &self.digits, now);
        }
        self.queue_write(i);
    }

    fn remove_sub(&mut self, i: usize, slot: usize) {
        self.unindex(i, slot);
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        let sub = conn.subs.swap_remove(slot);
        if sub.dirty {
            conn.dirty_subs -= 1;
        }
        if slot < conn.subs.len() {
            let m = conn.subs[slot];
            self.index.set_slot(m.key as usize, m.pos, slot as u32);
        }
    }

    /// Takes subscription `slot` of connection `i` out of this shard's
    /// index (and the symbol out of its interest if it was the last),
    /// leaving the connection's own list as it is.
    fn unindex(&mut self, i: usize, slot: usize) {
        let Some(sub) = self.conns[i].as_ref().map(|c| c.subs[slot]) else {
            return;
        };
        if let Some(moved) = self.index.remove(sub.key as usize, sub.pos) {
            if let Some(other) = self.conns[moved.conn as usize].as_mut() {
                other.subs[moved.slot as usize].pos = sub.pos;
            }
        }
        let symbol = sub.key as usize / self.tiers;
        self.sym_subs[symbol] -= 1;
        if self.sym_subs[symbol] == 0 {
            self.input.interest.release(symbol as u16);
        }
    }

    fn on_unsubscribe(&mut self, i: usize, s: &wire::Subscribe<'_>) {
        let Some(acct) = self.conns[i].as_ref().and_then(|c| c.acct.clone()) else {
            return;
        };
        let acct = &*acct;
        let default_tier = self.conns[i].as_ref().map_or(0, |c| c.default_tier);
        let tier = if s.tier == TIER_ACCOUNT_DEFAULT {
            default_tier
        } else {
            s.tier
        };
        self.results.clear();
        for entry in s.entries.clone() {
            let (id, mut status) = self.resolve(acct, tier, &entry);
            if status == SubscribeStatus::OK {
                let key = (id as usize * self.tiers + tier as usize) as u32;
                let slot = self.conns[i]
                    .as_ref()
                    .and_then(|c| c.subs.iter().position(|s| s.key == key));
                match slot {
                    Some(slot) => self.remove_sub(i, slot),
                    None => status = SubscribeStatus::NOT_SUBSCRIBED,
                }
            }
            self.results.push(SubscribeResult {
                symbol_id: id,
                name: entry.name,
                status,
            });
        }
        self.send_subscribe_response(i, s.request_id);
    }

    fn on_symbol_list(&mut self, i: usize, account: u32, request_id: u64, now: u64) {
        let t = wire::template::SYMBOL_LIST_REQUEST;
        let staged = self
            .shared
            .admission
            .lock()
            .expect("admission lock")
            .on_symbol_list(now);
        if let Err(r) = staged {
            return self.reject(
                i,
                request_id,
                t,
                RejectReason::RATE_LIMITED,
                r.retry_after_ms,
                "",
            );
        }
        let mut m = self.request_msg(i, account, request_id, RequestKind::SymbolList, now);
        m.budget_us = 0;
        self.enqueue(i, m);
    }

    fn on_snapshot_request(
        &mut self,
        i: usize,
        account: u32,
        r: &wire::SnapshotRequest<'_>,
        now: u64,
    ) {
        let t = wire::template::SNAPSHOT_REQUEST;
        let Some(tier) = self.entitled_tier(i, r.tier) else {
            return self.reject(i, r.request_id, t, RejectReason::NOT_ENTITLED, 0, "tier");
        };
        if r.symbols.len() > SNAPSHOT_SYMBOLS_MAX {
            let text = "too many symbols in one request";
            return self.reject(i, r.request_id, t, RejectReason::LIMIT_REACHED, 0, text);
        }
        let mut m = self.request_msg(i, account, r.request_id, RequestKind::Snapshot, now);
        for id in r.symbols.clone() {
            if let Err(reason) = self.entitled_symbol(i, id) {
                return self.reject(i, r.request_id, t, reason, 0, "");
            }
            m.symbols[m.nsym as usize] = id;
            m.nsym += 1;
        }
        m.tier = tier;
        m.budget_us = r.budget_us;
        m.critical = r.critical;
        self.enqueue(i, m);
    }

    fn on_history_request(&mut self, i: usize, account: u32, r: &wire::HistoryRequest, now: u64) {
        let t = wire::template::HISTORY_REQUEST;
        if let Err(reason) = self.entitled_symbol(i, r.symbol_id) {
            return self.reject(i, r.request_id, t, reason, 0, "");
        }
        let mut m = self.request_msg(i, account, r.request_id, RequestKind::History, now);
        m.symbols[0] = r.symbol_id;
        m.nsym = 1;
        m.count = r.count.min(HISTORY_COUNT_MAX);
        m.budget_us = r.budget_us;
        m.critical = r.critical;
        self.enqueue(i, m);
    }

    /// The tier a request names (or the session default), if entitled.
    fn entitled_tier(&self, i: usize, tier: u8) -> Option<u8> {
        let conn = self.conns[i].as_ref()?;
        let tier = if tier == TIER_ACCOUNT_DEFAULT {
            conn.default_tier
        } else {
            tier
        };
        let ok = (tier as usize) < self.tiers && conn.acct.as_ref()?.entitled_tier(tier);
        ok.then_some(tier)
    }

    fn entitled_symbol(&self, i: usize, id: u16) -> Result<(), RejectReason> {
        if self.shared.config.table.get(id).is_none() {
            return Err(RejectReason::UNKNOWN_SYMBOL);
        }
        let entitled = self.conns[i]
            .as_ref()
            .and_then(|c| c.acct.as_ref())
            .is_some_and(|a| a.entitled_symbol(id));
        if entitled {
            Ok(())
        } else {
            Err(RejectReason::NOT_ENTITLED)
        }
    }

    fn request_msg(
        &self,
        i: usize,
        account: u32,
        request_id: u64,
        kind: RequestKind,
        now: u64,
    ) -> RequestMsg {
        let conn = self.conns[i].as_ref();
        let mut m = RequestMsg {
            shard: self.input.index as u16,
            conn: i as u32,
            session: conn.map_or(0, |c| c.session_id),
            account,
            request_id,
            kind,
            tier: 0,
            symbols: [0; SNAPSHOT_SYMBOLS_MAX],
            nsym: 0,
            count: 0,
            budget_us: 0,
            critical: false,
            critical_entitled: conn
                .and_then(|c| c.acct.as_ref())
                .is_some_and(|a| a.critical),
            arrival_ns: now,
            account_name: [0; ACCOUNT_NAME_MAX],
            account_name_len: 0,
        };
        if let Some(a) = conn.and_then(|c| c.acct.as_ref()) {
            let n = a.name.len().min(ACCOUNT_NAME_MAX);
            m.account_name[..n].copy_from_slice(&a.name.as_bytes()[..n]);
            m.account_name_len = n as u8;
        }
        m
    }

    /// Hands a request to the request path; a full ring is an immediate
    /// Reject(overloaded) with a jittered retry-after, never a wait.
    fn enqueue(&mut self, i: usize, m: RequestMsg) {
        // [requests hunk 4/4] the port keeps one account from filling the ring.
        let pushed = self.requests.push(m);
        if pushed {
            if let Some(c) = self.conns[i].as_mut() {
                c.requests_out += 1;
                c.last_request_ns = monotonic_ns();
            }
            self.requests.dispatcher.ring();
            return;
        }
        self.stats.requests_refused.inc();
        // [requests hunk 2/4] the queue's shed window, counted (requests::port).
        let retry = self.requests.path_full_retry_ms();
        let t = match m.kind {
            RequestKind::Snapshot => wire::template::SNAPSHOT_REQUEST,
            RequestKind::SymbolList => wire::template::SYMBOL_LIST_REQUEST,
            RequestKind::History => wire::template::HISTORY_REQUEST,
        };
        self.reject(
            i,
            m.request_id,
            t,
            RejectReason::OVERLOADED,
            retry,
            "request path full",
        );
    }

    /// Copies answers from the request workers into their connections.
    fn drain_answers(&mut self) -> usize {
        let mut n = 0;
        for r in 0..self.requests.answers.len() {
            while let Ok(a) = self.requests.answers[r].pop() {
                n += 1;
                let i = a.conn as usize;
                let live = self
                    .conns
                    .get(i)
                    .and_then(Option::as_ref)
                    .is_some_and(|c| c.session_id == a.session && c.is_active());
                if !live {
                    self.stats.answers_orphaned.inc();
                    continue;
                }
                let bytes = &a.bytes[..a.len as usize];
                let mut lost = false;
                if let Some(conn) = self.conns[i].as_mut() {
                    conn.requests_out = conn.requests_out.saturating_sub(1);
                    if conn.out.append(bytes) == Append::Overflow {
                        self.stats.answers_orphaned.inc();
                        lost = true;
                    }
                    conn.last_tx_ns = monotonic_ns();
                }
                self.queue_write(i);
                // [requests hunk 3/4] an answer that does not fit is never
                // lost silently: the client is not reading, close it as a
                // slow consumer (it learns its open requests are gone).
                if lost {
                    GatewayStats::add(&self.shared.stats.disconnects_slow_consumer, 1);
                    self.begin_close(i, Some(DisconnectReason::SLOW_CONSUMER), monotonic_ns());
                }
            }
        }
        n
    }

    // ---- rejects, disconnects, closing ----------------------------------

    fn reject(
        &mut self,
        i: usize,
        request_id: u64,
        ref_template_id: u16,
        reason: RejectReason,
        retry_after_ms: u32,
        text: &str,
    ) {
        GatewayStats::add(&self.shared.stats.rejects_sent, 1);
        let m = wire::Reject {
            request_id,
            ref_template_id,
            reason,
            retry_after_ms,
            text: text.as_bytes(),
        };
        self.send(i, |b| wire::encode_reject(b, &m));
    }

    fn protocol_error(&mut self, i: usize, reason: RejectReason, template: u16, text: &str) {
        self.reject(i, 0, template, reason, 0, text);
        let retry = self.jitter(self.shared.cfg.error_retry);
        self.disconnect(
            i,
            DisconnectReason::PROTOCOL_ERROR,
            retry,
            text,
            monotonic_ns(),
        );
    }

    fn jitter(&mut self, w: RetryWindow) -> u32 {
        self.rng.gen_range(w.min_ms..=w.max_ms)
    }

    /// Queues Disconnect(reason) and starts closing.
    fn disconnect(
        &mut self,
        i: usize,
        reason: DisconnectReason,
        retry_after_ms: u32,
        text: &str,
        now: u64,
    ) {
        let s = &self.shared.stats;
        let counter = match reason {
            DisconnectReason::SLOW_CONSUMER => Some(&s.disconnects_slow_consumer),
            DisconnectReason::PROTOCOL_ERROR => Some(&s.disconnects_protocol_error),
            DisconnectReason::IDLE_TIMEOUT => Some(&s.disconnects_idle),
            DisconnectReason::SHUTDOWN => Some(&s.disconnects_shutdown),
            DisconnectReason::LOGOUT => Some(&s.disconnects_logout),
            _ => None,
        };
        if let Some(c) = counter {
            GatewayStats::add(c, 1);
        }
        self.send(i, |b| {
            wire::encode_disconnect_reason(b, reason, retry_after_ms, text)
        });
        self.begin_close(i, Some(reason), now);
    }

    fn begin_close(&mut self, i: usize, reason: Option<DisconnectReason>, now: u64) {
        let linger = self.shared.cfg.close_linger_ms * 1_000_000;
        self.drop_session(i);
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        conn.state = SessionState::Closing {
            deadline_ns: now + linger,
        };
        conn.closing_reason = reason;
        conn.in_len = 0;
        self.queue_write(i);
    }

    /// Removes subscriptions and releases the session's account slot.
    fn drop_session(&mut self, i: usize) {
        while let Some(last) = self.conns[i]
            .as_ref()
            .and_then(|c| c.subs.len().checked_sub(1))
        {
            self.remove_sub(i, last);
        }
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        if let Some(account) = conn.account() {
            conn.state = SessionState::AwaitingLogon;
            self.release_account(account);
        }
    }

    /// A logged-on session ended: one fewer logged on, and its account's
    /// session slot given back.
    fn release_account(&self, account: u32) {
        GatewayStats::sub(&self.shared.stats.logged_on, 1);
        self.shared
            .admission
            .lock()
            .expect("admission lock")
            .on_session_close(account);
    }

    /// Closes the socket now and frees the slot.
    fn close_now(&mut self, i: usize) {
        self.drop_session(i);
        let Some(conn) = self.release_slot(i) else {
            return;
        };
        self.release_ip(conn.peer);
        GatewayStats::sub(&self.shared.stats.open, 1);
    }

    fn disconnect_all(&mut self) {
        // Sessions in this shard's lane are told too (on adoption), and
        // shard 0 sends no more.
        self.disconnecting = true;
        self.close_moves();
        self.adopt();
        let now = monotonic_ns();
        for i in 0..self.conns.len() {
            let open = self.conns[i]
                .as_ref()
                .is_some_and(|c| !matches!(c.state, SessionState::Closing { .. }));
            if open {
                let retry = self.jitter(self.shared.cfg.shutdown_retry);
                self.disconnect(
                    i,
                    DisconnectReason::SHUTDOWN,
                    retry,
                    "server shutting down",
                    now,
                );
            }
        }
        self.flush_writes(now);
    }

    fn close_all(&mut self) {
        self.close_moves();
        self.adopt();
        for i in 0..self.conns.len() {
            if self.conns[i].is_some() {
                self.write_conn(i, monotonic_ns());
                self.close_now(i);
            }
        }
    }

    // ---- moving sessions between shards (see `spill.rs`) --------------

    /// Closes a measurement window: publishes this shard's busy share and,
    /// on the shard that hosts the engine, decides whether to move a
    /// session away.
    fn measure(&mut self, now: u64) {
        let Some(permille) = self.busy.roll(now) else {
            return;
        };
        self.stats.busy_permille.set(u64::from(permille));
        if self.hosts_engine() && self.spill.enabled() {
            let sessions = self.stats.connections.get();
            let spill = self.spill;
            self.spill_to = spill.target(permille, sessions, self.peer_loads());
        }
    }

    /// One slot of this shard's room (see [`Peer::room`]).
    fn take_room(&self) -> bool {
        self.peers
            .get(self.input.index)
            .is_none_or(|p| p.take_room())
    }

    fn give_room(&self) {
        if let Some(p) = self.peers.get(self.input.index) {
            p.give_room();
        }
    }

    /// Only the shard that runs the engine moves sessions away: the engine
    /// publishing on this same thread is what keeps a move gap-free.
    fn hosts_engine(&self) -> bool {
        !self.input.hosted.is_empty()
    }

    /// The other shards as the policy sees them, in `self.loads` (sized
    /// at start: a measurement allocates nothing).
    fn peer_loads(&mut self) -> &[ShardLoad] {
        self.loads.clear();
        for (k, p) in self.peers.iter().enumerate() {
            if k == self.input.index {
                continue;
            }
            let sessions = p.stats.connections.get() + p.adopt.len() as u64;
            self.loads.push(ShardLoad {
                index: k,
                sessions,
                has_room: !p.adopt.is_full() && p.room.load(Ordering::SeqCst) > 0,
            });
        }
        &self.loads
    }

    /// Moves one session if one is due (measured or asked for).
    fn spill_step(&mut self, now: u64) {
        let closing = self.stopping.is_some() || self.disconnecting;
        if !self.hosts_engine() || self.peers.len() < 2 || closing {
            self.spill_forced = 0;
            self.spill_to = None;
            return;
        }
        // Prices the engine holds for this shard's full ring reach the
        // ring only on a later turn, and a moved session would miss them:
        // move once they are through. (Held for another shard's ring, they
        // arrive there late and in order.)
        if self.input.fanout.parked.get() > 0 {
            return;
        }
        // Asked for: the other shard with the fewest sessions and room.
        let to = self
            .spill_to
            .or_else(|| spill::fewest(self.peer_loads()).map(|s| s.index));
        let moved = to.is_some_and(|to| self.spill_one(to, now));
        self.spill_to = None;
        self.spill_forced = if moved {
            self.spill_forced.saturating_sub(1)
        } else {
            0
        };
    }

    /// The session to move: logged on, no request answer on its way here
    /// (or none for [`ANSWER_WAIT_NS`]), the most subscriptions (the most
    /// fan-out work), the highest slot on a tie.
    fn pick_mover(&self, now: u64) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for (i, c) in self.conns[..self.live_end].iter().enumerate() {
            let Some(c) = c else { continue };
            let awaited =
                c.requests_out > 0 && now.saturating_sub(c.last_request_ns) < ANSWER_WAIT_NS;
            if !c.is_active() || awaited {
                continue;
            }
            if best.is_none_or(|(_, n)| c.subs.len() >= n) {
                best = Some((i, c.subs.len()));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Hands one session to shard `to`. The engine publishes on this
    /// thread, so nothing is published while this runs, and every update
    /// stays in sequence:
    ///
    /// 1. this shard drains its own ring (with nothing held for it by the
    ///    engine, see `spill_step`): the session has everything published
    ///    so far; copies of it in `to`'s ring are dropped there by
    ///    sequence number (`deliver`);
    /// 2. `to`'s interest holds the session's symbols, so every later
    ///    price for them goes into `to`'s ring;
    /// 3. the session leaves this shard's index, poller and slab and goes
    ///    into `to`'s lane, with a slot reserved there; `to` attaches it
    ///    before it delivers any price it finds after that (see
    ///    `drain_prices`) and then lets go of the holds.
    ///
    /// Returns false if no session could move.
    fn spill_one(&mut self, to: usize, now: u64) -> bool {
        while !self.input.consumer.is_empty() {
            self.drain_prices(now);
        }
        let Some(i) = self.pick_mover(now) else {
            return false;
        };
        let peers = self.peers.clone();
        let peer = &peers[to];
        let tiers = self.tiers;
        let Some(conn) = self.conns[i].as_ref() else {
            return false;
        };
        if peer.adopt.is_full() || !peer.take_room() {
            return false;
        }
        for sub in &conn.subs {
            peer.interest.hold((sub.key as usize / tiers) as u16);
        }
        for slot in 0..conn.subs.len() {
            self.unindex(i, slot);
        }
        self.write_list.retain(|&k| k as usize != i);
        self.read_list.retain(|&k| k as usize != i);
        let Some(mut conn) = self.release_slot(i) else {
            unreachable!("slot {i} was checked above");
        };
        conn.in_write_list = false;
        conn.in_read_list = false;
        // Answers still counted here are long lost (see `pick_mover`).
        conn.requests_out = 0;
        match peer.adopt.try_send(conn) {
            Ok(()) => {
                peer.doorbell.ring();
                self.stats.sessions_moved_out.inc();
                tracing::debug!(shard = self.input.index, to, "session moved");
                true
            }
            Err(e) => {
                // The lane filled or the shard stopped: keep the session
                // (its slot here was freed on this thread just now).
                peer.give_room();
                let conn = e.into_inner();
                release_symbols(&peer.interest, &conn, tiers);
                let kept = if self.take_room() {
                    self.attach(conn)
                } else {
                    Err(conn)
                };
                if let Err(conn) = kept {
                    self.refuse_adoption(conn);
                }
                false
            }
        }
    }

    /// Takes connection `i` out of the poller and the slab, still open.
    fn release_slot(&mut self, i: usize) -> Option<Conn> {
        let mut conn = self.conns[i].take()?;
        let _ = self.poll.registry().deregister(&mut conn.stream);
        self.free.push(i as u32);
        self.give_room();
        while self.live_end > 0 && self.conns[self.live_end - 1].is_none() {
            self.live_end -= 1;
        }
        self.stats
            .connections
            .set((self.conns.len() - self.free.len()) as u64);
        Some(conn)
    }

    /// Puts a session that comes from another shard into this one: slab,
    /// poller (a socket with input or room waiting reports it at once),
    /// index and interest. The caller took this shard's room for it; on
    /// failure the room is given back with the session.
    // A rare control step: the session goes back to the caller by value
    // rather than through a heap box.
    #[allow(clippy::result_large_err)]
    fn attach(&mut self, mut conn: Conn) -> Result<usize, Conn> {
        let Some(i) = self.free.pop() else {
            self.give_room();
            return Err(conn);
        };
        let i = i as usize;
        let token = Token(i + 1);
        let registered = self.poll.registry().register(
            &mut conn.stream,
            token,
            Interest::READABLE | Interest::WRITABLE,
        );
        if registered.is_err() {
            self.free.push(i as u32);
            self.give_room();
            return Err(conn);
        }
        for (k, sub) in conn.subs.iter_mut().enumerate() {
            let key = sub.key as usize;
            sub.pos = self.index.add(
                key,
                Subscriber {
                    conn: i as u32,
                    slot: k as u32,
                },
            );
            let symbol = key / self.tiers;
            self.sym_subs[symbol] += 1;
            if self.sym_subs[symbol] == 1 {
                self.input.interest.hold(symbol as u16);
            }
        }
        let owes = !conn.out.is_empty() || conn.dirty_subs > 0;
        self.conns[i] = Some(conn);
        self.live_end = self.live_end.max(i + 1);
        self.stats
            .connections
            .set((self.conns.len() - self.free.len()) as u64);
        if owes {
            self.queue_write(i);
        }
        Ok(i)
    }

    /// Takes every session another shard handed over.
    fn adopt(&mut self) {
        while let Ok(conn) = self.adopt_rx.try_recv() {
            // Shard 0 took this shard's room for it before sending.
            match self.attach(conn) {
                Ok(i) => {
                    // This shard's own holds are in place: the mover's go.
                    if let Some(c) = self.conns[i].as_ref() {
                        release_symbols(&self.input.interest, c, self.tiers);
                    }
                    self.stats.sessions_moved_in.inc();
                    if self.disconnecting || self.stopping.is_some() {
                        // It left a shard that was about to tell it so.
                        let now = monotonic_ns();
                        let retry = self.jitter(self.shared.cfg.shutdown_retry);
                        let text = "server shutting down";
                        self.disconnect(i, DisconnectReason::SHUTDOWN, retry, text, now);
                    }
                }
                Err(conn) => {
                    release_symbols(&self.input.interest, &conn, self.tiers);
                    self.refuse_adoption(conn);
                }
            }
        }
    }

    /// Shard 0 sends no more sessions (it is stopping or disconnecting
    /// everyone): the others may exit once their lanes are empty.
    fn close_moves(&mut self) {
        self.spill_forced = 0;
        self.spill_to = None;
        // Only shard 0 sends (while it runs the engine; it may have
        // finished by now).
        if self.input.index == 0 && self.moves_open.swap(false, Ordering::SeqCst) {
            // A stopping shard with nothing left notices at once.
            for p in self.peers.iter().skip(1) {
                p.doorbell.ring();
            }
        }
    }

    /// A session that could not be attached (the poller refused its
    /// socket, or no slot was left): closed, its account slot and IP
    /// count given back, with Disconnect(busy) and a jittered retry-after
    /// if its outbound buffer is empty (otherwise the Disconnect could land
    /// in the middle of a queued frame).
    fn refuse_adoption(&mut self, conn: Conn) {
        tracing::warn!(peer = %conn.peer, "a moved session could not be attached; closing it");
        if let Some(account) = conn.account() {
            self.release_account(account);
        }
        self.release_ip(conn.peer);
        GatewayStats::sub(&self.shared.stats.open, 1);
        if conn.out.is_empty() {
            let retry = self.jitter(self.shared.cfg.admission.retry_after);
            super::acceptor::refuse_busy(conn.stream, retry, &self.shared.stats);
        }
    }

    // ---- timers -------------------------------------------------------

    fn sweep(&mut self, now: u64) {
        let (mut conflating, mut queued) = (0u64, 0u64);
        for i in 0..self.live_end {
            let Some(conn) = self.conns[i].as_ref() else {
                continue;
            };
            conflating += u64::from(conn.out.is_conflating());
            queued += conn.out.len() as u64;
            if let Some(action) = self.timer_action(conn, now) {
                self.apply_timer(i, action, now);
            }
        }
        self.stats.conflating_now.set(conflating);
        self.stats.outbound_bytes.set(queued);
    }

    fn timer_action(&self, conn: &Conn, now: u64) -> Option<TimerAction> {
        let cfg = &self.shared.cfg;
        let ms = 1_000_000u64;
        if let SessionState::Closing { deadline_ns } = conn.state {
            return (now >= deadline_ns).then_some(TimerAction::Close);
        }
        if conn
            .partial_since_ns
            .is_some_and(|t| now.saturating_sub(t) > cfg.frame_timeout_ms * ms)
        {
            return Some(TimerAction::IncompleteFrame);
        }
        if conn.state == SessionState::AwaitingLogon {
            let late = now.saturating_sub(conn.connected_ns) > cfg.logon_timeout_ms * ms;
            return late.then_some(TimerAction::LogonTimeout);
        }
        if conn
            .out
            .above_high_for_ns(now)
            .is_some_and(|d| d > cfg.slow_consumer_ms * ms)
        {
            return Some(TimerAction::SlowConsumer);
        }
        let dead = conn.heartbeat_ns * u64::from(cfg.dead_after_heartbeats);
        if now.saturating_sub(conn.last_rx_ns) > dead {
            return Some(TimerAction::Idle);
        }
        (now.saturating_sub(conn.last_tx_ns) >= conn.heartbeat_ns).then_some(TimerAction::Heartbeat)
    }

    fn apply_timer(&mut self, i: usize, action: TimerAction, now: u64) {
        let retry = self.jitter(self.shared.cfg.error_retry);
        match action {
            TimerAction::Close => self.close_now(i),
            TimerAction::IncompleteFrame => {
                self.protocol_error(i, RejectReason::MALFORMED, 0, "incomplete frame timed out")
            }
            TimerAction::LogonTimeout => {
                self.disconnect(i, DisconnectReason::IDLE_TIMEOUT, retry, "no logon", now)
            }
            TimerAction::SlowConsumer => self.disconnect(
                i,
                DisconnectReason::SLOW_CONSUMER,
                retry,
                "slow consumer",
                now,
            ),
            TimerAction::Idle => {
                self.disconnect(i, DisconnectReason::IDLE_TIMEOUT, 0, "peer silent", now)
            }
            TimerAction::Heartbeat => self.send(i, wire::encode_heartbeat),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum TimerAction {
    Close,
    IncompleteFrame,
    LogonTimeout,
    SlowConsumer,
    Idle,
    Heartbeat,
}

/// Lets go of one hold per subscription of `conn` (a moved session's).
fn release_symbols(interest: &SymbolInterest, conn: &Conn, tiers: usize) {
    for sub in &conn.subs {
        interest.release((sub.key as usize / tiers) as u16);
    }
}

/// Copies one encoded price to one connection, or marks it owed if the
/// connection is conflating. Returns true if bytes were appended.
#[inline]
fn deliver(
    conn: &mut Conn,
    slot: u32,
    seq: u64,
    bytes: &[u8],
    now: u64,
    stats: &ShardStats,
) -> bool {
    let Some(sub) = conn.subs.get_mut(slot as usize) else {
        return false;
    };
    if seq <= sub.last_seq {
        stats.superseded.inc();
        return false;
    }
    if conn.out.is_conflating() {
        if !sub.dirty {
            sub.dirty = true;
            conn.dirty_subs += 1;
        }
        stats.conflated.inc();
        return false;
    }
    // The first price a subscription gets is a snapshot (a resync point),
    // even when the table had no price yet at subscribe time: same body,
    // only the template id in the SBE header differs.
    let first = sub.last_seq == 0;
    let appended = conn.out.append_with(bytes.len(), |b| {
        b[..bytes.len()].copy_from_slice(bytes);
        if first {
            b[TEMPLATE_ID_OFFSET..TEMPLATE_ID_OFFSET + 2]
                .copy_from_slice(&wire::template::PRICE_SNAPSHOT.to_le_bytes());
        }
        bytes.len()
    });
    if appended == Append::Overflow {
        if !sub.dirty {
            sub.dirty = true;
            conn.dirty_subs += 1;
        }
        return false;
    }
    sub.last_seq = seq;
    conn.last_tx_ns = now;
    stats.prices_out.inc();
    conn.out.update_flow(now);
    true
}

/// After draining below low: the latest price of every owed key, as a
/// snapshot flagged conflated.
fn resync(
    conn: &mut Conn,
    shared: &Shared,
    tiers: usize,
    digits: &[u8],
    stats: &ShardStats,
    now: u64,
) {
    let n = send_owed(conn, shared, tiers, digits, price_flags::CONFLATED, now);
    stats.resync_snapshots.add(n);
}

/// Initial snapshots after a subscribe (not flagged conflated).
fn resync_fresh(conn: &mut Conn, shared: &Shared, tiers: usize, digits: &[u8], now: u64) {
    send_owed(conn, shared, tiers, digits, 0, now);
}

fn send_owed(
    conn: &mut Conn,
    shared: &Shared,
    tiers: usize,
    digits: &[u8],
    flag: u8,
    now: u64,
) -> u64 {
    let mut sent = 0;
    for sub in conn.subs.iter_mut().filter(|s| s.dirty) {
        let (symbol, tier) = (
            (sub.key as usize / tiers) as u16,
            (sub.key as usize % tiers) as u8,
        );
        if let Some(mut p) = shared.table.read(symbol, tier) {
            if p.seq > sub.last_seq {
                p.flags |= flag;
                let body =
                    PriceBody::from_price(&p, digits[symbol as usize], shared.wall_offset_ns);
                let r = conn.out.append_with(PRICE_FRAME_LEN, |b| {
                    wire::try_encode_price(b, PriceKind::Snapshot, &body).unwrap_or(0)
                });
                if r == Append::Overflow {
                    break;
                }
                sub.last_seq = p.seq;
                sent += 1;
            }
        }
        sub.dirty = false;
        conn.dirty_subs -= 1;
    }
    if sent > 0 {
        conn.last_tx_ns = now;
    }
    conn.out.update_flow(now);
    sent
}

/// Dense index of an account for per-account session limits: its position
/// in the config file, or (for accounts only Redis knows) a hashed slot
/// above those. Hash collisions share one session cap; the table size is
/// the admission's `accounts_max`.
fn account_index(shared: &Shared, name: &str) -> u32 {
    if let Some(p) = shared.config.accounts.iter().position(|a| a.name == name) {
        return p as u32;
    }
    let fixed = shared.config.accounts.len() as u64;
    let slots = (shared.cfg.admission.accounts_max as u64)
        .saturating_sub(fixed)
        .max(1);
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (fixed + h % slots) as u32
}

/// Compares secrets in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
