//! Sessions against the real gateway over loopback: logon, entitlements,
//! subscribe → snapshot → contiguous updates, heartbeats and idle timeout.

use crate::util::server;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, ClientError, Event, SeqStatus};
use pricewire::config::Config;
use pricewire::gateway::GatewayConfig;
use pricewire::wire::{
    DisconnectReason, LogonRejectReason, OwnedMessage, PriceKind, SubscribeStatus,
    TIER_ACCOUNT_DEFAULT,
};
use server::{Raw, RawRead, ServerOpts, TestServer};

const T: Duration = Duration::from_secs(5);

fn entitlement_config() -> Config {
    Config::parse(
        r#"
        insecure_plain_tokens = true
        [[accounts]]
        name = "demo"
        token = "demo"
        tiers = ["standard", "raw", "retail"]
        [[accounts]]
        name = "eur"
        token = "eur-token"
        symbols = ["EURUSD"]
        tiers = ["retail"]
        "#,
        3,
    )
    .unwrap()
}

fn client(server: &TestServer, account: &str, token: &str) -> Result<Client, ClientError> {
    Client::connect(ClientConfig::new(server.addr, account, token))
}

/// Waits for the SubscribeResponse to `rid`.
fn subscribe_response(c: &mut Client, rid: u64) -> Vec<pricewire::wire::SubscribeResult> {
    match c.await_response(rid, T).unwrap() {
        Some(Event::SubscribeResponse { results, .. }) => results,
        other => panic!("expected SubscribeResponse, got {other:?}"),
    }
}

#[test]
fn logon_accepted_reports_session_and_default_tier() {
    let server = TestServer::start();
    let c = client(&server, "demo", "demo").unwrap();
    let info = c.logon_info().unwrap();
    assert_eq!(info.default_tier, 1, "demo defaults to standard");
    assert_eq!(
        info.heartbeat_interval_ms, 1_000,
        "server default heartbeat"
    );
    assert_eq!(info.reconnects, 0);
    assert!(c.is_connected());
    assert_eq!(server.stat(|s| &s.logons_accepted), 1);
}

#[test]
fn bad_token_gets_logon_rejected_auth() {
    let server = TestServer::start();
    match client(&server, "demo", "wrong") {
        Err(ClientError::LogonRejected { reason, .. }) => {
            assert_eq!(reason, LogonRejectReason::AUTH)
        }
        Err(e) => panic!("expected LogonRejected(auth), got {e}"),
        Ok(_) => panic!("a wrong token was accepted"),
    }
    match client(&server, "nobody", "demo") {
        Err(ClientError::LogonRejected { reason, .. }) => {
            assert_eq!(reason, LogonRejectReason::AUTH)
        }
        other => panic!("unknown account: {:?}", other.err()),
    }
    assert_eq!(server.stat(|s| &s.logons_rejected), 2);
    assert_eq!(server.stat(|s| &s.logons_accepted), 0);
}

