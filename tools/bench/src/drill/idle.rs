//! `--scenario idle-capacity`: what an idle terminal costs an edge.
//! `--herd-clients` raw protocol clients from `--drill-sources` source
//! addresses log on, subscribe to one symbol and heartbeat at the 1-s
//! default (each from its own phase); nothing else happens. Once every
//! one is logged on and a settling second has passed, the server's CPU
//! time (user + system, `/proc/PID/stat`) and its threads' are read over
//! `--drill-seconds`, with its RSS before the herd and after it.
//!
//! Printed: server CPU per connection-second (issue #28's goal: at most
//! 8 µs, so that 100,000 terminals fit in under one core), the same by
//! server thread, RSS per connection, the drivers' own CPU. The server
//! runs without a feed by default (`--no-synthetic`): the subscribed
//! symbol never ticks, so what is measured is the cost of keeping
//! sessions, not of prices. Checked: every client logged on, no session
//! lost during the window (no idle cut, no other cut).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::raw::{await_all_on, source, spawn_drivers, Raw, Tally};
use super::{start_server, Verdict};
use crate::cli::BenchArgs;
use crate::procs;

/// Driver threads: each runs a share of the clients on one mio loop.
const DRIVERS: usize = 2;
/// Each client's read buffer: an idle session receives heartbeats and one
/// snapshot.
const CLIENT_BUF: usize = 8 * 1024;
/// After the last logon, before the window opens (the logons' own work
/// and the subscribe snapshots are not the idle cost).
const SETTLE: Duration = Duration::from_secs(2);
/// The goal, µs of server CPU per connection-second.
const GOAL_US: f64 = 8.0;

/// Runs the drill.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let d = &args.drill;
    let clients = args.herd_clients;
    // Enough source addresses for the shipped per-address connection cap.
    let per_ip = pricewire::admission::IP_CONNECTIONS_MAX_DEFAULT as usize;
    let sources = d
        .drill_sources
        .max(clients.div_ceil(per_ip * 9 / 10))
        .min(250);
    procs::raise_open_files_limit(clients + 256)?;
    let server = start_server(args, &["--no-synthetic"])?;
    let pid = server.proc.pid();
    let mut v = Verdict::new("idle-capacity");
    let rss0 = procs::rss_kib(pid).unwrap_or(0);
    let t = Arc::new(Tally::default());
    let SocketAddr::V4(dst) = server.addr else {
        anyhow::bail!("the drill server listens on IPv4 loopback");
    };
    let stop = Arc::new(AtomicBool::new(false));
    // Logons spread at 500/s (at least over 10 s): half the shipped logon
    // rate, so the herd's arrival is not what is measured.
    let spread_us = (clients as u64 * 2_000).max(10_000_000);
    let t0 = Instant::now();
    let make = |i: usize| {
        let at = t0 + Duration::from_micros(i as u64 * spread_us / clients as u64);
        Raw::new(source(i, sources), at, CLIENT_BUF)
    };
    let drivers = spawn_drivers((dst, "idle-drive"), clients, DRIVERS, make, (&t, &stop))?;
    let give_up = t0 + Duration::from_micros(spread_us) + Duration::from_secs(60);
    let all_on = await_all_on(&t, clients, t0, give_up);
    v.fig(format!(
        "{clients} clients from {sources} addresses: all logged on after {}",
        all_on.map_or("never".into(), |a| format!("{:.2} s", a.as_secs_f64()))
    ));
    let window = Duration::from_secs(d.drill_seconds);
    let measured = all_on.map(|_| measure(pid, &t, window));
    stop.store(true, Relaxed);
    for dr in drivers {
        let _ = dr.join();
    }
    let rss1 = procs::rss_kib(pid).unwrap_or(0);
    match measured {
        Some(m) => report(&mut v, &m, clients, window, (rss0, rss1)),
        None => v.check(
            false,
            format!("every client logged on: {}", t.on.load(Relaxed)),
        ),
    }
    v.finish()
}

