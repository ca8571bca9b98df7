//! The scale-out scenarios (issue #20): they start their own servers on
//! free 127.0.0.1 ports ([`super::procs`]) and drive them with the same
//! open-loop generator as every other scenario (same payload, same
//! tick → terminal latency, measured from each tick's scheduled send time
//! to its receipt by the generator's own subscribers).
//!
//! - **`bus-ratio`**: tick → terminal latency of `serve` standalone
//!   against the same feed through `serve --role core` → `nats-server`
//!   (JetStream) → `serve --role edge`, in interleaved rounds of one run
//!   (the order alternates each round; every round starts fresh
//!   processes, and only one topology runs at a time). Same rate,
//!   subscribers and symbols in both. Reports p50/p99/p99.9 of every
//!   round pooled per topology and the ratio edge ÷ standalone per
//!   percentile, plus the range of the per-round ratios.
//! - **`edge-capacity`**: N subscribers × K symbols on one edge at a
//!   given rate: logon time of the whole population, delivered updates/s
//!   against the updates the feed demands, tick → terminal percentiles,
//!   RSS per connection (the edge's RSS delta ÷ connections), and the
//!   generator's receiver threads' CPU share (well under 100 %: the
//!   subscriber side was not the bottleneck). Optionally a standalone
//!   server under the same load as the reference.
//!
//! The process terminals connect to (the edge, or the standalone server)
//! gets the admission limits lifted ([`OPEN_ADMISSION`]) so that a
//! population of thousands logs on as fast as the server can serve it,
//! plus any `--edge-arg` (e.g. a per-subscription update-rate limit).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

use super::hist::{latency_histogram, summarize, Summary};
use super::procs::{self, start_serve, NatsNode, Proc};
use super::recv::RecvShared;
use super::run::{self, DuringRun, RunOutcome, RunSpec};
use super::send::Window;
use super::{process_cpu_s, BenchClock};

/// Subject prefix of the bench's bus.
pub const BUS_PREFIX: &str = "pwbench";

/// Admission limits of the subscriber-facing process, lifted: every
/// connection from the one loopback address is admitted at once, and no
/// shard sheds new sessions for loop lag, so the logon time and the
/// capacity are the server's cost, not its admission policy (on this
/// shared 2-vCPU host the default shedding held back the last thousands
/// of a 10,000 herd while other builds ran). What is still refused (the
/// logon verifier's queue when full) comes back after 100–500 ms instead
/// of the default 3–8 s. An `--edge-arg` naming one of these flags
/// replaces it ([`subscriber_side_flags`]).
pub const OPEN_ADMISSION: &[(&str, &str)] = &[
    ("--ip-connections-max", "20000"),
    ("--ip-connect-burst", "20000"),
    ("--ip-connect-rate-per-s", "1000000"),
    ("--accept-rate-per-s", "1000000"),
    ("--accept-burst", "20000"),
    ("--logon-rate-per-s", "1000000"),
    ("--first-subscribe-rate-per-s", "1000000"),
    ("--msg-rate-per-s", "10000"),
    ("--msg-burst", "20000"),
    ("--busy-retry-min-ms", "100"),
    ("--busy-retry-max-ms", "500"),
    ("--loop-lag-target-ms", "0"),
];

/// [`OPEN_ADMISSION`] without the flags `edge_args` names (as `--flag`
/// or `--flag=value`), then `edge_args`: a flag given twice would be
/// refused by `serve`.
pub fn subscriber_side_flags(edge_args: &[String]) -> Vec<String> {
    let named = |flag: &str| {
        edge_args
            .iter()
            .any(|a| a == flag || a.strip_prefix(flag).is_some_and(|r| r.starts_with('=')))
    };
    let mut out: Vec<String> = OPEN_ADMISSION
        .iter()
        .filter(|(flag, _)| !named(flag))
        .flat_map(|(flag, value)| [flag.to_string(), value.to_string()])
        .collect();
    out.extend(edge_args.iter().cloned());
    out
}

/// How the prices reach the terminals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Topology {
    /// One `serve` process: feeds, engine and subscribers.
    Standalone,
    /// `serve --role core` → `nats-server` → `serve --role edge`.
    Bus,
}

