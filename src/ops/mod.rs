//! Operations layer: metrics, probes, graceful shutdown, staggered start-up.
//!
//! Contract: none of this runs on the hot path. Subsystems count in their
//! own stats structs of atomics; the ops listener reads them at scrape time
//! on its own threads. Every queue and pool here is bounded (ops worker
//! queue, request head size, time budgets); the shutdown core and the
//! stagger are pure computations driven by an injected clock and RNG.
//!
//! # Wiring it into `pricewire serve`
//!
//! ```no_run
//! use pricewire::clock::{Clock, MonotonicClock};
//! use pricewire::ops::{self, metrics::catalogue, Health, OpsArgs, OpsServer, Registry};
//! use rand::SeedableRng;
//! use std::sync::{atomic::{AtomicBool, AtomicU64}, Arc};
//!
//! # fn main() -> Result<(), ops::OpsError> {
//! let args = OpsArgs::default(); // in serve: `#[command(flatten)] ops: OpsArgs`
//! let cfg = args.validate()?;     // clear message on bad values
//! let clock = Arc::new(MonotonicClock);
//! let health = Health::new(clock.clone(), ops::DEFAULT_LIVENESS_STALE_MS);
//! let registry = Registry::new();
//!
//! // Each subsystem registers readers of its own atomics once, at start-up.
//! let ticks_lp1 = Arc::new(AtomicU64::new(0));
//! registry.register_counter(catalogue::TICKS_RECEIVED, &[("provider", "lp1")], ticks_lp1.clone())?;
//!
//! let server = OpsServer::spawn(cfg.listen, health.clone(), registry.clone())?;
//!
//! // Stagger, then serve. /startupz answers 503 until set_serving.
//! let mut rng = rand::rngs::SmallRng::from_entropy();
//! let stagger = ops::stagger::plan(&cfg.stagger, cfg.ordinal, cfg.pod_name.as_deref(), &mut rng);
//! registry.register_gauge_fn(catalogue::START_STAGGER, &[], {
//!     let s = stagger.delay_ms() as f64 / 1000.0;
//!     move || s
//! })?;
//! let mut wait = ops::shutdown::sleep_until(MonotonicClock);
//! wait(clock.now_ns() + stagger.delay_ms() * pricewire::clock::NS_PER_MS);
//! health.set_serving();
//!
//! // Signals: the first begins the plan, the second exits at once.
//! let (begin_tx, begin_rx) = crossbeam_channel::bounded::<()>(1);
//! let forced = Arc::new(AtomicBool::new(false));
//! let forced_cb = forced.clone();
//! let h = health.clone();
//! let _signals = ops::SignalWatcher::spawn(ops::SignalCallbacks {
//!     on_first: Box::new(move |_| { h.begin_draining(); let _ = begin_tx.try_send(()); }),
//!     on_second: Box::new(move |_| {
//!         forced_cb.store(true, std::sync::atomic::Ordering::Release);
//!         std::process::exit(ops::shutdown::EXIT_FORCED);
//!     }),
//! }, health.supervisor())?;
//! // ... main loop: health.beat() every turn, until begin_rx has a message ...
//! # let _ = begin_rx;
//! let done = |_: u64, _: u64| ops::StepResult::Done; // the service's real steps go here
//! let hooks = ops::ShutdownHooks {
//!     stop_accepting: Box::new(done), finish_in_flight: Box::new(done),
//!     flush_outbound: Box::new(done), disconnect_subscribers: Box::new(done),
//!     close_recorder: Box::new(done),
//! };
//! let plan = ops::standard_plan(health.clone(), cfg.budgets, hooks);
//! let report = ops::Shutdown::run(plan, &*clock, &mut ops::shutdown::sleep_until(clock.clone()), &forced);
//! health.set_stopped();
//! server.stop();
//! std::process::exit(report.exit_code);
//! # }
//! ```
//!
//! The metric families and their meaning: [`metrics::catalogue`] and
//! `docs/operations.md`.

pub mod config;
pub mod health;
pub mod http;
pub mod memory;
pub mod metrics;
pub mod shutdown;
pub mod signals;
pub mod stagger;

pub use config::{OpsArgs, OpsConfig, STARTUP_ALLOWANCE_MS};
pub use health::{Health, HealthState, DEFAULT_LIVENESS_STALE_MS};
pub use http::{OpsHandle, OpsServer, OpsServerConfig, DEFAULT_OPS_LISTEN};
pub use metrics::{Collect, HistogramSnapshot, Registry, Sink};
pub use shutdown::{
    standard_plan, Shutdown, ShutdownBudgets, ShutdownHooks, ShutdownPlan, ShutdownReport,
    StepResult, DEFAULT_DRAIN_DELAY_MS, DEFAULT_GRACE_MS,
};
pub use signals::{ReloadWatcher, SignalCallbacks, SignalWatcher};
pub use stagger::{
    StaggerConfig, StaggerPlan, DEFAULT_STAGGER_CAP_MS, DEFAULT_STAGGER_JITTER_MS,
    DEFAULT_STAGGER_STEP_MS,
};

/// Errors of the operations layer.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// A flag value was refused.
    #[error("invalid {flag}: {reason}")]
    InvalidFlag {
        /// The refused flag, as typed (`--ops-listen`, ...).
        flag: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The ops listener could not be set up.
    #[error("ops listener on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why the bind failed.
        source: std::io::Error,
    },
    /// Signal handlers could not be installed.
    #[error("signal handling: {0}")]
    Signals(std::io::Error),
    /// A metric registration did not match its documented family.
    #[error("metric registration: {0}")]
    Metric(String),
    /// A family defined at run time breaks a naming rule.
    #[error("metric registration: {0}")]
    Naming(#[source] metrics::catalogue::NamingError),
}
