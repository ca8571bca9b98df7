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

mod sweeps;
pub use sweeps::{read_sweeps, render_sweeps, SweepRow};

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
            let (pooled, pooled_runs) = match out_dir {
                Some(dir) => pool(dir, &scenario, target, rs)?,
                None => (None, 0),
            };
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
        out.push(ScenarioRounds {
            scenario,
            targets,
            duels: duels(targets_rows),
        });
    }
    Ok(out)
}

/// Merges the counts files of `rs` (one scenario and target) into one
/// histogram and writes its distribution under `dir/pooled/`; returns its
/// summary (`None` when no run has a counts file) and the runs pooled.
fn pool(
    dir: &Path,
    scenario: &str,
    target: &str,
    rs: &[&RoundRow],
) -> anyhow::Result<(Option<Summary>, usize)> {
    let mut h = latency_histogram();
    let mut pooled_runs = 0;
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
    if pooled_runs == 0 {
        return Ok((None, 0));
    }
    let pooled_dir = dir.join("pooled");
    std::fs::create_dir_all(&pooled_dir)?;
    std::fs::write(
        pooled_dir.join(format!("hdr-{scenario}-{target}.txt")),
        percentile_distribution(&h),
    )?;
    Ok((Some(summarize(&h)), pooled_runs))
}

/// Every pair of targets of one scenario, over the rounds both ran.
fn duels(targets_rows: &BTreeMap<String, Vec<&RoundRow>>) -> Vec<Duel> {
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
    duels
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
    refuse_repeats(&rows, &sweeps)?;
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

/// A folder a script wrote twice into holds each (scenario, target,
/// round) twice, but only the last run's counts file: refuse it rather
/// than pair and pool the wrong runs.
fn refuse_repeats(rows: &[RoundRow], sweeps: &[SweepRow]) -> anyhow::Result<()> {
    let mut seen = std::collections::HashSet::new();
    for r in rows {
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
    for r in sweeps {
        if !seen_sweeps.insert((&r.target, r.round)) {
            bail!(
                "sweep round {} of {} appears twice (two sweeps into one folder?)",
                r.round,
                r.target
            );
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests;
