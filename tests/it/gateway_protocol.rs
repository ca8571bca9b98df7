//! docs/protocol.md promises about Subscribe, SnapshotRequest and
//! SymbolListRequest held against the real gateway over loopback (#17
//! items 5–8): resolved names, id/name agreement, re-subscribe resync,
//! left-out snapshot ids, the symbol list's budget.

use crate::util::server;

use std::time::Duration;

use pricewire::wire::{
    self, Name16, OwnedMessage, RejectReason, SubscribeStatus, SymbolListRequest, SymbolRef,
    TIER_ACCOUNT_DEFAULT,
};
use server::{Raw, ServerOpts, TestServer};

const T: Duration = Duration::from_secs(5);

fn demo(server: &TestServer) -> Raw {
    Raw::logon(server.addr, "demo", "demo", 0)
}

/// The SubscribeResponse to `rid` (other messages skipped).
fn subscribe_response(r: &mut Raw, rid: u64) -> Vec<wire::SubscribeResult> {
    let m = r.until(
        T,
        |m| matches!(m, OwnedMessage::SubscribeResponse { request_id, .. } if *request_id == rid),
    );
    match m {
        Some(OwnedMessage::SubscribeResponse { results, .. }) => results,
        other => panic!("no SubscribeResponse {rid}: {other:?}"),
    }
}

/// The answer (response or Reject) to request `rid`.
fn answer(r: &mut Raw, rid: u64) -> OwnedMessage {
    r.until(T, |m| {
        matches!(m, OwnedMessage::SnapshotResponse { request_id, .. }
            | OwnedMessage::SymbolDirectory { request_id, .. }
            | OwnedMessage::Reject { request_id, .. } if *request_id == rid)
    })
    .unwrap_or_else(|| panic!("no answer to {rid}"))
}

#[test]
fn subscribe_by_id_answers_the_resolved_name_and_a_mismatched_pair_is_refused() {
    let server = TestServer::start();
    let mut r = demo(&server);
    let (eur, gbp) = (server.symbol_id("EURUSD"), server.symbol_id("GBPUSD"));
    let mismatched = SymbolRef {
        symbol_id: eur,
        name: Name16::new("GBPUSD").unwrap(),
    };
    let agreeing = SymbolRef {
        symbol_id: gbp,
        name: Name16::new("GBPUSD").unwrap(),
    };
    let entries = [SymbolRef::by_id(eur), mismatched, agreeing];
    r.send_with(|b| wire::encode_subscribe(b, 7, TIER_ACCOUNT_DEFAULT, entries));
    let res = subscribe_response(&mut r, 7);
    let got: Vec<_> = res
        .iter()
        .map(|e| (e.symbol_id, e.name.as_str().unwrap().to_string(), e.status))
        .collect();
    assert_eq!(
        got,
        vec![
            (eur, "EURUSD".to_string(), SubscribeStatus::OK),
            (eur, "GBPUSD".to_string(), SubscribeStatus::UNKNOWN_SYMBOL),
            (gbp, "GBPUSD".to_string(), SubscribeStatus::OK),
        ]
    );
}

#[test]
fn subscribing_again_sends_a_fresh_snapshot() {
    let server = TestServer::start();
    let mut r = demo(&server);
    let eur = server.symbol_id("EURUSD");
    let snapshot_of_eur = |m: &OwnedMessage| matches!(m, OwnedMessage::PriceSnapshot(p) if p.body.symbol_id == eur && p.body.tier == 0);
    for rid in [1, 2] {
        r.send_with(|b| wire::encode_subscribe(b, rid, 0, [SymbolRef::by_id(eur)]));
        assert_eq!(
            subscribe_response(&mut r, rid)[0].status,
            SubscribeStatus::OK
        );
        assert!(
            r.until(T, snapshot_of_eur).is_some(),
            "no snapshot after subscribe {rid}"
        );
    }
}

