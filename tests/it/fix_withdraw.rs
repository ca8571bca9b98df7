//! A withdrawn price leaves the aggregate on the message that withdraws
//! it: the sans-IO FIX session (hand-driven time) feeding the real engine
//! aggregator at the same injected time, a second provider quoting beside
//! it. An `X 279=2` delete, a `W` full refresh without a side and a
//! mid-stream `35=Y` each change the very next published price; and over
//! generated update sequences the published price always equals the best
//! of the providers' current books (a model kept by the test).

use crate::util::fix_rig;

use std::sync::Arc;

use fix_rig::{config, Rig};
use pricewire::config::EngineConfig;
use pricewire::engine::{Aggregator, EngineStats, ProviderHealth, TickOutcome};
use pricewire::model::{price_flags, InstrumentTable, Mantissa, Price, Tick, NO_PRICE};
use proptest::prelude::*;

/// LP1, quoting EURUSD beside the FIX session (provider 0).
const LP1: (Mantissa, Mantissa) = (108_105, 108_135);

struct Market {
    r: Rig,
    agg: Aggregator,
    last: Option<Price>,
}

impl Market {
    /// A logged-on session with EUR/USD at 1.08110 / 1.08130 and, when
    /// `with_lp1`, the second provider's quote.
    fn new(with_lp1: bool) -> Market {
        let table = InstrumentTable::default_with_providers(2);
        let eurusd = table.by_name("EURUSD").unwrap().id;
        // The engine's own health: both providers in (the session's
        // probation is the health tests' concern, not this one's).
        let health = ProviderHealth::new(2);
        let engine = EngineConfig::default();
        let agg = Aggregator::new(&table, &engine, health, Arc::new(EngineStats::default()));
        let mut m = Market {
            r: Rig::active_with(config()),
            agg,
            last: None,
        };
        if with_lp1 {
            let t = Tick {
                bid: LP1.0,
                ask: LP1.1,
                bid_size: 1,
                ask_size: 1,
                receive_time_ns: m.r.now,
                symbol: eurusd,
                provider: 1,
                ..Tick::EMPTY
            };
            m.engine(t);
        }
        m.r.snapshot("EUR/USD", "1.08110", "1.08130");
        m.drain();
        m
    }

    fn engine(&mut self, t: Tick) -> TickOutcome {
        let out = self.agg.on_tick(&t, self.r.now);
        if out == TickOutcome::Published {
            self.last = self.agg.output().copied();
        }
        out
    }

    /// Every tick the session produced into the engine, at the same time.
    fn drain(&mut self) -> usize {
        let ticks = self.r.ticks();
        for t in &ticks {
            self.engine(*t);
        }
        ticks.len()
    }

    fn price(&self) -> Price {
        self.last.expect("a price was published")
    }

    /// One X entry per (action, side, price) for EUR/USD.
    fn x(&mut self, entries: &[(u8, u8, &str)]) {
        self.r.peer(b"X", |e| {
            e.uint(268, entries.len() as u64);
            for &(action, side, px) in entries {
                e.uint(279, u64::from(action));
                e.uint(269, u64::from(side));
                e.bytes(55, b"EUR/USD");
                if action != 2 {
                    e.bytes(270, px.as_bytes());
                    e.uint(271, 1_000_000);
                }
            }
        });
        self.drain();
    }
}

#[test]
fn a_deleted_bid_leaves_the_next_published_price() {
    let mut m = Market::new(true);
    assert_eq!((m.price().bid, m.price().ask), (108_110, 108_130));
    m.x(&[(2, 0, "")]); // X 279=2 269=0: the bid is deleted
    let p = m.price();
    assert_eq!((p.bid, p.ask), (LP1.0, 108_130), "LP1's bid at once");
    assert_eq!(p.providers, 2, "the FIX provider's ask stays in");
    // The bid comes back with the next new entry.
    m.x(&[(0, 0, "1.08112")]);
    assert_eq!(m.price().bid, 108_112);
}

#[test]
fn a_single_provider_deleting_its_bid_leaves_a_one_sided_price() {
    let mut m = Market::new(false);
    m.x(&[(2, 0, "")]);
    let p = m.price();
    assert_eq!((p.bid, p.ask), (NO_PRICE, 108_130));
    assert_eq!(p.flags & price_flags::STALE, 0, "the ask is current");
    // Updates of the ask go on while the bid is gone.
    m.x(&[(1, 1, "1.08131")]);
    assert_eq!((m.price().bid, m.price().ask), (NO_PRICE, 108_131));
}

