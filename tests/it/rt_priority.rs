//! `pricewire serve --rt-priority N` on the real binary: the threads that
//! carry prices (feed, gateway shards hosting engine and ingest) run at
//! SCHED_FIFO N and everything else at normal priority — or, where this
//! user may not use real-time priority, start-up fails at once with the
//! reason instead of running at normal priority. Spinning waits at
//! real-time priority are refused.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::net;

const PRIORITY: u8 = 20;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// (name, policy, rt_priority) of every thread of `pid`, from /proc.
fn threads(pid: u32) -> Vec<(String, i64, i64)> {
    let dir = format!("/proc/{pid}/task");
    pricewire::runtime::affinity::thread_schedules(std::path::Path::new(&dir))
}

/// The body of `GET /metrics`, or empty while the listener is not up.
fn metrics(addr: SocketAddr) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if s.write_all(req.as_bytes()).is_err() {
        return String::new();
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

/// `serve` with `extra` flags; stderr captured only where the test reads
/// it (a refused start), so a running server never blocks on a full pipe.
fn serve(extra: &[&str]) -> Child {
    spawn_serve("127.0.0.1:0", extra, Stdio::piped())
}

fn spawn_serve(ops: &str, extra: &[&str], stderr: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["serve", "--listen", "127.0.0.1:0", "--ops-listen", ops])
        .args(["--synthetic-rate", "200", "--drain-delay-ms", "0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn pricewire serve")
}

/// Starts `serve --rt-priority 20` with `extra` and checks that exactly
/// the threads named in `price_threads` (prefixes) run at SCHED_FIFO 20,
/// every other thread at normal priority, and that `/metrics` says the
/// same. Where this user may not use real-time priority, checks that
/// start-up fails with the reason instead.
fn check_placement(extra: &[&str], price_threads: &[&str]) {
    let prio = PRIORITY.to_string();
    let mut args = vec!["--rt-priority", prio.as_str()];
    args.extend_from_slice(extra);
    if let Err(why) = pricewire::runtime::affinity::probe_rt_priority(PRIORITY) {
        // Not allowed here: the server must refuse to start, saying why.
        let out = serve(&args).wait_with_output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("real-time priority 20"), "{err}");
        assert!(err.contains("sched_setscheduler"), "{err} / probe: {why}");
        return;
    }
    let ops = net::free_addr();
    let child = spawn_serve(&ops.to_string(), &args, Stdio::null());
    let pid = child.id();
    let server = Server(child);
    let fifo = libc::SCHED_FIFO as i64;
    let is_price = |name: &str| price_threads.iter().any(|p| name.starts_with(p));
    // Threads name themselves before they place themselves: wait until
    // every expected thread exists and every price thread is placed.
    let placed = |seen: &[(String, i64, i64)]| {
        price_threads
            .iter()
            .chain(&["pw-acceptor", "pw-dispatch"])
            .all(|p| seen.iter().any(|(n, _, _)| n.starts_with(p)))
            && seen
                .iter()
                .filter(|(n, _, _)| is_price(n))
                .all(|(_, policy, _)| *policy == fifo)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = threads(pid);
    while Instant::now() < deadline && !placed(&seen) {
        std::thread::yield_now();
        seen = threads(pid);
    }
    for (name, policy, rt) in &seen {
        if is_price(name) {
            assert_eq!((*policy, *rt), (fifo, 20), "{name}: {seen:?}");
        } else {
            assert_eq!(
                (*policy, *rt),
                (0, 0),
                "{name} must stay SCHED_OTHER: {seen:?}"
            );
        }
    }
    for p in price_threads {
        assert!(
            seen.iter().any(|(n, _, _)| n.starts_with(p)),
            "no {p}: {seen:?}"
        );
    }
    // The same, as the ops endpoint reports it.
    let want = [
        "pricewire_thread_rt_priority{thread=\"pw-shard0\"} 20\n",
        "pricewire_thread_rt_priority{thread=\"pw-acceptor\"} 0\n",
    ];
    let mut body = String::new();
    while Instant::now() < deadline && !want.iter().all(|w| body.contains(w)) {
        body = metrics(ops);
    }
    for w in want {
        assert!(body.contains(w), "{w} missing from /metrics:\n{body}");
    }
    drop(server);
}

#[test]
fn shared_threading_puts_shards_and_feeds_at_fifo_and_nothing_else() {
    // The engine and the provider ingest run inside shard 0 here.
    check_placement(&["--feed-listen", "127.0.0.1:0"], &["pw-shard", "pw-feed"]);
}

#[test]
fn dedicated_threading_puts_ingest_engine_feeds_and_shards_at_fifo() {
    check_placement(
        &["--threading", "dedicated", "--feed-listen", "127.0.0.1:0"],
        &["pw-shard", "pw-feed", "pw-engine", "pw-ingest"],
    );
}

#[test]
fn waits_other_than_park_at_real_time_priority_are_refused() {
    let prio = PRIORITY.to_string();
    for (flag, wait) in [
        ("--shard-wait", "spin"),
        ("--feed-wait", "spin-yield"),
        ("--feed-wait", "spin-park"),
    ] {
        let out = serve(&["--rt-priority", &prio, flag, wait])
            .wait_with_output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {wait}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("--rt-priority 20 with {flag} {wait}")),
            "{err}"
        );
        assert!(err.contains("use park"), "{err}");
    }
}

#[test]
fn priorities_outside_1_to_99_are_refused() {
    for bad in ["0", "100"] {
        let out = serve(&["--rt-priority", bad]).wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("1..=99"), "{err}");
    }
}
