//! Aggregation rules, one test per rule.

use std::sync::Arc;

use super::*;
use crate::config::EngineConfig;
use crate::model::instruments::{Instrument, ProviderDef, ProviderKind, Tier};
use crate::model::{price_flags, InstrumentTable, Price, Tick};

const MS: u64 = 1_000_000;

fn table(providers: usize) -> InstrumentTable {
    let inst = |name: &str, digits| Instrument {
        id: 0,
        name: name.into(),
        digits,
        base_price: 100_000,
        spread_points: 10,
    };
    let tier = |name: &str, markup| Tier {
        id: 0,
        name: name.into(),
        markup_points: markup,
        overrides: vec![(1, 50)],
    };
    let providers = (0..providers)
        .map(|i| ProviderDef {
            id: 0,
            name: format!("p{i}"),
            kind: ProviderKind::Synthetic,
            skew_points: 0,
            token: String::new(),
        })
        .collect();
    InstrumentTable::new(
        vec![inst("EURUSD", 5), inst("XAUUSD", 2)],
        vec![tier("raw", 0), tier("std", 3)],
        providers,
    )
}

struct Rig {
    agg: Aggregator,
    health: Arc<ProviderHealth>,
    stats: Arc<EngineStats>,
}

fn rig(providers: usize) -> Rig {
    let t = table(providers);
    let health = ProviderHealth::new(providers);
    let stats = Arc::new(EngineStats::default());
    let cfg = EngineConfig {
        max_quote_age_ms: 1_000,
        spike_bps: 100,
        spike_confirm: 2,
    };
    Rig {
        agg: Aggregator::new(&t, &cfg, health.clone(), stats.clone()),
        health,
        stats,
    }
}

fn tick(symbol: u16, provider: u16, bid: i64, ask: i64, at_ms: u64) -> Tick {
    Tick {
        symbol,
        provider,
        bid,
        ask,
        bid_size: 100,
        ask_size: 100,
        provider_time_ns: at_ms * MS,
        receive_time_ns: at_ms * MS,
        ..Tick::EMPTY
    }
}

impl Rig {
    fn apply(&mut self, t: Tick) -> TickOutcome {
        self.agg.on_tick(&t, t.receive_time_ns)
    }
    fn raw(&self) -> Price {
        *self.agg.output().expect("the last tick published")
    }
}

#[test]
fn best_bid_and_best_ask_across_three_providers() {
    let mut r = rig(3);
    r.apply(tick(0, 0, 100_000, 100_010, 1));
    r.apply(tick(0, 1, 100_002, 100_012, 2));
    assert_eq!(
        r.apply(tick(0, 2, 99_999, 100_008, 3)),
        TickOutcome::Published
    );
    let p = r.raw();
    assert_eq!((p.bid, p.ask), (100_002, 100_008));
    assert_eq!(p.providers, 3);
    assert_eq!(p.flags, 0);
}

#[test]
fn sizes_add_up_at_the_same_best_price() {
    let mut r = rig(2);
    r.apply(tick(0, 0, 100_000, 100_010, 1));
    r.apply(tick(0, 1, 100_000, 100_011, 2));
    let p = r.raw();
    assert_eq!((p.bid_size, p.ask_size), (200, 100));
}

#[test]
fn stale_quotes_are_excluded_and_all_stale_republishes_flagged() {
    let mut r = rig(2);
    r.apply(tick(0, 0, 100_005, 100_010, 0));
    r.apply(tick(0, 1, 100_000, 100_020, 900));
    assert_eq!(r.raw().bid, 100_005);
    // At 1500 ms provider 0's quote is 1500 ms old (> 1000): excluded.
    r.apply(tick(0, 1, 100_001, 100_020, 1_500));
    let p = r.raw();
    assert_eq!((p.bid, p.ask, p.providers), (100_001, 100_020, 1));
    assert_ne!(p.flags & price_flags::SINGLE_PROVIDER, 0);
    // Nothing fresh at 3 s: the sweep republishes the last price as stale.
    let seq = p.seq;
    assert_eq!(r.agg.reevaluate(0, 3_000 * MS), TickOutcome::Published);
    let s = r.raw();
    assert_eq!(s.flags, price_flags::STALE);
    assert_eq!((s.bid, s.seq), (100_001, seq + 1));
    // Only once.
    assert_eq!(r.agg.reevaluate(0, 3_100 * MS), TickOutcome::Unchanged);
    assert_eq!(r.stats.stale.get(), 1);
}

