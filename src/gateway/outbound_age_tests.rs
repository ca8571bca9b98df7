//! The outbound buffer's age rules: queued bytes older than the limit
//! conflate, and price frames that waited past it are dropped whole,
//! never a byte already handed to the kernel.

use super::tests::Slow;
use super::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;
/// Test frames: SOFH, template (a price or a heartbeat), id in the
/// body's sequence field.
const LEN: usize = 30;

fn frame(template: u16, id: u32) -> [u8; LEN] {
    let mut f = [0u8; LEN];
    f[..4].copy_from_slice(&(LEN as u32).to_be_bytes());
    f[8..10].copy_from_slice(&template.to_le_bytes());
    f[20..28].copy_from_slice(&u64::from(id).to_le_bytes());
    f
}

const P: u16 = crate::wire::template::PRICE_UPDATE;
const C: u16 = crate::wire::template::HEARTBEAT;

fn id_of(f: &[u8]) -> u32 {
    u32::from_le_bytes([f[20], f[21], f[22], f[23]])
}

fn price(b: &mut OutBuf, id: u32, now: u64) -> Append {
    b.append_price_with(LEN, now, |t| {
        t[..LEN].copy_from_slice(&frame(P, id));
        LEN
    })
}

/// Drops stale prices the shard's way; returns the ids dropped.
fn drop_stale(b: &mut OutBuf, now: u64) -> Vec<u32> {
    let mut ids = Vec::new();
    b.drop_stale_prices(now, |run, written| {
        super::super::fresh::compact_run(run, written, |f| ids.push(id_of(f)))
    });
    ids
}

#[test]
fn a_run_past_the_limit_loses_its_prices_and_keeps_its_control_frames() {
    let mut b = OutBuf::new(1024, 64, 512).with_age_max(10 * MS);
    assert_eq!(b.append(&frame(C, 0)), Append::Appended);
    price(&mut b, 1, 0);
    b.append(&frame(C, 1));
    price(&mut b, 2, 5 * MS);
    assert!(
        drop_stale(&mut b, 10 * MS).is_empty(),
        "at the limit: fresh"
    );
    assert_eq!(drop_stale(&mut b, 10 * MS + 1), vec![1, 2], "past it");
    let mut want = frame(C, 0).to_vec();
    want.extend(frame(C, 1));
    let mut w = Slow {
        quota: usize::MAX,
        got: Vec::new(),
    };
    assert!(b.write_to(&mut w).expect("drained"));
    assert_eq!(w.got, want, "the control frames, in order");
}

#[test]
fn the_frame_the_kernel_took_part_of_is_finished() {
    let mut b = OutBuf::new(1024, 64, 512).with_age_max(10 * MS);
    price(&mut b, 1, 0);
    price(&mut b, 2, 0);
    let mut w = Slow {
        quota: 3,
        got: Vec::new(),
    };
    assert!(!b.write_to(&mut w).expect("would block"));
    assert_eq!(drop_stale(&mut b, 100 * MS), vec![2]);
    assert_eq!(b.len(), LEN - 3, "the rest of price 1");
    // A price after that starts a run of its own once the buffer empties.
    w.quota = usize::MAX;
    assert!(b.write_to(&mut w).expect("drained"));
    price(&mut b, 3, 100 * MS);
    assert!(drop_stale(&mut b, 110 * MS).is_empty());
}

#[test]
fn an_old_kernel_queue_conflates_whatever_its_bytes_and_drains_by_age() {
    let mut b = OutBuf::new(1024, 64, 512).with_age_max(10 * MS);
    b.on_written(10, 0);
    b.on_look(10, 10);
    assert!(!b.update_flow(10 * MS), "10 bytes, 10 ms: still fresh");
    assert!(!b.is_conflating());
    assert!(!b.update_flow(10 * MS + 1));
    assert!(b.is_conflating(), "10 bytes older than the limit");
    assert!(
        b.above_high_for_ns(20 * MS).is_some(),
        "behind while it waits"
    );
    // Sent, not yet acknowledged: in flight is not behind.
    b.on_look(10, 0);
    assert!(b.update_flow(20 * MS), "drained: the resync is due");
    // Bytes in the kernel count against the marks.
    b.on_written(600, 30 * MS);
    b.on_look(600, 0);
    assert!(!b.update_flow(30 * MS));
    assert!(
        b.is_conflating(),
        "600 kernel bytes are above the high mark"
    );
}

