//! Reference-data faults against the real binary and a real redis-server,
//! in real time, on the shipped defaults unless a test says otherwise:
//!
//! - Redis restarted empty under 1,000 cached accounts and 100 live
//!   sessions: no logon refused, no session disconnected, the data-set
//!   alert set; then a reload with a raised marker, and the accounts
//!   deleted or `revoked 1` in it reach their live sessions within the
//!   revocation bound;
//! - Redis back after an outage: the first uncached logon is served within
//!   the recovery bound (`RefDataConfig::recovery_bound_ms`);
//! - a wrong-typed index set: valid first logons are served, the breaker
//!   stays closed, the fault is on /metrics;
//! - 3,000 unknown names from one address during an outage: 40 newcomers
//!   from another are served after recovery.

use crate::util::redis;
use crate::util::refdata_bin as bin;
use crate::util::server;
use crate::util::wait;

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pricewire::refdata::RefDataConfig;
use pricewire::resilience::proxy::{FaultProxy, Toxic};
use pricewire::wire::{DisconnectReason, LogonRejectReason, OwnedMessage};

use bin::{logon, logon_following_retry_after, start, Answer};
use redis::RedisServer;
use server::RawRead;
use wait::wait_until;

const START: Duration = Duration::from_secs(30);
const TRUSTED: &str = "pricewire_refdata_dataset_trusted ";
const OPEN: &str = "pricewire_breaker_state{dependency=\"redis\",state=\"open\"}";
const CLOSED: &str = "pricewire_breaker_state{dependency=\"redis\",state=\"closed\"}";
const DISCONNECTED: &str = "pricewire_refdata_revocations_total{action=\"disconnected\"}";

fn fault(name: &str) -> String {
    format!("pricewire_refdata_dataset_fault{{fault=\"{name}\"}}")
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:04}")).collect()
}

fn record() -> [(&'static str, &'static str); 2] {
    [("token", redis::token_t_hash()), ("tiers", "raw")]
}

/// The revocation bound of `docs/refdata.md` with `ttl_ms`: the jittered
/// TTL, two re-check rounds, one Redis call at its longest.
fn revocation_bound(ttl_ms: u64) -> Duration {
    Duration::from_millis(ttl_ms * 120 / 100 + 2 * 1_000 + 850)
}

/// `text` without terminal colour codes (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The session is open and was told nothing but heartbeats.
fn assert_live(s: &mut server::Raw, i: usize) {
    loop {
        match s.next(Duration::from_millis(1)) {
            RawRead::Timeout => return,
            RawRead::Msg(OwnedMessage::Heartbeat) => {}
            other => panic!("live session u{i:04}: {other:?}"),
        }
    }
}

#[test]
fn redis_restarted_empty_refuses_and_disconnects_nobody() {
    let mut server = RedisServer::start();
    let accounts = names("u", 1_000);
    server.put_accounts(&accounts, &record());
    server.set_generation(1);
    let ttl_ms = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let config = format!("[refdata]\nttl_ms = {ttl_ms}\n");
    let b = start(dir.path(), server.addr(), &config, "log", "info");
    assert!(wait_until(START, || b
        .metric("pricewire_refdata_cached_entries ")
        >= Some(1_000.0)));
    assert_eq!(b.metric(TRUSTED), Some(1.0));
    let mut live: Vec<_> = accounts[..100]
        .iter()
        .map(|a| logon_following_retry_after(b.listen, None, a, START).0)
        .collect();

    server.restart_empty();
    let restarted = Instant::now();
    // 20 s: every cached account's entry expires and is asked for again
    // several times (TTL 3 s) while Redis answers with nothing.
    let (mut accepted, mut deferred, mut refused) = (0, 0, Vec::new());
    let mut i = 0;
    while restarted.elapsed() < Duration::from_secs(20) {
        // Accounts with live sessions (their verification is cached) and
        // ones never logged on yet (verified now), in turn.
        let name = if i % 2 == 0 {
            &accounts[i / 2 % 100]
        } else {
            &accounts[100 + i / 2 % 900]
        };
        // From 64 loopback addresses in turn: a fast host outruns one
        // address's connection rate (50/s by default), and admission's
        // refusal of that rate is not what this test is about; it is
        // counted apart, and needs a retry-after.
        let src = Ipv4Addr::new(127, 0, 3, 1 + (i % 64) as u8);
        // A fast host also outruns the logon rate of all connections
        // (1,000/s, burst 2,000): a rate refusal with a retry-after is
        // admission's, and that no lockout caused it is asserted below.
        match logon(b.listen, Some(src), name) {
            Answer::Accepted(_) => accepted += 1,
            Answer::Disconnected(DisconnectReason::BUSY, retry_ms) if retry_ms > 0 => deferred += 1,
            Answer::Rejected(LogonRejectReason::RATE_LIMITED, retry_ms) if retry_ms > 0 => {
                deferred += 1
            }
            other => refused.push(format!("{name}: {other:?}")),
        }
        i += 1;
    }
    eprintln!(
        "Redis empty for 20 s: {accepted} logons accepted, {deferred} deferred \
         by admission's rate per address, {} refused",
        refused.len()
    );
    assert!(refused.is_empty(), "{refused:?}");
    assert!(accepted >= 50, "only {accepted} logons in 20 s");
    // An empty Redis is no reason to count a guess against anyone.
    for reason in ["bad_token", "unknown_account", "locked"] {
        let line = format!(
            "pricewire_logon_failures_total{{listener=\"subscriber\",reason=\"{reason}\"}}"
        );
        assert_eq!(b.metric(&line), Some(0.0), "{line}");
    }
    assert_eq!(b.metric(TRUSTED), Some(0.0), "the alert metric");
    assert_eq!(b.metric(&fault("generation_missing")), Some(1.0));
    assert_eq!(b.metric(DISCONNECTED), Some(0.0));
    for (i, s) in live.iter_mut().enumerate() {
        assert_live(s, i);
    }

    reload_and_revoke(&server, &b, &mut live, &accounts, ttl_ms);
}

