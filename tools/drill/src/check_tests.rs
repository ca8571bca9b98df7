use super::*;
use pricewire::client::SeqStatus;

const MS: u64 = 1_000_000;
const X: u64 = 7;

fn rec(at_ms: u64, symbol: u16, seq: u64, bid: i64, flags: u8, snapshot: bool) -> Record {
    Record {
        at_ns: at_ms * MS,
        stream: X,
        symbol,
        seq,
        bid,
        ask: bid + 8,
        flags,
        snapshot,
        status: SeqStatus::InOrder,
    }
}

fn terminal(name: &str, records: Vec<Record>) -> Terminal {
    Terminal {
        name: name.into(),
        records,
        sessions: Vec::new(),
        gone_ns: None,
    }
}

fn takeover(at_ms: u64) -> Failure {
    Failure {
        at_ns: at_ms * MS,
        what: "leader killed".into(),
        source_lost: true,
        recovers: true,
        takeover: true,
    }
}

const GAP: u64 = TAKEOVER_SEQ_GAP + 1;

/// A terminal across a clean takeover at 100 ms: the old leader's 1..=3,
/// the new one's restatement (flagged) and its next price.
fn clean() -> Vec<Record> {
    vec![
        rec(10, 1, 1, 100, 0, true),
        rec(20, 1, 2, 101, 0, false),
        rec(30, 1, 3, 102, 0, false),
        rec(1_600, 1, 3 + GAP, 110, CONFLATED, true),
        rec(1_700, 1, 4 + GAP, 111, 0, false),
    ]
}

fn bounds() -> Bounds {
    Bounds {
        stale_ns: Some(3_000 * MS),
        resume_ns: Some(3_000 * MS),
    }
}

#[test]
fn a_clean_takeover_holds_every_invariant_and_reports_its_delays() {
    let ts = [terminal("a", clean()), terminal("b", clean())];
    let f = check(&ts, &[takeover(100)], bounds(), 5_000 * MS);
    assert!(f.ok(), "{:?}", f.invariants);
    assert_eq!(f.stale_ms_max, Some(1_500.0));
    assert_eq!(f.resume_ms_max, Some(1_600.0));
    assert_eq!(f.flagged_max, 1);
}

#[test]
fn a_sequence_that_goes_back_or_skips_unflagged_breaks_i1() {
    let mut back = clean();
    back[3] = rec(1_600, 1, 2, 110, 0, false);
    let f = check(&[terminal("a", back)], &[], bounds(), 5_000 * MS);
    assert!(matches!(&f.invariants[0], Verdict::Broken { first, .. } if first.contains("after 3")));
    let mut skip = clean();
    skip[2] = rec(30, 1, 5, 102, 0, false);
    let f = check(&[terminal("a", skip)], &[], bounds(), 5_000 * MS);
    assert!(matches!(&f.invariants[0], Verdict::Broken { first, .. } if first.contains("skip")));
    let update_first = vec![rec(10, 1, 1, 100, 0, false)];
    let f = check(&[terminal("a", update_first)], &[], bounds(), MS);
    assert!(!f.invariants[0].ok());
}

#[test]
fn one_sequence_with_two_prices_on_two_edges_breaks_i2() {
    let mut other = clean();
    other[1].bid = 999;
    let f = check(
        &[terminal("a", clean()), terminal("b", other)],
        &[],
        bounds(),
        MS,
    );
    assert!(matches!(&f.invariants[1], Verdict::Broken { first, .. } if first.contains("seq 2")));
}

#[test]
fn a_frozen_price_shown_unflagged_breaks_i3_and_a_stale_one_does_not() {
    // The standby never came: the old price stays, unflagged.
    let frozen = clean()[..3].to_vec();
    let f = check(
        &[terminal("a", frozen.clone())],
        &[takeover(100)],
        bounds(),
        5_000 * MS,
    );
    assert!(!f.invariants[2].ok(), "{:?}", f.invariants[2]);
    assert!(!f.invariants[3].ok(), "and nothing came back");
    let mut stale = frozen;
    stale.push(rec(2_100, 1, 3, 102, STALE | CONFLATED, true));
    let f = check(
        &[terminal("a", stale)],
        &[takeover(100)],
        bounds(),
        5_000 * MS,
    );
    assert_eq!(f.invariants[2], Verdict::Held);
    assert_eq!(f.stale_ms_max, Some(2_000.0));
}

#[test]
fn prices_of_the_old_leader_in_flight_are_not_taken_for_the_new_one() {
    // 4 arrives after the kill, unflagged, but from the dead leader.
    let mut late = clean();
    late.insert(3, rec(110, 1, 4, 103, 0, false));
    late[4] = rec(1_600, 1, 4 + GAP, 110, CONFLATED, true);
    late[5] = rec(1_700, 1, 5 + GAP, 111, 0, false);
    let f = check(
        &[terminal("a", late)],
        &[takeover(100)],
        bounds(),
        5_000 * MS,
    );
    assert!(f.ok(), "{:?}", f.invariants);
    assert_eq!(f.resume_ms_max, Some(1_600.0));
}

#[test]
fn two_flagged_prices_on_the_way_back_break_i4() {
    let mut twice = clean();
    twice.insert(4, rec(1_650, 1, 5 + GAP, 112, CONFLATED, true));
    twice[5] = rec(1_700, 1, 6 + GAP, 111, 0, false);
    let f = check(
        &[terminal("a", twice)],
        &[takeover(100)],
        bounds(),
        5_000 * MS,
    );
    assert!(
        matches!(&f.invariants[3], Verdict::Broken { first, .. } if first.contains("2 flagged"))
    );
}

#[test]
fn a_gone_terminal_and_a_scenario_without_failures_are_not_judged_on_i3_i4() {
    let mut gone = terminal("a", clean()[..3].to_vec());
    gone.gone_ns = Some(50 * MS);
    let f = check(&[gone], &[takeover(100)], bounds(), 5_000 * MS);
    assert_eq!(f.invariants[2], Verdict::NotApplicable);
    let f = check(&[terminal("a", clean())], &[], bounds(), 5_000 * MS);
    assert_eq!(f.invariants[3], Verdict::NotApplicable);
}
