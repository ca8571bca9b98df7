//! The Redis client's real error values per fault, their breaker
//! classification, and the breaker matrix for the Redis dependency — real
//! redis-server on 127.0.0.1 behind the fault proxy. Breaker time runs on a
//! `ManualClock`; the I/O runs in real time, bounded by the client's
//! timeouts.

use crate::util::redis;

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use pricewire::clock::{Clock, ManualClock};
use pricewire::model::InstrumentTable;
use pricewire::refdata::{
    classify, AccountFetch, AccountStore, FetchError, GuardedStore, PoolError, RedisConfig,
    RedisError, RefDataStats,
};
use pricewire::resilience::breaker::WindowKind;
use pricewire::resilience::proxy::{FaultProxy, Toxic};
use pricewire::resilience::{BreakerState, Outcome};

use redis::RedisServer;

/// The argon2id hash (`pricewire token hash`) of the token `s3cret`:
/// Redis records hold hashes, never clear tokens.
const S3CRET_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$0AJWc/lTgUy122bCxwBSFQ$mTXWY39fXRGlEfwhI57vijpZIdEAI1J4a2828ptcp4U";

const IO_TIMEOUT_MS: u64 = 400;
const SLOW_MS: u64 = 100;
const OPEN_WAIT_MS: u64 = 1_000;
const MIN_CALLS: u32 = 4;

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn table() -> InstrumentTable {
    InstrumentTable::default_with_providers(2)
}

fn config(addr: SocketAddr) -> RedisConfig {
    let mut cfg = RedisConfig::new(addr);
    cfg.connect_timeout_ms = IO_TIMEOUT_MS;
    cfg.io_timeout_ms = IO_TIMEOUT_MS;
    cfg.slow_call_ms = SLOW_MS;
    cfg.pool_size_max = 1;
    cfg.breaker.window = WindowKind::Time { window_s: 10 };
    cfg.breaker.minimum_calls = MIN_CALLS;
    cfg.breaker.failure_rate_threshold_pct = 50;
    cfg.breaker.slow_call_rate_threshold_pct = 50;
    cfg.breaker.open_wait_ms = OPEN_WAIT_MS;
    // Exact waits: this file checks the matrix, not the jitter.
    cfg.breaker.open_wait_jitter_pct = 0;
    cfg.breaker.half_open_permitted_calls = 2;
    cfg
}

/// A server with account `alice`, and a proxy in front of it.
fn setup() -> (RedisServer, FaultProxy) {
    let server = RedisServer::start();
    server.put_account("alice", &[("token", S3CRET_HASH), ("tiers", "raw")]);
    let proxy = FaultProxy::start(loopback(), server.addr()).unwrap();
    (server, proxy)
}

fn guarded(addr: SocketAddr) -> GuardedStore {
    GuardedStore::new(&config(addr), table(), Arc::new(RefDataStats::default())).unwrap()
}

/// A loopback port with nothing listening.
fn closed_port() -> SocketAddr {
    let l = TcpListener::bind(loopback()).unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    addr
}

/// What the client returns for a reset, depending on when the RST lands:
/// during connect, on the write, or on the read.
fn is_reset(r: &Result<Option<pricewire::config::Account>, FetchError>) -> bool {
    matches!(
        r,
        Err(FetchError::Pool(PoolError::Connect(RedisError::Connect {
            kind: ErrorKind::ConnectionReset
        }))) | Err(FetchError::Redis(
            RedisError::Io {
                kind: ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
            } | RedisError::Closed
        ))
    )
}

fn slow_duration(o: Outcome) -> bool {
    matches!(o, Outcome::Success { duration_ns } | Outcome::Failure { duration_ns }
        if duration_ns > SLOW_MS * 1_000_000)
}

/// One fetch of `name`, and how the breaker classifies it by its result and
/// the time it took.
fn timed(
    s: &AccountStore,
    name: &str,
) -> (
    Result<Option<pricewire::config::Account>, FetchError>,
    Outcome,
) {
    let t = std::time::Instant::now();
    let r = s.fetch(name);
    let d = t.elapsed().as_nanos() as u64;
    let o = classify(&r, d);
    (r, o)
}

