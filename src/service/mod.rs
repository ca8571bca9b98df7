//! The assembled price service: pipeline, provider ingest, subscriber
//! gateway (or measuring sinks when headless), and the metrics they export.
//!
//! `pricewire serve`, the integration tests and the bench tool all start
//! the service through [`Service::start`], so they run the same wiring.

mod auth_metrics;
mod metrics;
pub mod report;
mod tls_metrics;

use std::sync::Arc;

use crate::bus::{BusConfig, BusError, BusHandle, BusPublisher, BusRole, BusSubscriber};
use crate::config::Config;
use crate::feed::ingest::{self, IngestConfig, IngestHandle};
use crate::feed::synthetic::{SyntheticConfig, SyntheticFeed};
use crate::feed::TickSource;
use crate::gateway::{Gateway, GatewayConfig, GatewayDeps};
use crate::overload::stats::OverloadStats;
use crate::pipeline::sink::{ShardSink, SinkStats};
use crate::pipeline::{Pipeline, PipelineConfig, PipelineError, PipelineHandles, RecorderTap};
use crate::refdata::RefData;
use crate::requests::service::RequestConfig;
use crate::runtime::{Policy, Stage, Supervised, Supervisor, Threading, WaitStrategy};
use report::LatencyCollector;

/// What to start.
pub struct ServiceConfig {
    /// The validated configuration file (instruments, providers, accounts).
    pub config: Arc<Config>,
    /// Rings, shards, waits, pinning and threading of the pipeline.
    pub pipeline: PipelineConfig,
    /// The built-in synthetic feed, if wanted.
    pub synthetic: Option<SyntheticConfig>,
    /// More feed sources (replay, FIX sessions), one feed thread each.
    pub sources: Vec<(String, Box<dyn TickSource>)>,
    /// The subscriber gateway; `None` runs headless measuring sinks.
    pub gateway: Option<GatewayConfig>,
    /// The provider ingest listener.
    pub ingest: Option<IngestConfig>,
    /// Wait strategy of headless sinks.
    pub shard_wait: WaitStrategy,
    /// Optional recorder ring the engine copies every tick into.
    pub recorder: Option<RecorderTap>,
    /// The request path (queue, adaptive limit, workers).
    pub requests: RequestConfig,
    /// Accounts from Redis instead of the config file.
    pub refdata: Option<Arc<RefData>>,
    /// `--role core|edge`: the NATS bus side; `None` is standalone.
    pub bus: Option<BusRole>,
    /// Watches every stage thread the service starts (`serve` exits the
    /// process when one dies; a fresh one by default, which only records).
    pub supervisor: Supervisor,
}

impl ServiceConfig {
    /// The built-in defaults around `config`: synthetic feed at its default
    /// rate, headless (no gateway), no ingest, no recorder.
    pub fn new(config: Arc<Config>) -> ServiceConfig {
        ServiceConfig {
            config,
            pipeline: PipelineConfig::default(),
            synthetic: Some(SyntheticConfig::default()),
            sources: Vec::new(),
            gateway: None,
            ingest: None,
            shard_wait: WaitStrategy::SpinPark,
            recorder: None,
            requests: RequestConfig::default(),
            refdata: None,
            bus: None,
            supervisor: Supervisor::new(),
        }
    }
}

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A pipeline setting or stage failed (see [`PipelineError`]).
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The subscriber gateway could not bind or start its shards.
    #[error("gateway: {0}")]
    Gateway(std::io::Error),
    /// The provider ingest listener could not bind or start.
    #[error("provider ingest: {0}")]
    Ingest(std::io::Error),
    /// The NATS bus settings are refused, or the bus could not start.
    #[error("bus: {0}")]
    Bus(#[from] BusError),
    /// A headless sink's thread could not be spawned.
    #[error("shard sink: {0}")]
    Sink(std::io::Error),
}

/// The parts of a [`ServiceConfig`] that decide what takes the shard
/// rings (see `Service::start_consumers`).
struct Consumers {
    gateway: Option<GatewayConfig>,
    requests: RequestConfig,
    refdata: Option<Arc<RefData>>,
    shard_wait: WaitStrategy,
    supervisor: Supervisor,
}

