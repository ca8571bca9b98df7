use super::*;

const MS: u64 = 1_000_000;
/// The stream of the tests' cores.
const X: u64 = 0x5eed;

#[test]
fn due_once_per_silence_after_the_max_age() {
    let mut s = Staleness::new(500, 1_000 * MS);
    assert!(!s.due(1_500 * MS), "exactly the max age is not past it");
    assert!(s.due(1_501 * MS));
    assert!(s.is_flagged());
    assert!(!s.due(5_000 * MS), "flagged once per silence");
    assert!(s.heard(1, X, 6_000 * MS));
    assert!(!s.is_flagged());
    assert!(!s.due(6_400 * MS));
    assert!(s.due(6_501 * MS), "a new silence is flagged again");
}

#[test]
fn a_clock_going_backwards_is_not_a_silence() {
    let mut s = Staleness::new(100, 1_000 * MS);
    assert!(!s.due(0));
}

#[test]
fn a_quiet_market_with_a_live_core_is_never_stale() {
    // No price for a minute; heartbeats of epoch 5 every 500 ms.
    let mut s = Staleness::new(2_000, 0);
    assert!(s.heard(5, X, 0), "the last price");
    for beat in 1..=120u64 {
        let t = beat * 500 * MS;
        assert!(!s.due(t - MS), "stale at {} ms", t / MS);
        assert!(s.heard(5, X, t));
    }
    assert!(!s.is_flagged());
}

#[test]
fn a_dead_core_goes_stale_one_max_age_after_its_last_heartbeat() {
    let mut s = Staleness::new(2_000, 0);
    for beat in 0..=10u64 {
        assert!(s.heard(5, X, beat * 500 * MS));
    }
    assert!(!s.due(7_000 * MS));
    assert!(s.due(7_001 * MS), "stale after the max age");
    assert!(!s.due(9_000 * MS), "once per silence");
}

#[test]
fn an_older_epoch_keeps_nothing_alive() {
    let mut s = Staleness::new(1_000, 0);
    assert!(s.heard(8, X, 0));
    assert!(!s.admits(7, X));
    // A core that lost the lease keeps sending: not heard.
    for t in 1..=30u64 {
        assert!(!s.heard(7, X, t * 100 * MS));
    }
    assert_eq!(s.current(), (8, X));
    assert!(s.due(1_001 * MS), "the old epoch's heartbeats are ignored");
    assert!(!s.heard(7, X, 3_100 * MS), "nor do they clear the flag");
    assert!(s.is_flagged());
}

#[test]
fn a_takeover_moves_the_epoch_on_and_fences_the_old_core() {
    let mut s = Staleness::new(1_000, 0);
    assert!(s.heard(5, X, 0));
    assert!(s.heard(5, X, 400 * MS));
    // The leader dies; the standby takes the lease at epoch 9 within the
    // max age and its heartbeats keep the edge fresh.
    assert!(!s.due(1_300 * MS));
    assert!(s.admits(9, X));
    assert!(s.heard(9, X, 1_300 * MS));
    assert_eq!(s.current(), (9, X));
    assert!(!s.due(2_200 * MS));
    // The old leader comes back from a pause, still stamping epoch 5: not
    // admitted, and it does not keep the edge fresh.
    assert!(!s.admits(5, X));
    assert!(!s.heard(5, X, 2_250 * MS));
    assert!(!s.due(2_300 * MS));
    assert!(s.due(2_301 * MS));
}

#[test]
fn prices_the_new_leader_does_not_restate_are_due_one_max_age_after_the_old_one_spoke() {
    let mut s = Staleness::new(1_000, 0);
    assert!(s.heard(5, X, 0));
    assert!(s.heard(5, X, 400 * MS));
    assert!(!s.takeover_due(10_000 * MS), "no takeover yet");
    assert!(s.heard(9, X, 900 * MS));
    assert!(!s.takeover_due(1_399 * MS));
    assert!(
        s.takeover_due(1_400 * MS),
        "the old leader's last word + max age"
    );
    assert!(!s.takeover_due(1_500 * MS), "once");
    // The first epoch heard is no takeover.
    let mut fresh = Staleness::new(1_000, 0);
    assert!(fresh.heard(3, X, 0));
    assert!(!fresh.takeover_due(5_000 * MS));
}

#[test]
fn a_new_stream_below_the_epoch_is_taken_only_once_the_old_went_silent() {
    // The lease store and the last values were lost: a core starts a new
    // stream at epoch 1 while this edge remembers epoch 8.
    let y = 0xbeef;
    let mut s = Staleness::new(1_000, 0);
    assert!(s.heard(8, X, 0));
    assert!(!s.admits(1, y), "the old stream is still alive");
    assert!(s.due(1_001 * MS));
    assert!(
        !s.admits(1, X),
        "a fenced core of the old stream stays refused"
    );
    assert!(s.admits(1, y));
    assert!(
        s.admits(8, y),
        "the same epoch number too (a bucket that started again)"
    );
    assert!(s.heard(1, y, 1_100 * MS));
    assert_eq!(s.current(), (1, y));
    assert!(
        !s.admits(1, X),
        "the same epoch number of another stream is refused"
    );
    // A higher epoch wins again, of either stream: here only the old
    // core's own fencing keeps it quiet (it has not renewed a lease since
    // the store was lost).
    assert!(s.admits(8, X));
}

#[test]
fn an_edge_that_hears_nothing_at_start_can_flag_at_once() {
    let mut s = Staleness::new(1_000, 0);
    assert!(!s.heard_any());
    assert!(s.force_flag());
    assert!(s.is_flagged());
    assert!(!s.force_flag(), "already flagged");
    assert!(!s.due(5_000 * MS), "the silence is flagged once");
}
