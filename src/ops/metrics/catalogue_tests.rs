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
    assert!(check_conventions(&bad).is_err());
}
