//! Graceful shutdown of the real binary, end to end: start `pricewire
//! serve` with the recorder on, connect subscribers, send SIGTERM and check
//! the documented order — readiness 503 at once, prices keep flowing during
//! the drain delay, a request sent during the drain is answered, new
//! connections are refused after it, every subscriber gets
//! Disconnect(shutdown) with a retryAfterMs, the process exits 0 within the
//! grace period and the capture is complete.

use crate::util::wait::wait_until;
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pricewire::capture::{CaptureReader, CorruptPolicy, ReaderOptions};
use pricewire::client::{Client, ClientConfig, DisconnectCause, Event};
use pricewire::wire::{DisconnectReason, TIER_ACCOUNT_DEFAULT};

const DRAIN_MS: u64 = 3_000;
const GRACE_MS: u64 = 10_000;

use crate::util::net;

/// True if a connection is accepted. Each probe waits for the server's
/// answer (or 300 ms of silence), so probing never floods the backlog.
fn accepting(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(300)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
    let mut b = [0u8; 64];
    !matches!(s.read(&mut b), Ok(0))
}

struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn subscriber(addr: SocketAddr) -> Client {
    let mut cfg = ClientConfig::new(addr, "demo", "demo");
    cfg.reconnect_attempts_max = 0;
    // The test reads some sessions only now and then: a long heartbeat
    // keeps the server's idle rule from ending them first.
    cfg.heartbeat_ms = 30_000;
    let mut c = Client::connect(cfg).expect("subscriber logs on");
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD", "XAUUSD"])
        .unwrap();
    c
}

/// Reads events until `n` prices arrived (bounded).
fn prices(c: &mut Client, n: usize, timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    let mut got = 0;
    while got < n && Instant::now() < deadline {
        if let Ok(Some(Event::Price(_))) = c.next_event(Duration::from_millis(100)) {
            got += 1;
        }
    }
    got
}

/// Reads until the session ends; returns the server's reason and retry.
fn disconnect_of(c: &mut Client, timeout: Duration) -> Option<(DisconnectReason, u32)> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match c.next_event(Duration::from_millis(100)) {
            Ok(Some(Event::Disconnected {
                cause: DisconnectCause::Server { reason, .. },
                retry_after_ms,
                ..
            })) => return Some((reason, retry_after_ms)),
            Ok(Some(other @ Event::Disconnected { .. })) => {
                eprintln!("session ended without a server Disconnect: {other:?}");
                return None;
            }
            Err(e) => {
                eprintln!("client error: {e:?}");
                return None;
            }
            _ => {}
        }
    }
    None
}

/// The real service's /metrics is valid exposition and carries every
/// family the operations issue lists (breakers appear per dependency, and
/// this run has none).
fn check_metrics(ops: SocketAddr) {
    let body = net::http_body(ops, "/metrics").unwrap_or_default();
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid exposition");
    let names: std::collections::BTreeSet<&str> =
        scrape.samples.iter().map(|s| s.metric.as_str()).collect();
    for family in [
        "pricewire_ticks_received_total",
        "pricewire_prices_published_total",
        "pricewire_ring_occupancy",
        "pricewire_conflations_total",
        "pricewire_drops_total",
        "pricewire_sheds_total",
        "pricewire_tick_to_publish_latency_seconds_count",
        "pricewire_connections",
        "pricewire_admission_rejects_total",
        "pricewire_slow_consumer_disconnects_total",
        "pricewire_request_queue_depth",
        "pricewire_request_queue_overloaded",
        "pricewire_request_queue_lifo",
        "pricewire_adaptive_limit",
        "pricewire_recorder_lag_seconds",
        "pricewire_recorder_lost_ticks_total",
        "pricewire_recorder_written_ticks_total",
    ] {
        assert!(names.contains(family), "/metrics lacks {family}");
    }
}

