//! `--scenario bus-ratio` and `--scenario edge-capacity` from the command
//! line: options into [`scale::ServeOpts`] and a [`RunSpec`](crate::run::RunSpec), the results
//! printed and written to `--out` (`bus-ratio.jsonl`, `capacity.jsonl`,
//! every run's row and distribution as for any run, and the servers'
//! stderr in `logs/`).

use anyhow::Context;

use crate::cli::{finish, spec, BenchArgs, Scenario};
use crate::report;
use crate::scale::{self, CapacityRow, RatioRow, Ratios, ServeOpts, Topology};
use crate::{procs, Target};

/// Inbound buffer per subscriber in a capacity run: its subscribers only
/// receive prices, acknowledgements and snapshots of a few symbols.
pub const CAPACITY_IN_BYTES: usize = 64 * 1024;
/// Receiver threads of a capacity run unless `--recv-threads` says.
pub const CAPACITY_RECV_THREADS: usize = 2;
/// Drain grace of a capacity run: an overloaded edge queues seconds of
/// updates, and a tick's delivery counts only if it arrives by then.
pub const CAPACITY_DRAIN_GRACE_MS: u64 = 10_000;
/// Descriptors kept free beside the subscribers' sockets.
const SPARE_FDS: usize = 256;
/// Environment variable with extra `serve` arguments for the edge.
pub const EDGE_ARGS_ENV: &str = "PRICEWIRE_BENCH_EDGE_ARGS";

