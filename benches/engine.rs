//! Engine step: one tick in → aggregated price out, with 3 and 8
//! providers. `aggregate` is the aggregator alone; `step` adds the price
//! table write and the publish into one shard ring (drained in the loop).

use std::sync::Arc;
use std::time::Instant;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pricewire::config::Config;
use pricewire::engine::{
    Aggregator, EngineStage, EngineStats, PriceTable, ProviderHealth, ShardPublisher,
};
use pricewire::feed::synthetic::{SyntheticConfig, SyntheticFeed};
use pricewire::model::{Markups, Tick};
use pricewire::runtime::Doorbell;

fn ticks(config: &Config, n: usize) -> Vec<Tick> {
    let mut feed = SyntheticFeed::new(
        &config.table,
        SyntheticConfig {
            spike_ppm: 0,
            silence_ppm: 0,
            ..SyntheticConfig::default()
        },
    );
    (0..n).map(|i| feed.next_tick(i as u64)).collect()
}

fn baseline(c: &mut Criterion) {
    // The cost of the measurement itself: one clock read per iteration.
    c.bench_function("baseline/instant_now", |b| {
        b.iter(|| black_box(Instant::now()))
    });
}

fn aggregate(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine/aggregate");
    g.throughput(Throughput::Elements(1));
    for providers in [3usize, 8] {
        let config = Config::builtin(providers);
        let input = ticks(&config, 4096);
        let mut agg = Aggregator::new(
            &config.table,
            &config.engine,
            ProviderHealth::new(providers),
            Arc::new(EngineStats::default()),
        );
        let mut i = 0usize;
        g.bench_with_input(
            BenchmarkId::from_parameter(providers),
            &providers,
            |b, _| {
                b.iter(|| {
                    let t = &input[i & 4095];
                    i += 1;
                    black_box(agg.on_tick(t, t.receive_time_ns))
                })
            },
        );
    }
    g.finish();
}

fn step(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine/step");
    g.throughput(Throughput::Elements(1));
    for providers in [3usize, 8] {
        let config = Config::builtin(providers);
        let input = ticks(&config, 4096);
        let symbols = config.table.len();
        let stats = Arc::new(EngineStats::default());
        let agg = Aggregator::new(
            &config.table,
            &config.engine,
            ProviderHealth::new(providers),
            stats.clone(),
        );
        let (producer, mut consumer) = rtrb::RingBuffer::new(4096);
        let shard = ShardPublisher::new(producer, symbols, Doorbell::new());
        let table = Arc::new(PriceTable::with_markups(Markups::new(&config.table)));
        let mut stage = EngineStage::new(agg, table, vec![shard], Vec::new(), stats);
        let mut i = 0usize;
        g.bench_with_input(
            BenchmarkId::from_parameter(providers),
            &providers,
            |b, _| {
                b.iter(|| {
                    let t = &input[i & 4095];
                    i += 1;
                    let out = stage.process(t, t.receive_time_ns);
                    while consumer.pop().is_ok() {}
                    black_box(out)
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, baseline, aggregate, step);
criterion_main!(benches);