#[test]
fn record_answers_are_successes_or_ignored() {
    let (server, proxy) = setup();
    let store = AccountStore::new(&config(proxy.local_addr()), table());
    let (r, o) = timed(&store, "alice");
    assert!(matches!(&r, Ok(Some(a)) if a.token == S3CRET_HASH), "{r:?}");
    assert!(matches!(o, Outcome::Success { .. }));

    // Key not found: HGETALL answers an empty array -> Ok(None) -> ignored.
    let (r, o) = timed(&store, "nobody");
    assert_eq!(r, Ok(None));
    assert_eq!(o, Outcome::Ignored);

    // A key of another type: -WRONGTYPE -> an invalid record -> ignored.
    server.command(&[b"SET", b"pricewire:account:str", b"x"]);
    let (r, o) = timed(&store, "str");
    assert!(
        matches!(r, Err(FetchError::Invalid { field: "key", .. })),
        "{r:?}"
    );
    assert_eq!(o, Outcome::Ignored);
}

#[test]
fn network_faults_are_failures_and_latency_a_slow_success() {
    let (_server, proxy) = setup();
    let store = AccountStore::new(&config(proxy.local_addr()), table());
    // Blackholed connection: the request vanishes, the read hits the
    // command deadline.
    proxy.set_toxic(Toxic::Blackhole);
    let (r, o) = timed(&store, "alice");
    println!("blackhole -> {r:?}");
    assert_eq!(r, Err(FetchError::Redis(RedisError::Timeout)));
    assert!(matches!(o, Outcome::Failure { .. }) && slow_duration(o));
    proxy.clear_toxics();

    // Stalled connection: nothing forwarded either way -> the same timeout.
    proxy.set_toxic(Toxic::Stall);
    let (r, o) = timed(&store, "alice");
    println!("stall -> {r:?}");
    assert_eq!(r, Err(FetchError::Redis(RedisError::Timeout)));
    assert!(matches!(o, Outcome::Failure { .. }));
    proxy.clear_toxics();

    // Reset on an established (pooled) connection: the RST arrives while
    // the client reads its reply.
    assert!(matches!(timed(&store, "alice").0, Ok(Some(_))));
    proxy.set_toxic(Toxic::Reset);
    let (r, o) = timed(&store, "alice");
    println!("reset, pooled connection -> {r:?}");
    assert!(is_reset(&r), "{r:?}");
    assert!(matches!(o, Outcome::Failure { .. }));
    // Reset of a new connection: the proxy accepts and resets at once; on
    // loopback the RST usually lands before the non-blocking connect is
    // polled, so the connect itself reports ECONNRESET.
    let (r, o) = timed(&store, "alice");
    println!("reset, new connection -> {r:?}");
    assert!(is_reset(&r), "{r:?}");
    assert!(matches!(o, Outcome::Failure { .. }));
    proxy.clear_toxics();

    // Latency: succeeds, but slow.
    proxy.set_toxic(Toxic::Latency {
        latency_ms: 80,
        jitter_ms: 0,
    });
    let (r, o) = timed(&store, "alice");
    assert!(matches!(r, Ok(Some(_))), "{r:?}");
    assert!(
        matches!(o, Outcome::Success { .. }) && slow_duration(o),
        "{o:?}"
    );
    proxy.clear_toxics();
}

#[test]
fn a_refused_or_killed_server_is_a_failure() {
    let (mut server, _proxy) = setup();
    let refused_connect = Err(FetchError::Pool(PoolError::Connect(RedisError::Connect {
        kind: ErrorKind::ConnectionRefused,
    })));
    // Refused: nothing listens.
    let refused = AccountStore::new(&config(closed_port()), table());
    let (r, o) = timed(&refused, "alice");
    println!("refused -> {r:?}");
    assert_eq!(r, refused_connect);
    assert!(matches!(o, Outcome::Failure { .. }));

    // Server killed: the pooled connection sees EOF, the next connect is
    // refused.
    let direct = AccountStore::new(&config(server.addr()), table());
    assert!(matches!(timed(&direct, "alice").0, Ok(Some(_))));
    server.kill();
    let (r, o) = timed(&direct, "alice");
    println!("killed, pooled connection -> {r:?}");
    // Observed: always `Closed` (the FIN is read before the RST that our
    // request provokes); `is_reset` also admits the RST forms in case a
    // loaded machine orders them differently.
    assert!(is_reset(&r), "{r:?}");
    assert!(matches!(o, Outcome::Failure { .. }));
    let (r, _) = timed(&direct, "alice");
    assert_eq!(r, refused_connect);
}

