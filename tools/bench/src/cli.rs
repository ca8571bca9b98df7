//! `pricewire-bench` (also reached as `pricewire bench`): one target, one
//! scenario, an open-loop generator acting as providers and subscribers
//! (see the [crate] docs). Prints a progress line every second on stderr
//! and writes result rows (JSON + CSV) and percentile distributions to
//! `--out`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};

use crate::herd::{self, HerdHook, HerdSpec};
use crate::hist::summarize;
use crate::relay::{self, RelayConfig};
use crate::run::{self, RunOutcome, RunSpec};
use crate::{report, Target};

/// Which scenario to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// One rate for the whole run.
    Steady,
    /// Rising rates until p99 crosses `--p99-threshold-us`.
    Sweep,
    /// Steady subscribers measured while N clients log on at once
    /// (pricewire only).
    Herd,
    /// Tick → terminal latency of `serve` standalone against core → NATS
    /// → edge, interleaved rounds (`--rounds`), and the ratio edge ÷
    /// standalone per percentile. Starts its own servers.
    BusRatio,
    /// One edge's capacity: `--subscribers` × `--symbols-per-subscriber`
    /// at `--rate` through core → NATS → edge (logon time, delivered
    /// updates/s, latency, RSS per connection). Starts its own servers.
    EdgeCapacity,
    /// Drill: one account floods flat out with its limits raised, a quiet
    /// account asks 50 req/s; checks the quiet account's answered share
    /// (see [`crate::drill`]). Starts its own server.
    TenantStorm,
    /// Drill: flooders pushed back by TCP on the shipped limits; checks
    /// that no cut is an idle cut. Starts its own server.
    FloodPushback,
    /// Drill: a client honouring retry-after against one ignoring it at
    /// 150 req/s; checks that honouring pays. Starts its own server.
    RetryHonour,
    /// Drill: a herd from many addresses beside CPU spinners; checks the
    /// logon bound and idle cuts. Starts its own server.
    HerdStarved,
    /// Drill: `--herd-clients` logged-on terminals that only heartbeat;
    /// the server's CPU per connection-second and RSS per connection.
    /// Starts its own server.
    IdleCapacity,
}

