//! Saturation sweeps over rounds: each target's highest sustainable rate
//! per round (`sweep.jsonl`), and the paired comparison of those maxima.
//!
//! Cold path; allocates freely.

use std::fmt::Write as _;

use anyhow::Context;

use super::{duelists, json_lines, sp, split_round, spread, us};

/// One sweep of one target: its highest sustainable rate in one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepRow {
    pub target: String,
    pub round: u32,
    pub max_rate_per_s: u64,
    pub p99_threshold_us: u64,
    /// No step failed: the maximum is a lower bound.
    pub never_failed: bool,
}

/// Rows of `sweep.jsonl`. A row without a `scenario` (files written before
/// sweeps had rounds) is round 1.
pub fn read_sweeps(jsonl: &str) -> anyhow::Result<Vec<SweepRow>> {
    let mut rows = Vec::new();
    for line in json_lines(jsonl, "sweep.jsonl") {
        let (n, v) = line?;
        let num = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_u64)
                .with_context(|| format!("sweep.jsonl line {}: no {k}", n + 1))
        };
        let target = v
            .get("name")
            .and_then(serde_json::Value::as_str)
            .with_context(|| format!("sweep.jsonl line {}: no name", n + 1))?;
        let label = v
            .get("scenario")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("sweep");
        rows.push(SweepRow {
            target: target.to_string(),
            round: split_round(label).1,
            max_rate_per_s: num("max_sustainable_rate_per_s")?,
            p99_threshold_us: num("p99_threshold_us")?,
            never_failed: v
                .get("failed_at_rate_per_s")
                .is_some_and(serde_json::Value::is_null),
        });
    }
    Ok(rows)
}

