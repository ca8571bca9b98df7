//! Repeated rounds and what they add up to.
//!
//! On a shared two-core machine one run's tail percentiles move with the
//! host's load from minute to minute: the same server measured twice can
//! differ by more than two servers measured once. `tools/bench-peers`
//! with `ROUNDS=N` therefore runs every target through each scenario N
//! times, rounds outermost and the target order rotated each round, and
//! labels each run `<scenario>-r<k>`. [`summarize_dir`] reads such a
//! results folder and reports, per scenario and target:
//!
//! - the median and the range of the rounds' p50, p99 and p99.9, and the
//!   median of the generator's own send lag at p99.9 (a tick the sender
//!   wrote late is late for every target: the tail no server can beat)
//!   and of the server's CPU per million updates;
//! - the pooled percentiles: every round's histogram merged (from the
//!   `counts-<label>-<target>.csv` files [`super::report::write_run`]
//!   writes), so the pooled p99.9 rests on N times the samples;
//! - for each pricewire target against every other target, the rounds in
//!   which it had the lower p50 and the lower p99.9 (paired by round);
//! - the same count for the floor against each peer: a scenario in which
//!   the bare relay itself is not lower than a peer in most rounds cannot
//!   rank servers, whatever pricewire's count.
//!
//! Cold path; allocates freely.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;

use super::hist::{latency_histogram, percentile_distribution, summarize, Summary};

/// One run's row as the summary needs it (µs).
#[derive(Debug, Clone, PartialEq)]
pub struct RoundRow {
    pub target: String,
    pub scenario: String,
    pub round: u32,
    /// The run's own label (`<scenario>-r<k>`, or the scenario alone).
    pub label: String,
    /// The results folder the run's counts file is in.
    pub dir: PathBuf,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// The generator's send lag at p99.9 (NaN when not recorded).
    pub send_lag_p999_us: f64,
    /// Server CPU seconds per million updates (NaN when not measured).
    pub cpu_s_per_m: f64,
}

/// Median, smallest and largest of a metric over rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// One target in one scenario over all its rounds.
#[derive(Debug, Clone)]
pub struct TargetRounds {
    pub target: String,
    pub rounds: usize,
    pub p50: Spread,
    pub p99: Spread,
    pub p999: Spread,
    pub send_lag_p999: Spread,
    pub cpu_s_per_m: Spread,
    /// All rounds' histograms merged; `None` without counts files.
    pub pooled: Option<Summary>,
    /// Runs whose counts are in the pool (fewer than `rounds` when some
    /// run has no counts file).
    pub pooled_runs: usize,
}

/// The bare relay's name: the floor every server is measured against.
const FLOOR: &str = super::target::Target::Floor.name();

/// Who is paired with whom, in report order: each pricewire target
/// against every other target that is not pricewire, then the floor
/// against each peer (whether the scenario can rank servers at all).
fn duelists<'a>(targets: &[&'a str]) -> Vec<(&'a str, &'a str)> {
    let ours = targets
        .iter()
        .filter(|t| t.starts_with("pricewire"))
        .chain(targets.iter().filter(|t| **t == FLOOR));
    let mut pairs = Vec::new();
    for o in ours {
        for other in targets
            .iter()
            .filter(|t| !t.starts_with("pricewire") && *t != o)
        {
            pairs.push((*o, *other));
        }
    }
    pairs
}

/// A pricewire target against another target, or the floor against a
/// peer, over the rounds both ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duel {
    pub ours: String,
    pub other: String,
    pub paired_rounds: usize,
    /// Rounds where ours had the strictly lower p50 / p99.9.
    pub p50_lower: usize,
    pub p999_lower: usize,
}

/// Everything about one scenario.
#[derive(Debug, Clone)]
pub struct ScenarioRounds {
    pub scenario: String,
    pub targets: Vec<TargetRounds>,
    pub duels: Vec<Duel>,
}

/// Splits `steady-10k-x10-r3` into (`steady-10k-x10`, 3); a label without
/// a round suffix is round 1 of itself.
pub fn split_round(label: &str) -> (&str, u32) {
    if let Some((base, r)) = label.rsplit_once("-r") {
        if !base.is_empty() && !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(k) = r.parse() {
                return (base, k);
            }
        }
    }
    (label, 1)
}

