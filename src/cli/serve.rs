//! `pricewire serve`: the price service.
//!
//! With no arguments it runs the built-in synthetic feed over the default
//! instruments, so a newcomer sees prices at once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;

use super::refuse;
use super::report::{line, LatencyCollector, Totals};
use crate::config::Config;
use crate::feed::synthetic::{SyntheticConfig, SyntheticFeed};
use crate::feed::TickSource;
use crate::pipeline::sink::{latency_histogram, ShardSink};
use crate::pipeline::{
    CpuMap, Pipeline, PipelineConfig, WaitStrategy, FEED_FULL_WAIT_US_DEFAULT, FEED_RING_DEFAULT,
    SHARD_RING_DEFAULT,
};

/// Flags of `pricewire serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TOML configuration file (instruments, tiers, providers, accounts,
    /// engine). Absent sections keep the built-in defaults.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Synthetic providers when the config names none.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub providers: usize,

    /// Synthetic feed rate in ticks per second across all symbols
    /// (0 = as fast as the pipeline takes them).
    #[arg(long, default_value_t = 100_000, value_name = "TICKS_PER_S")]
    pub synthetic_rate: u64,

    /// Run without the synthetic feed (prices only from ingest or replay).
    #[arg(long)]
    pub no_synthetic: bool,

    /// Seed of the synthetic feed; the same seed gives the same quotes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Gateway shards (one engine ring and one thread each).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub shards: usize,

    /// Feed → engine ring capacity in ticks (power of two).
    #[arg(long, default_value_t = FEED_RING_DEFAULT, value_name = "TICKS")]
    pub feed_ring: usize,

    /// Engine → shard ring capacity in prices (power of two).
    #[arg(long, default_value_t = SHARD_RING_DEFAULT, value_name = "PRICES")]
    pub shard_ring: usize,

    /// How the feed thread waits when idle.
    #[arg(long, value_enum, default_value_t = WaitStrategy::SpinPark)]
    pub feed_wait: WaitStrategy,

    /// How the engine thread waits when idle.
    #[arg(long, value_enum, default_value_t = WaitStrategy::SpinPark)]
    pub engine_wait: WaitStrategy,

    /// How shard threads wait when idle.
    #[arg(long, value_enum, default_value_t = WaitStrategy::SpinPark)]
    pub shard_wait: WaitStrategy,

    /// Stage-to-core pinning, e.g. `feed=0,engine=1,shard=1`. Unpinned by
    /// default; a mapped stage that cannot be pinned fails start-up.
    #[arg(long, default_value = "", value_name = "MAP")]
    pub cpus: CpuMap,

    /// Longest a feed waits for room in a full ring before dropping, in
    /// microseconds.
    #[arg(long, default_value_t = FEED_FULL_WAIT_US_DEFAULT, value_name = "US")]
    pub feed_full_wait_us: u64,

    /// Provider quotes older than this are excluded from aggregation, in
    /// milliseconds (overrides the config file; default 2000).
    #[arg(long, value_name = "MS")]
    pub max_quote_age_ms: Option<u64>,

    /// Spike filter band in basis points of the last mid (overrides the
    /// config file; default 100).
    #[arg(long, value_name = "BPS")]
    pub spike_bps: Option<u32>,

    /// Interval of the one-line status report, in milliseconds.
    #[arg(long, default_value_t = 2_000, value_name = "MS")]
    pub report_interval_ms: u64,

    /// Stop after this many seconds (0 = run until signalled).
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub duration_s: u64,
}

impl ServeArgs {
    fn pipeline_config(&self) -> PipelineConfig {
        PipelineConfig {
            feed_ring: self.feed_ring,
            shard_ring: self.shard_ring,
            shards: self.shards,
            feed_wait: self.feed_wait,
            engine_wait: self.engine_wait,
            cpus: self.cpus.clone(),
            feed_full_wait_us: self.feed_full_wait_us,
        }
    }

