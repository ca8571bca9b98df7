//! Encode and decode of the hot message (PriceUpdate), the measurement of
//! the measurement (a black-boxed copy of 76 bytes), and a 20-entry
//! SnapshotResponse for scale. Target: PriceUpdate encode and decode
//! ≤ 50 ns each.
//!
//! Run briefly: `cargo bench --bench wire -- --warm-up-time 1 --measurement-time 2`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pricewire::wire::{self, Message, PriceBody, PRICE_FRAME_LEN};

fn body(seq: u64) -> PriceBody {
    PriceBody {
        symbol_id: 1,
        tier: 0,
        flags: 0,
        digits: 5,
        providers: 3,
        seq,
        bid: 108_123,
        ask: 108_126,
        bid_size: 1_000_000,
        ask_size: 1_000_000,
        provider_time_ns: 1_764_410_400_000_000_000,
        engine_time_ns: 1_764_410_400_000_035_000,
    }
}

fn price_update(c: &mut Criterion) {
    let mut g = c.benchmark_group("price_update");
    g.throughput(Throughput::Elements(1));
    let mut slot = [0u8; PRICE_FRAME_LEN];
    let frame = {
        let mut f = [0u8; PRICE_FRAME_LEN];
        wire::encode_update(&mut f, &body(1));
        f
    };

    g.bench_function("baseline_copy_76_bytes", |b| {
        b.iter(|| {
            slot.copy_from_slice(black_box(&frame));
            black_box(&slot);
        })
    });

    let mut seq = 0u64;
    g.bench_function("encode", |b| {
        b.iter(|| {
            seq += 1;
            let n = wire::encode_update(&mut slot, black_box(&body(seq)));
            black_box(&slot);
            n
        })
    });

    g.bench_function("decode", |b| {
        b.iter(|| match wire::decode(black_box(&frame[..])) {
            Ok(Message::PriceUpdate(p)) => p.seq,
            _ => 0,
        })
    });

    g.bench_function("split_and_decode", |b| {
        b.iter(|| {
            let buf = black_box(&frame[..]);
            match wire::split(buf) {
                Ok(Some(n)) => match wire::decode(&buf[..n]) {
                    Ok(Message::PriceUpdate(p)) => p.seq,
                    _ => 0,
                },
                _ => 0,
            }
        })
    });
    g.finish();
}

fn snapshot_response(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot_response_20");
    g.throughput(Throughput::Elements(20));
    let prices: Vec<PriceBody> = (0..20).map(body).collect();
    let mut buf = vec![0u8; 4096];
    let n = wire::encode_snapshot_response(&mut buf, 1, &prices).expect("fits");
    let frame = buf[..n].to_vec();
    g.bench_function("encode", |b| {
        b.iter(|| wire::encode_snapshot_response(&mut buf, 1, black_box(&prices)))
    });
    g.bench_function("decode_and_walk", |b| {
        b.iter(|| match wire::decode(black_box(&frame)) {
            Ok(Message::SnapshotResponse(r)) => r.prices.map(|p| p.bid).sum::<i64>(),
            _ => 0,
        })
    });
    g.finish();
}

criterion_group!(benches, price_update, snapshot_response);
criterion_main!(benches);
