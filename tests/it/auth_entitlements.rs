//! Issue #21, entitlements on every path: a table of accounts × requests
//! (Subscribe, Unsubscribe, SnapshotRequest, HistoryRequest,
//! SymbolListRequest, and Logon itself), each answer compared with the
//! table, and every price frame a session receives checked against its
//! account's symbols and tiers.
//!
//! The gateway runs in-process (the same shard, session and request-path
//! code as the binary) and is spoken to over real TCP on 127.0.0.1 with
//! hand-encoded frames; tokens are argon2id hashes, so every logon goes
//! through the verifier thread.

use crate::util::server;

use std::time::{Duration, Instant};

use pricewire::auth::hash::hash_token;
use pricewire::config::Config;
use pricewire::wire::{
    self, LogonRejectReason, OwnedMessage, RejectReason, SubscribeStatus, SymbolListRequest,
    SymbolRef, TIER_ACCOUNT_DEFAULT,
};
use server::{Raw, RawRead, ServerOpts, TestServer};

const T: Duration = Duration::from_secs(5);
const RAW: u8 = 0;
const RETAIL: u8 = 2;
const E: &str = "EURUSD";
const G: &str = "GBPUSD";
const J: &str = "USDJPY";

fn config() -> Config {
    let h = |t: &str| hash_token(t.as_bytes()).unwrap();
    let text = format!(
        r#"
[[accounts]]
name = "full"
token = "{full}"
tiers = ["standard", "raw", "retail"]
[[accounts]]
name = "eur"
token = "{eur}"
symbols = ["EURUSD"]
tiers = ["retail"]
[[accounts]]
name = "eg_raw"
token = "{egraw}"
symbols = ["EURUSD", "GBPUSD"]
tiers = ["raw"]
[[accounts]]
name = "nothing"
token = "{nothing}"
symbols = []
tiers = ["retail"]
"#,
        full = h("t-full"),
        eur = h("t-eur"),
        egraw = h("t-egraw"),
        nothing = h("t-nothing"),
    );
    Config::parse(&text, 3).unwrap()
}