/// The data is reloaded with a raised marker, without u0007 and with
/// u0008 revoked: both live sessions end with Disconnect(auth) within the
/// revocation bound (the waiting refreshes run once the data set is
/// trusted), and no other.
fn reload_and_revoke(
    server: &RedisServer,
    b: &bin::Binary,
    live: &mut [server::Raw],
    accounts: &[String],
    ttl_ms: u64,
) {
    server.put_accounts(accounts, &record());
    server.command(&[b"DEL", b"pricewire:account:u0007"]);
    server.command(&[b"HSET", b"pricewire:account:u0008", b"revoked", b"1"]);
    server.set_generation(2);
    let reloaded = Instant::now();
    let cfg = RefDataConfig::from_url("redis://127.0.0.1:6379").unwrap();
    let bound = revocation_bound(ttl_ms) + Duration::from_millis(cfg.trust_bound_ms().unwrap());
    for i in [7, 8] {
        let bye = live[i].until(bound + Duration::from_secs(5), |m| {
            matches!(m, OwnedMessage::Disconnect { .. })
        });
        let took = reloaded.elapsed();
        eprintln!("u000{i}: {bye:?} {took:?} after the reload (bound {bound:?})");
        let Some(OwnedMessage::Disconnect { reason, .. }) = bye else {
            panic!("u000{i} not revoked within {took:?}");
        };
        assert_eq!(reason, DisconnectReason::AUTH);
        assert!(took <= bound, "{took:?} > {bound:?}");
    }
    assert_eq!(b.metric(TRUSTED), Some(1.0));
    assert_eq!(b.metric(DISCONNECTED), Some(2.0));
    // Nobody else: the other 98 sessions are live and untouched.
    for (i, s) in live
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| *i != 7 && *i != 8)
    {
        assert_live(s, i);
    }
}