impl Topology {
    /// The topology's name in result rows (a `--name`: letters and `_`).
    pub const fn name(self) -> &'static str {
        match self {
            Topology::Standalone => "standalone",
            Topology::Bus => "core_nats_edge",
        }
    }
}

/// What the scenarios need to start servers.
#[derive(Debug, Clone)]
pub struct ServeOpts {
    /// The `pricewire` binary.
    pub pricewire_bin: PathBuf,
    /// The `nats-server` binary.
    pub nats_bin: String,
    /// Extra `serve` arguments for the process terminals connect to (the
    /// edge, and the standalone server).
    pub edge_args: Vec<String>,
    /// Folder of the processes' stderr logs.
    pub logs: PathBuf,
}

/// One topology's processes, stopped (last started first) when dropped.
pub struct Deployment {
    /// Which topology runs.
    pub topology: Topology,
    /// Where subscribers connect (standalone server or edge).
    pub listen: SocketAddr,
    /// Where the generator's provider connects (standalone server or core).
    pub feed: SocketAddr,
    /// The ops listener (/metrics) of the process terminals connect to.
    pub server_ops: SocketAddr,
    procs: Vec<Proc>,
    nats: Option<NatsNode>,
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

impl Deployment {
    /// Starts `topology` and waits until every process is ready (an edge
    /// is ready only with every last value loaded). `tag` names the logs.
    pub fn start(topology: Topology, o: &ServeOpts, tag: &str) -> anyhow::Result<Deployment> {
        let (listen, feed) = (procs::free_addr()?, procs::free_addr()?);
        let (l, f) = (listen.to_string(), feed.to_string());
        let mut subscriber_side = strings(&["--drain-delay-ms", "0", "--listen", &l]);
        subscriber_side.extend(subscriber_side_flags(&o.edge_args));
        let bin = &o.pricewire_bin;
        let server_ops = procs::free_addr()?;
        let mut d = Deployment {
            topology,
            listen,
            feed,
            server_ops,
            procs: Vec::new(),
            nats: None,
        };
        match topology {
            Topology::Standalone => {
                let mut args = strings(&["--no-synthetic", "--feed-listen", &f]);
                args.extend(subscriber_side);
                let name = format!("standalone-{tag}");
                d.procs
                    .push(start_serve(bin, &name, &args, server_ops, &o.logs)?);
            }
            Topology::Bus => {
                let nats = NatsNode::start(&o.nats_bin, &format!("nats-{tag}"), &o.logs)?;
                let bus = strings(&["--bus", &nats.url(), "--bus-prefix", BUS_PREFIX]);
                d.nats = Some(nats);
                let mut core = strings(&["--role", "core", "--no-synthetic", "--feed-listen", &f]);
                core.extend(strings(&["--drain-delay-ms", "0"]));
                core.extend(bus.iter().cloned());
                let name = format!("core-{tag}");
                d.procs.push(start_serve(
                    bin,
                    &name,
                    &core,
                    procs::free_addr()?,
                    &o.logs,
                )?);
                let mut edge = strings(&["--role", "edge"]);
                edge.extend(bus);
                edge.extend(subscriber_side);
                let name = format!("edge-{tag}");
                d.procs
                    .push(start_serve(bin, &name, &edge, server_ops, &o.logs)?);
            }
        }
        Ok(d)
    }

    /// The process terminals connect to (standalone server or edge).
    pub fn server_pid(&self) -> u32 {
        self.procs.last().map_or(0, Proc::pid)
    }

    /// Every process of the deployment: (name, pid), nats-server first.
    pub fn pids(&self) -> Vec<(String, u32)> {
        let nats = self.nats.iter().map(|n| ("nats".to_string(), n.pid()));
        let serve = self.procs.iter().map(|p| {
            let role = p.name().split('-').next().unwrap_or("serve");
            (role.to_string(), p.pid())
        });
        nats.chain(serve).collect()
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        while let Some(mut p) = self.procs.pop() {
            p.stop();
        }
        // The nats-server (if any) is dropped, and so stopped, after this.
    }
}

/// The 1-, 5- and 15-minute load averages, as `/proc/loadavg` has them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Edge ÷ standalone per reported percentile (`None` where the standalone
/// value is 0: nothing to divide by).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Ratios {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
}

