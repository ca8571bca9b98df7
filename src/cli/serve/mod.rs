//! `pricewire serve`: the price service.
//!
//! With no arguments it runs the built-in synthetic feed over the default
//! instruments, so a newcomer sees prices at once. The flags are in
//! `args`, the recorder wiring in `record`, the report loop and the
//! graceful shutdown in `lifecycle`.

mod args;
mod lifecycle;
mod record;

pub use args::ServeArgs;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Receiver;
use rand::SeedableRng;

use super::error::Cause;
use super::{refuse, ArgsError};
use crate::bus::BusRole;
use crate::capture::{RecorderHandle, RecorderTap};
use crate::clock::{Clock, MonotonicClock, NS_PER_MS};
use crate::config::Config;
use crate::feed::fix::FixFeed;
use crate::feed::synthetic::SyntheticConfig;
use crate::ops::memory::MemoryReturn;
use crate::ops::metrics::catalogue;
use crate::ops::metrics::{SharedHistogram, LATENCY_BUCKETS_S};
use crate::ops::{
    Health, OpsServer, Registry, SignalCallbacks, SignalWatcher, DEFAULT_LIVENESS_STALE_MS,
};
use crate::refdata::{RefData, RefDataConfig, RefDataFile};
use crate::runtime::latency::{LATENCY_NS_MAX, LATENCY_NS_MIN, LATENCY_SIGFIG};
use crate::runtime::supervise::EXIT_STAGE_DIED;
use crate::runtime::Supervisor;
use crate::service::{Service, ServiceConfig};
use lifecycle::{report_loop, shutdown};
use record::{register_recorder, start_recorder};

/// Why `serve` stopped before it served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A flag or the config was refused.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// A listener, the drill switch or the service could not start; the
    /// message names what.
    #[error("{0}")]
    Start(#[source] Cause),
}

impl ServeError {
    fn start(source: impl Into<Cause>) -> Self {
        Self::Start(source.into())
    }
}

