//! Tests of the catalogue's naming rules and lookups.

use super::*;

#[test]
fn every_family_follows_the_naming_conventions() {
    for f in FAMILIES {
        check_conventions(f).unwrap();
    }
}

#[test]
fn family_names_are_unique() {
    for (i, a) in FAMILIES.iter().enumerate() {
        assert!(
            FAMILIES[i + 1..].iter().all(|b| b.name != a.name),
            "{}",
            a.name
        );
    }
}

#[test]
fn histogram_sample_names_are_documented() {
    assert!(is_documented_sample(
        "pricewire_tick_to_publish_latency_seconds_bucket"
    ));
    assert!(is_documented_sample("pricewire_ticks_received_total"));
    assert!(!is_documented_sample(
        "pricewire_ticks_received_total_bucket"
    ));
    assert!(!is_documented_sample("pricewire_nonexistent_total"));
}

#[test]
fn conventions_catch_a_counter_without_total() {
    let bad = counter("pricewire_ticks", &[], "ticks", "feed", "x");
    let e = check_conventions(&bad).unwrap_err();
    assert_eq!(e.rule, NamingRule::Total);
    assert_eq!(
        e.to_string(),
        "pricewire_ticks: counters, and only counters, end in _total"
    );
}

#[test]
fn ratios_end_in_ratio_and_only_deprecated_names_keep_rate() {
    let bad = gauge("pricewire_x_busy_rate", &[], "ratio", "ops", "x");
    assert!(check_conventions(&bad).is_err());
    let good = gauge("pricewire_x_busy_ratio", &[], "ratio", "ops", "x");
    assert!(check_conventions(&good).is_ok());
}

#[test]
fn every_deprecated_name_mirrors_its_replacement() {
    for r in DEPRECATED {
        let (o, n) = (family(r.old).expect(r.old), family(r.new).expect(r.new));
        assert_ne!(r.old, r.new);
        assert_eq!((o.kind, o.labels), (n.kind, n.labels), "{}", r.old);
        assert!(r.scale == 1.0 || o.kind == MetricKind::Gauge, "{}", r.old);
        let unit = if r.scale == 1e9 {
            "nanoseconds"
        } else {
            n.unit
        };
        assert_eq!(
            (r.scale == 1.0 || r.scale == 1e9, o.unit),
            (true, unit),
            "{}",
            r.old
        );
        assert!(o.help.starts_with("Deprecated, removed in "), "{}", r.old);
        assert!(
            o.help.contains(r.new),
            "{}: its help names {}",
            r.old,
            r.new
        );
        assert!(!n.help.contains("Deprecated"), "{}", r.new);
        assert!(DEPRECATED.iter().all(|x| x.old != r.new), "{}", r.new);
    }
}

#[test]
fn times_are_in_seconds_unless_deprecated() {
    let bad = gauge("pricewire_x_delay_ns", &[], "nanoseconds", "ops", "x");
    assert!(check_conventions(&bad).is_err());
}
