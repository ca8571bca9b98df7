//! The pinned-thread pipeline: feed threads → engine → one ring per shard.
//!
//! Every ring is a bounded rtrb SPSC ring allocated at start. Each feed
//! (a [`TickSource`] on its own thread, or an external producer such as
//! the provider-ingest listener holding a [`FeedPort`]) owns one input ring
//! into the engine, so the engine is the single consumer of each. The
//! engine owns one ring per gateway shard and conflates per (symbol, tier)
//! when a shard falls behind.
//!
//! Stages start and stop through the control plane (crossbeam channels,
//! never on the hot path). An orderly stop cascades down the data flow:
//! feeds stop and drop their producers; the engine drains its inputs, sees
//! them abandoned, flushes and exits, dropping its shard producers; shards
//! do the same.

pub mod determ;
pub mod sink;

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::runtime::affinity;
use crate::runtime::{CpuMap, Doorbell, FeedPort, HostedTasks, Stage, Threading};
use crate::runtime::{FeedStats, Policy, Supervised, Supervisor, WaitStrategy, Waiter};

use crate::clock::monotonic_ns;
use crate::config::Config;
use crate::engine::{
    Aggregator, EngineStage, EngineStats, FanoutStats, PriceTable, ProviderHealth, ShardInput,
    ShardPublisher, SymbolInterest, TickHistory,
};
use crate::feed::{SourcePoll, TickSource};
use crate::model::Tick;

/// Default feed → engine ring capacity, in ticks (power of two).
pub(crate) const FEED_RING_DEFAULT: usize = 65_536;
/// Default engine → shard ring capacity, in prices (power of two).
pub(crate) const SHARD_RING_DEFAULT: usize = 65_536;
/// Most ticks a source fills per poll.
pub(crate) const FEED_BATCH: usize = 256;
/// Default time a feed waits for room in a full ring before dropping.
pub(crate) const FEED_FULL_WAIT_US_DEFAULT: u64 = 1_000;
/// How long start-up waits for every stage to report in.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of the pipeline. Validated by [`PipelineConfig::validate`].
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Feed → engine ring capacity, in ticks (power of two, at most 2^24).
    pub feed_ring: usize,
    /// Engine → shard ring capacity, in prices (power of two, at most 2^24).
    pub shard_ring: usize,
    /// Gateway shards, each with its own ring (1..=64).
    pub shards: usize,
    /// How feed stages wait when idle.
    pub feed_wait: WaitStrategy,
    /// How the engine waits when idle.
    pub engine_wait: WaitStrategy,
    /// Which core each stage is pinned to, if any.
    pub cpus: CpuMap,
    /// Time a feed waits for room in a full ring before dropping, in µs.
    pub feed_full_wait_us: u64,
    /// Ticks of history kept per symbol.
    pub history_depth: usize,
    /// Dedicated threads per stage, or the engine hosted by shard 0.
    pub threading: Threading,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            feed_ring: FEED_RING_DEFAULT,
            shard_ring: SHARD_RING_DEFAULT,
            shards: 1,
            feed_wait: WaitStrategy::SpinPark,
            engine_wait: WaitStrategy::SpinPark,
            cpus: CpuMap::default(),
            feed_full_wait_us: FEED_FULL_WAIT_US_DEFAULT,
            history_depth: crate::engine::history::HISTORY_DEPTH_DEFAULT,
            threading: Threading::Dedicated,
        }
    }
}

