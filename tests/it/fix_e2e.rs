//! End to end: two FIX simulators feed a running pipeline through one
//! `FixFeed` configured from TOML; one stalls, its breaker opens, and the
//! aggregated price continues from the other, flagged single-provider.

use crate::util::wait;

use std::time::Duration;

use pricewire::config::Config;
use pricewire::feed::fix::sim::{FixSim, SimConfig, SimSymbol};
use pricewire::feed::fix::FixFeed;
use pricewire::feed::TickSource;
use pricewire::model::price_flags;
use pricewire::pipeline::{Pipeline, PipelineConfig};
use pricewire::resilience::BreakerState;
use pricewire::runtime::WaitStrategy;

fn sim(mid: &str) -> FixSim {
    FixSim::start(SimConfig::new(vec![SimSymbol::new("EUR/USD", mid, 5, 8)])).unwrap()
}

fn provider(name: &str, port: u16) -> String {
    format!(
        r#"
        [[providers]]
        name = "{name}"
        kind = "fix"
        [providers.fix]
        host = "127.0.0.1"
        port = {port}
        sender_comp_id = "PRICEWIRE"
        target_comp_id = "{name}"
        symbols = {{ "EUR/USD" = "EURUSD" }}
        connect_ms = 500
        logon_ms = 500
        heartbeat_s = 1
        read_timeout_ms = 1500
        stagger_ms = 20
        reconnect_base_ms = 10
        reconnect_cap_ms = 50
        quote_sample_ms = 1000
        breaker_window_s = 2
        breaker_minimum_calls = 2
        breaker_open_wait_ms = 60000
        "#
    )
}

#[test]
fn a_stalled_provider_is_excluded_and_prices_continue_single_provider() {
    let (a, b) = (sim("1.08120"), sim("1.08130"));
    let toml = format!(
        "[engine]\nmax_quote_age_ms = 600000\n[[instruments]]\nname = \"EURUSD\"\ndigits = 5\n{}{}",
        provider("lpa", a.addr().port()),
        provider("lpb", b.addr().port())
    );
    let config = Config::parse(&toml, 1).unwrap();
    assert_eq!(config.fix.len(), 2);
    let feed = FixFeed::new(&config.fix, pricewire::clock::monotonic_ns(), 5).unwrap();
    let slot = feed.health_slot();
    let stats = feed.stats();
    let sources: Vec<(String, Box<dyn TickSource>)> = vec![("fix".into(), Box::new(feed))];
    let pcfg = PipelineConfig {
        feed_ring: 1024,
        shard_ring: 1024,
        feed_wait: WaitStrategy::SpinPark,
        engine_wait: WaitStrategy::SpinPark,
        ..PipelineConfig::default()
    };
    let parts = Pipeline::start(
        &pcfg,
        &config,
        sources,
        Vec::new(),
        None,
        &Default::default(),
    )
    .unwrap();
    let mut pipeline = parts.pipeline;
    let _shards = parts.shards;
    slot.set(pipeline.handles.health.clone()).unwrap();
    let table = pipeline.handles.table.clone();
    let eurusd = config.table.by_name("EURUSD").unwrap().id;
    let read = || table.read(eurusd, 0);

    let both = wait::wait_until(Duration::from_secs(20), || {
        read().is_some_and(|p| p.providers == 2)
    });
    assert!(both, "both providers aggregated: {:?}", read());

    b.set_stall(true);
    let lpb = stats.by_name("lpb").unwrap().breaker.clone();
    let health = pipeline.handles.health.clone();
    // The feed thread flips health right after the breaker opens.
    let opened = wait::wait_until(Duration::from_secs(30), || {
        lpb.state() == BreakerState::Open && !health.is_healthy(1)
    });
    assert!(opened, "lpb breaker: {:?}", lpb.snapshot());
    assert!(health.is_healthy(0));

    let single = wait::wait_until(Duration::from_secs(20), || {
        read().is_some_and(|p| p.providers == 1 && p.flags & price_flags::SINGLE_PROVIDER != 0)
    });
    let p = read().unwrap();
    assert!(single, "price after the stall: {p:?}");
    assert_eq!(p.flags & price_flags::STALE, 0, "lpa still quotes");
    let lpa = stats.by_name("lpa").unwrap();
    assert_eq!(lpa.breaker.state(), BreakerState::Closed);
    assert!(lpa.session.quotes.get() > 0);
    let registry = pricewire::ops::Registry::new();
    let wall = std::sync::Arc::new(pricewire::feed::fix::WallClock);
    pricewire::feed::fix::metrics::register(&registry, &stats, wall).unwrap();
    let metrics = registry.scrape();
    for line in [
        "pricewire_provider_healthy{provider=\"lpb\"} 0",
        "pricewire_provider_state{provider=\"lpb\",state=\"breaker_open\"} 1",
        "pricewire_provider_healthy{provider=\"lpa\"} 1",
    ] {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }
    assert!(metrics.contains("pricewire_fix_quotes_total{provider=\"lpa\"}"));
    pipeline.stop();
}
