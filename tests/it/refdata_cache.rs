//! The reference-data cache and refresher on a `ManualClock` with a fake
//! source: XFetch early refresh, TTL jitter, stale-while-error, miss
//! retry-after, bounds, and configuration checks. No network, no sleeps.

use std::collections::BTreeMap;
use std::sync::Arc;

use pricewire::clock::{Clock, ManualClock, NS_PER_MS};
use pricewire::config::{Account, Config};
use pricewire::refdata::{
    AccountFetch, CacheConfig, FetchError, FetchResult, Lookup, RedisConfig, RedisError, RefData,
    RefDataConfig, RefDataError, Refresher,
};
use pricewire::resilience::ConfigError;

/// Every name is an account; `fail` makes every fetch time out.
struct Fake {
    delta_ns: u64,
    fail: bool,
    fetches: Vec<(String, u64)>,
}

impl Fake {
    fn new(delta_ms: u64) -> Fake {
        Fake {
            delta_ns: delta_ms * NS_PER_MS,
            fail: false,
            fetches: Vec::new(),
        }
    }
}

fn account(name: &str) -> Account {
    Account {
        name: name.into(),
        token: "t".into(),
        symbols: None,
        tiers: vec![0],
        max_sessions: 1,
        critical: false,
        max_update_hz: None,
    }
}

impl AccountFetch for Fake {
    fn fetch(&mut self, name: &str, now_ns: u64) -> (FetchResult, u64) {
        self.fetches.push((name.to_string(), now_ns));
        if self.fail {
            return (Err(FetchError::Redis(RedisError::Timeout)), self.delta_ns);
        }
        let found = if name.starts_with("ghost") {
            None
        } else {
            Some(account(name))
        };
        (Ok(found), self.delta_ns)
    }
}

const T0: u64 = 1_000 * NS_PER_MS;

fn start(cfg: CacheConfig, delta_ms: u64) -> (RefData, Refresher<Fake>, Arc<ManualClock>) {
    let (rd, r) = RefData::manual(cfg, Fake::new(delta_ms), 7).unwrap();
    (rd, r, ManualClock::new(T0))
}

/// Looks `name` up once (a miss) and lets the refresher fill it.
fn fill(rd: &RefData, r: &mut Refresher<Fake>, clock: &ManualClock, name: &str) {
    assert!(matches!(
        rd.lookup(name, clock.now_ns()),
        Lookup::Unavailable { .. }
    ));
    r.step(clock);
}

fn found(l: &Lookup) -> bool {
    matches!(l, Lookup::Found(_))
}

#[test]
fn xfetch_refreshes_one_key_before_expiry_and_nobody_stampedes() {
    let cfg = CacheConfig {
        ttl_ms: 10_000,
        ..CacheConfig::default()
    };
    let (rd, mut r, clock) = start(cfg, 200);
    fill(&rd, &mut r, &clock, "alice");
    let (expiry0, delta) = rd.entry_times("alice").unwrap();
    assert_eq!(delta, 200 * NS_PER_MS, "measured fetch time stored");

    // Five readers every millisecond until 2 s past the first expiry; the
    // refresher steps after each millisecond.
    while clock.now_ns() < expiry0 + 2_000 * NS_PER_MS {
        clock.advance_ms(1);
        for _ in 0..5 {
            assert!(found(&rd.lookup("alice", clock.now_ns())));
        }
        r.step(&*clock);
    }
    let fetches: Vec<u64> = r.source().fetches.iter().map(|f| f.1).collect();
    assert!(fetches.len() >= 2, "fill plus at least one refresh");
    assert!(fetches[1] < expiry0, "first refresh came before expiry");
    assert!(fetches.len() <= 4, "{} fetches for one key", fetches.len());
    let s = rd.stats().snapshot();
    assert!(s.refresh_requests_early >= 1);
    assert_eq!(s.refresh_requests_expired, 0, "no reader saw it expire");
    assert_eq!(
        (s.fills, s.refreshes_early, s.refreshes_expired),
        (1, fetches.len() as u64 - 1, 0)
    );
    assert_eq!(s.stale_served, 0);
    assert_eq!(s.lookups_unavailable, 1, "only the very first lookup");

    // A crowd at the old expiry instant finds a renewed entry: no fetch.
    let before = r.source().fetches.len();
    for _ in 0..1_000 {
        assert!(found(&rd.lookup("alice", expiry0)));
    }
    r.step(&*clock);
    assert!(r.source().fetches.len() - before <= 1);
}