/// Flags of `pricewire-bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Server under test.
    #[arg(long, value_enum, default_value_t = Target::Floor)]
    pub target: Target,
    /// Its address (pricewire: the subscriber listener). Without it,
    /// `--target floor` starts an in-process relay (the generator's
    /// loopback self-test).
    #[arg(long, value_name = "ADDR")]
    pub connect: Option<SocketAddr>,
    /// pricewire's provider ingest listener (default: --connect's port + 1).
    #[arg(long, value_name = "ADDR")]
    pub feed: Option<SocketAddr>,
    /// pricewire's ops listener, for admission counters (herd).
    #[arg(long, value_name = "ADDR")]
    pub ops: Option<SocketAddr>,
    #[arg(long, value_enum, default_value_t = Scenario::Steady)]
    pub scenario: Scenario,
    /// Ticks per second across all symbols (the sweep's first rate).
    #[arg(long, default_value_t = 50_000, value_name = "TICKS_PER_S")]
    pub rate: u64,
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub subscribers: usize,
    #[arg(long, default_value_t = 5, value_name = "K")]
    pub symbols_per_subscriber: usize,
    /// Symbols ticked (pricewire's built-in table has 25).
    #[arg(long, default_value_t = 25, value_name = "N")]
    pub symbols: u16,
    /// Measured seconds (per sweep step).
    #[arg(long, default_value_t = 10, value_name = "S")]
    pub duration_s: u64,
    /// Warm-up seconds before measuring.
    #[arg(long, default_value_t = 2, value_name = "S")]
    pub warmup_s: u64,
    /// Most ticks per write when the sender catches up.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub batch_max: usize,
    /// Sweep: a step fails when its p99 exceeds this.
    #[arg(long, default_value_t = 1_000, value_name = "US")]
    pub p99_threshold_us: u64,
    /// Sweep: rate multiplier per step.
    #[arg(long, default_value_t = 1.5)]
    pub sweep_factor: f64,
    /// Sweep: highest rate tried.
    #[arg(long, default_value_t = 2_000_000, value_name = "TICKS_PER_S")]
    pub sweep_max_rate: u64,
    /// Sweep: bisection steps between the highest passing and the lowest
    /// failing rate once the ladder fails (3 with factor 1.5: the maximum
    /// to within 5 %).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub sweep_refine: u32,
    /// Sweep: times a failing step is run again before it counts as failed.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub sweep_retries: u32,
    /// Subscribers read with the kernel's arrival stamp (`SO_TIMESTAMPNS`,
    /// one `recvmsg` per read): results add each measured delivery's age
    /// when it reached the subscriber's socket, told apart from when the
    /// co-located receiver thread read it.
    #[arg(long)]
    pub rx_stamps: bool,
    /// Herd: clients that connect, log on and subscribe.
    #[arg(long, default_value_t = 2_000, value_name = "N")]
    pub herd_clients: usize,
    /// Herd: the clients start spread over this window.
    #[arg(long, default_value_t = 1_000, value_name = "MS")]
    pub herd_spread_ms: u64,
    /// Herd: steady measurement before the herd.
    #[arg(long, default_value_t = 3, value_name = "S")]
    pub herd_before_s: u64,
    /// Herd: give up on clients not subscribed after this.
    #[arg(long, default_value_t = 30, value_name = "S")]
    pub herd_timeout_s: u64,
    /// Herd: steady measurement once every client is subscribed, the herd
    /// still connected and reading (the load it leaves behind).
    #[arg(long, default_value_t = 3, value_name = "S")]
    pub herd_after_s: u64,
    /// Herd: every client subscribes to this symbol id instead of spreading
    /// over the ticked ones; with an id at or above --symbols (a symbol the
    /// server lists but the generator never ticks) the herd costs session
    /// set-up alone, without the fan-out it brings.
    #[arg(long, value_name = "ID")]
    pub herd_symbol: Option<u16>,
    /// Server process whose CPU time (/proc/PID/stat) is reported.
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,
    /// Run the generator's sender and receiver threads at this
    /// `SCHED_FIFO` priority (1..=99), so the generator's own wake-ups do
    /// not queue behind the server's threads for a scheduler tick (its
    /// send lag is reported either way). Needs CAP_SYS_NICE or
    /// RLIMIT_RTPRIO; the run fails at once without. Off by default.
    #[arg(long, value_name = "N")]
    pub rt_priority: Option<pricewire::runtime::RtPriority>,
    /// Label of the scenario in the result rows (default: its name).
    #[arg(long)]
    pub label: Option<String>,
    /// Results folder (appended to).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No progress line.
    #[arg(long)]
    pub quiet: bool,
    /// Only draw the percentile plots of the distributions in DIR
    /// (needs the `plot` feature, on by default).
    #[arg(long, value_name = "DIR")]
    pub plot_from: Option<PathBuf>,
    /// Only summarise the repeated rounds in DIR (runs labelled
    /// `<scenario>-r<k>`): medians and ranges per target, percentiles of
    /// all rounds pooled, and the rounds each pricewire target won against
    /// every other target; writes DIR/rounds.md and DIR/pooled/. Repeat it
    /// to treat several runs of one build as one set of rounds (then
    /// `--rounds-out` names where the summary goes).
    #[arg(long, value_name = "DIR")]
    pub rounds_from: Vec<PathBuf>,
    /// Where a summary of several `--rounds-from` folders is written.
    #[arg(long, value_name = "DIR")]
    pub rounds_out: Option<PathBuf>,
    /// Receiver threads the subscribers are split over, each polling its
    /// share of non-blocking sockets (default: 1; 2 for edge-capacity).
    #[arg(long, value_name = "N")]
    pub recv_threads: Option<usize>,
    /// bus-ratio: interleaved rounds, each running both topologies
    /// (odd rounds standalone first, even rounds the bus first).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub rounds: usize,
    /// bus-ratio, edge-capacity: the `pricewire` binary they start
    /// (default: the one beside this executable, else on PATH).
    #[arg(long, value_name = "PATH")]
    pub pricewire_bin: Option<PathBuf>,
    /// bus-ratio, edge-capacity: the `nats-server` binary they start
    /// (Debian's package: `apt-get install nats-server`).
    #[arg(long, default_value = "nats-server", value_name = "PATH")]
    pub nats_server_bin: String,
    /// bus-ratio, edge-capacity: an extra `serve` argument for the process
    /// terminals connect to (the edge, and the standalone server), e.g.
    /// `--edge-arg=--max-update-hz --edge-arg=10` or `--edge-arg
    /// "--max-update-hz 10"` (split at spaces). Repeatable. Without it,
    /// `PRICEWIRE_BENCH_EDGE_ARGS` (split at whitespace) is used.
    #[arg(
        long = "edge-arg",
        value_name = "ARG",
        allow_hyphen_values = true,
        value_delimiter = ' '
    )]
    pub edge_args: Vec<String>,
    /// edge-capacity: also run a standalone server under the same load,
    /// after the edge, as the reference.
    #[arg(long)]
    pub capacity_reference: bool,
    /// edge-capacity: longest wait for every subscriber to be subscribed.
    #[arg(long, default_value_t = 120, value_name = "S")]
    pub ready_timeout_s: u64,
    /// pricewire provider id used by the generator.
    #[arg(long, default_value_t = 0)]
    pub provider: u16,
    /// pricewire ingest token on the command line (where `ps` shows it; a
    /// warning says so unless it is the default `demo-feed`). Prefer
    /// --token-file or PRICEWIRE_INGEST_TOKEN.
    #[arg(long, value_name = "TOKEN", conflicts_with = "token_file")]
    pub token: Option<String>,
    /// File whose first line is the pricewire ingest token (chmod 600).
    /// Without it and --token: PRICEWIRE_INGEST_TOKEN, else `demo-feed`.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// The target's name in result rows and file names (default: the
    /// target's), e.g. `pricewire_shared` for a second pricewire
    /// configuration in the same run. Letters, digits and `_` only.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Flags of the drills (`--scenario tenant-storm` and the others).
    #[command(flatten)]
    pub drill: crate::drill::DrillArgs,
}

