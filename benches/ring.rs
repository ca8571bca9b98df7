//! Ring hop latency between two threads (pinned to cores 0 and 1 when the
//! machine has two): a ping-pong over two rtrb rings of `Tick`; one hop is
//! half a round trip. Also the uncontended push+pop cost on one thread.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use pricewire::model::Tick;
use pricewire::runtime::affinity::available_cores;

/// Cores read once, before anything is pinned: a thread spawned from a
/// pinned thread inherits its mask, so asking again later would see one
/// core and put both ends of the hop on it.
fn cores() -> &'static [usize] {
    static CORES: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    CORES.get_or_init(available_cores)
}

fn pin(i: usize) {
    let cores = cores();
    if cores.len() >= 2 {
        core_affinity::set_for_current(core_affinity::CoreId { id: cores[i] });
    }
}

fn same_thread(c: &mut Criterion) {
    let (mut p, mut q) = rtrb::RingBuffer::<Tick>::new(1024);
    c.bench_function("ring/push_pop_same_thread", |b| {
        b.iter(|| {
            p.push(black_box(Tick::EMPTY)).unwrap();
            black_box(q.pop().unwrap())
        })
    });
}

fn hop(c: &mut Criterion) {
    let _ = cores();
    c.bench_function("ring/hop_between_threads", |b| {
        b.iter_custom(|iters| {
            let (mut ping_tx, mut ping_rx) = rtrb::RingBuffer::<Tick>::new(64);
            let (mut pong_tx, mut pong_rx) = rtrb::RingBuffer::<Tick>::new(64);
            let barrier = Arc::new(Barrier::new(2));
            let b2 = barrier.clone();
            let echo = std::thread::spawn(move || {
                pin(1);
                b2.wait();
                for _ in 0..iters {
                    let t = loop {
                        if let Ok(t) = ping_rx.pop() {
                            break t;
                        }
                        std::hint::spin_loop();
                    };
                    while pong_tx.push(t).is_err() {}
                }
            });
            pin(0);
            barrier.wait();
            let start = Instant::now();
            for i in 0..iters {
                let mut t = Tick::EMPTY;
                t.feed_seq = i;
                ping_tx.push(t).unwrap();
                loop {
                    if pong_rx.pop().is_ok() {
                        break;
                    }
                    std::hint::spin_loop();
                }
            }
            let rtt: Duration = start.elapsed();
            echo.join().unwrap();
            rtt / 2
        })
    });
}

criterion_group!(benches, same_thread, hop);
criterion_main!(benches);
