//! The request path: SnapshotRequest, SymbolListRequest and HistoryRequest
//! from gateway shards, through the bounded [`RequestQueue`] (deadlines,
//! CoDel overload detection, LIFO under overload, per-account fairness),
//! served by worker threads under an adaptive concurrency limit
//! ([`AdaptiveLimit`]), answered back to the owning shard over a ring.
//!
//! Threads and rings, all allocated at start:
//! - each shard → dispatcher: an SPSC ring of fixed-size [`RequestMsg`];
//! - the dispatcher owns the queue and the limit; it hands jobs to workers
//!   over a bounded crossbeam channel (requests are the cold path, so an
//!   MPMC hand-off is acceptable here; prices never take this route);
//! - each worker (and the dispatcher, for rejects) → each shard: an SPSC
//!   ring of fixed-size [`Answer`] frames; the shard is woken through its
//!   doorbell.
//!
//! Workers build answers with per-job scratch from a `bumpalo` arena that
//! is reset after every job.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bumpalo::Bump;
use crossbeam_channel::{Receiver, Sender};
use rand::SeedableRng;

use super::answers::{shed_reject, template_of, AnswerRx, PendingReject, ShardCredit};
use super::hops::{Hop, HopRecorder, HopStats};
#[cfg(test)]
use super::ShedReason;
use super::{AdaptiveConfig, AdaptiveLimit, Arrival, QueueConfig, RequestQueue, Shed};
use crate::clock::monotonic_ns;
use crate::config::Config;
use crate::engine::{PriceTable, TickHistory};
use crate::pipeline::counter::Counter;
use crate::pipeline::{Doorbell, WaitStrategy, Waiter};
use crate::requests::stats::OverloadStats;
use crate::wire::{self, HistoryTick, Name16, PriceBody, RejectReason, SymbolInfo, TierInfo};
use std::collections::VecDeque;

/// Most symbols one SnapshotRequest may name.
pub const SNAPSHOT_SYMBOLS_MAX: usize = 32;
/// Largest answer frame carried back to a shard, in bytes.
pub const ANSWER_BYTES_MAX: usize = 8 * 1024;
/// Slots of each shard → dispatcher ring.
pub const REQUEST_RING: usize = 1024;
/// Slots of each answer ring: at least the adaptive limit's maximum, so a
/// worker's answer always finds room while its shard keeps draining.
pub const ANSWER_RING: usize = 256;
/// Budget applied when a client sends 0 ("server default"), µs.
pub const BUDGET_DEFAULT_US: u32 = 1_000_000;

/// What is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Snapshot,
    SymbolList,
    History,
}

/// One request, copied by value through the rings and the queue.
#[derive(Debug, Clone, Copy)]
pub struct RequestMsg {
    pub shard: u16,
    pub conn: u32,
    pub session: u64,
    pub account: u32,
    pub request_id: u64,
    pub kind: RequestKind,
    pub tier: u8,
    pub symbols: [u16; SNAPSHOT_SYMBOLS_MAX],
    pub nsym: u8,
    /// History: the symbol is `symbols[0]`, the tick count this.
    pub count: u16,
    pub budget_us: u32,
    pub critical: bool,
    pub critical_entitled: bool,
    pub arrival_ns: u64,
    /// The session's account name (entitlements are looked up by name, so
    /// accounts only Redis knows are served too).
    pub account_name: [u8; ACCOUNT_NAME_MAX],
    pub account_name_len: u8,
}

/// Longest account name a request carries.
pub const ACCOUNT_NAME_MAX: usize = 64;

impl RequestMsg {
    pub fn account_name(&self) -> &str {
        std::str::from_utf8(&self.account_name[..self.account_name_len as usize]).unwrap_or("")
    }
}

/// One encoded answer (or reject) for a connection of a shard.
#[derive(Clone, Copy)]
pub struct Answer {
    pub conn: u32,
    pub session: u64,
    pub len: u32,
    /// When it was pushed to its ring (monotonic ns), for the
    /// `answer_ring` hop.
    pub sent_ns: u64,
    pub bytes: [u8; ANSWER_BYTES_MAX],
}

