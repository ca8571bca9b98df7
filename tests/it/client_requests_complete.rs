//! Requests never cost a price: a client subscribed to 3 keys of a fast
//! stream asks for a snapshot, a history and the symbol list every 50
//! prices — half the rounds waiting with `Client::await_response`, half
//! matching answers by request id in its own event loop — and every price
//! frame it reads reaches the caller, in order. Checked against a second,
//! plain subscriber of the same keys on the same server (real TCP on
//! loopback).
//!
//! The invariant, independent of the host's speed: per key, the caller's
//! prices are a sequence in which every update is the next `seq`, and the
//! only `seq` numbers the plain subscriber got that the caller did not
//! are ones the server itself skipped for it with a snapshot flagged
//! `conflated` (a reader the server judged slow). No verdict counts time.

use crate::util::{server, wait};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pricewire::client::{Client, ClientConfig, ClientError, Event, SeqStatus};
use pricewire::model::price_flags;
use pricewire::wire::{PriceKind, TIER_ACCOUNT_DEFAULT};
use server::{ServerOpts, TestServer};

const SYMBOLS: [&str; 3] = ["EURUSD", "GBPUSD", "USDJPY"];
const EVERY: u64 = 50;
const ROUNDS: u64 = 40;
const BUDGET_US: u32 = 2_000_000;
/// Bounds a wait that a working server ends far sooner.
const WITHIN: Duration = Duration::from_secs(60);

/// One price as a caller saw it.
#[derive(Debug, Clone, Copy)]
struct Seen {
    seq: u64,
    snapshot: bool,
    conflated: bool,
}

/// Prices by symbol id, in arrival order.
type Log = BTreeMap<u16, Vec<Seen>>;

fn record(log: &mut Log, p: &pricewire::client::PriceEvent) {
    log.entry(p.body.symbol_id).or_default().push(Seen {
        seq: p.body.seq,
        snapshot: p.kind == PriceKind::Snapshot,
        conflated: p.body.flags & price_flags::CONFLATED != 0,
    });
}

fn subscribed(server: &TestServer, events_queued_max: usize) -> Client {
    let mut cfg = ClientConfig::new(server.addr, "demo", "demo");
    cfg.events_queued_max = events_queued_max;
    let mut c = Client::connect(cfg).unwrap();
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &SYMBOLS).unwrap();
    c
}

/// The plain subscriber: records every price until `stop`.
fn plain(
    server: &TestServer,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Log>>,
) -> std::thread::JoinHandle<()> {
    let mut c = subscribed(server, 4_096);
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if let Some(Event::Price(p)) = c.next_event(Duration::from_millis(20)).unwrap() {
                record(&mut log.lock().unwrap(), &p);
            }
        }
    })
}

/// The requesting client and what its caller got.
struct Requester {
    c: Client,
    log: Log,
    prices: u64,
    /// Request ids whose answer the event loop waits for.
    pending: BTreeSet<u64>,
    answers: [u64; 3],
    since: u64,
    rounds: u64,
    backlogs: u64,
}

impl Requester {
    /// Takes one event as the caller's loop would.
    fn take(&mut self, ev: Event) {
        match &ev {
            Event::Price(p) => {
                self.prices += 1;
                self.since += 1;
                assert!(
                    matches!(p.seq, SeqStatus::InOrder | SeqStatus::Reset),
                    "a price out of sequence: {p:?}"
                );
                record(&mut self.log, p);
            }
            other => {
                if let Some(rid) = other.request_id() {
                    if self.pending.remove(&rid) {
                        self.answer(other);
                    }
                }
            }
        }
    }

    fn answer(&mut self, ev: &Event) {
        match ev {
            Event::SnapshotResponse { prices, .. } => {
                assert_eq!(prices.len(), SYMBOLS.len());
                self.answers[0] += 1;
            }
            // The test server keeps no tick history: an empty answer.
            Event::HistoryResponse { .. } => self.answers[1] += 1,
            Event::SymbolDirectory { symbols, .. } => {
                assert!(symbols.len() >= SYMBOLS.len());
                self.answers[2] += 1;
            }
            other => panic!("not an answer to a request of this test: {other:?}"),
        }
    }

    /// Sends one round: snapshot, history, symbol list; `wait`: each one
    /// answered through `await_response` before the next is sent.
    fn round(&mut self, ids: &[u16]) {
        let wait = self.rounds.is_multiple_of(2);
        self.rounds += 1;
        let history = ids[self.rounds as usize % ids.len()];
        let rids = [
            self.c
                .request_snapshot(TIER_ACCOUNT_DEFAULT, ids, BUDGET_US, false)
                .unwrap(),
            self.c
                .request_history(history, 20, BUDGET_US, false)
                .unwrap(),
            self.c.request_symbols(BUDGET_US, false).unwrap(),
        ];
        for rid in rids {
            if wait {
                self.await_answer(rid);
            } else {
                self.pending.insert(rid);
            }
        }
    }