#[test]
fn unhealthy_provider_is_excluded() {
    let mut r = rig(2);
    r.apply(tick(0, 0, 100_005, 100_010, 1));
    r.apply(tick(0, 1, 100_000, 100_020, 2));
    r.health.set(0, false);
    assert_eq!(r.agg.reevaluate(0, 3 * MS), TickOutcome::Published);
    assert_eq!(r.raw().bid, 100_000);
    assert_ne!(r.raw().flags & price_flags::SINGLE_PROVIDER, 0);
}

#[test]
fn spike_filter_rejects_then_confirms_a_real_move() {
    let mut r = rig(2);
    r.apply(tick(0, 0, 100_000, 100_010, 1));
    // 2% jump with a 1% band: rejected twice (spike_confirm = 2) ...
    assert_eq!(r.apply(tick(0, 1, 102_000, 102_010, 2)), TickOutcome::Spike);
    assert_eq!(r.apply(tick(0, 0, 102_000, 102_010, 3)), TickOutcome::Spike);
    assert_eq!(r.stats.spikes_rejected.get(), 2);
    // ... then the third consecutive one is taken as a real move.
    assert_eq!(
        r.apply(tick(0, 1, 102_001, 102_011, 4)),
        TickOutcome::Published
    );
    assert_eq!(r.stats.spikes_confirmed.get(), 1);
    // A normal quote in between resets the streak.
    assert_eq!(r.apply(tick(0, 0, 110_000, 110_010, 5)), TickOutcome::Spike);
    assert_ne!(r.apply(tick(0, 0, 102_002, 102_012, 6)), TickOutcome::Spike);
    assert_eq!(r.apply(tick(0, 0, 110_000, 110_010, 7)), TickOutcome::Spike);
}

#[test]
fn crossed_aggregate_falls_back_to_the_freshest_quote_flagged_indicative() {
    let mut r = rig(2);
    r.apply(tick(0, 0, 100_010, 100_020, 1));
    r.apply(tick(0, 1, 100_000, 100_008, 2)); // its ask is below p0's bid
    let p = r.raw();
    assert_eq!((p.bid, p.ask), (100_000, 100_008));
    assert_ne!(p.flags & price_flags::INDICATIVE, 0);
    assert_eq!(r.stats.crossed.get(), 1);
    // Locked (best bid == best ask) follows the same rule.
    r.apply(tick(0, 0, 100_008, 100_020, 3));
    let p = r.raw();
    assert_eq!((p.bid, p.ask), (100_008, 100_020));
    assert_ne!(p.flags & price_flags::INDICATIVE, 0);
}

#[test]
fn invalid_ticks_are_refused_and_counted() {
    let mut r = rig(2);
    assert_eq!(r.apply(tick(9, 0, 1, 2, 1)), TickOutcome::Invalid);
    assert_eq!(r.apply(tick(0, 7, 1, 2, 1)), TickOutcome::Invalid);
    assert_eq!(r.apply(tick(0, 0, 5, 4, 1)), TickOutcome::Invalid);
    assert_eq!(r.apply(tick(0, 0, 0, 4, 1)), TickOutcome::Invalid);
    assert_eq!(
        r.apply(tick(0, 0, crate::model::NO_PRICE, 4, 1)),
        TickOutcome::Invalid
    );
    assert_eq!(r.stats.invalid.get(), 5);
    // Absurd magnitudes would overflow markups: refused.
    assert_eq!(r.apply(tick(0, 0, 1, i64::MAX, 1)), TickOutcome::Invalid);
    assert_eq!(r.stats.invalid.get(), 6);
    // A locked provider quote is valid.
    assert_eq!(
        r.apply(tick(0, 0, 100_000, 100_000, 1)),
        TickOutcome::Published
    );
}

#[test]
fn tiers_widen_each_side_with_per_symbol_overrides() {
    let mut r = rig(1);
    let markups = crate::model::Markups::new(&table(1));
    r.apply(tick(0, 0, 100_000, 100_010, 1));
    let top = r.raw();
    assert_eq!((top.bid, top.ask, top.tier), (100_000, 100_010, 0));
    let p = markups.apply(&top, 1);
    assert_eq!((p.bid, p.ask, p.tier), (99_997, 100_013, 1));
    r.apply(tick(1, 0, 100_000, 100_010, 2)); // symbol 1 overrides to 50
    let p = markups.apply(&r.raw(), 1);
    assert_eq!((p.bid, p.ask), (99_950, 100_060));
}

