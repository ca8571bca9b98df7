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

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
use crate::overload::stats::OverloadStats;
use crate::runtime::counter::Counter;
use crate::runtime::{Doorbell, Policy, Supervised, Supervisor, WaitStrategy, Waiter};
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
/// Jobs that may wait in the hand-off per worker: enough that a worker
/// never idles while the dispatcher wakes up to refill it (a wake-up on a
/// busy host costs tens of µs; a snapshot job a few), few enough that a
/// quiet tenant's job waits behind at most this many of a flood's.
pub const HANDOFF_PER_WORKER: usize = 16;
/// Budget applied when a client sends 0 ("server default"), µs.
pub const BUDGET_DEFAULT_US: u32 = 1_000_000;

/// What is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// The latest price of up to [`SNAPSHOT_SYMBOLS_MAX`] symbols at a tier.
    Snapshot,
    /// The instruments the account may see.
    SymbolList,
    /// The last `count` accepted ticks of one symbol.
    History,
}

/// One request, copied by value through the rings and the queue.
#[derive(Debug, Clone, Copy)]
pub struct RequestMsg {
    /// Index of the gateway shard the connection lives on; its answer ring.
    pub shard: u16,
    /// Connection slot in that shard.
    pub conn: u32,
    /// Session id of the connection when asked; an answer is dropped if the
    /// slot holds another session by then.
    pub session: u64,
    /// Dense account index (rate limits, fairness, concurrency per account).
    pub account: u32,
    /// The client's id, echoed in the answer.
    pub request_id: u64,
    /// What is asked.
    pub kind: RequestKind,
    /// Tier to price a snapshot at.
    pub tier: u8,
    /// Symbol ids asked for; only the first `nsym` are meaningful.
    pub symbols: [u16; SNAPSHOT_SYMBOLS_MAX],
    /// Number of valid entries in `symbols`, at most [`SNAPSHOT_SYMBOLS_MAX`].
    pub nsym: u8,
    /// History: the symbol is `symbols[0]`, the tick count this.
    pub count: u16,
    /// The client's deadline budget, µs from arrival; 0 means
    /// [`BUDGET_DEFAULT_US`].
    pub budget_us: u32,
    /// The client flagged the request critical.
    pub critical: bool,
    /// The account may use the critical lane; without it `critical` is ignored.
    pub critical_entitled: bool,
    /// When the shard received it (monotonic ns); the start of `queue_wait`.
    pub arrival_ns: u64,
    /// The session's account name (entitlements are looked up by name, so
    /// accounts only Redis knows are served too).
    pub account_name: [u8; ACCOUNT_NAME_MAX],
    /// Bytes of `account_name` in use, at most [`ACCOUNT_NAME_MAX`].
    pub account_name_len: u8,
}

/// Longest account name a request carries.
pub const ACCOUNT_NAME_MAX: usize = 64;

impl RequestMsg {
    /// The account name; empty if the bytes are not UTF-8.
    pub fn account_name(&self) -> &str {
        std::str::from_utf8(&self.account_name[..self.account_name_len as usize]).unwrap_or("")
    }
}

/// One encoded answer (or reject) for a connection of a shard.
#[derive(Clone, Copy)]
pub struct Answer {
    /// Connection slot on the shard that receives this answer.
    pub conn: u32,
    /// Session id the request came from; the shard drops the answer if the
    /// slot now holds another session.
    pub session: u64,
    /// The request's account (its in-flight count is given back when the
    /// shard pops a worker's answer; see `requests::inflight`).
    pub account: u32,
    /// Bytes of `bytes` in use: one encoded frame.
    pub len: u32,
    /// The request's id and template, for the Reject the shard sends
    /// instead of an answer that comes too late.
    pub request_id: u64,
    /// The request's template id (a Reject's `refTemplateId`).
    pub ref_template_id: u16,
    /// For an answer (not a Reject): the request's deadline on the
    /// monotonic clock (its arrival at the shard plus its budget). The
    /// shard never delivers it at or after this: it sends
    /// Reject(deadline_expired) instead. 0 for a Reject.
    pub deadline_ns: u64,
    /// For a Reject that asks the client to wait: its reason and
    /// retry-after (ms), which the shard notes in the session (see
    /// `gateway::session`'s backoff). `None` otherwise.
    pub refusal: Option<(RejectReason, u32)>,
    /// When it was pushed to its ring (monotonic ns), for the
    /// `answer_ring` hop.
    pub sent_ns: u64,
    /// The encoded frame, [`ANSWER_BYTES_MAX`] bytes of room; only `len` are valid.
    pub bytes: [u8; ANSWER_BYTES_MAX],
}

