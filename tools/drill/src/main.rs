//! `pricewire-drill`: runs the failure matrix (or one scenario) on real
//! binaries and a real 3-node NATS cluster, prints every invariant's
//! verdict per scenario, and exits 1 if any broke. See the crate docs.

use std::path::PathBuf;

use anyhow::bail;
use clap::Parser;
use pricewire_drill::lab::LabConfig;
use pricewire_drill::report;
use pricewire_drill::scenarios::SCENARIOS;

#[derive(Debug, Parser)]
#[command(name = "pricewire-drill", about = "pricewire's failure drills")]
struct Args {
    /// A scenario's name, `all`, or `short` (the `cargo test` set).
    #[arg(long, default_value = "all")]
    scenario: String,
    /// Halved waits and untimed verdicts (what `cargo test` runs).
    #[arg(long)]
    short: bool,
    /// Run the bus without authorization (by default the cluster has the
    /// shipped manifests' per-role permissions and cores and edges log on).
    #[arg(long)]
    plain: bool,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
    /// The `pricewire` binary (default: beside this one, else on PATH).
    #[arg(long)]
    pricewire_bin: Option<PathBuf>,
    /// The `nats-server` binary.
    #[arg(long, default_value = "nats-server")]
    nats_server_bin: String,
    /// Where `drill.jsonl` and the processes' logs go (default: a
    /// temporary folder, removed at the end).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.list {
        for s in SCENARIOS {
            println!(
                "{:<28} {}{}",
                s.name,
                s.about,
                if s.short { " (short)" } else { "" }
            );
        }
        return Ok(());
    }
    let chosen: Vec<_> = SCENARIOS
        .iter()
        .filter(|s| match args.scenario.as_str() {
            "all" => true,
            "short" => s.short,
            name => s.name == name,
        })
        .collect();
    if chosen.is_empty() {
        bail!("no scenario {:?} (see --list)", args.scenario);
    }
    let tmp = tempfile::tempdir()?;
    let dir = args.out.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let cfg = LabConfig {
        pricewire_bin: args
            .pricewire_bin
            .unwrap_or_else(pricewire_bench::procs::default_pricewire_bin),
        nats_bin: args.nats_server_bin,
        logs: dir.join("logs"),
        short: args.short,
        plain: args.plain,
    };
    eprintln!(
        "drill: bus {}",
        if args.plain {
            "plain (no authorization)"
        } else {
            "secured (per-role permissions)"
        }
    );
    let mut rows = Vec::new();
    for s in chosen {
        eprintln!("drill: {} ({})", s.name, s.about);
        let row = report::run(s, &cfg);
        eprintln!(
            "drill: {} {}",
            s.name,
            if row.ok { "held" } else { "BROKEN" }
        );
        if args.out.is_some() {
            report::write_row(&dir, &row)?;
        }
        rows.push(row);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    print!("{}", report::table(&rows));
    if rows.iter().any(|r| !r.ok) {
        std::process::exit(1);
    }
    Ok(())
}
