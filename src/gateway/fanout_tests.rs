//! Unit tests of the fan-out's sequence rules (`is_news`, `skips_a_sequence`).

use super::*;

fn sub(last_seq: u64, stale: bool) -> Sub {
    Sub {
        last_seq,
        stream: 5,
        stale,
        ..Sub::new(0, 0, PACE_NONE)
    }
}

#[test]
fn a_sequence_is_sent_once_unless_its_stale_flag_changes() {
    let fresh = sub(7, false);
    let seq = |n| (5, n);
    assert!(is_news(&fresh, seq(8), false, false), "newer");
    assert!(
        !is_news(&fresh, seq(6), true, true),
        "older, even as a stale snapshot"
    );
    assert!(!is_news(&fresh, seq(7), false, false), "same update");
    assert!(
        !is_news(&fresh, seq(7), true, false),
        "same snapshot, same flag"
    );
    assert!(
        !is_news(&fresh, seq(7), false, true),
        "a stale update is no restatement"
    );
    assert!(is_news(&fresh, seq(7), true, true), "restated stale");
    let stale = sub(7, true);
    assert!(is_news(&stale, seq(7), true, false), "restated fresh");
    assert!(
        !is_news(&stale, seq(7), true, true),
        "stale again: already said"
    );
}

#[test]
fn only_the_next_sequence_of_the_same_stream_goes_out_as_an_update() {
    let held = sub(9, false);
    assert!(!skips_a_sequence(&held, 5, 10), "the next one");
    for seq in [11, 13, 1_000] {
        assert!(skips_a_sequence(&held, 5, seq), "seq {seq} skips");
    }
    assert!(
        !skips_a_sequence(&held, 6, 13),
        "another stream: a snapshot anyway"
    );
    assert!(
        !skips_a_sequence(&sub(0, false), 5, 13),
        "the first price: a snapshot anyway"
    );
}

#[test]
fn a_price_of_another_stream_is_news_whatever_its_sequence() {
    let held = sub(700, false);
    for seq in [1, 699, 700, 701] {
        assert!(is_news(&held, (6, seq), false, false), "stream 6 seq {seq}");
    }
}