/// The `--edge-arg` values, else those of [`EDGE_ARGS_ENV`].
pub fn edge_args(flags: &[String], env: Option<&str>) -> Vec<String> {
    if !flags.is_empty() {
        return flags.iter().filter(|a| !a.is_empty()).cloned().collect();
    }
    env.map(|v| v.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

/// Runs the scale-out scenario `args.scenario`.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    procs::raise_open_files_limit(args.subscribers + SPARE_FDS)?;
    let tmp;
    let logs = match &args.out {
        Some(dir) => dir.join("logs"),
        None => {
            tmp = tempfile::tempdir().context("log folder")?;
            tmp.path().to_path_buf()
        }
    };
    std::fs::create_dir_all(&logs).with_context(|| logs.display().to_string())?;
    let env = std::env::var(EDGE_ARGS_ENV).ok();
    let opts = ServeOpts {
        pricewire_bin: args
            .pricewire_bin
            .clone()
            .unwrap_or_else(procs::default_pricewire_bin),
        nats_bin: args.nats_server_bin.clone(),
        edge_args: edge_args(&args.edge_args, env.as_deref()),
        logs: logs.clone(),
    };
    let result = match args.scenario {
        Scenario::EdgeCapacity => capacity(args, &opts),
        _ => ratio(args, &opts),
    };
    result.with_context(|| format!("server logs in {}", logs.display()))
}

fn ratio(args: &BenchArgs, opts: &ServeOpts) -> anyhow::Result<()> {
    let placeholder = "127.0.0.1:0".parse()?;
    let mut s = spec(args, placeholder, "bus-ratio")?;
    s.target = Target::Pricewire;
    let row = scale::bus_ratio(&s, args.rounds, opts, |o| finish(args, o))?;
    print!("{}", ratio_table(&row));
    if let Some(dir) = &args.out {
        report::write_json_line(dir, "bus-ratio.jsonl", &row)?;
    }
    Ok(())
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

fn x(r: Option<f64>) -> String {
    r.map_or("-".into(), |v| format!("{v:.2}x"))
}

fn range(rounds: &[Ratios], pick: fn(&Ratios) -> Option<f64>) -> String {
    match scale::ratio_range(rounds.iter().map(pick)) {
        Some((lo, hi)) => format!("{lo:.2}–{hi:.2}x"),
        None => "-".into(),
    }
}

/// The ratio run as a Markdown table: pooled percentiles per topology,
/// the ratio, and the range of the per-round ratios.
pub fn ratio_table(r: &RatioRow) -> String {
    let (a, b) = (&r.standalone, &r.core_nats_edge);
    let rr = &r.round_ratios;
    format!(
        "bus-ratio: {} rounds, {} ticks/s, {} subscribers x {} of {} symbols, {} s each; load {} -> {}\n\
         | | p50 µs | p99 µs | p99.9 µs | deliveries | missing | gaps |\n\
         |---|---:|---:|---:|---:|---:|---:|\n\
         | standalone | {:.1} | {:.1} | {:.1} | {} | {} | {} |\n\
         | core → NATS → edge | {:.1} | {:.1} | {:.1} | {} | {} | {} |\n\
         | edge ÷ standalone | {} | {} | {} | | | |\n\
         | per-round range | {} | {} | {} | | | |\n",
        r.rounds,
        r.rate_per_s,
        r.subscribers,
        r.symbols_per_subscriber,
        r.symbols_total,
        r.duration_s,
        r.load_before,
        r.load_after,
        us(a.p50_ns),
        us(a.p99_ns),
        us(a.p999_ns),
        a.count,
        r.missing[0],
        r.gaps[0],
        us(b.p50_ns),
        us(b.p99_ns),
        us(b.p999_ns),
        b.count,
        r.missing[1],
        r.gaps[1],
        x(r.ratio.p50),
        x(r.ratio.p99),
        x(r.ratio.p999),
        range(rr, |r| r.p50),
        range(rr, |r| r.p99),
        range(rr, |r| r.p999),
    )
}

fn capacity(args: &BenchArgs, opts: &ServeOpts) -> anyhow::Result<()> {
    let placeholder = "127.0.0.1:0".parse()?;
    let mut s = spec(args, placeholder, "edge-capacity")?;
    s.target = Target::Pricewire;
    s.recv_threads = args.recv_threads.unwrap_or(CAPACITY_RECV_THREADS);
    s.recv_in_bytes = CAPACITY_IN_BYTES;
    s.ready_timeout_ms = args.ready_timeout_s * 1_000;
    s.drain_grace_ms = CAPACITY_DRAIN_GRACE_MS;
    let mut topologies = vec![Topology::Bus];
    if args.capacity_reference {
        topologies.push(Topology::Standalone);
    }
    for t in topologies {
        let (row, o) = scale::edge_capacity(&s, t, opts)?;
        finish(args, &o)?;
        println!("{}", capacity_line(&row));
        println!("{}", serde_json::to_string(&row)?);
        if let Some(dir) = &args.out {
            report::write_json_line(dir, "capacity.jsonl", &row)?;
        }
    }
    Ok(())
}

/// One capacity run in a line.
pub fn capacity_line(r: &CapacityRow) -> String {
    let ms = |a: &crate::hist::Summary| {
        let f = |ns: u64| ns as f64 / 1e6;
        format!(
            "p50 {:.1} p99 {:.1} max {:.1}",
            f(a.p50_ns),
            f(a.p99_ns),
            f(a.max_ns)
        )
    };
    let at_socket = match (&r.at_socket, &r.engine_to_socket) {
        (Some(a), Some(e)) => format!(
            " (at the socket: {} ms; engine to socket: {} ms)",
            ms(a),
            ms(e)
        ),
        _ => String::new(),
    };
    let at_socket = format!(
        "{at_socket}; behind the feed's latest: {} ms",
        ms(&r.behind_latest)
    );
    let handoff = match (r.handoff_p50_le_ms, r.handoff_p99_le_ms, r.handoff_over_50ms) {
        (Some(p50), Some(p99), Some(over)) => format!(
            "; the server handed prices over at p50 <= {p50} ms, p99 <= {p99} ms, {:.3} % of writes over 50 ms, {:.2} writes per update",
            over * 100.0,
            r.writes_per_update.unwrap_or(0.0)
        ),
        _ => String::new(),
    };
    let cpu: Vec<String> = r
        .cpu_s
        .iter()
        .map(|(n, c)| format!("{n} {:.0} %", c * 100.0 / r.duration_s.max(1) as f64))
        .collect();
    format!(
        "{} capacity: {} subscribers x {} symbols at {:.0} ticks/s: all subscribed in {:.2} s \
         ({} refused and retried); \
         {:.0} updates/s arrived ({:.0}/s of the window's ticks) of {:.0} demanded; p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} ms{at_socket}{handoff}; \
         loopback backlog drops {}, TCP retransmits {}; {} flagged stale; deliveries ended {:.1} ms after the last tick delivered; RSS {:.1} KiB per connection ({} -> {} KiB); receivers {} threads at {:.0} % CPU; \
         CPU {}; load {} -> {}",
        r.name,
        r.subscribers,
        r.symbols_per_subscriber,
        r.rate_achieved_per_s,
        r.logon_all_ms / 1e3,
        r.refused,
        r.arrived_per_s,
        r.updates_per_s,
        r.demanded_updates_per_s,
        r.latency.p50_ns as f64 / 1e6,
        r.latency.p99_ns as f64 / 1e6,
        r.latency.p999_ns as f64 / 1e6,
        r.latency.max_ns as f64 / 1e6,
        r.loopback_drops,
        r.tcp_retransmits,
        r.stale,
        r.tail_ms,
        r.rss_per_connection_kib,
        r.rss_idle_kib,
        r.rss_loaded_kib[1],
        r.recv_threads,
        r.recv_cpu_share * 100.0,
        cpu.join(", "),
        r.load_before,
        r.load_after,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_args_come_from_flags_else_the_environment() {
        let flags = vec!["--max-update-hz".to_string(), "10".to_string()];
        assert_eq!(edge_args(&flags, Some("--x 1")), flags);
        assert_eq!(
            edge_args(&[], Some(" --max-update-hz  10 ")),
            ["--max-update-hz", "10"]
        );
        assert!(edge_args(&[], None).is_empty());
        // `--edge-arg ""` adds nothing.
        assert!(edge_args(&[String::new()], None).is_empty());
    }
}
