//! The metrics catalogue in `docs/operations.md` is generated from the
//! code: this test starts the real binary with the reference configuration
//! below, scrapes `/metrics` once and renders every family it shows (name,
//! type, labels, help) and every label value, plus the catalogue families
//! that configuration does not register. The doc must equal the output.
//! After a deliberate change regenerate it with
//! `PRICEWIRE_BLESS=1 cargo test --test it ops_metrics_doc::`.

use crate::util::net;
use crate::util::wait;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pricewire::ops::http::{CODES, PATHS};
use pricewire::ops::metrics::{catalogue, FamilyDesc, FAMILIES};

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md");
const OPEN: &str = "<!-- generated:metrics -->";
const CLOSE: &str = "<!-- /generated:metrics -->";

/// The reference configuration: every stage that registers metrics
/// (gateway with two shards, provider ingest, request workers, recorder,
/// a Redis reference-data client — unreachable, which only opens its
/// breaker). Addresses are filled in at run time.
const REFERENCE_FLAGS: &[&str] = &[
    "--shards",
    "2",
    "--synthetic-rate",
    "1000",
    "--redis",
    "redis://127.0.0.1:1",
    "--report-interval-ms",
    "600000",
];

/// Families only a FIX feed registers (the reference configuration has
/// none): the decoder's errors and every family of
/// `feed::fix::metrics::FAMILIES` (`tests/it/fix_metrics.rs` scrapes them
/// from a binary with a FIX provider).
fn fix_only(name: &str) -> bool {
    name == catalogue::FEED_DECODE_ERRORS || pricewire::feed::fix::metrics::FAMILIES.contains(&name)
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One `/metrics` answer of the binary in the reference configuration.
fn scrape_reference() -> String {
    let (ops, record) = (net::free_addr(), tempfile::tempdir().unwrap());
    let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .arg("serve")
        .args(REFERENCE_FLAGS)
        .args(["--listen", &net::free_addr().to_string()])
        .args(["--feed-listen", &net::free_addr().to_string()])
        .args(["--ops-listen", &ops.to_string()])
        .arg("--record")
        .arg(record.path())
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start pricewire serve");
    let _server = Server(child);
    let mut body = None;
    let ready = wait::wait_until(Duration::from_secs(30), || {
        if net::http_answer(ops, "/readyz").is_some_and(|(code, _)| code == 200) {
            if let Some((200, b)) = net::http_answer(ops, "/metrics") {
                body = Some(b);
            }
        }
        body.is_some()
    });
    assert!(ready, "pricewire serve never became ready on {ops}");
    body.expect("scraped once ready")
}

#[derive(Default)]
struct Family {
    kind: String,
    help: String,
    /// Label name → normalised values, labels in first-seen order.
    labels: Vec<(String, BTreeSet<String>)>,
}

/// A label value with the parts that vary by configuration replaced:
/// digit runs (shard, worker and feed indices) by `N`, the build version
/// by `<version>`; status codes stay.
fn normalise(label: &str, value: &str) -> String {
    match label {
        "version" => "<version>".into(),
        "code" => value.into(),
        _ => {
            let mut out = String::new();
            let mut in_digits = false;
            for c in value.chars() {
                if !c.is_ascii_digit() {
                    out.push(c);
                } else if !in_digits {
                    out.push('N');
                }
                in_digits = c.is_ascii_digit();
            }
            out
        }
    }
}

fn parse_labels(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some((name, tail)) = rest.split_once("=\"") {
        let end = tail.find('"').expect("closed label value");
        out.push((
            name.trim_start_matches(',').to_string(),
            tail[..end].to_string(),
        ));
        rest = &tail[end + 1..];
    }
    out
}

/// Families in scrape order with their label values.
fn families(text: &str) -> Vec<(String, Family)> {
    let mut fams: Vec<(String, Family)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let help = help.to_string();
            fams.push((
                name.to_string(),
                Family {
                    help,
                    ..Family::default()
                },
            ));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            if let Some((_, f)) = fams.iter_mut().find(|(n, _)| n == name) {
                f.kind = kind.to_string();
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, parse_labels(l.trim_end_matches('}'))),
                None => (series, Vec::new()),
            };
            let Some((_, f)) = fams
                .iter_mut()
                .filter(|(n, _)| name.starts_with(n.as_str()))
                .max_by_key(|(n, _)| n.len())
            else {
                continue;
            };
            for (label, value) in labels.into_iter().filter(|(l, _)| l != "le") {
                let v = normalise(&label, &value);
                match f.labels.iter_mut().find(|(l, _)| *l == label) {
                    Some((_, set)) => {
                        set.insert(v);
                    }
                    None => f.labels.push((label, BTreeSet::from([v]))),
                }
            }
        }
    }
    fams
}

/// Values the code lists but a scrape shows only once they were counted,
/// or only for the threads one configuration happens to run.
fn add_listed_values(fams: &mut [(String, Family)]) {
    let listed = [
        (
            catalogue::THREAD_RT_PRIORITY,
            "thread",
            catalogue::THREAD_NAMES,
        ),
        (catalogue::STAGE_UP, "stage", catalogue::STAGE_NAMES),
    ];
    for (family, label, names) in listed {
        if let Some((_, f)) = fams.iter_mut().find(|(n, _)| n == family) {
            let seen = f.labels.iter().flat_map(|(_, values)| values.iter());
            for thread in seen {
                assert!(
                    names.iter().any(|t| match t.strip_suffix('-') {
                        Some(feed) => thread.starts_with(t) && thread.len() > feed.len() + 1,
                        None => thread == t,
                    }),
                    "{label} {thread} of {family} is not listed in the catalogue"
                );
            }
            let names = names.iter().map(|t| t.to_string()).collect();
            f.labels = vec![(label.into(), names)];
        }
    }
    let Some((_, f)) = fams
        .iter_mut()
        .find(|(n, _)| n == catalogue::OPS_HTTP_REQUESTS)
    else {
        return;
    };
    let paths = PATHS.iter().map(|p| p.to_string()).collect();
    let codes = CODES.iter().map(|c| c.to_string()).collect();
    f.labels = vec![("path".into(), paths), ("code".into(), codes)];
}

