//! A real `haproxy` (TCP mode, `send-proxy-v2`) on a free loopback port in
//! front of one server, for one test.
//!
//! `util::haproxy`. The proxy runs in the foreground (`-db`), is
//! killed when the [`Haproxy`] is dropped, and is ready when its port
//! listens (read from /proc/net/tcp, so waiting opens no connection),
//! bounded by [`START_TIMEOUT`]. When `haproxy` is missing the helper
//! fails at once, naming `tools/test-deps`, which installs it.

// A test binary may include two server helpers, each with its own copy.
#[allow(clippy::duplicate_mod)]
#[path = "apt.rs"]
mod apt;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Longest wait for the proxy's port to listen.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running haproxy; killed on drop.
pub struct Haproxy {
    child: Child,
    /// Where clients connect.
    pub addr: SocketAddr,
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Installs haproxy if missing (once per process).
pub fn ensure_installed() {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    apt::ensure_installed(&INSTALLED, "haproxy", "-v", "haproxy");
}

/// Whether 127.0.0.1:`port` is in LISTEN state (/proc/net/tcp).
fn listening(port: u16) -> bool {
    let want = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp").is_ok_and(|t| {
        t.lines().skip(1).any(|l| {
            let mut f = l.split_whitespace();
            f.nth(1) == Some(want.as_str()) && f.nth(1) == Some("0A")
        })
    })
}

impl Haproxy {
    /// Starts haproxy on `front` (a free 127.0.0.1 address) relaying every
    /// connection to `server` with a PROXY v2 header, connecting to it
    /// from `source` (haproxy's own address as the server sees it).
    pub fn start(dir: &Path, front: SocketAddr, server: SocketAddr, source: Ipv4Addr) -> Haproxy {
        ensure_installed();
        let cfg = dir.join("haproxy.cfg");
        let text = format!(
            "global\n  maxconn 256\n\
             defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\
             frontend terminals\n  bind {front}\n  default_backend pricewire\n\
             backend pricewire\n  server pw {server} send-proxy-v2 source {source}\n"
        );
        std::fs::write(&cfg, text).expect("write haproxy.cfg");
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start haproxy");
        let mut h = Haproxy { child, addr: front };
        let deadline = Instant::now() + START_TIMEOUT;
        while !listening(front.port()) {
            if let Ok(Some(status)) = h.child.try_wait() {
                panic!("haproxy exited at start ({status}); its config: {cfg:?}");
            }
            assert!(
                Instant::now() < deadline,
                "haproxy never listened on {front}"
            );
            std::thread::park_timeout(Duration::from_millis(20));
        }
        h
    }
}
