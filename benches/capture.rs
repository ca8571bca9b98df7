//! Capture throughput: writing (encoder + buffer + file), the recorder
//! thread end to end, reading and replaying a warm capture, and CSV import.
//!
//! Run briefly: `cargo bench --bench capture -- --warm-up-time 1 --measurement-time 2`.
//! Targets: read/replay >= 10M ticks/s, CSV import >= 1M rows/s.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pricewire::capture::format::CaptureHeader;
use pricewire::capture::import::{self, ImportFormat, ImportOptions};
use pricewire::capture::reader::{CaptureReader, ReaderOptions};
use pricewire::capture::writer::CaptureWriter;
use pricewire::capture::{Recorder, RecorderConfig, ReplaySource, ReplaySpeed};
use pricewire::feed::synthetic::{SyntheticConfig, SyntheticFeed};
use pricewire::feed::{SourcePoll, TickSource};
use pricewire::model::{InstrumentTable, Tick};

const TICKS: usize = 200_000;

fn table() -> InstrumentTable {
    InstrumentTable::default_with_providers(3)
}

/// Realistic ticks: the synthetic feed at 1M ticks/s of simulated time.
fn synthetic_ticks(n: usize) -> Vec<Tick> {
    let mut feed = SyntheticFeed::new(&table(), SyntheticConfig::default());
    (0..n as u64)
        .map(|i| {
            let mut t = feed.next_tick(1_000_000_000 + i * 1_000);
            t.receive_time_ns += 20_000 + (i * 7919) % 5_000; // some latency jitter
            t
        })
        .collect()
}

fn write_capture(dir: &std::path::Path, ticks: &[Tick]) -> u64 {
    let header = CaptureHeader::for_table(&table(), "bench");
    let mut w = CaptureWriter::create(dir, header, 1 << 30, 1 << 20).unwrap();
    for t in ticks {
        w.write(t).unwrap();
    }
    w.finish().unwrap().bytes
}

fn bench_write(c: &mut Criterion) {
    let ticks = synthetic_ticks(TICKS);
    let mut g = c.benchmark_group("capture_write");
    g.throughput(Throughput::Elements(TICKS as u64));
    g.sample_size(10);
    g.bench_function("writer_encode_buffer_file", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().unwrap();
                let header = CaptureHeader::for_table(&table(), "bench");
                let mut w = CaptureWriter::create(dir.path(), header, 1 << 30, 1 << 20).unwrap();
                let start = Instant::now();
                for t in &ticks {
                    w.write(t).unwrap();
                }
                w.flush().unwrap();
                total += start.elapsed();
            }
            total
        })
    });
    g.bench_function("recorder_thread_end_to_end", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().unwrap();
                let (handle, tap) =
                    Recorder::spawn(dir.path(), &table(), RecorderConfig::default()).unwrap();
                let (mut producer, _stats) = tap.into_parts();
                let start = Instant::now();
                for t in &ticks {
                    // The bench waits for room; a feed would count the loss.
                    while producer.push(*t).is_err() {
                        std::hint::spin_loop();
                    }
                }
                let totals = handle.stop();
                total += start.elapsed();
                assert_eq!(totals.stats.recorded, TICKS as u64);
            }
            total
        })
    });
    g.finish();
}

fn bench_read(c: &mut Criterion) {
    let ticks = synthetic_ticks(TICKS);
    let dir = tempfile::tempdir().unwrap();
    let bytes = write_capture(dir.path(), &ticks);
    println!(
        "capture of {TICKS} synthetic ticks: {bytes} bytes, {:.1} bytes/tick",
        bytes as f64 / TICKS as f64
    );
    let inputs = vec![dir.path().to_path_buf()];
    let mut g = c.benchmark_group("capture_read");
    g.throughput(Throughput::Elements(TICKS as u64));
    g.sample_size(10);
    g.bench_function("reader_mmap_decode", |b| {
        b.iter(|| {
            let mut r = CaptureReader::open(&inputs, ReaderOptions::default()).unwrap();
            let mut sum = 0u64;
            while let Some(t) = r.next_tick().unwrap() {
                sum = sum.wrapping_add(t.bid as u64);
            }
            sum
        })
    });
    g.bench_function("replay_source_max", |b| {
        let mut buf = vec![Tick::EMPTY; 1024];
        b.iter(|| {
            let mut src =
                ReplaySource::open(&inputs, ReplaySpeed::Max, ReaderOptions::default()).unwrap();
            let mut n = 0;
            while let SourcePoll::Ready(k) = src.poll(1, &mut buf) {
                n += k;
            }
            assert_eq!(n, TICKS);
        })
    });
    g.finish();
}

fn csv_file(dir: &std::path::Path, rows: usize) -> PathBuf {
    let path = dir.join("ticks.csv");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for i in 0..rows {
        let t = 1_705_323_600_000u64 + i as u64;
        let (bid, ask, sym) = match i % 3 {
            0 => (
                format!("1.{:05}", 8_000 + i % 997),
                format!("1.{:05}", 8_010 + i % 997),
                "EURUSD",
            ),
            1 => (
                format!("1.{:05}", 26_000 + i % 991),
                format!("1.{:05}", 26_012 + i % 991),
                "GBPUSD",
            ),
            _ => (
                format!("149.{:03}", i % 983),
                format!("149.{:03}", 10 + i % 983),
                "USDJPY",
            ),
        };
        writeln!(f, "{t},{bid},{ask},{sym}").unwrap();
    }
    f.flush().unwrap();
    path
}

fn bench_import(c: &mut Criterion) {
    let src = tempfile::tempdir().unwrap();
    let file = csv_file(src.path(), TICKS);
    let mut g = c.benchmark_group("capture_import");
    g.throughput(Throughput::Elements(TICKS as u64));
    g.sample_size(10);
    g.bench_function("generic_csv_rows", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let out = tempfile::tempdir().unwrap();
                let mut o = ImportOptions::new(
                    ImportFormat::Csv,
                    vec![file.clone()],
                    out.path().to_path_buf(),
                    table(),
                );
                o.columns = Some("time=0,bid=1,ask=2,symbol=3".parse().unwrap());
                let start = Instant::now();
                let report = import::run(&o).unwrap();
                total += start.elapsed();
                assert_eq!(report.ticks, TICKS as u64);
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, bench_write, bench_read, bench_import);
criterion_main!(benches);