/// Fetch counts per 100 ms while `keys` accounts filled together are read
/// every 25 ms for 14 s.
fn refresh_histogram(cfg: CacheConfig, keys: usize) -> (BTreeMap<u64, u32>, RefData) {
    let (rd, mut r, clock) = start(cfg, 100);
    let names: Vec<String> = (0..keys).map(|i| format!("acct{i}")).collect();
    for n in &names {
        let _ = rd.lookup(n, clock.now_ns());
    }
    while r.step(&*clock) > 0 {}
    let filled = r.source().fetches.len();
    assert_eq!(filled, keys);
    while clock.now_ns() < T0 + 14_000 * NS_PER_MS {
        clock.advance_ms(25);
        for n in &names {
            let _ = rd.lookup(n, clock.now_ns());
        }
        while r.step(&*clock) > 0 {}
    }
    let mut hist = BTreeMap::new();
    for (_, at) in &r.source().fetches[filled..] {
        *hist.entry((at - T0) / (100 * NS_PER_MS)).or_insert(0) += 1;
    }
    (hist, rd)
}

#[test]
fn jitter_and_xfetch_spread_refreshes_of_keys_filled_together() {
    let keys = 300;
    let cfg = CacheConfig {
        ttl_ms: 10_000,
        request_queue_max: keys,
        ..CacheConfig::default()
    };
    let (hist, rd) = refresh_histogram(cfg, keys);
    let peak = *hist.values().max().unwrap();
    let total: u32 = hist.values().sum();
    println!(
        "jitter+xfetch: {total} refreshes, peak {peak} per 100 ms over {} buckets",
        hist.len()
    );
    assert!(total as usize >= keys, "every key refreshed at least once");
    // 300 keys over the ±20% band (4 s = 40 buckets) average ~8 a bucket.
    assert!(peak <= 40, "peak {peak} fetches in 100 ms: {hist:?}");
    let s = rd.stats().snapshot();
    // XFetch is a draw per read: a key whose reads all decline to refresh
    // early expires and is served stale once (about 1 in 100 over this
    // run's draws), never a stampede.
    assert!(
        s.stale_served * 100 <= u64::from(total),
        "refreshed before expiry: {} stale of {total}",
        s.stale_served
    );
    assert_eq!(s.lookups_unavailable as usize, keys, "only the fills");

    // Control: plain TTL (no jitter, no early refresh) refreshes every key
    // in the same 100 ms — the stampede the test guards against.
    let plain = CacheConfig {
        ttl_jitter_pct: 0,
        xfetch_beta: 0.0,
        ..cfg
    };
    let (hist, _) = refresh_histogram(plain, keys);
    assert_eq!(*hist.values().max().unwrap() as usize, keys, "{hist:?}");
}

