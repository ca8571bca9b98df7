use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use mio::{Events, Poll, Token};

use super::*;
use crate::runtime::proxy::header::encode;
use crate::runtime::proxy::Command;

/// Hands out its chunks one read at a time (each cut to the caller's
/// buffer), then WouldBlock; records the largest read asked for.
struct Chunks {
    chunks: VecDeque<Vec<u8>>,
    eof: bool,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(mut c) = self.chunks.pop_front() else {
            return match self.eof {
                true => Ok(0),
                false => Err(io::ErrorKind::WouldBlock.into()),
            };
        };
        let n = c.len().min(buf.len());
        buf[..n].copy_from_slice(&c[..n]);
        if n < c.len() {
            self.chunks.push_front(c.split_off(n));
        }
        Ok(n)
    }
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn reads_stop_at_the_end_of_the_header() {
    let mut bytes = encode(Some((sa("127.0.0.9:5000"), sa("127.0.0.1:9400"))), &[]).unwrap();
    let len = bytes.len();
    bytes.extend_from_slice(b"logon frame");
    let mut r = Chunks {
        chunks: [bytes[..5].to_vec(), bytes[5..].to_vec()].into(),
        eof: false,
    };
    let mut buf = Vec::new();
    let Outcome::Done(h) = read_header(&mut r, &mut buf) else {
        panic!("header expected");
    };
    assert_eq!(
        (h.len, h.src, buf.len()),
        (len, Some(sa("127.0.0.9:5000")), len)
    );
    let rest: Vec<u8> = r.chunks.into_iter().flatten().collect();
    assert_eq!(
        rest, b"logon frame",
        "the bytes after the header stay unread"
    );
}

#[test]
fn a_partial_header_waits_and_resumes() {
    let bytes = encode(None, &[]).unwrap();
    let mut buf = Vec::new();
    let mut r = Chunks {
        chunks: [bytes[..7].to_vec()].into(),
        eof: false,
    };
    assert_eq!(read_header(&mut r, &mut buf), Outcome::Wait);
    assert_eq!(buf.len(), 7);
    r.chunks.push_back(bytes[7..].to_vec());
    let Outcome::Done(h) = read_header(&mut r, &mut buf) else {
        panic!("header expected");
    };
    assert_eq!(h.command, Command::Local);
}

#[test]
fn eof_mid_header_and_garbage_are_failures() {
    let mut r = Chunks {
        chunks: [b"\r\n\r\n".to_vec()].into(),
        eof: true,
    };
    let got = read_header(&mut r, &mut Vec::new());
    assert_eq!(got, Outcome::Failed(ProxyFailure::PeerClosed));
    let mut r = Chunks {
        chunks: [vec![0, 0, 0, 40, 0x5b, 0x50]].into(),
        eof: false,
    };
    let got = read_header(&mut r, &mut Vec::new());
    assert_eq!(got, Outcome::Failed(ProxyFailure::BadSignature));
}

/// A connected pair on loopback: (client side, server side as mio).
fn pair() -> (std::net::TcpStream, TcpStream, SocketAddr) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, peer) = l.accept().unwrap();
    s.set_nonblocking(true).unwrap();
    (c, TcpStream::from_std(s), peer)
}