#[test]
fn sequence_numbers_are_per_symbol_shared_by_tiers_and_skip_unchanged() {
    let mut r = rig(2);
    r.apply(tick(0, 0, 100_000, 100_010, 1));
    assert_eq!(r.raw().seq, 1);
    r.apply(tick(1, 0, 100_000, 100_010, 1));
    assert_eq!(r.raw().seq, 1, "symbol 1 has its own sequence");
    r.apply(tick(0, 1, 99_990, 100_030, 2)); // worse on both sides: size/providers change
    assert_eq!(r.raw().seq, 2);
    // Re-sending the identical quote changes nothing: no publish, no seq.
    assert_eq!(
        r.apply(tick(0, 1, 99_990, 100_030, 3)),
        TickOutcome::Unchanged
    );
    r.apply(tick(0, 0, 100_001, 100_010, 4));
    assert_eq!(r.raw().seq, 3);
}

#[test]
fn eight_providers_best_of_n() {
    let mut r = rig(8);
    for p in 0..8u16 {
        let off = i64::from(p);
        r.apply(tick(0, p, 100_000 + off, 100_020 - off, 1));
    }
    let p = r.raw();
    assert_eq!((p.bid, p.ask, p.providers), (100_007, 100_013, 8));
}

#[test]
fn the_table_serves_every_tier_from_one_write_per_change() {
    let t = table(2);
    let stats = Arc::new(EngineStats::default());
    let agg = Aggregator::new(
        &t,
        &EngineConfig::default(),
        ProviderHealth::new(2),
        stats.clone(),
    );
    let markups = crate::model::Markups::new(&t);
    let prices = Arc::new(PriceTable::with_markups(markups.clone()));
    let mut stage = EngineStage::new(agg, prices.clone(), Vec::new(), Vec::new(), stats);
    for sym in 0..2u16 {
        stage.process(&tick(sym, 0, 100_000, 100_010, 1), MS);
        let top = *stage.agg.output().expect("published");
        for tier in 0..t.tiers().len() as u8 {
            assert_eq!(
                prices.read(sym, tier),
                Some(markups.apply(&top, tier)),
                "symbol {sym} tier {tier}"
            );
        }
    }
}

fn withdraw(symbol: u16, provider: u16, bid: i64, ask: i64, flags: u32, at_ms: u64) -> Tick {
    Tick {
        flags,
        ..tick(symbol, provider, bid, ask, at_ms)
    }
}

#[test]
fn a_withdrawn_side_leaves_the_next_publish() {
    use crate::model::{tick_flags as tf, NO_PRICE};
    let mut r = rig(2);
    r.apply(tick(0, 0, 100_010, 100_014, 1)); // p0: the best bid
    r.apply(tick(0, 1, 100_000, 100_060, 2));
    // p0 deletes its bid: the very next publish has p1's bid, p0's ask.
    let t = withdraw(0, 0, NO_PRICE, 100_014, tf::WITHDRAWN_BID, 3);
    assert_eq!(r.apply(t), TickOutcome::Published);
    let p = r.agg.output().unwrap();
    assert_eq!((p.bid, p.ask, p.providers), (100_000, 100_014, 2));
    // p1 deletes its bid too: no provider bids, the price is one-sided.
    let t = withdraw(0, 1, NO_PRICE, 100_060, tf::WITHDRAWN_BID, 4);
    assert_eq!(r.apply(t), TickOutcome::Published);
    let p = *r.agg.output().unwrap();
    assert_eq!((p.bid, p.ask, p.bid_size), (NO_PRICE, 100_014, 0));
    assert_eq!(p.flags & price_flags::STALE, 0, "the ask is current");
    // p0 withdraws the symbol: p1's ask alone.
    let t = withdraw(0, 0, NO_PRICE, NO_PRICE, tf::WITHDRAWN, 5);
    assert_eq!(r.apply(t), TickOutcome::Published);
    let p = r.agg.output().unwrap();
    assert_eq!((p.bid, p.ask), (NO_PRICE, 100_060));
    assert_ne!(p.flags & price_flags::SINGLE_PROVIDER, 0);
    // p1 withdraws too: nothing backs the price, the last is flagged stale.
    let t = withdraw(0, 1, NO_PRICE, NO_PRICE, tf::WITHDRAWN, 6);
    assert_eq!(r.apply(t), TickOutcome::Published);
    assert_ne!(r.agg.output().unwrap().flags & price_flags::STALE, 0);
    // A quote brings it back.
    assert_eq!(
        r.apply(tick(0, 0, 100_011, 100_015, 7)),
        TickOutcome::Published
    );
    assert_eq!(r.stats.withdrawals.get(), 4);
}