/// `bus ÷ standalone` per percentile.
pub fn ratios(standalone: &Summary, bus: &Summary) -> Ratios {
    let r = |a: u64, b: u64| (a > 0).then(|| b as f64 / a as f64);
    Ratios {
        p50: r(standalone.p50_ns, bus.p50_ns),
        p99: r(standalone.p99_ns, bus.p99_ns),
        p999: r(standalone.p999_ns, bus.p999_ns),
    }
}

/// The smallest and largest of some ratios (`None`s left out).
pub fn ratio_range(values: impl Iterator<Item = Option<f64>>) -> Option<(f64, f64)> {
    values.flatten().fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((v.min(lo), v.max(hi))),
    })
}

/// The `bus-ratio` summary line (`bus-ratio.jsonl`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RatioRow {
    pub scenario: String,
    pub rounds: usize,
    pub rate_per_s: u64,
    pub subscribers: usize,
    pub symbols_per_subscriber: usize,
    pub symbols_total: u16,
    pub duration_s: u64,
    /// Every round's measured deliveries pooled, per topology.
    pub standalone: Summary,
    pub core_nats_edge: Summary,
    /// Pooled core → NATS → edge ÷ pooled standalone.
    pub ratio: Ratios,
    /// Each round's own ratio, in round order.
    pub round_ratios: Vec<Ratios>,
    /// Measured deliveries missing and sequence gaps, per topology (all
    /// rounds).
    pub missing: [u64; 2],
    pub gaps: [u64; 2],
    pub load_before: String,
    pub load_after: String,
    pub edge_args: Vec<String>,
}

/// Runs `rounds` interleaved rounds of `spec` (its addresses, name and
/// label are set per run) against both topologies; `each` sees every
/// run. Odd rounds run standalone first, even rounds the bus first.
pub fn bus_ratio(
    spec: &RunSpec,
    rounds: usize,
    opts: &ServeOpts,
    mut each: impl FnMut(&RunOutcome) -> anyhow::Result<()>,
) -> anyhow::Result<RatioRow> {
    let load_before = load_average();
    let mut pooled = [latency_histogram(), latency_histogram()];
    let mut per_round = Vec::with_capacity(rounds);
    let (mut missing, mut gaps) = ([0u64; 2], [0u64; 2]);
    for r in 1..=rounds {
        let order = if r % 2 == 1 {
            [Topology::Standalone, Topology::Bus]
        } else {
            [Topology::Bus, Topology::Standalone]
        };
        let mut round: [Summary; 2] = Default::default();
        for t in order {
            let k = usize::from(t == Topology::Bus);
            let o = run_on(spec, t, opts, &format!("{}-r{r}", spec.scenario))?;
            each(&o)?;
            let _ = pooled[k].add(&o.hist);
            round[k] = o.row.latency;
            missing[k] += o.row.missing;
            gaps[k] += o.row.gaps;
        }
        per_round.push(ratios(&round[0], &round[1]));
    }
    let (standalone, bus) = (summarize(&pooled[0]), summarize(&pooled[1]));
    Ok(RatioRow {
        scenario: spec.scenario.clone(),
        rounds,
        rate_per_s: spec.rate_per_s,
        subscribers: spec.subscribers,
        symbols_per_subscriber: spec.symbols_per_subscriber,
        symbols_total: spec.symbols_total,
        duration_s: spec.duration_s,
        standalone,
        core_nats_edge: bus,
        ratio: ratios(&standalone, &bus),
        round_ratios: per_round,
        missing,
        gaps,
        load_before,
        load_after: load_average(),
        edge_args: opts.edge_args.clone(),
    })
}

/// One steady run of `spec` against a fresh deployment of `t`.
fn run_on(
    spec: &RunSpec,
    t: Topology,
    opts: &ServeOpts,
    label: &str,
) -> anyhow::Result<RunOutcome> {
    let d = Deployment::start(t, opts, label).with_context(|| format!("starting {t:?}"))?;
    let mut s = spec.clone();
    s.addr = d.listen;
    s.feed_addr = d.feed;
    s.server_pid = Some(d.server_pid());
    s.name = t.name().to_string();
    s.scenario = label.to_string();
    let o = run::run(&s).with_context(|| format!("{label} {}", t.name()));
    drop(d);
    o
}

