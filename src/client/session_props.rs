//! Generated streams through [`Session`]: the invariant a caller counts
//! on — every price of the stream reaches it — holds whatever answers to
//! requests are interleaved and however the bytes are split.
//!
//! Two properties over seeded cases:
//! - **Answers change nothing.** The [`Event::Price`] sequence of a stream
//!   is the same with answers (SnapshotResponse, HistoryResponse,
//!   SymbolDirectory, Reject) mixed in anywhere, carrying any `seq`, as
//!   without them, for any chunking of the bytes — apart from whether a
//!   gap asked for a resync (an answer ends the key's resync episode).
//! - **Complete.** A stream whose `seq` rises by one per key, with
//!   snapshots that resync to a later `seq` (what a correct server sends),
//!   reaches the caller whole: one Price event per frame, in order.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::wire::{PriceKind, RejectReason, PRICE_SLOT_LEN};

const KEYS: u16 = 3;
const STREAM: u64 = 4;

/// One step of a generated server output.
#[derive(Debug, Clone)]
enum Step {
    /// A price of key `key`, `jump` past its last seq (0 = a duplicate).
    Price { key: u16, snapshot: bool, jump: u8 },
    /// An answer whose prices are `ahead` past each key's last seq.
    Answer { kind: u8, ahead: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..KEYS, any::<bool>(), 0u8..4).prop_map(|(key, snapshot, jump)| Step::Price {
            key,
            snapshot,
            jump
        }),
        2 => (0u8..4, 0u8..30).prop_map(|(kind, ahead)| Step::Answer { kind, ahead }),
    ]
}

fn body(symbol_id: u16, seq: u64) -> PriceBody {
    PriceBody {
        symbol_id,
        tier: 1,
        digits: 5,
        seq,
        bid: 100 + seq as i64,
        ask: 110 + seq as i64,
        ..Default::default()
    }
}

/// The bytes of `steps`: the stream's frames, with the answers when
/// `answers`; and the (key, seq) of every price frame, in order.
fn render(steps: &[Step], answers: bool, ascending: bool) -> (Vec<u8>, Vec<(u16, u64)>) {
    let mut last = [0u64; KEYS as usize];
    let (mut out, mut prices) = (Vec::new(), Vec::new());
    let mut buf = vec![0u8; 8192];
    for (i, s) in steps.iter().enumerate() {
        match *s {
            Step::Price {
                key,
                snapshot,
                jump,
            } => {
                let k = usize::from(key);
                // The first price of a key is its subscribe snapshot.
                let snapshot = snapshot || last[k] == 0;
                let jump = if ascending && !snapshot {
                    1
                } else {
                    u64::from(jump)
                };
                let seq = (last[k] + jump.max(u64::from(ascending))).max(1);
                let kind = if snapshot {
                    PriceKind::Snapshot
                } else {
                    PriceKind::Update
                };
                let mut f = [0u8; PRICE_SLOT_LEN];
                let n = wire::encode_price(&mut f, kind, &body(key, seq), STREAM);
                out.extend_from_slice(&f[..n]);
                prices.push((key, seq));
                last[k] = last[k].max(seq);
            }
            Step::Answer { kind, ahead } if answers => {
                let rid = i as u64;
                let n = answer(&mut buf, rid, kind, &last, u64::from(ahead));
                out.extend_from_slice(&buf[..n]);
            }
            Step::Answer { .. } => {}
        }
    }
    (out, prices)
}

fn answer(buf: &mut [u8], rid: u64, kind: u8, last: &[u64], ahead: u64) -> usize {
    let prices = (0..KEYS).map(|k| body(k, last[usize::from(k)] + ahead));
    match kind {
        0 => wire::encode_snapshot_response(buf, rid, prices).unwrap(),
        1 => wire::encode_history_response(buf, rid, 0, 5, std::iter::empty::<wire::HistoryTick>())
            .unwrap(),
        2 => {
            let syms = std::iter::empty::<wire::SymbolInfo>();
            let tiers = std::iter::empty::<wire::TierInfo>();
            wire::encode_symbol_directory(buf, rid, syms, tiers).unwrap()
        }
        _ => {
            let r = wire::Reject {
                request_id: rid,
                ref_template_id: 0,
                reason: RejectReason::OVERLOADED,
                retry_after_ms: 10,
                text: b"busy",
            };
            wire::encode_reject(buf, &r).unwrap()
        }
    }
}

/// `status` without a gap's `resync` flag: an answer ends a key's resync
/// episode (so that its next gap asks again), which is the one thing an
/// answer may change.
fn without_resync(status: SeqStatus) -> SeqStatus {
    match status {
        SeqStatus::Gap { expected, .. } => SeqStatus::Gap {
            expected,
            resync: false,
        },
        other => other,
    }
}

/// Feeds `bytes` in chunks of the given sizes (cycled); returns the
/// Price events' (key, seq, status without the resync flag).
fn run(bytes: &[u8], chunks: &[usize]) -> Vec<(u16, u64, SeqStatus)> {
    let mut s = Session::new(16, Arc::new(ClientStats::default()));
    let mut got = Vec::new();
    let mut at = 0;
    for &c in chunks.iter().cycle() {
        if at == bytes.len() {
            break;
        }
        let end = (at + c).min(bytes.len());
        at += s.feed(&bytes[at..end]);
        while let Some(ev) = s.next_event().expect("framing intact") {
            if let Event::Price(p) = ev {
                got.push((p.body.symbol_id, p.body.seq, without_resync(p.seq)));
            }
            while s.take_resync().is_some() {}
        }
    }
    got
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn answers_change_nothing_in_the_price_stream(
        steps in proptest::collection::vec(step(), 1..120),
        chunks in proptest::collection::vec(1usize..200, 1..8),
    ) {
        let (plain, _) = render(&steps, false, false);
        let (mixed, _) = render(&steps, true, false);
        let whole = run(&plain, &[plain.len().max(1)]);
        prop_assert_eq!(run(&mixed, &chunks), whole.clone());
        prop_assert_eq!(run(&plain, &chunks), whole);
    }

    #[test]
    fn a_rising_stream_reaches_the_caller_whole(
        steps in proptest::collection::vec(step(), 1..120),
        chunks in proptest::collection::vec(1usize..200, 1..8),
    ) {
        let (mixed, sent) = render(&steps, true, true);
        let got = run(&mixed, &chunks);
        let keys: Vec<(u16, u64)> = got.iter().map(|&(k, seq, _)| (k, seq)).collect();
        prop_assert_eq!(keys, sent);
        let gaps = got.iter().filter(|g| matches!(g.2, SeqStatus::Gap { .. })).count();
        prop_assert_eq!(gaps, 0);
    }
}
