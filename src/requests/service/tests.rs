//! The request service end to end without sockets: a shard that stops
//! draining its answers for a while still gets exactly one answer or
//! Reject for every request it handed over.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::*;
use crate::config::Config;
use crate::engine::{PriceTable, TickHistory};
use crate::refdata::RefData;

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