/// Why the pipeline could not start.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A setting is out of bounds.
    #[error("invalid setting `{flag}`: {reason}")]
    Invalid {
        /// The command-line flag of the setting.
        flag: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// `--cpus` (or `--rt-priority`) cannot be honoured on this machine.
    #[error("invalid setting `--cpus`: {0}")]
    Cpus(#[source] affinity::PlacementError),
    /// A stage reported that it could not start (pinning, priority, ...).
    #[error("stage {stage} failed to start: {reason}")]
    StageFailed {
        /// Which stage.
        stage: Stage,
        /// Why, as the stage reported it.
        reason: String,
    },
    /// A stage did not report in within the start-up timeout (10 s).
    #[error("stage {0} did not report in within the start-up timeout")]
    StartTimeout(Stage),
    /// A stage's thread could not be spawned.
    #[error("a stage thread could not be spawned: {0}")]
    Spawn(String),
}

fn ring_size_ok(flag: &'static str, n: usize) -> Result<(), PipelineError> {
    if n == 0 || !n.is_power_of_two() || n > (1 << 24) {
        return Err(PipelineError::Invalid {
            flag,
            reason: format!("{n}: must be a power of two between 1 and 16777216"),
        });
    }
    Ok(())
}

impl PipelineConfig {
    /// Checks every bound; the error names the flag (`--feed-ring`,
    /// `--shard-ring`, `--history-depth`, `--shards`, `--cpus`).
    pub fn validate(&self) -> Result<(), PipelineError> {
        ring_size_ok("--feed-ring", self.feed_ring)?;
        ring_size_ok("--shard-ring", self.shard_ring)?;
        if self.history_depth == 0 || self.history_depth > 65_536 {
            return Err(PipelineError::Invalid {
                flag: "--history-depth",
                reason: format!("{}: must be 1..=65536", self.history_depth),
            });
        }
        if self.shards == 0 || self.shards > 64 {
            return Err(PipelineError::Invalid {
                flag: "--shards",
                reason: format!("{}: must be 1..=64", self.shards),
            });
        }
        if self.threading == Threading::Shared
            && self.feed_ring < crate::runtime::hosting::SHARED_FEED_RING_MIN
        {
            return Err(PipelineError::Invalid {
                flag: "--feed-ring",
                reason: format!(
                    "{}: at least {} with --threading shared",
                    self.feed_ring,
                    crate::runtime::hosting::SHARED_FEED_RING_MIN
                ),
            });
        }
        if self.threading == Threading::Shared && self.cpus.core_for(Stage::Engine).is_some() {
            return Err(PipelineError::Invalid {
                flag: "--cpus",
                reason: "with --threading shared the engine runs on shard 0's thread: \
                         pin shard0 instead of engine"
                    .into(),
            });
        }
        self.cpus.validate().map_err(PipelineError::Cpus)
    }
}

/// Messages on a stage's control channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Stop producing; let downstream drain.
    Stop,
}

/// What stages tell the supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageEvent {
    /// The stage's thread is running where it says.
    Started {
        /// Which stage.
        stage: Stage,
        /// Where its thread runs (core and priority).
        placement: affinity::Placement,
    },
    /// The stage could not start.
    Failed {
        /// Which stage.
        stage: Stage,
        /// Why, for the operator.
        reason: String,
    },
}

/// Shared read-only views of the running pipeline.
#[derive(Clone)]
pub struct PipelineHandles {
    /// The latest price of every symbol.
    pub table: Arc<PriceTable>,
    /// Per-provider liveness, as the engine sees it.
    pub health: Arc<ProviderHealth>,
    /// Engine counters.
    pub engine: Arc<EngineStats>,
    /// Fan-out counters, one per shard.
    pub fanout: Vec<Arc<FanoutStats>>,
    /// Counters of each feed, with its name.
    pub feeds: Vec<(String, Arc<FeedStats>)>,
    /// Wakes the engine when a feed pushed into an empty ring.
    pub engine_doorbell: Arc<Doorbell>,
    /// Recent ticks per symbol (HistoryRequest).
    pub history: Arc<TickHistory>,
}

struct StageThread {
    stage: Stage,
    control: Option<Sender<Control>>,
    handle: Supervised<()>,
}

/// A running pipeline (feeds and engine). Shards are run by the caller.
pub struct Pipeline {
    feeds: Vec<StageThread>,
    engine: Option<StageThread>,
    /// The engine hosted by shard 0 (`--threading shared`).
    hosted_engine: Option<crate::runtime::hosting::Dropped>,
    /// Read-only views for reporting and the gateway.
    pub handles: PipelineHandles,
}

