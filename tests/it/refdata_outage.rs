//! The Redis breaker on **default settings**, by injected time: the
//! refresher (probe, backoff, the consecutive-failures rule) against a
//! killed Redis (nothing listening: every call refused at once) and a
//! blackholed one (TCP accepted, nothing ever answered: every call runs to
//! its timeout). The refresher's clock is a `ManualClock` advanced by the
//! real time each step took, then to the refresher's next due time, so the
//! injected time is what a real process would have spent. Both open the
//! breaker within `RefDataConfig::open_bound_ms`, itself under 30 s.
//!
//! Also: a record over the reply limits is an invalid record for that
//! account (no backoff, other keys served), and after a failure the queue
//! is worked off at the recovery pace.

use crate::util::redis;

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Instant;

use pricewire::clock::{Clock, ManualClock, NS_PER_MS};
use pricewire::model::InstrumentTable;
use pricewire::refdata::{GuardedStore, Lookup, RefData, RefDataConfig, RefDataStats, Refresher};
use pricewire::resilience::proxy::{FaultProxy, Toxic};
use pricewire::resilience::{BreakerState, BreakerStats};

use redis::RedisServer;

fn table() -> InstrumentTable {
    InstrumentTable::default_with_providers(2)
}

/// A loopback port with nothing listening.
fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    addr
}

