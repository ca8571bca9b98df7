//! Merging a key's newer price into its unwritten one: what a terminal
//! reads is always the protocol's stream (no update that skips, one price
//! per (symbol, seq), the latest of each key last), however prices, merge
//! delays and partial writes interleave.

use super::*;
use crate::gateway::outbound::tests::Slow;
use crate::gateway::pacer::PACE_NONE;
use crate::wire::{Message, PriceKind, PRICE_SLOT_LEN};
use proptest::prelude::*;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const STREAM: u64 = 5;

fn price(symbol: u16, seq: u64, flags: u8) -> Price {
    let bid = seq as i64 * 10 + i64::from(symbol);
    Price {
        symbol,
        tier: 0,
        seq,
        bid,
        ask: bid + 1,
        stream_id: STREAM,
        flags,
        ..Price::EMPTY
    }
}

/// Encodes `p` as the fan-out does (a snapshot when flagged conflated)
/// and puts it.
fn put(out: &mut OutBuf, sub: &mut Sub, p: &Price, now: u64, stats: &ShardStats) -> Put {
    let kind = if p.flags & price_flags::CONFLATED != 0 {
        PriceKind::Snapshot
    } else {
        PriceKind::Update
    };
    let mut b = [0u8; PRICE_SLOT_LEN];
    let n = wire::encode_model_price(&mut b, kind, p, 5, 0);
    put_price(out, sub, p, &b[..n], now, stats)
}

/// One price as a terminal decodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Got {
    snapshot: bool,
    symbol: u16,
    seq: u64,
    bid: i64,
    conflated: bool,
    stale: bool,
}

/// Every price in `bytes` (whole frames), in order.
fn decode_all(bytes: &[u8]) -> Vec<Got> {
    let mut at = 0;
    let mut v = Vec::new();
    while let Ok(Some(n)) = wire::split(&bytes[at..]) {
        let (snapshot, b) = match wire::decode(&bytes[at..at + n]).expect("a valid frame") {
            Message::PriceUpdate(b) => (false, b),
            Message::PriceSnapshot(s) => (true, s.body),
            _ => {
                at += n;
                continue;
            }
        };
        v.push(Got {
            snapshot,
            symbol: b.symbol_id,
            seq: b.seq,
            bid: b.bid,
            conflated: b.flags & price_flags::CONFLATED != 0,
            stale: b.flags & price_flags::STALE != 0,
        });
        at += n;
    }
    v
}

fn buffer(merge_after_ns: u64) -> OutBuf {
    OutBuf::new(64 * 1024, 16 * 1024, 32 * 1024).with_merge_after(merge_after_ns)
}

fn drain(out: &mut OutBuf) -> Vec<Got> {
    let mut s = Slow {
        quota: usize::MAX,
        got: Vec::new(),
    };
    assert!(out.write_to(&mut s).expect("written"));
    decode_all(&s.got)
}

#[test]
fn a_price_waiting_past_the_delay_is_overwritten_by_the_newer_one() {
    let stats = ShardStats::default();
    let mut out = buffer(MS);
    let mut sub = Sub::new(0, 0, PACE_NONE);
    assert_eq!(
        put(&mut out, &mut sub, &price(0, 1, 0), 0, &stats),
        Put::Appended
    );
    // Within the delay: appended as it came.
    assert_eq!(
        put(&mut out, &mut sub, &price(0, 2, 0), 500 * US, &stats),
        Put::Appended
    );
    // Past it, behind an update: a snapshot newer prices can overwrite.
    assert_eq!(
        put(&mut out, &mut sub, &price(0, 3, 0), 1_500 * US, &stats),
        Put::Appended
    );
    assert_eq!(
        put(&mut out, &mut sub, &price(0, 4, 0), 1_600 * US, &stats),
        Put::Merged
    );
    assert_eq!(
        put(&mut out, &mut sub, &price(0, 5, 0), 1_700 * US, &stats),
        Put::Merged
    );
    assert_eq!((stats.merged.get(), stats.prices_out.get()), (2, 3));
    let got = drain(&mut out);
    let seqs: Vec<_> = got
        .iter()
        .map(|g| (g.seq, g.snapshot, g.conflated))
        .collect();
    assert_eq!(
        seqs,
        vec![(1, true, false), (2, false, false), (5, true, true)],
        "the first price, the one within the delay, the latest in place of 3 and 4"
    );
    assert_eq!(got[2].bid, 50, "the latest price's own body");
    // Written: the next price starts afresh, as an update.
    assert_eq!(
        put(&mut out, &mut sub, &price(0, 6, 0), 5 * MS, &stats),
        Put::Appended
    );
    assert!(!drain(&mut out)[0].snapshot, "an update");
}