/// What [`Pipeline::start`] hands back besides the pipeline.
pub struct PipelineParts {
    /// The running feeds and engine.
    pub pipeline: Pipeline,
    /// One input per shard: its ring and interest set, for the caller to run.
    pub shards: Vec<ShardInput>,
    /// One producer port per requested external feed (e.g. TCP ingest).
    pub ports: Vec<FeedPort>,
}

/// The recorder ring the engine copies every tick into.
pub use crate::capture::RecorderTap;

/// The engine → shard rings: one publisher (engine side) and one
/// [`ShardInput`] (shard side) per shard, each with its doorbell and an
/// empty interest set over `symbols` symbols.
fn shard_rings(cfg: &PipelineConfig, symbols: usize) -> (Vec<ShardPublisher>, Vec<ShardInput>) {
    let mut publishers = Vec::new();
    let mut shards = Vec::new();
    // `validate` checked the ring sizes (pair assertion).
    debug_assert!(cfg.shard_ring.is_power_of_two() && cfg.feed_ring.is_power_of_two());
    for index in 0..cfg.shards {
        let (producer, consumer) = rtrb::RingBuffer::new(cfg.shard_ring);
        let doorbell = Doorbell::new();
        // Nothing until the shard's first subscription (sinks: all).
        let interest = SymbolInterest::none(symbols);
        let publisher = ShardPublisher::new(producer, symbols, doorbell.clone())
            .with_interest(interest.clone());
        shards.push(ShardInput {
            index,
            consumer,
            doorbell,
            interest,
            fanout: publisher.stats.clone(),
            hosted: HostedTasks::default(),
        });
        publishers.push(publisher);
    }
    (publishers, shards)
}

/// The feed → engine rings of [`Pipeline::start`].
struct FeedRings {
    /// Engine side of every ring: the sources' first, then the external ports'.
    inputs: Vec<rtrb::Consumer<Tick>>,
    /// Each ring's producer's progress mark, in the same order.
    marks: Vec<Arc<crate::runtime::Progress>>,
    /// Each ring's name and counters, in the same order.
    stats: Vec<(String, Arc<FeedStats>)>,
    /// Producer side of each external port, for the caller.
    ports: Vec<FeedPort>,
    /// Each source with the producer side of its ring, for its feed thread.
    pending: Vec<(String, Box<dyn TickSource>, FeedPort)>,
}

/// One ring per source and per external port, each ringing `doorbell`.
fn feed_rings(
    cfg: &PipelineConfig,
    sources: Vec<(String, Box<dyn TickSource>)>,
    external_ports: Vec<String>,
    doorbell: &Arc<Doorbell>,
) -> FeedRings {
    let mut rings = FeedRings {
        inputs: Vec::new(),
        marks: Vec::new(),
        stats: Vec::new(),
        ports: Vec::new(),
        pending: Vec::new(),
    };
    for (name, source) in sources {
        let (port, consumer) =
            FeedPort::new(cfg.feed_ring, cfg.feed_full_wait_us, doorbell.clone());
        rings.stats.push((name.clone(), port.stats.clone()));
        rings.inputs.push(consumer);
        rings.marks.push(port.progress.clone());
        rings.pending.push((name, source, port));
    }
    for name in external_ports {
        let (port, consumer) =
            FeedPort::new(cfg.feed_ring, cfg.feed_full_wait_us, doorbell.clone());
        rings.stats.push((name, port.stats.clone()));
        rings.inputs.push(consumer);
        rings.marks.push(port.progress.clone());
        rings.ports.push(port);
    }
    rings
}

/// The engine stage and the shared views of it that go into the handles.
struct EngineParts {
    stage: EngineStage,
    price_table: Arc<PriceTable>,
    history: Arc<TickHistory>,
    health: Arc<ProviderHealth>,
    stats: Arc<EngineStats>,
}

