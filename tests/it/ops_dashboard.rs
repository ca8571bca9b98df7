//! The Grafana dashboard (deploy/grafana/pricewire.json) cannot drift from
//! the code: every PromQL expression in it (panel targets and template
//! queries) names only metric families of the catalogue, every label a
//! legend or a `by (...)` names belongs to a family the expression uses,
//! and the panels cover what an operator of pricewire watches.

use std::collections::BTreeSet;
use std::path::Path;

use pricewire::ops::metrics::catalogue::{self, MetricKind};
use serde_json::Value;

fn dashboard() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/pricewire.json");
    let text = std::fs::read_to_string(&path).expect("deploy/grafana/pricewire.json");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every `pricewire_*` identifier in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("pricewire_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The family a sample name belongs to (a histogram's `_bucket` etc.).
fn family_of(sample: &str) -> Option<&'static catalogue::FamilyDesc> {
    catalogue::family(sample).or_else(|| {
        ["_bucket", "_sum", "_count"].iter().find_map(|s| {
            let f = catalogue::family(sample.strip_suffix(s)?)?;
            (f.kind == MetricKind::Histogram).then_some(f)
        })
    })
}

/// Every string under a key called `expr`, `query` or `definition`, except
/// a data-source variable's `query` (the plugin's name, not PromQL).
fn queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) if m.get("type").and_then(Value::as_str) == Some("datasource") => {}
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "query" | "definition", Value::String(s)) => out.push(s.clone()),
                    _ => queries(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

/// Label names in `{{label}}` legends and `by (a, b)` clauses.
fn labels_named(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in text.split("{{").skip(1) {
        out.extend(part.split("}}").next().map(|l| l.trim().to_string()));
    }
    for part in text.split("by (").skip(1) {
        let inside = part.split(')').next().unwrap_or("");
        out.extend(inside.split(',').map(|l| l.trim().to_string()));
    }
    out
}

#[test]
fn every_query_names_only_catalogued_families() {
    let mut all = Vec::new();
    queries(&dashboard(), &mut all);
    assert!(all.len() >= 30, "only {} queries", all.len());
    for q in &all {
        let names = metric_names(q);
        assert!(!names.is_empty(), "a query without a pricewire metric: {q}");
        for m in names {
            assert!(
                catalogue::is_documented_sample(&m),
                "{m} is not a catalogued family (in {q})"
            );
            let old = catalogue::DEPRECATED.iter().find(|r| r.old == m);
            assert!(
                old.is_none(),
                "{m} is deprecated: use {:?} (in {q})",
                old.map(|r| r.new)
            );
        }
    }
}

#[test]
fn legends_and_groupings_name_labels_of_the_families_used() {
    for panel in dashboard()["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or("?");
        for t in panel["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().expect("target expr");
            let mut known: BTreeSet<&str> = ["instance", "job", "le"].into();
            for m in metric_names(expr) {
                known.extend(family_of(&m).expect("catalogued").labels);
            }
            let legend = t["legendFormat"].as_str().unwrap_or("");
            for l in labels_named(&format!("{expr} {legend}")) {
                assert!(
                    known.contains(l.as_str()),
                    "{title}: no label `{l}` in {expr}"
                );
            }
        }
    }
}

#[test]
fn panels_are_unique_and_cover_what_an_operator_watches() {
    let d = dashboard();
    let panels = d["panels"].as_array().expect("panels");
    let ids: Vec<u64> = panels
        .iter()
        .map(|p| p["id"].as_u64().expect("id"))
        .collect();
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), ids.len(), "ids");
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let targets = p["targets"].as_array().map_or(0, Vec::len);
        assert!(targets > 0, "{}: no query", p["title"]);
    }
    let mut all = Vec::new();
    queries(&d, &mut all);
    let used: BTreeSet<String> = all.iter().flat_map(|q| metric_names(q)).collect();
    let used = |f: &str| {
        used.iter()
            .any(|u| family_of(u).is_some_and(|d| d.name == f))
    };
    for f in [
        catalogue::TICKS_RECEIVED,
        catalogue::PRICES_PUBLISHED,
        catalogue::PRICE_UPDATES_SENT,
        catalogue::TICK_TO_PUBLISH_LATENCY,
        catalogue::CONFLATIONS,
        catalogue::DROPS,
        catalogue::SHEDS,
        catalogue::CONNECTIONS,
        catalogue::ADMISSION_REJECTS,
        catalogue::REQUEST_QUEUE_DEPTH,
        catalogue::REQUEST_QUEUE_SOJOURN,
        catalogue::REQUEST_QUEUE_OVERLOADED,
        catalogue::BREAKER_STATE,
        catalogue::PROVIDER_HEALTHY,
        catalogue::BUS_HEARTBEATS,
        catalogue::BUS_LAST_HEARTBEAT_AGE,
        catalogue::STAGE_UP,
        catalogue::CONNECTION_FAULTS,
        catalogue::TLS_REFUSALS,
    ] {
        assert!(used(f), "no panel shows {f}");
    }
}

#[test]
fn panels_do_not_overlap_and_use_the_chosen_data_source() {
    let d = dashboard();
    let rect = |p: &Value| {
        let g = &p["gridPos"];
        let n = |k: &str| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("{}: gridPos.{k}", p["title"]))
        };
        (n("x"), n("y"), n("w"), n("h"))
    };
    let panels = d["panels"].as_array().expect("panels");
    for (i, a) in panels.iter().enumerate() {
        let (ax, ay, aw, ah) = rect(a);
        assert!(ax + aw <= 24, "{}: wider than the grid", a["title"]);
        for b in &panels[i + 1..] {
            let (bx, by, bw, bh) = rect(b);
            let apart = ax + aw <= bx || bx + bw <= ax || ay + ah <= by || by + bh <= ay;
            assert!(apart, "{} overlaps {}", a["title"], b["title"]);
        }
        if a["type"] != "row" {
            assert_eq!(a["datasource"]["uid"], "${datasource}", "{}", a["title"]);
        }
    }
}