/// Median (mean of the middle two for an even count), min and max.
pub fn spread(values: &[f64]) -> Spread {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return Spread {
            median: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
        };
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Spread {
        median,
        min: v[0],
        max: v[n - 1],
    }
}

/// The JSON objects of a JSON-lines file called `file`, each with its
/// 0-based line number; blank lines skipped, a line that is not JSON an
/// error naming the file and line.
fn json_lines<'a>(
    text: &'a str,
    file: &'a str,
) -> impl Iterator<Item = anyhow::Result<(usize, serde_json::Value)>> + 'a {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(move |(n, line)| {
            serde_json::from_str(line)
                .map(|v| (n, v))
                .with_context(|| format!("{file} line {}: not JSON", n + 1))
        })
}

/// Rows of `results.jsonl` (sweep steps excluded: a sweep has its own
/// report).
pub fn read_rows(jsonl: &str) -> anyhow::Result<Vec<RoundRow>> {
    let mut rows = Vec::new();
    for line in json_lines(jsonl, "results.jsonl") {
        let (n, v) = line?;
        let field = |path: &[&str]| {
            path.iter()
                .try_fold(&v, |v, k| v.get(k))
                .with_context(|| format!("results.jsonl line {}: no {}", n + 1, path.join(".")))
        };
        let text = |path: &[&str]| -> anyhow::Result<String> {
            field(path)?.as_str().map(str::to_string).with_context(|| {
                format!("results.jsonl line {}: {} not text", n + 1, path.join("."))
            })
        };
        let us = |path: &[&str]| -> anyhow::Result<f64> {
            field(path)?.as_f64().map(|ns| ns / 1e3).with_context(|| {
                format!(
                    "results.jsonl line {}: {} not a number",
                    n + 1,
                    path.join(".")
                )
            })
        };
        let label = text(&["scenario"])?;
        if super::run::is_sweep_step(&label) {
            continue;
        }
        let (scenario, round) = split_round(&label);
        rows.push(RoundRow {
            target: text(&["name"])?,
            scenario: scenario.to_string(),
            round,
            label: label.clone(),
            dir: PathBuf::new(),
            p50_us: us(&["latency", "p50_ns"])?,
            p99_us: us(&["latency", "p99_ns"])?,
            p999_us: us(&["latency", "p999_ns"])?,
            send_lag_p999_us: us(&["send_lag", "p999_ns"]).unwrap_or(f64::NAN),
            cpu_s_per_m: v
                .get("server_cpu_s_per_m_updates")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(f64::NAN),
        });
    }
    Ok(rows)
}

/// Path of a run's exact histogram counts.
pub fn counts_path(dir: &Path, label: &str, target: &str) -> PathBuf {
    dir.join(format!("counts-{label}-{target}.csv"))
}

/// The histogram as `value_ns,count` lines, one per recorded bucket.
pub fn counts_text(h: &Histogram<u64>) -> String {
    let mut s = String::from("value_ns,count\n");
    for v in h.iter_recorded() {
        let _ = writeln!(s, "{},{}", v.value_iterated_to(), v.count_at_value());
    }
    s
}

/// Adds the counts in `text` to `h`.
pub fn add_counts(h: &mut Histogram<u64>, text: &str) -> anyhow::Result<()> {
    for (n, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let (v, c) = line
            .split_once(',')
            .with_context(|| format!("counts line {}: no comma", n + 1))?;
        let v: u64 = v.trim().parse().context("counts: value")?;
        let c: u64 = c.trim().parse().context("counts: count")?;
        h.saturating_record_n(v, c);
    }
    Ok(())
}