/// The engine stage over `inputs` and `publishers`, with its aggregator,
/// price table, tick history and recorder tap.
fn engine_stage(
    config: &Config,
    cfg: &PipelineConfig,
    publishers: Vec<ShardPublisher>,
    inputs: Vec<rtrb::Consumer<Tick>>,
    recorder: Option<RecorderTap>,
) -> EngineParts {
    let table = &config.table;
    let health = ProviderHealth::new(table.providers().len());
    let stats = Arc::new(EngineStats::default());
    let agg = Aggregator::new(table, &config.engine, health.clone(), stats.clone());
    let price_table = Arc::new(PriceTable::with_markups(crate::model::Markups::new(table)));
    price_table.set_stream_id(agg.stream_id());
    let mut stage = EngineStage::new(agg, price_table.clone(), publishers, inputs, stats.clone());
    stage.tap = recorder;
    let history = Arc::new(TickHistory::new(table.len(), cfg.history_depth));
    stage.history = Some(history.clone());
    EngineParts {
        stage,
        price_table,
        history,
        health,
        stats,
    }
}

impl Pipeline {
    /// Starts one feed thread per source and the engine thread (with
    /// `--threading shared`, hands the engine to shard 0's input as a
    /// hosted task instead); creates `external_ports` extra input rings
    /// for producers the caller runs.
    pub fn start(
        cfg: &PipelineConfig,
        config: &Config,
        sources: Vec<(String, Box<dyn TickSource>)>,
        external_ports: Vec<String>,
        recorder: Option<RecorderTap>,
        supervisor: &Supervisor,
    ) -> Result<PipelineParts, PipelineError> {
        cfg.validate()?;
        let table = &config.table;
        let shared = cfg.threading == Threading::Shared;
        let (publishers, mut shards) = shard_rings(cfg, table.len());
        // Shared: feeds wake the engine by waking the thread that hosts it.
        let engine_doorbell = if shared {
            shards[0].doorbell.clone()
        } else {
            Doorbell::new()
        };
        let (events_tx, events_rx) = crossbeam_channel::bounded(64);
        let rings = feed_rings(cfg, sources, external_ports, &engine_doorbell);
        let (inputs, feed_stats, ports, pending_sources) =
            (rings.inputs, rings.stats, rings.ports, rings.pending);
        let feed_marks = rings.marks;

        let fanout = publishers.iter().map(|p| p.stats.clone()).collect();
        let EngineParts {
            stage,
            price_table,
            history,
            health,
            stats: engine_stats,
        } = engine_stage(config, cfg, publishers, inputs, recorder);
        let mut stage = stage;
        stage.feed_marks = feed_marks;
        let mut pipeline = Pipeline {
            feeds: Vec::new(),
            engine: None,
            hosted_engine: None,
            handles: PipelineHandles {
                table: price_table,
                health,
                engine: engine_stats,
                fanout,
                feeds: feed_stats,
                engine_doorbell,
                history,
            },
        };
        let dedicated = if shared {
            let (task, done) = crate::engine::hosted::HostedEngine::new(stage);
            shards[0].hosted.push(Box::new(task));
            pipeline.hosted_engine = Some(done);
            None
        } else {
            Some(stage)
        };
        let spawned =
            pipeline.spawn_stages(dedicated, pending_sources, cfg, &events_tx, supervisor);
        if let Err(e) = spawned.and_then(|()| pipeline.await_started(&events_rx)) {
            drop(shards); // a hosted engine ends with them
            pipeline.stop();
            return Err(e);
        }
        Ok(PipelineParts {
            pipeline,
            shards,
            ports,
        })
    }

    /// Spawns the engine thread (when not hosted) and one thread per
    /// source; on a failed spawn the caller stops what did start.
    fn spawn_stages(
        &mut self,
        engine: Option<EngineStage>,
        sources: Vec<(String, Box<dyn TickSource>, FeedPort)>,
        cfg: &PipelineConfig,
        events: &Sender<StageEvent>,
        supervisor: &Supervisor,
    ) -> Result<(), PipelineError> {
        if let Some(stage) = engine {
            let bell = self.handles.engine_doorbell.clone();
            self.engine = Some(spawn_engine(stage, cfg, bell, events.clone(), supervisor)?);
        }
        for (i, feed) in sources.into_iter().enumerate() {
            let events = events.clone();
            self.feeds
                .push(spawn_feed(i, feed, cfg, events, supervisor)?);
        }
        Ok(())
    }

