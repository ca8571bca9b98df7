//! Gray providers on DEFAULT settings, with injected time: an LP quoting
//! once every 4 s (inside the 5-s quote silence, outside the engine's 2-s
//! max quote age) is gray at its third lapse and stays out of the price
//! instead of flickering in and out of it; once its quotes are fresh for
//! 10 s it is back. The scripted LP and the real aggregator:
//! `tests/util/fix_lp.rs`.

use crate::util::fix_lp;

use fix_lp::{config, Lp, Script, MS};
use pricewire::feed::fix::health::ProviderState;

/// Streams normally until in the price, then slows to one quote per 4 s
/// (an LP turning gray: a stale feed behind it, a throttled session).
fn every_4_s(lapses: u32) -> Lp {
    let mut cfg = config();
    cfg.gray.lapses = lapses;
    let mut lp = Lp::new(cfg, Script::default(), 9);
    lp.until(5_000, |lp| lp.health.is_healthy(0))
        .expect("streaming");
    lp.script.quote_every_ms = 4_000;
    lp.entries = 0;
    lp
}

#[test]
fn a_quote_every_4_s_is_gray_and_out_of_the_price_instead_of_flickering() {
    let mut flicker = every_4_s(0); // the rule off: what the issue saw
    flicker.run_ms(45_000);
    assert!(
        flicker.entries >= 9,
        "in and out of the price: {} times in 45 s",
        flicker.entries
    );
    let mut lp = every_4_s(3);
    let gray_after = lp
        .until(45_000, |lp| lp.s.provider_state() == ProviderState::Gray)
        .expect("gray");
    // Lapses 2 s after each quote: the third is 8 s after the first, at
    // most 4 s + 8 s after the slowdown.
    let since = gray_after / MS;
    assert!((10_000..=12_100).contains(&since), "{since} ms");
    let entries = lp.entries;
    lp.run_ms(45_000 - gray_after / MS);
    assert_eq!(lp.entries, entries, "no entry once gray");
    assert!(entries <= 3, "{entries}");
    assert!(!lp.health.is_healthy(0));
    let st = lp.s.stats().snapshot();
    assert_eq!(st.gray_entries, 1, "{st:?}");
    assert!(st.quote_lapses >= 10, "{st:?}");
    eprintln!(
        "one quote per 4 s: {} entries in 45 s without the rule, {entries} with it (gray {since} ms after the slowdown)",
        flicker.entries
    );
}

#[test]
fn a_gray_provider_is_back_once_its_quotes_stay_fresh() {
    let mut lp = every_4_s(3);
    lp.until(45_000, |lp| lp.s.provider_state() == ProviderState::Gray)
        .expect("gray");
    lp.script.quote_every_ms = 20;
    let back = lp
        .until(30_000, |lp| lp.health.is_healthy(0))
        .expect("streaming again")
        / MS;
    // gray_clear_ms (10 s) after the last lapse, which came at most 4 s
    // before the quotes turned fresh.
    assert!((6_000..=10_200).contains(&back), "{back} ms");
    assert_eq!(lp.s.provider_state(), ProviderState::Streaming);
}

#[test]
fn a_steady_stream_never_lapses() {
    let mut lp = Lp::new(config(), Script::default(), 4);
    lp.run_ms(120_000);
    let st = lp.s.stats().snapshot();
    assert_eq!((st.quote_lapses, st.gray_entries), (0, 0));
    assert_eq!(lp.entries, 1);
}