use super::inflight::AccountInflight;
pub use super::port::RequestPort;
use super::port::RingShares;

fn job_account(e: &crossbeam_channel::TrySendError<Job>) -> u32 {
    match e {
        crossbeam_channel::TrySendError::Full(j)
        | crossbeam_channel::TrySendError::Disconnected(j) => j.msg.account,
    }
}

/// Counters of the request path not kept by the queue itself.
#[derive(Debug, Default)]
pub struct RequestStats {
    /// Snapshot requests a worker took up to answer.
    pub snapshot_served: Counter,
    /// Symbol-list requests a worker took up to answer.
    pub symbol_list_served: Counter,
    /// History requests a worker took up to answer.
    pub history_served: Counter,
    /// Expired between dequeue and service (also dropped before work).
    pub expired_at_worker: Counter,
    /// Answers the shard took off their ring at or after their deadline:
    /// Reject(deadline_expired) went instead (an answer older than its
    /// budget is never delivered).
    pub expired_at_gateway: Counter,
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
    /// Worker threads building answers; the dispatcher is one more thread.
    pub workers: usize,
    /// The dispatcher's queue: capacity, CoDel, per-account limits.
    pub queue: QueueConfig,
    /// The adaptive concurrency limit on requests in service.
    pub adaptive: AdaptiveConfig,
    /// How idle workers and the dispatcher wait.
    pub wait: WaitStrategy,
    /// Drills and tests only: a gate each worker passes before a job
    /// (see `requests::gate`); `None` in the service.
    pub hold: Option<Arc<super::gate::WorkerGate>>,
}

impl Default for RequestConfig {
    fn default() -> Self {
        RequestConfig {
            workers: 1,
            queue: QueueConfig::default(),
            adaptive: AdaptiveConfig::default(),
            wait: WaitStrategy::SpinPark,
            hold: None,
        }
    }
}

/// What workers read to answer.
#[derive(Clone)]
pub struct Sources {
    /// Instruments, tiers and settings.
    pub config: Arc<Config>,
    /// The engine's price table, read for snapshots.
    pub table: Arc<PriceTable>,
    /// The engine's tick history, read for HistoryRequest.
    pub history: Arc<TickHistory>,
    /// UTC = monotonic + this, in ns, for times on the wire.
    pub wall_offset_ns: i64,
    /// Accounts and entitlements (the config file's, or Redis).
    pub refdata: Arc<crate::refdata::RefData>,
}

