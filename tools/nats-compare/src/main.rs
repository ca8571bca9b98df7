//! `nats-compare [URL] [N]`: allocations per price and publish-to-receive
//! round trips of async-nats, the maintained Rust NATS client, through a
//! nats-server (default `nats://127.0.0.1:4222`, N = 30000 prices).
//!
//! The steady-state window publishes N 76-byte prices (the size of a bus
//! price) from one connection while a second connection receives them, as
//! a core and an edge would, and counts every allocation in the process
//! with a counting allocator. Each price's bytes differ, so each publish
//! needs its own `Bytes`. Then 20,000 round trips (publish, flush, wait
//! for the message) give p50 and p99, the first 2,000 discarded.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const SUBJECT: &str = "cmp.price.EURUSD";

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    let n: u64 = args.next().map_or(30_000, |s| s.parse().expect("N"));
    let publisher = async_nats::connect(&url).await.expect("connect");
    let receiver = async_nats::connect(&url).await.expect("connect");
    let mut sub = receiver.subscribe("cmp.price.>").await.expect("subscribe");
    receiver.flush().await.expect("flush");
    let mut frame = [7u8; 76];
    let mut publish = |i: u64| {
        frame[..8].copy_from_slice(&i.to_le_bytes());
        bytes::Bytes::copy_from_slice(&frame)
    };
    // Warm-up, then the counted window: the receiver drains concurrently.
    for round in 0..2 {
        let a0 = ALLOCS.load(Ordering::Relaxed);
        let recv = tokio::spawn(async move {
            let mut got = 0u64;
            // A busy host can make the server cut the receiver as a slow
            // consumer: the window then ends 5 s after the last message.
            while got < n {
                match tokio::time::timeout(Duration::from_secs(5), sub.next()).await {
                    Ok(Some(_)) => got += 1,
                    _ => break,
                }
            }
            (sub, got)
        });
        for i in 0..n {
            publisher.publish(SUBJECT, publish(i)).await.expect("publish");
        }
        publisher.flush().await.expect("flush");
        let got;
        (sub, got) = recv.await.expect("receiver");
        let allocs = ALLOCS.load(Ordering::Relaxed) - a0;
        if round == 1 {
            let per = allocs as f64 / n as f64;
            println!("async-nats: {allocs} allocations over {n} prices published and {got} received ({per:.2} per price)");
        }
    }
    let mut h = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    for i in 0..20_000u64 {
        let t = Instant::now();
        publisher.publish(SUBJECT, publish(i)).await.expect("publish");
        publisher.flush().await.expect("flush");
        let got = tokio::time::timeout(Duration::from_secs(5), sub.next()).await;
        got.expect("in time").expect("a message");
        if i >= 2_000 {
            h.record(t.elapsed().as_nanos() as u64).expect("record");
        }
    }
    println!(
        "async-nats: publish+flush -> receive p50 {} us, p99 {} us",
        h.value_at_quantile(0.5) / 1000,
        h.value_at_quantile(0.99) / 1000
    );
}