pub use super::port::RequestPort;
use super::port::RingShares;

/// Counters of the request path not kept by the queue itself.
#[derive(Debug, Default)]
pub struct RequestStats {
    pub snapshot_served: Counter,
    pub symbol_list_served: Counter,
    pub history_served: Counter,
    /// Expired between dequeue and service (also dropped before work).
    pub expired_at_worker: Counter,
    /// Answers that did not fit an answer ring. Every answer's slot is
    /// reserved before the work is dispatched, so this stays 0; anything
    /// else is a bug in that reservation.
    pub answers_dropped: Counter,
    /// Rejects that waited in the dispatcher's pending list because the
    /// shard's ring was full (delivered later, not lost).
    pub rejects_deferred: Counter,
    /// Requests the shard refused because the ring to the dispatcher was
    /// full (Reject(overloaded) with the queue's retry-after window).
    pub refused_path_full: Counter,
    /// Messages the per-connection message limit refused
    /// (Reject(rate_limited)).
    pub refused_conn_rate: Counter,
    /// Latency per hop of the request path.
    pub hops: HopStats,
    /// The queue's configured capacity (a constant, for the gauge).
    pub queue_capacity: Counter,
    /// Answers whose frame did not fit [`ANSWER_BYTES_MAX`].
    pub answers_too_large: Counter,
}

/// Settings of the request path.
#[derive(Debug, Clone)]
pub struct RequestConfig {
    pub workers: usize,
    pub queue: QueueConfig,
    pub adaptive: AdaptiveConfig,
    pub wait: WaitStrategy,
}

impl Default for RequestConfig {
    fn default() -> Self {
        RequestConfig {
            workers: 1,
            queue: QueueConfig::default(),
            adaptive: AdaptiveConfig::default(),
            wait: WaitStrategy::SpinPark,
        }
    }
}

/// What workers read to answer.
#[derive(Clone)]
pub struct Sources {
    pub config: Arc<Config>,
    pub table: Arc<PriceTable>,
    pub history: Arc<TickHistory>,
    pub wall_offset_ns: i64,
    /// Accounts and entitlements (the config file's, or Redis).
    pub refdata: Arc<crate::refdata::RefData>,
}

/// The running request path.
pub struct RequestService {
    stop: Arc<AtomicBool>,
    dispatcher_bell: Arc<Doorbell>,
    threads: Vec<JoinHandle<()>>,
    pub stats: Arc<RequestStats>,
    pub limit: Arc<AdaptiveLimit>,
}

struct Job {
    msg: RequestMsg,
    deadline_ns: u64,
}

type AnswerTx = Vec<rtrb::Producer<Answer>>;