    /// A pipeline with no stages: an edge's, whose prices come from the
    /// bus into the tables and rings that `handles` name.
    pub(crate) fn without_stages(handles: PipelineHandles) -> Pipeline {
        Pipeline {
            feeds: Vec::new(),
            engine: None,
            hosted_engine: None,
            handles,
        }
    }

    fn await_started(&self, events: &Receiver<StageEvent>) -> Result<(), PipelineError> {
        let mut waiting: Vec<Stage> = self.feeds.iter().map(|f| f.stage).collect();
        if self.engine.is_some() {
            waiting.push(Stage::Engine);
        }
        while !waiting.is_empty() {
            match events.recv_timeout(START_TIMEOUT) {
                Ok(StageEvent::Started { stage, placement }) => {
                    let (core, rt_priority) = (placement.core, placement.rt_priority);
                    tracing::info!(%stage, ?core, ?rt_priority, "stage started");
                    // Every feed is `Stage::Feed`: one start-up ticks off
                    // one feed, so a later feed's failure still counts.
                    if let Some(i) = waiting.iter().position(|s| *s == stage) {
                        waiting.swap_remove(i);
                    }
                }
                Ok(StageEvent::Failed { stage, reason }) => {
                    return Err(PipelineError::StageFailed { stage, reason })
                }
                Err(_) => return Err(PipelineError::StartTimeout(waiting[0])),
            }
        }
        Ok(())
    }

    /// True once every feed thread has finished (e.g. a replay ended).
    /// True once every feed thread ended; never for a pipeline without
    /// feeds (an edge's), which runs until it is stopped.
    pub(crate) fn feeds_finished(&self) -> bool {
        !self.feeds.is_empty() && self.feeds.iter().all(|f| f.handle.is_finished())
    }

