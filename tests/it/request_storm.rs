//! A tenant storm whose standing queue is made by holding the request
//! worker, not by outrunning it: one account floods SnapshotRequests from
//! several connections with its request bucket raised while the worker is
//! held at its gate (`requests::gate`), a second account asks one request
//! at a time. What is checked is order and accounting, never speed: the
//! queue detects the standing queue (overloaded and LIFO), every request
//! of both accounts gets exactly one answer or Reject, and the quiet
//! account is never refused. The timed drill (latencies, answered shares,
//! a flood flat out from several processes) is in the bench lab:
//! `pricewire-bench --scenario tenant-storm` (docs/overload.md).
//!
//! The per-connection retry-after test runs the real binary twice: the
//! refusals of two processes are jittered apart.

use crate::util::net;
use crate::util::server;
use crate::util::storm;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pricewire::overload::OverloadStats;
use pricewire::pipeline::PipelineConfig;
use pricewire::requests::gate::WorkerGate;
use pricewire::requests::service::HANDOFF_PER_WORKER;
use pricewire::wire::{
    self, OwnedMessage, RejectReason, SERVER_FRAME_LEN_MAX, TIER_ACCOUNT_DEFAULT,
};
use server::Raw;
use storm::{answer_of, http_get, FrameReader, Server, Tally};

const ACCOUNTS: &str = r#"
# Clear tokens: a loopback test (docs/security.md).
insecure_plain_tokens = true
[[providers]]
name = "bridge"
kind = "ingest"
token = "bridge-token"
[[accounts]]
name = "flood"
token = "flood-token"
tiers = ["standard", "raw", "retail"]
[[accounts]]
name = "quiet"
token = "quiet-token"
tiers = ["standard", "raw", "retail"]
"#;

const FLOOD_CONNECTIONS: usize = 6;
/// Requests each flood connection sends at once: together far more than
/// the queue holds.
const FLOOD_PER_CONN: u64 = 200;
const QUEUE_CAPACITY: usize = 256;
const QUIET_REQUESTS: u64 = 20;
/// Long enough that nothing expires while the worker is held.
const BUDGET_US: u32 = 30_000_000;
/// Bound of every wait on a condition.
const WAIT: Duration = Duration::from_secs(60);

fn frame(buf: &mut [u8], id: u64, budget_us: u32) -> usize {
    wire::encode_snapshot_request(
        buf,
        id,
        budget_us,
        false,
        TIER_ACCOUNT_DEFAULT,
        [0u16, 1, 2],
    )
    .unwrap()
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < WAIT, "timed out waiting for {what}");
        std::thread::park_timeout(Duration::from_millis(5));
    }
}

/// One flood connection: all its requests in one write, then a reader
/// tallying the answers until each has one (or the bound runs out).
fn flood(addr: SocketAddr, replies: Arc<AtomicU64>) -> std::thread::JoinHandle<Tally> {
    std::thread::spawn(move || {
        let raw = Raw::logon(addr, "flood", "flood-token", 30_000);
        let mut writer = raw.stream.try_clone().unwrap();
        let mut bytes = vec![0u8; 128 * FLOOD_PER_CONN as usize];
        let mut n = 0;
        for id in 0..FLOOD_PER_CONN {
            n += frame(&mut bytes[n..], id, BUDGET_US);
        }
        let write = std::thread::spawn(move || writer.write_all(&bytes[..n]).is_ok());
        let mut reader = FrameReader {
            stream: raw.stream,
            buf: vec![0u8; SERVER_FRAME_LEN_MAX],
            end: 0,
        };
        let mut tally = Tally {
            sent: FLOOD_PER_CONN,
            ..Tally::default()
        };
        let mut last = None;
        let t0 = Instant::now();
        while tally.answered < FLOOD_PER_CONN && t0.elapsed() < WAIT {
            let open = reader.poll(Duration::from_millis(50), |id, reject| {
                tally.record(id, reject, &mut last);
                replies.fetch_add(1, Ordering::Relaxed);
            });
            if !open {
                break;
            }
        }
        assert!(write.join().unwrap(), "the flood's write failed");
        tally
    })
}

