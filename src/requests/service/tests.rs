//! The request service end to end without sockets: a shard that stops
//! draining its answers for a while still gets exactly one answer or
//! Reject for every request it handed over.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::*;
use crate::config::Config;
use crate::engine::{PriceTable, TickHistory};
use crate::refdata::RefData;
use crate::requests::inflight::ACCOUNT_INFLIGHT_MAX;

fn sources() -> Sources {
    let config = Arc::new(Config::builtin(1));
    let symbols = config.table.len();
    Sources {
        table: Arc::new(PriceTable::new(symbols, config.table.tiers().len().max(1))),
        history: Arc::new(TickHistory::new(symbols, 1)),
        wall_offset_ns: 0,
        refdata: Arc::new(RefData::from_accounts(&config.accounts)),
        config,
    }
}

fn snapshot(id: u64, account: u32) -> RequestMsg {
    RequestMsg {
        shard: 0,
        conn: 1,
        session: 1,
        account,
        request_id: id,
        kind: RequestKind::Snapshot,
        tier: 0,
        symbols: [0; SNAPSHOT_SYMBOLS_MAX],
        nsym: 1,
        count: 0,
        budget_us: 0,
        critical: false,
        critical_entitled: false,
        arrival_ns: monotonic_ns(),
        account_name: [0; ACCOUNT_NAME_MAX],
        account_name_len: 0,
    }
}

#[test]
fn a_shard_that_stalls_still_gets_one_answer_or_reject_per_request() {
    let mut cfg = RequestConfig {
        workers: 2,
        ..RequestConfig::default()
    };
    cfg.queue.capacity = 64;
    cfg.queue.account_rate_per_s = 1_000_000;
    cfg.queue.account_burst = 1_000_000;
    let overload = Arc::new(OverloadStats::new());
    let (svc, mut ports) = RequestService::start(
        cfg,
        sources(),
        vec![Doorbell::new()],
        overload.clone(),
        &Default::default(),
    )
    .unwrap();
    let port = &mut ports[0];
    const N: u64 = 5_000;
    let mut next = 0;
    // The shard hands requests over and drains nothing until the path
    // pushes back (its inbound ring stays full).
    let stalled_until = Instant::now() + Duration::from_secs(10);
    let mut full_since = None;
    while next < N && Instant::now() < stalled_until {
        if port.requests.push(snapshot(next, 0)).is_ok() {
            next += 1;
            port.dispatcher.ring();
            full_since = None;
            continue;
        }
        let since = *full_since.get_or_insert_with(Instant::now);
        if since.elapsed() > Duration::from_millis(200) {
            break;
        }
        std::thread::yield_now();
    }
    assert!(next < N, "the path never pushed back");
    // Now the shard drains, and hands over the rest.
    let mut answers: HashMap<u64, u32> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while (answers.len() as u64) < N && Instant::now() < deadline {
        while next < N && port.requests.push(snapshot(next, 0)).is_ok() {
            next += 1;
            port.dispatcher.ring();
        }
        for rx in port.answers.iter_mut() {
            while let Ok(a) = rx.pop() {
                let msg = wire::decode(&a.bytes[..a.len as usize]).expect("answer decodes");
                *answers
                    .entry(msg.request_id().expect("has a request id"))
                    .or_default() += 1;
            }
        }
        std::thread::yield_now();
    }
    let stats = svc.stats.clone();
    svc.stop();
    assert_eq!(answers.len() as u64, N, "requests without an answer");
    assert!(
        answers.values().all(|&n| n == 1),
        "a request answered twice"
    );
    assert_eq!(stats.answers_dropped.get(), 0);
    let snap = overload.snapshot();
    assert!(
        snap.shed_of(ShedReason::QueueFull) > 0,
        "the queue never filled"
    );
}

