//! Gateway fan-out: one price update encoded once and copied into the
//! outbound buffers of 1,000 subscribed connections, through the shard's
//! subscription index. Reported per connection (time / 1,000).

use std::io;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use pricewire::gateway::outbound::{
    OutBuf, HIGH_WATER_BYTES_DEFAULT, LOW_WATER_BYTES_DEFAULT, OUT_CAP_BYTES_DEFAULT,
};
use pricewire::gateway::subs::{SubIndex, Subscriber};
use pricewire::model::Price;
use pricewire::wire::{self, PRICE_FRAME_LEN};

const CONNECTIONS: usize = 1_000;

fn fan_out(c: &mut Criterion) {
    let mut bufs: Vec<OutBuf> = (0..CONNECTIONS)
        .map(|_| {
            OutBuf::new(
                OUT_CAP_BYTES_DEFAULT,
                LOW_WATER_BYTES_DEFAULT,
                HIGH_WATER_BYTES_DEFAULT,
            )
        })
        .collect();
    let mut index = SubIndex::new(25 * 3);
    for conn in 0..CONNECTIONS as u32 {
        index.add(3, Subscriber { conn, slot: 0 });
    }
    let mut frame = [0u8; PRICE_FRAME_LEN];
    let mut price = Price {
        symbol: 1,
        tier: 0,
        bid: 108_120,
        ask: 108_128,
        ..Price::EMPTY
    };
    let mut g = c.benchmark_group("gateway/fan_out_1000_connections");
    g.throughput(Throughput::Elements(CONNECTIONS as u64));
    let mut n = 0u64;
    g.bench_function("encode_once_copy_to_each", |b| {
        b.iter(|| {
            price.seq += 1;
            let len = wire::encode_update(&mut frame, &wire::PriceBody::from_price(&price, 5, 0));
            for s in index.subscribers(3) {
                let out = &mut bufs[s.conn as usize];
                black_box(out.append(&frame[..len]));
            }
            n += 1;
            // Drain as a socket would, every 256 updates (19 KiB each),
            // staying below the low water mark.
            if n.is_multiple_of(256) {
                for out in bufs.iter_mut() {
                    let _ = out.write_to(&mut io::sink());
                }
            }
        })
    });
    g.finish();
}

criterion_group!(benches, fan_out);
criterion_main!(benches);