#[test]
fn ttl_jitter_stays_within_twenty_percent_and_spreads() {
    let cfg = CacheConfig {
        ttl_ms: 60_000,
        negative_ttl_ms: 5_000,
        request_queue_max: 2_000,
        ..CacheConfig::default()
    };
    let (rd, mut r, clock) = start(cfg, 1);
    for i in 0..1_000 {
        let _ = rd.lookup(&format!("acct{i}"), clock.now_ns());
        let _ = rd.lookup(&format!("ghost{i}"), clock.now_ns());
    }
    while r.step(&*clock) > 0 {}
    for (prefix, ttl_ms) in [("acct", 60_000u64), ("ghost", 5_000)] {
        let ttls: Vec<u64> = (0..1_000)
            .map(|i| rd.entry_times(&format!("{prefix}{i}")).unwrap().0 - T0)
            .collect();
        let ttl = ttl_ms * NS_PER_MS;
        let (lo, hi) = (*ttls.iter().min().unwrap(), *ttls.iter().max().unwrap());
        assert!(lo >= ttl / 100 * 80 && hi <= ttl / 100 * 120, "{lo}..{hi}");
        assert!(
            lo < ttl / 100 * 82 && hi > ttl / 100 * 118,
            "spread {lo}..{hi}"
        );
    }
}

#[test]
fn stale_entries_serve_while_the_source_fails_up_to_max_staleness() {
    let cfg = CacheConfig {
        ttl_ms: 1_000,
        ttl_jitter_pct: 0,
        max_stale_ms: 5_000,
        ..CacheConfig::default()
    };
    let (rd, mut r, clock) = start(cfg, 1);
    fill(&rd, &mut r, &clock, "alice");
    r.source().fail = true;
    clock.advance_ms(2_000); // expired 1 s ago
    assert!(found(&rd.lookup("alice", clock.now_ns())));
    r.step(&*clock);
    assert!(r.retry_at_ns() > clock.now_ns(), "backing off");
    assert!(found(&rd.lookup("alice", clock.now_ns())));
    // Unknown accounts are unavailable, told to come back after the backoff.
    let backoff_ms = (r.retry_at_ns() - clock.now_ns()).div_ceil(NS_PER_MS);
    match rd.lookup("bob", clock.now_ns()) {
        Lookup::Unavailable { retry_after_ms } => {
            assert!(retry_after_ms >= backoff_ms.max(100), "{retry_after_ms}")
        }
        other => panic!("{other:?}"),
    }
    // Past expiry + max staleness the stale entry is no longer served.
    clock.advance_ms(4_001);
    assert!(matches!(
        rd.lookup("alice", clock.now_ns()),
        Lookup::Unavailable { .. }
    ));
    // The source heals: the queued requests are fetched after the backoff.
    r.source().fail = false;
    clock.advance_ms(20_000);
    r.step(&*clock);
    assert!(found(&rd.lookup("alice", clock.now_ns())));
    assert!(found(&rd.lookup("bob", clock.now_ns())));
    let s = rd.stats().snapshot();
    assert!(s.stale_served >= 2 && s.refresher_backoffs >= 1);
}

