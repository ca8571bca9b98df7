//! The pacer's groups driven by an injected clock (plain `u64`
//! nanoseconds).

use super::*;
use crate::config::MAX_UPDATE_HZ_MIN;

const MS: u64 = 1_000_000;
/// 10 updates/s.
const I10: u64 = 100 * MS;
/// 4 updates/s.
const I4: u64 = 250 * MS;

fn price(symbol: u16, seq: u64) -> Price {
    Price {
        symbol,
        seq,
        ..Price::EMPTY
    }
}

/// Every due price at `now`, as (group, seq), after marking each sent.
fn drain(p: &mut Pacer, now: u64) -> Vec<(GroupId, u64)> {
    let mut out = Vec::new();
    while let Some((g, price)) = p.pop_due(now) {
        p.sent(g, now);
        out.push((g, price.seq));
    }
    out
}

/// The one group of `key`.
fn group(p: &Pacer, key: usize) -> GroupId {
    assert_eq!(p.groups_of(key).len(), 1, "key {key}");
    p.groups_of(key)[0]
}

#[test]
fn hz_become_intervals() {
    assert_eq!(interval_ns(0), 0);
    assert_eq!(interval_ns(10), I10);
    assert_eq!(interval_ns(1_000), MS);
    assert!(interval_ns(MAX_UPDATE_HZ_MIN) < WHEEL_SLOTS as u64 * TICK_NS);
}

#[test]
fn members_of_one_key_and_interval_share_one_group() {
    let mut p = Pacer::new(0);
    let a = p.add(3, 1, 0, I10);
    let b = p.add(3, 2, 5, I10);
    let c = p.add(3, 4, 1, I4);
    let d = p.add(8, 1, 1, I10);
    assert_eq!(p.groups(), 3);
    assert_eq!(p.groups_of(3).len(), 2, "one per interval");
    let g = p.groups_of(3)[0];
    let ids: Vec<_> = p
        .members(g)
        .iter()
        .map(|m| (m.conn, m.slot, m.id))
        .collect();
    assert_eq!(ids, vec![(1, 0, a), (2, 5, b)]);
    assert_eq!(p.members(p.groups_of(3)[1])[0].id, c);
    assert_eq!(p.members(group(&p, 8))[0].id, d);
    assert!(p.groups_of(99).is_empty());
    // A member's slot moves within its connection's list.
    p.set_slot(b, 0);
    assert_eq!(p.members(g)[1].slot, 0);
}

#[test]
fn one_slot_per_group_and_the_latest_wins() {
    let t0 = 5_000 * MS;
    let mut p = Pacer::new(t0);
    for conn in 0..3 {
        p.add(0, conn, 0, I10);
    }
    let g = group(&p, 0);
    assert_eq!(p.offer(g, &price(0, 1), t0), Offer::Send);
    p.sent(g, t0);
    // Three more inside the interval: held once for the whole group,
    // each replacing the last.
    assert_eq!(
        p.offer(g, &price(0, 2), t0 + 10 * MS),
        Offer::Held { replaced: false }
    );
    assert_eq!(
        p.offer(g, &price(0, 3), t0 + 20 * MS),
        Offer::Held { replaced: true }
    );
    assert_eq!(
        p.offer(g, &price(0, 4), t0 + 90 * MS),
        Offer::Held { replaced: true }
    );
    assert_eq!(p.held(), 1, "one held price for three members");
    assert_eq!(p.seen_seq(g), 4);
    // Not before the slot.
    assert!(drain(&mut p, t0 + 99 * MS).is_empty());
    // At the slot (within one tick): the latest only, once.
    let got = drain(&mut p, t0 + I10 + TICK_NS);
    assert_eq!(got, vec![(g, 4)]);
    assert_eq!(p.held(), 0);
    // Nothing more owed: the next price waits for the next slot.
    let t1 = t0 + I10 + TICK_NS;
    assert_eq!(
        p.offer(g, &price(0, 5), t1 + MS),
        Offer::Held { replaced: false }
    );
    assert!(drain(&mut p, t1 + 50 * MS).is_empty());
    assert_eq!(drain(&mut p, t1 + I10 + TICK_NS), vec![(g, 5)]);
}

#[test]
fn a_held_price_goes_at_its_slot_without_a_newer_one() {
    let t0 = 3 * MS;
    let mut p = Pacer::new(t0);
    p.add(2, 1, 0, I10);
    let g = group(&p, 2);
    assert_eq!(p.offer(g, &price(0, 1), t0), Offer::Send);
    p.sent(g, t0);
    assert!(matches!(
        p.offer(g, &price(0, 2), t0 + MS),
        Offer::Held { .. }
    ));
    // The shard learns when to wake: the slot, rounded up to a tick.
    let due = p.next_due_ns().unwrap();
    assert!(due >= t0 + I10 && due < t0 + I10 + TICK_NS, "{due}");
    assert!(drain(&mut p, due - 1).is_empty());
    assert_eq!(drain(&mut p, due), vec![(g, 2)]);
    assert_eq!(p.next_due_ns(), None);
}

#[test]
fn a_price_after_a_quiet_interval_goes_at_once() {
    let mut p = Pacer::new(0);
    p.add(0, 1, 0, I10);
    let g = group(&p, 0);
    assert_eq!(p.offer(g, &price(0, 1), 0), Offer::Send);
    p.sent(g, 0);
    assert_eq!(p.offer(g, &price(0, 2), I10), Offer::Send);
    p.sent(g, I10);
    assert!(matches!(
        p.offer(g, &price(0, 3), I10 + 1),
        Offer::Held { .. }
    ));
}