/// Pops every answer now on `port`'s rings: (ring, request id, is a Reject).
fn drain(port: &mut RequestPort, out: &mut Vec<(usize, u64, bool)>) {
    for (r, rx) in port.answers.iter_mut().enumerate() {
        while let Ok(a) = rx.pop() {
            let msg = wire::decode(&a.bytes[..a.len as usize]).expect("answer decodes");
            let reject = matches!(msg, wire::Message::Reject(_));
            out.push((r, msg.request_id().expect("has a request id"), reject));
        }
    }
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(30), "timed out: {what}");
        std::thread::yield_now();
    }
}

#[test]
fn a_quiet_account_behind_a_held_flood_is_served_in_its_turn_and_the_flood_is_capped() {
    // The worker is held: the flood's requests stand in the queue however
    // fast the host is; order and accounting are checked, not speed.
    let gate = Arc::new(crate::requests::gate::WorkerGate::new(true));
    let mut cfg = RequestConfig {
        workers: 1,
        hold: Some(gate.clone()),
        ..RequestConfig::default()
    };
    cfg.queue.account_rate_per_s = 1_000_000;
    cfg.queue.account_burst = 1_000_000;
    let overload = Arc::new(OverloadStats::new());
    let (svc, mut ports) = RequestService::start(
        cfg,
        sources(),
        vec![Doorbell::new()],
        overload.clone(),
        &Default::default(),
    )
    .unwrap();
    let port = &mut ports[0];
    let long = |mut m: RequestMsg| {
        m.budget_us = 30_000_000;
        m
    };
    const FLOOD: u64 = 300;
    for id in 0..FLOOD {
        assert!(port.requests.push(long(snapshot(id, 0))).is_ok());
    }
    port.dispatcher.ring();
    wait_for("the flood admitted", || {
        overload.snapshot().enqueued == FLOOD
    });
    // Past the queue the flood holds no more than its cap (here the
    // hand-off's 16 and the job the held worker took).
    let held = svc.inflight.held(0);
    assert!(held <= ACCOUNT_INFLIGHT_MAX, "{held} in flight");
    assert!(held as usize <= HANDOFF_PER_WORKER + 1, "{held} in flight");
    assert!(port.requests.push(long(snapshot(FLOOD, 1))).is_ok());
    port.dispatcher.ring();
    wait_for("the quiet request admitted", || {
        overload.snapshot().enqueued == FLOOD + 1
    });
    gate.open();
    let mut got = Vec::new();
    wait_for("every request answered", || {
        drain(port, &mut got);
        got.len() as u64 == FLOOD + 1
    });
    drain(port, &mut got);
    let stats = svc.stats.clone();
    svc.stop();
    // Exactly one answer each.
    let mut ids: Vec<u64> = got.iter().map(|g| g.1).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len() as u64, FLOOD + 1, "an answer missing or doubled");
    // The worker's ring is its service order: the quiet request came
    // after what was already past the queue (the dispatcher may still
    // have been filling the hand-off when `held` was read: at most the
    // held job and a full hand-off), then at most one more of the
    // flood's (the rotation's turn), never behind its backlog.
    let served: Vec<u64> = got.iter().filter(|g| g.0 == 1).map(|g| g.1).collect();
    let at = served
        .iter()
        .position(|&id| id == FLOOD)
        .expect("quiet served");
    let past = HANDOFF_PER_WORKER + 1;
    assert!(
        at <= past + 1,
        "quiet served {at}th, at most {past} were past the queue"
    );
    assert!(!got.iter().any(|g| g.1 == FLOOD && g.2), "quiet rejected");
    assert_eq!(stats.answers_dropped.get(), 0);
}

#[test]
fn a_worker_count_out_of_range_is_refused_by_its_flag() {
    let cfg = RequestConfig {
        workers: 0,
        ..RequestConfig::default()
    };
    let overload = Arc::new(OverloadStats::new());
    let bells = vec![Doorbell::new()];
    let started = RequestService::start(cfg, sources(), bells, overload, &Default::default());
    let e = started.err().expect("0 workers refused");
    assert!(matches!(e, StartError::Workers { workers: 0 }), "{e:?}");
    assert_eq!(e.to_string(), "--request-workers: 1..=64");
}
