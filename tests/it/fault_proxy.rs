//! The fault proxy on real loopback TCP: an echo server behind the proxy,
//! one test per toxic. Timing assertions are lower bounds only; every wait
//! is a socket timeout.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use pricewire::resilience::proxy::{FaultProxy, ProxyConfig, Toxic, ToxicKind};

const IO_TIMEOUT: Duration = Duration::from_secs(5);

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// An echo server on loopback: every connection gets its bytes back and is
/// closed after the peer's close. Its threads end with the test process.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind(loopback()).unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming().take(64).flatten() {
            thread::spawn(move || echo(stream));
        }
    });
    addr
}

fn echo(mut stream: TcpStream) {
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = stream.read(&mut buf) {
        if stream.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

fn proxy() -> FaultProxy {
    FaultProxy::start(loopback(), echo_server()).unwrap()
}

fn connect(proxy: &FaultProxy) -> TcpStream {
    let s = TcpStream::connect(proxy.local_addr()).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn round_trip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
    s.write_all(msg).unwrap();
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).unwrap();
    back
}

#[test]
fn passthrough_forwards_both_ways() {
    let p = proxy();
    let mut s = connect(&p);
    for msg in [&b"ping"[..], b"price EURUSD", &[0u8; 10_000]] {
        assert_eq!(round_trip(&mut s, msg), msg);
    }
    let status = p.status();
    assert_eq!(status.bytes_up, 10_016);
    assert_eq!(status.accepted, 1);
}

#[test]
fn latency_toxic_delays_each_direction() {
    let p = proxy();
    let mut s = connect(&p);
    round_trip(&mut s, b"warm");
    p.set_toxic(Toxic::Latency {
        latency_ms: 100,
        jitter_ms: 20,
    });
    let start = Instant::now();
    assert_eq!(round_trip(&mut s, b"tick"), b"tick");
    let elapsed = start.elapsed();
    // Applied up and down: at least twice the configured floor.
    assert!(
        elapsed >= Duration::from_millis(200),
        "round trip took {elapsed:?}"
    );
    p.clear_toxic(ToxicKind::Latency);
    assert_eq!(round_trip(&mut s, b"fast"), b"fast");
}

fn assert_reset(s: &mut TcpStream) {
    // Depending on when the RST lands, the write or the read reports it.
    if let Err(e) = s.write_all(b"x") {
        assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
        return;
    }
    let mut buf = [0u8; 16];
    match s.read(&mut buf) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
        Ok(n) => panic!("expected a reset, read {n} bytes"),
    }
}

#[test]
fn reset_toxic_resets_open_and_new_connections() {
    let p = proxy();
    let mut open = connect(&p);
    round_trip(&mut open, b"hello");
    p.set_toxic(Toxic::Reset);
    let mut buf = [0u8; 16];
    let err = open
        .read(&mut buf)
        .expect_err("the open connection must be reset");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");

    let mut fresh = connect(&p);
    assert_reset(&mut fresh);
    assert!(p.status().resets >= 2);
}

#[test]
fn blackhole_swallows_data_and_the_read_times_out() {
    let p = proxy();
    p.set_toxic(Toxic::Blackhole);
    let mut s = connect(&p);
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    s.write_all(b"anyone there?").unwrap();
    let mut buf = [0u8; 64];
    let err = s.read(&mut buf).expect_err("nothing may come back");
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err}"
    );
    assert_eq!(p.status().bytes_up, 0);
}

#[test]
fn stall_holds_data_and_keeps_the_connection() {
    let p = proxy();
    let mut s = connect(&p);
    round_trip(&mut s, b"before");
    p.set_toxic(Toxic::Stall);
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s.write_all(b"held").unwrap();
    let mut buf = [0u8; 4];
    let err = s.read_exact(&mut buf).expect_err("stalled");
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err}"
    );
    p.clear_toxic(ToxicKind::Stall);
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.read_exact(&mut buf).unwrap();
    assert_eq!(
        &buf, b"held",
        "the stalled bytes arrive once the stall ends"
    );
}

#[test]
fn garbage_injection_changes_the_bytes() {
    let p = proxy();
    p.set_toxic(Toxic::Garbage {
        probability_pct: 100,
        max_bytes: 8,
    });
    let mut s = connect(&p);
    let sent = b"EURUSD 1.08512 1.08515";
    s.write_all(sent).unwrap();
    // At least one byte is inserted on the way up and one on the way down.
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while got.len() < sent.len() + 2 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed early after {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    assert_ne!(&got[..], &sent[..]);
    assert!(p.status().garbage_bytes >= 2);
}

#[test]
fn bandwidth_toxic_paces_the_stream() {
    let p = proxy();
    p.set_toxic(Toxic::Bandwidth {
        rate_bytes_per_s: 20_000,
    });
    let mut s = connect(&p);
    let start = Instant::now();
    let msg = vec![7u8; 4_000];
    assert_eq!(round_trip(&mut s, &msg), msg);
    // 4,000 bytes at 20,000 B/s is 200 ms per direction.
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn slow_close_delays_the_close() {
    let p = proxy();
    p.set_toxic(Toxic::SlowClose { delay_ms: 150 });
    let mut s = connect(&p);
    round_trip(&mut s, b"bye");
    let start = Instant::now();
    s.shutdown(Shutdown::Write).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(s.read(&mut buf).unwrap(), 0, "the close arrives, late");
    assert!(
        start.elapsed() >= Duration::from_millis(150),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn connections_over_the_limit_are_closed_and_counted() {
    let mut cfg = ProxyConfig::new(loopback(), echo_server());
    cfg.max_connections = 1;
    let p = FaultProxy::start_with(cfg).unwrap();
    let mut first = connect(&p);
    round_trip(&mut first, b"one");
    let mut second = connect(&p);
    let mut buf = [0u8; 8];
    let closed = match second.read(&mut buf) {
        Ok(0) => true,
        Err(e) => e.kind() == ErrorKind::ConnectionReset,
        Ok(_) => false,
    };
    assert!(closed, "the second connection must be refused");
    assert_eq!(p.status().rejected_over_limit, 1);
    assert_eq!(round_trip(&mut first, b"still"), b"still");
}

#[test]
fn non_loopback_listen_is_refused() {
    let err = FaultProxy::start("0.0.0.0:0".parse().unwrap(), loopback()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

#[test]
fn control_port_sets_toxics_and_reports_status() {
    let mut p = proxy();
    let control = p.serve_control(loopback()).unwrap();
    let stream = TcpStream::connect(control).unwrap();
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut lines = BufReader::new(stream);
    let mut ask = |cmd: &str| {
        writeln!(writer, "{cmd}").unwrap();
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    };
    assert_eq!(ask("toxic latency 50 10"), "ok toxics=latency(50ms,10ms)");
    assert_eq!(ask("toxic stall"), "ok toxics=latency(50ms,10ms),stall");
    assert!(ask("status").starts_with("ok accepted=0 active=0"));
    assert!(ask("toxic latency lots").starts_with("err latency_ms"));
    assert_eq!(ask("toxic clear"), "ok toxics=none");
    assert_eq!(p.toxics(), Default::default());
    assert_eq!(ask("shutdown"), "ok toxics=none");
    assert!(p.is_stopping());
}
