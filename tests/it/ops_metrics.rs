//! Every documented family, registered once, encodes to valid Prometheus
//! text: checked by the `prometheus-parse` crate and by a strict line
//! grammar (the crate skips lines it cannot read, so it alone would not
//! catch a malformed line).

use pricewire::ops::metrics::{catalogue, HistogramSnapshot, MetricKind, LATENCY_BUCKETS_S};
use pricewire::ops::Registry;
use std::collections::BTreeSet;

fn label_value(name: &str) -> String {
    format!("{name}_value")
}

fn register_every_family(r: &Registry) {
    for f in catalogue::FAMILIES {
        let values: Vec<String> = f.labels.iter().map(|l| label_value(l)).collect();
        let labels: Vec<(&str, &str)> = f
            .labels
            .iter()
            .copied()
            .zip(values.iter().map(String::as_str))
            .collect();
        let result = match f.kind {
            MetricKind::Counter => r.register_counter_fn(f.name, &labels, || 7),
            MetricKind::Gauge => r.register_gauge_fn(f.name, &labels, || 0.5),
            MetricKind::Histogram => {
                r.register_histogram_fn(f.name, &labels, || HistogramSnapshot {
                    buckets: LATENCY_BUCKETS_S
                        .iter()
                        .enumerate()
                        .map(|(i, &b)| (b, i as u64))
                        .collect(),
                    count: 20,
                    sum: 1.5,
                })
            }
        };
        // The registry fills its own families and refuses others' samples.
        let own = Registry::OWN_FAMILIES.contains(&f.name);
        assert_eq!(result.is_err(), own, "{}: {result:?}", f.name);
    }
}

fn is_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

fn is_value(s: &str) -> bool {
    matches!(s, "+Inf" | "-Inf" | "NaN") || s.parse::<f64>().is_ok()
}

/// `k="v",k2="v2"` with escapes `\\`, `\"`, `\n`; returns the label names.
fn parse_labels(s: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").ok_or(format!("no =\" in {rest}"))?;
        if !is_name(name) {
            return Err(format!("bad label name {name}"));
        }
        names.push(name.to_string());
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\' | '"' | 'n')) => {}
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((i, '"')) => break i,
                Some(_) => {}
                None => return Err("unterminated label value".into()),
            }
        };
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    Ok(names)
}

/// Checks the Prometheus 0.0.4 text grammar line by line and that each
/// family's HELP/TYPE precede its samples, which are contiguous. Returns
/// the family names seen.
fn strict_check(text: &str) -> Result<BTreeSet<String>, String> {
    let mut families = BTreeSet::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _) = rest
                .split_once(' ')
                .ok_or(format!("HELP without text: {line}"))?;
            if !is_name(name) || !families.insert(name.to_string()) {
                return Err(format!("bad or repeated family: {line}"));
            }
            current = Some((name.to_string(), String::new()));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or(format!("bad TYPE: {line}"))?;
            let Some((family, k)) = current.as_mut().filter(|(f, _)| f == name) else {
                return Err(format!("TYPE without its HELP: {line}"));
            };
            if !["counter", "gauge", "histogram"].contains(&kind) {
                return Err(format!("unexpected type {kind} for {family}"));
            }
            *k = kind.to_string();
        } else {
            let (family, kind) = current
                .as_ref()
                .ok_or(format!("sample before HELP: {line}"))?;
            let (series, value) = line.rsplit_once(' ').ok_or(format!("no value: {line}"))?;
            if !is_value(value) {
                return Err(format!("bad value: {line}"));
            }
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (
                    n,
                    l.strip_suffix('}')
                        .ok_or(format!("unclosed labels: {line}"))?,
                ),
                None => (series, ""),
            };
            let label_names = parse_labels(labels)?;
            let allowed: &[&str] = if kind == "histogram" {
                &["_bucket", "_sum", "_count"]
            } else {
                &[""]
            };
            if !allowed
                .iter()
                .any(|s| name.strip_suffix(s) == Some(family.as_str()))
            {
                return Err(format!("sample {name} outside its family {family}"));
            }
            if name.ends_with("_bucket") != label_names.iter().any(|l| l == "le") {
                return Err(format!("le label only on buckets: {line}"));
            }
        }
    }
    Ok(families)
}

#[test]
fn every_documented_family_encodes_to_valid_exposition() {
    let r = Registry::new();
    register_every_family(&r);
    // The registry lists pipeline threads (`pw-*`) itself: one must exist.
    // (Its name is set as it starts: wait for it to run.)
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let pw = std::thread::Builder::new()
        .name("pw-exposition".into())
        .spawn(move || {
            ready_tx.send(()).unwrap();
            let _ = done_rx.recv();
        })
        .unwrap();
    ready_rx.recv().unwrap();
    let text = r.scrape();
    done_tx.send(()).unwrap();
    pw.join().unwrap();

    let seen = strict_check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let documented: BTreeSet<String> = catalogue::FAMILIES
        .iter()
        .map(|f| f.name.to_string())
        .collect();
    assert_eq!(
        seen, documented,
        "exposed families are exactly the documented ones"
    );

    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    for f in catalogue::FAMILIES {
        let sample = scrape
            .samples
            .iter()
            .find(|s| s.metric == f.name)
            .unwrap_or_else(|| panic!("{} missing from parsed scrape", f.name));
        if Registry::OWN_FAMILIES.contains(&f.name) {
            continue;
        }
        for l in f.labels {
            assert_eq!(
                sample.labels.get(l),
                Some(label_value(l).as_str()),
                "{}",
                f.name
            );
        }
        let expected_type = match (&sample.value, f.kind) {
            (prometheus_parse::Value::Counter(v), MetricKind::Counter) => *v == 7.0,
            (prometheus_parse::Value::Gauge(_), MetricKind::Gauge) => true,
            (prometheus_parse::Value::Histogram(b), MetricKind::Histogram) => {
                b.len() == LATENCY_BUCKETS_S.len() + 1
                    && b.windows(2).all(|w| w[0].count <= w[1].count)
            }
            _ => false,
        };
        assert!(expected_type, "{}: parsed as {:?}", f.name, sample.value);
    }
}

#[test]
fn strict_check_rejects_malformed_text() {
    for bad in [
        "pricewire_x 1\n",
        "# HELP pricewire_x h\n# TYPE pricewire_x gauge\npricewire_x{a=\"b} 1\n",
        "# HELP pricewire_x h\n# TYPE pricewire_x gauge\npricewire_x one\n",
        "# HELP pricewire_x h\n# TYPE pricewire_x gauge\npricewire_y 1\n",
        "# HELP pricewire_x h\n# TYPE pricewire_x gauge\n# HELP pricewire_x h\n",
    ] {
        assert!(strict_check(bad).is_err(), "{bad}");
    }
}