impl RequestService {
    /// Starts the dispatcher and workers for `shard_bells.len()` shards;
    /// returns one [`RequestPort`] per shard.
    pub fn start(
        cfg: RequestConfig,
        sources: Sources,
        shard_bells: Vec<Arc<Doorbell>>,
        overload: Arc<OverloadStats>,
    ) -> Result<(RequestService, Vec<RequestPort>), String> {
        if cfg.workers == 0 || cfg.workers > 64 {
            return Err("--request-workers: 1..=64".into());
        }
        let queue = RequestQueue::new(
            cfg.queue.clone(),
            rand::rngs::SmallRng::from_entropy(),
            overload.clone(),
            monotonic_ns(),
        )
        .map_err(|e| e.to_string())?;
        let limit = Arc::new(
            AdaptiveLimit::new(cfg.adaptive.clone(), overload).map_err(|e| e.to_string())?,
        );
        let shards = shard_bells.len();
        let bell = Doorbell::new();
        let mut ports: Vec<RequestPort> = Vec::with_capacity(shards);
        let mut inbound = Vec::with_capacity(shards);
        let stats = Arc::new(RequestStats::default());
        stats.queue_capacity.add(cfg.queue.capacity as u64);
        for _ in 0..shards {
            let (tx, rx) = rtrb::RingBuffer::new(REQUEST_RING);
            let shares = RingShares::new();
            inbound.push((rx, shares.clone()));
            let window = cfg.queue.retry_after;
            let port = RequestPort::new(tx, bell.clone(), shares, window, stats.clone());
            ports.push(port);
        }
        let credits: Vec<Arc<ShardCredit>> = (0..shards)
            .map(|_| ShardCredit::new(bell.clone()))
            .collect();
        // One answer ring per (producer thread, shard): dispatcher first.
        // Worker rings carry the shard's credit: popping gives a slot back.
        let mut answer_tx: Vec<AnswerTx> = Vec::new();
        for producer in 0..=cfg.workers {
            let mut row = Vec::with_capacity(shards);
            for (s, port) in ports.iter_mut().enumerate() {
                let (tx, rx) = rtrb::RingBuffer::new(ANSWER_RING);
                row.push(tx);
                let credit = (producer > 0).then(|| credits[s].clone());
                let hop = stats.hops.recorder(Hop::AnswerRing);
                port.answers.push(AnswerRx::new(rx, credit, hop));
            }
            answer_tx.push(row);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (jobs_tx, jobs_rx) = crossbeam_channel::bounded(cfg.adaptive.limit_max as usize + 1);
        let mut threads = Vec::new();
        let mut rows = answer_tx.into_iter();
        let dispatcher_row = rows.next().expect("dispatcher answer rings");
        for (w, row) in rows.enumerate() {
            let worker = Worker {
                sources: sources.clone(),
                dispatcher: bell.clone(),
                answers: row,
                bells: shard_bells.clone(),
                limit: limit.clone(),
                stats: stats.clone(),
                arena: Bump::with_capacity(64 * 1024),
                answer: empty_answer(),
                service: stats.hops.recorder(Hop::Service),
            };
            let rx = jobs_rx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("pw-request{w}"))
                    .spawn(move || worker.run(rx))
                    .map_err(|e| e.to_string())?,
            );
        }
        let dispatcher = Dispatcher {
            queue,
            limit: limit.clone(),
            inbound,
            answers: dispatcher_row,
            bells: shard_bells,
            jobs: jobs_tx,
            handoff_max: 2 * cfg.workers,
            sheds: Vec::with_capacity(cfg.queue.shed_per_pop_max as usize + 8),
            credits,
            pending: VecDeque::with_capacity(2 * cfg.queue.capacity),
            pending_of: vec![0; shards],
            scratch: empty_answer(),
            queue_wait: stats.hops.recorder(Hop::QueueWait),
            rng: rand::rngs::SmallRng::from_entropy(),
            stop: stop.clone(),
            stats: stats.clone(),
        };
        let (b2, wait) = (bell.clone(), cfg.wait);
        threads.push(
            std::thread::Builder::new()
                .name("pw-dispatch".into())
                .spawn(move || {
                    b2.bind_current_thread();
                    let mut d = dispatcher;
                    d.run(Waiter::new(wait, b2));
                })
                .map_err(|e| e.to_string())?,
        );
        Ok((
            RequestService {
                stop,
                dispatcher_bell: bell,
                threads,
                stats,
                limit,
            },
            ports,
        ))
    }

    /// Stops the dispatcher (which closes the job channel) and the workers.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.dispatcher_bell.ring();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

struct Dispatcher {
    queue: RequestQueue<RequestMsg>,
    limit: Arc<AdaptiveLimit>,
    /// Per shard: its request ring and the per-account share counters.
    inbound: Vec<(rtrb::Consumer<RequestMsg>, Arc<RingShares>)>,
    answers: Vec<rtrb::Producer<Answer>>,
    bells: Vec<Arc<Doorbell>>,
    jobs: Sender<Job>,
    /// At most this many jobs wait in the hand-off (two per worker: one
    /// to take next while the dispatcher wakes), so the queue (rotation,
    /// LIFO) decides the order, not a FIFO channel.
    handoff_max: usize,
    sheds: Vec<Shed<RequestMsg>>,
    /// Per shard: worker answers owed (a job is dispatched only with room).
    credits: Vec<Arc<ShardCredit>>,
    /// Rejects waiting for room on the dispatcher's ring to their shard;
    /// preallocated to twice the queue's capacity (see `room_to_admit`).
    pending: VecDeque<PendingReject>,
    /// Pending rejects per shard.
    pending_of: Vec<u32>,
    scratch: Box<Answer>,
    queue_wait: HopRecorder,
    /// Retry-after draws of the dispatcher's own rejects (entropy-seeded).
    rng: rand::rngs::SmallRng,
    stop: Arc<AtomicBool>,
    stats: Arc<RequestStats>,
}