    /// Orderly stop: feeds first, then the engine drains and exits. The
    /// caller's external ports must be dropped for the engine to finish.
    pub fn stop(&mut self) {
        for f in self.feeds.iter().chain(&self.engine) {
            f.handle.request_stop();
        }
        for f in &self.feeds {
            if let Some(c) = &f.control {
                let _ = c.try_send(Control::Stop);
            }
        }
        for f in self.feeds.drain(..) {
            join_stage(f);
        }
        self.handles.engine_doorbell.ring();
        if let Some(e) = self.engine.take() {
            join_stage(e);
        }
        if let Some(done) = self.hosted_engine.take() {
            // The host (shard 0) keeps turning the engine until its inputs
            // are drained; it is still running at this point of a stop.
            if !done.wait(crate::runtime::hosting::HOSTED_STOP_TIMEOUT) {
                tracing::error!(
                    "the hosted engine did not finish within {:?}",
                    crate::runtime::hosting::HOSTED_STOP_TIMEOUT
                );
            }
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if self.engine.is_some() || self.hosted_engine.is_some() || !self.feeds.is_empty() {
            self.stop();
        }
    }
}

/// Joins a stopped stage; a panic was logged by the supervisor.
fn join_stage(t: StageThread) {
    drop(t.control);
    let _ = t.handle.join();
}

fn place(stage: Stage, cpus: &CpuMap, events: &Sender<StageEvent>) -> bool {
    match affinity::place_current(stage, cpus) {
        Ok(placement) => {
            let _ = events.send(StageEvent::Started { stage, placement });
            true
        }
        Err(e) => {
            // The event is cloned and compared; the message is what the
            // operator reads.
            let reason = e.to_string();
            let _ = events.send(StageEvent::Failed { stage, reason });
            false
        }
    }
}

/// A feed thread: transient, since a source may end (a replay's last
/// tick) and the feed with it.
fn spawn_feed(
    index: usize,
    (name, mut source, mut port): (String, Box<dyn TickSource>, FeedPort),
    cfg: &PipelineConfig,
    events: Sender<StageEvent>,
    supervisor: &Supervisor,
) -> Result<StageThread, PipelineError> {
    let (control_tx, control_rx) = crossbeam_channel::bounded(1);
    let cpus = cfg.cpus.clone();
    let wait = cfg.feed_wait;
    let stage = Stage::Feed;
    let handle = supervisor
        .spawn(
            format!("pw-feed{index}-{name}"),
            Policy::Transient,
            move || {
                if place(stage, &cpus, &events) {
                    run_feed(index as u32, source.as_mut(), &mut port, &control_rx, wait);
                }
            },
        )
        .map_err(|e| PipelineError::Spawn(e.to_string()))?;
    Ok(StageThread {
        stage,
        control: Some(control_tx),
        handle,
    })
}

/// The feed loop: poll the source, stamp receive times, push.
pub(crate) fn run_feed(
    index: u32,
    source: &mut dyn TickSource,
    port: &mut FeedPort,
    control: &Receiver<Control>,
    wait: WaitStrategy,
) {
    let mut batch = vec![Tick::EMPTY; FEED_BATCH].into_boxed_slice();
    let mut waiter = Waiter::new(wait, Doorbell::new());
    waiter.doorbell().bind_current_thread();
    let keeps = source.keeps_receive_time();
    let mut turn: u32 = 0;
    loop {
        turn = turn.wrapping_add(1);
        if turn.is_multiple_of(64) {
            crate::runtime::drill::point("feed", index);
            if should_stop(control) {
                break;
            }
        }
        let now = monotonic_ns();
        match source.poll(now, &mut batch) {
            SourcePoll::Ready(n) => {
                for t in &mut batch[..n] {
                    if !keeps {
                        t.receive_time_ns = now;
                    }
                    port.push(*t);
                }
                port.notify();
                waiter.reset();
            }
            SourcePoll::Idle => {
                crate::runtime::drill::point("feed", index);
                if should_stop(control) {
                    break;
                }
                waiter.idle(|| false);
            }
            SourcePoll::Done => break,
        }
    }
}

fn should_stop(control: &Receiver<Control>) -> bool {
    matches!(
        control.try_recv(),
        Ok(Control::Stop) | Err(crossbeam_channel::TryRecvError::Disconnected)
    )
}

/// The engine thread: transient, since it ends by design once every
/// feed let go of its ring and the rings are drained.
fn spawn_engine(
    mut stage: EngineStage,
    cfg: &PipelineConfig,
    doorbell: Arc<Doorbell>,
    events: Sender<StageEvent>,
    supervisor: &Supervisor,
) -> Result<StageThread, PipelineError> {
    let cpus = cfg.cpus.clone();
    let wait = cfg.engine_wait;
    let handle = supervisor
        .spawn("pw-engine", Policy::Transient, move || {
            doorbell.bind_current_thread();
            if place(Stage::Engine, &cpus, &events) {
                run_engine(&mut stage, Waiter::new(wait, doorbell));
            }
        })
        .map_err(|e| PipelineError::Spawn(e.to_string()))?;
    Ok(StageThread {
        stage: Stage::Engine,
        control: None,
        handle,
    })
}

/// The engine loop: turns until every input is abandoned and drained,
/// then flushes parked prices (bounded) and returns.
pub(crate) fn run_engine(stage: &mut EngineStage, mut waiter: Waiter) {
    loop {
        let now = monotonic_ns();
        // Time-gated: also runs while ticks keep every turn busy, so a
        // silent provider's symbols go stale even during a burst.
        stage.maybe_sweep(now);
        if stage.turn(now) > 0 {
            waiter.reset();
            continue;
        }
        if stage.inputs_done() {
            stage.finish();
            break;
        }
        waiter.idle(|| stage.has_input());
    }
    // Shards still running get the parked prices; bounded so a stuck shard
    // cannot hold the engine forever.
    let deadline = monotonic_ns() + 1_000_000_000;
    while stage.parked() > 0 && monotonic_ns() < deadline {
        stage.turn(monotonic_ns());
        // A short sleep, not `yield_now`: at real-time priority a yield
        // gives the core to no normal-priority thread, shards included.
        std::thread::sleep(Duration::from_micros(crate::runtime::wait::PARK_MIN_US));
    }
}
