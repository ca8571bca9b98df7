//! Proof that a TLS subscriber costs no allocation per price in the steady
//! state: subscribers hand-shake with a rustls client and subscribe to
//! every symbol; after warm-up, a window of at least 100,000 price frames
//! encrypted and written to their sockets must see zero allocations on any
//! thread. The client side reads the raw records into buffers allocated
//! before the window and decrypts them only after it (rustls allocates per
//! record), which also proves the records were valid TLS under the
//! session's keys.

#[path = "util/alloc.rs"]
mod alloc;
#[path = "util/pki.rs"]
mod pki;
#[path = "util/wait.rs"]
mod wait;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pricewire::config::Config;
use pricewire::feed::synthetic::SyntheticConfig;
use pricewire::gateway::GatewayConfig;
use pricewire::pipeline::PipelineConfig;
use pricewire::runtime::tls::{TlsAcceptor, TlsFiles};
use pricewire::runtime::WaitStrategy;
use pricewire::service::{Service, ServiceConfig};
use pricewire::wire;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

const SUBSCRIBERS: usize = 8;
const WINDOW_FRAMES: u64 = 100_000;
/// Raw bytes kept per subscriber for the check after the window.
const KEEP_BYTES: usize = 8 << 20;

/// A subscriber after its handshake, logon and subscribe: the rustls
/// session (for decrypting later), the socket, and plaintext read so far.
struct Sub {
    conn: rustls::ClientConnection,
    sock: TcpStream,
    plain: Vec<u8>,
}

fn subscriber(addr: std::net::SocketAddr, ca_pem: &str, names: &[String]) -> Sub {
    let mut s = pki::tls_connect(addr, ca_pem, None).unwrap();
    let mut buf = [0u8; 4096];
    let logon = wire::Logon {
        heartbeat_interval_ms: 30_000,
        account: b"demo",
        token: b"demo",
    };
    let n = wire::encode_logon(&mut buf, &logon).unwrap();
    s.write_all(&buf[..n]).unwrap();
    let n = wire::encode_subscribe_names(
        &mut buf,
        1,
        wire::TIER_ACCOUNT_DEFAULT,
        names.iter().map(String::as_str),
    )
    .unwrap();
    s.write_all(&buf[..n]).unwrap();
    s.flush().unwrap();
    // Prices are flowing once a few kilobytes arrived.
    let mut plain = Vec::new();
    while plain.len() < 4096 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before prices");
        plain.extend_from_slice(&buf[..n]);
    }
    let rustls::StreamOwned { conn, sock } = s;
    sock.set_nonblocking(true).unwrap();
    Sub { conn, sock, plain }
}

/// Whole frames at the front of `plain` (a partial last frame is left).
fn count_frames(mut plain: &[u8]) -> usize {
    let mut n = 0;
    while let Some(len) = wire::split(plain).expect("a well-formed frame") {
        plain = &plain[len..];
        n += 1;
    }
    n
}

/// Decrypts the raw bytes read in the window with the subscriber's own
/// rustls session: returns the whole frames they held.
fn decrypt(sub: &mut Sub, raw: &[u8]) -> usize {
    let mut rest = raw;
    let mut buf = [0u8; 16 * 1024];
    while !rest.is_empty() {
        sub.conn.read_tls(&mut rest).unwrap();
        sub.conn.process_new_packets().expect("valid TLS records");
        loop {
            match sub.conn.reader().read(&mut buf) {
                Ok(0) => break,
                Ok(n) => sub.plain.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
    }
    count_frames(&sub.plain)
}

fn start_service(config: Arc<Config>, tls: Arc<TlsAcceptor>) -> Service {
    let mut gw = GatewayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        tls: Some(tls),
        ..GatewayConfig::default()
    };
    gw.admission.ip_connect_rate_per_s = 10_000;
    gw.admission.ip_connect_burst = 10_000;
    gw.admission.ip_connections_max = 10_000;
    Service::start(ServiceConfig {
        config,
        pipeline: PipelineConfig {
            shards: 1,
            feed_wait: WaitStrategy::SpinPark,
            engine_wait: WaitStrategy::SpinPark,
            ..PipelineConfig::default()
        },
        synthetic: Some(SyntheticConfig {
            rate_per_s: 20_000,
            ..SyntheticConfig::default()
        }),
        sources: Vec::new(),
        gateway: Some(gw),
        ingest: None,
        shard_wait: WaitStrategy::SpinPark,
        recorder: None,
        requests: Default::default(),
        refdata: None,
        bus: None,
        supervisor: Default::default(),
    })
    .unwrap()
}

/// Reads every socket until stopped: the first [`KEEP_BYTES`] of each
/// into its (pre-allocated) keep buffer, the rest into a scratch buffer.
fn read_raw(socks: &mut [TcpStream], keep: &mut [Vec<u8>], stop: &AtomicBool) {
    let mut scratch = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::Relaxed) {
        for (s, k) in socks.iter_mut().zip(keep.iter_mut()) {
            loop {
                let room = KEEP_BYTES - k.len();
                let r = if room > 0 {
                    let at = k.len();
                    // Within capacity: no allocation.
                    k.resize(at + room.min(64 * 1024), 0);
                    let r = s.read(&mut k[at..]);
                    k.truncate(at + *r.as_ref().unwrap_or(&0));
                    r
                } else {
                    s.read(&mut scratch)
                };
                match r {
                    Ok(n) if n > 0 => {}
                    _ => break,
                }
            }
        }
        std::thread::yield_now();
    }
}