#[test]
fn a_frame_the_kernel_took_part_of_is_never_rewritten() {
    let stats = ShardStats::default();
    let mut out = buffer(0);
    let mut sub = Sub::new(0, 0, PACE_NONE);
    put(&mut out, &mut sub, &price(0, 1, 0), 0, &stats);
    let mut s = Slow {
        quota: 10,
        got: Vec::new(),
    };
    assert!(!out.write_to(&mut s).expect("would block"));
    // Nothing of the key's unwritten: appended as it came; then past the
    // delay (0) behind an update: a snapshot to merge into.
    assert_eq!(
        put(&mut out, &mut sub, &price(0, 2, 0), MS, &stats),
        Put::Appended
    );
    assert_eq!(
        put(&mut out, &mut sub, &price(0, 3, 0), MS, &stats),
        Put::Appended
    );
    assert_eq!(
        put(&mut out, &mut sub, &price(0, 4, 0), MS, &stats),
        Put::Merged
    );
    s.quota = usize::MAX;
    assert!(out.write_to(&mut s).expect("written"));
    let got: Vec<_> = decode_all(&s.got).iter().map(|g| g.seq).collect();
    assert_eq!(
        got,
        vec![1, 2, 4],
        "the frame in the kernel finished as it was"
    );
}

#[test]
fn a_restatement_is_appended_never_merged() {
    let stats = ShardStats::default();
    let mut out = buffer(0);
    let mut sub = Sub::new(0, 0, PACE_NONE);
    put(&mut out, &mut sub, &price(0, 1, 0), 0, &stats);
    assert_eq!(
        put(&mut out, &mut sub, &price(0, 2, 0), 0, &stats),
        Put::Merged
    );
    let stale = price_flags::STALE | price_flags::CONFLATED;
    assert_eq!(
        put(&mut out, &mut sub, &price(0, 2, stale), 0, &stats),
        Put::Appended
    );
    assert_eq!(
        put(
            &mut out,
            &mut sub,
            &price(0, 2, price_flags::CONFLATED),
            0,
            &stats
        ),
        Put::Appended
    );
    let got: Vec<_> = drain(&mut out)
        .iter()
        .map(|g| (g.seq, g.stale, g.conflated))
        .collect();
    assert_eq!(
        got,
        vec![(2, false, true), (2, true, true), (2, false, true)],
        "each turn of the flag, in order"
    );
}

#[test]
fn with_no_delay_reached_every_price_goes_out_as_it_came() {
    let stats = ShardStats::default();
    let mut out = buffer(u64::MAX);
    let mut sub = Sub::new(0, 0, PACE_NONE);
    for seq in 1..=50 {
        assert_eq!(
            put(&mut out, &mut sub, &price(0, seq, 0), seq * MS, &stats),
            Put::Appended
        );
    }
    let got = drain(&mut out);
    assert_eq!(got.len(), 50);
    assert!(got[1..].iter().all(|g| !g.snapshot && !g.conflated));
}