#[test]
fn a_withdrawal_must_say_what_it_withdraws_and_is_spike_checked() {
    use crate::model::{tick_flags as tf, NO_PRICE};
    let mut r = rig(2);
    r.apply(tick(0, 0, 100_000, 100_010, 1));
    // A flagged side that carries a price, an unflagged one without:
    // refused on this end too.
    let bad = withdraw(0, 0, 100_000, 100_010, tf::WITHDRAWN_BID, 2);
    assert_eq!(r.apply(bad), TickOutcome::Invalid);
    let bad = withdraw(0, 0, NO_PRICE, NO_PRICE, tf::WITHDRAWN_BID, 2);
    assert_eq!(r.apply(bad), TickOutcome::Invalid);
    let bad = withdraw(9, 0, NO_PRICE, NO_PRICE, tf::WITHDRAWN, 2);
    assert_eq!(r.apply(bad), TickOutcome::Invalid);
    // The side that stays moves 10 %: a spike, withdrawn as well.
    let t = withdraw(0, 0, NO_PRICE, 110_000, tf::WITHDRAWN_BID, 3);
    assert_eq!(r.apply(t), TickOutcome::Published);
    assert_ne!(r.agg.output().unwrap().flags & price_flags::STALE, 0);
    assert_eq!(r.stats.spikes_rejected.get(), 1);
    // Markups leave an absent side absent.
    let t = withdraw(0, 0, NO_PRICE, 100_012, tf::WITHDRAWN_BID, 4);
    assert_eq!(r.apply(t), TickOutcome::Published);
    let m = crate::model::Markups::new(&table(2));
    let p = m.apply(r.agg.output().unwrap(), 1);
    assert_eq!((p.bid, p.ask), (NO_PRICE, 100_015));
}

#[test]
fn a_crossed_book_of_one_sided_quotes_is_indicative() {
    use crate::model::{tick_flags as tf, NO_PRICE};
    let mut r = rig(2);
    r.apply(withdraw(0, 0, 100_020, NO_PRICE, tf::WITHDRAWN_ASK, 1));
    r.apply(withdraw(0, 1, NO_PRICE, 100_010, tf::WITHDRAWN_BID, 2));
    let p = r.agg.output().unwrap();
    assert_eq!((p.bid, p.ask), (100_020, 100_010));
    assert_ne!(p.flags & price_flags::INDICATIVE, 0, "crossed: not firm");
    assert_eq!(r.stats.crossed.get(), 1);
}

/// The progress mark: a turn that drains its rings marks the table
/// current as of the turn's start; one that cannot (more than a batch
/// waits) keeps the last such start, so the table reads behind while the
/// engine works through a backlog; an empty turn marks it idle; a
/// finished engine leaves it untracked.
#[test]
fn the_progress_mark_follows_the_turns_that_drained_every_ring() {
    let t = table(1);
    let stats = Arc::new(EngineStats::default());
    let agg = Aggregator::new(
        &t,
        &EngineConfig::default(),
        ProviderHealth::new(1),
        stats.clone(),
    );
    let prices = Arc::new(PriceTable::new(2, 2));
    let (mut feed, ring) = rtrb::RingBuffer::<Tick>::new(4 * ENGINE_BATCH);
    let mut stage = EngineStage::new(agg, prices.clone(), Vec::new(), vec![ring], stats);
    let progress = prices.progress();
    assert_eq!(progress.lag_ns(u64::MAX / 2), 0, "untracked before a turn");
    let mut bid = 100_000;
    let mut push = |n: usize| {
        for _ in 0..n {
            bid += 1;
            feed.push(tick(0, 0, bid, bid + 10, 1)).unwrap();
        }
    };
    push(3);
    assert_eq!(stage.turn(10 * MS), 3);
    assert_eq!(progress.lag_ns(10 * MS), 0);
    assert_eq!(
        progress.lag_ns(25 * MS),
        15 * MS,
        "busy: ages from the turn"
    );
    // A backlog of more than a batch: two turns keep the mark of 10 ms.
    push(2 * ENGINE_BATCH + 1);
    assert_eq!(stage.turn(30 * MS), ENGINE_BATCH);
    assert_eq!(progress.lag_ns(30 * MS), 20 * MS);
    assert_eq!(stage.turn(40 * MS), ENGINE_BATCH);
    assert_eq!(progress.lag_ns(40 * MS), 30 * MS, "still the 10-ms mark");
    assert_eq!(stage.turn(50 * MS), 1);
    assert_eq!(progress.lag_ns(50 * MS), 0, "drained: current as of 50 ms");
    assert_eq!(stage.turn(60 * MS), 0);
    let trust = crate::runtime::progress::IDLE_TRUST_NS;
    assert_eq!(progress.lag_ns(60 * MS + trust), 0, "idle: trusted");
    assert_eq!(progress.lag_ns(61 * MS + trust), MS, "then ages");
    drop(feed);
    assert!(stage.inputs_done());
    stage.finish();
    assert_eq!(progress.lag_ns(u64::MAX / 2), 0, "finished: untracked");
}