/// Runs the service; returns the exit code.
pub fn run(args: ServeArgs) -> i32 {
    let plan = match Plan::from_args(&args) {
        Ok(p) => p,
        Err(e) => return refuse(e),
    };
    if let Err(e) = bind_listeners(&args, &plan) {
        crate::runtime::listen::release_prebound();
        return refuse(e);
    }
    let clock = Arc::new(MonotonicClock);
    let supervisor = match supervision() {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    let health =
        Health::with_supervisor(clock.clone(), DEFAULT_LIVENESS_STALE_MS, supervisor.clone());
    let registry = Registry::new();
    let ops_server = match OpsServer::spawn(plan.ops.listen, health.clone(), registry.clone()) {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    let (begin_tx, begin_rx) = crossbeam_channel::bounded::<()>(1);
    let forced = Arc::new(AtomicBool::new(false));
    let _signals = match watch_signals(&health, begin_tx, forced.clone()) {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    if !stagger(&args, &plan, &*clock, &begin_rx) {
        return 0;
    }
    let _reload = match watch_reload(&plan.tls, &supervisor) {
        Ok(w) => w,
        Err(e) => return refuse(e),
    };
    let (recorder, tap) = match start_recorder(&args, &plan.config, &supervisor) {
        Ok(r) => r,
        Err(e) => return refuse(e),
    };
    let recorder = Arc::new(Mutex::new(recorder));
    let grace = Duration::from_millis(plan.ops.stage_exit_grace_ms);
    if let Err(e) = supervisor.watch(grace, flush_on_death(recorder.clone())) {
        return refuse(format!("the stage supervisor could not start: {e}"));
    }
    let service = match start_service(&args, &plan, tap, &supervisor) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let recorded = recorder.lock().expect("recorder lock");
    let (latency, mut memory) = register_metrics(&registry, &service, recorded.as_ref());
    drop(recorded);
    health.set_serving();
    tracing::info!(ops = %ops_server.local_addr(), "serving");
    let service = Arc::new(Mutex::new(Some(service)));
    report_loop(
        &args,
        &service,
        &registry,
        &health,
        &latency,
        &begin_rx,
        &mut memory,
    );
    let mut code = shutdown(&plan, &health, &service, &recorder, &*clock, &forced);
    if let Some(s) = service.lock().expect("service lock").take() {
        s.stop();
    }
    health.set_stopped();
    ops_server.stop();
    if let Some(death) = supervisor.first_death() {
        // A stage died during the shutdown: not a clean exit.
        tracing::error!(%death, "a stage died; exiting non-zero");
        code = EXIT_STAGE_DIED;
    }
    tracing::info!(exit_code = code, "stopped");
    code
}

/// The drill switch (read once, here) and the supervisor of every stage;
/// panics contained at a connection boundary are kept off stderr (their
/// boundary logs them, thinned).
fn supervision() -> Result<Supervisor, ServeError> {
    if let Some(d) = crate::runtime::drill::arm_from_env().map_err(ServeError::start)? {
        tracing::warn!(drill = ?d, env = crate::runtime::drill::ENV,
            "fault drill armed: a planted panic will fire (never in production)");
    }
    if let Some(s) = crate::runtime::drill::arm_stall_from_env().map_err(ServeError::start)? {
        tracing::warn!(drill = ?s, env = crate::runtime::drill::STALL_ENV,
            "stall drill armed: a stage will stop for a while (never in production)");
    }
    crate::runtime::contain::install_panic_hook();
    Ok(Supervisor::new())
}

/// What the supervisor runs once a stage died, on a thread of its own
/// within the grace: the recorder drains, flushes and fsyncs what it holds.
/// It waits for the lock: the main thread holds it briefly while it
/// registers the recorder's metrics (a death then must still flush), and
/// while the shutdown closes the recorder (the slot is then empty). The
/// process exits at the end of the grace whether or not this finished.
fn flush_on_death(recorder: Arc<Mutex<Option<RecorderHandle>>>) -> Box<dyn FnOnce() + Send> {
    Box::new(move || {
        let mut slot = recorder.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rec) = slot.take() {
            let totals = rec.stop();
            tracing::warn!(recorded = totals.stats.recorded, error = ?totals.error,
                "capture flushed after a stage died");
        }
    })
}

/// Registers the service's metrics, the tick-to-publish histogram, the
/// recorder's and the memory families; a failure is logged (the service
/// runs without them rather than not at all).
fn register_metrics(
    registry: &Registry,
    service: &Service,
    recorder: Option<&RecorderHandle>,
) -> (Arc<SharedHistogram>, MemoryReturn) {
    let latency = Arc::new(
        SharedHistogram::new(LATENCY_NS_MIN, LATENCY_NS_MAX, LATENCY_SIGFIG)
            .expect("static histogram bounds"),
    );
    let memory = MemoryReturn::default();
    let registered = service
        .register_metrics(registry)
        .and_then(|_| {
            registry.register_hdr_ns(
                catalogue::TICK_TO_PUBLISH_LATENCY,
                &[],
                latency.clone(),
                LATENCY_BUCKETS_S,
            )
        })
        .and_then(|_| register_recorder(registry, recorder))
        .and_then(|_| memory.register(registry));
    if let Err(e) = registered {
        tracing::error!(error = %e, "metrics registration failed");
    }
    (latency, memory)
}

/// Binds every listener (subscribers, provider ingest, ops) before any
/// stage starts, so a port in use stops start-up with the flag named and
/// nothing else begun; the stages then take these sockets.
fn bind_listeners(args: &ServeArgs, plan: &Plan) -> Result<(), ServeError> {
    use crate::runtime::listen;
    let granted = listen::set_backlog(args.listen_backlog);
    let mut wanted = Vec::new();
    // A core serves no subscribers and an edge takes no provider feeds
    // (`bus_args::fit_role`): their listeners are not bound at all.
    let role = args.bus_role().ok().flatten();
    let core = matches!(role, Some(crate::bus::BusRole::Core(_)));
    let edge = matches!(role, Some(crate::bus::BusRole::Edge(_)));
    if !args.gateway.no_listen && !core {
        wanted.push(("--listen", args.gateway.listen));
    }
    if let Some(a) = args.gateway.feed_listen.filter(|_| !edge) {
        wanted.push(("--feed-listen", a));
    }
    wanted.push(("--ops-listen", plan.ops.listen));
    let locals = listen::prebind(&wanted).map_err(ServeError::start)?;
    for ((flag, _), local) in wanted.iter().zip(locals) {
        tracing::info!(flag, %local, backlog = granted, "listening");
    }
    Ok(())
}

/// Everything validated before anything starts.
struct Plan {
    config: Arc<Config>,
    ops: crate::ops::OpsConfig,
    /// Each listener's TLS, loaded once here and reloaded on SIGHUP.
    tls: crate::cli::gateway_args::ListenerTls,
    /// The provider ingest listener's settings (its shared token read).
    ingest: Option<crate::feed::ingest::IngestConfig>,
    /// The Redis `AUTH` password, if any.
    redis_password: Option<String>,
}

impl Plan {
    fn from_args(args: &ServeArgs) -> Result<Plan, ArgsError> {
        let config = args.load_config()?;
        args.check_rt_waits()?;
        args.pipeline_config()
            .validate()
            .map_err(ArgsError::invalid)?;
        args.gateway_config()?;
        args.request_config()?;
        if let Some(BusRole::Core(bus) | BusRole::Edge(bus)) = args.bus_role()? {
            // The credentials and TLS files, read once before anything
            // starts (the bus thread reads them again at each connect).
            args.bus.security.warn_loose_files();
            bus.check_access().map_err(ArgsError::invalid)?;
        }
        let ops = args.ops.validate().map_err(ArgsError::invalid)?;
        let tls = args.gateway.listener_tls()?;
        let mut ingest = args
            .gateway
            .ingest_config(args.feed_wait(), &args.placement())?;
        if let Some(i) = ingest.as_mut() {
            i.tls = tls.feed.clone();
        }
        Ok(Plan {
            config: Arc::new(config),
            ops,
            tls,
            ingest,
            redis_password: redis_password(args)?,
        })
    }
}

fn start_service(
    args: &ServeArgs,
    plan: &Plan,
    recorder: Option<RecorderTap>,
    supervisor: &Supervisor,
) -> Result<Service, ServeError> {
    let config = plan.config.clone();
    let synthetic = (!args.no_synthetic).then(|| SyntheticConfig {
        rate_per_s: args.synthetic_rate,
        seed: args.seed,
        ..SyntheticConfig::default()
    });
    tracing::info!(
        instruments = config.table.len(),
        tiers = config.table.tiers().len(),
        providers = config.table.providers().len(),
        synthetic_rate = args.synthetic_rate,
        shards = args.shard_count(),
        threading = ?args.threading,
        "starting pricewire"
    );
    let cfg_config = config.clone();
    let mut sources: Vec<(String, Box<dyn crate::feed::TickSource>)> = Vec::new();
    let mut fix = None;
    let edge = matches!(args.bus_role()?, Some(crate::bus::BusRole::Edge(_)));
    if edge && !config.fix.is_empty() {
        tracing::info!(
            sessions = config.fix.len(),
            "FIX providers in the config are not started on an edge"
        );
    }
    if !config.fix.is_empty() && !edge {
        // Reconnect jitter from the OS's entropy, not `--seed`: a fleet
        // restarted together must not reconnect to its LPs in step.
        let feed = FixFeed::new(&config.fix, crate::clock::monotonic_ns(), rand::random())
            .map_err(|e| ArgsError::refused("FIX providers", e))?;
        fix = Some((feed.health_slot(), feed.stats()));
        tracing::info!(
            sessions = config.fix.len(),
            "FIX market-data sessions configured"
        );
        sources.push(("fix".into(), Box::new(feed)));
    }
    let mut gateway = args.gateway_config()?;
    if let Some(g) = gateway.as_mut() {
        g.tls = plan.tls.subscriber.clone();
    }
    let ingest = plan.ingest.clone();
    let mut cfg = ServiceConfig {
        config,
        pipeline: args.pipeline_config(),
        synthetic,
        sources,
        gateway,
        ingest,
        shard_wait: args.shard_wait(),
        recorder,
        requests: args.request_config()?,
        refdata: start_refdata(
            args,
            &cfg_config,
            plan.redis_password.as_deref(),
            supervisor,
        )?,
        bus: args.bus_role()?,
        supervisor: supervisor.clone(),
    };
    crate::cli::bus_args::fit_role(&mut cfg);
    let mut service = Service::start(cfg).map_err(ServeError::start)?;
    if let Some((slot, stats)) = fix {
        // Breakers flip provider health in the engine from here on.
        let _ = slot.set(service.pipeline.handles.health.clone());
        service.fix = Some(stats);
    }
    Ok(service)
}

/// The Redis `AUTH` password: from --redis-password-file, the --redis
/// URL, or PRICEWIRE_REDIS_PASSWORD (see [`crate::cli::secret`]).
fn redis_password(args: &ServeArgs) -> Result<Option<String>, ArgsError> {
    let Some(url) = &args.redis else {
        return Ok(None);
    };
    let shown = crate::refdata::settings::redact_url(url);
    let cfg = RefDataConfig::from_url(url)
        .map_err(|e| ArgsError::refused(format!("--redis {shown}"), e))?;
    let password = crate::cli::secret::Sources {
        flag: "--redis",
        value: cfg.redis.password.as_deref(),
        file_flag: "--redis-password-file",
        file: args.redis_password_file.as_deref(),
        env: REDIS_PASSWORD_ENV,
        env_value: std::env::var_os(REDIS_PASSWORD_ENV),
    }
    .resolve(None)?;
    Ok(password.map(|p| p.value))
}

fn start_refdata(
    args: &ServeArgs,
    config: &Config,
    redis_password: Option<&str>,
    supervisor: &Supervisor,
) -> Result<Option<Arc<RefData>>, ArgsError> {
    // `[refdata]` is checked with or without `--redis`: a typo is refused
    // at start, not when Redis is switched on.
    let file = RefDataFile::from_table(&config.refdata)
        .and_then(|f| f.check().map(|()| f))
        .map_err(|e| ArgsError::refused("[refdata]", e))?;
    let Some(url) = &args.redis else {
        return Ok(None);
    };
    // The URL may carry a password: only its redacted form is shown.
    let shown = crate::refdata::settings::redact_url(url);
    let mut cfg = RefDataConfig::from_url(url)
        .map_err(|e| ArgsError::refused(format!("--redis {shown}"), e))?;
    cfg.redis.password = redis_password.map(str::to_string);
    file.apply(&mut cfg)
        .map_err(|e| ArgsError::refused("[refdata]", e))?;
    let rd = RefData::start_redis(
        &cfg,
        config.table.clone(),
        Arc::new(MonotonicClock),
        supervisor,
    )
    .map_err(|e| ArgsError::refused(format!("--redis {shown}"), e))?;
    tracing::info!(
        url = %shown,
        ttl_ms = cfg.cache.ttl_ms,
        io_timeout_ms = cfg.redis.io_timeout_ms,
        breaker_consecutive_failures = cfg.redis.breaker_consecutive_failures,
        "accounts from Redis"
    );
    Ok(Some(Arc::new(rd)))
}

/// Environment variable of the Redis `AUTH` password.
const REDIS_PASSWORD_ENV: &str = "PRICEWIRE_REDIS_PASSWORD";

/// SIGHUP reads every TLS listener's files again (see
/// [`TlsAcceptor::reload`](crate::runtime::tls::TlsAcceptor::reload));
/// without TLS nothing watches it.
fn watch_reload(
    tls: &crate::cli::gateway_args::ListenerTls,
    supervisor: &Supervisor,
) -> Result<Option<crate::ops::ReloadWatcher>, crate::ops::OpsError> {
    let acceptors: Vec<_> = tls.all().cloned().collect();
    if acceptors.is_empty() {
        return Ok(None);
    }
    let reload = Box::new(move || {
        tracing::info!("SIGHUP: reloading TLS certificates");
        for a in &acceptors {
            // A refused reload is logged and counted by the acceptor.
            let _ = a.reload();
        }
    });
    crate::ops::ReloadWatcher::spawn(reload, supervisor).map(Some)
}

fn watch_signals(
    health: &Arc<Health>,
    begin: crossbeam_channel::Sender<()>,
    forced: Arc<AtomicBool>,
) -> Result<SignalWatcher, crate::ops::OpsError> {
    let h = health.clone();
    SignalWatcher::spawn(
        SignalCallbacks {
            on_first: Box::new(move |sig| {
                tracing::info!(signal = sig, "shutdown requested: readiness now fails");
                h.begin_draining();
                let _ = begin.try_send(());
            }),
            on_second: Box::new(move |sig| {
                forced.store(true, Ordering::Release);
                eprintln!("second signal {sig}: exiting at once");
                std::process::exit(crate::ops::shutdown::EXIT_FORCED);
            }),
        },
        health.supervisor(),
    )
}

/// Staggered start-up. Applies in Kubernetes (KUBERNETES_SERVICE_HOST set)
/// or when `--ordinal` / `--pod-name` is given; a developer's `serve`
/// starts at once. Returns false if a signal arrived while waiting.
fn stagger(args: &ServeArgs, plan: &Plan, clock: &dyn Clock, begin: &Receiver<()>) -> bool {
    let explicit = args.ops.ordinal.is_some() || args.ops.pod_name.is_some();
    if !explicit && std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
        return true;
    }
    let mut rng = rand::rngs::SmallRng::from_entropy();
    let p = crate::ops::stagger::plan(
        &plan.ops.stagger,
        plan.ops.ordinal,
        plan.ops.pod_name.as_deref(),
        &mut rng,
    );
    tracing::info!(delay_ms = p.delay_ms(), "staggered start-up: waiting");
    let until = clock.now_ns() + p.delay_ms() * NS_PER_MS;
    while clock.now_ns() < until {
        let left = Duration::from_nanos(until.saturating_sub(clock.now_ns()));
        if begin
            .recv_timeout(left.min(Duration::from_millis(100)))
            .is_ok()
        {
            return false;
        }
    }
    true
}