    /// `await_response`, taking the events it set aside whenever its room
    /// is full, as its documentation says.
    fn await_answer(&mut self, rid: u64) {
        loop {
            match self.c.await_response(rid, WITHIN) {
                Ok(Some(ev)) => return self.answer(&ev),
                Ok(None) => panic!("request {rid} unanswered within {WITHIN:?}"),
                Err(ClientError::Backlog(n)) => {
                    self.backlogs += 1;
                    for _ in 0..n {
                        let ev = self.c.next_event(Duration::ZERO).unwrap().unwrap();
                        self.take(ev);
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}

/// The seqs of `key` the plain subscriber got within the requester's
/// range that the requester's caller did not, and which no conflated
/// snapshot of the requester skipped.
fn unexplained(mine: &[Seen], theirs: &[Seen]) -> Vec<u64> {
    let got: BTreeSet<u64> = mine.iter().map(|s| s.seq).collect();
    let mut skipped = BTreeSet::new();
    for pair in mine.windows(2) {
        if pair[1].snapshot && pair[1].conflated {
            skipped.extend(pair[0].seq + 1..pair[1].seq);
        }
    }
    let (first, last) = (mine[0].seq, mine[mine.len() - 1].seq);
    theirs
        .iter()
        .map(|s| s.seq)
        .filter(|seq| (first..=last).contains(seq) && !got.contains(seq) && !skipped.contains(seq))
        .collect()
}

#[test]
fn every_price_reaches_the_caller_while_requests_are_answered() {
    requests_interleaved_with_the_stream(ClientConfig::new(LOOPBACK, "", "").events_queued_max);
}

/// With room for 2 set-aside events `await_response` stops with
/// `Backlog` whenever more prices come before the answer; the caller takes
/// them and waits again, and still nothing is lost.
#[test]
fn every_price_reaches_the_caller_with_little_room_to_set_events_aside() {
    requests_interleaved_with_the_stream(2);
}

const LOOPBACK: std::net::SocketAddr = std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    0,
));

fn requests_interleaved_with_the_stream(events_queued_max: usize) {
    let server = TestServer::start_with(ServerOpts {
        rate_per_s: 10_000,
        ..Default::default()
    });
    let stop = Arc::new(AtomicBool::new(false));
    let their_log = Arc::new(Mutex::new(Log::new()));
    let other = plain(&server, stop.clone(), their_log.clone());

    let mut r = Requester {
        c: subscribed(&server, events_queued_max),
        log: Log::new(),
        prices: 0,
        pending: BTreeSet::new(),
        answers: [0; 3],
        since: 0,
        rounds: 0,
        backlogs: 0,
    };
    let mut ids = Vec::new();
    while r.rounds < ROUNDS || !r.pending.is_empty() {
        let ev = r.c.next_event(WITHIN).unwrap().expect("the stream goes on");
        if let Event::SubscribeResponse { results, .. } = &ev {
            ids.extend(results.iter().map(|s| s.symbol_id));
        }
        r.take(ev);
        if r.since >= EVERY && r.rounds < ROUNDS && ids.len() == SYMBOLS.len() {
            r.since = 0;
            r.round(&ids);
        }
    }
    assert_eq!(r.answers, [ROUNDS; 3], "every request answered once");

    // Every price frame the client decoded reached the caller.
    let s = r.c.stats().snapshot();
    assert_eq!(s.prices, r.prices, "{s:?}");
    assert_eq!(
        (s.gaps, s.old_dropped, s.events_dropped),
        (0, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.disconnects, 0, "{s:?}");

    // The plain subscriber catches up with the requester's last price.
    let last: BTreeMap<u16, u64> = r
        .log
        .iter()
        .map(|(k, v)| (*k, v[v.len() - 1].seq))
        .collect();
    let caught_up = wait::wait_until(WITHIN, || {
        let theirs = their_log.lock().unwrap();
        last.iter().all(|(k, seq)| {
            theirs
                .get(k)
                .is_some_and(|v| v.iter().any(|s| s.seq >= *seq))
        })
    });
    stop.store(true, Ordering::Relaxed);
    other.join().unwrap();
    assert!(caught_up, "the plain subscriber stalled");
    let theirs = their_log.lock().unwrap();
    assert_eq!(r.log.len(), SYMBOLS.len());
    for (key, mine) in &r.log {
        for pair in mine.windows(2) {
            let next = pair[0].seq + 1;
            assert!(
                pair[1].snapshot || pair[1].seq == next,
                "key {key}: {pair:?}"
            );
        }
        let lost = unexplained(mine, &theirs[key]);
        assert!(lost.is_empty(), "key {key}: the caller never got {lost:?}");
    }
    eprintln!(
        "prices={} rounds={} backlogs={} plain={}",
        r.prices,
        r.rounds,
        r.backlogs,
        theirs.values().map(Vec::len).sum::<usize>()
    );
}
