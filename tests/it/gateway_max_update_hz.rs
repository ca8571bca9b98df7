//! Maximum update frequency (per-connection cadences) end to end (docs/scale-out.md,
//! "Capacity per edge"): the real binary over loopback TCP. A provider
//! bridge pushes 1,000 ticks/s (500 per symbol, every tick a new price) for
//! 2.5 s into the ingest listener; an account limited to 10 Hz and an
//! unlimited one subscribe to both symbols. The limited one receives
//! between 5 and 11 prices per second per symbol; every price after the
//! first that skipped sequences is a PriceSnapshot flagged conflated (a
//! PriceUpdate never skips one); once the feed is quiet its last price per
//! symbol equals the unlimited subscriber's (the last one published). The
//! held and conflated counters show on /metrics.

use crate::util::net;
use crate::util::server;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pricewire::model::price_flags;
use pricewire::wire::{self, OwnedMessage, PriceBody, QuoteEntry};
use server::{Raw, RawRead};

const CONFIG: &str = r#"
# Clear tokens: a loopback test (docs/security.md).
insecure_plain_tokens = true
[[instruments]]
name = "EURUSD"
digits = 5
base_price = "1.08000"
[[instruments]]
name = "GBPUSD"
digits = 5
base_price = "1.27000"
[[providers]]
name = "bridge"
kind = "ingest"
token = "bridge-secret"
[[accounts]]
name = "paced"
token = "p"
tiers = ["raw"]
max_update_hz = 10
[[accounts]]
name = "full"
token = "f"
tiers = ["raw"]
"#;

const BASES: [i64; 2] = [108_000, 127_000];
const TICKS_PER_S: u64 = 1_000;
const FEED_FOR: Duration = Duration::from_millis(2_500);
/// Silence after which a subscriber has had every price.
const QUIET: Duration = Duration::from_millis(700);

fn start(dir: &std::path::Path) -> (net::Server, SocketAddr, SocketAddr, SocketAddr) {
    let path = dir.join("pricewire.toml");
    std::fs::write(&path, CONFIG).unwrap();
    let (addr, feed, ops) = (net::free_addr(), net::free_addr(), net::free_addr());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.args([
        "serve",
        "--no-synthetic",
        "--config",
        path.to_str().unwrap(),
    ])
    .args(["--report-interval-ms", "60000", "--drain-delay-ms", "0"])
    .args(["--listen", &addr.to_string()])
    .args(["--feed-listen", &feed.to_string()])
    .args(["--ops-listen", &ops.to_string()]);
    (net::start_ready(&mut cmd, ops), addr, feed, ops)
}

fn subscriber(addr: SocketAddr, account: &str, token: &str) -> Raw {
    let mut r = Raw::logon(addr, account, token, 30_000);
    r.send_with(|b| {
        wire::encode_subscribe_names(b, 1, wire::TIER_ACCOUNT_DEFAULT, ["EURUSD", "GBPUSD"])
    });
    let answered = r.until(Duration::from_secs(5), |m| {
        matches!(m, OwnedMessage::SubscribeResponse { .. })
    });
    assert!(answered.is_some(), "{account}: no SubscribeResponse");
    r
}

/// One received price: when, whether a snapshot, the body.
type Got = (Instant, bool, PriceBody);

/// Reads prices until the feed is `done` and then `QUIET` passes without one.
fn reader(mut r: Raw, done: std::sync::Arc<std::sync::atomic::AtomicBool>) -> JoinHandle<Vec<Got>> {
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match r.next(QUIET) {
                RawRead::Msg(OwnedMessage::PriceUpdate(b)) => got.push((Instant::now(), false, b)),
                RawRead::Msg(OwnedMessage::PriceSnapshot(s)) => {
                    got.push((Instant::now(), true, s.body))
                }
                RawRead::Msg(_) => {}
                RawRead::Timeout if done.load(std::sync::atomic::Ordering::SeqCst) => break,
                RawRead::Timeout => {}
                RawRead::Closed => panic!("the server closed a subscriber"),
            }
        }
        got
    })
}

