//! Percentile plots (feature `plot`): for each scenario in a results
//! folder, one PNG with one line per target — latency (µs, log axis)
//! against percentile on a "nines" axis (x = -log10(1 - p): 0 = 0 %,
//! 1 = 90 %, 2 = 99 %, 3 = 99.9 % ...). Cold path; allocates freely.

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
    Ok(written)
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

fn nines_label(x: f64) -> String {
    let n = x.round() as i32;
    match n {
        0 => "0%".into(),
        1 => "90%".into(),
        2 => "99%".into(),
        n => format!("99.{}%", "9".repeat((n - 2) as usize)),
    }
}