    /// Loads the config file (or the built-in default) and applies the
    /// flags that override it.
    pub fn load_config(&self) -> Result<Config, String> {
        let mut config = match &self.config {
            Some(p) => Config::load(p, self.providers),
            None => crate::config::ConfigFile::default().resolve(self.providers),
        }
        .map_err(|e| e.to_string())?;
        if let Some(ms) = self.max_quote_age_ms {
            if ms == 0 {
                return Err("--max-quote-age-ms: must be at least 1".into());
            }
            config.engine.max_quote_age_ms = ms;
        }
        if let Some(bps) = self.spike_bps {
            if bps == 0 || bps > 10_000 {
                return Err("--spike-bps: must be 1..=10000".into());
            }
            config.engine.spike_bps = bps;
        }
        if self.report_interval_ms == 0 {
            return Err("--report-interval-ms: must be at least 1".into());
        }
        Ok(config)
    }
}

/// Runs the service; returns the exit code.
pub fn run(args: ServeArgs) -> i32 {
    let config = match args.load_config() {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    let pcfg = args.pipeline_config();
    if let Err(e) = pcfg.validate() {
        return refuse(e);
    }
    let mut sources: Vec<(String, Box<dyn TickSource>)> = Vec::new();
    if !args.no_synthetic {
        let feed = SyntheticFeed::new(
            &config.table,
            SyntheticConfig {
                rate_per_s: args.synthetic_rate,
                seed: args.seed,
                ..SyntheticConfig::default()
            },
        );
        sources.push(("synthetic".into(), Box::new(feed)));
    }
    tracing::info!(
        instruments = config.table.len(),
        tiers = config.table.tiers().len(),
        providers = config.table.providers().len(),
        synthetic_rate = args.synthetic_rate,
        shards = args.shards,
        "starting pricewire"
    );
    let parts = match Pipeline::start(&pcfg, &config, sources, Vec::new(), None) {
        Ok(p) => p,
        Err(e) => return refuse(e),
    };
    let mut pipeline = parts.pipeline;
    let (mut collector, exchanges) = LatencyCollector::new(parts.shards.len());
    let mut sink_stats = Vec::new();
    let mut sink_threads = Vec::new();
    let (symbols, tiers) = (config.table.len(), config.table.tiers().len());
    for (input, exchange) in parts.shards.into_iter().zip(exchanges) {
        let index = input.index;
        let mut sink = ShardSink::new(input, symbols, tiers).with_exchange(exchange);
        sink_stats.push(sink.stats.clone());
        let wait = args.shard_wait;
        let cpus = args.cpus.clone();
        sink_threads.push(
            std::thread::Builder::new()
                .name(format!("pw-shard{index}"))
                .spawn(move || {
                    let stage = crate::pipeline::Stage::Shard(index as u16);
                    if let Some(core) = cpus.core_for(stage) {
                        if let Err(e) = crate::pipeline::affinity::pin_current(stage, core) {
                            tracing::error!("{e}");
                            return;
                        }
                    }
                    sink.run(wait);
                })
                .expect("spawn shard"),
        );
    }
    tracing::info!("serving (headless: prices go to measuring shard sinks)");
    report_loop(&args, &pipeline, &sink_stats, &mut collector);
    pipeline.stop();
    for t in sink_threads {
        let _ = t.join();
    }
    tracing::info!("stopped");
    0
}

fn report_loop(
    args: &ServeArgs,
    pipeline: &Pipeline,
    sinks: &[Arc<crate::pipeline::sink::SinkStats>],
    collector: &mut LatencyCollector,
) {
    let start = Instant::now();
    let interval = Duration::from_millis(args.report_interval_ms);
    let mut prev = Totals::read(&pipeline.handles, sinks, 0);
    let mut last = Instant::now();
    let mut hist = latency_histogram();
    collector.request();
    loop {
        let elapsed = start.elapsed();
        if args.duration_s > 0 && elapsed >= Duration::from_secs(args.duration_s) {
            break;
        }
        if pipeline.feeds_finished() && !args.no_synthetic {
            break;
        }
        std::thread::park_timeout(interval.min(Duration::from_millis(200)));
        if last.elapsed() < interval {
            continue;
        }
        collector.collect(&mut hist, Duration::from_millis(100));
        let now = Totals::read(&pipeline.handles, sinks, 0);
        println!("{}", line(&prev, &now, &hist, last.elapsed().as_secs_f64()));
        hist.reset();
        collector.request();
        prev = now;
        last = Instant::now();
    }
}
