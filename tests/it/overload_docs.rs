//! docs/overload.md and the request part of docs/operations.md against the
//! running service: the metric names, shed reasons and admission stages the
//! docs list are exactly the ones a scrape of the real service exposes, and
//! the documented defaults are the code's constants.

use crate::util::server;

use std::collections::BTreeSet;
use std::path::Path;

use pricewire::ops::metrics::catalogue::DEPRECATED;
use pricewire::ops::Registry;
use pricewire::pipeline::PipelineConfig;
use pricewire::runtime::WaitStrategy;

const CONFIG: &str = r#"
# Clear tokens: a loopback test (docs/security.md).
insecure_plain_tokens = true
[[providers]]
name = "bridge-a"
kind = "ingest"
token = "secret-a"
"#;

/// Families of the overload controls and the request path.
fn ours(name: &str) -> bool {
    [
        "pricewire_request",
        "pricewire_sheds_total",
        "pricewire_adaptive_",
        "pricewire_admission_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// What a scrape of the running service exposes: family names (histogram
/// samples folded to their family) and the label values of `label` on
/// `family`.
struct Exposed {
    families: BTreeSet<String>,
    text: String,
}

impl Exposed {
    fn scrape() -> Exposed {
        let svc = server::ingest_service(CONFIG, PipelineConfig::default(), WaitStrategy::SpinPark);
        let r = Registry::new();
        svc.register_metrics(&r).unwrap();
        let text = r.scrape();
        svc.stop();
        let families = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| l.split(['{', ' ']).next().unwrap_or(""))
            .map(|n| {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| n.strip_suffix(s).filter(|b| b.ends_with("_seconds")))
                    .unwrap_or(n)
                    .to_string()
            })
            .filter(|n| ours(n))
            .collect();
        Exposed { families, text }
    }

    fn label_values(&self, family: &str, label: &str) -> BTreeSet<String> {
        let key = format!("{label}=\"");
        self.text
            .lines()
            .filter(|l| {
                l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family}_count{{"))
            })
            .filter_map(|l| {
                let rest = &l[l.find(&key)? + key.len()..];
                Some(rest[..rest.find('"')?].to_string())
            })
            .collect()
    }
}

fn doc(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs")
        .join(name);
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("docs/{name}: {e}"))
}

/// The lines of `text` from the heading `from` to the next heading of the
/// same or a higher level.
fn section<'a>(text: &'a str, from: &str) -> Vec<&'a str> {
    let level = from.chars().take_while(|&c| c == '#').count();
    let mut lines = text.lines().skip_while(|l| !l.starts_with(from));
    let first = lines.next().unwrap_or_else(|| panic!("no section {from}"));
    std::iter::once(first)
        .chain(lines.take_while(|l| {
            let h = l.chars().take_while(|&c| c == '#').count();
            h == 0 || h > level
        }))
        .collect()
}

/// First-column backticked names of the table rows in `lines`.
fn first_column(lines: &[&str]) -> BTreeSet<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(|n| n.split('{').next().unwrap_or(n).to_string())
        .collect()
}

#[test]
fn overload_doc_names_exactly_the_exposed_metrics_and_reasons() {
    let exposed = Exposed::scrape();
    let overload = doc("overload.md");
    let documented = first_column(&section(&overload, "## Counters"));
    let documented: BTreeSet<String> = documented.into_iter().filter(|n| ours(n)).collect();
    // Deprecated names are listed with their replacements in operations.md.
    let deprecated = |n: &String| DEPRECATED.iter().any(|r| r.old == n);
    let current: BTreeSet<String> = exposed
        .families
        .iter()
        .filter(|n| !deprecated(n))
        .cloned()
        .collect();
    assert_eq!(
        documented, current,
        "docs/overload.md ## Counters vs a scrape"
    );

    let reasons = exposed.label_values("pricewire_sheds_total", "reason");
    let documented = first_column(&section(&overload, "### Shed reasons"));
    assert_eq!(
        documented, reasons,
        "docs/overload.md ### Shed reasons vs a scrape"
    );
    // operations.md's label values (stages, hops, shed reasons included)
    // are generated from a scrape and held by tests/it/ops_metrics_doc.rs.
}

#[test]
fn overload_doc_defaults_are_the_code_constants() {
    use pricewire::requests::queue::*;
    let overload = doc("overload.md");
    let w = SHED_RETRY_WINDOW_DEFAULT;
    let g = pricewire::gateway::GatewayConfig::default();
    let rows = [
        ("queue `capacity`", format!("{}", QUEUE_CAPACITY_DEFAULT)),
        (
            "queue `retry_after`",
            format!("{}–{} ms", w.min_ms, w.max_ms),
        ),
        (
            "`shed_per_pop_max`",
            format!("{}", SHED_PER_POP_MAX_DEFAULT),
        ),
        (
            "`account_rate_per_s` / `account_burst`",
            format!("{} / {}", ACCOUNT_RATE_PER_S_DEFAULT, ACCOUNT_BURST_DEFAULT),
        ),
        (
            "`target_ns` / `interval_ns`",
            format!(
                "{} ms / {} ms",
                SOJOURN_TARGET_NS_DEFAULT / 1_000_000,
                SOJOURN_INTERVAL_NS_DEFAULT / 1_000_000
            ),
        ),
        (
            "`--shard0-drain-busy-pct`",
            format!("{}", g.drain_busy_permille / 10),
        ),
        (
            "`--shard0-drain-request-share-pct`",
            format!("{}", g.drain_request_share_permille / 10),
        ),
        (
            "`--shard0-drain-min-requests`",
            format!("{}", g.drain_min_requests),
        ),
        ("`--shard0-drain-abort-ms`", format!("{}", g.drain_abort_ms)),
        ("per-connection `retry_after`", {
            let per_s = pricewire::gateway::GatewayConfig::default().msg_rate_per_s;
            let ms = 1_000 / per_s;
            format!("one to two refills ({}–{} ms at {per_s}/s)", ms, 2 * ms)
        }),
    ];
    for (knob, value) in rows {
        let row = overload
            .lines()
            .find(|l| l.starts_with(&format!("| {knob} |")))
            .unwrap_or_else(|| panic!("no defaults row for {knob}"));
        assert!(
            row.contains(&format!("| {value} |")),
            "{knob}: {value} expected in {row}"
        );
    }
}
