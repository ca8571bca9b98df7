//! Smoke test of `pricewire-bench`: a short, tiny-rate floor run against a
//! relay running in this test process, checking the shape of the output
//! (progress line, summary line, JSON + CSV rows, percentile and counts
//! files), a saturation sweep, a Redis run against a real redis-server,
//! a small herd against the real pricewire binary, and `pricewire bench`
//! passing its arguments and exit code through.
//!
//! The pricewire binary is the one beside `pricewire-bench` in the target
//! directory: `cargo test --workspace` builds both.

#[path = "../../../tests/util/nats.rs"]
mod nats;
#[path = "../../../tests/util/net.rs"]
mod net;
// The service crate's test helpers, of which this binary uses a part.
#[allow(dead_code)]
#[path = "../../../tests/util/redis.rs"]
mod redis;
#[path = "../../../tests/util/wait.rs"]
mod wait;

use std::path::PathBuf;
use std::process::Command;

use pricewire_bench::relay::{self, RelayConfig};

const BENCH: &str = env!("CARGO_BIN_EXE_pricewire-bench");

/// The service binary built beside `pricewire-bench`.
fn service_bin() -> PathBuf {
    let bin = std::path::Path::new(BENCH).with_file_name("pricewire");
    assert!(
        bin.is_file(),
        "{} missing: run `cargo test --workspace` (or `cargo build -p pricewire` first)",
        bin.display()
    );
    bin
}

