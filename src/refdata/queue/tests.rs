//! The queue's bounds and order, over generated sequences of offers.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;

const MISS: RequestKind = RequestKind::Miss;

fn src(n: u8) -> SourceKey {
    SourceKey::of(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)))
}

fn drain(q: &mut Pending, refreshes: bool) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(t) = q.pop(refreshes) {
        q.done(&t.name);
        out.push(t.name);
    }
    out
}

#[test]
fn ipv6_sources_group_by_64_and_mapped_v4_is_v4() {
    let a: Ipv6Addr = "2001:db8:1:2::1".parse().unwrap();
    let b: Ipv6Addr = "2001:db8:1:2:ffff::9".parse().unwrap();
    let c: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(SourceKey::of(a.into()), SourceKey::of(b.into()));
    assert_ne!(SourceKey::of(a.into()), SourceKey::of(c.into()));
    let v4 = Ipv4Addr::new(192, 0, 2, 7);
    assert_eq!(
        SourceKey::of(v4.into()),
        SourceKey::of(v4.to_ipv6_mapped().into())
    );
    assert_ne!(SourceKey::of(v4.into()), SourceKey::ANY);
}

#[test]
fn known_misses_first_then_unknown_and_refreshes_in_turn() {
    let mut q = Pending::new(16, 16, 16);
    for n in ["r1", "r2", "r3"] {
        q.offer(n, RequestKind::Expired, Class::Refresh, SourceKey::ANY);
    }
    for n in ["u1", "u2"] {
        q.offer(n, MISS, Class::UnknownMiss, src(1));
    }
    q.offer("k1", MISS, Class::KnownMiss, src(1));
    // Known first; then (repeated: none) refresh, once-asked in turn.
    assert_eq!(drain(&mut q, true), ["k1", "r1", "u2", "r2", "u1", "r3"]);
}

#[test]
fn refreshes_wait_while_the_data_set_is_lost() {
    let mut q = Pending::new(4, 4, 4);
    q.offer("r", RequestKind::Early, Class::Refresh, SourceKey::ANY);
    q.offer("u", MISS, Class::UnknownMiss, src(1));
    assert_eq!(drain(&mut q, false), ["u"]);
    assert_eq!((q.len(), q.refreshes()), (1, 1));
    assert_eq!(drain(&mut q, true), ["r"]);
}

#[test]
fn a_refresh_asked_for_by_a_logon_becomes_a_miss() {
    let mut q = Pending::new(4, 4, 4);
    q.offer("a", RequestKind::Expired, Class::Refresh, SourceKey::ANY);
    q.offer("b", RequestKind::Expired, Class::Refresh, SourceKey::ANY);
    assert_eq!(
        q.offer("b", MISS, Class::KnownMiss, src(1)),
        Offered::Coalesced
    );
    let t = q.pop(true).unwrap();
    assert_eq!(
        (t.name.as_str(), t.class, t.kind),
        ("b", Class::KnownMiss, MISS)
    );
}

#[test]
fn a_source_at_its_bound_displaces_its_own_oldest() {
    let mut q = Pending::new(100, 4, 3);
    for i in 0..3 {
        assert_eq!(
            q.offer(&format!("g{i}"), MISS, Class::UnknownMiss, src(1)),
            Offered::Queued
        );
    }
    assert_eq!(
        q.offer("g3", MISS, Class::UnknownMiss, src(1)),
        Offered::SourceLimited
    );
    assert!(!q.contains("g0") && q.contains("g3"));
    // Another source is not affected; lookups naming no source have no
    // per-source bound.
    assert_eq!(
        q.offer("x", MISS, Class::UnknownMiss, src(2)),
        Offered::Queued
    );
    for i in 0..10 {
        let name = format!("any{i}");
        assert_eq!(
            q.offer(&name, MISS, Class::UnknownMiss, SourceKey::ANY),
            Offered::Queued
        );
    }
}