/// `n` fetches of `name` at the clock's time; returns the breaker state.
fn calls(g: &mut GuardedStore, clock: &ManualClock, name: &str, n: usize) -> BreakerState {
    for _ in 0..n {
        let _ = g.fetch(name, clock.now_ns());
    }
    g.breaker().state(clock.now_ns())
}

#[test]
fn breaker_opens_on_timeouts() {
    let (_server, proxy) = setup();
    let clock = ManualClock::new(1_000_000_000);
    let mut g = guarded(proxy.local_addr());
    assert_eq!(calls(&mut g, &clock, "alice", 1), BreakerState::Closed);
    proxy.set_toxic(Toxic::Blackhole);
    assert_eq!(calls(&mut g, &clock, "alice", 1), BreakerState::Closed);
    proxy.clear_toxics();
    proxy.set_toxic(Toxic::Stall);
    assert_eq!(calls(&mut g, &clock, "alice", 2), BreakerState::Open);
    let s = g.breaker_stats().snapshot();
    assert_eq!((s.failed_calls, s.successful_calls), (3, 1));
    // Open: refused without touching Redis, with the remaining wait.
    let (r, _) = g.fetch("alice", clock.now_ns());
    assert!(
        matches!(r, Err(FetchError::NotPermitted(np)) if np.retry_after_ns == Some(OPEN_WAIT_MS * 1_000_000)),
        "{r:?}"
    );
}

#[test]
fn breaker_opens_on_slow_successful_calls() {
    let (_server, proxy) = setup();
    let clock = ManualClock::new(1_000_000_000);
    let mut g = guarded(proxy.local_addr());
    // About 2 x 80 ms per call: above the 100 ms slow threshold, below the
    // 400 ms timeout, so every call succeeds.
    proxy.set_toxic(Toxic::Latency {
        latency_ms: 80,
        jitter_ms: 0,
    });
    for i in 0..MIN_CALLS {
        let (r, d) = g.fetch("alice", clock.now_ns());
        assert!(matches!(r, Ok(Some(_))), "call {i}: {r:?}");
        assert!(d > SLOW_MS * 1_000_000, "call {i} took {d} ns");
    }
    assert_eq!(g.breaker().state(clock.now_ns()), BreakerState::Open);
    let s = g.breaker_stats().snapshot();
    assert_eq!(
        (s.successful_calls, s.failed_calls, s.slow_calls),
        (4, 0, 4)
    );
}

#[test]
fn breaker_opens_on_resets() {
    let (_server, proxy) = setup();
    let clock = ManualClock::new(1_000_000_000);
    let mut g = guarded(proxy.local_addr());
    proxy.set_toxic(Toxic::Reset);
    assert_eq!(calls(&mut g, &clock, "alice", 3), BreakerState::Closed);
    assert_eq!(calls(&mut g, &clock, "alice", 1), BreakerState::Open);
    assert_eq!(g.breaker_stats().snapshot().failed_calls, 4);
}

#[test]
fn breaker_opens_on_refused_connections() {
    let clock = ManualClock::new(1_000_000_000);
    let mut g = guarded(closed_port());
    assert_eq!(calls(&mut g, &clock, "alice", 3), BreakerState::Closed);
    assert_eq!(calls(&mut g, &clock, "alice", 1), BreakerState::Open);
}

#[test]
fn missing_keys_leave_the_breaker_closed() {
    let (_server, proxy) = setup();
    let clock = ManualClock::new(1_000_000_000);
    let mut g = guarded(proxy.local_addr());
    for i in 0..20 {
        let (r, _) = g.fetch(&format!("ghost{i}"), clock.now_ns());
        assert_eq!(r, Ok(None));
    }
    assert_eq!(g.breaker().state(clock.now_ns()), BreakerState::Closed);
    let s = g.breaker_stats().snapshot();
    assert_eq!(
        (s.ignored_calls, s.failed_calls, s.window_calls),
        (20, 0, 0)
    );
    // Ignored calls do not dilute real failures either: four resets after
    // twenty misses still open it.
    proxy.set_toxic(Toxic::Reset);
    assert_eq!(calls(&mut g, &clock, "alice", 4), BreakerState::Open);
}