#[test]
fn floor_run_writes_rows_and_distribution() {
    let relay = relay::spawn(RelayConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(BENCH)
        .args(["--target", "floor", "--connect"])
        .arg(relay.local_addr.to_string())
        .args([
            "--rate",
            "500",
            "--subscribers",
            "4",
            "--symbols-per-subscriber",
            "2",
        ])
        .args(["--duration-s", "1", "--warmup-s", "1", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    relay.stop();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(stdout.starts_with("floor steady rate"), "{stdout}");
    assert!(stderr.contains("p99"), "progress line missing: {stderr}");

    let csv = std::fs::read_to_string(out.path().join("results.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2, "{csv}");
    assert!(lines[0].starts_with("target,scenario,rate_target_per_s"));
    let cols: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(cols.len(), lines[0].split(',').count());
    assert_eq!(cols[0], "floor");
    assert_eq!(cols[1], "steady");

    let json = std::fs::read_to_string(out.path().join("results.jsonl")).unwrap();
    let row: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(row["target"], "floor");
    assert_eq!(row["payload_bytes"], 76);
    let received = row["deliveries_received"].as_u64().unwrap();
    assert!(received > 0, "{row}");
    let lat = &row["latency"];
    let p50 = lat["p50_ns"].as_u64().unwrap();
    let p99 = lat["p99_ns"].as_u64().unwrap();
    let max = lat["max_ns"].as_u64().unwrap();
    assert!(p50 > 0 && p50 <= p99 && p99 <= max, "{lat}");

    let hdr = std::fs::read_to_string(out.path().join("hdr-steady-floor.txt")).unwrap();
    assert!(hdr.contains("Percentile"));
    assert!(hdr.contains(&format!("Total count = {received}")), "{hdr}");

    // The exact bucket counts the rounds summary pools add up to the run.
    let counts = std::fs::read_to_string(out.path().join("counts-steady-floor.csv")).unwrap();
    let total: u64 = counts
        .lines()
        .skip(1)
        .map(|l| l.split_once(',').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, received, "{counts}");
}

/// The Redis target against a real redis-server: every delivery arrives,
/// and the publisher asked Redis not to answer its PUBLISHes.
#[test]
fn redis_run_delivers_everything_without_publish_replies() {
    let server = redis::RedisServer::start();
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(BENCH)
        .args(["--target", "redis", "--connect"])
        .arg(server.addr().to_string())
        .args(["--rate", "500", "--subscribers", "4"])
        .args(["--symbols-per-subscriber", "2", "--quiet"])
        .args(["--duration-s", "1", "--warmup-s", "1", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let json = std::fs::read_to_string(out.path().join("results.jsonl")).unwrap();
    let row: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(row["target"], "redis");
    let expected = row["deliveries_expected"].as_u64().unwrap();
    assert!(expected > 0, "{row}");
    assert_eq!(row["deliveries_received"].as_u64(), Some(expected), "{row}");
    assert_eq!(row["missing"], 0, "{row}");

    // CLIENT REPLY OFF was accepted once; PUBLISH ran for every tick.
    let stats = match server.command(&[b"INFO", b"commandstats"]) {
        pricewire::refdata::Value::Bulk(b) => String::from_utf8(b).unwrap(),
        other => panic!("INFO answered {other:?}"),
    };
    let line = |cmd: &str| {
        stats
            .lines()
            .find(|l| l.starts_with(&format!("cmdstat_{cmd}:")))
            .unwrap_or_else(|| panic!("no {cmd} in {stats}"))
            .to_string()
    };
    let reply = line("client|reply");
    assert!(reply.contains("calls=1,"), "{reply}");
    assert!(reply.contains("failed_calls=0"), "{reply}");
    assert!(line("publish").contains("failed_calls=0"), "{stats}");
}

/// Refusals, the first through `pricewire bench`: the service binary runs
/// the `pricewire-bench` beside it with the same arguments, and its
/// message and exit code (1: a refused run) come through unchanged.
#[test]
fn peer_target_without_address_is_refused() {
    let output = Command::new(service_bin())
        .args(["bench", "--target", "redis", "--duration-s", "1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("--connect is required"));
    let output = Command::new(BENCH)
        .args(["--target", "floor", "--herd-symbol", "3"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("--herd-symbol applies to --scenario herd only"));
}

/// One sweep of the floor against the relay at `relay`, 200 to 800
/// ticks/s, with `threshold_us` as its p99 bound, written into `out`;
/// returns stdout, the sweep's line and the labels of its runs.
fn floor_sweep(
    relay: std::net::SocketAddr,
    threshold_us: &str,
    out: &std::path::Path,
) -> (String, serde_json::Value, Vec<String>) {
    let output = Command::new(BENCH)
        .args(["--target", "floor", "--scenario", "sweep", "--connect"])
        .arg(relay.to_string())
        .args([
            "--rate",
            "200",
            "--sweep-factor",
            "2",
            "--sweep-max-rate",
            "800",
        ])
        .args(["--sweep-refine", "3", "--sweep-retries", "0"])
        .args(["--p99-threshold-us", threshold_us])
        .args(["--subscribers", "2", "--duration-s", "1", "--warmup-s", "0"])
        .args(["--quiet", "--out"])
        .arg(out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = std::fs::read_to_string(out.join("sweep.jsonl")).unwrap();
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    let labels: Vec<String> = std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            r["scenario"].as_str().unwrap().to_string()
        })
        .collect();
    (stdout, v, labels)
}

/// The saturation sweep end to end against the relay: every step's run is
/// written under a `sweep-<rate>` label and the sweep's line names the
/// rates it tried. A threshold nothing can meet fails at the first step,
/// which is not refined (nothing passed to bracket).
#[test]
fn floor_sweep_climbs_and_reports_its_steps() {
    let relay = relay::spawn(RelayConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();

    // A second of p99 is met at every step: the ladder reaches its top.
    let all = tempfile::tempdir().unwrap();
    let (stdout, v, labels) = floor_sweep(relay.local_addr, "1000000", all.path());
    assert_eq!(v["max_sustainable_rate_per_s"], 800, "{v}");
    assert_eq!(v["failed_at_rate_per_s"], serde_json::Value::Null, "{v}");
    assert_eq!(v["rates_tried"], serde_json::json!([200, 400, 800]), "{v}");
    assert_eq!(labels, ["sweep-200", "sweep-400", "sweep-800"]);
    // Each step's distribution is written; its counts (for pooling steady
    // rounds) are not.
    for rate in [200, 400, 800] {
        assert!(all
            .path()
            .join(format!("hdr-sweep-{rate}-floor.txt"))
            .exists());
        assert!(!all
            .path()
            .join(format!("counts-sweep-{rate}-floor.csv"))
            .exists());
    }
    assert!(
        stdout.contains("max sustainable 800 ticks/s") && stdout.contains("no step failed"),
        "{stdout}"
    );

    // No p99 is under 0 µs: the first step fails and nothing is bisected.
    let none = tempfile::tempdir().unwrap();
    let (stdout, v, labels) = floor_sweep(relay.local_addr, "0", none.path());
    relay.stop();
    assert_eq!(v["max_sustainable_rate_per_s"], 0, "{v}");
    assert_eq!(v["failed_at_rate_per_s"], 200, "{v}");
    assert_eq!(v["rates_tried"], serde_json::json!([200]), "{v}");
    assert_eq!(labels, ["sweep-200"]);
    assert!(
        stdout.contains("lowest failing 200 ticks/s: p99"),
        "{stdout}"
    );
}

/// The bench's herd scenario against the server at `listen`/`feed`/`ops`:
/// 20 herd clients on symbol 24, one second before and after.
fn herd_bench(
    listen: std::net::SocketAddr,
    feed: std::net::SocketAddr,
    ops: std::net::SocketAddr,
    server_pid: u32,
    out: &std::path::Path,
) -> std::process::Output {
    Command::new(BENCH)
        .args(["--target", "pricewire", "--scenario", "herd"])
        .args([
            "--connect",
            &listen.to_string(),
            "--feed",
            &feed.to_string(),
        ])
        .args(["--ops", &ops.to_string()])
        .args(["--server-pid", &server_pid.to_string()])
        .args(["--rate", "500", "--subscribers", "2", "--symbols", "24"])
        .args(["--herd-clients", "20", "--herd-symbol", "24"])
        .args(["--herd-before-s", "1", "--herd-after-s", "1"])
        .args([
            "--herd-timeout-s",
            "20",
            "--warmup-s",
            "0",
            "--quiet",
            "--out",
        ])
        .arg(out)
        .output()
        .unwrap()
}

/// A small herd against the real binary, every herd client on a symbol
/// the generator never ticks (`--herd-symbol 24` with 24 ticked symbols of
/// the server's 25): the row has the before, during and after phases and
/// names the symbol, every client logs on and subscribes.
#[test]
fn herd_on_a_quiet_symbol_reports_before_during_and_after() {
    let (listen, feed, ops) = (net::free_addr(), net::free_addr(), net::free_addr());
    let mut server = Command::new(service_bin())
        .args(["serve", "--no-synthetic", "--drain-delay-ms", "0"])
        .args(["--listen", &listen.to_string()])
        .args(["--feed-listen", &feed.to_string()])
        .args(["--ops-listen", &ops.to_string()])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let up = wait::wait_until(std::time::Duration::from_secs(30), || {
        std::net::TcpStream::connect(listen).is_ok() && std::net::TcpStream::connect(feed).is_ok()
    });
    let out = tempfile::tempdir().unwrap();
    let output = up.then(|| herd_bench(listen, feed, ops, server.id(), out.path()));
    let _ = server.kill();
    let _ = server.wait();
    let output = output.expect("the server never listened");
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let line = std::fs::read_to_string(out.path().join("herd.jsonl")).unwrap();
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(v["herd"]["subscribed"], 20, "{v}");
    assert_eq!(v["herd_symbol"], 24, "{v}");
    for phase in ["before", "during", "after"] {
        let p99 = v[format!("p99_{phase}_us")].as_f64();
        assert!(p99.is_some_and(|p| p > 0.0), "{phase}: {v}");
    }
    let (p50, p99) = (v["p50_after_us"].as_f64(), v["p99_after_us"].as_f64());
    assert!(p50.unwrap() <= p99.unwrap(), "{v}");
    // On a symbol nobody ticks the herd got no updates, and nobody was
    // dropped while the whole herd stayed connected.
    assert_eq!(v["herd"]["updates_received"], 0, "{v}");
    assert_eq!(v["herd"]["update_gaps"], 0, "{v}");
    assert_eq!(v["herd"]["dropped_after"], 0, "{v}");
    // The herd's own cost and the server's are on the record.
    assert!(
        v["herd"]["herd_thread_cpu_s"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert!(v["server_cpu_s"].as_f64().unwrap() > 0.0, "{v}");
    // The ops listener's reject counters were read (none refused here).
    let stages = v["rejects_by_stage"].as_array().unwrap();
    assert!(stages.iter().any(|s| s[0] == "logon"), "{v}");
}

/// `pricewire-bench ARGS --quiet --out DIR` with the service binary
/// beside it; fails the test with both outputs when the run fails.
fn scale_run(args: &[&str], out: &std::path::Path) -> String {
    nats::ensure_installed();
    let output = Command::new(BENCH)
        .args(args)
        .args(["--pricewire-bin", &service_bin().display().to_string()])
        .args(["--quiet", "--out"])
        .arg(out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The ratio scenario in its smallest form: one round of standalone and
/// core → NATS → edge (real nats-server), both delivering every measured
/// tick to every subscriber, and a ratio per percentile.
#[test]
fn bus_ratio_runs_both_topologies_and_divides() {
    let out = tempfile::tempdir().unwrap();
    let stdout = scale_run(
        &[
            "--scenario",
            "bus-ratio",
            "--rounds",
            "1",
            "--rate",
            "500",
            "--subscribers",
            "4",
            "--duration-s",
            "1",
            "--warmup-s",
            "1",
        ],
        out.path(),
    );
    assert!(stdout.contains("| edge ÷ standalone |"), "{stdout}");
    let line = std::fs::read_to_string(out.path().join("bus-ratio.jsonl")).unwrap();
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    for t in ["standalone", "core_nats_edge"] {
        assert!(v[t]["count"].as_u64().unwrap() > 0, "{t}: {v}");
    }
    // Warm-up and drain: every measured tick reached every subscriber.
    assert_eq!(v["missing"], serde_json::json!([0, 0]), "{v}");
    let r = v["ratio"]["p50"].as_f64().unwrap();
    let direct = v["core_nats_edge"]["p50_ns"].as_f64().unwrap()
        / v["standalone"]["p50_ns"].as_f64().unwrap();
    assert!((r - direct).abs() < 1e-9, "{v}");
    // Each topology's run is a row of its own, and its servers' logs stay.
    let rows = std::fs::read_to_string(out.path().join("results.csv")).unwrap();
    assert!(
        rows.contains("standalone,bus-ratio-r1,") && rows.contains("core_nats_edge,bus-ratio-r1,")
    );
    assert!(out.path().join("logs/edge-bus-ratio-r1.log").is_file());
}

/// The capacity scenario, quick: 300 subscribers x 5 symbols on an edge,
/// split over two receiver threads, with an extra edge argument passed
/// through: every subscriber logs on and receives, and the logon time,
/// RSS per connection and the receivers' CPU share are on the record.
#[test]
fn edge_capacity_quick_mode_measures_one_edge() {
    let out = tempfile::tempdir().unwrap();
    let stdout = scale_run(
        &[
            "--scenario",
            "edge-capacity",
            "--subscribers",
            "300",
            "--rate",
            "1000",
            "--duration-s",
            "1",
            "--warmup-s",
            "1",
            "--edge-arg",
            "--heartbeat-ms 900",
        ],
        out.path(),
    );
    assert!(
        stdout.contains("core_nats_edge capacity: 300 subscribers"),
        "{stdout}"
    );
    let line = std::fs::read_to_string(out.path().join("capacity.jsonl")).unwrap();
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(v["topology"], "bus", "{v}");
    assert_eq!(v["recv_threads"], 2, "{v}");
    assert_eq!(
        v["edge_args"],
        serde_json::json!(["--heartbeat-ms", "900"]),
        "{v}"
    );
    assert_eq!(v["subscriber_errors"], 0, "{v}");
    assert!(v["logon_all_ms"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["updates_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["arrived_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["latency"]["p99_ns"].as_u64().unwrap() > 0, "{v}");
    // 300 connections grow the edge's RSS; the share is per connection.
    let per = v["rss_per_connection_kib"].as_f64().unwrap();
    assert!(per > 0.0 && per < 1024.0, "{v}");
    let share = v["recv_cpu_share"].as_f64().unwrap();
    assert!((0.0..=1.5).contains(&share), "{v}");
    let names: Vec<&str> = v["cpu_s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nats", "core", "edge"], "{v}");
}