fn empty_answer() -> Box<Answer> {
    Box::new(Answer {
        conn: 0,
        session: 0,
        len: 0,
        sent_ns: 0,
        bytes: [0; ANSWER_BYTES_MAX],
    })
}

impl Dispatcher {
    fn run(&mut self, mut waiter: Waiter) {
        while !self.stop.load(Ordering::Relaxed) {
            let flushed = self.flush_pending();
            let admitted = self.admit_all();
            // Read after admission: the requests just admitted were stamped
            // by their shards, and a sojourn measured against an older
            // `now` would read short (or 0).
            let now = monotonic_ns();
            let dispatched = self.dispatch(now);
            self.queue.poll(now);
            if flushed + admitted + dispatched > 0 {
                waiter.reset();
                continue;
            }
            // Idle, or waiting for a worker slot or answer room: workers
            // ring the doorbell when they release a slot, shards when they
            // push a request or give back a full shard's answer credit.
            let inbound = &self.inbound;
            let limit = &self.limit;
            let credits = &self.credits;
            let (jobs, handoff_max) = (&self.jobs, self.handoff_max);
            let queued = !self.queue.is_empty();
            // Queued requests have deadlines and CoDel intervals to keep,
            // pending rejects wait for ring room (no doorbell for that); an
            // empty queue has no timer, and every input rings.
            waiter.set_retrying(queued || !self.pending.is_empty());
            waiter.idle(|| {
                inbound.iter().any(|(r, _)| !r.is_empty())
                    || (queued
                        && jobs.len() < handoff_max
                        && limit.inflight() < limit.limit()
                        && credits.iter().all(|c| c.has_room()))
            });
        }
    }

    /// Whether one more request may be admitted: only while fewer rejects
    /// than the queue's capacity wait. An admission adds at most one
    /// request to queue + pending, and pops only move requests from the
    /// queue to the pending list or a worker, so queue + pending never
    /// exceeds twice the capacity: the pending list (preallocated to that)
    /// always has room for a reject, and a full queue still evicts.
    fn room_to_admit(&self) -> bool {
        self.pending.len() < self.queue.capacity()
    }

    fn admit_all(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.inbound.len() {
            // Requests left in the inbound ring back up to the shard, which
            // refuses new ones itself (Reject(overloaded)) when it is full.
            while self.room_to_admit() {
                let (ring, shares) = &mut self.inbound[i];
                let Ok(m) = ring.pop() else { break };
                shares.release(m.account);
                n += 1;
                let budget = if m.budget_us == 0 {
                    BUDGET_DEFAULT_US
                } else {
                    m.budget_us
                };
                let arrival = Arrival {
                    account: m.account,
                    budget_us: u64::from(budget),
                    critical: m.critical,
                    critical_entitled: m.critical_entitled,
                };
                match self.queue.push(m, arrival, m.arrival_ns.max(1)) {
                    Ok(None) => {}
                    Ok(Some(evicted)) => self.reject_shed(evicted),
                    Err(refused) => self.reject_shed(refused),
                }
            }
        }
        n
    }

