//! The assembled price service: pipeline, provider ingest, subscriber
//! gateway (or measuring sinks when headless), and the metrics they export.
//!
//! `pricewire serve`, the integration tests and the bench tool all start
//! the service through [`Service::start`], so they run the same wiring.
// Documentation debt: remove this allow once the public items here are documented.
#![allow(missing_docs)]

mod auth_metrics;
pub mod report;

use std::sync::Arc;
use std::thread::JoinHandle;

use crate::bus::{BusConfig, BusError, BusHandle, BusPublisher, BusRole, BusSubscriber};
use crate::config::Config;
use crate::feed::ingest::{self, IngestConfig, IngestHandle};
use crate::feed::synthetic::{SyntheticConfig, SyntheticFeed};
use crate::feed::TickSource;
use crate::gateway::{Gateway, GatewayConfig, GatewayDeps};
use crate::ops::metrics::catalogue as m;
use crate::ops::{OpsError, Registry};
use crate::overload::stats::OverloadStats;
use crate::pipeline::sink::{ShardSink, SinkStats};
use crate::pipeline::{Pipeline, PipelineConfig, PipelineError, PipelineHandles, RecorderTap};
use crate::refdata::RefData;
use crate::requests::service::{RequestConfig, RequestStats};
use crate::runtime::{Stage, Threading, WaitStrategy};
use report::LatencyCollector;

/// What to start.
pub struct ServiceConfig {
    pub config: Arc<Config>,
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
        }
    }
}

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error("gateway: {0}")]
    Gateway(std::io::Error),
    #[error("provider ingest: {0}")]
    Ingest(std::io::Error),
    #[error("bus: {0}")]
    Bus(#[from] BusError),
}

/// The parts of a [`ServiceConfig`] that decide what takes the shard
/// rings (see `Service::start_consumers`).
struct Consumers {
    gateway: Option<GatewayConfig>,
    requests: RequestConfig,
    refdata: Option<Arc<RefData>>,
    shard_wait: WaitStrategy,
}

/// A running service.
pub struct Service {
    pub config: Arc<Config>,
    /// Declared before `pipeline`: fields drop in order, and the engine
    /// only finishes once every feed (the ingest listener's included) has
    /// let go of its ring.
    pub ingest: Option<IngestHandle>,
    pub pipeline: Pipeline,
    pub gateway: Option<Gateway>,
    pub overload: Arc<OverloadStats>,
    pub sink_stats: Vec<Arc<SinkStats>>,
    pub latency: LatencyCollector,
    /// FIX sessions' counters and breakers, when FIX providers run.
    pub fix: Option<Arc<crate::feed::fix::FixFeedStats>>,
    /// The NATS bus thread (`--role core|edge`).
    pub bus: Option<BusHandle>,
    sinks: Vec<JoinHandle<()>>,
}

