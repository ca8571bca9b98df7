//! Percentile plots (feature `plot`): for each scenario in a results
//! folder, one PNG with one line per target — latency (µs, log axis)
//! against percentile on a "nines" axis (x = -log10(1 - p): 0 = 0 %,
//! 1 = 90 %, 2 = 99 %, 3 = 99.9 % ...). A folder with sweep steps also
//! gets `plot-sweep.png`: each step's p99 against its rate, one line per
//! target and round, with the sweep's threshold. Cold path; allocates
//! freely.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::prelude::*;

use super::hist::parse_distribution;

/// Highest nines shown (99.9999 %).
const NINES_MAX: f64 = 6.0;
const FONT_PATHS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn register_font() -> anyhow::Result<()> {
    let bytes = FONT_PATHS
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .context("no DejaVuSans.ttf for plot labels")?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow::anyhow!("invalid font"))?;
    Ok(())
}

/// One line per target: (target, [(µs, percentile)]).
type Lines = Vec<(String, Vec<(f64, f64)>)>;

/// Scenario → lines, from `hdr-<scenario>-<target>.txt`.
fn collect(dir: &Path) -> anyhow::Result<BTreeMap<String, Lines>> {
    let mut out: BTreeMap<String, Lines> = BTreeMap::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(stem) = name
            .strip_prefix("hdr-")
            .and_then(|n| n.strip_suffix(".txt"))
        else {
            continue;
        };
        let Some((scenario, target)) = stem.rsplit_once('-') else {
            continue;
        };
        if super::run::is_sweep_step(scenario) {
            continue; // sweep steps are many; their rows are in the table
        }
        let pts = parse_distribution(&std::fs::read_to_string(e.path())?);
        out.entry(scenario.to_string())
            .or_default()
            .push((target.to_string(), pts));
    }
    Ok(out)
}

fn nines(p: f64) -> f64 {
    (-(1.0 - p).max(1e-9).log10()).min(NINES_MAX)
}

/// Draws one PNG per scenario; returns their paths.
pub fn plot_dir(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    register_font()?;
    let mut written = Vec::new();
    for (scenario, lines) in collect(dir)? {
        let path = dir.join(format!("plot-{scenario}.png"));
        draw(&path, &scenario, &lines)?;
        written.push(path);
    }
    let steps = sweep_steps(dir)?;
    if !steps.is_empty() {
        let path = dir.join("plot-sweep.png");
        draw_sweep(&path, &steps, sweep_threshold_us(dir))?;
        written.push(path);
    }
    Ok(written)
}

/// One sweep line: (target name, round label, [(rate ticks/s, p99 µs)]).
type SweepLine = (String, String, Vec<(f64, f64)>);

/// The sweep steps in DIR/results.csv, one line per target and round
/// (`sweep-r<k>`), sorted by rate. A retried step keeps its lower p99:
/// a step fails only when every try fails.
fn sweep_steps(dir: &Path) -> anyhow::Result<Vec<SweepLine>> {
    let Ok(text) = std::fs::read_to_string(dir.join("results.csv")) else {
        return Ok(Vec::new());
    };
    let mut rows = text.lines();
    let header: Vec<&str> = rows.next().unwrap_or_default().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (Some(c_label), Some(c_rate), Some(c_p99)) =
        (col("scenario"), col("rate_target_per_s"), col("p99_us"))
    else {
        anyhow::bail!("{}: not a results table", dir.display());
    };
    let mut lines: BTreeMap<(String, String), BTreeMap<u64, f64>> = BTreeMap::new();
    for row in rows {
        let f: Vec<&str> = row.split(',').collect();
        let (Some(label), Some(rate), Some(p99)) = (f.get(c_label), f.get(c_rate), f.get(c_p99))
        else {
            continue;
        };
        if !super::run::is_sweep_step(label) {
            continue;
        }
        let (Ok(rate), Ok(p99)) = (rate.parse::<u64>(), p99.parse::<f64>()) else {
            continue;
        };
        let round = label.rsplit_once('-').map_or(*label, |(r, _)| r);
        let step = lines
            .entry((f[0].to_string(), round.to_string()))
            .or_default()
            .entry(rate)
            .or_insert(p99);
        *step = step.min(p99);
    }
    Ok(lines
        .into_iter()
        .map(|((target, round), pts)| {
            let pts = pts.into_iter().map(|(r, p)| (r as f64, p)).collect();
            (target, round, pts)
        })
        .collect())
}

/// The p99 threshold of the first sweep in DIR/sweep.jsonl, if any.
fn sweep_threshold_us(dir: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(dir.join("sweep.jsonl")).ok()?;
    let row: serde_json::Value = serde_json::from_str(text.lines().next()?).ok()?;
    row["p99_threshold_us"].as_f64()
}