#[test]
fn in_flight_requests_coalesce_and_requeue_to_the_front() {
    let mut q = Pending::new(4, 4, 4);
    q.offer("a", RequestKind::Expired, Class::Refresh, SourceKey::ANY);
    q.offer("b", RequestKind::Expired, Class::Refresh, SourceKey::ANY);
    let t = q.pop(true).unwrap();
    assert_eq!(t.name, "a");
    assert_eq!(
        q.offer("a", MISS, Class::KnownMiss, src(1)),
        Offered::Coalesced
    );
    assert_eq!(q.requeue(t), 0);
    assert_eq!(drain(&mut q, true), ["a", "b"]);
}

/// One step of a generated history.
#[derive(Debug, Clone)]
enum Op {
    Offer { name: u16, class: u8, source: u8 },
    Pop { refreshes: bool, fail: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u16..64, 0u8..3, 0u8..4).prop_map(|(name, class, source)| Op::Offer { name, class, source }),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(refreshes, fail)| Op::Pop { refreshes, fail }),
    ]
}

fn class_of(c: u8) -> Class {
    [Class::KnownMiss, Class::UnknownMiss, Class::Refresh][c as usize]
}

proptest! {
    /// Bounds and uniqueness hold after every step of any history.
    #[test]
    fn bounds_hold_over_any_history(ops in proptest::collection::vec(op(), 1..300)) {
        let (misses_max, refreshes_max, per_source_max) = (12, 8, 3);
        let mut q = Pending::new(misses_max, refreshes_max, per_source_max);
        for o in ops {
            match o {
                Op::Offer { name, class, source } => {
                    let class = class_of(class);
                    let kind = if class == Class::Refresh { RequestKind::Early } else { MISS };
                    q.offer(&format!("n{name}"), kind, class, src(source));
                }
                Op::Pop { refreshes, fail } => {
                    if let Some(t) = q.pop(refreshes) {
                        prop_assert!(refreshes || t.class != Class::Refresh);
                        if fail { q.requeue(t); } else { q.done(&t.name) }
                    }
                }
            }
            // Upgrades of refreshes may add to the misses, never beyond
            // both bounds together.
            prop_assert!(q.refreshes() <= refreshes_max);
            prop_assert!(q.misses() <= misses_max + 1, "a known miss requeued over known misses");
            prop_assert!(q.misses() + q.refreshes() <= misses_max + refreshes_max);
            for n in q.per_source().values() {
                prop_assert!(*n <= per_source_max);
            }
            let queued = q.queued();
            prop_assert!(queued <= q.len() && q.len() <= queued + 1);
        }
    }

    /// A flood of unknown names from some sources (a spray, some asked
    /// twice), then newcomers from another, each asked again as a client
    /// told to come back does, with refreshes waiting too: every
    /// newcomer is taken within three turns (repeated, refresh, once) of
    /// (its rank + 1) rounds of the repeated tier's round robin, however
    /// large the flood; none is displaced.
    #[test]
    fn newcomers_after_a_flood_are_served_first(
        flood in proptest::collection::vec((0u8..40, 0u16..5000), 0..3000),
        newcomers in 1usize..30,
        refreshes in 0usize..200,
    ) {
        let mut q = Pending::new(1024, 1024, 64);
        for r in 0..refreshes {
            q.offer(&format!("cached{r}"), RequestKind::Early, Class::Refresh, SourceKey::ANY);
        }
        for (s, n) in &flood {
            q.offer(&format!("ghost{n}"), MISS, Class::UnknownMiss, src(*s));
        }
        for _ in 0..2 {
            for i in 0..newcomers {
                q.offer(&format!("new{i}"), MISS, Class::UnknownMiss, src(200));
            }
        }
        let sources = 1 + flood.iter().map(|f| f.0).collect::<BTreeSet<_>>().len();
        let order = drain(&mut q, true);
        for i in 0..newcomers {
            let at = order.iter().position(|n| *n == format!("new{i}"));
            prop_assert!(at.is_some(), "new{} displaced", i);
            let rank = newcomers - 1 - i; // newest first within its source
            prop_assert!(at.unwrap() < 3 * (rank + 1) * sources, "new{} at {:?}", i, at);
        }
    }
}
