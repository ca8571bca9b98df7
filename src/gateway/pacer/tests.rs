//! The pacer's keys and cadences driven by an injected clock (plain `u64`
//! nanoseconds), and a small model of the fan-out around it.

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
        stream_id: 7,
        ..Price::EMPTY
    }
}

/// The fan-out around a pacer, as `fanout_paced.rs` drives it: each
/// member's last sequence and the times it was sent a price.
struct Sim {
    p: Pacer,
    /// (last seq, delivery times) by pace id.
    got: Vec<(u64, Vec<u64>)>,
}

impl Sim {
    fn new() -> Sim {
        Sim {
            p: Pacer::new(0),
            got: Vec::new(),
        }
    }

    fn add(&mut self, key: u32, conn: u32, interval: u64) -> PaceId {
        let id = self.p.add(key, (conn, key), interval);
        if self.got.len() <= id as usize {
            self.got.resize(id as usize + 1, (0, Vec::new()));
        }
        self.got[id as usize] = (0, Vec::new());
        id
    }

    /// Member `m` of key `k` gets the key's latest if it is newer.
    fn release(&mut self, k: KeyId, m: Member, now: u64) -> bool {
        let seq = self.p.latest(k).seq;
        let got = &mut self.got[m.id as usize];
        if seq <= got.0 {
            return false;
        }
        got.0 = seq;
        got.1.push(now);
        true
    }

    fn offer(&mut self, key: u32, seq: u64, now: u64) {
        let k = self.p.key_of(key as usize).expect("paced key");
        self.p.offer(k, &price(key as u16, seq), &[1, 2, 3]);
        for i in 0..self.p.members(k).len() {
            let m = self.p.members(k)[i];
            if self.p.is_open(m.id) && self.release(k, m, now) {
                self.p.close(m.id, now);
            }
        }
    }

    /// Serves every due cadence at `now`; returns how many sent a price.
    fn slots(&mut self, now: u64) -> usize {
        let mut sent = 0;
        while let Some(c) = self.p.pop_due(now) {
            let mut busy = false;
            for i in 0..self.p.cadence_len(c) {
                let (k, m) = self.p.cadence_member(c, i);
                busy |= self.release(k, m, now);
            }
            self.p.slot_done(c, now, busy);
            sent += usize::from(busy);
        }
        sent
    }

    fn times(&self, id: PaceId) -> &[u64] {
        &self.got[id as usize].1
    }

    fn last_seq(&self, id: PaceId) -> u64 {
        self.got[id as usize].0
    }
}

#[test]
fn hz_become_intervals() {
    assert_eq!(interval_ns(0), 0);
    assert_eq!(interval_ns(10), I10);
    assert_eq!(interval_ns(1_000), MS);
    assert!(2 * interval_ns(MAX_UPDATE_HZ_MIN) < WHEEL_SLOTS as u64 * TICK_NS);
}

#[test]
fn a_connections_subscriptions_of_one_interval_share_one_cadence() {
    let mut p = Pacer::new(0);
    let a = p.add(3, (1, 0), I10);
    let b = p.add(8, (1, 1), I10);
    let c = p.add(3, (2, 0), I10);
    let d = p.add(9, (1, 2), I4);
    assert_eq!(p.cadences(), 3, "conn 1 at 10 Hz, conn 2, conn 1 at 4 Hz");
    assert_eq!(p.keys(), 3);
    let k3 = p.key_of(3).unwrap();
    let ids: Vec<_> = p.members(k3).iter().map(|m| (m.conn, m.slot)).collect();
    assert_eq!(ids, vec![(1, 0), (2, 0)]);
    assert_eq!(
        p.member(b),
        Some((
            8,
            Member {
                conn: 1,
                slot: 1,
                id: b
            }
        ))
    );
    assert_eq!(p.member_total(), 4);
    for id in [a, b, c, d] {
        assert!(p.is_open(id), "a new cadence starts open");
    }
    assert_eq!(p.open_members(k3), 2);
}

