//! The pacer driven by an injected clock (plain `u64` nanoseconds).

use super::*;
use crate::config::MAX_UPDATE_HZ_MIN;

const MS: u64 = 1_000_000;
/// 10 updates/s.
const I10: u64 = 100 * MS;

fn price(symbol: u16, seq: u64) -> Price {
    Price {
        symbol,
        seq,
        ..Price::EMPTY
    }
}

/// Every due price at `now`, as (conn, seq), after marking each sent.
fn drain(p: &mut Pacer, now: u64) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    while let Some(d) = p.pop_due(now) {
        p.sent(d.id, now);
        out.push((d.conn, d.price.seq));
    }
    out
}

#[test]
fn hz_become_intervals() {
    assert_eq!(interval_ns(0), 0);
    assert_eq!(interval_ns(10), I10);
    assert_eq!(interval_ns(1_000), MS);
    assert!(interval_ns(MAX_UPDATE_HZ_MIN) < WHEEL_SLOTS as u64 * TICK_NS);
}

#[test]
fn one_price_per_slot_and_the_latest_wins() {
    let t0 = 5_000 * MS;
    let mut p = Pacer::new(t0);
    let id = p.add(7, 0, I10);
    assert_eq!(p.offer(id, &price(1, 1), t0), Offer::Send);
    p.sent(id, t0);
    // Three more inside the interval: held, each replacing the last.
    assert_eq!(
        p.offer(id, &price(1, 2), t0 + 10 * MS),
        Offer::Held { replaced: false }
    );
    assert_eq!(
        p.offer(id, &price(1, 3), t0 + 20 * MS),
        Offer::Held { replaced: true }
    );
    assert_eq!(
        p.offer(id, &price(1, 4), t0 + 90 * MS),
        Offer::Held { replaced: true }
    );
    // Not before the slot.
    assert!(drain(&mut p, t0 + 99 * MS).is_empty());
    // At the slot (within one tick): the latest only.
    let got = drain(&mut p, t0 + I10 + TICK_NS);
    assert_eq!(got, vec![(7, 4)]);
    assert_eq!(p.held(), 0);
    // Nothing more owed: the next price waits for the next slot.
    let t1 = t0 + I10 + TICK_NS;
    assert_eq!(
        p.offer(id, &price(1, 5), t1 + MS),
        Offer::Held { replaced: false }
    );
    assert!(drain(&mut p, t1 + 50 * MS).is_empty());
    assert_eq!(drain(&mut p, t1 + I10 + TICK_NS), vec![(7, 5)]);
}

#[test]
fn a_held_price_goes_at_its_slot_without_a_newer_one() {
    let t0 = 3 * MS;
    let mut p = Pacer::new(t0);
    let id = p.add(1, 0, I10);
    assert_eq!(p.offer(id, &price(0, 1), t0), Offer::Send);
    p.sent(id, t0);
    assert!(matches!(
        p.offer(id, &price(0, 2), t0 + MS),
        Offer::Held { .. }
    ));
    // The shard learns when to wake: the slot, rounded up to a tick.
    let due = p.next_due_ns().unwrap();
    assert!(due >= t0 + I10 && due < t0 + I10 + TICK_NS, "{due}");
    assert!(drain(&mut p, due - 1).is_empty());
    assert_eq!(drain(&mut p, due), vec![(1, 2)]);
    assert_eq!(p.next_due_ns(), None);
}

#[test]
fn a_price_after_a_quiet_interval_goes_at_once() {
    let mut p = Pacer::new(0);
    let id = p.add(1, 0, I10);
    assert_eq!(p.offer(id, &price(0, 1), 0), Offer::Send);
    p.sent(id, 0);
    assert_eq!(p.offer(id, &price(0, 2), I10), Offer::Send);
    p.sent(id, I10);
    assert!(matches!(
        p.offer(id, &price(0, 3), I10 + 1),
        Offer::Held { .. }
    ));
}