/// Readings around the measured window of a capacity run.
#[derive(Debug, Default)]
struct Readings {
    rss_kib: [u64; 2],
    arrived: [u64; 2],
    cpu_s: Vec<[f64; 2]>,
    recv_cpu_s: [f64; 2],
    /// The server's hand-off histogram (`handoff::handoff_buckets`).
    handoff: [Vec<(f64, u64)>; 2],
    /// This host's (loopback backlog drops, TCP retransmits).
    net: [(u64, u64); 2],
    /// The server's socket writes so far.
    writes: [u64; 2],
}

/// The capacity run's hook: reads RSS and CPU at the start and the end
/// of the measured window.
struct CapacityHook {
    server_pid: u32,
    server_ops: SocketAddr,
    pids: Vec<(String, u32)>,
    w: Readings,
    /// Where the server's scrapes at the window's start and end are
    /// kept (`<logs>/metrics-<tag>-{start,end}.txt`), for a diagnosis
    /// by shard after the run.
    scrapes: PathBuf,
}

impl CapacityHook {
    fn read(&mut self, at: usize, shared: &RecvShared) {
        self.w.arrived[at] = shared.arrived.load(std::sync::atomic::Ordering::Relaxed);
        self.w.rss_kib[at] = procs::rss_kib(self.server_pid).unwrap_or(0);
        self.w.recv_cpu_s[at] = procs::threads_cpu_s("bench-recv");
        let metrics = crate::drill::scrape(self.server_ops);
        let file = format!("{}-{}.txt", self.scrapes.display(), ["start", "end"][at]);
        if let Err(e) = std::fs::write(&file, &metrics) {
            eprintln!("could not keep the scrape in {file}: {e}");
        }
        self.w.handoff[at] = crate::handoff::handoff_buckets(&metrics);
        self.w.net[at] = crate::handoff::host_net();
        self.w.writes[at] = crate::handoff::family_sum(&metrics, "pricewire_socket_writes_total");
        self.w.cpu_s.resize(self.pids.len(), [0.0; 2]);
        for (i, (_, pid)) in self.pids.iter().enumerate() {
            self.w.cpu_s[i][at] = process_cpu_s(*pid).unwrap_or(0.0);
        }
    }
}

impl DuringRun for CapacityHook {
    fn during(&mut self, shared: &RecvShared, window: Window, clock: BenchClock) {
        self.read(0, shared);
        run::Steady.during(shared, window, clock);
        self.read(1, shared);
    }
}