#[test]
fn snapshot_request_leaves_unknown_ids_out() {
    let server = TestServer::start();
    let mut r = demo(&server);
    let eur = server.symbol_id("EURUSD");
    // A price first: EURUSD is quoted by the synthetic feed.
    r.send_with(|b| wire::encode_subscribe(b, 1, 0, [SymbolRef::by_id(eur)]));
    assert!(r
        .until(T, |m| matches!(m, OwnedMessage::PriceSnapshot(_)))
        .is_some());
    r.send_with(|b| wire::encode_snapshot_request(b, 2, 0, false, 0, [eur, 999]));
    match answer(&mut r, 2) {
        OwnedMessage::SnapshotResponse { prices, .. } => {
            let ids: Vec<_> = prices.iter().map(|p| p.symbol_id).collect();
            assert_eq!(ids, vec![eur]);
        }
        other => panic!("{other:?}"),
    }
    // Nothing answerable: refused with the first id's reason.
    r.send_with(|b| wire::encode_snapshot_request(b, 3, 0, false, 0, [999u16, 998]));
    match answer(&mut r, 3) {
        OwnedMessage::Reject { reason, .. } => assert_eq!(reason, RejectReason::UNKNOWN_SYMBOL),
        other => panic!("{other:?}"),
    }
}

#[test]
fn snapshot_request_leaves_unentitled_ids_out() {
    let config = pricewire::config::Config::parse(
        r#"
        insecure_plain_tokens = true
        [[accounts]]
        name = "eur"
        token = "eur-token"
        symbols = ["EURUSD"]
        tiers = ["retail"]
        "#,
        3,
    )
    .unwrap();
    let server = TestServer::start_with(ServerOpts {
        config,
        ..Default::default()
    });
    let mut r = Raw::logon(server.addr, "eur", "eur-token", 0);
    let (eur, gbp) = (server.symbol_id("EURUSD"), server.symbol_id("GBPUSD"));
    let d = TIER_ACCOUNT_DEFAULT;
    r.send_with(|b| wire::encode_subscribe(b, 1, d, [SymbolRef::by_id(eur)]));
    assert!(r
        .until(T, |m| matches!(m, OwnedMessage::PriceSnapshot(_)))
        .is_some());
    r.send_with(|b| wire::encode_snapshot_request(b, 2, 0, false, d, [gbp, eur]));
    match answer(&mut r, 2) {
        OwnedMessage::SnapshotResponse { prices, .. } => {
            let ids: Vec<_> = prices.iter().map(|p| p.symbol_id).collect();
            assert_eq!(ids, vec![eur]);
        }
        other => panic!("{other:?}"),
    }
    r.send_with(|b| wire::encode_snapshot_request(b, 3, 0, false, d, [gbp]));
    match answer(&mut r, 3) {
        OwnedMessage::Reject { reason, .. } => assert_eq!(reason, RejectReason::NOT_ENTITLED),
        other => panic!("{other:?}"),
    }
}

#[test]
fn symbol_list_request_honours_its_budget() {
    let server = TestServer::start();
    let mut r = demo(&server);
    let mut expired = 0;
    for rid in 1..=20u64 {
        let m = SymbolListRequest {
            request_id: rid,
            budget_us: 1,
            critical: false,
        };
        r.send_with(|b| wire::encode_symbol_list_request(b, &m));
        if let OwnedMessage::Reject { reason, .. } = answer(&mut r, rid) {
            assert_eq!(reason, RejectReason::DEADLINE_EXPIRED);
            expired += 1;
        }
    }
    assert!(expired >= 15, "{expired} of 20 expired");
    // The default budget is still served.
    let m = SymbolListRequest {
        request_id: 21,
        budget_us: 0,
        critical: false,
    };
    r.send_with(|b| wire::encode_symbol_list_request(b, &m));
    assert!(matches!(
        answer(&mut r, 21),
        OwnedMessage::SymbolDirectory { .. }
    ));
}