fn render(text: &str) -> String {
    let mut fams = families(text);
    // A family whose series are all counted on demand may be absent from one scrape.
    let ops = catalogue::OPS_HTTP_REQUESTS;
    if !fams.iter().any(|(n, _)| n == ops) {
        let help = catalogue::family(ops).unwrap().help.to_string();
        let kind = "counter".to_string();
        fams.push((
            ops.to_string(),
            Family {
                kind,
                help,
                labels: Vec::new(),
            },
        ));
    }
    add_listed_values(&mut fams);
    let mut out = String::from("Generated from one scrape of `pricewire serve ");
    out += &REFERENCE_FLAGS.join(" ");
    out += " --listen … --feed-listen … --ops-listen … --record DIR` \
            (`tests/it/ops_metrics_doc.rs`). Label values: digit runs that vary with the \
            configuration (shard, worker and feed indices) are written `N`; every other \
            value comes from a closed set, so no family grows with load.\n\n";
    out += "| name | type | unit | labels | meaning |\n| --- | --- | --- | --- | --- |\n";
    for (name, f) in &fams {
        let unit = catalogue::family(name).map_or("—", |d| d.unit);
        let labels: Vec<&str> = f.labels.iter().map(|(l, _)| l.as_str()).collect();
        let labels = if labels.is_empty() {
            "—".to_string()
        } else {
            labels.join(", ")
        };
        out += &format!(
            "| `{name}` | {} | {unit} | {labels} | {} |\n",
            f.kind, f.help
        );
    }
    let absent = |fix: bool| -> Vec<&FamilyDesc> {
        FAMILIES
            .iter()
            .filter(|d| !fams.iter().any(|(n, _)| n == d.name))
            .filter(|d| fix_only(d.name) == fix)
            .collect()
    };
    out += &absent_table(
        "Registered only with a FIX provider in the configuration (`docs/fix.md`):",
        &absent(true),
    );
    out += &absent_table(
        "In the catalogue (`src/ops/metrics/catalogue.rs`) but registered by no stage of \
         `serve` today, so never exposed:",
        &absent(false),
    );
    out += "\n### Label values\n\n| family | label | values |\n| --- | --- | --- |\n";
    for (name, f) in &fams {
        for (label, values) in &f.labels {
            let v: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
            out += &format!("| `{name}` | `{label}` | {} |\n", v.join(", "));
        }
    }
    out
}

fn absent_table(title: &str, fams: &[&FamilyDesc]) -> String {
    if fams.is_empty() {
        return String::new();
    }
    let mut out = format!("\n{title}\n\n| name | type | unit | labels | meaning |\n");
    out += "| --- | --- | --- | --- | --- |\n";
    for d in fams {
        let labels = match d.labels {
            [] => "—".to_string(),
            l => l.join(", "),
        };
        let (name, kind, unit, help) = (d.name, d.kind.as_str(), d.unit, d.help);
        out += &format!("| `{name}` | {kind} | {unit} | {labels} | {help} |\n");
    }
    out
}

fn splice(doc: &str, body: &str) -> String {
    let start = doc
        .find(OPEN)
        .expect("docs/operations.md lacks the metrics marker")
        + OPEN.len();
    let end = doc
        .find(CLOSE)
        .expect("docs/operations.md lacks the metrics end marker");
    format!("{}\n{body}{}", &doc[..start], &doc[end..])
}

#[test]
fn operations_doc_metrics_equal_the_generated_catalogue() {
    let body = render(&scrape_reference());
    let doc = std::fs::read_to_string(DOC).expect("docs/operations.md");
    let fresh = splice(&doc, &body);
    if std::env::var_os("PRICEWIRE_BLESS").is_some() {
        std::fs::write(DOC, &fresh).expect("write docs/operations.md");
        return;
    }
    if fresh != doc {
        let line = doc
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "docs/operations.md's metrics differ from the code near line {}: \
             the doc says {:?}, the code {:?}; \
             run PRICEWIRE_BLESS=1 cargo test --test it ops_metrics_doc::",
            line + 1,
            doc.lines().nth(line).unwrap_or(""),
            fresh.lines().nth(line).unwrap_or("")
        );
    }
}

#[test]
fn label_values_are_normalised_and_parsed() {
    assert_eq!(
        normalise("reason", "slow_subscriber_shard12"),
        "slow_subscriber_shardN"
    );
    assert_eq!(normalise("shard", "1"), "N");
    assert_eq!(normalise("code", "503"), "503");
    assert_eq!(normalise("version", "0.1.0"), "<version>");
    let text = "# HELP pricewire_x_seconds Time\n# TYPE pricewire_x_seconds histogram\n\
                pricewire_x_seconds_bucket{shard=\"0\",le=\"0.1\"} 3\n\
                pricewire_x_seconds_count{shard=\"1\"} 3\n";
    let fams = families(text);
    assert_eq!(fams.len(), 1);
    let (name, f) = &fams[0];
    assert_eq!(
        (name.as_str(), f.kind.as_str(), f.help.as_str()),
        ("pricewire_x_seconds", "histogram", "Time")
    );
    assert_eq!(
        f.labels,
        vec![("shard".to_string(), BTreeSet::from(["N".to_string()]))]
    );
}
