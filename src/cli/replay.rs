//! `pricewire replay`: feed captures through the full pipeline (headless,
//! measuring end-to-end latency), or into a running server's provider
//! ingest listener with `--to HOST:PORT`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;

use super::refuse;
use crate::capture::cli::ReplayArgs;
use crate::capture::{ReplaySource, ReplaySummary};
use crate::clock::monotonic_ns;
use crate::config::Config;
use crate::feed::bridge::Bridge;
use crate::feed::ingest::INGEST_TOKEN_DEFAULT;
use crate::feed::{SourcePoll, TickSource};
use crate::model::Tick;
use crate::pipeline::PipelineConfig;
use crate::runtime::latency::latency_histogram;
use crate::runtime::WaitStrategy;
use crate::service::{Service, ServiceConfig};

/// Flags of `pricewire replay`.
#[derive(Debug, Clone, Args)]
pub struct ReplayCmd {
    #[command(flatten)]
    pub replay: ReplayArgs,

    /// Configuration whose instrument table the capture must match.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Providers of the built-in configuration.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub providers: usize,

    /// Token for ProviderLogon with `--to`.
    #[arg(long, default_value = INGEST_TOKEN_DEFAULT, value_name = "TOKEN")]
    pub token: String,
}

/// Keeps the replay's summary when it finishes on the feed thread.
struct Summarizing {
    inner: ReplaySource,
    out: Arc<Mutex<Option<ReplaySummary>>>,
}

impl TickSource for Summarizing {
    fn poll(&mut self, now_ns: u64, out: &mut [Tick]) -> SourcePoll {
        let r = self.inner.poll(now_ns, out);
        if r == SourcePoll::Done {
            *self.out.lock().expect("summary lock") = Some(self.inner.summary());
        }
        r
    }
    fn keeps_receive_time(&self) -> bool {
        self.inner.keeps_receive_time()
    }
}

pub fn run(args: ReplayCmd) -> i32 {
    let config = match &args.config {
        Some(p) => Config::load(p, args.providers),
        None => crate::config::ConfigFile::default().resolve(args.providers),
    };
    let config = match config {
        Ok(c) => Arc::new(c),
        Err(e) => return refuse(e),
    };
    let source = match args.replay.open(Some(&config.table)) {
        Ok(s) => s,
        Err(e) => return refuse(format!("{e:#}")),
    };
    match &args.replay.to {
        Some(to) => match to.parse() {
            Ok(addr) => to_server(source, addr, &args.token),
            Err(_) => refuse(format!("--to {to}: expected HOST:PORT")),
        },
        None => through_pipeline(source, config),
    }
}

fn through_pipeline(source: ReplaySource, config: Arc<Config>) -> i32 {
    let summary = Arc::new(Mutex::new(None));
    let src = Summarizing {
        inner: source,
        out: summary.clone(),
    };
    let started = Instant::now();
    let cfg = ServiceConfig {
        config,
        pipeline: PipelineConfig {
            feed_wait: WaitStrategy::SpinYield,
            engine_wait: WaitStrategy::SpinYield,
            ..PipelineConfig::default()
        },
        synthetic: None,
        sources: vec![("replay".into(), Box::new(src))],
        gateway: None,
        ingest: None,
        shard_wait: WaitStrategy::SpinYield,
        recorder: None,
        requests: Default::default(),
        refdata: None,
        bus: None,
    };
    let mut service = match Service::start(cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let mut hist = latency_histogram();
    service.latency.request();
    while !service.pipeline.feeds_finished() {
        std::thread::park_timeout(Duration::from_millis(100));
        service
            .latency
            .collect(&mut hist, Duration::from_millis(10));
        service.latency.request();
    }
    let engine = service.pipeline.handles.engine.clone();
    service.pipeline.stop(); // drains the engine
    let secs = started.elapsed().as_secs_f64();
    service
        .latency
        .collect(&mut hist, Duration::from_millis(200));
    service.stop();
    let s = summary.lock().expect("summary lock").take();
    print_summary(s.as_ref(), engine.ticks.get(), secs, &hist);
    i32::from(s.is_some_and(|s| s.error.is_some()))
}

fn print_summary(
    s: Option<&ReplaySummary>,
    ticks: u64,
    secs: f64,
    hist: &hdrhistogram::Histogram<u64>,
) {
    println!(
        "replayed {ticks} ticks in {secs:.3} s ({:.0} ticks/s)",
        ticks as f64 / secs.max(1e-9)
    );
    if let Some(s) = s {
        println!(
            "capture span {:.3} s, damaged records skipped {}, cut short: {}",
            s.span_ns as f64 / 1e9,
            s.corrupt_count,
            s.stopped_at
                .as_ref()
                .map_or("no".to_string(), |p| format!("{p:?}"))
        );
        if let Some(e) = &s.error {
            println!("stopped early: {e}");
        }
    }
    if !hist.is_empty() {
        println!("feed->shard latency (ns):");
        for q in [0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
            println!("  p{:<7} {}", q * 100.0, hist.value_at_quantile(q));
        }
    }
}

fn to_server(mut source: ReplaySource, addr: std::net::SocketAddr, token: &str) -> i32 {
    let mut bridges: Vec<Option<Bridge>> = Vec::new();
    let mut batch = vec![Tick::EMPTY; 512];
    let started = Instant::now();
    let mut sent = 0u64;
    loop {
        match source.poll(monotonic_ns(), &mut batch) {
            SourcePoll::Ready(n) => {
                for t in &batch[..n] {
                    let p = t.provider as usize;
                    if bridges.len() <= p {
                        bridges.resize_with(p + 1, || None);
                    }
                    if bridges[p].is_none() {
                        match Bridge::connect(addr, t.provider, token, Duration::from_secs(5)) {
                            Ok(b) => bridges[p] = Some(b),
                            Err(e) => return refuse(format!("{addr}: {e}")),
                        }
                    }
                    if let Some(b) = bridges[p].as_mut() {
                        if let Err(e) = b.send(std::slice::from_ref(t)) {
                            eprintln!("error: sending to {addr}: {e}");
                            return 1;
                        }
                    }
                }
                sent += n as u64;
            }
            SourcePoll::Idle => std::thread::yield_now(),
            SourcePoll::Done => break,
        }
    }
    for b in bridges.into_iter().flatten() {
        let _ = b.close();
    }
    let secs = started.elapsed().as_secs_f64();
    println!("sent {sent} ticks to {addr} in {secs:.3} s");
    let s = source.summary();
    print_summary(Some(&s), sent, secs, &latency_histogram());
    0
}