fn quiet_request(raw: &mut Raw, id: u64, tally: &mut Tally, last: &mut Option<u64>) {
    let mut buf = [0u8; 128];
    let n = frame(&mut buf, id, BUDGET_US);
    raw.send(&buf[..n]);
    tally.sent += 1;
    let answer = raw.until(WAIT, |m| answer_of(m).is_some_and(|(i, _)| i == id));
    let (id, reject) = answer.as_ref().and_then(answer_of).expect("quiet answered");
    tally.record(id, reject, last);
}

#[test]
fn tenant_storm_on_a_held_worker_every_request_answered_quiet_tenant_kept_whole() {
    let gate = Arc::new(WorkerGate::new(true));
    let hold = gate.clone();
    let svc = server::ingest_service_tuned(
        ACCOUNTS,
        PipelineConfig::default(),
        |g| {
            // The per-connection limit out of the way of the flood.
            g.msg_rate_per_s = 1_000_000;
            g.msg_burst = 1_000_000;
        },
        move |s| {
            s.requests.workers = 1;
            s.requests.hold = Some(hold);
            s.requests.queue.capacity = QUEUE_CAPACITY;
            // The flooding account's bucket raised (the drill's premise).
            s.requests.queue.account_rate_per_s = 1_000_000;
            s.requests.queue.account_burst = 1_000_000;
        },
    );
    let addr = svc.gateway.as_ref().unwrap().local_addr;
    let overload: Arc<OverloadStats> = svc.overload.clone();
    let replies = Arc::new(AtomicU64::new(0));
    let floods: Vec<_> = (0..FLOOD_CONNECTIONS)
        .map(|_| flood(addr, replies.clone()))
        .collect();

    // While the worker is held a flood request is queued (at most the
    // capacity), in the hand-off (at most HANDOFF_PER_WORKER), with the
    // worker (one), or refused: the flood has settled once every other
    // one got its Reject.
    let total = FLOOD_PER_CONN * FLOOD_CONNECTIONS as u64;
    let held_max = (QUEUE_CAPACITY + HANDOFF_PER_WORKER + 1) as u64;
    wait_for("the flood to settle", || {
        replies.load(Ordering::Relaxed) >= total - held_max
    });
    wait_for("overload and LIFO", || {
        let s = overload.snapshot();
        s.overloaded && s.lifo
    });
    let mut quiet = Raw::logon(addr, "quiet", "quiet-token", 30_000);
    let (mut q, mut last) = (Tally::default(), None);
    // The quiet account's first request behind the standing queue: it
    // waits there until the worker goes again, then is served in its turn.
    let before = overload.snapshot().enqueued;
    let mut buf = [0u8; 128];
    let n = frame(&mut buf, 0, BUDGET_US);
    quiet.send(&buf[..n]);
    q.sent += 1;
    wait_for("the quiet request queued", || {
        overload.snapshot().enqueued > before
    });
    gate.open();
    let answer = quiet.until(WAIT, |m| answer_of(m).is_some_and(|(i, _)| i == 0));
    let (id, reject) = answer.as_ref().and_then(answer_of).expect("quiet answered");
    q.record(id, reject, &mut last);
    for id in 1..QUIET_REQUESTS {
        quiet_request(&mut quiet, id, &mut q, &mut last);
    }
    let tallies: Vec<Tally> = floods.into_iter().map(|f| f.join().unwrap()).collect();
    let snap = overload.snapshot();
    let request_stats = svc.gateway.as_ref().unwrap().request_stats().unwrap();
    svc.stop();

    let unanswered: u64 = tallies.iter().map(Tally::unanswered).sum();
    assert_eq!(unanswered, 0, "flood requests without exactly one answer");
    let refused: u64 = tallies.iter().flat_map(|t| t.rejects.values()).sum();
    assert!(refused > 0, "the flood was never refused");
    assert!(snap.overload_episodes >= 1);
    assert_eq!(
        q.unanswered(),
        0,
        "quiet requests without exactly one answer"
    );
    assert!(
        q.rejects.is_empty(),
        "quiet account refused: {:?}",
        q.rejects
    );
    assert_eq!(q.answered, QUIET_REQUESTS);
    assert_eq!(request_stats.answers_dropped.get(), 0);
}