/// A listener that accepts and reads, and never answers.
fn blackhole() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in l.incoming().map_while(Result::ok).take(64) {
            std::thread::spawn(move || {
                let mut b = [0u8; 512];
                while matches!(s.read(&mut b), Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

struct Drill {
    clock: Arc<ManualClock>,
    refdata: RefData,
    refresher: Refresher<GuardedStore>,
    breaker: Arc<BreakerStats>,
    /// The Redis call counters (the store's; the cache has its own).
    redis_stats: Arc<RefDataStats>,
    cfg: RefDataConfig,
}

fn drill(addr: SocketAddr) -> Drill {
    drill_with(addr, |_| {})
}

fn drill_with(addr: SocketAddr, set: impl FnOnce(&mut RefDataConfig)) -> Drill {
    let mut cfg = RefDataConfig::from_url(&format!("redis://{addr}")).unwrap();
    set(&mut cfg);
    cfg.validate().unwrap();
    let redis_stats = Arc::new(RefDataStats::default());
    let store = GuardedStore::new(&cfg.redis, table(), Arc::clone(&redis_stats)).unwrap();
    let breaker = store.breaker_stats();
    let (refdata, refresher) = RefData::manual(cfg.cache, store, rand::random()).unwrap();
    Drill {
        clock: ManualClock::new(1_000 * NS_PER_MS),
        refdata,
        refresher,
        breaker,
        redis_stats,
        cfg,
    }
}

impl Drill {
    /// Steps until the breaker opens or `limit_ms` of injected time pass;
    /// returns the injected time it took and the calls made.
    fn until_open(&mut self, limit_ms: u64) -> Option<(u64, usize)> {
        let start = self.clock.now_ns();
        let tick_ns = self.cfg.cache.idle_tick_ms * NS_PER_MS;
        let mut calls = 0;
        while self.clock.now_ns() - start <= limit_ms * NS_PER_MS {
            let real = Instant::now();
            calls += self.refresher.step(&*self.clock);
            self.clock.advance(real.elapsed());
            if self.breaker.state() == BreakerState::Open {
                return Some(((self.clock.now_ns() - start) / NS_PER_MS, calls));
            }
            let now = self.clock.now_ns();
            let next = self.refresher.retry_at_ns().max(now + 1).min(now + tick_ns);
            self.clock.set_ns(next);
        }
        None
    }
}

#[test]
fn defaults_open_the_breaker_on_a_killed_redis_within_the_bound() {
    let mut d = drill(closed_port());
    let bound = d.cfg.open_bound_ms().expect("the rule is on by default");
    assert!(bound <= 30_000, "bound {bound} ms");
    let (took, calls) = d.until_open(30_000).expect("breaker never opened");
    eprintln!("killed: open after {took} ms injected, {calls} calls, bound {bound} ms");
    assert!(took <= bound, "opened after {took} ms, bound {bound} ms");
    assert_eq!(calls as u32, d.cfg.redis.breaker_consecutive_failures);
}

#[test]
fn defaults_open_the_breaker_on_a_blackholed_redis_within_the_bound() {
    let mut d = drill(blackhole());
    let bound = d.cfg.open_bound_ms().unwrap();
    let (took, calls) = d.until_open(30_000).expect("breaker never opened");
    eprintln!("blackholed: open after {took} ms injected, {calls} calls, bound {bound} ms");
    assert!(took <= bound, "opened after {took} ms, bound {bound} ms");
    // Each call ran to a timeout (the I/O timeout: the connect succeeds).
    assert!(took >= u64::from(calls as u32) * d.cfg.redis.io_timeout_ms);
}

#[test]
fn the_open_bound_is_the_worst_case_sum_on_defaults() {
    let cfg = RefDataConfig::from_url("redis://127.0.0.1:6379").unwrap();
    // 1 s probe + 100 ms idle tick + 5 x (100 checkout + 500 connect +
    // 250 I/O) + backoff windows 100 + 200 + 400 + 800.
    assert_eq!(cfg.open_bound_ms(), Some(1_100 + 5 * 850 + 1_500));
    let mut off = cfg.clone();
    off.redis.breaker_consecutive_failures = 0;
    assert_eq!(off.open_bound_ms(), None);
    // The rate rule alone cannot open at the refresher's failing rate.
    assert!(off.validate().is_err());
}

#[test]
fn an_oversized_record_is_invalid_for_its_account_only() {
    let server = RedisServer::start();
    for i in 0..50 {
        let name = format!("acct{i:02}");
        server.put_account(&name, &[("token", redis::token_t_hash()), ("tiers", "raw")]);
    }
    // One field of 70 KB: the reply is over the client's 64-KiB limit.
    let huge = "x".repeat(70 * 1024);
    server.put_account(
        "fat",
        &[
            ("token", redis::token_t_hash()),
            ("tiers", "raw"),
            ("note", &huge),
        ],
    );
    let mut d = drill(server.addr());
    // Until everything is fetched; a call a loaded host made time out is
    // retried after its backoff (the injected clock moves to it).
    for _ in 0..50 {
        d.refresher.step(&*d.clock);
        if d.refresher.queued() == 0 && d.refdata.cached_entries() >= 51 {
            break;
        }
        let next = d.refresher.retry_at_ns().max(d.clock.now_ns() + NS_PER_MS);
        d.clock.set_ns(next);
    }
    let now = d.clock.now_ns();
    for i in 0..50 {
        let name = format!("acct{i:02}");
        assert!(
            matches!(d.refdata.lookup(&name, now), Lookup::Found(_)),
            "{name} not served: {:?} {:?}",
            d.redis_stats.snapshot(),
            d.refdata.stats().snapshot()
        );
    }
    // A fault of that record: busy until the negative TTL, never "no such
    // account" (which would count against the client's lockouts).
    match d.refdata.lookup("fat", now) {
        Lookup::Unavailable { retry_after_ms } => assert!(retry_after_ms >= 3_000),
        other => panic!("fat: {other:?}"),
    }
    let s = d.redis_stats.snapshot();
    assert_eq!(s.redis_invalid_record, 1, "{s:?}");
    assert_eq!(s.redis_ok, 51, "50 accounts and the index scan: {s:?}");
    // No backoff for the record; only for a call the host made fail.
    let backoffs = d.refdata.stats().snapshot().refresher_backoffs;
    let io_failures = s.redis_timeouts + s.redis_connection_errors + s.redis_other_errors;
    if io_failures > 0 {
        eprintln!("calls the host made fail: {io_failures} ({s:?})");
    }
    assert_eq!(
        backoffs, io_failures,
        "retried as if Redis were down: {s:?}"
    );
    assert_eq!(d.breaker.state(), BreakerState::Closed);
    assert_eq!(d.refresher.queued(), 0);
}

#[test]
fn the_backlog_after_an_outage_is_worked_off_at_the_recovery_pace() {
    let server = RedisServer::start();
    for i in 0..100 {
        server.put_account(
            &format!("a{i:03}"),
            &[("token", redis::token_t_hash()), ("tiers", "raw")],
        );
    }
    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), server.addr()).unwrap();
    let mut d = drill_with(proxy.local_addr(), |c| c.cache.prefetch_max = 0);
    // Redis resets every connection: the misses queue up.
    proxy.set_toxic(Toxic::Reset);
    let now = d.clock.now_ns();
    for i in 0..100 {
        let _ = d.refdata.lookup(&format!("a{i:03}"), now);
    }
    d.refresher.step(&*d.clock);
    assert_eq!(d.refresher.queued(), 100);
    assert!(d.refresher.retry_at_ns() > now, "backing off");
    proxy.clear_toxics();
    // The backoff passes; the next call succeeds and recovery starts.
    let t0 = d.refresher.retry_at_ns();
    d.clock.set_ns(t0);
    let mut steps = 0;
    while d.refresher.queued() > 0 && steps < 1_000 {
        d.refresher.step(&*d.clock);
        d.clock.advance_ms(5);
        steps += 1;
    }
    assert_eq!(d.refresher.queued(), 0);
    assert!(!d.refresher.is_recovering());
    let took_ms = (d.clock.now_ns() - t0) / NS_PER_MS;
    // 100 calls: the burst of 10 at once, 90 at 200/s = 450 ms; without
    // pacing all 100 would go in the first step.
    let rate = u64::from(d.cfg.cache.recovery_rate_per_s);
    assert!(
        took_ms >= 90 * 1_000 / rate - 10,
        "worked off in {took_ms} ms"
    );
    assert!(
        took_ms <= 90 * 1_000 / rate + 50,
        "worked off in {took_ms} ms"
    );
    assert_eq!(d.refdata.stats().snapshot().fills, 100);
}