    fn dispatch(&mut self, now: u64) -> usize {
        let mut n = 0;
        // A popped job may be for any shard: pop only while every shard has
        // an answer slot to give it.
        while !self.queue.is_empty()
            && self.jobs.len() < self.handoff_max
            && self.credits.iter().all(|c| c.has_room())
            && self.limit.try_acquire()
        {
            let sheds = &mut self.sheds;
            let popped = self.queue.pop(now, |s| sheds.push(s));
            // Drained in place: the vector keeps its capacity (no allocation).
            while let Some(s) = self.sheds.pop() {
                self.reject_shed(s);
            }
            let Some(d) = popped else {
                self.limit.release();
                break;
            };
            n += 1;
            self.queue_wait.record(d.sojourn_ns, now);
            let credit = self.credits.get(usize::from(d.request.shard)).cloned();
            if let Some(c) = &credit {
                c.take();
            }
            let job = Job {
                msg: d.request,
                deadline_ns: d.deadline_ns,
            };
            if let Err(e) = self.jobs.try_send(job) {
                // Cannot happen while the channel holds limit_max jobs.
                self.limit.release();
                if let Some(c) = &credit {
                    c.give();
                }
                let job = e.into_inner();
                let retry = self.queue.config().retry_after.draw(&mut self.rng);
                self.reject(&job.msg, RejectReason::OVERLOADED, retry, "workers busy");
            }
        }
        n
    }

    fn reject_shed(&mut self, s: Shed<RequestMsg>) {
        let (reason, text) = shed_reject(s.reason);
        self.reject(&s.request, reason, s.retry_after_ms, text);
    }

    fn reject(
        &mut self,
        m: &RequestMsg,
        reason: RejectReason,
        retry_after_ms: u32,
        text: &'static str,
    ) {
        let p = PendingReject::new(m, reason, retry_after_ms, text);
        // Behind rejects already waiting for this shard, or when its ring
        // is full: wait in the pending list (bounded, see `room_to_admit`).
        let s = usize::from(p.shard);
        let waiting = self.pending_of.get(s).is_some_and(|&n| n > 0);
        if waiting || !self.try_send_reject(&p) {
            debug_assert!(self.pending.len() < self.pending.capacity());
            self.stats.rejects_deferred.inc();
            if let Some(n) = self.pending_of.get_mut(s) {
                *n += 1;
            }
            self.pending.push_back(p);
        }
    }

    /// Puts `p` on the dispatcher's ring to its shard if there is room.
    fn try_send_reject(&mut self, p: &PendingReject) -> bool {
        let s = usize::from(p.shard);
        let Some(ring) = self.answers.get_mut(s) else {
            return true; // no such shard: nobody to answer
        };
        if ring.slots() == 0 {
            return false;
        }
        p.encode_into(&mut self.scratch);
        self.scratch.sent_ns = monotonic_ns();
        let pushed = ring.push(*self.scratch).is_ok();
        if let Some(b) = self.bells.get(s) {
            b.ring();
        }
        pushed
    }

    /// Sends waiting rejects that now fit, in order per shard: one turn of
    /// the list, each entry sent or put back at the end (order kept).
    fn flush_pending(&mut self) -> usize {
        let mut sent = 0;
        let mut blocked = [false; 64];
        for _ in 0..self.pending.len() {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            let s = usize::from(p.shard);
            let b = &mut blocked[s % 64];
            if !*b && self.try_send_reject(&p) {
                if let Some(n) = self.pending_of.get_mut(s) {
                    *n -= 1;
                }
                sent += 1;
            } else {
                blocked[s % 64] = true;
                self.pending.push_back(p);
            }
        }
        sent
    }
}

fn send(
    rings: &mut [rtrb::Producer<Answer>],
    bells: &[Arc<Doorbell>],
    shard: u16,
    a: Answer,
    stats: &RequestStats,
) {
    let s = shard as usize;
    let Some(ring) = rings.get_mut(s) else { return };
    if ring.push(a).is_err() {
        debug_assert!(false, "answer slot was reserved at dispatch");
        stats.answers_dropped.inc();
    }
    if let Some(b) = bells.get(s) {
        b.ring();
    }
}

struct Worker {
    sources: Sources,
    dispatcher: Arc<Doorbell>,
    answers: Vec<rtrb::Producer<Answer>>,
    bells: Vec<Arc<Doorbell>>,
    limit: Arc<AdaptiveLimit>,
    stats: Arc<RequestStats>,
    arena: Bump,
    answer: Box<Answer>,
    service: HopRecorder,
}

