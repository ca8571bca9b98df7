//! Running scenarios and reporting: one table row per scenario with each
//! invariant's verdict and the delays measured, the scenario's own checks
//! and its timeline, as text and as JSON lines (`--out`).

use std::io::Write;
use std::path::Path;

use crate::check::{Findings, Verdict};
use crate::lab::{Lab, LabConfig};
use crate::scenarios::Scenario;

/// One scenario's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// The scenario.
    pub scenario: String,
    /// I1..I4 verdicts, as text.
    pub invariants: [String; 4],
    /// The scenario's own checks: (what, verdict).
    pub checks: Vec<(String, String)>,
    /// I3: longest failure → stale-or-replaced, ms.
    pub stale_ms_max: Option<f64>,
    /// I4: longest failure → live again, ms.
    pub resume_ms_max: Option<f64>,
    /// I4: most CONFLATED new prices one symbol had on the way back.
    pub flagged_max: usize,
    /// Prices recorded on all terminals.
    pub records: usize,
    /// What happened, in order.
    pub timeline: Vec<String>,
    /// True when every invariant and check held.
    pub ok: bool,
    /// Set when the scenario itself could not run to its end.
    pub error: Option<String>,
}

/// Runs `s` in a fresh lab.
pub fn run(s: &Scenario, cfg: &LabConfig) -> Row {
    let mut cfg = cfg.clone();
    cfg.logs = cfg.logs.join(s.name);
    let logs = cfg.logs.clone();
    let mut lab = match Lab::new(cfg, s.bus) {
        Ok(l) => l,
        Err(e) => return failed(s, Vec::new(), format!("{e:#}")),
    };
    match (s.run)(&mut lab) {
        Ok(bounds) => {
            let findings = lab.finish(bounds);
            let _ = write_tapes(&logs, &lab);
            row(s, &lab, &findings)
        }
        Err(e) => {
            let timeline = lab.timeline.clone();
            failed(s, timeline, format!("{e:#}"))
        }
    }
}

fn failed(s: &Scenario, timeline: Vec<String>, error: String) -> Row {
    Row {
        scenario: s.name.into(),
        invariants: std::array::from_fn(|_| "-".into()),
        checks: Vec::new(),
        stale_ms_max: None,
        resume_ms_max: None,
        flagged_max: 0,
        records: 0,
        timeline,
        ok: false,
        error: Some(error),
    }
}

fn row(s: &Scenario, lab: &Lab, f: &Findings) -> Row {
    let checks: Vec<(String, String)> = lab
        .extra
        .iter()
        .map(|(w, v)| (w.clone(), v.to_string()))
        .collect();
    Row {
        scenario: s.name.into(),
        invariants: std::array::from_fn(|i| f.invariants[i].to_string()),
        ok: f.ok() && lab.extra.iter().all(|(_, v)| v.ok()),
        checks,
        stale_ms_max: f.stale_ms_max,
        resume_ms_max: f.resume_ms_max,
        flagged_max: f.flagged_max,
        records: f.records,
        timeline: lab.timeline.clone(),
        error: None,
    }
}

fn short(v: &str) -> &str {
    if v.starts_with("BROKEN") {
        "BROKEN"
    } else {
        v
    }
}

fn num(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

/// The rows as a Markdown table, then each row's breaches, checks and
/// timeline.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | I1 | I2 | I3 | I4 | checks | stale ms (max) | live again ms (max) | flagged (max) | prices |\n\
         |---|---|---|---|---|---|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let checks = match (r.error.is_some(), r.checks.iter().all(|(_, v)| v == "held")) {
            (true, _) => "ERROR",
            (false, true) => "held",
            (false, false) => "BROKEN",
        };
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.scenario,
            short(&r.invariants[0]),
            short(&r.invariants[1]),
            short(&r.invariants[2]),
            short(&r.invariants[3]),
            checks,
            num(r.stale_ms_max),
            num(r.resume_ms_max),
            r.flagged_max,
            r.records
        );
    }
    for r in rows {
        out += &format!("\n{}:\n", r.scenario);
        if let Some(e) = &r.error {
            out += &format!("  error: {e}\n");
        }
        for (i, v) in r.invariants.iter().enumerate() {
            if v.starts_with("BROKEN") {
                out += &format!("  I{}: {v}\n", i + 1);
            }
        }
        for (w, v) in &r.checks {
            out += &format!("  check: {w}: {v}\n");
        }
        for l in &r.timeline {
            out += &format!("  {l}\n");
        }
    }
    out
}

/// Every terminal's tape as CSV in `dir` (`<terminal>.csv`: arrival ms,
/// stream, symbol, seq, bid, ask, flags, snapshot, SDK status), beside
/// the processes' logs, for reading a broken verdict.
fn write_tapes(dir: &Path, lab: &Lab) -> anyhow::Result<()> {
    for t in lab.terminals() {
        let mut f = std::fs::File::create(dir.join(format!("{}.csv", t.name)))?;
        writeln!(f, "at_ms,stream,symbol,seq,bid,ask,flags,snapshot,status")?;
        for r in &t.records {
            writeln!(
                f,
                "{:.3},{:016x},{},{},{},{},{},{},{:?}",
                r.at_ns as f64 / 1e6,
                r.stream,
                r.symbol,
                r.seq,
                r.bid,
                r.ask,
                r.flags,
                r.snapshot,
                r.status
            )?;
        }
        for m in &t.sessions {
            writeln!(f, "{:.3},session,{}", m.at_ns as f64 / 1e6, m.what)?;
        }
    }
    Ok(())
}

/// Appends `row` to `dir/drill.jsonl`.
pub fn write_row(dir: &Path, row: &Row) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("drill.jsonl"))?;
    writeln!(f, "{}", serde_json::to_string(row)?)?;
    Ok(())
}

/// Whether every verdict of `v` is not broken.
pub fn all_held(v: &[Verdict]) -> bool {
    v.iter().all(Verdict::ok)
}
