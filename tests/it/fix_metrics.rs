//! The FIX metrics of the real binary: `pricewire serve` with one FIX
//! provider (the in-process simulator) on loopback; its `/metrics` carries
//! exactly the FIX families of docs/fix.md's table and
//! `feed::fix::metrics::FAMILIES`, labelled with the configured provider
//! name, and the provider turns healthy. SIGTERM logs the provider out.

use crate::util::wait::wait_until;
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use pricewire::feed::fix::metrics::FAMILIES;
use pricewire::feed::fix::sim::{FixSim, SimConfig, SimSymbol};

use crate::util::net;

const LIMIT: Duration = Duration::from_secs(30);

type Families = BTreeMap<String, BTreeSet<String>>;

/// The table under docs/fix.md's "## Metrics": family name (first column)
/// -> the backticked label values of its last column.
fn documented() -> Families {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/fix.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let section = doc.split("## Metrics").nth(1).unwrap();
    let section = section.split("\n## ").next().unwrap();
    let mut out = Families::new();
    for row in section.lines().filter(|l| l.starts_with("| `pricewire_")) {
        let cols: Vec<&str> = row.split('|').collect();
        let name = cols[1].trim().trim_matches('`').to_string();
        let meaning = cols[cols.len() - 2];
        let values = meaning.split('`').skip(1).step_by(2).map(str::to_string);
        out.insert(name, values.collect());
    }
    out
}

/// The FIX families of a scrape for provider `lp-a`: family -> values of
/// the label after `provider` (empty when there is none).
fn scraped(body: &str) -> Families {
    let mut out = Families::new();
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let labels = rest.split('}').next().unwrap_or("");
        let mut it = labels.split(',');
        if it.next() != Some("provider=\"lp-a\"") {
            continue;
        }
        let values = out.entry(name.to_string()).or_default();
        if let Some((_, v)) = it.next().and_then(|l| l.split_once('=')) {
            values.insert(v.trim_matches('"').to_string());
        }
    }
    out
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn fix_metrics_of_the_binary_match_the_docs_and_shutdown_logs_out() {
    let families: BTreeSet<String> = FAMILIES.iter().map(|s| s.to_string()).collect();
    let doc = documented();
    let doc_names: BTreeSet<String> = doc.keys().cloned().collect();
    assert_eq!(
        doc_names, families,
        "docs/fix.md's table vs metrics::FAMILIES"
    );

    let sim = FixSim::start(SimConfig::new(vec![SimSymbol::new(
        "EUR/USD", "1.08120", 5, 8,
    )]))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pricewire.toml");
    let toml = format!(
        "[[instruments]]\nname = \"EURUSD\"\ndigits = 5\n\
         [[providers]]\nname = \"lp-a\"\nkind = \"fix\"\n[providers.fix]\n\
         host = \"127.0.0.1\"\nport = {}\nsender_comp_id = \"PRICEWIRE\"\n\
         target_comp_id = \"LPSIM\"\nsymbols = {{ \"EUR/USD\" = \"EURUSD\" }}\n",
        sim.addr().port()
    );
    std::fs::write(&config, toml).unwrap();
    let ops = net::free_addr();
    let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .args(["--no-synthetic", "--report-interval-ms", "60000"])
        .args(["--listen", &net::free_addr().to_string()])
        .args(["--ops-listen", &ops.to_string()])
        .args(["--drain-delay-ms", "0", "--grace-ms", "5000"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut server = Killed(child);
    let healthy = "pricewire_provider_healthy{provider=\"lp-a\"} 1";
    let mut body = String::new();
    let up = wait_until(LIMIT, || {
        body = net::http_body(ops, "/metrics").unwrap_or_default();
        body.contains(healthy)
    });
    assert!(up, "{healthy} never appeared:\n{body}");
    let on_metrics = scraped(&body);
    assert_eq!(
        on_metrics, doc,
        "/metrics vs docs/fix.md, label values included"
    );
    assert!(body.contains("pricewire_breaker_state{dependency=\"fix_lp-a\",state=\"closed\"} 1"));
    // Ticks are counted under the LP's name, not under one "fix".
    assert!(!body.contains("pricewire_ticks_received_total{provider=\"fix\"}"));

    let logouts = sim.shared().logouts.load(Ordering::Relaxed);
    let pid = server.0.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let exited = wait_until(LIMIT, || matches!(server.0.try_wait(), Ok(Some(_))));
    assert!(exited, "the binary did not exit");
    assert_eq!(
        sim.shared().logouts.load(Ordering::Relaxed),
        logouts + 1,
        "pricewire logged out on shutdown"
    );
}