proptest! {
    /// Whatever the appends, writes and times, when every write is
    /// preceded by `drop_stale_prices` (as the shard does): a price frame
    /// whose first byte goes to the kernel at `t` was appended at
    /// `t - limit` or later — unless the kernel took part of it before —
    /// frames arrive whole and in order, and no control frame is dropped.
    #[test]
    fn no_price_is_handed_over_older_than_the_limit(
        ops in proptest::collection::vec((0u8..4, 0u64..8, 0usize..100), 1..200)
    ) {
        let limit = 10 * MS;
        let mut b = OutBuf::new(512, 64, 256).with_age_max(limit);
        let mut w = Slow { quota: 0, got: Vec::new() };
        let mut appended_at = Vec::new();
        let mut first_byte_at = Vec::new();
        let (mut now, mut next_id) = (0u64, 0u32);
        let mut controls = 0u32;
        for (op, dt, n) in ops {
            now += dt * MS;
            match op {
                0 | 1 => {
                    if price(&mut b, next_id, now) == Append::Appended {
                        appended_at.push(now);
                        next_id += 1;
                    }
                }
                2 => {
                    if b.append(&frame(C, controls)) == Append::Appended {
                        controls += 1;
                    }
                }
                _ => {
                    drop_stale(&mut b, now);
                    let before = w.got.len();
                    w.quota = n;
                    b.write_to(&mut w).expect("no error");
                    // Frames whose first byte this write took.
                    for at in (before.div_ceil(LEN) * LEN..w.got.len()).step_by(LEN) {
                        first_byte_at.push((at, now));
                    }
                }
            }
        }
        let mut last_price = None;
        let mut seen_controls = 0;
        for (at, t) in first_byte_at {
            let Some(f) = w.got.get(at..at + LEN) else {
                continue; // the last frame, not all of it taken yet
            };
            let id = id_of(f);
            match u16::from_le_bytes([f[8], f[9]]) {
                P => {
                    prop_assert!(t <= appended_at[id as usize] + limit, "price {id} too old");
                    prop_assert!(last_price.is_none_or(|l| id > l), "in order");
                    last_price = Some(id);
                }
                C => {
                    prop_assert_eq!(id, seen_controls, "controls all there, in order");
                    seen_controls += 1;
                }
                t => prop_assert!(false, "not a whole frame: template {t}"),
            }
        }
    }
}

fn price_mark(b: &mut OutBuf, id: u32, now: u64) -> Option<u64> {
    b.append_price_mark(LEN, (now, now), |t| {
        t[..LEN].copy_from_slice(&frame(P, id));
        LEN
    })
}

proptest! {
    /// Whatever the appends, partial writes, compactions, drops and
    /// clears, a frame's mark names that frame while no byte of it went
    /// to the kernel and it was not dropped (the bytes there are its
    /// own), and nothing once it did or was: a merge can only ever
    /// rewrite the frame it was meant for, and only before any of it was
    /// handed over.
    #[test]
    fn a_mark_names_its_frame_while_unwritten_and_nothing_after(
        ops in proptest::collection::vec((0u8..6, 0usize..80), 1..200)
    ) {
        let mut b = OutBuf::new(256, 32, 128).with_age_max(u64::MAX - 1);
        let mut w = Slow { quota: 0, got: Vec::new() };
        // The buffer as a model: (price id or none, bytes of it written)
        // per frame not yet wholly written, oldest first.
        let mut model: Vec<(Option<u32>, usize)> = Vec::new();
        let mut marks: Vec<(u64, u32)> = Vec::new();
        let mut next_id = 0u32;
        for (op, n) in ops {
            match op {
                0 | 1 => {
                    if let Some(m) = price_mark(&mut b, next_id, 0) {
                        marks.push((m, next_id));
                        model.push((Some(next_id), 0));
                        next_id += 1;
                    }
                }
                2 => {
                    if b.append(&frame(C, 0)) == Append::Appended {
                        model.push((None, 0));
                    }
                }
                3 => {
                    let before = w.got.len();
                    w.quota = n;
                    b.write_to(&mut w).expect("no error");
                    let mut took = w.got.len() - before;
                    while took > 0 {
                        let f = &mut model[0];
                        let k = took.min(LEN - f.1);
                        f.1 += k;
                        took -= k;
                        if f.1 == LEN {
                            model.remove(0);
                        }
                    }
                }
                4 => {
                    drop_stale(&mut b, u64::MAX);
                    model.retain(|f| f.0.is_none() || f.1 > 0);
                }
                _ => {
                    if n < 8 {
                        b.clear();
                        model.clear();
                    }
                }
            }
            for &(m, id) in &marks {
                let named = model.iter().any(|f| f.0 == Some(id) && f.1 == 0);
                match b.unwritten(m) {
                    Some(at) => {
                        prop_assert!(named, "price {id} named after it went or was dropped");
                        let f = b.frame_mut(at, LEN).expect("a whole frame");
                        prop_assert_eq!(id_of(f), id, "the mark names another frame");
                    }
                    None => prop_assert!(!named, "price {id} unwritten but not named"),
                }
            }
        }
    }
}

#[test]
fn a_writes_handoff_age_is_its_oldest_price_since_the_buffer_was_empty() {
    let mut b = OutBuf::new(1024, 64, 512);
    assert_eq!(b.handoff_age_ns(5 * MS), None, "no price");
    b.append_price_mark(LEN, (2 * MS, MS), |t| {
        t[..LEN].copy_from_slice(&frame(P, 1));
        LEN
    });
    b.append_price_mark(LEN, (3 * MS, 3 * MS), |t| {
        t[..LEN].copy_from_slice(&frame(P, 2));
        LEN
    });
    assert_eq!(b.handoff_age_ns(5 * MS), Some(4 * MS), "received at 1 ms");
    // Part written: still the run's oldest (never understated).
    let mut w = Slow {
        quota: LEN + 1,
        got: Vec::new(),
    };
    assert!(!b.write_to(&mut w).expect("would block"));
    assert_eq!(b.handoff_age_ns(5 * MS), Some(4 * MS));
    w.quota = usize::MAX;
    assert!(b.write_to(&mut w).expect("drained"));
    assert_eq!(b.handoff_age_ns(5 * MS), None, "emptied: no age");
    price(&mut b, 3, 6 * MS);
    assert_eq!(b.handoff_age_ns(7 * MS), Some(MS), "a new run");
}
