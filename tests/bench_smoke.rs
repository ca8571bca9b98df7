//! Smoke test of `pricewire bench`: a short, tiny-rate floor run against a
//! relay running in this test process, checking the shape of the output
//! (progress line, summary line, JSON + CSV rows, percentile and counts
//! files), and a Redis run against a real redis-server.

#[path = "util/redis.rs"]
mod redis;

use std::process::Command;

use pricewire::bench::relay::{self, RelayConfig};

#[test]
fn floor_run_writes_rows_and_distribution() {
    let relay = relay::spawn(RelayConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["bench", "--target", "floor", "--connect"])
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
    let output = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["bench", "--target", "redis", "--connect"])
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

#[test]
fn peer_target_without_address_is_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["bench", "--target", "redis", "--duration-s", "1"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--connect is required"));
}

/// The saturation sweep end to end against the relay: every step's run is
/// written under a `sweep-<rate>` label and the sweep's line names the
/// rates it tried. A threshold nothing can meet fails at the first step,
/// which is not refined (nothing passed to bracket).
#[test]
fn floor_sweep_climbs_and_reports_its_steps() {
    let relay = relay::spawn(RelayConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    let sweep = |threshold_us: &str, out: &std::path::Path| {
        let output = Command::new(env!("CARGO_BIN_EXE_pricewire"))
            .args([
                "bench",
                "--target",
                "floor",
                "--scenario",
                "sweep",
                "--connect",
            ])
            .arg(relay.local_addr.to_string())
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
    };

    // A second of p99 is met at every step: the ladder reaches its top.
    let all = tempfile::tempdir().unwrap();
    let (stdout, v, labels) = sweep("1000000", all.path());
    assert_eq!(v["max_sustainable_rate_per_s"], 800, "{v}");
    assert_eq!(v["failed_at_rate_per_s"], serde_json::Value::Null, "{v}");
    assert_eq!(v["rates_tried"], serde_json::json!([200, 400, 800]), "{v}");
    assert_eq!(labels, ["sweep-200", "sweep-400", "sweep-800"]);
    assert!(
        stdout.contains("max sustainable 800 ticks/s") && stdout.contains("no step failed"),
        "{stdout}"
    );

    // No p99 is under 0 µs: the first step fails and nothing is bisected.
    let none = tempfile::tempdir().unwrap();
    let (stdout, v, labels) = sweep("0", none.path());
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