impl Service {
    pub fn start(mut cfg: ServiceConfig) -> Result<Service, ServiceError> {
        if let Some(BusRole::Edge(bus)) = cfg.bus.clone() {
            return Self::start_edge(cfg, &bus);
        }
        check_core_threading(&cfg)?;
        let config = cfg.config.clone();
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
        let ports = cfg.ingest.iter().map(|_| "ingest".to_string()).collect();
        let parts = Pipeline::start(&cfg.pipeline, &config, sources, ports, cfg.recorder.take())?;
        let mut pipeline = parts.pipeline;
        let overload = Arc::new(OverloadStats::default());
        let (latency, exchanges) = LatencyCollector::new(parts.shards.len());
        let mut service_ingest = None;
        let mut shards = parts.shards;
        let bus = match start_core_bus(cfg.bus.take(), &config, &mut shards) {
            Ok(b) => b,
            Err(e) => {
                drop(shards);
                pipeline.stop();
                return Err(e.into());
            }
        };
        if let (Some(icfg), Some(port)) = (cfg.ingest, parts.ports.into_iter().next()) {
            let table = Arc::new(config.table.clone());
            // Shared threading with a gateway: shard 0 watches the ingest
            // listener's sockets too. A headless sink cannot watch
            // descriptors, so without a gateway the listener keeps its thread.
            let host = cfg.pipeline.threading == Threading::Shared && cfg.gateway.is_some();
            let started = if host {
                ingest::hosted(icfg, table, port).map(|(h, task)| {
                    // Ahead of the engine: quotes read in a turn are
                    // priced in the same turn.
                    shards[0].hosted.push_first(task);
                    h
                })
            } else {
                ingest::spawn(icfg, table, port)
            };
            match started {
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
        let consumers = Consumers {
            gateway: cfg.gateway,
            requests: cfg.requests,
            refdata: cfg.refdata,
            shard_wait: cfg.shard_wait,
        };
        service.start_consumers(consumers, shards, exchanges, &cfg.pipeline)?;
        Ok(service)
    }

    /// An edge: no feeds and no engine; the bus thread fills the price
    /// table and the gateway shards' rings, and has loaded every last value
    /// before the gateway accepts its first terminal.
    fn start_edge(cfg: ServiceConfig, bus: &BusConfig) -> Result<Service, ServiceError> {
        let config = cfg.config.clone();
        let (shards, ring) = (cfg.pipeline.shards, cfg.pipeline.shard_ring);
        let (sub, parts) = BusSubscriber::start(bus, &config.table, shards, ring)?;
        let handles = PipelineHandles {
            table: parts.table,
            health: crate::model::ProviderHealth::new(config.table.providers().len()),
            engine: Arc::default(),
            fanout: parts.fanout,
            feeds: Vec::new(),
            engine_doorbell: crate::runtime::Doorbell::new(),
            history: Arc::new(crate::engine::TickHistory::new(
                config.table.len(),
                cfg.pipeline.history_depth,
            )),
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
        let consumers = Consumers {
            gateway: cfg.gateway,
            requests: cfg.requests,
            refdata: cfg.refdata,
            shard_wait: cfg.shard_wait,
        };
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
            self.start_sinks(shards, exchanges, pcfg, c.shard_wait);
            return Ok(());
        };
        let deps = GatewayDeps {
            config: self.config.clone(),
            table: self.pipeline.handles.table.clone(),
            overload: self.overload.clone(),
            exchanges: exchanges.into_iter().map(Some).collect(),
            history: Some(self.pipeline.handles.history.clone()),
            requests: c.requests,
            refdata: c.refdata,
        };
        let gw = Gateway::start_with(gcfg, shards, deps).map_err(ServiceError::Gateway)?;
        self.gateway = Some(gw);
        Ok(())
    }

    fn start_sinks(
        &mut self,
        shards: Vec<crate::engine::ShardInput>,
        exchanges: Vec<crate::runtime::latency::HistogramExchange>,
        pcfg: &PipelineConfig,
        wait: WaitStrategy,
    ) {
        let (symbols, tiers) = (self.config.table.len(), self.config.table.tiers().len());
        for (input, exchange) in shards.into_iter().zip(exchanges) {
            let index = input.index;
            let mut sink = ShardSink::new(input, symbols, tiers).with_exchange(exchange);
            self.sink_stats.push(sink.stats.clone());
            let cpus = pcfg.cpus.clone();
            let t = std::thread::Builder::new()
                .name(format!("pw-shard{index}"))
                .spawn(move || {
                    let stage = Stage::Shard(index as u16);
                    if let Err(e) = crate::runtime::affinity::place_current(stage, &cpus) {
                        // As a gateway shard does: a sink left unplaced, or
                        // gone, would leave the service up without prices.
                        tracing::error!("{e}; exiting");
                        std::process::exit(1);
                    }
                    sink.run(wait);
                })
                .expect("spawn shard sink");
            self.sinks.push(t);
        }
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
    pub fn stop_feeds(&mut self) {
        if let Some(i) = self.ingest.take() {
            i.stop();
        }
        self.pipeline.stop();
        // After the engine: a core's bus thread publishes what it left.
        if let Some(b) = self.bus.take() {
            b.stop();
        }
    }

    pub fn stop(mut self) {
        self.stop_feeds();
        if let Some(g) = self.gateway.take() {
            g.stop();
        }
        for t in self.sinks.drain(..) {
            let _ = t.join();
        }
    }

    /// Registers every counter of the service with the metrics registry.
    pub fn register_metrics(&self, r: &Registry) -> Result<(), OpsError> {
        self.register_pipeline(r)?;
        if let Some(g) = &self.gateway {
            register_gateway(r, g)?;
            register_requests(r, g)?;
            if let Some(b) = g.shared.refdata.breaker_stats() {
                register_breaker(r, "redis", b)?;
            }
        }
        if let Some(fix) = &self.fix {
            for p in &fix.providers {
                register_breaker(r, &format!("fix_{}", p.name), p.breaker.clone())?;
            }
            let wall = Arc::new(crate::feed::fix::WallClock);
            crate::feed::fix::metrics::register(r, fix, wall)?;
        }
        if let Some(b) = &self.bus {
            register_bus(r, b.stats())?;
        }
        register_overload(r, &self.overload)
    }

    fn register_pipeline(&self, r: &Registry) -> Result<(), OpsError> {
        if let Some(i) = &self.ingest {
            for why in ingest::quotes::Refusal::ALL {
                let s = i.stats.clone();
                r.register_counter_fn(
                    m::DROPS,
                    &[("reason", &format!("{}_quote_ingest", why.name()))],
                    move || s.refused(why).load(std::sync::atomic::Ordering::Relaxed),
                )?;
            }
        }
        let h = &self.pipeline.handles;
        for (name, f) in &h.feeds {
            let (a, b, c) = (f.clone(), f.clone(), f.clone());
            r.register_counter_fn(m::TICKS_RECEIVED, &[("provider", name)], move || {
                a.pushed.get()
            })?;
            r.register_counter_fn(
                m::DROPS,
                &[("reason", &format!("feed_ring_full_{name}"))],
                move || b.dropped.get(),
            )?;
            r.register_gauge_fn(
                m::RING_OCCUPANCY,
                &[("ring", &format!("feed_{name}"))],
                move || c.ring_occupancy.get() as f64,
            )?;
        }
        let e = h.engine.clone();
        r.register_counter_fn(m::PRICES_PUBLISHED, &[], move || e.published.get())?;
        let drops = [
            ("invalid_tick", 0usize),
            ("spike_rejected", 1),
            ("stale_republish", 2),
        ];
        for (reason, which) in drops {
            let e = h.engine.clone();
            r.register_counter_fn(m::DROPS, &[("reason", reason)], move || match which {
                0 => e.invalid.get(),
                1 => e.spikes_rejected.get(),
                _ => e.stale.get(),
            })?;
        }
        for (i, f) in h.fanout.iter().enumerate() {
            let (a, b) = (f.clone(), f.clone());
            let ring = format!("shard{i}");
            r.register_gauge_fn(m::RING_OCCUPANCY, &[("ring", &ring)], move || {
                a.ring_occupancy.get() as f64
            })?;
            r.register_counter_fn(
                m::CONFLATIONS,
                &[("reason", &format!("engine_ring_full_{ring}"))],
                move || b.conflated.get(),
            )?;
        }
        Ok(())
    }
}

/// A core's engine needs its own thread: with shared threading shard 0
/// would host it, and the bus thread takes shard 0's ring instead.
fn check_core_threading(cfg: &ServiceConfig) -> Result<(), ServiceError> {
    let core = matches!(cfg.bus, Some(BusRole::Core(_)));
    if core && cfg.pipeline.threading == Threading::Shared {
        return Err(BusError::Invalid {
            flag: "--threading",
            reason: "a core needs --threading dedicated".into(),
        }
        .into());
    }
    Ok(())
}

/// A core's bus thread, which takes the first shard ring like a sink.
fn start_core_bus(
    bus: Option<BusRole>,
    config: &Config,
    shards: &mut Vec<crate::engine::ShardInput>,
) -> Result<Option<BusHandle>, BusError> {
    let Some(BusRole::Core(b)) = bus else {
        return Ok(None);
    };
    let input = shards.remove(0);
    let publisher = BusPublisher::start(&b, &config.table, input)?;
    Ok(Some(BusHandle::Core(publisher)))
}

fn register_gateway(r: &Registry, g: &Gateway) -> Result<(), OpsError> {
    for (i, s) in g.shard_stats.iter().enumerate() {
        let shard = i.to_string();
        let (a, b, c) = (s.clone(), s.clone(), s.clone());
        r.register_counter_fn(m::PRICE_UPDATES_SENT, &[("shard", &shard)], move || {
            a.prices_out.get()
        })?;
        r.register_gauge_fn(
            m::CONNECTIONS,
            &[("shard", &shard), ("state", "open")],
            move || b.connections.get() as f64,
        )?;
        r.register_gauge_fn(
            m::CONNECTIONS,
            &[("shard", &shard), ("state", "conflating")],
            move || c.conflating_now.get() as f64,
        )?;
        let e = s.clone();
        r.register_counter_fn(m::HOSTED_INTERLEAVES, &[("shard", &shard)], move || {
            e.interleaves.get()
        })?;
        let f = s.clone();
        r.register_gauge_fn(m::SHARD_BUSY, &[("shard", &shard)], move || {
            f.busy_permille.get() as f64 / 1000.0
        })?;
        let h = s.clone();
        r.register_counter_fn(m::SHARD_STALLS, &[("shard", &shard)], move || {
            h.stalls.get()
        })?;
        let k = s.clone();
        r.register_gauge_fn(m::SHARD_MAX_STALL, &[("shard", &shard)], move || {
            k.max_stall_ms.get() as f64 / 1000.0
        })?;
        for (direction, out) in [("out", true), ("in", false)] {
            let g = s.clone();
            r.register_counter_fn(
                m::SESSIONS_MOVED,
                &[("shard", &shard), ("direction", direction)],
                move || {
                    if out {
                        g.sessions_moved_out.get()
                    } else {
                        g.sessions_moved_in.get()
                    }
                },
            )?;
        }
        let d = s.clone();
        r.register_counter_fn(
            m::CONFLATIONS,
            &[("reason", &format!("slow_subscriber_shard{i}"))],
            move || d.conflated.get(),
        )?;
    }
    auth_metrics::register(r, &g.shared.auth)?;
    let (a, b) = (g.shared.stats.clone(), g.shared.stats.clone());
    r.register_counter_fn(m::CONNECTIONS_ACCEPTED, &[("shard", "all")], move || {
        crate::gateway::GatewayStats::get(&a.accepted)
    })?;
    r.register_counter_fn(
        m::SLOW_CONSUMER_DISCONNECTS,
        &[("shard", "all")],
        move || crate::gateway::GatewayStats::get(&b.disconnects_slow_consumer),
    )?;
    Ok(())
}

/// The bus thread's counters (`--role core|edge`).
fn register_bus(r: &Registry, stats: &Arc<crate::bus::BusStats>) -> Result<(), OpsError> {
    use crate::bus::BusStats;
    type Read = fn(&BusStats) -> u64;
    let events: [(&str, Read); 13] = [
        ("published", |s| s.published.get()),
        ("publish_error", |s| s.publish_errors.get()),
        ("received", |s| s.received.get()),
        ("last_value_loaded", |s| s.last_values_loaded.get()),
        ("duplicate_dropped", |s| s.duplicates_dropped.get()),
        ("gap_flagged", |s| s.gaps_flagged.get()),
        ("decode_error", |s| s.decode_errors.get()),
        ("disconnect", |s| s.disconnects.get()),
        ("reload", |s| s.reloads.get()),
        ("standby_discarded", |s| s.standby_discarded.get()),
        ("lease_taken", |s| s.leases_taken.get()),
        ("lease_lost", |s| s.leases_lost.get()),
        ("stale_epoch_dropped", |s| s.stale_epoch_dropped.get()),
    ];
    for (event, read) in events {
        let s = stats.clone();
        r.register_counter_fn(m::BUS_MESSAGES, &[("event", event)], move || read(&s))?;
    }
    let s = stats.clone();
    r.register_gauge_fn(m::BUS_CONNECTED, &[], move || s.connected.get() as f64)
}

/// Exports one breaker as `dependency` (state one-hot, rates, refusals).
pub fn register_breaker(
    r: &Registry,
    dependency: &str,
    stats: Arc<crate::resilience::breaker::BreakerStats>,
) -> Result<(), OpsError> {
    use crate::resilience::breaker::BreakerState;
    for state in BreakerState::ALL {
        let s = stats.clone();
        let label = state.name();
        r.register_gauge_fn(
            m::BREAKER_STATE,
            &[("dependency", dependency), ("state", label)],
            move || f64::from(u8::from(s.snapshot().state == state)),
        )?;
    }
    let (a, b, c) = (stats.clone(), stats.clone(), stats);
    let ratio = |pct: f64| if pct < 0.0 { 0.0 } else { pct / 100.0 };
    r.register_gauge_fn(
        m::BREAKER_FAILURE_RATE,
        &[("dependency", dependency)],
        move || ratio(a.snapshot().failure_rate_pct),
    )?;
    r.register_gauge_fn(
        m::BREAKER_SLOW_CALL_RATE,
        &[("dependency", dependency)],
        move || ratio(b.snapshot().slow_call_rate_pct),
    )?;
    r.register_counter_fn(
        m::BREAKER_NOT_PERMITTED,
        &[("dependency", dependency)],
        move || c.snapshot().not_permitted_calls,
    )
}

fn register_requests(r: &Registry, g: &Gateway) -> Result<(), OpsError> {
    let Some(st) = g.request_stats() else {
        return Ok(());
    };
    let kinds: [(&str, usize); 3] = [("snapshot", 0), ("symbol_list", 1), ("history", 2)];
    for (kind, k) in kinds {
        let s = st.clone();
        r.register_counter_fn(m::REQUESTS_SERVED, &[("kind", kind)], move || match k {
            0 => s.snapshot_served.get(),
            1 => s.symbol_list_served.get(),
            _ => s.history_served.get(),
        })?;
    }
    let (a, b, st2) = (st.clone(), st.clone(), st);
    r.register_counter_fn(
        m::DROPS,
        &[("reason", "request_answer_ring_full")],
        move || a.answers_dropped.get(),
    )?;
    r.register_counter_fn(m::SHEDS, &[("reason", "expired_at_worker")], move || {
        b.expired_at_worker.get()
    })?;
    register_request_path(r, st2, g.shared.stats.clone())
}

/// The request path's own refusals, hop latencies and queue size.
fn register_request_path(
    r: &Registry,
    st: Arc<RequestStats>,
    gw: Arc<crate::gateway::GatewayStats>,
) -> Result<(), OpsError> {
    use crate::ops::metrics::LATENCY_BUCKETS_S;
    use crate::requests::hops::Hop;
    let (a, c, d) = (st.clone(), st.clone(), st.clone());
    r.register_counter_fn(m::SHEDS, &[("reason", "request_path_full")], move || {
        a.refused_path_full.get()
    })?;
    // The per-connection message limit lives in the sans-IO session, which
    // counts its refusals with the gateway's counters.
    r.register_counter_fn(m::SHEDS, &[("reason", "conn_rate_limited")], move || {
        crate::gateway::GatewayStats::get(&gw.rejects_rate_limited)
    })?;
    r.register_counter_fn(m::REQUEST_REJECTS_DEFERRED, &[], move || {
        c.rejects_deferred.get()
    })?;
    r.register_gauge_fn(m::REQUEST_QUEUE_CAPACITY, &[], move || {
        d.queue_capacity.get() as f64
    })?;
    for hop in Hop::ALL {
        let shared = st.hops.shared(hop);
        r.register_hdr_ns(
            m::REQUEST_HOP,
            &[("hop", hop.name())],
            shared,
            LATENCY_BUCKETS_S,
        )?;
    }
    let queue_wait = st.hops.shared(Hop::QueueWait);
    r.register_hdr_ns(m::REQUEST_QUEUE_SOJOURN, &[], queue_wait, LATENCY_BUCKETS_S)
}

fn register_overload(r: &Registry, o: &Arc<OverloadStats>) -> Result<(), OpsError> {
    use crate::admission::Stage as AStage;
    use crate::requests::ShedReason;
    for reason in ShedReason::ALL {
        let o = o.clone();
        r.register_counter_fn(m::SHEDS, &[("reason", reason.name())], move || {
            o.snapshot().shed_of(reason)
        })?;
    }
    for stage in AStage::ALL {
        let o = o.clone();
        r.register_counter_fn(
            m::ADMISSION_REJECTS,
            &[("stage", stage.name())],
            move || o.snapshot().rejects_at(stage),
        )?;
    }
    let (a, b) = (o.clone(), o.clone());
    r.register_gauge_fn(m::REQUEST_QUEUE_DEPTH, &[], move || {
        a.snapshot().queue_depth as f64
    })?;
    r.register_gauge_fn(m::REQUEST_QUEUE_OVERLOADED, &[], move || {
        f64::from(u8::from(b.snapshot().overloaded))
    })?;
    register_overload_extras(r, o)
}

/// Every other overload value (LIFO mode, sojourn min/p99, adaptive limit
/// and the RTTs it reacts to, ...) under the stable names the overload
/// stats give them, as unlabelled families of their own.
fn register_overload_extras(r: &Registry, o: &Arc<OverloadStats>) -> Result<(), OpsError> {
    use crate::ops::metrics::catalogue::{FamilyDesc, MetricKind};
    let mut names: Vec<(&'static str, bool)> = Vec::new();
    o.snapshot().for_each_metric(|name, label, _| {
        let known = crate::ops::metrics::catalogue::family(name).is_some();
        if label.is_none() && !known && !names.iter().any(|(n, _)| *n == name) {
            names.push((name, name.ends_with("_total")));
        }
    });
    for (name, counter) in names {
        let unit = if name.ends_with("_ns") {
            "nanoseconds"
        } else {
            "count"
        };
        r.define(FamilyDesc {
            name,
            kind: if counter {
                MetricKind::Counter
            } else {
                MetricKind::Gauge
            },
            labels: &[],
            unit,
            owner: "requests",
            help: "Overload control value; see docs/overload.md.",
        })?;
        let o = o.clone();
        let read = move || {
            let mut v = 0;
            o.snapshot().for_each_metric(|n, l, x| {
                if n == name && l.is_none() {
                    v = x;
                }
            });
            v
        };
        if counter {
            r.register_counter_fn(name, &[], read)?;
        } else {
            r.register_gauge_fn(name, &[], move || read() as f64)?;
        }
    }
    Ok(())
}

impl Service {
    /// Requests queued or being served.
    pub fn requests_in_flight(&self) -> u64 {
        self.gateway.as_ref().map_or(0, |g| g.requests_in_flight())
    }

    /// Bytes waiting in subscriber outbound buffers (sampled by shards).
    pub fn outbound_bytes(&self) -> u64 {
        self.gateway.as_ref().map_or(0, |g| {
            g.shard_stats.iter().map(|s| s.outbound_bytes.get()).sum()
        })
    }
}
