//! Start-up of the real binary: every listener is bound before anything
//! else starts, a port in use exits 2 naming its flag with nothing else
//! started, bad numbers are refused naming the flag, and a plain `serve`
//! does not wait out a start-up stagger.

use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::util::net;

const BIN: &str = env!("CARGO_BIN_EXE_pricewire");

/// Runs `pricewire serve ARGS` to its end (bounded: 20 s).
fn serve(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = start + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve {args:?} did not exit within 20 s");
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
    (child.wait_with_output().unwrap(), start.elapsed())
}

fn refused(args: &[&str], needles: &[&str]) {
    let (out, _) = serve(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks {n:?}: {err}");
    }
}

#[test]
fn a_subscriber_port_in_use_exits_2_before_anything_else_starts() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let ops = net::free_addr();
    let feed = net::free_addr();
    // Probe the ops and ingest ports for as long as the process lives: no
    // connection may ever be accepted there.
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let prober = std::thread::spawn(move || {
        let mut accepted = 0;
        while !d.load(Ordering::Acquire) {
            for a in [ops, feed] {
                if TcpStream::connect_timeout(&a, Duration::from_millis(50)).is_ok() {
                    accepted += 1;
                }
            }
        }
        accepted
    });
    // An ordinal whose stagger would last 10 s, a synthetic feed and a
    // recorder: none may start.
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("cap");
    let (out, took) = serve(&[
        "--listen",
        &busy_addr,
        "--ops-listen",
        &ops.to_string(),
        "--feed-listen",
        &feed.to_string(),
        "--ordinal",
        "20",
        "--record",
        capture.to_str().unwrap(),
    ]);
    done.store(true, Ordering::Release);
    let accepted = prober.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("--listen {busy_addr}")), "{err}");
    assert_eq!(accepted, 0, "another listener was bound");
    assert!(
        took < Duration::from_secs(5),
        "waited {took:?}: stagger ran"
    );
    assert!(!capture.exists(), "the recorder started");
    assert!(out.stdout.is_empty(), "the feed reported: {:?}", out.stdout);
    assert!(
        !err.contains("stagger") && !err.contains("starting pricewire"),
        "{err}"
    );
    drop(busy);
}

#[test]
fn an_ops_port_in_use_is_named_and_the_subscriber_port_never_listens() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let listen = net::free_addr();
    let (out, _) = serve(&["--listen", &listen.to_string(), "--ops-listen", &busy_addr]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("--ops-listen {busy_addr}")), "{err}");
    drop(busy);
}

#[test]
fn negative_and_absurd_numbers_are_refused_naming_the_flag() {
    refused(&["--synthetic-rate", "-1"], &["--synthetic-rate", "-1"]);
    refused(&["--synthetic-rate", "-10"], &["--synthetic-rate", "-10"]);
    refused(
        &["--synthetic-rate", "1000000000000"],
        &["--synthetic-rate"],
    );
    refused(&["--accept-rate-per-s", "0"], &["--accept-rate-per-s 0"]);
    refused(&["--msg-rate-per-s", "0"], &["--msg-rate-per-s 0"]);
    refused(&["--listen-backlog", "0"], &["--listen-backlog"]);
    refused(&["--shards", "-2"], &["--shards", "-2"]);
    refused(
        &["--max-update-hz", "1001"],
        &["--max-update-hz 1001", "1..=1000"],
    );
    refused(&["--max-update-hz", "-1"], &["--max-update-hz", "-1"]);
}

#[test]
fn a_negative_number_in_the_config_file_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[serve]\nreport-interval-ms = -5\n").unwrap();
    refused(
        &["--config", path.to_str().unwrap()],
        &["serve.report-interval-ms", "-5"],
    );
}

#[test]
fn a_plain_serve_with_a_hostname_starts_at_once() {
    let ops = net::free_addr();
    let start = Instant::now();
    let mut child = Command::new(BIN)
        .args(["serve", "--no-listen", "--synthetic-rate", "1000"])
        .args(["--ops-listen", &ops.to_string(), "--duration-s", "20"])
        .args(["--stagger-step-ms", "1000", "--stagger-cap-ms", "60000"])
        // A StatefulSet-like host name: ordinal 29, 29 s of stagger if
        // it were taken for a pod name.
        .env("HOSTNAME", "pricewire-29")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut ready = false;
    while start.elapsed() < Duration::from_secs(8) {
        if net::http_status(ops, "/readyz") == Some(200) {
            ready = true;
            break;
        }
        std::thread::park_timeout(Duration::from_millis(20));
    }
    let took = start.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    assert!(ready, "not ready after {took:?}");
}