/// Sweeps over rounds: per target the median and range of its maximum
/// sustainable rate; for pricewire against each other target, and the
/// floor against each peer, the rounds in which its maximum was higher
/// and equal, paired by round, and the median ratio of the paired maxima.
pub fn render_sweeps(rows: &[SweepRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut targets: Vec<&str> = rows.iter().map(|r| r.target.as_str()).collect();
    targets.sort_unstable();
    targets.dedup();
    let rounds = rows.iter().map(|r| r.round).max().unwrap_or(0);
    let mut thresholds: Vec<u64> = rows.iter().map(|r| r.p99_threshold_us).collect();
    thresholds.sort_unstable();
    thresholds.dedup();
    let threshold = match thresholds.as_slice() {
        [one] => format!("p99 ≤ {} µs", us(*one as f64)),
        _ => "p99 thresholds differ between rounds".to_string(),
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "### Saturation sweep — {rounds} round(s)\n\nHighest rate whose step held {threshold}, per round.\n"
    );
    s.push_str("| target | rounds | max sustainable ticks/s, median (range) |\n|---|---:|---:|\n");
    for t in &targets {
        let mine: Vec<&SweepRow> = rows.iter().filter(|r| r.target == *t).collect();
        let v: Vec<f64> = mine.iter().map(|r| r.max_rate_per_s as f64).collect();
        let capped = mine.iter().filter(|r| r.never_failed).count();
        let note = if capped > 0 {
            format!(" — no step failed in {capped}: a lower bound")
        } else {
            String::new()
        };
        let _ = writeln!(s, "| {t} | {} | {}{note} |", v.len(), sp(&spread(&v)));
    }
    let duels = sweep_duels(rows, &targets, rounds);
    if !duels.is_empty() {
        s.push_str("\nRounds with the higher maximum, paired by round:\n\n");
        s.push_str(&duels);
    }
    s.push('\n');
    s
}

/// For each pair of targets, the rounds in which the first's maximum was
/// higher and equal, and the median ratio of the paired maxima; one line
/// per pair that shared a round.
fn sweep_duels(rows: &[SweepRow], targets: &[&str], rounds: u32) -> String {
    let row_of = |t: &str, round: u32| rows.iter().find(|r| r.target == t && r.round == round);
    let mut duels = String::new();
    for (o, other) in duelists(targets) {
        let (mut paired, mut higher, mut equal, mut capped) = (0, 0, 0, 0);
        let mut ratios = Vec::new();
        for round in 1..=rounds {
            if let (Some(a), Some(b)) = (row_of(o, round), row_of(other, round)) {
                paired += 1;
                higher += usize::from(a.max_rate_per_s > b.max_rate_per_s);
                equal += usize::from(a.max_rate_per_s == b.max_rate_per_s);
                capped += usize::from(a.never_failed || b.never_failed);
                // A maximum of 0 (the first step failed) has no ratio.
                if a.max_rate_per_s > 0 && b.max_rate_per_s > 0 {
                    ratios.push(a.max_rate_per_s as f64 / b.max_rate_per_s as f64);
                }
            }
        }
        if paired == 0 {
            continue; // never in the same round (different runs' targets)
        }
        let _ = write!(
            duels,
            "- {o} vs {other}: higher in {higher}/{paired}, equal in {equal}/{paired}"
        );
        if !ratios.is_empty() {
            let _ = write!(
                duels,
                "; {o} ÷ {other} {:.2}× (median of {} paired round(s))",
                spread(&ratios).median,
                ratios.len()
            );
        }
        if capped > 0 {
            let _ = write!(
                duels,
                "; {capped} of them with a maximum where no step failed (a lower bound)"
            );
        }
        duels.push('\n');
    }
    duels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rounds::{read_rows, summarize_dirs};
    use std::path::PathBuf;

    fn sweep(name: &str, label: Option<&str>, max: u64) -> String {
        let mut v = serde_json::json!({
            "target": "pricewire",
            "name": name,
            "p99_threshold_us": 5000,
            "max_sustainable_rate_per_s": max,
            "failed_at_rate_per_s": max * 3 / 2,
            "failed_because": "p99 6000 us",
        });
        if let Some(l) = label {
            v["scenario"] = serde_json::json!(l);
        }
        format!("{v}\n")
    }

    #[test]
    fn sweeps_read_with_and_without_a_round_label() {
        let text = sweep("floor", None, 576_640) + &sweep("redis", Some("sweep-r3"), 256_285);
        let rows = read_sweeps(&text).unwrap();
        assert_eq!(rows[0].round, 1, "a row from before sweep rounds");
        assert_eq!(
            rows[1],
            SweepRow {
                target: "redis".into(),
                round: 3,
                max_rate_per_s: 256_285,
                p99_threshold_us: 5000,
                never_failed: false,
            }
        );
        // No step failed: the maximum is a lower bound.
        let mut capped: serde_json::Value =
            serde_json::from_str(sweep("pricewire", Some("sweep-r1"), 2_000_000).trim()).unwrap();
        capped["failed_at_rate_per_s"] = serde_json::Value::Null;
        assert!(read_sweeps(&format!("{capped}\n")).unwrap()[0].never_failed);
        assert!(read_sweeps("{\"name\":\"floor\"}\n").is_err(), "no rate");
        assert!(read_sweeps("not json\n").is_err());
    }

    /// Two folders of sweep rounds under a fresh `name`d folder: `a` holds
    /// rounds 1–2 of pricewire and the floor, `b` one round of pricewire,
    /// the floor and nats. Returns the base, `a`, `b` and an output folder.
    fn two_sweep_folders(name: &str) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
        let base = std::env::temp_dir().join(format!("pw-sweep-{name}-{}", std::process::id()));
        let (a, b, out) = (base.join("a"), base.join("b"), base.join("out"));
        for (dir, rows) in [
            (
                &a,
                vec![
                    ("pricewire", "sweep-r1", 576_640),
                    ("floor", "sweep-r1", 384_427),
                    ("pricewire", "sweep-r2", 384_427),
                    ("floor", "sweep-r2", 384_427),
                ],
            ),
            (
                &b,
                vec![
                    ("pricewire", "sweep-r1", 864_960),
                    ("floor", "sweep-r1", 1_297_440),
                    ("nats", "sweep-r1", 170_857),
                ],
            ),
        ] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("results.jsonl"), "").unwrap();
            let text: String = rows.iter().map(|(t, l, m)| sweep(t, Some(l), *m)).collect();
            std::fs::write(dir.join("sweep.jsonl"), text).unwrap();
        }
        (base, a, b, out)
    }

    /// Two folders of sweep rounds are one set: rounds renumbered, the
    /// median over all, and pricewire's paired count against each peer.
    #[test]
    fn sweep_rounds_from_two_folders_give_medians_and_paired_counts() {
        let (base, a, b, out) = two_sweep_folders("rounds");
        let text = summarize_dirs(&[a.clone(), b.clone()], &out).unwrap();
        assert!(text.contains("### Saturation sweep — 3 round(s)"), "{text}");
        assert!(text.contains("p99 ≤ 5,000 µs"), "{text}");
        // pricewire: 384,427 / 576,640 / 864,960 → median 576,640.
        assert!(
            text.contains("| pricewire | 3 | 576,640 (384,427–864,960) |"),
            "{text}"
        );
        assert!(
            text.contains("| floor | 3 | 384,427 (384,427–1,297,440) |"),
            "{text}"
        );
        // Round 1 higher, round 2 equal, round 3 (b's round 1) lower;
        // ratios 1.5, 1.0 and 0.667, median 1.0.
        assert!(
            text.contains(
                "- pricewire vs floor: higher in 1/3, equal in 1/3; \
                 pricewire ÷ floor 1.00× (median of 3 paired round(s))\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "- pricewire vs nats: higher in 1/1, equal in 0/1; pricewire ÷ nats 5.06×"
            ),
            "{text}"
        );
        // The floor against the peers it shared a round with, after
        // pricewire's lines.
        let floor_at = text.find("- floor vs nats").expect("floor vs nats");
        assert!(text.find("- pricewire vs").unwrap() < floor_at, "{text}");
        assert!(
            text[floor_at..]
                .starts_with("- floor vs nats: higher in 1/1, equal in 0/1; floor ÷ nats 7.59×"),
            "{text}"
        );
        assert!(!text.contains("floor vs pricewire") && !text.contains("floor vs floor"));
        assert_eq!(
            std::fs::read_to_string(out.join("rounds.md")).unwrap(),
            text
        );
        let _ = std::fs::remove_dir_all(base);
    }

    #[test]
    fn a_target_in_no_round_with_pricewire_gets_no_line() {
        let alone = [
            SweepRow {
                target: "pricewire".into(),
                round: 1,
                max_rate_per_s: 1,
                p99_threshold_us: 5000,
                never_failed: false,
            },
            SweepRow {
                target: "redis".into(),
                round: 2,
                max_rate_per_s: 1,
                p99_threshold_us: 5000,
                never_failed: false,
            },
        ];
        assert!(!render_sweeps(&alone).contains("vs redis"));
    }

    #[test]
    fn zero_and_never_failed_maxima_are_marked() {
        // A maximum of 0 (first step failed) has no ratio; a maximum from a
        // sweep in which no step failed is marked as a lower bound, in the
        // table and in every pairing it is part of.
        let row = |target: &str, max, never_failed| SweepRow {
            target: target.into(),
            round: 1,
            max_rate_per_s: max,
            p99_threshold_us: 5000,
            never_failed,
        };
        let text = render_sweeps(&[
            row("pricewire", 1_000, false),
            row("redis", 0, false),
            row("pricewire_dedicated", 2_000_000, true),
            row("floor", 1_600, false),
        ]);
        assert!(
            text.contains("- pricewire vs redis: higher in 1/1, equal in 0/1\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "| pricewire_dedicated | 1 | 2,000,000 (2,000,000–2,000,000) \
                 — no step failed in 1: a lower bound |"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "- pricewire_dedicated vs floor: higher in 1/1, equal in 0/1; \
                 pricewire_dedicated ÷ floor 1250.00× (median of 1 paired round(s)); \
                 1 of them with a maximum where no step failed (a lower bound)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("- floor vs redis: higher in 1/1, equal in 0/1\n"),
            "{text}"
        );
    }

    #[test]
    fn repeated_sweep_folders_and_rounds_are_refused() {
        let (base, a, b, out) = two_sweep_folders("repeats");
        // The same folder twice, or one round written twice, is refused.
        assert!(summarize_dirs(&[a.clone(), a.clone()], &out).is_err());
        let twice = sweep("floor", Some("sweep-r1"), 1) + &sweep("floor", Some("sweep-r1"), 2);
        std::fs::write(b.join("sweep.jsonl"), twice).unwrap();
        let err = summarize_dirs(std::slice::from_ref(&b), &out)
            .unwrap_err()
            .to_string();
        assert!(err.contains("appears twice"), "{err}");
        // A folder with neither runs nor sweeps says so.
        std::fs::remove_file(b.join("sweep.jsonl")).unwrap();
        let err = summarize_dirs(&[b], &out).unwrap_err().to_string();
        assert!(
            err.contains("neither runs outside sweeps nor sweep results"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(base);
    }

    #[test]
    fn sweep_steps_are_not_steady_runs() {
        // Steady-run summaries skip every row whose label starts with
        // `sweep`, which every sweep step's does.
        for label in ["sweep", "sweep-r2", "x10"] {
            assert!(crate::run::sweep_label(label).starts_with("sweep"));
        }
        assert_eq!(crate::run::sweep_label("sweep-r2"), "sweep-r2");
        assert_eq!(crate::run::sweep_label("x10"), "sweep-x10");
        let rows = read_rows(
            &serde_json::json!({
                "name": "floor", "scenario": "sweep-r2-10000",
                "latency": {"p50_ns": 1, "p99_ns": 1, "p999_ns": 1},
            })
            .to_string(),
        )
        .unwrap();
        assert!(rows.is_empty());
    }
}