/// Runs `pricewire-bench`; returns the exit code.
pub fn run(args: BenchArgs) -> i32 {
    match run_inner(&args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

fn run_inner(args: &BenchArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.plot_from {
        return plot(dir);
    }
    if !args.rounds_from.is_empty() {
        let out = match (&args.rounds_out, args.rounds_from.as_slice()) {
            (Some(out), _) => out.clone(),
            (None, [one]) => one.clone(),
            (None, _) => bail!("several --rounds-from folders need --rounds-out DIR"),
        };
        print!(
            "{}",
            crate::rounds::summarize_dirs(&args.rounds_from, &out)?
        );
        return Ok(());
    }
    if let Some(n) = &args.name {
        // File names are `hdr-<scenario>-<name>.txt`: no `-` in a name.
        let ok = !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            bail!("--name {n:?}: letters, digits and `_` only");
        }
    }
    if crate::drill::is_drill(args.scenario) {
        if args.connect.is_some() || args.feed.is_some() {
            bail!("the drills start their own server: no --connect or --feed");
        }
        return crate::drill::run(args);
    }
    validate(args)?;
    if matches!(args.scenario, Scenario::BusRatio | Scenario::EdgeCapacity) {
        if args.connect.is_some() || args.feed.is_some() {
            bail!("--scenario bus-ratio and edge-capacity start their own servers: no --connect or --feed");
        }
        return crate::scale_cli::run(args);
    }
    let relay = match (args.connect, args.target) {
        (Some(_), _) => None,
        (None, Target::Floor) => Some(relay::spawn(RelayConfig::new("127.0.0.1:0".parse()?))?),
        (None, t) => bail!("--connect is required for --target {}", t.name()),
    };
    let addr = args
        .connect
        .or(relay.as_ref().map(|r| r.local_addr))
        .context("no address")?;
    let result = match args.scenario {
        Scenario::Steady => steady(args, addr),
        Scenario::Sweep => sweep(args, addr),
        Scenario::Herd => herd_run(args, addr),
        // Dispatched before any relay starts (above); correct here too.
        Scenario::BusRatio | Scenario::EdgeCapacity => crate::scale_cli::run(args),
        // Dispatched before any relay starts (above).
        s => bail!("--scenario {s:?} starts its own server"),
    };
    if let Some(r) = relay {
        r.stop();
    }
    result
}

fn validate(args: &BenchArgs) -> anyhow::Result<()> {
    if args.rate == 0 || args.duration_s == 0 || args.subscribers == 0 {
        bail!("--rate, --duration-s and --subscribers must be positive");
    }
    if args.symbols == 0 || args.symbols_per_subscriber == 0 || args.batch_max == 0 {
        bail!("--symbols, --symbols-per-subscriber and --batch-max must be positive");
    }
    if args.duration_s + args.warmup_s > 600 || args.herd_timeout_s + args.herd_after_s > 600 {
        bail!(
            "a run is bounded: duration + warm-up and the herd timeout + after are at most 600 s"
        );
    }
    if args.subscribers > 10_000 || args.herd_clients > 20_000 {
        bail!("--subscribers at most 10000, --herd-clients at most 20000");
    }
    if args.rounds == 0 || args.recv_threads == Some(0) || args.ready_timeout_s > 600 {
        bail!("--rounds and --recv-threads must be positive, --ready-timeout-s at most 600");
    }
    if args.herd_symbol.is_some() && args.scenario != Scenario::Herd {
        bail!("--herd-symbol applies to --scenario herd only");
    }
    if let Some(p) = args.rt_priority {
        pricewire::runtime::affinity::probe_rt_priority(p.get())
            .map_err(|e| anyhow::anyhow!("--rt-priority: {e}"))?;
    }
    if let Some(a) = args
        .connect
        .iter()
        .chain(&args.feed)
        .chain(&args.ops)
        .next()
    {
        if !a.ip().is_loopback() {
            bail!("benchmark traffic stays on loopback: {a} is not");
        }
    }
    Ok(())
}

pub(crate) fn spec(args: &BenchArgs, addr: SocketAddr, scenario: &str) -> anyhow::Result<RunSpec> {
    let token = pricewire::cli::secret::ingest_token(
        ("--token", args.token.as_deref()),
        ("--token-file", args.token_file.as_deref()),
    )
    .map_err(anyhow::Error::msg)?;
    // pricewire takes ticks on its ingest listener, not the subscriber port.
    Ok(RunSpec {
        target: args.target,
        name: args
            .name
            .clone()
            .unwrap_or_else(|| args.target.name().to_string()),
        addr,
        feed_addr: feed_addr(args, addr),
        rate_per_s: args.rate,
        subscribers: args.subscribers,
        symbols_per_subscriber: args.symbols_per_subscriber,
        symbols_total: args.symbols,
        warmup_s: args.warmup_s,
        duration_s: args.duration_s,
        batch_max: args.batch_max,
        server_pid: args.server_pid,
        rt_priority: args.rt_priority,
        scenario: args.label.clone().unwrap_or_else(|| scenario.to_string()),
        progress: !args.quiet,
        provider: args.provider,
        token,
        recv_threads: args.recv_threads.unwrap_or(1),
        recv_in_bytes: crate::recv::IN_BYTES,
        rx_stamps: args.rx_stamps,
        ready_timeout_ms: run::READY_TIMEOUT_MS,
        drain_grace_ms: run::DRAIN_GRACE_MS,
    })
}

/// The publisher's address: pricewire's ingest listener, else the target.
pub fn feed_addr(args: &BenchArgs, addr: SocketAddr) -> SocketAddr {
    match (args.target, args.feed) {
        (Target::Pricewire, Some(f)) => f,
        (Target::Pricewire, None) => SocketAddr::new(addr.ip(), addr.port() + 1),
        _ => addr,
    }
}

pub(crate) fn finish(args: &BenchArgs, o: &RunOutcome) -> anyhow::Result<()> {
    let r = &o.row;
    let l = &r.latency;
    println!(
        "{} {} rate {:.0}/s subs {} updates {:.0}/s p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} p99.99 {:.1} max {:.1} us missing {} gaps {} cpu/M {} send-lag p99 {:.1} us",
        r.name,
        r.scenario,
        r.rate_achieved_per_s,
        r.subscribers,
        r.updates_per_s,
        l.p50_ns as f64 / 1e3,
        l.p90_ns as f64 / 1e3,
        l.p99_ns as f64 / 1e3,
        l.p999_ns as f64 / 1e3,
        l.p9999_ns as f64 / 1e3,
        l.max_ns as f64 / 1e3,
        r.missing,
        r.gaps,
        r.server_cpu_s_per_m_updates.map_or("-".into(), |c| format!("{c:.2}s")),
        r.send_lag.p99_ns as f64 / 1e3,
    );
    if let Some(dir) = &args.out {
        report::write_run(dir, r, &o.hist)?;
    }
    Ok(())
}

fn steady(args: &BenchArgs, addr: SocketAddr) -> anyhow::Result<()> {
    let o = run::run(&spec(args, addr, "steady")?)?;
    finish(args, &o)
}

fn sweep(args: &BenchArgs, addr: SocketAddr) -> anyhow::Result<()> {
    let s = spec(args, addr, "sweep")?;
    let mut err = Ok(());
    let r = run::sweep(
        &s,
        args.p99_threshold_us,
        run::Ladder {
            start_per_s: args.rate,
            factor: args.sweep_factor,
            max_per_s: args.sweep_max_rate,
            refine: args.sweep_refine,
        },
        args.sweep_retries,
        |o| {
            if err.is_ok() {
                err = finish(args, o);
            }
        },
    )?;
    err?;
    let failed = match (r.failed_at_rate_per_s, &r.failed_because) {
        (Some(at), Some(why)) => format!("lowest failing {at} ticks/s: {why}"),
        _ => format!("no step failed up to {} ticks/s", args.sweep_max_rate),
    };
    println!(
        "{} sweep: max sustainable {} ticks/s (p99 threshold {} us, {} steps); {failed}",
        r.name,
        r.max_sustainable_rate_per_s,
        r.p99_threshold_us,
        r.rates_tried.len(),
    );
    if let Some(dir) = &args.out {
        report::write_json_line(dir, "sweep.jsonl", &r)?;
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct HerdRow {
    target: Target,
    name: String,
    scenario: String,
    rate_per_s: u64,
    steady_subscribers: usize,
    herd: herd::HerdResult,
    rejects_by_stage: Vec<(String, f64)>,
    p99_before_us: f64,
    p99_during_us: f64,
    p50_before_us: f64,
    p50_during_us: f64,
    max_during_us: f64,
    /// Once every client is subscribed (`--herd-after-s`); absent when the
    /// herd timed out or the after phase is off.
    p50_after_us: Option<f64>,
    p99_after_us: Option<f64>,
    max_after_us: Option<f64>,
    /// The symbol every herd client subscribed to (`--herd-symbol`).
    herd_symbol: Option<u16>,
    /// Server CPU seconds over the measured run (before, herd and after).
    server_cpu_s: Option<f64>,
}

fn herd_run(args: &BenchArgs, addr: SocketAddr) -> anyhow::Result<()> {
    if args.target != Target::Pricewire {
        bail!("--scenario herd runs against pricewire only");
    }
    let mut s = spec(args, addr, "herd")?;
    // The run lasts until the herd is done; duration bounds it.
    s.duration_s = args.herd_before_s + args.herd_timeout_s + args.herd_after_s + 1;
    let rejects0 = args.ops.map(herd::admission_rejects).transpose()?;
    let mut hook = HerdHook {
        spec: HerdSpec {
            addr,
            clients: args.herd_clients,
            spread_ms: args.herd_spread_ms,
            timeout_ms: args.herd_timeout_s * 1_000,
            before_ms: args.herd_before_s * 1_000,
            after_ms: args.herd_after_s * 1_000,
            symbols_total: args.symbols,
            symbol: args.herd_symbol,
            seed: 1,
        },
        result: None,
    };
    let o = run::run_with(&s, &mut hook)?;
    let rejects1 = args.ops.map(herd::admission_rejects).transpose()?;
    let herd = hook.result.context("herd did not run")??;
    let before = summarize(&o.recv.phases[0]);
    let during = summarize(&o.recv.phases[1]);
    let after = Some(&o.recv.phases[2])
        .filter(|h| !h.is_empty())
        .map(summarize);
    let rejects = match (rejects0, rejects1) {
        (Some(a), Some(b)) => b
            .into_iter()
            .map(|(k, v)| {
                let v0 = a.iter().find(|(k0, _)| *k0 == k).map_or(0.0, |x| x.1);
                (k, v - v0)
            })
            .collect(),
        _ => Vec::new(),
    };
    let row = HerdRow {
        target: args.target,
        name: s.name.clone(),
        scenario: s.scenario.clone(),
        rate_per_s: args.rate,
        steady_subscribers: args.subscribers,
        herd,
        rejects_by_stage: rejects,
        p99_before_us: before.p99_ns as f64 / 1e3,
        p99_during_us: during.p99_ns as f64 / 1e3,
        p50_before_us: before.p50_ns as f64 / 1e3,
        p50_during_us: during.p50_ns as f64 / 1e3,
        max_during_us: during.max_ns as f64 / 1e3,
        p50_after_us: after.map(|a| a.p50_ns as f64 / 1e3),
        p99_after_us: after.map(|a| a.p99_ns as f64 / 1e3),
        max_after_us: after.map(|a| a.max_ns as f64 / 1e3),
        herd_symbol: args.herd_symbol,
        server_cpu_s: o.row.server_cpu_s,
    };
    println!("{}", serde_json::to_string(&row)?);
    if let Some(dir) = &args.out {
        report::write_json_line(dir, "herd.jsonl", &row)?;
    }
    Ok(())
}

#[cfg(feature = "plot")]
fn plot(dir: &std::path::Path) -> anyhow::Result<()> {
    for png in crate::plot::plot_dir(dir)? {
        println!("wrote {}", png.display());
    }
    Ok(())
}

#[cfg(not(feature = "plot"))]
fn plot(_: &std::path::Path) -> anyhow::Result<()> {
    bail!("this build has no plotting: rebuild without `--no-default-features`")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(flags: &[&str]) -> Result<BenchArgs, clap::Error> {
        let argv = ["pricewire-bench", "--target", "pricewire"];
        Cli::try_parse_from(argv.iter().chain(flags)).map(|c| c.bench)
    }

    #[test]
    fn the_ingest_token_comes_from_a_file_off_the_command_line() {
        let addr: SocketAddr = "127.0.0.1:9400".parse().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "Bench-feed-token-1a\n").unwrap();
        let path = file.to_str().unwrap();
        let args = parse(&["--token-file", path]).unwrap();
        assert_eq!(
            spec(&args, addr, "steady").unwrap().token,
            "Bench-feed-token-1a"
        );
        assert!(parse(&["--token", "x", "--token-file", path]).is_err());
        let missing = parse(&["--token-file", "/nonexistent/bench-token"]).unwrap();
        let err = spec(&missing, addr, "steady").unwrap_err().to_string();
        assert!(
            err.contains("--token-file /nonexistent/bench-token"),
            "{err}"
        );
    }
}
