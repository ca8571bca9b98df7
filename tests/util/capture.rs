//! Helpers shared by the capture integration tests (included with
//! `#[path = "fixtures/capture_util.rs"] mod util;`).

use std::path::Path;

use pricewire::capture::format::CaptureHeader;
use pricewire::capture::writer::CaptureWriter;
use pricewire::model::{InstrumentTable, Tick, NO_PRICE};

pub fn table() -> InstrumentTable {
    InstrumentTable::default_with_providers(3)
}

/// `n` varied ticks: several symbols and providers, one-sided quotes,
/// crossed quotes, odd sizes and flags, receive times 1 µs apart.
pub fn ticks(n: usize) -> Vec<Tick> {
    (0..n as u64)
        .map(|i| {
            let mut t = Tick {
                bid: 108_000 + (i * 7 % 301) as i64,
                ask: 0,
                bid_size: 1_000_000 * (1 + i % 5),
                ask_size: 1_000_000 * (1 + i % 3),
                provider_time_ns: 1_705_323_600_000_000_000 + i * 1_000 + (i % 4) * 50,
                receive_time_ns: 9_000_000_000 + i * 1_000,
                feed_seq: 1 + i,
                symbol: (i % 5) as u16,
                provider: (i % 3) as u16,
                flags: u32::from(i % 11 == 0),
            };
            t.ask = t.bid + 3 + (i % 9) as i64;
            if i % 97 == 0 {
                t.bid = NO_PRICE;
            }
            if i % 89 == 0 {
                t.ask = t.bid.saturating_sub(2); // crossed, or ask absent when bid is
            }
            t
        })
        .collect()
}

/// Writes `ticks` synchronously into `dir`; returns the segment paths.
pub fn write_capture(
    dir: &Path,
    ticks: &[Tick],
    segment_bytes_max: u64,
) -> Vec<std::path::PathBuf> {
    let header = CaptureHeader::for_table(&table(), "test");
    let mut w = CaptureWriter::create(dir, header, segment_bytes_max, 1 << 16).unwrap();
    for t in ticks {
        w.write(t).unwrap();
    }
    w.finish().unwrap().paths
}