/// Retry-after values the per-connection message limit draws (its own
/// refusals, empty text; not the window's restatements, "retry later"):
/// heartbeats spend the burst, then rounds of three requests at once, each
/// round after honouring every retry-after of the last.
fn conn_limit_draws(addr: SocketAddr, rounds: usize) -> Vec<u32> {
    let mut raw = Raw::logon(addr, "quiet", "quiet-token", 30_000);
    let mut buf = [0u8; 128];
    let mut bytes = Vec::new();
    for _ in 0..400 {
        let k = wire::encode_heartbeat(&mut buf).unwrap();
        bytes.extend_from_slice(&buf[..k]);
    }
    raw.send(&bytes);
    let mut draws = Vec::new();
    let mut id = 1_000u64;
    while draws.len() < rounds {
        let mut round = Vec::new();
        for _ in 0..3 {
            let k = frame(&mut buf, id, 0);
            round.extend_from_slice(&buf[..k]);
            id += 1;
        }
        raw.send(&round);
        let mut wait_ms = 0;
        let mut left = 3;
        while left > 0 {
            let m = raw.until(WAIT, |m| answer_of(m).is_some_and(|(i, _)| i >= id - 3));
            match m {
                Some(OwnedMessage::Reject {
                    reason,
                    retry_after_ms,
                    text,
                    ..
                }) => {
                    assert_eq!(reason, RejectReason::RATE_LIMITED);
                    if text.is_empty() {
                        draws.push(retry_after_ms);
                    }
                    wait_ms = wait_ms.max(retry_after_ms);
                }
                Some(OwnedMessage::SnapshotResponse { .. }) => {}
                other => panic!("connection ended: {other:?}"),
            }
            left -= 1;
        }
        // Honour the refusals (a pause the protocol asks for, not a wait
        // for the server to do something).
        std::thread::sleep(Duration::from_millis(u64::from(wait_ms) + 1));
    }
    draws
}

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn start_server(config: &std::path::Path) -> (Server, SocketAddr, SocketAddr) {
    let (addr, ops) = (net::free_addr(), net::free_addr());
    let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["serve", "--synthetic-rate", "2000"])
        .args(["--report-interval-ms", "60000"])
        .args(["--config", config.to_str().unwrap()])
        .args(["--listen", &addr.to_string()])
        .args(["--ops-listen", &ops.to_string()])
        .args(["--shards", "2", "--drain-delay-ms", "0"])
        .args(["--msg-rate-per-s", "200"])
        // The account's rate out of the way: the connection's is measured.
        .args(["--account-request-rate-per-s", "1000000"])
        .args(["--account-request-burst", "1000000"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server(child);
    let deadline = Instant::now() + WAIT;
    while !http_get(ops, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
        assert!(Instant::now() < deadline, "server never became ready");
        std::thread::yield_now();
    }
    (server, addr, ops)
}

#[test]
fn two_processes_draw_different_retry_after_values() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("accounts.toml");
    std::fs::write(&path, ACCOUNTS).unwrap();
    let mut seqs = Vec::new();
    for _ in 0..2 {
        let (_server, addr, ops) = start_server(&path);
        let draws = conn_limit_draws(addr, 24);
        // One to two times the wait for the next token of 200/s: at most
        // two refills (10 ms), at least 1 ms.
        assert!(draws.iter().all(|r| (1..=10).contains(r)), "{draws:?}");
        let metrics = http_get(ops, "/metrics").unwrap_or_default();
        let counted = metrics
            .lines()
            .find(|l| l.starts_with("pricewire_sheds_total{reason=\"conn_rate_limited\"}"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<u64>().ok());
        assert!(
            counted.is_some_and(|n| n >= draws.len() as u64),
            "{counted:?}"
        );
        seqs.push(draws);
    }
    assert_ne!(
        seqs[0], seqs[1],
        "two processes drew the same retry-after sequence"
    );
}