#[test]
fn the_first_uncached_logon_after_an_outage_is_served_within_the_recovery_bound() {
    let mut server = RedisServer::start();
    server.put_accounts(&names("c", 10), &record());
    server.set_generation(1);
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), server.addr(), "", "log", "info");
    assert!(wait_until(START, || b
        .metric("pricewire_refdata_cached_entries ")
        >= Some(10.0)));
    server.kill();
    assert!(
        wait_until(START, || b.metric(OPEN) == Some(1.0)),
        "breaker never opened"
    );
    // A newcomer keeps trying through the outage.
    let listen = b.listen;
    let client = std::thread::spawn(move || {
        let (_, refusals) =
            logon_following_retry_after(listen, None, "newcomer", Duration::from_secs(120));
        (Instant::now(), refusals)
    });
    std::thread::sleep(Duration::from_secs(4)); // the outage goes on
    server.restart_empty();
    server.put_accounts(&names("c", 10), &record());
    server.put_accounts(&["newcomer".to_string()], &record());
    server.set_generation(1);
    let healthy = Instant::now();
    let (served, refusals) = client.join().unwrap();
    let took = served.duration_since(healthy);
    let cfg = RefDataConfig::from_url("redis://127.0.0.1:6379").unwrap();
    let bound = Duration::from_millis(cfg.recovery_bound_ms());
    let longest = refusals.iter().map(|r| r.1).max().unwrap_or(0);
    eprintln!(
        "newcomer served {took:?} after Redis was healthy (bound {bound:?}), {} refusals, longest retry-after {longest} ms",
        refusals.len()
    );
    assert!(refusals.iter().all(|r| r.0 == LogonRejectReason::BUSY));
    let retry_max = cfg.redis.breaker_config().open_wait_max_ms() + 1_000;
    assert!(u64::from(longest) <= retry_max, "told to wait {longest} ms");
    // The bound, plus the logon's own argon2 verification (not part of
    // the reference data's bound) on a shared host.
    assert!(
        took <= bound + Duration::from_secs(2),
        "{took:?} > {bound:?}"
    );
    // The first trial served the newcomer; the next four (probes) close.
    assert!(wait_until(START, || b.metric(CLOSED) == Some(1.0)));
    // Every transition is logged with its reason, the timed one too.
    let log = strip_ansi(&std::fs::read_to_string(dir.path().join("log")).unwrap());
    for (from, to) in [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ] {
        let line = log.lines().find(|l| {
            l.contains("Redis breaker")
                && l.contains(&format!("from=\"{from}\""))
                && l.contains(&format!("to=\"{to}\""))
                && l.contains("reason=")
        });
        assert!(line.is_some(), "no {from} -> {to} line in:\n{log}");
    }
}

#[test]
fn a_wrong_typed_index_serves_valid_first_logons() {
    let server = RedisServer::start();
    server.put_accounts(&names("c", 10), &record());
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), server.addr(), "", "log", "info");
    assert!(wait_until(START, || b
        .metric("pricewire_refdata_cached_entries ")
        >= Some(10.0)));
    server.command(&[b"DEL", b"pricewire:accounts"]);
    server.command(&[b"SET", b"pricewire:accounts", b"oops"]);
    // 20 accounts added since (not cached, not in any index).
    let newcomers = names("n", 20);
    for n in &newcomers {
        let key = format!("pricewire:account:{n}");
        let [(f1, v1), (f2, v2)] = record();
        server.command(&[
            b"HSET",
            key.as_bytes(),
            f1.as_bytes(),
            v1.as_bytes(),
            f2.as_bytes(),
            v2.as_bytes(),
        ]);
    }
    let started = Instant::now();
    for n in &newcomers {
        logon_following_retry_after(b.listen, None, n, START);
    }
    eprintln!(
        "20 first logons served in {:?} with the index wrong-typed",
        started.elapsed()
    );
    assert_eq!(
        b.metric(CLOSED),
        Some(1.0),
        "a wrong-typed key is no Redis failure"
    );
    let refused = b.metric("pricewire_breaker_not_permitted_total{dependency=\"redis\"}");
    assert_eq!(refused, Some(0.0), "the breaker never refused a call");
    assert_eq!(b.metric(&fault("index_unreadable")), Some(1.0));
    assert_eq!(
        b.metric(TRUSTED),
        Some(0.0),
        "no marker vouches for the data"
    );
    // The cached accounts keep logging on.
    for c in names("c", 10) {
        assert!(
            matches!(logon(b.listen, None, &c), Answer::Accepted(_)),
            "{c}"
        );
    }
}

#[test]
fn an_unknown_name_flood_during_an_outage_leaves_newcomers_served() {
    let server = RedisServer::start();
    server.put_accounts(&names("c", 10), &record());
    server.set_generation(1);
    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), server.addr()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), proxy.local_addr(), "", "log", "info");
    assert!(wait_until(START, || b
        .metric("pricewire_refdata_cached_entries ")
        >= Some(10.0)));
    let newcomers = names("new", 40);
    server.put_accounts(&newcomers, &record());
    proxy.set_toxic(Toxic::Blackhole);
    let (flood, sent) = flood_unknown_names(b.listen);
    // Meanwhile the newcomers (from 127.0.0.3) are told to come back.
    let newcomer = Ipv4Addr::new(127, 0, 0, 3);
    for n in &newcomers[..10] {
        assert!(matches!(
            logon(b.listen, Some(newcomer), n),
            Answer::Rejected(LogonRejectReason::BUSY, _)
        ));
    }
    flood.into_iter().for_each(|t| t.join().unwrap());
    assert_the_flood_was_bounded(&b, sent.load(Relaxed));
    proxy.clear_toxics();
    let healthy = Instant::now();
    newcomers_served(b.listen, newcomer, &newcomers, healthy);
}

