//! Result files of `pricewire-bench --out DIR`: one JSON line per run in
//! `results.jsonl`, the same row in `results.csv`, and the percentile
//! distribution of each run in `hdr-<scenario>-<target>.txt` (the
//! HdrHistogram text format, microseconds) with its exact bucket counts
//! in `counts-<scenario>-<target>.csv` (what [`super::rounds`] pools;
//! not for sweep steps, which are never pooled).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;

use super::hist::percentile_distribution;
use super::run::RunRow;

/// CSV header of [`csv_row`].
pub const CSV_HEADER: &str = "target,scenario,rate_target_per_s,rate_achieved_per_s,subscribers,symbols_per_subscriber,p50_us,p90_us,p99_us,p999_us,p9999_us,max_us,updates_per_s,deliveries_expected,deliveries_received,missing,gaps,server_cpu_s_per_m_updates,send_lag_p99_us,send_lag_max_us";

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}

/// One CSV line for a row.
pub fn csv_row(r: &RunRow) -> String {
    let l = &r.latency;
    let cpu = r
        .server_cpu_s_per_m_updates
        .map_or(String::new(), |c| format!("{c:.3}"));
    format!(
        "{},{},{},{:.0},{},{},{},{},{},{},{},{},{:.0},{},{},{},{},{},{},{}",
        r.name,
        r.scenario,
        r.rate_target_per_s,
        r.rate_achieved_per_s,
        r.subscribers,
        r.symbols_per_subscriber,
        us(l.p50_ns),
        us(l.p90_ns),
        us(l.p99_ns),
        us(l.p999_ns),
        us(l.p9999_ns),
        us(l.max_ns),
        r.updates_per_s,
        r.deliveries_expected,
        r.deliveries_received,
        r.missing,
        r.gaps,
        cpu,
        us(r.send_lag.p99_ns),
        us(r.send_lag.max_ns),
    )
}

/// Path of a run's percentile distribution.
pub fn hdr_path(dir: &Path, scenario: &str, target: &str) -> PathBuf {
    dir.join(format!("hdr-{scenario}-{target}.txt"))
}

fn append(path: &Path, line: &str, header: Option<&str>) -> std::io::Result<()> {
    let fresh = !path.exists();
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    if let (true, Some(h)) = (fresh, header) {
        writeln!(f, "{h}")?;
    }
    writeln!(f, "{line}")
}

/// Appends the row to `results.jsonl` and `results.csv` and writes the
/// distribution file, and the counts file unless the run is a sweep step.
pub fn write_run(dir: &Path, row: &RunRow, hist: &Histogram<u64>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    append(&dir.join("results.jsonl"), &serde_json_line(row)?, None)?;
    append(&dir.join("results.csv"), &csv_row(row), Some(CSV_HEADER))?;
    std::fs::write(
        hdr_path(dir, &row.scenario, &row.name),
        percentile_distribution(hist),
    )?;
    // The exact counts are what rounds pool; sweep steps are never pooled,
    // and a sweep in rounds would write dozens of them.
    if !super::run::is_sweep_step(&row.scenario) {
        std::fs::write(
            super::rounds::counts_path(dir, &row.scenario, &row.name),
            super::rounds::counts_text(hist),
        )?;
    }
    Ok(())
}

/// Appends any serialisable record as one JSON line to `dir/name`.
pub fn write_json_line<T: serde::Serialize>(dir: &Path, name: &str, v: &T) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    append(&dir.join(name), &serde_json_line(v)?, None)?;
    Ok(())
}

fn serde_json_line<T: serde::Serialize>(v: &T) -> anyhow::Result<String> {
    Ok(serde_json::to_string(v)?)
}