/// The running request path.
pub struct RequestService {
    stop: Arc<AtomicBool>,
    dispatcher_bell: Arc<Doorbell>,
    threads: Vec<Supervised<()>>,
    /// The request path's counters, read by the metrics endpoint.
    pub stats: Arc<RequestStats>,
    /// The adaptive concurrency limit the dispatcher applies.
    pub limit: Arc<AdaptiveLimit>,
    /// Jobs per account past the queue (see `requests::inflight`).
    pub inflight: Arc<AccountInflight>,
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
        supervisor: &Supervisor,
    ) -> Result<(RequestService, Vec<RequestPort>), StartError> {
        if cfg.workers == 0 || cfg.workers > 64 {
            return Err(StartError::Workers {
                workers: cfg.workers,
            });
        }
        let (queue, limit) = controls(&cfg, overload)?;
        let shards = shard_bells.len();
        let bell = Doorbell::new();
        let stats = Arc::new(RequestStats::default());
        stats.queue_capacity.add(cfg.queue.capacity as u64);
        let (mut ports, inbound) = request_rings(shards, &bell, &cfg, &stats);
        let credits: Vec<Arc<ShardCredit>> = (0..shards)
            .map(|_| ShardCredit::new(bell.clone()))
            .collect();
        let inflight = AccountInflight::new(cfg.queue.accounts_max, bell.clone());
        let answer_tx = answer_rings(cfg.workers, &mut ports, (&credits, &inflight), &stats);
        let inflight_handle = inflight.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let (jobs_tx, jobs_rx) = crossbeam_channel::bounded(cfg.adaptive.limit_max as usize + 1);
        let mut rows = answer_tx.into_iter();
        let dispatcher_row = rows.next().expect("dispatcher answer rings");
        let mut threads = Vec::new();
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
                hold: cfg.hold.clone(),
            };
            threads.push(spawn_worker(w, worker, jobs_rx.clone(), supervisor)?);
        }
        let dispatcher = Dispatcher {
            queue,
            limit: limit.clone(),
            inbound,
            answers: dispatcher_row,
            bells: shard_bells,
            jobs: jobs_tx,
            handoff_max: HANDOFF_PER_WORKER * cfg.workers,
            sheds: Vec::with_capacity(cfg.queue.shed_per_pop_max as usize + 8),
            credits,
            inflight,
            pending: VecDeque::with_capacity(2 * cfg.queue.capacity),
            pending_of: vec![0; shards],
            scratch: empty_answer(),
            queue_wait: stats.hops.recorder(Hop::QueueWait),
            rng: rand::rngs::SmallRng::from_entropy(),
            stop: stop.clone(),
            stats: stats.clone(),
        };
        threads.push(spawn_dispatcher(
            dispatcher,
            bell.clone(),
            cfg.wait,
            supervisor,
        )?);
        Ok((
            RequestService {
                stop,
                dispatcher_bell: bell,
                threads,
                stats,
                limit,
                inflight: inflight_handle,
            },
            ports,
        ))
    }

    /// Stops the dispatcher (which closes the job channel) and the workers.
    pub fn stop(mut self) {
        for t in &self.threads {
            t.request_stop();
        }
        self.stop.store(true, Ordering::SeqCst);
        self.dispatcher_bell.ring();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The queue (its jitter seeded from OS entropy) and the adaptive limit.
fn controls(
    cfg: &RequestConfig,
    overload: Arc<OverloadStats>,
) -> Result<(RequestQueue<RequestMsg>, Arc<AdaptiveLimit>), StartError> {
    let queue = RequestQueue::new(
        cfg.queue.clone(),
        rand::rngs::SmallRng::from_entropy(),
        overload.clone(),
        monotonic_ns(),
    )?;
    let limit = AdaptiveLimit::new(cfg.adaptive.clone(), overload)?;
    Ok((queue, Arc::new(limit)))
}

fn spawn_dispatcher(
    mut d: Dispatcher,
    bell: Arc<Doorbell>,
    wait: WaitStrategy,
    supervisor: &Supervisor,
) -> io::Result<Supervised<()>> {
    supervisor.spawn("pw-dispatch", Policy::Permanent, move || {
        bell.bind_current_thread();
        d.run(Waiter::new(wait, bell));
    })
}

fn spawn_worker(
    w: usize,
    worker: Worker,
    jobs: Receiver<Job>,
    supervisor: &Supervisor,
) -> io::Result<Supervised<()>> {
    supervisor.spawn(format!("pw-request{w}"), Policy::Permanent, move || {
        worker.run(w as u32, jobs)
    })
}

type Inbound = Vec<(rtrb::Consumer<RequestMsg>, Arc<RingShares>)>;

/// One request ring per shard, with its per-account share counters.
fn request_rings(
    shards: usize,
    bell: &Arc<Doorbell>,
    cfg: &RequestConfig,
    stats: &Arc<RequestStats>,
) -> (Vec<RequestPort>, Inbound) {
    let mut ports = Vec::with_capacity(shards);
    let mut inbound = Vec::with_capacity(shards);
    for _ in 0..shards {
        let (tx, rx) = rtrb::RingBuffer::new(REQUEST_RING);
        let shares = RingShares::new();
        inbound.push((rx, shares.clone()));
        let window = cfg.queue.retry_after;
        ports.push(RequestPort::new(
            tx,
            bell.clone(),
            shares,
            window,
            stats.clone(),
        ));
    }
    (ports, inbound)
}

/// One answer ring per (producer thread, shard), the dispatcher's first.
/// Worker rings carry their shard's credit and the accounts' in-flight
/// counts: popping gives a slot back.
fn answer_rings(
    workers: usize,
    ports: &mut [RequestPort],
    (credits, inflight): (&[Arc<ShardCredit>], &Arc<AccountInflight>),
    stats: &RequestStats,
) -> Vec<AnswerTx> {
    let mut answer_tx = Vec::with_capacity(workers + 1);
    for producer in 0..=workers {
        let mut row = Vec::with_capacity(ports.len());
        for (s, port) in ports.iter_mut().enumerate() {
            let (tx, rx) = rtrb::RingBuffer::new(ANSWER_RING);
            row.push(tx);
            let credit = (producer > 0).then(|| (credits[s].clone(), inflight.clone()));
            let hop = stats.hops.recorder(Hop::AnswerRing);
            port.answers.push(AnswerRx::new(rx, credit, hop));
        }
        answer_tx.push(row);
    }
    answer_tx
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

mod dispatcher;
use dispatcher::{empty_answer, Dispatcher};
mod start_error;
pub use start_error::StartError;
mod worker;
use worker::Worker;

#[cfg(test)]
mod tests;