#[test]
fn an_open_cadence_gets_the_next_price_at_once_then_waits_an_interval() {
    let mut s = Sim::new();
    let a = s.add(3, 1, I10);
    let b = s.add(4, 1, I10);
    s.offer(3, 1, 5 * MS);
    assert_eq!(s.times(a), [5 * MS], "not held: the cadence was open");
    assert!(!s.p.is_open(b), "the whole connection's cadence closed");
    let k4 = s.p.key_of(4).unwrap();
    assert_eq!(s.p.open_members(k4), 0);
    // Inside the interval both keys' prices are held for the slot.
    s.offer(4, 1, 20 * MS);
    s.offer(3, 2, 30 * MS);
    s.offer(3, 3, 40 * MS);
    assert!(s.times(b).is_empty());
    let slot = s.p.next_due_ns().unwrap();
    assert!(
        (105 * MS..205 * MS + TICK_NS).contains(&slot),
        "slot {slot}"
    );
    assert_eq!(s.slots(slot - 1), 0, "never early");
    assert_eq!(s.slots(slot), 1);
    assert_eq!((s.last_seq(a), s.last_seq(b)), (3, 1), "the latest of each");
    assert_eq!(s.times(a)[1], s.times(b)[0], "both in the same slot");
    assert!(
        s.times(a)[1] - s.times(a)[0] >= I10,
        "one interval at least"
    );
}

/// The ring's copy of a price the subscribe snapshot already carried does
/// not close an open cadence: the next tick still goes at once.
#[test]
fn a_price_the_member_had_leaves_its_cadence_open() {
    let mut s = Sim::new();
    let a = s.add(3, 1, I4);
    s.got[a as usize].0 = 5; // the subscribe snapshot's sequence
    s.offer(3, 5, MS);
    assert!(s.p.is_open(a));
    assert!(s.times(a).is_empty());
    s.offer(3, 6, 2 * MS);
    assert_eq!(s.times(a), [2 * MS]);
    assert!(!s.p.is_open(a));
}

#[test]
fn a_slot_with_nothing_newer_opens_the_cadence() {
    let mut s = Sim::new();
    let a = s.add(3, 1, I10);
    s.offer(3, 1, 0);
    let slot = s.p.next_due_ns().unwrap();
    assert_eq!(s.slots(slot), 0);
    assert!(s.p.is_open(a), "nothing newer: open");
    assert_eq!(s.p.scheduled(), 0, "an open cadence costs no timer");
    assert_eq!(s.p.next_due_ns(), None);
    // A quiet market's next tick goes at once.
    s.offer(3, 2, slot + 333 * MS);
    assert_eq!(s.times(a), [0, slot + 333 * MS]);
}

#[test]
fn a_late_slot_does_not_move_the_cadences_grid() {
    let mut s = Sim::new();
    let a = s.add(3, 1, I10);
    s.offer(3, 1, 0);
    let first = s.p.next_due_ns().unwrap();
    s.offer(3, 2, 1);
    // Served 40 ms late (a long shard turn).
    assert_eq!(s.slots(first + 40 * MS), 1);
    s.offer(3, 3, first + 41 * MS);
    // Slots are served on the wheel's tick at or after them: within a
    // tick of their grid point.
    let near = |t: u64, want: u64| t.abs_diff(want) < TICK_NS;
    let next = s.p.next_due_ns().unwrap();
    assert!(
        near(next, first + I10),
        "its own grid, not 100 ms after the late slot"
    );
    assert_eq!(s.slots(next), 1);
    assert_eq!(s.times(a).len(), 3);
    assert!(near(s.times(a)[2], first + I10));
    // More than one interval late: the first grid point after now.
    s.offer(3, 4, next + 1);
    assert_eq!(s.slots(next + I10 + 150 * MS), 1);
    s.offer(3, 5, next + I10 + 151 * MS);
    assert!(near(s.p.next_due_ns().unwrap(), next + 3 * I10));
}

/// Cadences closed in one turn (the first price after a logon herd) do
/// not share a slot: their phases spread over the interval.
#[test]
fn cadences_closed_together_are_spread_over_the_interval() {
    let mut s = Sim::new();
    let n = 1_000;
    for conn in 0..n {
        s.add(3, conn, I4);
    }
    s.offer(3, 1, 7 * MS);
    s.offer(3, 2, 8 * MS);
    let mut per_tenth = [0usize; 10];
    let start = 7 * MS + I4;
    let mut now = start - TICK_NS;
    while now < start + I4 + 2 * TICK_NS {
        now += TICK_NS;
        let due = s.slots(now);
        let tenth = (now.saturating_sub(start) * 10 / I4).min(9) as usize;
        per_tenth[tenth] += due;
    }
    assert_eq!(per_tenth.iter().sum::<usize>(), n as usize, "{per_tenth:?}");
    for (i, &due) in per_tenth.iter().enumerate() {
        assert!((80..=120).contains(&due), "tenth {i}: {per_tenth:?}");
    }
}

