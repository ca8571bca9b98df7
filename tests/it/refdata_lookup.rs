//! Reference data end to end against a real redis-server on 127.0.0.1:
//! accounts written to Redis are found with their entitlements resolved,
//! and cached accounts keep serving when Redis dies. Real threads are
//! awaited on conditions with bounded timeouts; cache time that matters
//! runs on a `ManualClock`.

use crate::util::redis;
use crate::util::wait;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use pricewire::clock::{Clock, ManualClock, MonotonicClock, NS_PER_MS};
use pricewire::model::InstrumentTable;
use pricewire::refdata::{
    CacheConfig, GuardedStore, Lookup, RedisConfig, RefData, RefDataConfig, RefDataStats,
};
use pricewire::resilience::breaker::WindowKind;
use pricewire::resilience::BreakerState;

use redis::RedisServer;
use wait::wait_until;

/// The argon2id hash (`pricewire token hash`) of the token `s3cret`:
/// Redis records hold hashes, never clear tokens.
const S3CRET_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$0AJWc/lTgUy122bCxwBSFQ$mTXWY39fXRGlEfwhI57vijpZIdEAI1J4a2828ptcp4U";

const WAIT: Duration = Duration::from_secs(10);

fn table() -> InstrumentTable {
    InstrumentTable::default_with_providers(2)
}

fn redis_config(server: &RedisServer) -> RedisConfig {
    let mut cfg = RedisConfig::from_url(&format!("redis://{}", server.addr())).unwrap();
    cfg.io_timeout_ms = 300;
    cfg.connect_timeout_ms = 300;
    cfg.slow_call_ms = 100;
    cfg.breaker.minimum_calls = 3;
    cfg.breaker.window = WindowKind::Time { window_s: 30 };
    cfg.breaker.open_wait_ms = 5_000;
    cfg
}

fn lookup_settled(rd: &RefData, name: &str) -> Lookup {
    let mut last = Lookup::Unavailable { retry_after_ms: 0 };
    let settled = wait_until(WAIT, || {
        last = rd.lookup(name, MonotonicClock.now_ns());
        !matches!(last, Lookup::Unavailable { .. })
    });
    assert!(settled, "{name} still unavailable after {WAIT:?}");
    last
}

/// Unknown tier, a clear token, a frequency over the limit: refused like
/// the config file would, as a fault of that record (busy, come back after
/// the negative TTL), never as "no such account" — an unreadable record is
/// the data's fault, not the client's.
fn assert_record_faults(rd: &RefData, faulty: &[&str]) {
    for &name in faulty {
        assert!(matches!(
            rd.lookup(name, MonotonicClock.now_ns()),
            Lookup::Unavailable { .. }
        ));
    }
    let stats = rd.stats();
    assert!(wait_until(WAIT, || stats
        .redis_invalid_record
        .load(Relaxed)
        >= faulty.len() as u64));
    // The fetcher counts a fault as the call returns, before its negative
    // entry is cached: until then a lookup is still the pending one (a
    // short retry-after). Every answer is Unavailable; it settles on the
    // negative TTL's.
    for &name in faulty {
        let mut retry = 0;
        let settled = wait_until(WAIT, || match rd.lookup(name, MonotonicClock.now_ns()) {
            Lookup::Unavailable { retry_after_ms } => {
                retry = retry_after_ms;
                retry_after_ms >= 3_000
            }
            other => panic!("{name}: {other:?}"),
        });
        assert!(settled, "{name}: {retry}");
    }
}

