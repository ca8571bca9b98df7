//! The client against a scripted server on loopback, over a manual clock:
//! the handshake, answering the server's PING, a dead server found by
//! unanswered PINGs, reconnecting through a learned URL, re-subscribing.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::*;
use crate::bus::nats::access::Access;
use crate::clock::ManualClock;

const WAIT: Duration = Duration::from_secs(10);

/// Polls `c` until `done` holds, for at most [`WAIT`].
fn poll_until(c: &mut Client, mut done: impl FnMut(&mut Client) -> bool) -> bool {
    let until = Instant::now() + WAIT;
    while Instant::now() < until {
        if done(c) {
            return true;
        }
        c.poll(Duration::from_millis(5), &mut |_, _| {});
    }
    false
}

/// Accepts one client: INFO, then CONNECT and PING answered with PONG.
fn greet(l: &TcpListener) -> (TcpStream, BufReader<TcpStream>) {
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let info = r#"INFO {"max_payload":1024,"connect_urls":["127.0.0.1:1"]}"#;
    s.write_all(format!("{info}\r\n").as_bytes()).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    while line != "PING\r\n" {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "closed before PING");
        if line.starts_with("CONNECT ") {
            assert!(
                line.contains(r#""headers":true,"no_responders":true"#),
                "{line}"
            );
        }
    }
    s.write_all(b"PONG\r\n").unwrap();
    (s, r)
}

fn next_line(r: &mut BufReader<TcpStream>) -> String {
    let mut line = String::new();
    let _ = r.read_line(&mut line);
    line
}

/// The scripted server: a first connection that answers nothing after
/// its own PING, then a second one that delivers a message.
fn server(l: TcpListener, tx: mpsc::Sender<String>, end: mpsc::Receiver<()>) {
    let (mut s, mut r) = greet(&l);
    assert!(next_line(&mut r).starts_with("SUB _INBOX."));
    assert_eq!(next_line(&mut r), "SUB p.> 2\r\n");
    s.write_all(b"PING\r\n").unwrap();
    tx.send(next_line(&mut r)).unwrap();
    let mut pings = 0;
    loop {
        match next_line(&mut r).as_str() {
            "" => break,
            "PING\r\n" => pings += 1,
            _ => {}
        }
    }
    tx.send(format!("pings {pings}")).unwrap();
    let (mut s, mut r) = greet(&l);
    let subs = [next_line(&mut r), next_line(&mut r)];
    tx.send(subs.concat()).unwrap();
    s.write_all(b"MSG p.x 2 2\r\nhi\r\n").unwrap();
    let _ = end.recv_timeout(WAIT);
}

#[test]
fn a_silent_server_is_dropped_and_the_client_comes_back_subscribed() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("nats://{}", l.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    let (end_tx, end_rx) = mpsc::channel();
    let script = std::thread::spawn(move || server(l, tx, end_rx));
    let clock = ManualClock::new(0);
    let stats = Arc::new(BusStats::default());
    let mut c =
        Client::connect(&[url], Access::open(), WAIT, clock.clone(), stats.clone()).unwrap();
    assert_eq!(
        c.servers.len(),
        2,
        "learned the cluster URL: {:?}",
        c.servers
    );
    c.subscribe("p.>");
    let mut answer = String::new();
    assert!(poll_until(&mut c, |_| {
        answer = rx.try_recv().unwrap_or_default();
        !answer.is_empty()
    }));
    assert_eq!(answer, "PONG\r\n", "the server's PING is answered");
    // Two PINGs go unanswered; at the third interval the server is dead.
    for _ in 0..3 {
        clock.advance(PING_INTERVAL);
        c.poll(Duration::ZERO, &mut |_, _| {});
    }
    assert_eq!((stats.disconnects.get(), stats.connected.get()), (1, 0));
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), "pings 2");
    // The next server is the learned one (refused), then the first again.
    assert!(poll_until(&mut c, |c| {
        clock.advance(Duration::from_secs(3));
        c.conn.is_some()
    }));
    assert!(stats.take_reconnected());
    assert_eq!(stats.connected.get(), 1);
    let subs = rx.recv_timeout(WAIT).unwrap();
    assert!(
        subs.starts_with("SUB _INBOX.") && subs.ends_with("SUB p.> 2\r\n"),
        "{subs}"
    );
    let mut got = Vec::new();
    let until = Instant::now() + WAIT;
    while got.is_empty() && Instant::now() < until {
        c.poll(Duration::from_millis(5), &mut |s, p| {
            got.push((s.to_vec(), p.to_vec()))
        });
    }
    assert_eq!(got, [(b"p.x".to_vec(), b"hi".to_vec())]);
    end_tx.send(()).unwrap();
    script.join().unwrap();
}

#[test]
fn a_closed_port_a_mute_server_and_an_unanswered_request_all_end_in_time() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let stats = Arc::new(BusStats::default());
    let clock = Arc::new(crate::clock::MonotonicClock);
    let refused = Client::connect(
        &[format!("nats://{addr}")],
        Access::open(),
        Duration::from_millis(300),
        clock.clone(),
        stats.clone(),
    );
    assert!(refused
        .is_err_and(|why| why.kind == FailKind::Io && why.reason.contains(&addr.to_string())));
    // A listener that never says INFO: the attempt ends at its deadline.
    let mute = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("nats://{}", mute.local_addr().unwrap());
    let t0 = Instant::now();
    let silent = Client::connect(
        &[url],
        Access::open(),
        Duration::from_millis(300),
        clock.clone(),
        stats.clone(),
    );
    assert!(silent.is_err());
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("nats://{}", l.local_addr().unwrap());
    let script = std::thread::spawn(move || {
        let (_s, mut r) = greet(&l);
        while !next_line(&mut r).is_empty() {}
    });
    let mut c = Client::connect(&[url], Access::open(), WAIT, clock, stats).unwrap();
    let t0 = Instant::now();
    let e = c.request("$JS.API.INFO", &[], b"", Duration::from_millis(100));
    assert_eq!(e.err(), Some(RequestError::Timeout));
    assert!(t0.elapsed() < WAIT);
    drop(c);
    script.join().unwrap();
}

/// Publish-to-receive round trips of this client through a real
/// nats-server, for the client decision in docs/design.md (the same
/// measurement as the async-nats program described there).
#[test]
#[ignore = "a measurement: cargo test --release --lib rtt_through_nats_server -- --ignored --nocapture"]
fn rtt_through_nats_server() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = std::process::Command::new("nats-server")
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nats-server on PATH");
    let url = format!("nats://127.0.0.1:{port}");
    let clock = Arc::new(crate::clock::MonotonicClock);
    let stats = Arc::new(BusStats::default());
    let mut c = Client::connect(&[url], Access::open(), WAIT, clock, stats).unwrap();
    c.subscribe("cmp.price.>");
    let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    let mut frame = [7u8; 76];
    for i in 0..20_000u64 {
        frame[..8].copy_from_slice(&i.to_le_bytes());
        let t = Instant::now();
        assert!(c.publish("cmp.price.EURUSD", &frame) && c.flush());
        let mut got = false;
        while !got {
            c.poll(Duration::from_millis(5), &mut |_, p| {
                got |= p[..8] == i.to_le_bytes()
            });
            assert!(t.elapsed() < WAIT, "no echo");
        }
        if i >= 2_000 {
            h.record(t.elapsed().as_nanos() as u64).unwrap();
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    eprintln!(
        "own client: publish+flush -> receive p50 {} us, p99 {} us",
        h.value_at_quantile(0.5) / 1000,
        h.value_at_quantile(0.99) / 1000
    );
}