#[test]
fn a_market_data_reject_mid_stream_withdraws_the_symbol() {
    let mut m = Market::new(true);
    let seq = m.price().seq;
    // Our first request for EUR/USD (symbol index 0) was MDReqID 1-0.
    m.r.peer(b"Y", |e| {
        e.bytes(262, b"1-0");
        e.bytes(281, b"0");
        e.bytes(58, b"instrument suspended");
    });
    assert_eq!(m.drain(), 1, "one withdrawal tick, on the 35=Y itself");
    let p = m.price();
    assert_eq!(p.seq, seq + 1, "the next published price");
    assert_eq!((p.bid, p.ask), LP1, "LP1 alone");
    assert_ne!(p.flags & price_flags::SINGLE_PROVIDER, 0);
    // Quotes for the refused symbol are discarded, not delivered.
    m.x(&[(1, 0, "1.08111")]);
    assert_eq!(m.price().seq, seq + 1);
    let s = m.r.s.stats().snapshot();
    assert_eq!((s.withdrawals, s.discarded_rejected_symbol), (1, 1));
}

#[test]
fn a_market_data_reject_of_the_only_provider_flags_the_price_stale() {
    let mut m = Market::new(false);
    m.r.peer(b"Y", |e| e.bytes(262, b"1-0"));
    m.drain();
    assert_ne!(m.price().flags & price_flags::STALE, 0);
}

#[test]
fn a_full_refresh_without_a_side_withdraws_it() {
    let mut m = Market::new(true);
    m.r.peer(b"W", |e| {
        e.bytes(55, b"EUR/USD");
        e.uint(268, 1);
        e.uint(269, 1);
        e.bytes(270, b"1.08129");
    });
    m.drain();
    assert_eq!((m.price().bid, m.price().ask), (LP1.0, 108_129));
    // An empty full refresh withdraws the rest.
    m.r.peer(b"W", |e| {
        e.bytes(55, b"EUR/USD");
        e.uint(268, 0);
    });
    m.drain();
    assert_eq!((m.price().bid, m.price().ask), LP1);
}

/// One market-data message of the FIX provider.
#[derive(Debug, Clone)]
enum Md {
    /// X entries: (action 0/1/2, side 0/1, price offset 0..15 points).
    X(Vec<(u8, u8, i64)>),
    /// W with the sides present.
    W(Option<i64>, Option<i64>),
}

fn md() -> impl Strategy<Value = Md> {
    let entry = (0u8..3, 0u8..2, 0i64..16);
    prop_oneof![
        4 => proptest::collection::vec(entry, 1..4).prop_map(Md::X),
        1 => (proptest::option::of(0i64..16), proptest::option::of(0i64..16))
            .prop_map(|(b, a)| Md::W(b, a)),
    ]
}

/// Bids 1.08100..=1.08115, asks 1.08125..=1.08140: never crossed, with
/// each other or with LP1.
fn px(side: u8, offset: i64) -> Mantissa {
    if side == 0 {
        108_100 + offset
    } else {
        108_125 + offset
    }
}

fn text(m: Mantissa) -> String {
    format!("1.{:05}", m - 100_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// After every message the published price is the best of LP1 and the
    /// FIX provider's book as FIX defines it (W replaces, X 0/1 set, X 2
    /// deletes): a withdrawn side is never in it.
    #[test]
    fn the_published_price_is_always_the_best_of_the_current_books(
        msgs in proptest::collection::vec(md(), 1..60)
    ) {
        let mut m = Market::new(true);
        let mut book = (Some(108_110), Some(108_130));
        for msg in &msgs {
            m.r.now += 5_000_000;
            match msg {
                Md::X(entries) => {
                    let texts: Vec<(u8, u8, String)> = entries
                        .iter()
                        .map(|&(a, s, o)| (a, s, text(px(s, o))))
                        .collect();
                    let refs: Vec<(u8, u8, &str)> =
                        texts.iter().map(|(a, s, t)| (*a, *s, t.as_str())).collect();
                    m.x(&refs);
                    for &(a, s, o) in entries {
                        let v = (a != 2).then(|| px(s, o));
                        if s == 0 { book.0 = v } else { book.1 = v }
                    }
                }
                Md::W(b, a) => {
                    let (b, a) = (b.map(|o| px(0, o)), a.map(|o| px(1, o)));
                    m.r.peer(b"W", |e| {
                        e.bytes(55, b"EUR/USD");
                        e.uint(268, u64::from(b.is_some()) + u64::from(a.is_some()));
                        if let Some(b) = b {
                            e.uint(269, 0);
                            e.bytes(270, text(b).as_bytes());
                        }
                        if let Some(a) = a {
                            e.uint(269, 1);
                            e.bytes(270, text(a).as_bytes());
                        }
                    });
                    m.drain();
                    book = (b, a);
                }
            }
            let want_bid = book.0.map_or(LP1.0, |b| b.max(LP1.0));
            let want_ask = book.1.map_or(LP1.1, |a| a.min(LP1.1));
            let p = m.price();
            prop_assert_eq!((p.bid, p.ask), (want_bid, want_ask), "after {:?}", msg);
        }
    }
}