#[test]
fn a_new_member_joins_its_groups_schedule() {
    let mut p = Pacer::new(0);
    p.add(0, 1, 0, I10);
    let g = group(&p, 0);
    assert_eq!(p.offer(g, &price(0, 1), 0), Offer::Send);
    p.sent(g, 0);
    assert!(matches!(p.offer(g, &price(0, 2), MS), Offer::Held { .. }));
    // Joining mid-interval changes neither the slot nor the held price.
    let late = p.add(0, 2, 0, I10);
    assert_eq!(group(&p, 0), g);
    assert_eq!(p.next_due_ns(), Some(I10.div_ceil(TICK_NS) * TICK_NS));
    assert_eq!(drain(&mut p, I10 + TICK_NS), vec![(g, 2)]);
    assert_eq!(p.members(g)[1].id, late);
}

#[test]
fn no_starvation_across_many_groups() {
    // 2,000 subscriptions (400 connections × 5 of 25 keys) at 10 Hz, every
    // key offered a price every millisecond for 2 s: 25 groups, each gets
    // one delivery per slot, none is left behind, and every delivery is
    // its latest price.
    let (conns, per_conn, keys) = (400u32, 5u32, 25u32);
    let mut p = Pacer::new(0);
    for c in 0..conns {
        for s in 0..per_conn {
            p.add((c * 7 + s) % keys, c, s, I10);
        }
    }
    assert_eq!(p.groups(), keys as usize);
    let members: usize = (0..keys)
        .map(|k| p.members(group(&p, k as usize)).len())
        .sum();
    assert_eq!(members, (conns * per_conn) as usize);
    let gs: Vec<GroupId> = (0..keys as usize).map(|k| group(&p, k)).collect();
    let mut delivered = vec![0u32; keys as usize];
    let mut last_sent = vec![0u64; keys as usize];
    let mut last_time = vec![None::<u64>; keys as usize];
    let mut record = |k: usize, seq: u64, now: u64| {
        delivered[k] += 1;
        last_sent[k] = seq;
        let prev = last_time[k].replace(now);
        assert!(
            prev.is_none_or(|t| now - t >= I10),
            "two inside one interval"
        );
    };
    for ms in 0..2_000u64 {
        let now = ms * MS;
        while let Some((g, held)) = p.pop_due(now) {
            assert_eq!(held.seq, ms, "latest wins");
            p.sent(g, now);
            record(gs.iter().position(|&x| x == g).unwrap(), held.seq, now);
        }
        for (k, &g) in gs.iter().enumerate() {
            if p.offer(g, &price(k as u16, ms + 1), now) == Offer::Send {
                p.sent(g, now);
                record(k, ms + 1, now);
            }
        }
    }
    for (k, &n) in delivered.iter().enumerate() {
        // 2 s at 10 Hz: 20 slots (one tick of lateness each at most).
        assert!((19..=21).contains(&n), "group {k}: {n} deliveries");
        assert!(last_sent[k] > 1_800, "group {k} stale at {}", last_sent[k]);
    }
    // Every held price is still owed and goes out within one interval.
    assert_eq!(p.held(), keys as usize);
    let later = 2_000 * MS + I10 + TICK_NS;
    assert_eq!(drain(&mut p, later).len(), keys as usize);
}

#[test]
fn the_last_member_leaving_drops_the_held_price() {
    let mut p = Pacer::new(0);
    let a = p.add(0, 1, 0, I10);
    let b = p.add(0, 2, 0, I10);
    let c = p.add(1, 3, 0, I10);
    for key in [0, 1] {
        let g = group(&p, key);
        assert_eq!(p.offer(g, &price(0, 1), 0), Offer::Send);
        p.sent(g, 0);
        assert!(matches!(p.offer(g, &price(0, 2), MS), Offer::Held { .. }));
    }
    let g0 = group(&p, 0);
    // One member of two leaves: the group keeps its held price.
    assert!(p.remove(a));
    assert_eq!(p.held(), 2);
    assert_eq!(p.members(g0).len(), 1);
    assert_eq!(p.members(g0)[0].id, b);
    // The last leaves: the price is dropped and the group freed.
    assert!(p.remove(b));
    assert_eq!(p.held(), 1);
    assert!(p.groups_of(0).is_empty());
    assert_eq!(p.groups(), 1);
    // The freed group and member are reused, with nothing held.
    let d = p.add(4, 9, 0, I10);
    assert!(d == a || d == b);
    let g4 = group(&p, 4);
    assert_eq!(g4, g0);
    assert_eq!(p.offer(g4, &price(4, 7), 2 * MS), Offer::Send);
    assert_eq!(drain(&mut p, I10 + TICK_NS), vec![(group(&p, 1), 2)]);
    // Nothing is held any more when the last member of key 1 leaves.
    assert!(!p.remove(c));
}

#[test]
fn a_resync_in_between_drops_the_held_price() {
    let mut p = Pacer::new(0);
    p.add(0, 1, 0, I10);
    let g = group(&p, 0);
    p.sent(g, 0);
    assert!(matches!(p.offer(g, &price(0, 2), MS), Offer::Held { .. }));
    // The group was sent the price by another path.
    p.sent(g, 2 * MS);
    assert_eq!(p.held(), 0);
    assert!(drain(&mut p, 2 * I10).is_empty());
}

#[test]
fn a_long_idle_clock_catches_up() {
    let mut p = Pacer::new(0);
    p.add(0, 1, 3, I10);
    let g = group(&p, 0);
    p.sent(g, 0);
    assert!(matches!(p.offer(g, &price(0, 9), MS), Offer::Held { .. }));
    // The shard slept for an hour: one revolution finds the price.
    let (got, held) = p.pop_due(3_600_000 * MS).unwrap();
    assert_eq!((got, held.seq), (g, 9));
    assert_eq!(p.pop_due(3_600_000 * MS), None);
}