/// The bridge: logs on, then 1,000 ticks/s alternating the two symbols,
/// each a new bid and ask, for `FEED_FOR`. Returns when the feed started.
fn feed(addr: SocketAddr) -> (Instant, Raw) {
    let mut r = Raw::connect(addr);
    let logon = wire::ProviderLogon {
        provider_id: 0,
        token: b"bridge-secret",
    };
    r.send_with(|b| wire::encode_provider_logon(b, &logon));
    match r.next(Duration::from_secs(5)) {
        RawRead::Msg(OwnedMessage::LogonAccepted(_)) => {}
        other => panic!("bridge logon: {other:?}"),
    }
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < FEED_FOR {
        let owed = start.elapsed().as_micros() as u64 * TICKS_PER_S / 1_000_000;
        while sent < owed {
            let symbol = (sent % 2) as u16;
            let step = (sent / 2 % 400) as i64;
            let bid = BASES[symbol as usize] + step;
            let entry = QuoteEntry {
                symbol_id: symbol,
                flags: 0,
                bid,
                ask: bid + 10,
                bid_size: 1_000_000,
                ask_size: 1_000_000,
                provider_time_ns: 0,
            };
            r.send_with(|b| wire::encode_provider_quote(b, [entry]));
            sent += 1;
        }
        // The feed's pace (a tick generator), not a wait for the server.
        std::thread::sleep(Duration::from_millis(2));
    }
    (start, r)
}

fn per_symbol(got: &[Got]) -> BTreeMap<u16, Vec<Got>> {
    let mut m: BTreeMap<u16, Vec<Got>> = BTreeMap::new();
    for g in got {
        m.entry(g.2.symbol_id).or_default().push(*g);
    }
    m
}

fn metric(ops: SocketAddr, series: &str) -> f64 {
    let body = net::http_get(ops, "/metrics").expect("/metrics");
    body.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The limited stream of one symbol: its rate over the feed's second
/// half-second onwards, and conflation flags on every skip.
fn check_paced_stream(symbol: u16, prices: &[Got], feed_start: Instant) {
    let window_start = feed_start + Duration::from_millis(500);
    let window_end = feed_start + FEED_FOR;
    let in_window = prices
        .iter()
        .filter(|g| g.0 >= window_start && g.0 < window_end)
        .count();
    let secs = (window_end - window_start).as_secs_f64();
    let rate = in_window as f64 / secs;
    eprintln!(
        "symbol {symbol}: {in_window} prices in {secs:.1} s = {rate:.1}/s, {} in all",
        prices.len()
    );
    assert!(
        (5.0..=11.0).contains(&rate),
        "symbol {symbol}: {in_window} prices in {secs:.1} s = {rate:.1}/s with a 10-Hz limit"
    );
    let mut skipped = 0;
    for w in prices.windows(2) {
        let (prev, (_, snapshot, b)) = (&w[0].2, &w[1]);
        assert!(
            b.seq > prev.seq,
            "symbol {symbol}: seq went {} → {}",
            prev.seq,
            b.seq
        );
        if b.seq > prev.seq + 1 {
            skipped += 1;
            assert!(
                *snapshot && b.flags & price_flags::CONFLATED != 0,
                "symbol {symbol}: seq {} → {} skipped prices without a conflated snapshot",
                prev.seq,
                b.seq
            );
        }
    }
    assert!(
        skipped >= in_window / 2,
        "symbol {symbol}: only {skipped} skips"
    );
}

#[test]
fn a_10_hz_account_gets_at_most_ten_prices_per_second_and_the_last_one() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr, feed_addr, ops) = start(dir.path());
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let paced = reader(subscriber(addr, "paced", "p"), done.clone());
    let full = reader(subscriber(addr, "full", "f"), done.clone());
    let (feed_start, _bridge) = feed(feed_addr);
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (paced, full) = (paced.join().unwrap(), full.join().unwrap());

    let (paced, full) = (per_symbol(&paced), per_symbol(&full));
    assert_eq!(paced.len(), 2, "the limited account saw both symbols");
    for (symbol, prices) in &paced {
        check_paced_stream(*symbol, prices, feed_start);
        let all = &full[symbol];
        assert!(
            all.len() > 10 * prices.len(),
            "symbol {symbol}: the unlimited account got {} prices, the limited {}",
            all.len(),
            prices.len()
        );
        let (last, published) = (prices.last().unwrap().2, all.last().unwrap().2);
        assert_eq!(
            (last.seq, last.bid, last.ask),
            (published.seq, published.bid, published.ask),
            "symbol {symbol}: the limited account's last price is not the last published"
        );
    }
    let held = metric(
        ops,
        "pricewire_paced_prices_total{shard=\"0\",event=\"held\"}",
    ) + metric(
        ops,
        "pricewire_paced_prices_total{shard=\"1\",event=\"held\"}",
    );
    let conflated = metric(
        ops,
        "pricewire_paced_prices_total{shard=\"0\",event=\"conflated\"}",
    ) + metric(
        ops,
        "pricewire_paced_prices_total{shard=\"1\",event=\"conflated\"}",
    );
    eprintln!("held {held}, conflated {conflated}");
    assert!(
        held > 1_000.0 && conflated > 20.0,
        "held {held}, conflated {conflated}"
    );
}