/// Summarises the rounds in `rows`. With `out`, pooled histograms come
/// from each run's counts file in its row's `dir` (runs without one are
/// left out of the pool, and a target none of whose runs has one gets no
/// pooled row) and are written under `out/pooled/`.
pub fn summarize_rows(
    out_dir: Option<&Path>,
    rows: &[RoundRow],
) -> anyhow::Result<Vec<ScenarioRounds>> {
    // scenario → target → rows, in first-seen order of scenarios.
    let mut order: Vec<String> = Vec::new();
    let mut by: BTreeMap<String, BTreeMap<String, Vec<&RoundRow>>> = BTreeMap::new();
    for r in rows {
        if !by.contains_key(&r.scenario) {
            order.push(r.scenario.clone());
        }
        by.entry(r.scenario.clone())
            .or_default()
            .entry(r.target.clone())
            .or_default()
            .push(r);
    }
    let mut out = Vec::new();
    for scenario in order {
        let targets_rows = &by[&scenario];
        let mut targets = Vec::new();
        for (target, rs) in targets_rows {
            let col =
                |f: fn(&RoundRow) -> f64| spread(&rs.iter().map(|r| f(r)).collect::<Vec<_>>());
            let mut pooled = None;
            let mut pooled_runs = 0;
            if let Some(dir) = out_dir {
                let mut h = latency_histogram();
                for r in rs {
                    let p = counts_path(&r.dir, &r.label, target);
                    match std::fs::read_to_string(&p) {
                        Ok(text) => {
                            add_counts(&mut h, &text).with_context(|| p.display().to_string())?;
                            pooled_runs += 1;
                        }
                        // Results written before counts files existed.
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e).with_context(|| p.display().to_string()),
                    }
                }
                if pooled_runs > 0 {
                    pooled = Some(summarize(&h));
                    let pooled_dir = dir.join("pooled");
                    std::fs::create_dir_all(&pooled_dir)?;
                    std::fs::write(
                        pooled_dir.join(format!("hdr-{scenario}-{target}.txt")),
                        percentile_distribution(&h),
                    )?;
                }
            }
            targets.push(TargetRounds {
                target: target.clone(),
                rounds: rs.len(),
                p50: col(|r| r.p50_us),
                p99: col(|r| r.p99_us),
                p999: col(|r| r.p999_us),
                send_lag_p999: col(|r| r.send_lag_p999_us),
                cpu_s_per_m: col(|r| r.cpu_s_per_m),
                pooled,
                pooled_runs,
            });
        }
        let mut duels = Vec::new();
        let names: Vec<&str> = targets_rows.keys().map(String::as_str).collect();
        for (ours, other) in duelists(&names) {
            let (our_rows, their_rows) = (&targets_rows[ours], &targets_rows[other]);
            let mut d = Duel {
                ours: ours.to_string(),
                other: other.to_string(),
                paired_rounds: 0,
                p50_lower: 0,
                p999_lower: 0,
            };
            for a in our_rows {
                if let Some(b) = their_rows.iter().find(|b| b.round == a.round) {
                    d.paired_rounds += 1;
                    d.p50_lower += usize::from(a.p50_us < b.p50_us);
                    d.p999_lower += usize::from(a.p999_us < b.p999_us);
                }
            }
            duels.push(d);
        }
        out.push(ScenarioRounds {
            scenario,
            targets,
            duels,
        });
    }
    Ok(out)
}

/// Reads `dir/results.jsonl` and the counts files; writes `dir/rounds.md`
/// and the pooled distributions under `dir/pooled/`; returns the text.
pub fn summarize_dir(dir: &Path) -> anyhow::Result<String> {
    summarize_dirs(&[dir.to_path_buf()], dir)
}