#[test]
fn waits_are_bounded_in_count_and_time() {
    let poll = Poll::new().unwrap();
    let ms = 1_000_000;
    let mut w = ProxyWait::new(2, 100 * ms, Token(2));
    let (_c1, s1, p1) = pair();
    let (_c2, s2, p2) = pair();
    let (_c3, s3, p3) = pair();
    assert!(w.insert(poll.registry(), s1, p1, 0).is_ok());
    assert!(w.insert(poll.registry(), s2, p2, 50 * ms).is_ok());
    let Err((_, why)) = w.insert(poll.registry(), s3, p3, 50 * ms) else {
        panic!("a third wait must be refused");
    };
    assert_eq!(why, ProxyFailure::Overflow);
    assert_eq!(w.next_due_in(10 * ms), Some(90 * ms));
    let mut ended = Vec::new();
    w.expire(poll.registry(), 99 * ms, |e| ended.push(e.1));
    assert!(ended.is_empty(), "nothing is due before its deadline");
    w.expire(poll.registry(), 100 * ms, |e| ended.push(e.1));
    assert_eq!(ended, vec![p1]);
    assert_eq!((w.len(), w.next_due_in(100 * ms)), (1, Some(50 * ms)));
    w.expire(poll.registry(), 500 * ms, |e| {
        assert_eq!(e.2, Outcome::Failed(ProxyFailure::Timeout));
        ended.push(e.1)
    });
    assert_eq!((ended, w.len(), w.next_due_in(0)), (vec![p1, p2], 0, None));
}

#[test]
fn a_header_over_a_real_socket_ends_the_wait_and_leaves_the_rest() {
    let mut poll = Poll::new().unwrap();
    let mut w = ProxyWait::new(8, u64::MAX / 2, Token(2));
    let (mut c, s, peer) = pair();
    w.insert(poll.registry(), s, peer, 0).unwrap();
    let mut bytes = encode(Some((sa("127.0.0.9:5000"), sa("127.0.0.1:9400"))), &[]).unwrap();
    bytes.extend_from_slice(b"after");
    c.write_all(&bytes).unwrap();
    let mut events = Events::with_capacity(4);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let ended = loop {
        assert!(std::time::Instant::now() < deadline, "no readiness in 5 s");
        poll.poll(&mut events, Some(Duration::from_millis(100)))
            .unwrap();
        let mut got = None;
        for e in events.iter() {
            got = got.or(w.on_ready(poll.registry(), e.token()));
        }
        if let Some(g) = got {
            break g;
        }
    };
    let (mut stream, p, outcome) = ended;
    assert_eq!(p, peer);
    let Outcome::Done(h) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(h.src, Some(sa("127.0.0.9:5000")));
    assert_eq!(w.len(), 0);
    let mut rest = [0u8; 16];
    let n = stream.read(&mut rest).unwrap();
    assert_eq!(&rest[..n], b"after");
    assert!(
        w.on_ready(poll.registry(), Token(2)).is_none(),
        "slot is free"
    );
    assert!(w.on_ready(poll.registry(), Token(1)).is_none(), "not ours");
}

#[test]
fn a_discarded_wait_frees_its_slot_and_its_deadline_is_skipped() {
    let poll = Poll::new().unwrap();
    let ms = 1_000_000;
    let mut w = ProxyWait::new(2, 100 * ms, Token(2));
    let (mut c1, s1, p1) = pair();
    let (_c2, s2, p2) = pair();
    assert!(w.insert(poll.registry(), s1, p1, 0).is_ok());
    assert!(w.insert(poll.registry(), s2, p2, 10 * ms).is_ok());
    assert_eq!(w.peer(Token(2)), Some(p1));
    w.discard(poll.registry(), Token(2));
    w.discard(poll.registry(), Token(2)); // twice: nothing more happens
    assert_eq!((w.len(), w.peer(Token(2))), (1, None));
    let mut byte = [0u8; 1];
    assert_eq!(
        c1.read(&mut byte).unwrap(),
        0,
        "the discarded socket is closed"
    );
    assert_eq!(
        w.next_due_in(0),
        Some(110 * ms),
        "the live wait's deadline is next"
    );
    // The freed slot takes a new wait; the old deadline does not end it.
    let (_c3, s3, p3) = pair();
    assert!(w.insert(poll.registry(), s3, p3, 50 * ms).is_ok());
    let mut ended = Vec::new();
    w.expire(poll.registry(), 105 * ms, |e| ended.push(e.1));
    assert!(ended.is_empty(), "no wait is due at 105 ms");
    w.expire(poll.registry(), 150 * ms, |e| ended.push(e.1));
    assert_eq!(ended, vec![p2, p3]);
}
