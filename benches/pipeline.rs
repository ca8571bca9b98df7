//! Pipeline throughput: the synthetic feed at full speed through
//! feed → engine → one shard ring → a draining shard, on real threads.
//! One criterion element is one tick through the engine; drops are
//! printed after the run (the target is zero).

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pricewire::config::Config;
use pricewire::feed::synthetic::{SyntheticConfig, SyntheticFeed};
use pricewire::feed::TickSource;
use pricewire::pipeline::sink::ShardSink;
use pricewire::pipeline::{Pipeline, PipelineConfig};
use pricewire::runtime::WaitStrategy;

fn throughput(c: &mut Criterion) {
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
        feed_wait: WaitStrategy::SpinYield,
        engine_wait: WaitStrategy::SpinYield,
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
    let sinks: Vec<_> = parts
        .shards
        .into_iter()
        .map(|input| {
            let mut sink = ShardSink::new(input, symbols, tiers);
            std::thread::spawn(move || sink.run(WaitStrategy::SpinYield))
        })
        .collect();
    let engine = pipeline.handles.engine.clone();
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(1));
    g.bench_function("feed_engine_shard_ticks", |b| {
        b.iter_custom(|iters| {
            let start_ticks = engine.ticks.get();
            let start = Instant::now();
            let deadline = start + Duration::from_secs(30);
            // The measuring thread sleeps between checks: on two cores a
            // yielding fourth thread would steal time from the pipeline.
            while engine.ticks.get() < start_ticks + iters && Instant::now() < deadline {
                std::thread::park_timeout(Duration::from_micros(200));
            }
            start.elapsed()
        })
    });
    g.finish();
    let dropped: u64 = pipeline
        .handles
        .feeds
        .iter()
        .map(|(_, f)| f.dropped.get())
        .sum();
    let conflated: u64 = pipeline
        .handles
        .fanout
        .iter()
        .map(|f| f.conflated.get())
        .sum();
    eprintln!(
        "pipeline: {} ticks through the engine, feed drops {dropped}, shard conflations {conflated}",
        engine.ticks.get()
    );
    pipeline.stop();
    for s in sinks {
        s.join().unwrap();
    }
}

criterion_group!(benches, throughput);
criterion_main!(benches);
