//! A burst of connections larger than one shard turn's accept batch is
//! answered in full: every connection that reaches a shard's inbox is
//! taken, even when the acceptor's wake-ups coalesce and no connection
//! arrives after the burst.
//!
//! The burst is made with SIGSTOP: the server is stopped while 1,500
//! clients connect (the kernel completes their handshakes into the
//! listen backlog) and send their Logon; on SIGCONT the acceptor drains
//! the backlog into the one shard's inbox far faster than the shard takes
//! 256 per wake. Each client must get an answer to its Logon (accepted,
//! or refused busy with a retry-after) within the deadline. Before the
//! fix, the connections left in the inbox after the last wake were never
//! taken: neither logged on nor cut, until some later connection arrived
//! (found by the bench's 10,000-terminal edge-capacity run).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use pricewire::wire::{self, Message};

use crate::util::net;

const BURST: usize = 1_500;
const DEADLINE: Duration = Duration::from_secs(45);

fn logon_frame() -> Vec<u8> {
    let mut out = vec![0u8; 128];
    let m = wire::Logon {
        heartbeat_interval_ms: 30_000,
        account: b"demo",
        token: b"demo",
    };
    let n = wire::encode_logon(&mut out, &m).unwrap();
    out.truncate(n);
    out
}

/// Connects and sends a Logon; the server reads it whenever it gets to it.
fn connect_and_logon(addr: SocketAddr, frame: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.write_all(frame).unwrap();
    s
}

/// Reads one server frame from `s` before `deadline`: true for a logon
/// answer (accepted or rejected), false if none came.
fn answered(s: &mut TcpStream, deadline: Instant) -> bool {
    let mut buf = vec![0u8; 4096];
    let mut have = 0;
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match s.read(&mut buf[have..]) {
            Ok(0) | Err(_) => return false,
            Ok(n) => have += n,
        }
        if let Ok(Some(len)) = wire::split_with_max(&buf[..have], wire::SERVER_FRAME_LEN_MAX) {
            return matches!(
                wire::decode(&buf[..len]),
                Ok(Message::LogonAccepted(_)) | Ok(Message::LogonRejected(_))
            );
        }
    }
    false
}

#[test]
fn every_connection_of_a_burst_beyond_the_accept_batch_is_answered() {
    net::raise_open_files_limit(BURST + 256);
    let (listen, ops) = (net::free_addr(), net::free_addr());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.args(["serve", "--no-synthetic", "--shards", "1"])
        .args([
            "--listen",
            &listen.to_string(),
            "--ops-listen",
            &ops.to_string(),
        ])
        .args([
            "--ip-connections-max",
            "20000",
            "--ip-connect-burst",
            "20000",
        ])
        .args([
            "--ip-connect-rate-per-s",
            "1000000",
            "--accept-burst",
            "20000",
        ])
        .args([
            "--accept-rate-per-s",
            "1000000",
            "--logon-rate-per-s",
            "1000000",
        ])
        .args(["--logon-timeout-ms", "60000", "--loop-lag-target-ms", "0"])
        .args(["--busy-retry-min-ms", "100", "--busy-retry-max-ms", "200"]);
    let server = net::start_ready(&mut cmd, ops);
    let frame = logon_frame();
    // One logon first: the account's one password verification is done
    // and cached, so the burst's logons are cheap.
    let mut first = connect_and_logon(listen, &frame);
    assert!(answered(&mut first, Instant::now() + DEADLINE));

    let pid = server.0.id();
    net::signal(pid, "-STOP");
    let mut clients: Vec<TcpStream> = (0..BURST)
        .map(|_| connect_and_logon(listen, &frame))
        .collect();
    net::signal(pid, "-CONT");

    let deadline = Instant::now() + DEADLINE;
    let unanswered = clients
        .iter_mut()
        .map(|s| answered(s, deadline))
        .filter(|ok| !ok)
        .count();
    assert_eq!(
        unanswered, 0,
        "{unanswered} of {BURST} connections got no answer to their Logon"
    );
}