/// Several results folders of the same build as one set of rounds: each
/// folder's rounds are numbered after the previous folders' (two runs of
/// five rounds are rounds 1–10). Writes `out/rounds.md` and `out/pooled/`
/// (reading the counts files where they are); returns the text.
pub fn summarize_dirs(dirs: &[PathBuf], out: &Path) -> anyhow::Result<String> {
    let mut rows: Vec<RoundRow> = Vec::new();
    let mut sweeps: Vec<SweepRow> = Vec::new();
    let mut offset: u32 = 0;
    let mut sweep_offset: u32 = 0;
    for (i, dir) in dirs.iter().enumerate() {
        if dirs[..i].contains(dir) {
            bail!("{} given twice", dir.display());
        }
        let jsonl = std::fs::read_to_string(dir.join("results.jsonl"))
            .with_context(|| format!("{}/results.jsonl", dir.display()))?;
        let mut these = read_rows(&jsonl)?;
        // Sweeps are numbered on their own (a folder may hold steady
        // rounds, sweep rounds, or both).
        let sweep_path = dir.join("sweep.jsonl");
        let mut these_sweeps = if sweep_path.exists() {
            read_sweeps(&std::fs::read_to_string(&sweep_path)?)
                .with_context(|| sweep_path.display().to_string())?
        } else {
            Vec::new()
        };
        let last_sweep = these_sweeps.iter().map(|r| r.round).max().unwrap_or(0);
        for r in &mut these_sweeps {
            r.round = r
                .round
                .checked_add(sweep_offset)
                .context("sweep round numbers too large")?;
        }
        sweep_offset = sweep_offset
            .checked_add(last_sweep)
            .context("sweep round numbers too large")?;
        sweeps.extend(these_sweeps);
        if these.is_empty() {
            if last_sweep > 0 {
                continue;
            }
            bail!(
                "{}: neither runs outside sweeps nor sweep results",
                dir.display()
            );
        }
        let last = these.iter().map(|r| r.round).max().unwrap_or(0);
        for r in &mut these {
            r.round = r
                .round
                .checked_add(offset)
                .with_context(|| format!("{}: round {} too large", dir.display(), r.label))?;
            r.dir = dir.clone();
        }
        offset = offset
            .checked_add(last)
            .context("round numbers too large")?;
        rows.extend(these);
    }
    // A folder a script wrote twice into holds each (scenario, target,
    // round) twice, but only the last run's counts file: refuse it rather
    // than pair and pool the wrong runs.
    let mut seen = std::collections::HashSet::new();
    for r in &rows {
        if !seen.insert((&r.scenario, &r.target, r.round)) {
            bail!(
                "{}: {} of {} appears twice (two runs into one folder?)",
                r.dir.display(),
                r.label,
                r.target
            );
        }
    }
    let mut seen_sweeps = std::collections::HashSet::new();
    for r in &sweeps {
        if !seen_sweeps.insert((&r.target, r.round)) {
            bail!(
                "sweep round {} of {} appears twice (two sweeps into one folder?)",
                r.round,
                r.target
            );
        }
    }
    std::fs::create_dir_all(out)?;
    let mut text = if rows.is_empty() {
        String::new()
    } else {
        render(&summarize_rows(Some(out), &rows)?)
    };
    text.push_str(&render_sweeps(&sweeps));
    std::fs::write(out.join("rounds.md"), &text)?;
    Ok(text)
}