/// A CA and a subscriber TLS acceptor with a leaf from it, in `dir`.
fn acceptor(dir: &std::path::Path) -> (pki::Ca, Arc<TlsAcceptor>) {
    let ca = pki::Ca::new("zero-alloc CA");
    let files = pki::ServerFiles::write(dir, &ca);
    let tls = TlsAcceptor::new(
        "subscriber",
        TlsFiles {
            cert: files.cert.clone(),
            key: files.key.clone(),
            client_ca: None,
        },
        5_000,
    )
    .unwrap();
    (ca, tls)
}

#[test]
fn prices_to_tls_subscribers_allocate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, tls) = acceptor(dir.path());
    let config = Arc::new(Config::builtin(3));
    let names: Vec<String> = config
        .table
        .instruments()
        .iter()
        .map(|i| i.name.clone())
        .collect();
    let service = start_service(config.clone(), tls.clone());
    let gw = service.gateway.as_ref().unwrap();
    let shard = gw.shard_stats[0].clone();
    let mut subs: Vec<Sub> = (0..SUBSCRIBERS)
        .map(|_| subscriber(gw.local_addr, &ca.pem(), &names))
        .collect();
    let mut socks: Vec<TcpStream> = subs.iter().map(|s| s.sock.try_clone().unwrap()).collect();
    let mut keep: Vec<Vec<u8>> = (0..SUBSCRIBERS)
        .map(|_| Vec::with_capacity(KEEP_BYTES))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let reader = std::thread::spawn(move || {
        read_raw(&mut socks, &mut keep, &stop2);
        keep
    });

    // Warm-up: every session established and prices flowing to it.
    let warm = shard.prices_out.get() + 50_000;
    assert!(
        wait::wait_until(Duration::from_secs(60), || {
            shard.connections.get() == SUBSCRIBERS as u64 && shard.prices_out.get() > warm
        }),
        "warm-up: {} connections, {} frames",
        shard.connections.get(),
        shard.prices_out.get()
    );
    let before_allocs = alloc::allocations();
    let before = shard.prices_out.get();
    let reached = wait::wait_until(Duration::from_secs(120), || {
        shard.prices_out.get() >= before + WINDOW_FRAMES
    });
    let allocs = alloc::allocations() - before_allocs;
    let frames = shard.prices_out.get() - before;

    stop.store(true, Ordering::Relaxed);
    let keep = reader.join().unwrap();
    let conflated = shard.conflated.get();
    let handshakes = tls
        .stats()
        .handshakes
        .load(std::sync::atomic::Ordering::Relaxed);
    service.stop();
    assert!(reached, "only {frames} frames in the window");
    assert_eq!(handshakes, SUBSCRIBERS as u64);
    assert_eq!(
        allocs, 0,
        "{allocs} allocations while {frames} price frames went to TLS subscribers \
         ({conflated} conflated)"
    );
    for (sub, raw) in subs.iter_mut().zip(&keep) {
        assert!(raw.len() > 4096, "only {} bytes read", raw.len());
        assert!(decrypt(sub, raw) > 100, "too few frames decrypted");
    }
}