impl Consumers {
    /// Takes them out of `cfg`.
    fn of(cfg: &mut ServiceConfig) -> Consumers {
        Consumers {
            gateway: cfg.gateway.take(),
            requests: std::mem::take(&mut cfg.requests),
            refdata: cfg.refdata.take(),
            shard_wait: cfg.shard_wait,
            supervisor: cfg.supervisor.clone(),
        }
    }
}

/// A running service.
pub struct Service {
    /// The configuration the service runs with.
    pub config: Arc<Config>,
    /// Declared before `pipeline`: fields drop in order, and the engine
    /// only finishes once every feed (the ingest listener's included) has
    /// let go of its ring.
    pub ingest: Option<IngestHandle>,
    /// The feeds and engine (none on an edge).
    pub pipeline: Pipeline,
    /// The subscriber gateway; `None` when headless.
    pub gateway: Option<Gateway>,
    /// Overload counters (sheds, drops, rejects) shared by every stage.
    pub overload: Arc<OverloadStats>,
    /// Counters of the headless measuring sinks (empty with a gateway).
    pub sink_stats: Vec<Arc<SinkStats>>,
    /// End-to-end latency histograms merged from the shard consumers.
    pub latency: LatencyCollector,
    /// FIX sessions' counters and breakers, when FIX providers run.
    pub fix: Option<Arc<crate::feed::fix::FixFeedStats>>,
    /// The NATS bus thread (`--role core|edge`).
    pub bus: Option<BusHandle>,
    sinks: Vec<Supervised<()>>,
}

impl Service {
    /// Starts everything `cfg` asks for: on an edge the bus subscriber, else
    /// the feeds and engine, the core bus publisher and the provider ingest;
    /// then the gateway or the headless sinks on the shard rings. Errors: the
    /// first part that failed to start.
    pub fn start(mut cfg: ServiceConfig) -> Result<Service, ServiceError> {
        if let Some(BusRole::Edge(bus)) = cfg.bus.clone() {
            return Self::start_edge(cfg, &bus);
        }
        let config = cfg.config.clone();
        let sources = feed_sources(&mut cfg, &config);
        let ports = cfg.ingest.iter().map(|_| "ingest".to_string()).collect();
        let recorder = cfg.recorder.take();
        let sup = cfg.supervisor.clone();
        let parts = Pipeline::start(&cfg.pipeline, &config, sources, ports, recorder, &sup)?;
        let mut pipeline = parts.pipeline;
        let overload = Arc::new(OverloadStats::default());
        let (latency, exchanges) = LatencyCollector::new(parts.shards.len());
        let mut service_ingest = None;
        let mut shards = parts.shards;
        let bus = match start_core_bus(cfg.bus.take(), &config, &mut shards, &sup) {
            Ok(b) => b,
            Err(e) => {
                drop(shards);
                pipeline.stop();
                return Err(e.into());
            }
        };
        if let (Some(icfg), Some(port)) = (cfg.ingest.take(), parts.ports.into_iter().next()) {
            // Shared threading with a gateway: shard 0 watches the ingest
            // listener's sockets too. A headless sink cannot watch
            // descriptors, so without a gateway the listener keeps its thread.
            let host = cfg.pipeline.threading == Threading::Shared && cfg.gateway.is_some();
            match start_ingest(icfg, port, &config, host, &mut shards, &sup) {
                Ok(h) => service_ingest = Some(h),
                Err(e) => {
                    drop(shards); // a hosted engine ends with them
                    pipeline.stop();
                    return Err(ServiceError::Ingest(e));
                }
            }
        }
        let mut service = Service {
            config: config.clone(),
            pipeline,
            gateway: None,
            ingest: service_ingest,
            overload: overload.clone(),
            sink_stats: Vec::new(),
            latency,
            fix: None,
            bus,
            sinks: Vec::new(),
        };
        let consumers = Consumers::of(&mut cfg);
        service.start_consumers(consumers, shards, exchanges, &cfg.pipeline)?;
        Ok(service)
    }

