//! Fan-out per-connection cost, plaintext against TLS, in one run.
//!
//! Each price is encoded once; for each of `CONNECTIONS` loopback
//! connections the frame is appended to the connection's outbound buffer
//! and written to its link (`runtime::tls::Link`) exactly as a shard does
//! (`OutBuf::write_to`): a `send` per connection for plaintext, encryption
//! of a TLS record and a `send` for TLS. One thread drains the client
//! sockets without decrypting. Plaintext and TLS alternate in `ROUNDS`
//! rounds so both see the same machine; the report is the median CPU time
//! of the sending thread (user + kernel, `CLOCK_THREAD_CPUTIME_ID`, so time
//! the thread spent preempted on a shared machine does not count) per
//! (price x connection) of each, their ratio, and the allocations per
//! (price x connection) counted by a global allocator. Two write patterns:
//! a write per price (a quiet shard) and a write every 16 prices (a busy
//! shard's turn appends several prices before it writes).
//!
//! Run: `cargo bench --bench tls_fanout` (or `-- --quick`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pricewire::gateway::outbound::{Append, OutBuf};
use pricewire::model::Price;
use pricewire::runtime::tls::{Link, TlsAcceptor, TlsFiles};
use pricewire::wire::{self, PRICE_FRAME_LEN};

struct Counting;
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: delegates every call unchanged to the system allocator; the only
// addition is a relaxed counter increment.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const CONNECTIONS: usize = 32;

struct Side {
    links: Vec<Link>,
    bufs: Vec<OutBuf>,
}

/// A connected loopback pair: (server side, non-blocking; client side).
fn pair(l: &TcpListener) -> (mio::net::TcpStream, TcpStream) {
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    s.set_nonblocking(true).unwrap();
    s.set_nodelay(true).unwrap();
    (mio::net::TcpStream::from_std(s), c)
}

/// Runs the client half of a handshake on its own thread while the server
/// link is driven here; returns the client socket.
fn handshake(link: &mut Link, client: TcpStream, ca: &str, tls: &TlsAcceptor, k: u64) -> TcpStream {
    let ca = ca.to_string();
    let t = std::thread::spawn(move || {
        use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
        let mut sock = client;
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).unwrap();
        }
        sock
    });
    let mut buf = [0u8; 64];
    while tls.stats().handshakes.load(Ordering::Relaxed) < k {
        let _ = link.read(&mut buf);
        std::thread::yield_now();
    }
    t.join().unwrap()
}

fn setup(tls: Option<(&TlsAcceptor, &str)>, drained: &mut Vec<TcpStream>) -> Side {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut side = Side {
        links: Vec::new(),
        bufs: Vec::new(),
    };
    for k in 0..CONNECTIONS {
        let (s, c) = pair(&l);
        let (link, c) = match tls {
            None => (Link::Plain(s), c),
            Some((acc, ca)) => {
                let mut link = acc.link(s, 0).unwrap();
                let c = handshake(&mut link, c, ca, acc, k as u64 + 1);
                (link, c)
            }
        };
        c.set_nonblocking(true).unwrap();
        drained.push(c);
        side.links.push(link);
        side.bufs
            .push(OutBuf::new(128 * 1024, 32 * 1024, 64 * 1024));
    }
    side
}

/// Fans `prices` prices out to every connection, writing each connection
/// every `batch` prices (1: a write per price, as a quiet shard does; more:
/// a busy shard's turn, which appends several prices before its writes);
/// ns per (price x conn).
fn run(side: &mut Side, prices: u64, batch: u64, seq: &mut u64) -> f64 {
    let mut frame = [0u8; PRICE_FRAME_LEN];
    let mut p = Price {
        symbol: 1,
        bid: 108_120,
        ask: 108_128,
        ..Price::EMPTY
    };
    let t = pricewire::runtime::sys::thread_cpu_ns();
    for k in 1..=prices {
        *seq += 1;
        p.seq = *seq;
        let len = wire::encode_update(&mut frame, &wire::PriceBody::from_price(&p, 5, 0));
        for (out, link) in side.bufs.iter_mut().zip(side.links.iter_mut()) {
            while out.append(&frame[..len]) == Append::Overflow {
                let _ = link.flush_pending();
                let _ = out.write_to(link);
            }
        }
        if k % batch == 0 {
            for (out, link) in side.bufs.iter_mut().zip(side.links.iter_mut()) {
                let _ = link.flush_pending();
                let _ = out.write_to(link);
            }
        }
    }
    let cpu = pricewire::runtime::sys::thread_cpu_ns() - t;
    cpu as f64 / (prices * CONNECTIONS as u64) as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, prices) = if quick { (5, 500) } else { (15, 2_000) };
    let dir = tempfile::tempdir().unwrap();
    let ca = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    std::fs::write(&cert, ca.cert.pem()).unwrap();
    std::fs::write(&key, ca.key_pair.serialize_pem()).unwrap();
    let files = TlsFiles {
        cert,
        key,
        client_ca: None,
    };
    let acc = TlsAcceptor::new("subscriber", files, 60_000).unwrap();
    let mut clients = Vec::new();
    let mut plain = setup(None, &mut clients);
    let mut tls = setup(Some((&acc, &ca.cert.pem())), &mut clients);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let drainer = std::thread::spawn(move || {
        let mut buf = vec![0u8; 256 * 1024];
        while !s.load(Ordering::Relaxed) {
            for c in clients.iter_mut() {
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                }
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    });
    let mut seq = 0u64;
    run(&mut plain, prices / 4, 1, &mut seq);
    run(&mut tls, prices / 4, 1, &mut seq);
    println!(
        "fan-out per connection, {CONNECTIONS} loopback connections, \
         {rounds} rounds x {prices} prices, plaintext and TLS interleaved:"
    );
    for batch in [1, 16] {
        compare(&mut plain, &mut tls, rounds, prices, batch, &mut seq);
    }
    stop.store(true, Ordering::Relaxed);
    drainer.join().unwrap();
    let _ = std::io::stdout().flush();
}

/// `rounds` rounds of plaintext then TLS, writing every `batch` prices:
/// prints the medians, the allocations and the ratio.
fn compare(plain: &mut Side, tls: &mut Side, rounds: u64, prices: u64, batch: u64, seq: &mut u64) {
    let (mut tp, mut tt) = (Vec::new(), Vec::new());
    let (mut plain_allocs, mut tls_allocs) = (0, 0);
    for _ in 0..rounds {
        let a = ALLOCATIONS.load(Ordering::Relaxed);
        tp.push(run(plain, prices, batch, seq));
        let b = ALLOCATIONS.load(Ordering::Relaxed);
        tt.push(run(tls, prices, batch, seq));
        let c = ALLOCATIONS.load(Ordering::Relaxed);
        plain_allocs += b - a;
        tls_allocs += c - b;
    }
    let per = (rounds * prices * CONNECTIONS as u64) as f64;
    let (mp, mt) = (median(&mut tp), median(&mut tt));
    println!("  a write every {batch} price(s):");
    println!(
        "    plaintext  median {mp:7.0} CPU ns/(price x conn)  allocations {:.3}/(price x conn)",
        plain_allocs as f64 / per
    );
    println!(
        "    TLS        median {mt:7.0} CPU ns/(price x conn)  allocations {:.3}/(price x conn)",
        tls_allocs as f64 / per
    );
    println!("    TLS / plaintext = {:.2}x", mt / mp);
}
