//! `pricewire replay`: feed captures through the engine deterministically
//! (engine time from the capture; prints a digest of the published price
//! stream, the same on every run at every speed), or into a running
//! server's provider ingest listener with `--to HOST:PORT`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;

use super::refuse;
use crate::capture::cli::ReplayArgs;
use crate::capture::{ReplaySource, ReplaySummary};
use crate::clock::{monotonic_ns, MonotonicClock};
use crate::config::Config;
use crate::feed::bridge::Bridge;
use crate::feed::{SourcePoll, TickSource};
use crate::model::Tick;
use crate::pipeline::determ;

/// Flags of `pricewire replay`.
#[derive(Debug, Clone, Args)]
pub struct ReplayCmd {
    /// Captures, pacing and target.
    #[command(flatten)]
    pub replay: ReplayArgs,

    /// Configuration whose instrument table the capture must match.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Providers of the built-in configuration.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub providers: usize,

    /// Token for ProviderLogon with `--to`, on the command line (where `ps`
    /// shows it; a warning says so unless it is the default `demo-feed`).
    /// Prefer --token-file or PRICEWIRE_INGEST_TOKEN.
    #[arg(long, value_name = "TOKEN", conflicts_with = "token_file")]
    pub token: Option<String>,

    /// File whose first line is the ProviderLogon token (chmod 600).
    /// Without it and --token: PRICEWIRE_INGEST_TOKEN, else `demo-feed`.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
}

/// Runs `pricewire replay`; returns the process exit code: 0 on success,
/// [`EXIT_USAGE`](super::EXIT_USAGE) for refused flags, configuration or
/// captures, 1 when sending to `--to` fails.
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
            Ok(addr) => match super::secret::ingest_token(
                ("--token", args.token.as_deref()),
                ("--token-file", args.token_file.as_deref()),
            ) {
                Ok(token) => to_server(source, addr, &token),
                Err(e) => refuse(e),
            },
            Err(_) => refuse(format!("--to {to}: expected HOST:PORT")),
        },
        None => through_engine(source, config),
    }
}

/// The capture through the engine on this thread, engine time from the
/// capture (see [`crate::pipeline::determ`]): the digest of the published
/// stream is the same on every run at every speed.
fn through_engine(mut source: ReplaySource, config: Arc<Config>) -> i32 {
    let started = Instant::now();
    let run = determ::run(&mut source, &config, &MonotonicClock);
    let secs = started.elapsed().as_secs_f64();
    let s = source.summary();
    println!(
        "replayed {} ticks in {secs:.3} s ({:.0} ticks/s)",
        run.ticks,
        run.ticks as f64 / secs.max(1e-9)
    );
    println!(
        "capture span {:.3} s over {} recording session(s), damaged records skipped {}, \
         cut short: {}",
        run.timeline.span_ns() as f64 / 1e9,
        run.timeline.sessions(),
        s.corrupt_count,
        s.stopped_at
            .as_ref()
            .map_or("no".to_string(), |p| format!("{p:?}"))
    );
    println!("published {} prices, digest {}", run.published, run.digest);
    if let Some(e) = &s.error {
        println!("stopped early: {e}");
    }
    print_latency("release->price latency (ns, pacing excluded)", &run.latency);
    i32::from(s.error.is_some())
}

fn print_latency(title: &str, hist: &hdrhistogram::Histogram<u64>) {
    if !hist.is_empty() {
        println!("{title}:");
        for q in [0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
            println!("  p{:<7} {}", q * 100.0, hist.value_at_quantile(q));
        }
    }
}

fn print_summary(s: &ReplaySummary, ticks: u64, secs: f64) {
    println!(
        "replayed {ticks} ticks in {secs:.3} s ({:.0} ticks/s)",
        ticks as f64 / secs.max(1e-9)
    );
    println!(
        "damaged records skipped {}, cut short: {}",
        s.corrupt_count,
        s.stopped_at
            .as_ref()
            .map_or("no".to_string(), |p| format!("{p:?}"))
    );
    if let Some(e) = &s.error {
        println!("stopped early: {e}");
    }
}

/// Keeps every bridge alive through a pause in the replayed ticks.
fn keepalive(bridges: &mut [Option<Bridge>]) -> std::io::Result<()> {
    bridges.iter_mut().flatten().try_for_each(Bridge::keepalive)
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
                if let Err(e) = keepalive(&mut bridges) {
                    eprintln!("error: sending to {addr}: {e}");
                    return 1;
                }
            }
            SourcePoll::Idle => {
                if let Err(e) = keepalive(&mut bridges) {
                    eprintln!("error: sending to {addr}: {e}");
                    return 1;
                }
                std::thread::yield_now()
            }
            SourcePoll::Done => break,
        }
    }
    for b in bridges.into_iter().flatten() {
        let _ = b.close();
    }
    let secs = started.elapsed().as_secs_f64();
    println!("sent {sent} ticks to {addr} in {secs:.3} s");
    let s = source.summary();
    print_summary(&s, sent, secs);
    0
}