/// One request of the matrix.
#[derive(Debug, Clone, Copy)]
enum Req {
    Sub(&'static str, u8),
    Unsub(&'static str, u8),
    Snap(&'static [&'static str], u8),
    Hist(&'static str),
    Symbols,
}

/// What came back, in a form the table can spell.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Status(SubscribeStatus),
    /// SnapshotResponse with these symbols (sorted names).
    Snap(Vec<String>),
    History,
    /// SymbolDirectory: symbol names (sorted), tier ids.
    Dir(Vec<String>, Vec<u8>),
    Reject(RejectReason),
}

const REQUESTS: [Req; 11] = [
    Req::Sub(E, TIER_ACCOUNT_DEFAULT),
    Req::Sub(G, TIER_ACCOUNT_DEFAULT),
    Req::Sub(J, RAW),
    Req::Sub(E, RETAIL),
    Req::Snap(&[E], RETAIL),
    Req::Snap(&[G], RETAIL),
    Req::Snap(&[E, J], RAW),
    Req::Hist(E),
    Req::Hist(J),
    Req::Symbols,
    Req::Unsub(J, TIER_ACCOUNT_DEFAULT),
];

fn ok() -> Out {
    Out::Status(SubscribeStatus::OK)
}
fn st(s: SubscribeStatus) -> Out {
    Out::Status(s)
}
fn snap(names: &[&str]) -> Out {
    Out::Snap(names.iter().map(|s| s.to_string()).collect())
}
fn not_entitled() -> Out {
    Out::Reject(RejectReason::NOT_ENTITLED)
}
fn dir(names: &[&str], tiers: &[u8]) -> Out {
    Out::Dir(
        names.iter().map(|s| s.to_string()).collect(),
        tiers.to_vec(),
    )
}

/// The table: per account, the expected answer to each of [`REQUESTS`].
fn expected(all: &[&str]) -> Vec<(&'static str, &'static str, Vec<Out>)> {
    use SubscribeStatus as S;
    vec![
        (
            "full",
            "t-full",
            vec![
                ok(),
                ok(),
                ok(),
                ok(),
                snap(&[E]),
                snap(&[G]),
                snap(&[E, J]),
                Out::History,
                Out::History,
                dir(all, &[0, 1, 2]),
                st(S::NOT_SUBSCRIBED),
            ],
        ),
        (
            "eur",
            "t-eur",
            vec![
                ok(),
                st(S::NOT_ENTITLED),
                st(S::TIER_NOT_ENTITLED),
                ok(),
                snap(&[E]),
                not_entitled(),
                not_entitled(), // raw is not its tier
                not_entitled(), // history is raw quotes; retail is marked up
                not_entitled(),
                dir(&[E], &[RETAIL]),
                st(S::NOT_ENTITLED),
            ],
        ),
        (
            "eg_raw",
            "t-egraw",
            vec![
                ok(),
                ok(),
                st(S::NOT_ENTITLED),
                st(S::TIER_NOT_ENTITLED),
                not_entitled(),
                not_entitled(),
                snap(&[E]), // USDJPY left out
                Out::History,
                not_entitled(),
                dir(&[E, G], &[RAW]),
                st(S::NOT_ENTITLED),
            ],
        ),
    ]
}

fn send(raw: &mut Raw, server: &TestServer, rid: u64, req: Req) {
    let id = |n: &str| server.symbol_id(n);
    let by_id = |n: &str| SymbolRef {
        symbol_id: id(n),
        name: Default::default(),
    };
    match req {
        Req::Sub(n, tier) => raw.send_with(|b| wire::encode_subscribe(b, rid, tier, [by_id(n)])),
        Req::Unsub(n, tier) => {
            raw.send_with(|b| wire::encode_unsubscribe(b, rid, tier, [by_id(n)]))
        }
        Req::Snap(names, tier) => {
            let ids: Vec<u16> = names.iter().map(|n| id(n)).collect();
            raw.send_with(|b| wire::encode_snapshot_request(b, rid, 0, false, tier, ids))
        }
        Req::Hist(n) => {
            let m = wire::HistoryRequest {
                request_id: rid,
                budget_us: 0,
                critical: false,
                symbol_id: id(n),
                count: 10,
            };
            raw.send_with(|b| wire::encode_history_request(b, &m))
        }
        Req::Symbols => {
            let m = SymbolListRequest {
                request_id: rid,
                budget_us: 0,
                critical: false,
            };
            raw.send_with(|b| wire::encode_symbol_list_request(b, &m))
        }
    }
}

/// The answer to `rid`; every price frame read on the way is checked
/// against the account (`symbols`: entitled ids, None = all; `tiers`).
fn answer(raw: &mut Raw, server: &TestServer, rid: u64, seen: &mut Vec<(u16, u8)>) -> Out {
    let name = |id: u16| server.config.table.get(id).unwrap().name.clone();
    let deadline = Instant::now() + T;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = match raw.next(left) {
            RawRead::Msg(m) => m,
            other => panic!("no answer to request {rid}: {other:?}"),
        };
        if let Some(p) = m.price_body() {
            seen.push((p.symbol_id, p.tier));
            continue;
        }
        let out = match m {
            OwnedMessage::SubscribeResponse {
                request_id,
                results,
            } if request_id == rid => Out::Status(results[0].status),
            OwnedMessage::SnapshotResponse { request_id, prices } if request_id == rid => {
                let mut v: Vec<String> = prices.iter().map(|p| name(p.symbol_id)).collect();
                v.sort();
                Out::Snap(v)
            }
            OwnedMessage::HistoryResponse { request_id, .. } if request_id == rid => Out::History,
            OwnedMessage::SymbolDirectory {
                request_id,
                symbols,
                tiers,
            } if request_id == rid => {
                let mut v: Vec<String> = symbols.iter().map(|s| name(s.symbol_id)).collect();
                v.sort();
                Out::Dir(v, tiers.iter().map(|t| t.tier_id).collect())
            }
            OwnedMessage::Reject {
                request_id, reason, ..
            } if request_id == rid => Out::Reject(reason),
            other => panic!("unexpected while waiting for {rid}: {other:?}"),
        };
        return out;
    }
}

/// Waits (bounded) until every symbol of the matrix has a raw price, so
/// that snapshots answer with every entitled symbol.
fn wait_for_prices(server: &TestServer) {
    let mut raw = Raw::logon(server.addr, "full", "t-full", 0);
    let deadline = Instant::now() + T;
    let mut rid = 1_000;
    loop {
        rid += 1;
        send(&mut raw, server, rid, Req::Snap(&[E, G, J], RAW));
        if answer(&mut raw, server, rid, &mut Vec::new()) == snap(&[E, G, J]) {
            return;
        }
        assert!(Instant::now() < deadline, "no prices for {E} {G} {J}");
        std::thread::park_timeout(Duration::from_millis(20));
    }
}