#[test]
fn accounts_written_to_redis_are_found_with_entitlements_resolved() {
    let server = RedisServer::start();
    server.put_account(
        "alice",
        &[
            ("token", S3CRET_HASH),
            ("symbols", "EURUSD, USDJPY"),
            ("tiers", "raw,retail"),
            ("max_sessions", "5"),
            ("critical", "1"),
            ("max_update_hz", "10"),
        ],
    );
    server.put_account(
        "bob",
        &[
            ("token", S3CRET_HASH),
            ("symbols", "*"),
            ("tiers", "standard"),
        ],
    );
    server.put_account("broken", &[("token", "x"), ("tiers", "gold")]);
    // A frequency above 1000/s: refused like the config file would.
    let too_fast = [
        ("token", S3CRET_HASH),
        ("tiers", "raw"),
        ("max_update_hz", "5000"),
    ];
    server.put_account("too-fast", &too_fast);
    // A clear token in a record: malformed (Redis holds hashes only).
    server.put_account("clear", &[("token", "s3cret"), ("tiers", "raw")]);
    let cfg = RefDataConfig {
        redis: redis_config(&server),
        cache: CacheConfig::default(),
    };
    let t = table();
    let rd = RefData::start_redis(
        &cfg,
        t.clone(),
        Arc::new(MonotonicClock),
        &Default::default(),
    )
    .unwrap();
    assert!(rd.is_redis());

    let Lookup::Found(alice) = lookup_settled(&rd, "alice") else {
        panic!("alice not found");
    };
    let id = |s: &str| t.by_name(s).unwrap().id;
    assert_eq!(alice.token, S3CRET_HASH);
    assert_eq!(alice.symbols, Some(vec![id("EURUSD"), id("USDJPY")]));
    assert!(alice.entitled_symbol(id("USDJPY")) && !alice.entitled_symbol(id("GBPUSD")));
    assert_eq!(alice.tiers, vec![0, 2]);
    assert_eq!((alice.max_sessions, alice.critical), (5, true));
    assert_eq!(alice.max_update_hz, Some(10));

    let Lookup::Found(bob) = lookup_settled(&rd, "bob") else {
        panic!("bob not found");
    };
    assert_eq!((bob.symbols.clone(), bob.tiers.clone()), (None, vec![1]));
    assert_eq!(bob.max_update_hz, None, "absent: serve's --max-update-hz");
    assert_eq!(
        bob.max_sessions,
        pricewire::config::ACCOUNT_SESSIONS_DEFAULT
    );
    assert_record_faults(&rd, &["broken", "clear", "too-fast"]);
    // Absent, and the index set vouches for the data set.
    assert_eq!(lookup_settled(&rd, "carol"), Lookup::NotFound);

    let s = rd.stats().snapshot();
    assert!(s.redis_ok >= 2 && s.redis_invalid_record >= 3 && s.redis_not_found >= 1);
    assert_eq!(s.redis_timeouts + s.redis_connection_errors, 0);
    assert_eq!(rd.breaker_stats().unwrap().state(), BreakerState::Closed);
    assert!(rd.pool_stats().unwrap().checkouts.load(Relaxed) >= 4);
}

