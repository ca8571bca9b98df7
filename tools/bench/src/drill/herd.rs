//! `--scenario herd-starved`: `--herd-clients` raw protocol clients from
//! `--drill-sources` source addresses (127.0.0.2 on, each socket bound
//! before connect) log on, subscribe, heartbeat and read, beside one
//! CPU-spinning process per core (`--drill-spinners`, 0 for the reference
//! run); four observers subscribed before the herd measure each price's
//! age (engine publish to receipt) and the longest gap between prices.
//! Refused clients come back after the retry-after they were given. The
//! herd stays connected 4 s after its last logon (more than the
//! 3-heartbeat idle cut).
//!
//! Checked: every client logged on within `--drill-logon-bound-s`; no
//! receiving client was cut as idle; the observers kept their sessions and
//! their price age stayed bounded (p99 and worst printed; the worst gap
//! below 5 s).

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, Event};
use pricewire::wire::TIER_ACCOUNT_DEFAULT;

use super::raw::{await_all_on, source, spawn_drivers, Raw, Tally, HEARTBEAT_MS};
use super::{quantiles, scrape, series, start_server, Verdict};
use crate::cli::BenchArgs;
use crate::procs::Proc;

const HOLD: Duration = Duration::from_secs(4);
const DRIVERS: usize = 4;
const OBSERVERS: usize = 4;
const MAX_GAP: Duration = Duration::from_secs(5);

/// Runs the drill.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let d = &args.drill;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let spinners = d.drill_spinners.unwrap_or(cores);
    let clients = args.herd_clients;
    crate::procs::raise_open_files_limit(clients + 256)?;
    let server = start_server(args, &["--synthetic-rate", "2000"])?;
    let mut v = Verdict::new("herd-starved");
    v.fig(format!(
        "herd {clients} clients from {} addresses, {spinners} spinners, {cores} cores",
        d.drill_sources
    ));
    let logs = tempfile::tempdir()?;
    let mut spin: Vec<Proc> = (0..spinners)
        .map(|k| {
            let mut c = Command::new("sh");
            c.args(["-c", "while :; do :; done"]);
            Proc::spawn(&format!("spinner{k}"), c, logs.path())
        })
        .collect::<anyhow::Result<_>>()?;
    let stop = Arc::new(AtomicBool::new(false));
    let observers: Vec<_> = (0..OBSERVERS)
        .map(|k| observer(server.addr, k as u64, stop.clone()))
        .collect::<anyhow::Result<_>>()?;
    let t = Arc::new(Tally::default());
    let SocketAddr::V4(dst) = server.addr else {
        anyhow::bail!("the drill server listens on IPv4 loopback");
    };
    let t0 = Instant::now();
    let make = |i: usize| {
        let at = t0 + Duration::from_millis(i as u64 % 1000);
        Raw::new(source(i, d.drill_sources), at, 64 * 1024)
    };
    let drivers = spawn_drivers((dst, "herd-drive"), clients, DRIVERS, make, (&t, &stop))?;
    let bound = Duration::from_secs(d.drill_logon_bound_s);
    let give_up = t0 + bound.max(Duration::from_secs(60)) + Duration::from_secs(30);
    let all_on = await_all_on(&t, clients, t0, give_up);
    std::thread::sleep(HOLD);
    let text = scrape(server.ops);
    stop.store(true, Relaxed);
    for dr in drivers {
        let _ = dr.join();
    }
    let obs: Vec<Observed> = observers
        .into_iter()
        .filter_map(|o| o.join().ok())
        .collect();
    for s in &mut spin {
        s.stop();
    }
    report(&mut v, &t, all_on, bound, &obs, &text);
    v.finish()
}