/// 3,000 names that exist nowhere, 100 from each of 30 addresses (within
/// each one's connection burst, so every one reaches the reference data).
fn flood_unknown_names(
    listen: std::net::SocketAddr,
) -> (Vec<std::thread::JoinHandle<()>>, Arc<AtomicU64>) {
    let sent = Arc::new(AtomicU64::new(0));
    let threads = (1..=30u8)
        .map(|a| {
            let sent = sent.clone();
            std::thread::spawn(move || {
                for i in 0..100 {
                    let src = Ipv4Addr::new(127, 0, 2, a);
                    let _ = logon(listen, Some(src), &format!("ghost{a:02}x{i:03}"));
                    sent.fetch_add(1, Relaxed);
                }
            })
        })
        .collect();
    (threads, sent)
}

/// Every logon of the flood that admission let through reached the
/// reference data (admission's global logon rate, 1,000/s after a burst
/// of 2,000, refuses the rest on a host fast enough to outrun it: counted
/// apart, so the verdict does not depend on the host's speed); the queue
/// holds the newest 1,024 and every older one gave its place, counted.
fn assert_the_flood_was_bounded(b: &bin::Binary, sent: u64) {
    let m = |event: &str| {
        let line = format!("pricewire_refdata_cache_events_total{{event=\"{event}\"}}");
        b.metric(&line).unwrap_or(0.0)
    };
    let (limited, displaced) = (m("request_source_limited"), m("request_displaced"));
    let pending = b.metric("pricewire_refdata_pending_requests{class=\"miss\"}");
    let misses = b.metric("pricewire_refdata_cache_events_total{event=\"miss\"}");
    eprintln!(
        "flood of {} names: {misses:?} misses, {limited} source-limited, {displaced} displaced, {pending:?} pending",
        sent
    );
    let misses = misses.unwrap_or(0.0);
    let admission = b
        .metric("pricewire_admission_rejects_total{stage=\"logon\"}")
        .unwrap_or(0.0);
    assert!(
        misses + admission >= sent as f64 - 10.0 && misses >= 2_000.0,
        "the flood did not reach the reference data ({admission} refused by admission)"
    );
    assert!(
        pending <= Some(1_024.0),
        "the queue is bounded: {pending:?}"
    );
    assert!(limited + displaced >= misses - 1_024.0 - 10.0);
}

/// The newcomers log on as conforming clients after Redis is back: the
/// first within the recovery bound, none refused but busy.
fn newcomers_served(
    listen: std::net::SocketAddr,
    newcomer: Ipv4Addr,
    newcomers: &[String],
    healthy: Instant,
) {
    let clients: Vec<_> = newcomers
        .iter()
        .map(|n| {
            let n = n.clone();
            std::thread::spawn(move || {
                let refusals = logon_following_retry_after(listen, Some(newcomer), &n, START).1;
                (healthy.elapsed(), refusals)
            })
        })
        .collect();
    let mut served: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    served.sort_by_key(|s| s.0);
    let cfg = RefDataConfig::from_url("redis://127.0.0.1:6379").unwrap();
    let bound = Duration::from_millis(cfg.recovery_bound_ms());
    let worst = served.iter().map(|s| s.1.len()).max().unwrap_or(0);
    let (first, last) = (served[0].0, served[served.len() - 1].0);
    eprintln!(
        "40 newcomers served after recovery: first {first:?}, last {last:?} (bound {bound:?}); \
         at most {worst} refusals each"
    );
    // Busy (the reference data) or rate-limited (admission), each with
    // a retry-after; never auth (the helper fails on any other answer).
    let reasons: std::collections::BTreeSet<_> = served
        .iter()
        .flat_map(|s| s.1.iter().map(|r| format!("{:?}", r.0)))
        .collect();
    eprintln!("refusals on the way: {reasons:?}");
    // The first within the bound (plus its own argon2 verification on a
    // shared host); the last after 40 verifications on one verifier
    // thread, which are not the reference data's.
    assert!(
        first <= bound + Duration::from_secs(2),
        "{first:?} > {bound:?}"
    );
    assert!(last <= bound + Duration::from_secs(20), "{last:?}");
}