#[test]
fn every_request_sees_only_what_the_account_is_entitled_to() {
    let server = TestServer::start_with(ServerOpts {
        config: config(),
        ..Default::default()
    });
    wait_for_prices(&server);
    let mut all: Vec<String> = server
        .config
        .table
        .instruments()
        .iter()
        .map(|i| i.name.clone())
        .collect();
    all.sort();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let mut failures = Vec::new();
    for (account, token, want) in expected(&all) {
        let acct = server.config.account(account).unwrap().clone();
        let mut raw = Raw::logon(server.addr, account, token, 0);
        let mut seen = Vec::new();
        for (n, (req, want)) in REQUESTS.iter().zip(&want).enumerate() {
            let rid = n as u64 + 1;
            send(&mut raw, &server, rid, *req);
            let got = answer(&mut raw, &server, rid, &mut seen);
            if &got != want {
                failures.push(format!("{account} × {req:?}: got {got:?}, want {want:?}"));
            }
        }
        // Prices keep coming for the subscriptions: read a few more.
        let deadline = Instant::now() + Duration::from_millis(300);
        while let RawRead::Msg(m) = raw.next(deadline.saturating_duration_since(Instant::now())) {
            if let Some(p) = m.price_body() {
                seen.push((p.symbol_id, p.tier));
            }
        }
        assert!(!seen.is_empty(), "{account} subscribed and got no price");
        for (sym, tier) in seen {
            if !acct.entitled_symbol(sym) || !acct.entitled_tier(tier) {
                failures.push(format!(
                    "{account} received a price of ({sym}, tier {tier})"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn an_account_entitled_to_nothing_is_refused_at_logon() {
    let server = TestServer::start_with(ServerOpts {
        config: config(),
        ..Default::default()
    });
    let mut raw = Raw::connect(server.addr);
    raw.send_logon("nothing", "t-nothing", 0);
    match raw.next(T) {
        RawRead::Msg(OwnedMessage::LogonRejected(r)) => {
            assert_eq!(r.reason, LogonRejectReason::NOT_ENTITLED);
            assert_eq!(r.retry_after_ms, 0);
        }
        other => panic!("expected LogonRejected(not_entitled), got {other:?}"),
    }
    // A wrong token for it is auth, not not_entitled: the entitlement is
    // not revealed to someone without the token.
    let mut raw = Raw::connect(server.addr);
    raw.send_logon("nothing", "t-wrong", 0);
    match raw.next(T) {
        RawRead::Msg(OwnedMessage::LogonRejected(r)) => {
            assert_eq!(r.reason, LogonRejectReason::AUTH);
        }
        other => panic!("expected LogonRejected(auth), got {other:?}"),
    }
}

#[test]
fn frames_pipelined_behind_a_logon_wait_for_its_verdict_in_order() {
    let server = TestServer::start_with(ServerOpts {
        config: config(),
        ..Default::default()
    });
    // Logon and Subscribe in one write: the Subscribe waits for the
    // verifier's verdict, then is answered (not refused as before logon).
    let mut raw = Raw::connect(server.addr);
    let mut b = [0u8; 512];
    let logon = wire::Logon {
        heartbeat_interval_ms: 0,
        account: b"eur",
        token: b"t-eur",
    };
    let mut n = wire::encode_logon(&mut b, &logon).unwrap();
    let e = SymbolRef {
        symbol_id: server.symbol_id(E),
        name: Default::default(),
    };
    n += wire::encode_subscribe(&mut b[n..], 7, TIER_ACCOUNT_DEFAULT, [e]).unwrap();
    raw.send(&b[..n]);
    match raw.next(T) {
        RawRead::Msg(OwnedMessage::LogonAccepted(a)) => assert_eq!(a.default_tier, RETAIL),
        other => panic!("expected LogonAccepted first, got {other:?}"),
    }
    match raw.next(T) {
        RawRead::Msg(OwnedMessage::SubscribeResponse {
            request_id,
            results,
        }) => {
            assert_eq!(request_id, 7);
            assert_eq!(results[0].status, SubscribeStatus::OK);
        }
        other => panic!("expected the SubscribeResponse, got {other:?}"),
    }
}