/// A session whose price is held moves to another shard (an operator's
/// spill): the held price is not lost, it arrives at once as a conflated
/// resync snapshot from the new shard, before its 1-s slot, and the SDK
/// takes it as a reset, not a gap. On a host so loaded that the slot comes
/// before the move, the attempt is repeated with a new session (bounded).
#[test]
fn a_held_price_moves_with_its_session_to_another_shard() {
    use pricewire::feed::bridge::Bridge;
    use pricewire::pipeline::PipelineConfig;
    use pricewire::runtime::{Threading, WaitStrategy};

    let pipeline = PipelineConfig {
        shards: 2,
        threading: Threading::Shared,
        ..PipelineConfig::default()
    };
    let svc = server::ingest_service_with(SLOW, pipeline, |g| {
        g.shard_wait = WaitStrategy::Park;
        g.shard0_fill = 2;
    });
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let mut bridge = Bridge::connect(ingest, 0, "bridge-secret", Duration::from_secs(5)).unwrap();
    let moved_first = (0..5).any(|attempt| move_while_held(&svc, &mut bridge, attempt));
    assert!(
        moved_first,
        "in 5 attempts the 1-s slot always came before the move"
    );
    svc.stop();
}

const SLOW: &str = r#"
insecure_plain_tokens = true
[[providers]]
name = "bridge"
kind = "ingest"
token = "bridge-secret"
[[accounts]]
name = "slow"
token = "s"
tiers = ["raw"]
max_update_hz = 1
"#;

fn next_price(c: &mut pricewire::client::Client) -> pricewire::client::PriceEvent {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match c.next_event(Duration::from_millis(50)) {
            Ok(Some(pricewire::client::Event::Price(p))) => return p,
            Ok(_) => {}
            Err(e) => panic!("subscriber: {e}"),
        }
    }
    panic!("no price within 5 s");
}

/// One attempt: a new 1-Hz session on shard 0 gets a price (its interval
/// starts), two more are held, the session is moved. Returns whether the
/// held price came with the move (false: its slot came first, on shard 0).
fn move_while_held(
    svc: &pricewire::service::Service,
    bridge: &mut pricewire::feed::bridge::Bridge,
    attempt: u64,
) -> bool {
    use pricewire::client::{Client, ClientConfig, SeqStatus};
    use pricewire::model::Tick;

    let gw = svc.gateway.as_ref().unwrap();
    let stats = gw.shard_stats.clone();
    let eurusd = svc.config.table.by_name("EURUSD").unwrap().id;
    let quote = |bid: i64| Tick {
        symbol: eurusd,
        bid,
        ask: bid + 8,
        bid_size: 1_000_000,
        ask_size: 1_000_000,
        provider_time_ns: 1_700_000_000_000_000_000,
        ..Tick::EMPTY
    };
    let base = 900_000 + 10 * attempt as i64;
    bridge.send(&[quote(base)]).unwrap();
    let mut c = Client::connect(ClientConfig::new(gw.local_addr, "slow", "s")).unwrap();
    c.subscribe_ids(0, &[eurusd]).unwrap();
    // The quote's price comes as the subscribe snapshot or, if the engine
    // had not priced it yet, as the first price after it.
    while next_price(&mut c).body.bid != base {}
    assert_eq!(stats[0].connections.get(), 1, "attempt {attempt}");

    let (held, released) = (stats[0].paced_held.get(), stats[0].paced_released.get());
    let (moved, resyncs) = (
        stats[0].sessions_moved_out.get(),
        stats[1].resync_snapshots.get(),
    );
    // Three more: the subscribe snapshot does not start the cadence's
    // interval, so the first may go at once if the snapshot carried the
    // quote; the others are held inside the 1-s interval, the later
    // replacing the earlier.
    for k in 1..=3 {
        bridge.send(&[quote(base + k)]).unwrap();
    }
    assert!(server::wait_until(Duration::from_secs(5), || {
        stats[0].paced_held.get() >= held + 2
    }));
    gw.spill(1);
    let p = loop {
        let p = next_price(&mut c);
        if p.body.bid != base + 1 {
            break p;
        }
    };
    assert_eq!(p.body.bid, base + 3, "the latest held price");
    assert!(p.body.flags & price_flags::CONFLATED != 0, "{p:?}");
    assert_eq!(p.seq, SeqStatus::Reset, "a resync, not a gap");
    assert!(server::wait_until(Duration::from_secs(5), || {
        stats[0].sessions_moved_out.get() == moved + 1
    }));
    // Sent by the new shard as the move's resync, or else by shard 0 at
    // the slot (the move came late): one or the other, never both.
    let by_move = stats[1].resync_snapshots.get() - resyncs;
    let by_slot = stats[0].paced_released.get() - released;
    assert_eq!(
        by_move + by_slot,
        1,
        "attempt {attempt}: {by_move} + {by_slot}"
    );
    by_move == 1
}