#[test]
fn below_minimum_calls_it_never_opens() {
    let clock = ManualClock::new(1_000_000_000);
    let mut g = guarded(closed_port());
    // Every call fails, but one short of the minimum: no decision.
    assert_eq!(
        calls(&mut g, &clock, "alice", MIN_CALLS as usize - 1),
        BreakerState::Closed
    );
    let s = g.breaker_stats().snapshot();
    assert_eq!((s.failed_calls, s.window_calls), (3, 3));
    assert_eq!(s.failure_rate_pct, -1.0);
}

#[test]
fn half_open_by_itself_then_closes_or_reopens_on_trials() {
    let (_server, proxy) = setup();
    let clock = ManualClock::new(1_000_000_000);
    let mut g = guarded(proxy.local_addr());
    proxy.set_toxic(Toxic::Reset);
    assert_eq!(calls(&mut g, &clock, "alice", 4), BreakerState::Open);

    // No traffic: after the wait the state alone says half-open.
    clock.advance_ms(OPEN_WAIT_MS - 1);
    assert_eq!(g.breaker().state(clock.now_ns()), BreakerState::Open);
    clock.advance_ms(1);
    assert_eq!(g.breaker().state(clock.now_ns()), BreakerState::HalfOpen);

    // Trials fail -> open again.
    let (r, _) = g.fetch("alice", clock.now_ns());
    assert!(is_reset(&r), "{r:?}");
    assert_eq!(g.breaker().state(clock.now_ns()), BreakerState::Open);

    // Redis heals; after the wait two successful trials close it.
    proxy.clear_toxics();
    clock.advance_ms(OPEN_WAIT_MS);
    assert_eq!(g.breaker().state(clock.now_ns()), BreakerState::HalfOpen);
    let (r, _) = g.fetch("alice", clock.now_ns());
    assert!(matches!(r, Ok(Some(_))), "{r:?}");
    assert_eq!(g.breaker().state(clock.now_ns()), BreakerState::HalfOpen);
    let (r, _) = g.fetch("alice", clock.now_ns());
    assert!(matches!(r, Ok(Some(_))), "{r:?}");
    assert_eq!(g.breaker().state(clock.now_ns()), BreakerState::Closed);
}

#[test]
fn failures_older_than_the_window_no_longer_count() {
    let (_server, proxy) = setup();
    let clock = ManualClock::new(1_000_000_000);
    let mut g = guarded(proxy.local_addr());
    proxy.set_toxic(Toxic::Reset);
    assert_eq!(calls(&mut g, &clock, "alice", 3), BreakerState::Closed);
    proxy.clear_toxics();
    // 11 s later (window 10 s) the three failures have left the window:
    // one more failure and three successes are 25% failures -> closed.
    // Counted together they would be 4 of 7 (57%) and it would open.
    clock.advance_ms(11_000);
    proxy.set_toxic(Toxic::Reset);
    assert_eq!(calls(&mut g, &clock, "alice", 1), BreakerState::Closed);
    proxy.clear_toxics();
    assert_eq!(calls(&mut g, &clock, "alice", 3), BreakerState::Closed);
    let s = g.breaker_stats().snapshot();
    assert_eq!((s.window_calls, s.failed_calls), (4, 4));

    // Control: the same sequence without the pause opens it.
    let mut g = guarded(proxy.local_addr());
    proxy.set_toxic(Toxic::Reset);
    calls(&mut g, &clock, "alice", 4);
    assert_eq!(g.breaker().state(clock.now_ns()), BreakerState::Open);
}

#[test]
fn pool_reuses_connections_and_times_out_checkout_when_exhausted() {
    let (server, _proxy) = setup();
    let mut cfg = config(server.addr());
    cfg.checkout_timeout_ms = 50;
    let store = AccountStore::new(&cfg, table());
    for _ in 0..3 {
        assert!(matches!(store.fetch("alice"), Ok(Some(_))));
    }
    let stats = store.pool().stats();
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(stats.connects.load(Relaxed), 1, "one connection reused");
    let held = store.pool().checkout().unwrap();
    let started = std::time::Instant::now();
    let r = store.fetch("alice");
    assert!(
        matches!(r, Err(FetchError::Pool(PoolError::CheckoutTimeout { .. }))),
        "{r:?}"
    );
    assert!(started.elapsed() >= std::time::Duration::from_millis(50));
    assert_eq!(classify(&r, 0), Outcome::Ignored);
    assert_eq!(stats.checkout_timeouts.load(Relaxed), 1);
    drop(held);
    assert!(matches!(store.fetch("alice"), Ok(Some(_))));
}