    /// An edge: no feeds and no engine; the bus thread fills the price
    /// table and the gateway shards' rings, and has loaded every last value
    /// before the gateway accepts its first terminal.
    fn start_edge(mut cfg: ServiceConfig, bus: &BusConfig) -> Result<Service, ServiceError> {
        let config = cfg.config.clone();
        let (shards, ring) = (cfg.pipeline.shards, cfg.pipeline.shard_ring);
        let depth = cfg.pipeline.history_depth;
        let sup = &cfg.supervisor;
        let (sub, parts) = BusSubscriber::start(bus, &config.table, shards, ring, depth, sup)?;
        let handles = PipelineHandles {
            table: parts.table,
            health: crate::model::ProviderHealth::new(config.table.providers().len()),
            engine: Arc::default(),
            fanout: parts.fanout,
            feeds: Vec::new(),
            engine_doorbell: crate::runtime::Doorbell::new(),
            history: parts.history,
        };
        let overload = Arc::new(OverloadStats::default());
        let (latency, exchanges) = LatencyCollector::new(parts.shards.len());
        let mut service = Service {
            config: config.clone(),
            pipeline: Pipeline::without_stages(handles),
            gateway: None,
            ingest: None,
            overload: overload.clone(),
            sink_stats: Vec::new(),
            latency,
            fix: None,
            bus: Some(BusHandle::Edge(sub)),
            sinks: Vec::new(),
        };
        let consumers = Consumers::of(&mut cfg);
        service.start_consumers(consumers, parts.shards, exchanges, &cfg.pipeline)?;
        Ok(service)
    }

    /// Starts what takes the shard rings: the subscriber gateway, or
    /// measuring sinks when headless. One path for a standalone service and
    /// an edge, whose rings the bus thread fills instead of the engine.
    fn start_consumers(
        &mut self,
        c: Consumers,
        shards: Vec<crate::engine::ShardInput>,
        exchanges: Vec<crate::runtime::latency::HistogramExchange>,
        pcfg: &PipelineConfig,
    ) -> Result<(), ServiceError> {
        let Some(gcfg) = c.gateway else {
            return self.start_sinks(shards, exchanges, pcfg, c.shard_wait, &c.supervisor);
        };
        let deps = GatewayDeps {
            config: self.config.clone(),
            table: self.pipeline.handles.table.clone(),
            overload: self.overload.clone(),
            exchanges: exchanges.into_iter().map(Some).collect(),
            history: Some(self.pipeline.handles.history.clone()),
            requests: c.requests,
            refdata: c.refdata,
            supervisor: c.supervisor,
        };
        let gw = Gateway::start_with(gcfg, shards, deps).map_err(ServiceError::Gateway)?;
        self.gateway = Some(gw);
        Ok(())
    }

    /// Headless: one measuring sink per shard ring, each on a thread named
    /// as the shard it stands for (transient: a sink ends with its input).
    fn start_sinks(
        &mut self,
        shards: Vec<crate::engine::ShardInput>,
        exchanges: Vec<crate::runtime::latency::HistogramExchange>,
        pcfg: &PipelineConfig,
        wait: WaitStrategy,
        supervisor: &Supervisor,
    ) -> Result<(), ServiceError> {
        let (symbols, tiers) = (self.config.table.len(), self.config.table.tiers().len());
        for (input, exchange) in shards.into_iter().zip(exchanges) {
            let index = input.index;
            let mut sink = ShardSink::new(input, symbols, tiers).with_exchange(exchange);
            self.sink_stats.push(sink.stats.clone());
            let cpus = pcfg.cpus.clone();
            let name = format!("pw-shard{index}");
            let t = supervisor.spawn(name, Policy::Transient, move || {
                let stage = Stage::Shard(index as u16);
                if let Err(e) = crate::runtime::affinity::place_current(stage, &cpus) {
                    // As a gateway shard does: a sink left unplaced, or
                    // gone, would leave the service up without prices.
                    tracing::error!("{e}; exiting");
                    std::process::exit(1);
                }
                sink.run(wait);
            });
            self.sinks.push(t.map_err(ServiceError::Sink)?);
        }
        Ok(())
    }