#[test]
fn symbol_and_tier_outside_the_account_are_not_entitled() {
    let server = TestServer::start_with(ServerOpts {
        config: entitlement_config(),
        ..Default::default()
    });
    let mut c = client(&server, "eur", "eur-token").unwrap();
    assert_eq!(
        c.logon_info().unwrap().default_tier,
        2,
        "retail is eur's default"
    );
    let rid = c
        .subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD", "GBPUSD", "NOPE"])
        .unwrap();
    let results = subscribe_response(&mut c, rid);
    let status: Vec<_> = results.iter().map(|r| r.status).collect();
    assert_eq!(
        status,
        vec![
            SubscribeStatus::OK,
            SubscribeStatus::NOT_ENTITLED,
            SubscribeStatus::UNKNOWN_SYMBOL
        ]
    );
    assert_eq!(results[0].symbol_id, server.symbol_id("EURUSD"));
    // raw (tier 0) is not among eur's tiers.
    let rid = c.subscribe_names(0, &["EURUSD"]).unwrap();
    let results = subscribe_response(&mut c, rid);
    assert_eq!(results[0].status, SubscribeStatus::TIER_NOT_ENTITLED);
    // The entitled subscription streams at the default tier only.
    let deadline = Instant::now() + T;
    let mut seen = 0;
    while seen < 5 && Instant::now() < deadline {
        if let Some(Event::Price(p)) = c.next_event(Duration::from_millis(200)).unwrap() {
            assert_eq!(
                (p.body.symbol_id, p.body.tier),
                (server.symbol_id("EURUSD"), 2)
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 5);
}

#[test]
fn subscribe_gives_snapshot_then_contiguous_updates() {
    let server = TestServer::start();
    let mut c = client(&server, "demo", "demo").unwrap();
    let rid = c
        .subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD", "USDJPY"])
        .unwrap();
    let rid2 = c.subscribe_ids(0, &[server.symbol_id("EURUSD")]).unwrap();
    // key -> last seq; a key's first price must be a snapshot.
    let mut last: HashMap<(u16, u8), u64> = HashMap::new();
    let mut updates: HashMap<(u16, u8), u32> = HashMap::new();
    let mut responses = 0;
    let deadline = Instant::now() + Duration::from_secs(8);
    while Instant::now() < deadline && (updates.len() < 3 || updates.values().any(|&n| n < 50)) {
        let Some(ev) = c.next_event(Duration::from_millis(200)).unwrap() else {
            continue;
        };
        match ev {
            Event::SubscribeResponse {
                request_id,
                results,
            } => {
                assert!(request_id == rid || request_id == rid2);
                assert!(results.iter().all(|r| r.status == SubscribeStatus::OK));
                responses += 1;
            }
            Event::Price(p) => {
                let key = (p.body.symbol_id, p.body.tier);
                match p.kind {
                    PriceKind::Snapshot => {
                        assert_eq!(p.seq, SeqStatus::Reset);
                    }
                    PriceKind::Update => {
                        let prev = *last.get(&key).expect("a snapshot comes first");
                        assert_eq!(p.body.seq, prev + 1, "contiguous per key {key:?}");
                        assert_eq!(p.seq, SeqStatus::InOrder);
                        *updates.entry(key).or_default() += 1;
                    }
                }
                assert!(p.body.bid < p.body.ask, "a tradable price: {:?}", p.body);
                assert_eq!(
                    p.body.digits,
                    if key.0 == server.symbol_id("USDJPY") {
                        3
                    } else {
                        5
                    }
                );
                last.insert(key, p.body.seq);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(responses, 2);
    let eur = server.symbol_id("EURUSD");
    let keys: Vec<_> = {
        let mut k: Vec<_> = updates.keys().copied().collect();
        k.sort();
        k
    };
    assert_eq!(keys, {
        let mut k = vec![(eur, 1), (server.symbol_id("USDJPY"), 1), (eur, 0)];
        k.sort();
        k
    });
    assert!(updates.values().all(|&n| n >= 50), "{updates:?}");
    assert_eq!(c.stats().snapshot().gaps, 0);
}

#[test]
fn server_heartbeats_an_idle_client_and_drops_a_silent_one() {
    let server = TestServer::start_with(ServerOpts {
        gateway: GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            // Short enough for a quick test, long enough that a busy CI
            // machine does not starve the SDK thread past 3 intervals.
            heartbeat_ms: 500,
            heartbeat_min_ms: 50,
            ..Default::default()
        },
        ..Default::default()
    });
    // An SDK client heartbeats when idle and stays up; it is polled on its
    // own thread the whole time, as an application would.
    let sdk = client(&server, "demo", "demo").unwrap();
    assert_eq!(sdk.logon_info().unwrap().heartbeat_interval_ms, 500);
    let sdk = std::thread::spawn(move || {
        let mut sdk = sdk;
        let deadline = Instant::now() + Duration::from_millis(3_000);
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            if let Some(ev) = sdk.next_event(Duration::from_millis(100)).unwrap() {
                seen.push(ev);
            }
        }
        (sdk, seen)
    });
    // A raw client that never sends after its logon.
    let mut raw = Raw::logon(server.addr, "demo", "demo", 0);
    let mut heartbeats = 0;
    let started = Instant::now();
    let end = loop {
        match raw.next(T) {
            RawRead::Msg(OwnedMessage::Heartbeat) => heartbeats += 1,
            RawRead::Msg(m) => break m,
            other => panic!("expected heartbeats then Disconnect, got {other:?}"),
        }
    };
    let silent_for = started.elapsed();
    assert!(heartbeats >= 1, "the server heartbeats an idle session");
    match end {
        OwnedMessage::Disconnect { reason, .. } => {
            assert_eq!(reason, DisconnectReason::IDLE_TIMEOUT)
        }
        other => panic!("expected Disconnect(idle_timeout), got {other:?}"),
    }
    assert!(
        silent_for >= Duration::from_millis(1_450),
        "dead after 3 x 500 ms, not before"
    );
    assert_eq!(raw.next(T), RawRead::Closed);
    assert_eq!(server.stat(|s| &s.disconnects_idle), 1);
    // Meanwhile the SDK client kept its session through its own heartbeats.
    let (sdk, seen) = sdk.join().unwrap();
    assert!(seen.is_empty(), "an idle SDK session saw {seen:?}");
    assert!(sdk.is_connected());
    assert!(sdk.stats().snapshot().heartbeats_sent >= 4);
    assert_eq!(
        server.stat(|s| &s.disconnects_idle),
        1,
        "only the silent client"
    );
}

#[test]
fn logout_ends_the_session_for_good() {
    let server = TestServer::start();
    let mut c = client(&server, "demo", "demo").unwrap();
    c.logout().unwrap();
    let mut events = c.events(Duration::from_millis(100));
    match events.next() {
        Some(Ok(Event::Disconnected {
            cause,
            reconnect_in_ms,
            ..
        })) => {
            assert!(matches!(
                cause,
                pricewire::client::DisconnectCause::Server {
                    reason: DisconnectReason::LOGOUT,
                    ..
                }
            ));
            assert_eq!(reconnect_in_ms, None, "a logout is not retried");
        }
        other => panic!("expected Disconnected(logout), got {other:?}"),
    }
    assert!(matches!(events.next(), Some(Err(ClientError::Closed(_)))));
    assert!(events.next().is_none());
    assert_eq!(server.stat(|s| &s.disconnects_logout), 1);
}

#[test]
fn requests_are_answered_by_request_id_even_when_pipelined() {
    let server = TestServer::start_with(ServerOpts {
        config: entitlement_config(),
        ..Default::default()
    });
    let mut c = client(&server, "demo", "demo").unwrap();
    let (eur, gbp) = (server.symbol_id("EURUSD"), server.symbol_id("GBPUSD"));
    // Wait until the engine has priced both symbols.
    assert!(server::wait_until(T, || {
        let table = &server.gateway().shared.table;
        table.read(eur, 0).is_some() && table.read(gbp, 0).is_some()
    }));
    let dir = c.request_symbols(1_000_000, false).unwrap();
    let snap = c.request_snapshot(0, &[eur, gbp], 200_000, true).unwrap();
    // Ask for the later answer first: the earlier one waits in order.
    match c.await_response(snap, T).unwrap() {
        Some(Event::SnapshotResponse { prices, .. }) => {
            let ids: Vec<_> = prices.iter().map(|p| (p.symbol_id, p.tier)).collect();
            assert_eq!(ids, vec![(eur, 0), (gbp, 0)]);
            assert!(prices.iter().all(|p| p.seq > 0 && p.bid < p.ask));
        }
        other => panic!("expected SnapshotResponse, got {other:?}"),
    }
    match c.next_event(T).unwrap() {
        Some(Event::SymbolDirectory {
            request_id,
            symbols,
            tiers,
        }) => {
            assert_eq!(request_id, dir);
            assert_eq!(symbols.len(), server.config.table.len());
            let names: Vec<_> = tiers.iter().map(|t| t.name.to_string()).collect();
            assert_eq!(names, vec!["raw", "standard", "retail"]);
        }
        other => panic!("expected the directory next, got {other:?}"),
    }
    // A refused request carries its id and reason.
    let mut eur_only = client(&server, "eur", "eur-token").unwrap();
    let rid = eur_only
        .request_snapshot(0, &[eur], 200_000, false)
        .unwrap();
    match eur_only.await_response(rid, T).unwrap() {
        Some(Event::Reject {
            request_id, reason, ..
        }) => {
            assert_eq!(request_id, rid);
            assert_eq!(reason, pricewire::wire::RejectReason::NOT_ENTITLED);
        }
        other => panic!("expected Reject(not_entitled), got {other:?}"),
    }
}

#[test]
fn timers_still_run_for_a_session_above_a_closed_slot() {
    // The shard's timer sweep walks only up to the highest slot in use:
    // closing the session in slot 0 must not hide the one in slot 1.
    // The timeout leaves room for the first session's logon (an argon2
    // check) on a loaded host and still ends well inside `T`.
    let server = TestServer::start_with(ServerOpts {
        gateway: GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            logon_timeout_ms: 2_000,
            ..Default::default()
        },
        shards: 1,
        ..Default::default()
    });
    let first = Raw::logon(server.addr, "demo", "demo", 0);
    // Connected, never logs on: only the sweep's logon timeout ends it.
    let mut silent = Raw::connect(server.addr);
    assert!(server::wait_until(T, || server.shard_stats()[0]
        .connections
        .get()
        == 2));
    drop(first);
    assert!(server::wait_until(T, || server.shard_stats()[0]
        .connections
        .get()
        == 1));
    let seen = silent
        .read_to_close(T)
        .expect("the session above the closed slot was never timed out");
    assert!(
        seen.iter()
            .any(|m| matches!(m, OwnedMessage::Disconnect { .. })),
        "{seen:?}"
    );
    server.stop();
}