/// Driven on time (four times a tick), whatever the offers: a member's
/// deliveries are one interval apart less at most the tick that rounds
/// its slots, and the key's last price reaches every member.
#[test]
fn every_member_gets_the_last_price_and_never_two_inside_an_interval() {
    let mut s = Sim::new();
    let mut ids = Vec::new();
    for conn in 0..60u32 {
        let interval = if conn % 3 == 0 { I4 } else { I10 };
        for key in 0..1 + conn % 4 {
            ids.push((s.add(key, conn, interval), key, interval));
        }
    }
    let mut seq = [0u64; 4];
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut now = 0;
    let end = 3_000 * MS;
    while now < end {
        now += TICK_NS / 4;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Bursts and quiet stretches: a key ticks in 1 of 50 steps.
        if rng.is_multiple_of(50) {
            let key = (rng >> 8) as usize % 4;
            seq[key] += 1;
            s.offer(key as u32, seq[key], now);
        }
        s.slots(now);
    }
    let last_offer = now;
    while now < last_offer + I4 + TICK_NS {
        now += TICK_NS / 4;
        s.slots(now);
    }
    for &(id, key, interval) in &ids {
        assert_eq!(s.last_seq(id), seq[key as usize], "member {id}");
        for w in s.times(id).windows(2) {
            assert!(w[1] - w[0] + TICK_NS > interval, "member {id}: {w:?}");
        }
    }
}

#[test]
fn leaving_frees_the_cadence_and_the_key() {
    let mut s = Sim::new();
    let a = s.add(3, 1, I10);
    let b = s.add(4, 1, I10);
    let c = s.add(3, 2, I10);
    s.offer(3, 1, 0);
    assert_eq!(s.p.scheduled(), 2);
    s.p.remove(a);
    assert_eq!(s.p.member(b).map(|(k, _)| k), Some(4));
    assert_eq!(s.p.member(c).map(|(k, m)| (k, m.conn)), Some((3, 2)));
    s.p.remove(b);
    assert_eq!(s.p.scheduled(), 1, "conn 1's cadence left the wheel");
    assert_eq!(s.p.cadences(), 1);
    assert!(s.p.key_of(4).is_none(), "key 4 has no members");
    s.p.remove(c);
    assert_eq!((s.p.cadences(), s.p.keys(), s.p.member_total()), (0, 0, 0));
    assert_eq!(s.p.next_due_ns(), None);
    // The arenas are reused, and a reused key starts without a price.
    let d = s.add(5, 9, I4);
    assert!(s.p.is_open(d));
    assert!(!s.p.has_newer(5, (0, 0)));
    assert_eq!(s.p.cadences(), 1);
}

#[test]
fn leaving_an_open_cadence_keeps_the_open_counts() {
    let mut s = Sim::new();
    let a = s.add(3, 1, I10);
    let b = s.add(3, 2, I10);
    let k = s.p.key_of(3).unwrap();
    assert_eq!(s.p.open_members(k), 2);
    s.p.remove(a);
    assert_eq!(s.p.open_members(k), 1);
    s.offer(3, 1, 0);
    assert_eq!(s.p.open_members(k), 0);
    assert_eq!(s.times(b), [0]);
    // Joining a closed cadence: not open.
    let c = s.add(4, 2, I10);
    assert!(!s.p.is_open(c));
    assert_eq!(s.p.open_members(s.p.key_of(4).unwrap()), 0);
}

#[test]
fn has_newer_compares_stream_and_sequence() {
    let mut s = Sim::new();
    s.add(3, 1, I10);
    assert!(!s.p.has_newer(3, (0, 0)), "no price offered yet");
    s.offer(3, 5, 0);
    assert!(s.p.has_newer(3, (7, 4)));
    assert!(!s.p.has_newer(3, (7, 5)));
    assert!(s.p.has_newer(3, (8, 9)), "another stream");
    assert!(!s.p.has_newer(4, (0, 0)), "not a paced key");
}

#[test]
fn a_long_idle_clock_catches_up() {
    let mut s = Sim::new();
    let a = s.add(3, 1, I10);
    s.offer(3, 1, 0);
    s.offer(3, 2, MS);
    // Five wheel revolutions later the slot is still found, once.
    let later = 5 * WHEEL_SLOTS as u64 * TICK_NS;
    assert_eq!(s.slots(later), 1);
    assert_eq!(s.slots(later), 0);
    assert_eq!(s.last_seq(a), 2);
}
