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

#[path = "util/net.rs"]
mod net;

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
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let stat = std::fs::read_to_string(e.ok()?.path().join("stat")).ok()?;
        let open = stat.find('(')?;
        let close = stat.rfind(')')?;
        let name = stat[open + 1..close].to_string();
        // Fields after the name start at field 3; rt_priority is field 40,
        // policy field 41.
        let rest: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        Some((
            name,
            rest.get(38)?.parse().ok()?,
            rest.get(37)?.parse().ok()?,
        ))
    })
    .collect()
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

fn serve(extra: &[&str]) -> Child {
    serve_with_ops("127.0.0.1:0", extra)
}

fn serve_with_ops(ops: &str, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["serve", "--listen", "127.0.0.1:0", "--ops-listen", ops])
        .args(["--synthetic-rate", "200", "--drain-delay-ms", "0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pricewire serve")
}

#[test]
fn price_stages_run_at_fifo_the_rest_at_normal_priority() {
    let prio = PRIORITY.to_string();
    let permitted = pricewire::pipeline::affinity::probe_rt_priority(PRIORITY);
    let ops = net::free_addr();
    let child = serve_with_ops(&ops.to_string(), &["--rt-priority", &prio]);
    if let Err(why) = permitted {
        // Not allowed here: the server must refuse to start, saying why.
        let out = child.wait_with_output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("real-time priority 20"), "{err}");
        assert!(err.contains("sched_setscheduler"), "{err} / probe: {why}");
        return;
    }
    let pid = child.id();
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        seen = threads(pid);
        let started = ["pw-shard0", "pw-feed", "pw-acceptor", "pw-dispatch"]
            .iter()
            .all(|p| seen.iter().any(|(n, _, _)| n.starts_with(p)));
        if started {
            break;
        }
        std::thread::yield_now();
    }
    let fifo = libc::SCHED_FIFO as i64;
    let mut price_threads = 0;
    for (name, policy, rt) in &seen {
        if name.starts_with("pw-shard") || name.starts_with("pw-feed") {
            price_threads += 1;
            assert_eq!((*policy, *rt), (fifo, 20), "{name}: {seen:?}");
        } else {
            assert_eq!(
                (*policy, *rt),
                (0, 0),
                "{name} must stay SCHED_OTHER: {seen:?}"
            );
        }
    }
    // At least shard 0 and the synthetic feed.
    assert!(price_threads >= 2, "{seen:?}");
    assert!(seen.iter().any(|(n, _, _)| n == "pw-acceptor"), "{seen:?}");
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
fn spinning_waits_at_real_time_priority_are_refused() {
    let prio = PRIORITY.to_string();
    for (flag, wait) in [("--shard-wait", "spin"), ("--feed-wait", "spin-yield")] {
        let out = serve(&["--rt-priority", &prio, flag, wait])
            .wait_with_output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {wait}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("--rt-priority 20 with {flag} {wait}")),
            "{err}"
        );
        assert!(err.contains("use park or spin-park"), "{err}");
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
