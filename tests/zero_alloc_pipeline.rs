//! Proof that the hot path (feed → engine → shard ring → shard) allocates
//! nothing in the steady state: warm up, then push at least 1,000,000 ticks
//! through the pipeline under a counting global allocator and assert that
//! not one allocation happened in that window, on any thread. Both
//! threadings, one after the other (the counter is process-wide).

#[path = "util/alloc.rs"]
mod alloc;
#[path = "util/wait.rs"]
mod wait;

use std::time::Duration;

use pricewire::config::Config;
use pricewire::feed::synthetic::{SyntheticConfig, SyntheticFeed};
use pricewire::feed::TickSource;
use pricewire::pipeline::sink::ShardSink;
use pricewire::pipeline::{Pipeline, PipelineConfig};
use pricewire::runtime::{Threading, WaitStrategy};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

const WINDOW_TICKS: u64 = 1_000_000;

#[test]
fn steady_state_pipeline_allocates_nothing() {
    run(Threading::Dedicated);
    // The engine turned by shard 0's sink thread.
    run(Threading::Shared);
}

fn run(threading: Threading) {
    let config = Config::builtin(3);
    let feed = SyntheticFeed::new(
        &config.table,
        SyntheticConfig {
            rate_per_s: 0,
            ..SyntheticConfig::default()
        },
    );
    let sources: Vec<(String, Box<dyn TickSource>)> = vec![("synthetic".into(), Box::new(feed))];
    let pcfg = PipelineConfig {
        feed_ring: 4096,
        shard_ring: 1024, // small, so shard-ring conflation is exercised too
        shards: 2,
        feed_wait: WaitStrategy::SpinYield,
        engine_wait: WaitStrategy::SpinYield,
        threading,
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
    let (symbols, tiers) = (config.table.len(), config.table.tiers().len());
    let mut sink_stats = Vec::new();
    let sinks: Vec<_> = parts
        .shards
        .into_iter()
        .map(|input| {
            let mut sink = ShardSink::new(input, symbols, tiers);
            sink_stats.push(sink.stats.clone());
            std::thread::spawn(move || {
                sink.run(WaitStrategy::SpinPark);
                sink.stats.prices.get()
            })
        })
        .collect();
    let engine = pipeline.handles.engine.clone();
    // Warm up: every symbol and key touched, every ring wrapped.
    assert!(wait::wait_until(Duration::from_secs(60), || engine
        .ticks
        .get()
        >= 200_000));

    let before_allocs = alloc::allocations();
    let before_ticks = engine.ticks.get();
    let reached = wait::wait_until(Duration::from_secs(120), || {
        engine.ticks.get() >= before_ticks + WINDOW_TICKS
    });
    let after_allocs = alloc::allocations();
    let window = engine.ticks.get() - before_ticks;

    pipeline.stop();
    let delivered: u64 = sinks.into_iter().map(|s| s.join().unwrap()).sum();
    assert!(reached, "only {window} ticks in the window");
    assert!(window >= WINDOW_TICKS);
    assert!(delivered > 0);
    assert_eq!(
        after_allocs - before_allocs,
        0,
        "{} allocations while {window} ticks went through the hot path ({threading:?})",
        after_allocs - before_allocs
    );
    for s in &sink_stats {
        assert_eq!(
            s.unexplained_gaps.get(),
            0,
            "a shard saw an unexplained gap"
        );
    }
}