fn report(
    v: &mut Verdict,
    t: &Tally,
    all_on: Option<Duration>,
    bound: Duration,
    obs: &[Observed],
    text: &str,
) {
    v.fig(format!(
        "all logged on after {}; logons {}, refusals {}, connect errors {}",
        all_on.map_or("never".into(), |d| format!("{:.2} s", d.as_secs_f64())),
        t.logons.load(Relaxed),
        t.refusals.load(Relaxed),
        t.connect_errors.load(Relaxed)
    ));
    let mut ages: Vec<u64> = obs.iter().flat_map(|o| o.ages_us.iter().copied()).collect();
    let (p50, p99, max) = quantiles(&mut ages);
    let gap = obs.iter().map(|o| o.worst_gap).max().unwrap_or_default();
    let lost: u64 = obs.iter().map(|o| o.lost).sum();
    v.fig(format!("observers: price age p50 {p50} us, p99 {p99} us, max {max} us; worst gap {gap:?}; {} prices", ages.len()));
    let lag_refusals = series(
        text,
        "pricewire_admission_rejects_total{stage=\"loop_lag\"}",
    )
    .unwrap_or(0.0);
    let mut lagging = String::new();
    for k in 0..8 {
        let l = format!("{{shard=\"{k}\"}}");
        let Some(ep) = series(text, &format!("pricewire_shard_lag_episodes_total{l}")) else {
            break;
        };
        let cpu = series(text, &format!("pricewire_shard_cpu_ratio{l}")).unwrap_or(0.0);
        let wait = series(text, &format!("pricewire_shard_run_wait_ratio{l}")).unwrap_or(0.0);
        let paced =
            series(text, &format!("pricewire_shard_lag_logons_paced_total{l}")).unwrap_or(0.0);
        lagging.push_str(&format!(
            " shard{k}: episodes {ep}, cpu {cpu:.2}, run-wait {wait:.2}, paced logons {paced};"
        ));
    }
    v.fig(format!(
        "server: loop_lag refusals {lag_refusals};{lagging}"
    ));
    let late = series(
        text,
        "pricewire_session_disconnects_total{reason=\"logon_verdict_late\"}",
    )
    .unwrap_or(0.0);
    v.fig(format!("server: logon verdicts late {late}"));
    // Every client sends its Logon right after connecting: a
    // logon_timeout would be the server not reading it in time.
    let timeouts = series(
        text,
        "pricewire_session_disconnects_total{reason=\"logon_timeout\"}",
    )
    .unwrap_or(0.0);
    v.check(
        timeouts == 0.0,
        format!("no client that sent its Logon cut with logon_timeout: {timeouts}"),
    );
    v.check(
        all_on.is_some_and(|d| d <= bound),
        format!("every client logged on within {bound:?}"),
    );
    v.check(
        t.idle_cuts.load(Relaxed) == 0,
        format!(
            "no receiving client cut as idle: {}",
            t.idle_cuts.load(Relaxed)
        ),
    );
    v.check(
        lost == 0,
        format!("observers kept their sessions: lost {lost}"),
    );
    v.check(
        gap <= MAX_GAP && !ages.is_empty(),
        format!("observers' worst gap {gap:?} <= {MAX_GAP:?}"),
    );
}

struct Observed {
    ages_us: Vec<u64>,
    worst_gap: Duration,
    lost: u64,
}

fn observer(
    addr: SocketAddr,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<Observed>> {
    let mut cfg = ClientConfig::new(addr, "watch", "watch");
    cfg.rng_seed = Some(seed);
    cfg.heartbeat_ms = HEARTBEAT_MS;
    let mut c = Client::connect(cfg).map_err(|e| anyhow::anyhow!("observer: {e}"))?;
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD", "GBPUSD", "XAUUSD"])
        .map_err(|e| anyhow::anyhow!("observer subscribe: {e}"))?;
    Ok(std::thread::spawn(move || {
        let mut o = Observed {
            ages_us: Vec::new(),
            worst_gap: Duration::ZERO,
            lost: 0,
        };
        let mut last = Instant::now();
        while !stop.load(Relaxed) {
            match c.next_event(Duration::from_millis(20)) {
                Ok(Some(Event::Price(p))) => {
                    let now = pricewire::clock::wall_ns();
                    o.ages_us
                        .push(now.saturating_sub(p.body.engine_time_ns) / 1_000);
                    o.worst_gap = o.worst_gap.max(last.elapsed());
                    last = Instant::now();
                }
                Ok(Some(Event::Disconnected { .. })) => o.lost += 1,
                _ => {}
            }
        }
        o.worst_gap = o
            .worst_gap
            .max(last.elapsed().min(Duration::from_millis(100)));
        o
    }))
}