#[test]
fn misses_get_a_jittered_retry_after_and_requests_are_bounded() {
    let cfg = CacheConfig {
        request_queue_max: 4,
        miss_retry_after_ms: 100,
        ..CacheConfig::default()
    };
    let (rd, mut r, clock) = start(cfg, 1);
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..10 {
        match rd.lookup(&format!("u{i}"), clock.now_ns()) {
            Lookup::Unavailable { retry_after_ms } => {
                assert!((100..=200).contains(&retry_after_ms), "{retry_after_ms}");
                seen.insert(retry_after_ms);
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(seen.len() >= 5, "retry-after spread: {seen:?}");
    // At the bound the newest miss wins: u0..u5 gave their places to
    // u4..u9 (each client was told to come back and asks again).
    let _ = rd.lookup("u9", clock.now_ns()); // already pending
    let s = rd.stats().snapshot();
    assert_eq!((s.fill_requests, s.requests_displaced), (10, 6));
    assert_eq!((s.requests_dropped, s.requests_coalesced), (0, 1));
    assert_eq!(r.step(&*clock), 5, "four fills, then the index listing");
    assert!(found(&rd.lookup("u9", clock.now_ns())));
    assert!(matches!(
        rd.lookup("u0", clock.now_ns()),
        Lookup::Unavailable { .. }
    ));
    assert!(matches!(
        rd.lookup("ghost1", clock.now_ns()),
        Lookup::Unavailable { .. }
    ));
    r.step(&*clock);
    assert_eq!(rd.lookup("ghost1", clock.now_ns()), Lookup::NotFound);
    assert_eq!(rd.lookup("", clock.now_ns()), Lookup::NotFound);
    assert_eq!(rd.lookup(&"x".repeat(33), clock.now_ns()), Lookup::NotFound);
}

#[test]
fn the_cache_is_bounded_and_evicts_negative_entries_first() {
    let cfg = CacheConfig {
        entries_max: 3,
        ..CacheConfig::default()
    };
    let (rd, mut r, clock) = start(cfg, 1);
    for n in ["a", "ghost", "b", "c", "d"] {
        fill(&rd, &mut r, &clock, n);
    }
    assert_eq!(rd.cached_entries(), 3);
    assert_eq!(rd.stats().snapshot().evictions, 2);
    assert!(
        rd.entry_times("ghost").is_none(),
        "negative entry went first"
    );
    assert!(rd.entry_times("d").is_some());
}

#[test]
fn config_file_accounts_are_the_fallback_source() {
    let rd = RefData::from_accounts(&Config::builtin(2).accounts);
    assert!(!rd.is_redis());
    // The demo account's token `demo` is stored hashed.
    let found = |a: &pricewire::config::Account| pricewire::auth::hash::verify(&a.token, b"demo");
    assert!(matches!(rd.lookup("demo", 0), Lookup::Found(a) if found(&a)));
    assert_eq!(rd.lookup("nobody", 0), Lookup::NotFound);
}

#[test]
fn invalid_settings_are_refused() {
    let addr = "127.0.0.1:6379".parse().unwrap();
    let mut r = RedisConfig::new(addr);
    r.slow_call_ms = r.io_timeout_ms;
    assert!(matches!(
        r.validate(),
        Err(RefDataError::Breaker(
            ConfigError::SlowThresholdNotBelowTimeout { .. }
        ))
    ));
    for set in [
        |c: &mut RedisConfig| c.connect_timeout_ms = 0,
        |c: &mut RedisConfig| c.io_timeout_ms = 0,
        |c: &mut RedisConfig| c.checkout_timeout_ms = 0,
        |c: &mut RedisConfig| c.pool_size_max = 0,
        |c: &mut RedisConfig| c.pool_size_max = 1_000,
    ] {
        let mut c = RedisConfig::new(addr);
        set(&mut c);
        assert!(
            matches!(c.validate(), Err(RefDataError::Config { .. })),
            "{c:?}"
        );
    }
    assert!(RedisConfig::new(addr).validate().is_ok());
    for set in [
        |c: &mut CacheConfig| c.ttl_ms = 0,
        |c: &mut CacheConfig| c.ttl_jitter_pct = 80,
        |c: &mut CacheConfig| c.entries_max = 0,
        |c: &mut CacheConfig| c.request_queue_max = 0,
        |c: &mut CacheConfig| c.xfetch_beta = -1.0,
    ] {
        let mut c = CacheConfig::default();
        set(&mut c);
        assert!(RefData::manual(c, Fake::new(1), 1).is_err(), "{c:?}");
    }
}

#[test]
fn redis_urls_parse() {
    let c = RefDataConfig::from_url("redis://:pw@127.0.0.1:7000/3").unwrap();
    assert_eq!(c.redis.addr, "127.0.0.1:7000".parse().unwrap());
    assert_eq!((c.redis.password.as_deref(), c.redis.db), (Some("pw"), 3));
    let c = RedisConfig::from_url("127.0.0.1").unwrap();
    assert_eq!((c.addr.port(), c.password, c.db), (6379, None, 0));
    assert!(RedisConfig::from_url("redis://127.0.0.1:7000/x").is_err());
    assert!(RedisConfig::from_url("redis://127.0.0.1:notaport").is_err());
}