/// `pricewire serve` on `listen` and `ops` with the recorder writing
/// into `record` and a bridge listener, with the test's drain and grace.
fn serve_with_recorder(
    listen_addr: std::net::SocketAddr,
    ops_addr: std::net::SocketAddr,
    record: &std::path::Path,
) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args([
            "serve",
            "--synthetic-rate",
            "20000",
            "--report-interval-ms",
            "60000",
        ])
        .args([
            "--listen",
            &listen_addr.to_string(),
            "--ops-listen",
            &ops_addr.to_string(),
        ])
        .args([
            "--drain-delay-ms",
            &DRAIN_MS.to_string(),
            "--grace-ms",
            &GRACE_MS.to_string(),
        ])
        .arg("--record")
        .arg(record)
        // With a bridge listener too: the engine only finishes once the
        // ingest thread has let go of its ring, in the right order.
        .args(["--feed-listen", &net::free_addr().to_string()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Server { child }
}

/// A snapshot request sent now is answered within about 4 s.
fn snapshot_answered(sub: &mut Client) -> bool {
    let rid = sub
        .request_snapshot(TIER_ACCOUNT_DEFAULT, &[0], 500_000, false)
        .unwrap();
    (0..200).any(|_| {
        matches!(
            sub.next_event(Duration::from_millis(20)),
            Ok(Some(Event::SnapshotResponse { request_id, .. })) if request_id == rid
        )
    })
}

/// The capture in `dir` holds whole records only, nothing damaged, and
/// more than 1,000 ticks.
fn capture_is_whole(dir: &std::path::Path) {
    let opts = ReaderOptions {
        policy: CorruptPolicy::Stop,
        table: None,
    };
    let mut reader = CaptureReader::open(&[dir.to_path_buf()], opts).unwrap();
    let mut n = 0u64;
    while let Some(t) = reader.next_tick().unwrap() {
        assert!(t.bid <= t.ask || t.bid == pricewire::model::NO_PRICE);
        n += 1;
    }
    let summary = reader.summary();
    assert!(n > 1_000, "only {n} ticks recorded");
    assert!(
        summary.truncated.is_empty(),
        "capture cut short: {:?}",
        summary.truncated
    );
}

/// Every subscriber is told to come back later, with a jittered delay,
/// and the server exits 0 inside the grace period from `signalled`.
fn disconnected_then_exit_zero(subs: &mut [Client], server: &mut Server, signalled: Instant) {
    // Every subscriber is told to come back later, with a jittered delay.
    for c in subs.iter_mut() {
        let d = disconnect_of(c, Duration::from_secs(5));
        let (reason, retry) = d.expect("no Disconnect from the server");
        assert_eq!(reason, DisconnectReason::SHUTDOWN);
        assert!(retry > 0, "Disconnect(shutdown) without retryAfterMs");
    }

    // Exit 0 inside the grace period.
    let exited = wait_until(Duration::from_millis(GRACE_MS), || {
        matches!(server.child.try_wait(), Ok(Some(_)))
    });
    assert!(exited, "still running after the grace period");
    let status = server.child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    assert!(signalled.elapsed() < Duration::from_millis(GRACE_MS));
}

#[test]
fn sigterm_drains_then_disconnects_in_order_and_exits_zero() {
    let (listen_addr, ops_addr) = (net::free_addr(), net::free_addr());
    let record = tempfile::tempdir().unwrap();
    let mut server = serve_with_recorder(listen_addr, ops_addr, record.path());
    assert!(
        wait_until(Duration::from_secs(30), || net::http_status(
            ops_addr, "/readyz"
        ) == Some(200)),
        "server never became ready"
    );
    check_metrics(ops_addr);
    let mut subs: Vec<Client> = (0..3).map(|_| subscriber(listen_addr)).collect();
    for c in subs.iter_mut() {
        assert_eq!(
            prices(c, 5, Duration::from_secs(10)),
            5,
            "prices before SIGTERM"
        );
    }

    let pid = server.child.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let signalled = Instant::now();

    // Readiness fails at once.
    assert!(
        wait_until(Duration::from_millis(500), || net::http_status(
            ops_addr, "/readyz"
        ) == Some(503)),
        "/readyz did not turn 503 right after SIGTERM"
    );
    // Existing subscribers keep receiving during the drain delay, and a
    // request sent now is answered.
    assert_eq!(
        prices(&mut subs[0], 20, Duration::from_millis(DRAIN_MS / 2)),
        20
    );
    let answered = snapshot_answered(&mut subs[1]);
    assert!(answered, "in-flight request not answered during the drain");
    assert!(
        signalled.elapsed() < Duration::from_millis(DRAIN_MS),
        "drain checks ran too long"
    );

    // During the drain delay new connections are still served; after it
    // they are refused.
    let mut late = subscriber(listen_addr);
    assert_eq!(
        prices(&mut late, 1, Duration::from_secs(2)),
        1,
        "new session during the drain"
    );
    drop(late);
    assert!(
        wait_until(Duration::from_millis(DRAIN_MS + 3_000), || !accepting(
            listen_addr
        )),
        "listener still accepting after the drain delay"
    );
    assert!(signalled.elapsed() >= Duration::from_millis(DRAIN_MS));

    disconnected_then_exit_zero(&mut subs, &mut server, signalled);

    capture_is_whole(record.path());
}
