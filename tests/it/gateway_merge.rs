//! Merging over real TCP: a subscriber whose socket takes no more (it
//! stopped reading) is held, in the server's buffer, to each key's
//! latest — not every price since it stopped — and what it reads when
//! it reads again is a valid stream: no update that skips, every skip a
//! snapshot flagged conflated, one price per (symbol, seq).
//!
//! The water marks and the age limit are raised so that conflation (the
//! other answer to a subscriber that does not read) stays out of the way.
//! The merge delay is 0: with the shipped 5 ms a key holds the prices of
//! one delay before they merge, and how many that is depends on how the
//! host schedules the feed and the shard (a stalled shard drains a burst
//! within one delay); the delay itself is tested with injected time
//! (`src/gateway/append_tests.rs`).

use crate::util::server;

use std::collections::HashMap;
use std::time::Duration;

use pricewire::gateway::GatewayConfig;
use pricewire::model::price_flags;
use pricewire::wire::{self, OwnedMessage};
use server::{wait_until, Raw, RawRead, ServerOpts, TestServer};

const T: Duration = Duration::from_secs(20);
/// A PriceSnapshot frame's length (the longer price frame).
const FRAME_MAX: u64 = 84;
/// The synthetic feed's rate, ticks/s over every symbol.
const RATE: u64 = 20_000;

#[test]
fn a_full_socket_holds_each_keys_latest_and_reads_back_a_valid_stream() {
    let server = TestServer::start_with(ServerOpts {
        gateway: GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            low_water_bytes: 8 << 20,
            high_water_bytes: 16 << 20,
            out_cap_bytes: 32 << 20,
            price_age_max_ms: 60_000,
            slow_consumer_ms: 60_000,
            merge_after_us: 0,
            ..Default::default()
        },
        shards: 1,
        rate_per_s: RATE,
        ..Default::default()
    });
    let shard = server.shard_stats()[0].clone();
    let mut slow = Raw::logon(server.addr, "demo", "demo", 30_000);
    let ids: Vec<u16> = (0..server.config.table.len() as u16).collect();
    let tiers = 3u8;
    for tier in 0..tiers {
        let refs = ids.iter().map(|&id| wire::SymbolRef::by_id(id));
        slow.send_with(|b| wire::encode_subscribe(b, u64::from(tier), tier, refs));
    }
    // It reads nothing: its receive buffer, then the server's send
    // queue, fill; later prices wait in the server's buffer and merge.
    assert!(
        wait_until(T, || shard.merged.get() > 10_000),
        "no price merged (merged {}, conflated {})",
        shard.merged.get(),
        shard.conflated.get()
    );
    assert_eq!(shard.conflated.get(), 0, "conflation stayed out of the way");
    // Each key holds at most its waiting update and the snapshot newer
    // prices overwrite, plus control frames and the frame the kernel took
    // part of; without merging it would hold every price since the socket
    // filled (over 10,000 of them, above 800 KB, by now).
    let keys = ids.len() as u64 * u64::from(tiers);
    let bound = keys * 2 * FRAME_MAX + 4096;
    let held = |s: &pricewire::gateway::ShardStats| s.outbound_bytes.get();
    // The gauge is sampled at each 50-ms sweep: once it shows the
    // buffer holding bytes (the socket full), it must be within the bound.
    assert!(wait_until(T, || held(&shard) > 0), "nothing held");
    assert!(
        held(&shard) <= bound,
        "{} bytes held for {keys} keys (bound {bound})",
        held(&shard)
    );

    // It reads again: everything the kernels held, then the merged
    // latest prices. Read until a merged snapshot came and a second more.
    let mut last: HashMap<(u16, u8), (u64, bool)> = HashMap::new();
    let (mut merged_seen, mut prices) = (0u32, 0u32);
    let mut until = None;
    while until.is_none_or(|u: std::time::Instant| std::time::Instant::now() < u) {
        let m = match slow.next(Duration::from_secs(5)) {
            RawRead::Msg(m) => m,
            RawRead::Timeout => panic!("no price for 5 s"),
            RawRead::Closed => panic!("the server closed"),
        };
        let (snapshot, b) = match &m {
            OwnedMessage::PriceUpdate(b) => (false, *b),
            OwnedMessage::PriceSnapshot(s) => (true, s.body),
            _ => continue,
        };
        prices += 1;
        let conflated = b.flags & price_flags::CONFLATED != 0;
        let stale = b.flags & price_flags::STALE != 0;
        let key = (b.symbol_id, b.tier);
        match last.get(&key) {
            None => assert!(snapshot, "{key:?}: the first price is a snapshot"),
            Some(&(seq, _)) if !snapshot => {
                assert_eq!(b.seq, seq + 1, "{key:?}: an update that skips")
            }
            Some(&(seq, was_stale)) if b.seq == seq => {
                assert_ne!(stale, was_stale, "{key:?}: seq {seq} sent twice")
            }
            Some(&(seq, _)) => {
                assert!(b.seq > seq, "{key:?}: backwards");
                assert!(b.seq == seq + 1 || conflated, "{key:?}: a skip not flagged");
            }
        }
        if snapshot && conflated {
            merged_seen += 1;
            until.get_or_insert(std::time::Instant::now() + Duration::from_secs(1));
        }
        last.insert(key, (b.seq, stale));
    }
    assert!(
        merged_seen > 0 && prices > merged_seen,
        "{merged_seen} of {prices}"
    );
}