/// What the window measured.
struct Measured {
    server_cpu_s: f64,
    by_thread: BTreeMap<String, f64>,
    drivers_cpu_s: f64,
    lost: u64,
    idle_cuts: u64,
    on_at_end: u64,
    rss_kib: u64,
}

fn measure(pid: u32, t: &Tally, window: Duration) -> Measured {
    std::thread::sleep(SETTLE);
    let (lost0, idle0) = (t.other_cuts.load(Relaxed), t.idle_cuts.load(Relaxed));
    let cpu0 = crate::process_cpu_s(pid).unwrap_or(0.0);
    let threads0 = server_threads_cpu(pid);
    let drv0 = procs::threads_cpu_s("idle-drive");
    std::thread::sleep(window);
    let cpu1 = crate::process_cpu_s(pid).unwrap_or(0.0);
    let mut by_thread = server_threads_cpu(pid);
    for (name, s) in by_thread.iter_mut() {
        *s -= threads0.get(name).copied().unwrap_or(0.0);
    }
    Measured {
        server_cpu_s: cpu1 - cpu0,
        by_thread,
        drivers_cpu_s: procs::threads_cpu_s("idle-drive") - drv0,
        lost: t.other_cuts.load(Relaxed) - lost0,
        idle_cuts: t.idle_cuts.load(Relaxed) - idle0,
        on_at_end: t.on.load(Relaxed),
        rss_kib: procs::rss_kib(pid).unwrap_or(0),
    }
}

fn report(v: &mut Verdict, m: &Measured, clients: usize, window: Duration, rss: (u64, u64)) {
    let conn_s = clients as f64 * window.as_secs_f64();
    let per = m.server_cpu_s * 1e6 / conn_s;
    v.fig(format!(
        "server CPU {:.2} s over {:?} ({:.1} % of a core): {per:.2} us per connection-second \
         (goal <= {GOAL_US} us: {}); 100,000 sessions would take {:.2} cores",
        m.server_cpu_s,
        window,
        m.server_cpu_s * 100.0 / window.as_secs_f64(),
        if per <= GOAL_US { "met" } else { "not met" },
        per * 100_000.0 / 1e6
    ));
    let threads: Vec<String> = m
        .by_thread
        .iter()
        .filter(|(_, s)| **s > 0.0)
        .map(|(n, s)| format!("{n} {:.2} us", s * 1e6 / conn_s))
        .collect();
    v.fig(format!(
        "by server thread, per connection-second: {}",
        threads.join(", ")
    ));
    let per_conn = (m.rss_kib.saturating_sub(rss.0)) as f64 / clients as f64;
    v.fig(format!(
        "RSS {} KiB before the herd, {} KiB in the window, {} KiB after: {per_conn:.1} KiB per connection",
        rss.0, m.rss_kib, rss.1
    ));
    v.fig(format!(
        "drivers' CPU {:.2} s (the clients, on the same cores)",
        m.drivers_cpu_s
    ));
    v.check(
        m.on_at_end as usize >= clients,
        format!("every client still logged on at the end: {}", m.on_at_end),
    );
    v.check(
        m.idle_cuts == 0,
        format!("no idle cut in the window: {}", m.idle_cuts),
    );
    v.check(
        m.lost == 0,
        format!("no session lost in the window: {}", m.lost),
    );
}

/// CPU seconds of server `pid`'s threads, summed by name with trailing
/// digits dropped (`pw-shard0`, `pw-shard1` → `pw-shard`).
fn server_threads_cpu(pid: u32) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in dir.flatten() {
        let Ok(comm) = std::fs::read_to_string(task.path().join("comm")) else {
            continue;
        };
        let name = comm
            .trim_end()
            .trim_end_matches(|c: char| c.is_ascii_digit());
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let cpu = crate::stat_cpu_s(&format!("/proc/{pid}/task/{tid}/stat")).unwrap_or(0.0);
        *out.entry(name.to_string()).or_insert(0.0) += cpu;
    }
    out
}