/// One `edge-capacity` result (`capacity.jsonl`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct CapacityRow {
    pub topology: Topology,
    pub name: String,
    pub subscribers: usize,
    pub symbols_per_subscriber: usize,
    pub symbols_total: u16,
    pub rate_target_per_s: u64,
    pub rate_achieved_per_s: f64,
    /// Measured seconds.
    pub duration_s: u64,
    /// From the first connect until all subscribers were subscribed.
    pub logon_all_ms: f64,
    /// Updates that arrived at the subscribers during the measured
    /// window, per second (whenever their ticks were sent): the edge's
    /// throughput.
    pub arrived_per_s: f64,
    /// Updates of the ticks sent in the measured window that arrived
    /// (within the drain grace), per second of the window.
    pub updates_per_s: f64,
    /// Updates per second the feed asked for: every tick to every
    /// subscriber of its symbol. Above what the server delivered, the
    /// rest was conflated (latest price per symbol, flagged).
    pub demanded_updates_per_s: f64,
    pub latency: Summary,
    /// The same deliveries' age when the kernel put them in the
    /// subscriber's socket (`--rx-stamps`): what the server delivered,
    /// without the receiver thread's own wait for a CPU.
    pub at_socket: Option<Summary>,
    /// Their age from the engine's publish to the socket (`--rx-stamps`).
    pub engine_to_socket: Option<Summary>,
    /// The same deliveries' age behind the feed's latest price of their
    /// symbol: from the send of the next tick (if one was sent before the
    /// delivery) to the delivery. What freshness means for a paced
    /// subscription, whose last price may wait up to 1/N s for its slot.
    pub behind_latest: Summary,
    /// Deliveries the server flagged stale (not latency samples).
    pub stale: u64,
    /// Of the server's writes in the window, the bucket bound (ms) below
    /// which half and 99 % handed over prices at most that old
    /// (`pricewire_price_handoff_age_seconds`; `None`: no figure).
    pub handoff_p50_le_ms: Option<f64>,
    pub handoff_p99_le_ms: Option<f64>,
    /// The share of those writes whose oldest price was over 50 ms old.
    pub handoff_over_50ms: Option<f64>,
    /// This host's loopback packets dropped at the receive backlog, and
    /// TCP segments retransmitted, in the window: a dropped segment's
    /// prices wait for their retransmission, older than they left.
    pub loopback_drops: u64,
    pub tcp_retransmits: u64,
    /// The server's socket writes per update the terminals received, in
    /// the window.
    pub writes_per_update: Option<f64>,
    /// From the latest tick delivered to the last delivery's arrival, ms:
    /// how long deliveries went on after the feed stopped.
    pub tail_ms: f64,
    /// Sequence numbers skipped by conflation, over all subscribers.
    pub gaps: u64,
    pub subscriber_errors: u64,
    /// Logons or first subscriptions refused (the logon verifier's queue
    /// full), and connections opened again after such a refusal.
    pub refused: u64,
    pub retries: u64,
    /// The serving process's RSS before any subscriber, at the start and
    /// at the end of the measured window, KiB.
    pub rss_idle_kib: u64,
    pub rss_loaded_kib: [u64; 2],
    /// (RSS at the end of the window − idle RSS) ÷ subscribers, KiB.
    pub rss_per_connection_kib: f64,
    pub recv_threads: usize,
    /// The generator's receiver threads' CPU ÷ (threads × window): near
    /// 1.0 would mean the subscriber side limited the run.
    pub recv_cpu_share: f64,
    /// CPU seconds per process over the measured window.
    pub cpu_s: Vec<(String, f64)>,
    pub load_before: String,
    pub load_after: String,
    pub edge_args: Vec<String>,
}

