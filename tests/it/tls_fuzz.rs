//! Random and mutated TLS record streams, split at random points, sent
//! over real TCP to the real binary's TLS listeners (the acceptor, the
//! handshake driver, the shard or the ingest behind them), under shared
//! threading: after each stream the process is alive, /livez answers 200,
//! and a TLS subscriber logged on throughout keeps its prices with no gap.
//! Each stream ends with our half-close, so the server answers or closes
//! at once instead of waiting out its handshake deadline.

use crate::util::pki;
use crate::util::tls_serve;

use std::sync::Arc;

use proptest::prelude::*;
use tls_serve::{raw_conversation, Answer, TlsServe, Watch};

/// A real ClientHello record from rustls (TLS 1.2 and 1.3 offered).
fn client_hello(ca: &pki::Ca) -> Vec<u8> {
    let cfg = tls_serve::client_config(ca, rustls::ALL_VERSIONS);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut c = rustls::ClientConnection::new(Arc::clone(&cfg), name).unwrap();
    let mut out = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut out).unwrap();
    }
    out
}

fn record(typ: u8, body: &[u8]) -> Vec<u8> {
    let mut r = vec![typ, 3, 3];
    r.extend_from_slice(&(body.len() as u16).to_be_bytes());
    r.extend_from_slice(body);
    r
}

/// One edit of a record stream.
#[derive(Debug, Clone)]
enum Edit {
    /// XOR a byte.
    Flip(usize, u8),
    /// Cut the stream here.
    Truncate(usize),
    /// Insert a record of this type and body here.
    Insert(usize, u8, Vec<u8>),
    /// Re-frame the handshake bytes of the stream as records of this size.
    Refragment(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(at, x)| Edit::Flip(at, x)),
        any::<usize>().prop_map(Edit::Truncate),
        (
            any::<usize>(),
            prop_oneof![Just(20u8), Just(21), Just(22), Just(23), any::<u8>()],
            prop::collection::vec(any::<u8>(), 0..24)
        )
            .prop_map(|(at, t, b)| Edit::Insert(at, t, b)),
        (1usize..64).prop_map(Edit::Refragment),
    ]
}

fn apply(mut s: Vec<u8>, e: &Edit) -> Vec<u8> {
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % (len + 1) };
    match e {
        Edit::Flip(i, x) if !s.is_empty() => {
            let n = s.len();
            s[i % n] ^= x;
        }
        Edit::Flip(..) => {}
        Edit::Truncate(i) => s.truncate(at(*i, s.len())),
        Edit::Insert(i, t, b) => {
            let i = at(*i, s.len());
            s.splice(i..i, record(*t, b));
        }
        Edit::Refragment(size) => {
            // The bodies of the leading records, joined and framed again.
            let mut body = Vec::new();
            let mut rest = s.as_slice();
            while rest.len() >= 5 {
                let n = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
                let Some(b) = rest.get(5..5 + n) else { break };
                body.extend_from_slice(b);
                rest = &rest[5 + n..];
            }
            let tail = rest.to_vec();
            s = body.chunks(*size).flat_map(|c| record(22, c)).collect();
            s.extend_from_slice(&tail);
        }
    }
    s
}

/// Cuts `s` into writes at the given points.
fn split(s: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (s.len() + 1)).collect();
    at.sort_unstable();
    let mut out = Vec::new();
    let mut from = 0;
    for c in at.into_iter().chain([s.len()]) {
        if c > from {
            out.push(s[from..c].to_vec());
            from = c;
        }
    }
    out
}

#[test]
fn random_and_mutated_record_streams_close_only_their_connection() {
    let server = std::cell::RefCell::new(TlsServe::start("shared", &[]));
    let watch = Watch::start(server.borrow().sdk());
    let hello = client_hello(&server.borrow().ca);
    let (addr, feed) = (server.borrow().addr, server.borrow().feed);
    let piece = [0x16, 3, 1, 0, 9, 1, 0, 0, 0xc8, 3, 3, 0xaa, 0xbb, 0xcc].to_vec();
    let bases = prop_oneof![
        Just(hello),
        Just(piece),
        prop::collection::vec(any::<u8>(), 0..200),
    ];
    let case = (
        bases,
        prop::collection::vec(edit(), 0..6),
        prop::collection::vec(any::<usize>(), 0..8),
        any::<bool>(),
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let n = std::cell::Cell::new(0u32);
    runner
        .run(&case, |(base, edits, cuts, on_feed)| {
            let stream = edits.iter().fold(base, apply);
            let to = if on_feed { feed } else { addr };
            let answer = raw_conversation(to, &split(&stream, &cuts), true);
            prop_assert!(answer != Answer::Reset, "a reset after {stream:02x?}");
            n.set(n.get() + 1);
            let what = format!("stream {}: {stream:02x?}", n.get());
            server.borrow_mut().assert_healthy(&watch, &what);
            Ok(())
        })
        .unwrap();
}
