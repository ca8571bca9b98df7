//! The real binary with TLS on both listeners, a TLS subscriber that stays
//! logged on through a test and counts what it receives, and a raw
//! rustls client whose records the test cuts and batches itself.

use super::wait;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use pricewire::client::tls::ClientTls;
use pricewire::client::{Client, ClientConfig, Event, SeqStatus};
use pricewire::wire::{self, TIER_ACCOUNT_DEFAULT};

use super::net;
use super::pki::{Ca, ServerFiles};

/// Bound of each wait on a condition.
pub const WAIT: Duration = Duration::from_secs(10);

/// `pricewire serve` with TLS on the subscriber and ingest listeners.
pub struct TlsServe {
    pub child: Child,
    pub addr: SocketAddr,
    pub feed: SocketAddr,
    pub ops: SocketAddr,
    pub ca: Ca,
    _dir: tempfile::TempDir,
}

impl Drop for TlsServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TlsServe {
    /// Starts it under `threading` (`shared` or `dedicated`) with `extra`
    /// flags, and waits for /readyz.
    pub fn start(threading: &str, extra: &[&str]) -> TlsServe {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("oracle CA");
        let files = ServerFiles::write(dir.path(), &ca);
        let (addr, ops, feed) = (net::free_addr(), net::free_addr(), net::free_addr());
        let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
            .args(["serve", "--synthetic-rate", "500", "--shards", "1"])
            .args(["--threading", threading])
            .args(["--report-interval-ms", "60000", "--drain-delay-ms", "0"])
            .args(["--listen", &addr.to_string()])
            .args(["--ops-listen", &ops.to_string()])
            .args(["--feed-listen", &feed.to_string()])
            .arg("--tls-cert")
            .arg(&files.cert)
            .arg("--tls-key")
            .arg(&files.key)
            .args(extra)
            .env("RUST_LOG", "error")
            .env_remove("HOSTNAME")
            .stdout(Stdio::null())
            .spawn()
            .expect("start pricewire");
        let s = TlsServe {
            child,
            addr,
            feed,
            ops,
            ca,
            _dir: dir,
        };
        wait::expect(WAIT, "server ready", || {
            net::http_status(s.ops, "/readyz") == Some(200)
        });
        s
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sum of the samples of `family` whose labels hold every `labels` entry.
    pub fn metric(&self, family: &str, labels: &[&str]) -> f64 {
        let body = net::http_get(self.ops, "/metrics").unwrap_or_default();
        body.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .filter(|l| labels.iter().all(|want| l.contains(want)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// The SDK's TLS config for the subscriber port.
    pub fn sdk(&self) -> ClientConfig {
        let path = self._dir.path().join("ca.pem");
        std::fs::write(&path, self.ca.pem()).unwrap();
        let mut cfg = ClientConfig::new(self.addr, "demo", "demo");
        cfg.tls = Some(ClientTls::from_ca_file(&path, "127.0.0.1").unwrap());
        cfg.reconnect_attempts_max = 0;
        cfg
    }

    /// The process is alive, /livez is 200 and `watch` keeps receiving
    /// prices without a gap or a disconnect.
    pub fn assert_healthy(&mut self, watch: &Watch, after: &str) {
        assert!(self.alive(), "{after}: the process died");
        assert_eq!(
            net::http_status(self.ops, "/livez"),
            Some(200),
            "{after}: /livez"
        );
        let seen = watch.seen.prices.load(Ordering::Relaxed);
        wait::expect(WAIT, &format!("{after}: prices go on"), || {
            watch.seen.prices.load(Ordering::Relaxed) > seen + 2
                || watch.seen.disconnects.load(Ordering::Relaxed) > 0
        });
        assert_eq!(
            watch.seen.disconnects.load(Ordering::Relaxed),
            0,
            "{after}: watcher cut"
        );
        assert_eq!(watch.seen.gaps.load(Ordering::Relaxed), 0, "{after}: gaps");
    }
}

/// What the long-lived subscriber saw.
#[derive(Default)]
pub struct Seen {
    pub prices: AtomicU64,
    pub gaps: AtomicU64,
    pub disconnects: AtomicU64,
}

/// A TLS subscriber logged on for the whole test.
pub struct Watch {
    pub seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    pub fn start(cfg: ClientConfig) -> Watch {
        let mut c = Client::connect(cfg).expect("connect over TLS and log on");
        c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD", "GBPUSD", "XAUUSD"])
            .expect("subscribe");
        let (seen, stop) = (Arc::new(Seen::default()), Arc::new(AtomicBool::new(false)));
        let (s, st) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match c.next_event(Duration::from_millis(50)) {
                    Ok(Some(Event::Price(p))) => {
                        s.prices.fetch_add(1, Ordering::Relaxed);
                        if matches!(p.seq, SeqStatus::Gap { .. }) {
                            s.gaps.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(Some(Event::Disconnected { .. })) | Err(_) => {
                        s.disconnects.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    _ => {}
                }
            }
        });
        Watch {
            seen,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How a raw conversation ended on the server's side.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// A plaintext fatal alert with this description, then a clean close.
    Alert(u8),
    /// Records we did not look into, then a clean close.
    Records,
    /// A close without a byte.
    Closed,
    /// A reset.
    Reset,
}

/// Connects, sends each of `writes` as one write (a failed write ends the
/// sending: the server may have closed), half-closes when `shut`, and reads
/// until the server closes (bounded by [`WAIT`]).
pub fn raw_conversation(addr: SocketAddr, writes: &[Vec<u8>], shut: bool) -> Answer {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    for w in writes {
        if s.write_all(w).is_err() {
            break;
        }
    }
    if shut {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Answer::Reset,
            Err(e) => panic!("no close from the server: {e}"),
        }
    }
    match got.as_slice() {
        [] => Answer::Closed,
        [21, 3, 3, 0, 2, 2, desc] => Answer::Alert(*desc),
        _ => Answer::Records,
    }
}

/// A rustls client config trusting `ca` (TLS 1.2 and 1.3, or one of them),
/// with its own ticket and session store.
pub fn client_config(
    ca: &Ca,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.pem().as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(cfg)
}

/// A rustls client over a blocking socket that writes only when told to, so
/// a test decides which records share a write.
pub struct Manual {
    pub conn: rustls::ClientConnection,
    pub sock: TcpStream,
    /// The server's close_notify arrived.
    pub peer_closed: bool,
    plain: Vec<u8>,
}

impl Manual {
    pub fn connect(addr: SocketAddr, cfg: Arc<rustls::ClientConfig>) -> Manual {
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let conn = rustls::ClientConnection::new(cfg, name).unwrap();
        let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
        sock.set_nodelay(true).unwrap();
        sock.set_read_timeout(Some(WAIT)).unwrap();
        Manual {
            conn,
            sock,
            peer_closed: false,
            plain: Vec::new(),
        }
    }

    /// Runs the handshake until the client has sent all it needs to but
    /// its last flight (the Finished) is still unwritten.
    pub fn handshake_holding_finished(&mut self) {
        while self.conn.is_handshaking() {
            self.write_all_tls();
            self.read_some().expect("server flight");
        }
    }

    /// Writes every record the client has queued, in one write.
    pub fn write_all_tls(&mut self) {
        let mut out = Vec::new();
        while self.conn.wants_write() {
            self.conn.write_tls(&mut out).unwrap();
        }
        if !out.is_empty() {
            self.sock.write_all(&out).unwrap();
        }
    }

    /// Reads once from the socket and processes it; `Ok(false)` at EOF.
    pub fn read_some(&mut self) -> Result<bool, rustls::Error> {
        match self.conn.read_tls(&mut self.sock) {
            Ok(0) => return Ok(false),
            Ok(_) => {}
            Err(e) => return Err(rustls::Error::General(e.to_string())),
        }
        self.peer_closed |= self.conn.process_new_packets()?.peer_has_closed();
        let mut buf = [0u8; 8192];
        loop {
            match self.conn.reader().read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.plain.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
        Ok(true)
    }

    /// The next whole SOFH frame, reading as needed.
    pub fn next_frame(&mut self) -> Vec<u8> {
        loop {
            if let Ok(Some(n)) = wire::split_with_max(&self.plain, wire::SERVER_FRAME_LEN_MAX) {
                return self.plain.drain(..n).collect();
            }
            assert!(self.read_some().expect("records decrypt"), "server closed");
        }
    }
}