#[test]
fn cached_accounts_keep_serving_when_redis_dies() {
    let mut server = RedisServer::start();
    server.put_account("alice", &[("token", S3CRET_HASH), ("tiers", "raw")]);
    let store = GuardedStore::new(
        &redis_config(&server),
        table(),
        Arc::new(RefDataStats::default()),
    )
    .unwrap();
    let cache = CacheConfig {
        ttl_ms: 1_000,
        max_stale_ms: 60_000,
        prefetch_max: 0,
        ..CacheConfig::default()
    };
    let (rd, mut r) = RefData::manual(cache, store, 5).unwrap();
    let clock = ManualClock::new(1_000 * NS_PER_MS);
    assert!(matches!(
        rd.lookup("alice", clock.now_ns()),
        Lookup::Unavailable { .. }
    ));
    r.step(&*clock);
    assert!(matches!(
        rd.lookup("alice", clock.now_ns()),
        Lookup::Found(_)
    ));

    server.kill();
    // Expired, Redis gone: the stale entry serves while the refresher
    // fails, backs off, and the breaker opens.
    for _ in 0..10 {
        clock.advance_ms(2_000);
        match rd.lookup("alice", clock.now_ns()) {
            Lookup::Found(a) => assert_eq!(a.token, S3CRET_HASH),
            other => panic!("stale entry not served: {other:?}"),
        }
        let _ = rd.lookup("newcomer", clock.now_ns());
        clock.set_ns(clock.now_ns().max(r.retry_at_ns()));
        r.step(&*clock);
    }
    let now = clock.now_ns();
    // It opened; by now it may be half-open, waiting for more trials.
    let breaker = r.source().breaker_stats().snapshot();
    assert!(
        breaker.transitions[BreakerState::Open as usize] >= 1,
        "{breaker:?}"
    );
    assert_ne!(r.source().breaker().state(now), BreakerState::Closed);
    let s = rd.stats().snapshot();
    assert!(s.stale_served >= 10 && s.refresher_backoffs >= 3, "{s:?}");
    // The unknown account is unavailable with a retry-after no earlier
    // than the refresher's next attempt.
    match rd.lookup("newcomer", clock.now_ns()) {
        Lookup::Unavailable { retry_after_ms } => {
            let until_ms = r.retry_at_ns().saturating_sub(now) / NS_PER_MS;
            assert!(
                retry_after_ms >= until_ms.max(100),
                "{retry_after_ms} < {until_ms}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Past the staleness limit the answer turns to Unavailable.
    clock.advance_ms(61_000);
    assert!(matches!(
        rd.lookup("alice", clock.now_ns()),
        Lookup::Unavailable { .. }
    ));
}

#[test]
fn refresher_thread_serves_stale_entries_while_redis_is_down() {
    let mut server = RedisServer::start();
    server.put_account("alice", &[("token", S3CRET_HASH), ("tiers", "raw")]);
    let cfg = RefDataConfig {
        redis: redis_config(&server),
        cache: CacheConfig {
            ttl_ms: 50,
            ttl_jitter_pct: 0,
            idle_tick_ms: 10,
            ..CacheConfig::default()
        },
    };
    let rd =
        RefData::start_redis(&cfg, table(), Arc::new(MonotonicClock), &Default::default()).unwrap();
    assert!(matches!(lookup_settled(&rd, "alice"), Lookup::Found(_)));
    server.kill();
    let stats = rd.stats();
    let mut all_found = true;
    let failed = wait_until(WAIT, || {
        all_found &= matches!(
            rd.lookup("alice", MonotonicClock.now_ns()),
            Lookup::Found(_)
        );
        stats.redis_connection_errors.load(Relaxed) >= 1 && stats.stale_served.load(Relaxed) >= 1
    });
    assert!(
        failed,
        "the refresher never saw Redis fail while serving stale"
    );
    assert!(
        all_found,
        "a lookup missed while the stale entry was available"
    );
}

/// The band `docs/refdata.md` says prefetched accounts expire over.
fn documented_band_s() -> u64 {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/refdata.md")).unwrap();
    let at = doc.find("expire over a ").expect("the doc names the band") + "expire over a ".len();
    let figure: String = doc[at..].chars().take_while(char::is_ascii_digit).collect();
    figure.parse().expect("a number of seconds")
}

#[test]
fn prefetched_accounts_expire_over_the_documented_band() {
    let server = RedisServer::start();
    let names: Vec<String> = (0..1_000).map(|i| format!("p{i:04}")).collect();
    server.put_accounts(&names, &[("token", S3CRET_HASH), ("tiers", "raw")]);
    let cfg = RefDataConfig {
        redis: redis_config(&server),
        cache: CacheConfig::default(),
    };
    let started = MonotonicClock.now_ns();
    let rd =
        RefData::start_redis(&cfg, table(), Arc::new(MonotonicClock), &Default::default()).unwrap();
    assert!(wait_until(WAIT, || rd.cached_entries() == 1_000));
    let filled_in_ns = MonotonicClock.now_ns() - started;
    let expiries: Vec<u64> = names.iter().map(|n| rd.entry_times(n).unwrap().0).collect();
    let (lo, hi) = (
        *expiries.iter().min().unwrap(),
        *expiries.iter().max().unwrap(),
    );
    let band_ms = (hi - lo) / NS_PER_MS;
    // ±20% of 60 s is 24 s; the fills themselves took `filled_in`.
    let spread_ms = 2 * cfg.cache.ttl_ms * u64::from(cfg.cache.ttl_jitter_pct) / 100;
    eprintln!(
        "1,000 prefetched accounts expire over {band_ms} ms (jitter spread {spread_ms} ms, fills took {} ms)",
        filled_in_ns / NS_PER_MS
    );
    assert_eq!(
        documented_band_s() * 1_000,
        spread_ms,
        "the doc and the settings agree"
    );
    assert!(band_ms >= spread_ms * 95 / 100, "{band_ms} ms");
    assert!(
        band_ms <= spread_ms + filled_in_ns / NS_PER_MS,
        "{band_ms} ms"
    );
    let earliest = lo - started;
    assert!(
        earliest >= cfg.cache.ttl_ms * 80 / 100 * NS_PER_MS,
        "an entry expires before -20%"
    );
}

#[test]
fn an_index_over_the_prefetch_bound_is_loaded_to_it_and_the_rest_counted() {
    let server = RedisServer::start();
    let names: Vec<String> = (0..1_500).map(|i| format!("x{i:04}")).collect();
    server.put_accounts(&names, &[("token", S3CRET_HASH), ("tiers", "raw")]);
    let cfg = RefDataConfig {
        redis: redis_config(&server),
        cache: CacheConfig {
            prefetch_max: 1_000,
            ..CacheConfig::default()
        },
    };
    let rd =
        RefData::start_redis(&cfg, table(), Arc::new(MonotonicClock), &Default::default()).unwrap();
    let stats = rd.stats();
    assert!(wait_until(WAIT, || stats.prefetch_listed.load(Relaxed) == 1_000));
    assert!(wait_until(WAIT, || rd.cached_entries() == 1_000));
    assert_eq!(stats.prefetch_left_out.load(Relaxed), 500);
    // The rest come at their first logon.
    assert!(matches!(lookup_settled(&rd, "x1499"), Lookup::Found(_)));
    assert_eq!(rd.cached_entries(), 1_001);
}