#[test]
fn no_starvation_across_many_symbols() {
    // 2,000 subscriptions (400 connections × 5 symbols) at 10 Hz, every
    // one offered a price every millisecond for 2 s: each gets one
    // delivery per slot, none is left behind, and every delivery is its
    // latest price.
    let (conns, symbols) = (400u32, 5u32);
    let mut p = Pacer::new(0);
    let ids: Vec<PaceId> = (0..conns * symbols)
        .map(|k| p.add(k / symbols, k % symbols, I10))
        .collect();
    let mut delivered = vec![0u32; ids.len()];
    let mut last_sent = vec![0u64; ids.len()];
    let mut last_time = vec![None::<u64>; ids.len()];
    let by_id = |id: PaceId| ids.iter().position(|&x| x == id).unwrap();
    for ms in 0..2_000u64 {
        let now = ms * MS;
        while let Some(d) = p.pop_due(now) {
            let k = by_id(d.id);
            assert_eq!(d.price.seq, ms, "latest wins");
            p.sent(d.id, now);
            delivered[k] += 1;
            last_sent[k] = d.price.seq;
            let prev = last_time[k].replace(now);
            assert!(
                prev.is_none_or(|t| now - t >= I10),
                "two inside one interval"
            );
        }
        for (k, &id) in ids.iter().enumerate() {
            if p.offer(id, &price(k as u16, ms + 1), now) == Offer::Send {
                p.sent(id, now);
                delivered[k] += 1;
                last_sent[k] = ms + 1;
                let prev = last_time[k].replace(now);
                assert!(prev.is_none_or(|t| now - t >= I10));
            }
        }
    }
    for (k, &n) in delivered.iter().enumerate() {
        // 2 s at 10 Hz: 20 slots (one tick of lateness each at most).
        assert!((19..=21).contains(&n), "subscription {k}: {n} deliveries");
        assert!(
            last_sent[k] > 1_800,
            "subscription {k} stale at {}",
            last_sent[k]
        );
    }
    // Every held price is still owed and goes out within one interval.
    assert_eq!(p.held(), ids.len());
    let later = 2_000 * MS + I10 + TICK_NS;
    assert_eq!(drain(&mut p, later).len(), ids.len());
}

#[test]
fn unsubscribe_drops_the_pending_slot() {
    let mut p = Pacer::new(0);
    let a = p.add(1, 0, I10);
    let b = p.add(2, 0, I10);
    for id in [a, b] {
        assert_eq!(p.offer(id, &price(0, 1), 0), Offer::Send);
        p.sent(id, 0);
        assert!(matches!(p.offer(id, &price(0, 2), MS), Offer::Held { .. }));
    }
    assert!(p.remove(a));
    assert_eq!(p.held(), 1);
    // The freed node is reused by a new subscription with nothing held.
    let c = p.add(3, 4, I10);
    assert_eq!(c, a);
    assert_eq!(drain(&mut p, I10 + TICK_NS), vec![(2, 2)]);
    assert_eq!(p.offer(c, &price(0, 3), I10 + TICK_NS), Offer::Send);
}

#[test]
fn a_resync_in_between_drops_the_held_price() {
    let mut p = Pacer::new(0);
    let id = p.add(1, 0, I10);
    p.sent(id, 0);
    assert!(matches!(p.offer(id, &price(0, 2), MS), Offer::Held { .. }));
    // A snapshot went out by another path (a slow consumer's resync).
    p.sent(id, 2 * MS);
    assert_eq!(p.held(), 0);
    assert!(drain(&mut p, 2 * I10).is_empty());
}

#[test]
fn a_moved_slot_is_reported_and_a_long_idle_clock_catches_up() {
    let mut p = Pacer::new(0);
    let id = p.add(1, 3, I10);
    p.sent(id, 0);
    assert!(matches!(p.offer(id, &price(0, 9), MS), Offer::Held { .. }));
    p.set_slot(id, 0);
    // The shard slept for an hour: one revolution finds the price.
    let got = p.pop_due(3_600_000 * MS).unwrap();
    assert_eq!((got.conn, got.slot, got.price.seq), (1, 0, 9));
    assert_eq!(p.pop_due(3_600_000 * MS), None);
}