    /// Counters for the periodic report.
    /// Stops accepting subscribers and bridges; live sessions go on.
    pub fn stop_accepting(&mut self) {
        if let Some(g) = self.gateway.as_mut() {
            g.stop_accepting();
        }
    }

    /// Tells every subscriber to come back later (jittered) and closes.
    pub fn disconnect_all(&self) {
        if let Some(g) = &self.gateway {
            g.disconnect_all();
        }
    }

    /// Subscriber connections still open.
    pub fn open_connections(&self) -> u64 {
        self.gateway.as_ref().map_or(0, |g| g.connections())
    }

    /// Stops every stage in data-flow order.
    /// Stops every feed (ingest listener first) and then the engine, which
    /// drains what the feeds left in its rings. Idempotent.
    pub(crate) fn stop_feeds(&mut self) {
        if let Some(i) = self.ingest.take() {
            i.stop();
        }
        self.pipeline.stop();
        // After the engine: a core's bus thread publishes what it left.
        if let Some(b) = self.bus.take() {
            b.stop();
        }
    }

    /// Stops the feeds, then the gateway and the sinks, and joins them.
    pub fn stop(mut self) {
        self.stop_feeds();
        if let Some(g) = self.gateway.take() {
            g.stop();
        }
        for t in self.sinks.drain(..) {
            let _ = t.join();
        }
    }
}

/// The feed sources `cfg` asks for: the synthetic feed first, if wanted,
/// then `cfg.sources` (taken out of `cfg`).
fn feed_sources(cfg: &mut ServiceConfig, config: &Config) -> Vec<(String, Box<dyn TickSource>)> {
    let mut sources = std::mem::take(&mut cfg.sources);
    if let Some(s) = cfg.synthetic {
        sources.insert(
            0,
            (
                "synthetic".into(),
                Box::new(SyntheticFeed::new(&config.table, s)),
            ),
        );
    }
    sources
}

/// Starts the provider ingest listener on `port`: hosted by shard 0 when
/// `host`, else on its own thread.
fn start_ingest(
    icfg: IngestConfig,
    port: crate::runtime::FeedPort,
    config: &Config,
    host: bool,
    shards: &mut [crate::engine::ShardInput],
    supervisor: &Supervisor,
) -> std::io::Result<IngestHandle> {
    let table = Arc::new(config.table.clone());
    if host {
        ingest::hosted(icfg, table, port, supervisor).map(|(h, task)| {
            // Ahead of the engine: quotes read in a turn are
            // priced in the same turn.
            shards[0].hosted.push_first(task);
            h
        })
    } else {
        ingest::spawn(icfg, table, port, supervisor)
    }
}

/// A core's bus thread, which takes the first shard ring like a sink.
fn start_core_bus(
    bus: Option<BusRole>,
    config: &Config,
    shards: &mut Vec<crate::engine::ShardInput>,
    supervisor: &Supervisor,
) -> Result<Option<BusHandle>, BusError> {
    let Some(BusRole::Core(b)) = bus else {
        return Ok(None);
    };
    let input = shards.remove(0);
    let publisher = BusPublisher::start(&b, &config.table, input, supervisor)?;
    Ok(Some(BusHandle::Core(publisher)))
}

impl Service {
    /// Requests queued or being served.
    pub(crate) fn requests_in_flight(&self) -> u64 {
        self.gateway.as_ref().map_or(0, |g| g.requests_in_flight())
    }

    /// Bytes waiting in subscriber outbound buffers (sampled by shards).
    pub(crate) fn outbound_bytes(&self) -> u64 {
        self.gateway.as_ref().map_or(0, |g| {
            g.shard_stats.iter().map(|s| s.outbound_bytes.get()).sum()
        })
    }
}