fn draw_sweep(path: &Path, lines: &[SweepLine], threshold_us: Option<f64>) -> anyhow::Result<()> {
    let pts = || lines.iter().flat_map(|l| l.2.iter().copied());
    let x_min = pts().map(|p| p.0).fold(f64::MAX, f64::min).max(1.0) / 1.2;
    let x_max = pts().map(|p| p.0).fold(1.0f64, f64::max) * 1.2;
    let y_top = pts()
        .map(|p| p.1)
        .fold(threshold_us.unwrap_or(1.0), f64::max);
    let y_min = pts().map(|p| p.1).fold(f64::MAX, f64::min).max(1.0) / 1.5;
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("saturation sweep: p99 by rate", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_top * 1.5).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("offered rate (ticks/s)")
        .y_desc("p99 (µs, scheduled send → receive)")
        .x_label_formatter(&|x| rate_label(*x))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    if let Some(t) = threshold_us {
        chart
            .draw_series(LineSeries::new([(x_min, t), (x_max, t)], BLACK))?
            .label(format!("threshold {t} µs"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    let colors = [RED, BLUE, GREEN, MAGENTA, CYAN];
    // One colour per target, its rounds drawn alike, one legend entry.
    let mut targets: Vec<&str> = Vec::new();
    for (target, _round, pts) in lines {
        let seen = targets.iter().position(|t| t == target);
        let i = seen.unwrap_or(targets.len());
        let color = colors[i % colors.len()];
        let series = LineSeries::new(pts.iter().copied(), color.stroke_width(2));
        let drawn = chart.draw_series(series)?;
        if seen.is_none() {
            targets.push(target);
            drawn
                .label(target.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

fn draw(path: &Path, title: &str, lines: &Lines) -> anyhow::Result<()> {
    let all = lines.iter().flat_map(|(_, p)| p.iter().map(|x| x.0));
    let y_max = all.clone().fold(1.0f64, f64::max) * 1.5;
    let y_min = all.fold(f64::MAX, f64::min).clamp(0.5, 1e6) / 1.5;
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("latency by percentile: {title}"),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..NINES_MAX, (y_min..y_max).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(7)
        .x_label_formatter(&|x| nines_label(*x))
        .y_desc("latency (µs, scheduled send → receive)")
        .x_desc("percentile")
        .draw()?;
    let colors = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
    for (i, (target, pts)) in lines.iter().enumerate() {
        let color = colors[i % colors.len()];
        let series = pts
            .iter()
            .filter(|(_, p)| *p < 1.0)
            .map(|&(v, p)| (nines(p), v.max(y_min)));
        chart
            .draw_series(LineSeries::new(series, color.stroke_width(2)))?
            .label(target.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

fn rate_label(x: f64) -> String {
    match x {
        x if x >= 1e6 => format!("{}M", x / 1e6),
        x if x >= 1e3 => format!("{}k", x / 1e3),
        x => format!("{x:.0}"),
    }
}

fn nines_label(x: f64) -> String {
    let n = x.round() as i32;
    match n {
        0 => "0%".into(),
        1 => "90%".into(),
        2 => "99%".into(),
        n => format!("99.{}%", "9".repeat((n - 2) as usize)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_steps_group_by_target_and_round_and_keep_a_retry_s_better_p99() {
        let dir = tempfile::tempdir().unwrap();
        let csv = "target,scenario,rate_target_per_s,p99_us\n\
                   floor,steady-10k-x10,10000,90.0\n\
                   floor,sweep-r1-20000,20000,300.5\n\
                   floor,sweep-r1-10000,10000,200.0\n\
                   floor,sweep-r1-20000,20000,250.0\n\
                   floor,sweep-r2-10000,10000,210.0\n\
                   pricewire,sweep-r1-10000,10000,bad\n";
        std::fs::write(dir.path().join("results.csv"), csv).unwrap();
        let lines = sweep_steps(dir.path()).unwrap();
        let floor_r1 = ("floor".to_string(), "sweep-r1".to_string());
        let floor_r2 = ("floor".to_string(), "sweep-r2".to_string());
        let keys: Vec<_> = lines.iter().map(|l| (l.0.clone(), l.1.clone())).collect();
        assert_eq!(keys, [floor_r1, floor_r2]);
        assert_eq!(lines[0].2, [(10000.0, 200.0), (20000.0, 250.0)]);
        assert_eq!(lines[1].2, [(10000.0, 210.0)]);
        assert!(sweep_steps(&dir.path().join("none")).unwrap().is_empty());
        std::fs::write(dir.path().join("results.csv"), "a,b\n1,2\n").unwrap();
        assert!(sweep_steps(dir.path()).is_err());
    }

    #[test]
    fn rate_labels_are_short() {
        assert_eq!(rate_label(10_000.0), "10k");
        assert_eq!(rate_label(1_500_000.0), "1.5M");
        assert_eq!(rate_label(500.0), "500");
    }
}
