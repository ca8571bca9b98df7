//! `pricewire watch`: one table with --once against the real server, and
//! clear failures for an unreachable server or a refused logon — both
//! in-process and through the binary's exit code.

use crate::util::server;

use std::net::TcpListener;
use std::process::Command;

use clap::Parser;
use pricewire::cli::watch::{watch, WatchArgs, WatchError};
use pricewire::cli::{Cli, Command as Cmd};
use pricewire::client::ClientError;
use server::TestServer;

fn args(list: &[&str]) -> WatchArgs {
    let mut argv = vec!["pricewire", "watch"];
    argv.extend_from_slice(list);
    match Cli::try_parse_from(argv).unwrap().command {
        Cmd::Watch(a) => a,
        other => panic!("parsed as {other:?}"),
    }
}

fn closed_port() -> String {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

#[test]
fn once_prints_one_row_per_symbol() {
    let server = TestServer::start();
    let addr = server.addr.to_string();
    let a = args(&[
        "--connect",
        &addr,
        "--once",
        "--tier",
        "raw",
        "EURUSD",
        "USDJPY",
    ]);
    assert_eq!(a.account, "demo");
    let mut out = Vec::new();
    watch(&a, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("SYMBOL"));
    for (line, name, decimals) in [(lines[1], "EURUSD", 5), (lines[2], "USDJPY", 3)] {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[0], name);
        let bid = cols[1];
        assert_eq!(
            bid.split('.').nth(1).map(str::len),
            Some(decimals),
            "{line}"
        );
        let spread: i64 = cols[3].parse().unwrap();
        assert!(spread > 0, "raw spread in points: {line}");
        assert!(!text.contains('\x1b'), "--once prints plain text");
    }
}

#[test]
fn several_addresses_fail_over_to_one_that_answers() {
    let server = TestServer::start();
    let list = format!("{},{}", closed_port(), server.addr);
    let a = args(&["--connect", &list, "--once", "EURUSD"]);
    let mut out = Vec::new();
    watch(&a, &mut out).unwrap();
    assert!(String::from_utf8(out).unwrap().contains("EURUSD"));
    // None answering: the error names the last address tried.
    let (first, last) = (closed_port(), closed_port());
    let a = args(&["--connect", &format!("{first},{last}"), "--once", "EURUSD"]);
    match watch(&a, &mut Vec::new()) {
        Err(WatchError::Client(ClientError::Unreachable { addr, .. })) => {
            assert_eq!(addr.to_string(), last)
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

#[test]
fn unknown_symbol_is_reported() {
    let server = TestServer::start();
    let a = args(&[
        "--connect",
        &server.addr.to_string(),
        "--once",
        "EURUSD",
        "NOPE",
    ]);
    let mut out = Vec::new();
    match watch(&a, &mut out) {
        Err(WatchError::Incomplete(msg)) => assert!(msg.contains("NOPE (unknown_symbol)"), "{msg}"),
        other => panic!("expected Incomplete, got {other:?}"),
    }
    assert!(String::from_utf8(out).unwrap().contains("EURUSD"));
}

#[test]
fn unreachable_server_and_bad_token_fail_clearly() {
    let a = args(&["--connect", &closed_port(), "--once", "EURUSD"]);
    assert!(matches!(
        watch(&a, &mut Vec::new()),
        Err(WatchError::Client(ClientError::Unreachable { .. }))
    ));
    let server = TestServer::start();
    let a = args(&[
        "--connect",
        &server.addr.to_string(),
        "--token",
        "nope",
        "--once",
        "EURUSD",
    ]);
    assert!(matches!(
        watch(&a, &mut Vec::new()),
        Err(WatchError::Client(ClientError::LogonRejected { .. }))
    ));
}

#[test]
fn binary_exits_non_zero_with_a_message_when_unreachable() {
    let port = closed_port();
    let out = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["watch", "--once", "--connect", &port, "EURUSD"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect to") && err.contains(&port),
        "{err}"
    );
}

/// A token file with `content`, readable by its owner only.
fn token_file(dir: &std::path::Path, content: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("token");
    std::fs::write(&path, content).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

#[test]
fn the_token_comes_from_a_file() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let addr = server.addr.to_string();
    let good = token_file(dir.path(), "demo\n");
    let a = args(&[
        "--connect",
        &addr,
        "--token-file",
        good.to_str().unwrap(),
        "--once",
        "EURUSD",
    ]);
    watch(&a, &mut Vec::new()).unwrap();
    let bad = token_file(dir.path(), "nope\n");
    let a = args(&[
        "--connect",
        &addr,
        "--token-file",
        bad.to_str().unwrap(),
        "--once",
        "EURUSD",
    ]);
    assert!(matches!(
        watch(&a, &mut Vec::new()),
        Err(WatchError::Client(ClientError::LogonRejected { .. }))
    ));
    // Both flags are refused by the parser.
    let both = [
        "pricewire",
        "watch",
        "--token",
        "demo",
        "--token-file",
        "f",
        "EURUSD",
    ];
    assert!(Cli::try_parse_from(both).is_err());
}

/// Runs the binary's `watch --once EURUSD` against `addr` with `extra`
/// flags and `PRICEWIRE_TOKEN` set to `env` (or unset).
fn watch_bin(addr: &str, extra: &[&str], env: Option<&str>) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.args(["watch", "--once", "--connect", addr])
        .args(extra)
        .arg("EURUSD")
        .env_remove("PRICEWIRE_TOKEN");
    if let Some(v) = env {
        cmd.env("PRICEWIRE_TOKEN", v);
    }
    let out = cmd.output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn binary_takes_the_token_from_the_environment_and_warns_about_argv() {
    let server = TestServer::start();
    let addr = server.addr.to_string();
    let (code, out, err) = watch_bin(&addr, &[], Some("demo"));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("EURUSD"), "{out}");
    assert!(!err.contains("warning"), "{err}");
    let (code, _, err) = watch_bin(&addr, &[], Some("Env-wrong-token-7a"));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("logon"), "{err}");
    // --token wins over the environment, and says it is visible.
    let (code, _, err) = watch_bin(&addr, &["--token", "Typed-token-5c"], Some("demo"));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("warning: --token puts the secret in the process list")
            && err.contains("--token-file PATH or PRICEWIRE_TOKEN"),
        "{err}"
    );
    assert!(!err.contains("Typed-token-5c"), "{err}");
    // The public demo token typed out draws no warning.
    let (code, _, err) = watch_bin(&addr, &["--token", "demo"], None);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("warning"), "{err}");
    // An unreadable file or an empty variable: exit 2, the source named.
    let missing = ["--token-file", "/nonexistent/pricewire-token"];
    let (code, _, err) = watch_bin(&addr, &missing, None);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--token-file /nonexistent/pricewire-token"),
        "{err}"
    );
    let (code, _, err) = watch_bin(&addr, &[], Some(""));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("PRICEWIRE_TOKEN: set but empty"), "{err}");
}
