//! loom models of the engine's two lock-free contracts, run on the
//! production types through `runtime::sync` (build with `--cfg pricewire_loom`):
//!
//! - the seqlock [`PriceTable`]: a reader never returns a torn price and
//!   never goes backwards;
//! - the fence pair between a shard's [`SymbolInterest::hold`] and the
//!   engine's [`publish_top`]: a shard that takes a hold and then reads the
//!   table either finds the concurrent price there or is pushed it.
//!
//! Each model is bounded by [`PREEMPTIONS`] so the set runs in seconds in
//! release mode; the command is in README.md (Tests).

use std::sync::Arc;

use loom::thread;

use super::fanout::{publish_top, ShardPublisher, SymbolInterest};
use super::price_table::PriceTable;
use crate::model::Price;
use crate::runtime::wait::Doorbell;

/// loom's preemption bound for these models: every interleaving with at
/// most this many forced thread switches is explored. At this bound each
/// ordering bug planted while writing them failed its model: the table
/// writer's Release fence dropped (a torn read), the fence in
/// [`publish_top`] dropped (a missed price), the doorbell's ring fence
/// weakened to Release (a deadlock: a lost wake-up).
const PREEMPTIONS: usize = 2;

fn check(f: impl Fn() + Sync + Send + 'static) {
    // `Builder::new` reads LOOM_MAX_PREEMPTIONS: a deeper run by hand.
    let mut model = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        model.preemption_bound = Some(PREEMPTIONS);
    }
    model.check(f);
}

/// Write `k` of symbol 0: every field derives from `k`, so a price made of
/// words from two writes differs from `price(p.seq)`.
fn price(k: u64) -> Price {
    Price {
        bid: k as i64,
        ask: k as i64 + 1,
        bid_size: k * 2,
        ask_size: k * 3,
        seq: k,
        provider_time_ns: k + 10,
        engine_time_ns: k + 20,
        receive_time_ns: k + 30,
        flags: k as u8,
        providers: k as u8,
        ..Price::EMPTY
    }
}

/// One write racing two reads: every interleaving, and every older value
/// each relaxed word load may still return (a second concurrent write
/// multiplies those and takes minutes; one is enough to tear a price).
#[test]
fn loom_seqlock_reader_never_tears_nor_goes_backwards() {
    check(|| {
        let table = Arc::new(PriceTable::new(1, 1));
        table.write(&price(1));
        let writer = {
            let table = table.clone();
            thread::spawn(move || table.write(&price(2)))
        };
        let mut last = 0;
        for _ in 0..2 {
            let p = table.read(0, 0).expect("written before the reader");
            assert_eq!(p, price(p.seq), "torn read");
            assert!(p.seq >= last, "went backwards: {} after {last}", p.seq);
            last = p.seq;
        }
        writer.join().unwrap();
        assert_eq!(table.read(0, 0), Some(price(2)));
    });
}

#[test]
fn loom_a_shard_taking_interest_misses_no_concurrent_price() {
    check(|| {
        let table = Arc::new(PriceTable::new(1, 1));
        let interest = SymbolInterest::none(1);
        let (producer, mut ring) = rtrb::RingBuffer::new(2);
        let publisher = ShardPublisher::new(producer, 1, Doorbell::new());
        let mut shards = vec![publisher.with_interest(interest.clone())];
        let engine = {
            let table = table.clone();
            thread::spawn(move || {
                publish_top(&table, &mut shards, &price(1));
                shards
            })
        };
        // The gateway shard's subscribe: hold the symbol, then snapshot it.
        interest.hold(0);
        let snapshot = table.read(0, 0);
        let _shards = engine.join().unwrap();
        let pushed = ring.pop().ok();
        assert!(
            snapshot.is_some() || pushed.is_some(),
            "the price was neither in the snapshot nor pushed to the shard"
        );
        if let Some(p) = snapshot.or(pushed) {
            assert_eq!(p, price(1));
        }
    });
}