/// What a terminal checks of each key's prices (protocol.md §5): an
/// update follows the last price by one; a snapshot that skips is flagged
/// conflated; a sequence repeats only as a snapshot (a restatement); each
/// frame's body is its own (symbol, seq)'s price.
fn check_stream(got: &[Got], keys: usize) -> Result<Vec<Option<Got>>, TestCaseError> {
    let mut last: Vec<Option<Got>> = vec![None; keys];
    for g in got {
        prop_assert_eq!(
            g.bid,
            g.seq as i64 * 10 + i64::from(g.symbol),
            "one price per seq"
        );
        let prev = last[g.symbol as usize];
        match prev {
            None => prop_assert!(g.snapshot, "a key's first price is a snapshot"),
            Some(p) if !g.snapshot => prop_assert_eq!(g.seq, p.seq + 1, "an update that skips"),
            Some(p) if g.seq == p.seq => {
                prop_assert!(g.stale != p.stale, "a repeat that restates nothing")
            }
            Some(p) => {
                prop_assert!(g.seq > p.seq, "backwards");
                prop_assert!(g.seq == p.seq + 1 || g.conflated, "a skip not flagged");
            }
        }
        last[g.symbol as usize] = Some(*g);
    }
    Ok(last)
}

proptest! {
    /// Whatever prices, restatements, merge delays, partial writes and
    /// control frames interleave, the terminal's stream passes its checks
    /// and ends with the latest price of every key.
    #[test]
    fn a_terminal_reads_a_valid_stream_ending_at_each_keys_latest(
        delay_us in prop_oneof![Just(0u64), 1u64..3_000, Just(u64::MAX / US)],
        ops in proptest::collection::vec((0u8..9, 0u16..3, 1u64..4, 0u64..1_500, 0usize..400), 1..150)
    ) {
        const KEYS: usize = 3;
        let stats = ShardStats::default();
        let mut out = buffer(delay_us.saturating_mul(US));
        let mut subs: Vec<Sub> = (0..KEYS as u32).map(|k| Sub::new(k, 0, PACE_NONE)).collect();
        // The last price put per key, as the terminal must end with it.
        let mut put_last: Vec<Option<Price>> = vec![None; KEYS];
        let mut sock = Slow { quota: 0, got: Vec::new() };
        let mut now = 0u64;
        for (op, key, step, dt, quota) in ops {
            now += dt * US;
            let k = key as usize;
            let prev = put_last[k];
            let p = match (op, prev) {
                (0..=3, _) => price(key, prev.map_or(0, |p| p.seq) + step, 0),
                // The ring gate's or a resync's latest: a conflated snapshot.
                (4, _) => price(key, prev.map_or(0, |p| p.seq) + step, price_flags::CONFLATED),
                // A restatement: the same sequence, the stale flag turned.
                (5, Some(q)) => {
                    let stale = if q.flags & price_flags::STALE != 0 { 0 } else { price_flags::STALE };
                    price(key, q.seq, stale | price_flags::CONFLATED)
                }
                (6, _) => {
                    sock.quota = quota;
                    out.write_to(&mut sock).expect("no error");
                    continue;
                }
                (7, _) => {
                    let mut hb = [0u8; 64];
                    let n = wire::encode_heartbeat(&mut hb).expect("fits");
                    prop_assert_eq!(out.append(&hb[..n]), crate::gateway::outbound::Append::Appended);
                    continue;
                }
                _ => continue,
            };
            prop_assert_ne!(put(&mut out, &mut subs[k], &p, now, &stats), Put::Overflow);
            put_last[k] = Some(p);
        }
        sock.quota = usize::MAX;
        prop_assert!(out.write_to(&mut sock).expect("written"));
        let got = decode_all(&sock.got);
        let last = check_stream(&got, KEYS)?;
        for k in 0..KEYS {
            let want = put_last[k].map(|p| (p.seq, p.flags & price_flags::STALE != 0));
            prop_assert_eq!(last[k].map(|g| (g.seq, g.stale)), want, "key {} ends at its latest", k);
        }
        let frames = got.len() as u64;
        prop_assert_eq!(stats.prices_out.get(), frames, "one frame per price appended");
    }
}