/// Runs `spec` (its population and rate) against a fresh `t` and
/// measures it as one edge's capacity.
pub fn edge_capacity(
    spec: &RunSpec,
    t: Topology,
    opts: &ServeOpts,
) -> anyhow::Result<(CapacityRow, RunOutcome)> {
    let load_before = load_average();
    let d = Deployment::start(t, opts, &format!("{}-{}", spec.scenario, t.name()))
        .with_context(|| format!("starting {t:?}"))?;
    let rss_idle_kib = procs::rss_kib(d.server_pid()).unwrap_or(0);
    let mut s = spec.clone();
    s.addr = d.listen;
    s.feed_addr = d.feed;
    s.server_pid = Some(d.server_pid());
    s.name = t.name().to_string();
    let mut hook = CapacityHook {
        server_pid: d.server_pid(),
        server_ops: d.server_ops,
        pids: d.pids(),
        w: Readings::default(),
        scrapes: opts
            .logs
            .join(format!("metrics-{}-{}", spec.scenario, t.name())),
    };
    let o = run::run_with(&s, &mut hook).with_context(|| format!("{} {}", s.scenario, s.name))?;
    drop(d);
    let w = &hook.w;
    let secs = spec.duration_s.max(1) as f64;
    let grown = w.rss_kib[1].saturating_sub(rss_idle_kib) as f64;
    let threads = spec.recv_threads.clamp(1, spec.subscribers.max(1));
    let handoff = crate::handoff::window(&w.handoff[0], &w.handoff[1]);
    let ms = |s: f64| s * 1e3;
    let row = CapacityRow {
        topology: t,
        name: s.name.clone(),
        subscribers: spec.subscribers,
        symbols_per_subscriber: spec.symbols_per_subscriber,
        symbols_total: spec.symbols_total,
        rate_target_per_s: spec.rate_per_s,
        rate_achieved_per_s: o.row.rate_achieved_per_s,
        duration_s: spec.duration_s,
        logon_all_ms: o.ready_ms,
        arrived_per_s: (w.arrived[1] - w.arrived[0]) as f64 / secs,
        updates_per_s: o.row.updates_per_s,
        demanded_updates_per_s: o.row.deliveries_expected as f64 / secs,
        latency: o.row.latency,
        at_socket: spec
            .rx_stamps
            .then(|| crate::hist::summarize(&o.recv.at_socket)),
        engine_to_socket: spec
            .rx_stamps
            .then(|| crate::hist::summarize(&o.recv.engine_to_socket)),
        behind_latest: crate::hist::summarize(&o.recv.behind_latest),
        stale: o.recv.stale,
        handoff_p50_le_ms: crate::handoff::quantile_le(&handoff, 0.5).map(ms),
        handoff_p99_le_ms: crate::handoff::quantile_le(&handoff, 0.99).map(ms),
        handoff_over_50ms: crate::handoff::share_over(&handoff, 0.05),
        loopback_drops: w.net[1].0.saturating_sub(w.net[0].0),
        tcp_retransmits: w.net[1].1.saturating_sub(w.net[0].1),
        writes_per_update: {
            let writes = w.writes[1].saturating_sub(w.writes[0]);
            let arrived = w.arrived[1] - w.arrived[0];
            (writes > 0 && arrived > 0).then(|| writes as f64 / arrived as f64)
        },
        tail_ms: o
            .recv
            .last_arrival_ns
            .saturating_sub(o.recv.last_scheduled_ns) as f64
            / 1e6,
        gaps: o.row.gaps,
        subscriber_errors: o.row.subscriber_errors,
        refused: o.recv.rejects,
        retries: o.recv.retries,
        rss_idle_kib,
        rss_loaded_kib: w.rss_kib,
        rss_per_connection_kib: grown / spec.subscribers.max(1) as f64,
        recv_threads: threads,
        recv_cpu_share: (w.recv_cpu_s[1] - w.recv_cpu_s[0]) / (threads as f64 * secs),
        cpu_s: (hook.pids.iter().zip(&w.cpu_s))
            .map(|((name, _), c)| (name.clone(), c[1] - c[0]))
            .collect(),
        load_before,
        load_after: load_average(),
        edge_args: opts.edge_args.clone(),
    };
    Ok((row, o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(p50: u64, p99: u64, p999: u64) -> Summary {
        Summary {
            p50_ns: p50,
            p99_ns: p99,
            p999_ns: p999,
            ..Summary::default()
        }
    }

    #[test]
    fn ratios_divide_bus_by_standalone_per_percentile() {
        let r = ratios(&summary(100, 400, 1_000), &summary(250, 400, 500));
        assert_eq!(r.p50, Some(2.5));
        assert_eq!(r.p99, Some(1.0));
        assert_eq!(r.p999, Some(0.5));
        // Nothing measured standalone: no ratio rather than infinity.
        let r = ratios(&Summary::default(), &summary(1, 2, 3));
        assert_eq!((r.p50, r.p99, r.p999), (None, None, None));
    }

    #[test]
    fn ratio_range_spans_the_rounds() {
        let v = [Some(1.5), None, Some(0.9), Some(2.0)];
        assert_eq!(ratio_range(v.into_iter()), Some((0.9, 2.0)));
        assert_eq!(ratio_range([None, None].into_iter()), None);
    }

    #[test]
    fn edge_args_replace_the_lifted_limits_they_name() {
        let all = subscriber_side_flags(&[]);
        assert_eq!(all.len(), OPEN_ADMISSION.len() * 2);
        let args: Vec<String> = ["--loop-lag-target-ms", "100", "--msg-burst=50", "--x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let out = subscriber_side_flags(&args);
        let count = |f: &str| out.iter().filter(|a| a.starts_with(f)).count();
        assert_eq!(count("--loop-lag-target-ms"), 1);
        assert_eq!(count("--msg-burst"), 1);
        assert_eq!(count("--accept-burst"), 1);
        assert!(out.ends_with(&args), "{out:?}");
        // A flag that only starts like a lifted one replaces nothing.
        let out = subscriber_side_flags(&["--msg-burst-x".to_string()]);
        assert_eq!(out.iter().filter(|a| *a == "--msg-burst").count(), 1);
    }

    #[test]
    fn topology_names_are_valid_result_names() {
        for t in [Topology::Standalone, Topology::Bus] {
            assert!(t
                .name()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_'));
        }
    }
}
