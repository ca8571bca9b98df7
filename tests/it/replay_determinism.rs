//! `pricewire replay` (the real binary) is deterministic: the same capture
//! gives the same digest of the published stream and the same tick count
//! on every run, at `--speed max` and paced, across files and recording
//! sessions, with gaps long enough for stale sweeps.

use std::process::Command;

use crate::util::capture as util;

use util::{ticks, write_capture};

const PER_SESSION: usize = 60_000;
const GAP_NS: u64 = 3_000_000_000; // > max quote age: the sweep flags stale
const STEP_NS: u64 = 20_000;

/// Two recording sessions in two segments: receive times 20 µs apart with
/// a 3 s silence in the middle of each; the second session's receive
/// times start before the first's (a restarted recorder).
fn capture(dir: &std::path::Path) -> (usize, f64) {
    for base in [90_000_000_000u64, 2_000_000_000] {
        let mut ts = ticks(PER_SESSION);
        for (i, t) in ts.iter_mut().enumerate() {
            let gap = if i >= PER_SESSION / 2 { GAP_NS } else { 0 };
            t.receive_time_ns = base + i as u64 * STEP_NS + gap;
        }
        write_capture(dir, &ts, 1 << 30);
    }
    let span_ns = 2 * ((PER_SESSION as u64 - 1) * STEP_NS + GAP_NS);
    (2 * PER_SESSION, span_ns as f64 / 1e9)
}

struct Run {
    ticks: u64,
    digest: String,
    span_s: f64,
}

fn replay(dir: &std::path::Path, speed: &str) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["replay", dir.to_str().unwrap(), "--speed", speed])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let word_after = |prefix: &str| -> String {
        let i = text
            .find(prefix)
            .unwrap_or_else(|| panic!("{prefix:?} in {text}"));
        text[i + prefix.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    Run {
        ticks: word_after("replayed ").parse().unwrap(),
        digest: word_after("digest "),
        span_s: word_after("capture span ").parse().unwrap(),
    }
}

#[test]
fn the_same_capture_gives_the_same_digest_at_every_speed() {
    let dir = tempfile::tempdir().unwrap();
    let (records, span_s) = capture(dir.path());
    let runs: Vec<Run> = ["max", "max", "max", "50x"]
        .iter()
        .map(|s| replay(dir.path(), s))
        .collect();
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r.ticks, records as u64, "run {i}: ticks replayed");
        assert_eq!(r.digest, runs[0].digest, "run {i}: digest");
        assert!(
            (r.span_s - span_s).abs() < 0.002,
            "run {i}: span {} vs {span_s}",
            r.span_s
        );
    }
}

#[test]
fn a_different_stream_gives_a_different_digest() {
    let b = tempfile::tempdir().unwrap();
    let mut ts = ticks(1_000);
    ts[500].bid += 1;
    write_capture(b.path(), &ts, 1 << 30);
    let same = ticks(1_000);
    let c = tempfile::tempdir().unwrap();
    write_capture(c.path(), &same, 1 << 30);
    assert_ne!(
        replay(b.path(), "max").digest,
        replay(c.path(), "max").digest
    );
}