impl Worker {
    fn run(mut self, jobs: Receiver<Job>) {
        loop {
            match jobs.recv_timeout(Duration::from_millis(200)) {
                Ok(job) => self.serve(job),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn serve(&mut self, job: Job) {
        let start = monotonic_ns();
        let m = job.msg;
        self.answer.conn = m.conn;
        self.answer.session = m.session;
        let n = if start >= job.deadline_ns {
            // Dropped before the work: the reject costs less than the answer.
            self.stats.expired_at_worker.inc();
            reject_into(&mut self.answer.bytes, &m, RejectReason::DEADLINE_EXPIRED)
        } else {
            let n = self.build(&m);
            self.arena.reset();
            n
        };
        let n = match n {
            Some(n) => n,
            None => {
                self.stats.answers_too_large.inc();
                reject_into(&mut self.answer.bytes, &m, RejectReason::LIMIT_REACHED).unwrap_or(0)
            }
        };
        self.answer.len = n as u32;
        let built = monotonic_ns();
        self.service.record(built - start, built);
        self.answer.sent_ns = built;
        send(
            &mut self.answers,
            &self.bells,
            m.shard,
            *self.answer,
            &self.stats,
        );
        let end = monotonic_ns();
        let inflight = self.limit.inflight();
        self.limit.release();
        self.limit.on_sample(end - start, inflight, end);
        // A slot is free: the dispatcher may be waiting for one.
        self.dispatcher.ring();
    }

    fn build(&mut self, m: &RequestMsg) -> Option<usize> {
        let out = &mut self.answer.bytes;
        let s = &self.sources;
        match m.kind {
            RequestKind::Snapshot => {
                self.stats.snapshot_served.inc();
                let mut prices =
                    bumpalo::collections::Vec::with_capacity_in(m.nsym as usize, &self.arena);
                for &id in &m.symbols[..m.nsym as usize] {
                    if let Some(p) = s.table.read(id, m.tier) {
                        prices.push(PriceBody::from_price(
                            &p,
                            s.config.table.digits(id),
                            s.wall_offset_ns,
                        ));
                    }
                }
                wire::encode_snapshot_response(out, m.request_id, prices.iter()).ok()
            }
            RequestKind::History => {
                self.stats.history_served.inc();
                let sym = m.symbols[0];
                let mut ticks =
                    bumpalo::collections::Vec::with_capacity_in(m.count as usize, &self.arena);
                s.history.last(sym, m.count as usize, |t| {
                    ticks.push(HistoryTick {
                        provider: t.provider,
                        bid: t.bid,
                        ask: t.ask,
                        bid_size: t.bid_size,
                        ask_size: t.ask_size,
                        provider_time_ns: t.provider_time_ns,
                    })
                });
                let digits = s.config.table.digits(sym);
                wire::encode_history_response(out, m.request_id, sym, digits, ticks.iter()).ok()
            }
            RequestKind::SymbolList => {
                self.stats.symbol_list_served.inc();
                let crate::refdata::Lookup::Found(acct) =
                    s.refdata.lookup(m.account_name(), monotonic_ns())
                else {
                    return None;
                };
                let symbols = s
                    .config
                    .table
                    .instruments()
                    .iter()
                    .filter(|i| acct.entitled_symbol(i.id))
                    .map(|i| SymbolInfo {
                        symbol_id: i.id,
                        digits: i.digits,
                        name: Name16::new(&i.name).unwrap_or_default(),
                    });
                let tiers = s
                    .config
                    .table
                    .tiers()
                    .iter()
                    .filter(|t| acct.entitled_tier(t.id))
                    .map(|t| TierInfo {
                        tier_id: t.id,
                        name: Name16::new(&t.name).unwrap_or_default(),
                    });
                wire::encode_symbol_directory(out, m.request_id, symbols, tiers).ok()
            }
        }
    }
}

fn reject_into(out: &mut [u8], m: &RequestMsg, reason: RejectReason) -> Option<usize> {
    let r = wire::Reject {
        request_id: m.request_id,
        ref_template_id: template_of(m.kind),
        reason,
        retry_after_ms: 0,
        text: b"",
    };
    wire::encode_reject(out, &r).ok()
}

#[cfg(test)]
mod tests;