fn us(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let v = if v >= 100.0 { v.round() } else { v };
    let s = if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    };
    // Thousands separators for the integer part.
    let (int, frac) = s
        .split_once('.')
        .map_or((s.as_str(), None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (i, ch) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    match frac {
        Some(f) => format!("{grouped}.{f}"),
        None => grouped,
    }
}

fn sp(s: &Spread) -> String {
    format!("{} ({}–{})", us(s.median), us(s.min), us(s.max))
}

/// Markdown: one table per scenario, then its duels.
pub fn render(scenarios: &[ScenarioRounds]) -> String {
    let mut s = String::new();
    for sc in scenarios {
        let rounds = sc.targets.iter().map(|t| t.rounds).max().unwrap_or(0);
        let _ = writeln!(s, "### {} — {} round(s)\n", sc.scenario, rounds);
        s.push_str("| target | rounds | p50 µs median (range) | p99 µs median (range) | p99.9 µs median (range) | pooled p50 | pooled p99 | pooled p99.9 | gen. send-lag p99.9 (median) | CPU s / M (median) |\n");
        s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for t in &sc.targets {
            let (pp50, pp99, mut pp999) =
                t.pooled.map_or(("–".into(), "–".into(), "–".into()), |p| {
                    (
                        us(p.p50_ns as f64 / 1e3),
                        us(p.p99_ns as f64 / 1e3),
                        us(p.p999_ns as f64 / 1e3),
                    )
                });
            if t.pooled.is_some() && t.pooled_runs < t.rounds {
                // Some runs had no counts file: the pool is smaller.
                let _ = write!(pp999, " ({} of {} runs)", t.pooled_runs, t.rounds);
            }
            let cpu = if t.cpu_s_per_m.median.is_finite() {
                format!("{:.2}", t.cpu_s_per_m.median)
            } else {
                "–".into()
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                t.target,
                t.rounds,
                sp(&t.p50),
                sp(&t.p99),
                sp(&t.p999),
                pp50,
                pp99,
                pp999,
                us(t.send_lag_p999.median),
                cpu
            );
        }
        if !sc.duels.is_empty() {
            s.push_str("\nRounds with the lower value, paired by round:\n\n");
            let line = |s: &mut String, d: &Duel| {
                let _ = writeln!(
                    s,
                    "- {} vs {}: p50 {}/{}, p99.9 {}/{}",
                    d.ours, d.other, d.p50_lower, d.paired_rounds, d.p999_lower, d.paired_rounds
                );
            };
            for d in sc.duels.iter().filter(|d| d.ours != FLOOR) {
                line(&mut s, d);
            }
            let floor: Vec<&Duel> = sc.duels.iter().filter(|d| d.ours == FLOOR).collect();
            if !floor.is_empty() {
                s.push_str(
                    "\nThe floor against the peers: where the bare relay is not lower in \
                     most rounds, the rounds cannot rank servers at that percentile.\n\n",
                );
                for d in floor {
                    line(&mut s, d);
                }
            }
        }
        s.push('\n');
    }
    s
}

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
    let row_of = |t: &str, round: u32| rows.iter().find(|r| r.target == t && r.round == round);
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
    let mut duels = String::new();
    for (o, other) in duelists(&targets) {
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
    if !duels.is_empty() {
        s.push_str("\nRounds with the higher maximum, paired by round:\n\n");
        s.push_str(&duels);
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(target: &str, label: &str, p50: f64, p999: f64) -> String {
        // The fields results.jsonl rows have (run::RunRow), p99 = 2 × p50,
        // send lag p99.9 = p50 / 10, CPU = 3 s per million.
        let us = |v: f64| (v * 1e3) as u64;
        serde_json::json!({
            "target": "pricewire",
            "name": target,
            "scenario": label,
            "latency": {"p50_ns": us(p50), "p99_ns": us(p50 * 2.0), "p999_ns": us(p999)},
            "send_lag": {"p999_ns": us(p50 / 10.0)},
            "server_cpu_s_per_m_updates": 3.0,
        })
        .to_string()
    }

    /// A results folder: `rows` in results.jsonl, and pricewire's counts
    /// file for each (label, histogram).
    fn write_folder(dir: &Path, rows: &[String], counts: &[(&str, &Histogram<u64>)]) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("results.jsonl"), lines(rows)).unwrap();
        for (label, h) in counts {
            std::fs::write(counts_path(dir, label, "pricewire"), counts_text(h)).unwrap();
        }
    }

    fn lines(rows: &[String]) -> String {
        rows.iter().map(|r| format!("{r}\n")).collect()
    }

    #[test]
    fn round_suffixes_split_off() {
        assert_eq!(split_round("steady-10k-x10-r3"), ("steady-10k-x10", 3));
        assert_eq!(split_round("steady-10k-x10-r12"), ("steady-10k-x10", 12));
        assert_eq!(split_round("steady-10k-x10"), ("steady-10k-x10", 1));
        assert_eq!(split_round("herd-r"), ("herd-r", 1));
        assert_eq!(split_round("-r2"), ("-r2", 1));
        assert_eq!(split_round("x-r2b"), ("x-r2b", 1));
    }

    #[test]
    fn spread_takes_the_middle() {
        let s = spread(&[5.0, 1.0, 3.0]);
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 5.0));
        let s = spread(&[4.0, 1.0, 3.0, 10.0]);
        assert_eq!((s.median, s.min, s.max), (3.5, 1.0, 10.0));
        assert!(spread(&[]).median.is_nan());
    }

    #[test]
    fn medians_and_duels_over_rounds() {
        let rows = read_rows(&lines(&[
            row("floor", "s-r1", 50.0, 2000.0),
            row("pricewire", "s-r1", 40.0, 1500.0),
            row("redis", "s-r1", 60.0, 1000.0),
            row("floor", "s-r2", 52.0, 2100.0),
            row("pricewire", "s-r2", 41.0, 1600.0),
            row("redis", "s-r2", 61.0, 1700.0),
            row("pricewire", "s-r3", 45.0, 3000.0),
            row("redis", "s-r3", 30.0, 2500.0),
            // Sweeps are not rounds.
            row("redis", "sweep-10000", 1.0, 1.0),
            // Another scenario, a single run.
            row("pricewire", "other", 7.0, 70.0),
        ]))
        .unwrap();
        assert_eq!(rows.len(), 9);
        let sc = summarize_rows(None, &rows).unwrap();
        assert_eq!(sc.len(), 2);
        assert_eq!(sc[0].scenario, "s");
        assert_eq!(sc[1].scenario, "other");
        let pw = sc[0]
            .targets
            .iter()
            .find(|t| t.target == "pricewire")
            .unwrap();
        assert_eq!(pw.rounds, 3);
        assert_eq!((pw.p50.median, pw.p50.min, pw.p50.max), (41.0, 40.0, 45.0));
        assert_eq!(pw.p999.median, 1600.0);
        assert_eq!(pw.p99.median, 82.0);
        assert!((pw.send_lag_p999.median - 4.1).abs() < 1e-9);
        assert_eq!(pw.cpu_s_per_m.median, 3.0);
        assert!(pw.pooled.is_none());
        let floor = sc[0].targets.iter().find(|t| t.target == "floor").unwrap();
        assert_eq!(floor.rounds, 2);
        assert_eq!(floor.p999.median, 2050.0);
        let vs = |other: &str| {
            sc[0]
                .duels
                .iter()
                .find(|d| d.ours == "pricewire" && d.other == other)
                .unwrap()
                .clone()
        };
        // Redis: p50 lower in rounds 1, 2; p99.9 lower in round 2 only.
        assert_eq!(
            vs("redis"),
            Duel {
                ours: "pricewire".into(),
                other: "redis".into(),
                paired_rounds: 3,
                p50_lower: 2,
                p999_lower: 1
            }
        );
        // The floor ran two rounds: only those pair.
        let f = vs("floor");
        assert_eq!((f.paired_rounds, f.p50_lower, f.p999_lower), (2, 2, 2));
        let text = render(&sc);
        assert!(text.contains("### s — 3 round(s)"), "{text}");
        assert!(
            text.contains("| pricewire | 3 | 41.0 (40.0–45.0) |"),
            "{text}"
        );
        assert!(
            text.contains("pricewire vs redis: p50 2/3, p99.9 1/3"),
            "{text}"
        );
        assert!(text.contains("| 1,600 (1,500–3,000) |"), "{text}");
        assert!(text.contains("| 4.1 | 3.00 |"), "{text}");
        // The floor against the peers, never against pricewire or itself.
        let floor_duels: Vec<&Duel> = sc[0].duels.iter().filter(|d| d.ours == "floor").collect();
        assert_eq!(floor_duels.len(), 1, "{floor_duels:?}");
        assert_eq!(
            (floor_duels[0].other.as_str(), floor_duels[0].paired_rounds),
            ("redis", 2)
        );
        assert_eq!(
            (floor_duels[0].p50_lower, floor_duels[0].p999_lower),
            (2, 0)
        );
        let (pw_at, floor_at) = (
            text.find("pricewire vs redis").unwrap(),
            text.find("cannot rank servers").unwrap(),
        );
        assert!(pw_at < floor_at, "pricewire's lines first: {text}");
        assert!(
            text[floor_at..].contains("- floor vs redis: p50 2/2, p99.9 0/2"),
            "{text}"
        );
        // A scenario without the floor has no floor section.
        assert!(!render(&sc[1..]).contains("cannot rank"));
    }

    #[test]
    fn counts_round_trip_exactly_and_pool() {
        let mut a = latency_histogram();
        let mut b = latency_histogram();
        for v in 1..=999u64 {
            a.record(v * 1_000).unwrap(); // 1 µs .. 999 µs
        }
        // One stall of 50 ms in the second round only.
        for _ in 0..999 {
            b.record(100_000).unwrap();
        }
        b.record(50_000_000).unwrap();
        let mut back = latency_histogram();
        add_counts(&mut back, &counts_text(&a)).unwrap();
        assert_eq!(summarize(&back), summarize(&a));

        let dir = std::env::temp_dir().join(format!("pw-rounds-{}", std::process::id()));
        write_folder(
            &dir,
            &[
                row("pricewire", "s-r1", 500.0, 998.0),
                row("pricewire", "s-r2", 100.0, 50_000.0),
            ],
            &[("s-r1", &a), ("s-r2", &b)],
        );
        let text = summarize_dir(&dir).unwrap();
        let mut rows =
            read_rows(&std::fs::read_to_string(dir.join("results.jsonl")).unwrap()).unwrap();
        rows.iter_mut().for_each(|r| r.dir = dir.clone());
        let sc = summarize_rows(Some(&dir), &rows).unwrap();
        let pooled = sc[0].targets[0].pooled.unwrap();
        assert_eq!(pooled.count, 1999);
        // 999 values spread over 1..999 µs plus 999 at 100 µs: the median
        // of the pool sits at 100 µs; the stall is the pool's maximum.
        assert!((99_000..=101_000).contains(&pooled.p50_ns), "{pooled:?}");
        assert!(pooled.max_ns >= 49_900_000, "{pooled:?}");
        assert!(text.contains("pooled p99.9"), "{text}");
        assert!(dir.join("rounds.md").exists());
        assert!(dir.join("pooled/hdr-s-pricewire.txt").exists());

        // A second run of the same build: its rounds follow the first's
        // and its counts join the pool.
        // Redis ran only in the second folder's round 1 — round 3 of the
        // set — where pricewire was slower: one paired round, lost.
        let dir2 = dir.join("second");
        write_folder(
            &dir2,
            &[
                row("pricewire", "s-r1", 100.0, 50_000.0),
                row("redis", "s-r1", 90.0, 40_000.0),
            ],
            &[("s-r1", &b)],
        );
        let out = dir.join("both");
        let text = summarize_dirs(&[dir.clone(), dir2.clone()], &out).unwrap();
        assert!(text.contains("### s — 3 round(s)"), "{text}");
        assert!(
            text.contains("pricewire vs redis: p50 0/1, p99.9 0/1"),
            "{text}"
        );
        // Redis has no counts file: its row has medians but no pool.
        assert!(text.contains("| redis | 1 |"), "{text}");
        assert!(out.join("rounds.md").exists());
        let pooled = std::fs::read_to_string(out.join("pooled/hdr-s-pricewire.txt")).unwrap();
        assert!(pooled.contains("Total count = 2999"), "{pooled}");
        // Without renumbering, the second folder's round 1 would pair
        // with the first folder's round 1 (where redis did not run).
        let rows = {
            let mut r =
                read_rows(&std::fs::read_to_string(dir2.join("results.jsonl")).unwrap()).unwrap();
            r.iter_mut().for_each(|x| x.dir = dir2.clone());
            r
        };
        assert!(rows.iter().all(|r| r.round == 1));
        // A folder given twice, or one run written twice into a folder,
        // is refused instead of double-counted.
        assert!(summarize_dirs(&[dir2.clone(), dir2.clone()], &out).is_err());
        let again = std::fs::read_to_string(dir2.join("results.jsonl")).unwrap();
        std::fs::write(dir2.join("results.jsonl"), again.repeat(2)).unwrap();
        assert!(summarize_dirs(&[dir2], &out).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_results_are_errors() {
        assert!(read_rows("").unwrap().is_empty());
        assert!(read_rows("target,scenario\nx,y\n").is_err());
        assert!(read_rows(r#"{"name":"x","scenario":"s"}"#).is_err());
        let bad =
            r#"{"name":"x","scenario":"s","latency":{"p50_ns":"fast","p99_ns":1,"p999_ns":1}}"#;
        assert!(read_rows(bad).is_err());
        // Optional fields may be missing.
        let lean =
            r#"{"name":"x","scenario":"s","latency":{"p50_ns":1000,"p99_ns":2000,"p999_ns":3000}}"#;
        let r = read_rows(lean).unwrap();
        assert_eq!(r[0].p999_us, 3.0);
        assert!(r[0].send_lag_p999_us.is_nan() && r[0].cpu_s_per_m.is_nan());
    }
}

#[cfg(test)]
mod sweep_tests {
    use super::*;

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

    /// Two folders of sweep rounds are one set: rounds renumbered, the
    /// median over all, and pricewire's paired count against each peer.
    #[test]
    fn sweep_rounds_from_two_folders_give_medians_and_paired_counts() {
        let base = std::env::temp_dir().join(format!("pw-sweep-rounds-{}", std::process::id()));
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
        // A target in no round with pricewire gets no line.
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
