//! `pricewire watch`: one table with --once against the real server, and
//! clear failures for an unreachable server or a refused logon — both
//! in-process and through the binary's exit code.

#[path = "util/server.rs"]
mod server;

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
