//! Fault-injection TCP proxy for drills and integration tests.
//!
//! `client -> FaultProxy (listen) -> upstream`, with [toxics](toxic) applied
//! to both directions and changeable while connections are open — from code
//! ([`FaultProxy::set_toxic`]) or from a line-based control port
//! ([`FaultProxy::serve_control`], grammar in [`toxic`]).
//!
//! This is a test tool, not a hot-path component: it uses blocking sockets,
//! real time and threads (an accept thread, and per connection one
//! supervisor plus a reader and a writer thread per direction). What is
//! bounded: connections (`max_connections`, excess accepted and closed at
//! once, counted), chunks in flight per direction ([`CHUNKS_IN_FLIGHT_MAX`]
//! of at most [`CHUNK_BYTES_MAX`]), every toxic delay ([`toxic::DELAY_MS_MAX`]),
//! control lines ([`control::LINE_BYTES_MAX`]). Every blocking read and
//! write has a [`POLL_MS`] timeout so toxic changes and shutdown are seen
//! within that time. The listen and control addresses must be loopback:
//! the control port has no authentication.

pub mod control;
mod pump;
pub mod toxic;

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

pub use toxic::{Command, CommandError, Toxic, ToxicKind, Toxics};

/// Largest read forwarded as one chunk.
pub const CHUNK_BYTES_MAX: usize = 16 * 1024;
/// Chunks queued between a direction's reader and writer.
pub const CHUNKS_IN_FLIGHT_MAX: usize = 64;
/// Period at which blocked threads look at toxics and shutdown.
pub const POLL_MS: u64 = 10;
/// Default `max_connections`.
pub const MAX_CONNECTIONS_DEFAULT: usize = 64;
/// Most `max_connections` accepted.
pub const MAX_CONNECTIONS_MAX: usize = 1_024;
/// Longest wait for the upstream connect of one accepted connection, in ms.
pub const UPSTREAM_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Stack of each proxy thread; they hold one chunk buffer and little else.
const THREAD_STACK_BYTES: usize = 256 * 1024;

/// Where to listen and where to forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyConfig {
    /// Loopback address to listen on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Address every accepted connection is forwarded to.
    pub upstream: SocketAddr,
    /// Connections open at once (1..=[`MAX_CONNECTIONS_MAX`]); excess are closed.
    pub max_connections: usize,
    /// Seed of the jitter and garbage RNGs (connection `n` uses `seed + n`).
    pub seed: u64,
}

impl ProxyConfig {
    /// Listen on `listen`, forward to `upstream`, default limits and seed.
    pub fn new(listen: SocketAddr, upstream: SocketAddr) -> Self {
        ProxyConfig {
            listen,
            upstream,
            max_connections: MAX_CONNECTIONS_DEFAULT,
            seed: 0x5eed,
        }
    }
}

/// Counters of the proxy.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections accepted (including those closed over the limit).
    pub accepted: AtomicU64,
    /// Connections open now.
    pub active: AtomicU64,
    /// Connections closed at once because `max_connections` were open.
    pub rejected_over_limit: AtomicU64,
    /// Upstream connects that failed or timed out.
    pub upstream_connect_failures: AtomicU64,
    /// Connections reset (by the `reset` toxic).
    pub resets: AtomicU64,
    /// Bytes forwarded client → upstream.
    pub bytes_up: AtomicU64,
    /// Bytes forwarded upstream → client.
    pub bytes_down: AtomicU64,
    /// Bytes swallowed by the `blackhole` toxic.
    pub bytes_discarded: AtomicU64,
    /// Bytes inserted by the `garbage` toxic.
    pub garbage_bytes: AtomicU64,
}

/// A plain copy of the counters plus the toxics in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyStatus {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections open.
    pub active: u64,
    /// Connections closed over the limit.
    pub rejected_over_limit: u64,
    /// Upstream connects that failed.
    pub upstream_connect_failures: u64,
    /// Connections reset.
    pub resets: u64,
    /// Bytes forwarded client → upstream.
    pub bytes_up: u64,
    /// Bytes forwarded upstream → client.
    pub bytes_down: u64,
    /// Bytes swallowed by the blackhole.
    pub bytes_discarded: u64,
    /// Bytes inserted as garbage.
    pub garbage_bytes: u64,
    /// The toxics in force.
    pub toxics: Toxics,
}

impl std::fmt::Display for ProxyStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "accepted={} active={} rejected_over_limit={} upstream_connect_failures={} resets={} \
             bytes_up={} bytes_down={} bytes_discarded={} garbage_bytes={} toxics={}",
            self.accepted,
            self.active,
            self.rejected_over_limit,
            self.upstream_connect_failures,
            self.resets,
            self.bytes_up,
            self.bytes_down,
            self.bytes_discarded,
            self.garbage_bytes,
            self.toxics
        )
    }
}

/// State shared by every proxy thread.
#[derive(Debug)]
pub(crate) struct Shared {
    cfg: ProxyConfig,
    toxics: Mutex<Toxics>,
    pub(crate) shutdown: AtomicBool,
    pub(crate) stats: ProxyStats,
}

impl Shared {
    pub(crate) fn toxics(&self) -> Toxics {
        *self.toxics.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut Toxics)) {
        f(&mut self.toxics.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn stopping(&self) -> bool {
        self.shutdown.load(Relaxed)
    }

    pub(crate) fn status(&self) -> ProxyStatus {
        let s = &self.stats;
        ProxyStatus {
            accepted: s.accepted.load(Relaxed),
            active: s.active.load(Relaxed),
            rejected_over_limit: s.rejected_over_limit.load(Relaxed),
            upstream_connect_failures: s.upstream_connect_failures.load(Relaxed),
            resets: s.resets.load(Relaxed),
            bytes_up: s.bytes_up.load(Relaxed),
            bytes_down: s.bytes_down.load(Relaxed),
            bytes_discarded: s.bytes_discarded.load(Relaxed),
            garbage_bytes: s.garbage_bytes.load(Relaxed),
            toxics: self.toxics(),
        }
    }

    pub(crate) fn apply(&self, cmd: Command) {
        match cmd {
            Command::Set(t) => self.update(|x| x.set(t)),
            Command::Clear(Some(kind)) => self.update(|x| x.clear(kind)),
            Command::Clear(None) => self.update(|x| *x = Toxics::default()),
            Command::Shutdown => self.shutdown.store(true, Relaxed),
            Command::Status | Command::Help => {}
        }
    }
}

pub(crate) fn spawn_named<F>(name: &str, f: F) -> io::Result<JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    thread::Builder::new()
        .name(name.to_string())
        .stack_size(THREAD_STACK_BYTES)
        .spawn(f)
}

/// Refuses a non-loopback address for a listener (no authentication here).
pub(crate) fn require_loopback(addr: SocketAddr, what: &str) -> io::Result<()> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        let msg = format!("{what} address {addr} is not loopback");
        Err(io::Error::new(io::ErrorKind::InvalidInput, msg))
    }
}

/// A running proxy. Dropping it (or [`FaultProxy::shutdown`]) stops it.
#[derive(Debug)]
pub struct FaultProxy {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    threads: Vec<(SocketAddr, JoinHandle<()>)>,
}

impl FaultProxy {
    /// Starts a proxy from `listen` (loopback; port 0 = any free port) to
    /// `upstream` with default limits and no toxics.
    pub fn start(listen: SocketAddr, upstream: SocketAddr) -> io::Result<FaultProxy> {
        Self::start_with(ProxyConfig::new(listen, upstream))
    }

    /// Starts the proxy on its own threads. Errors: a non-loopback listen
    /// address, `max_connections` outside 1..=[`MAX_CONNECTIONS_MAX`], or the bind.
    pub fn start_with(cfg: ProxyConfig) -> io::Result<FaultProxy> {
        require_loopback(cfg.listen, "listen")?;
        if !(1..=MAX_CONNECTIONS_MAX).contains(&cfg.max_connections) {
            let msg = format!(
                "max_connections {} not in 1..={MAX_CONNECTIONS_MAX}",
                cfg.max_connections
            );
            return Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
        }
        let listener = TcpListener::bind(cfg.listen)?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            cfg,
            toxics: Mutex::new(Toxics::default()),
            shutdown: AtomicBool::new(false),
            stats: ProxyStats::default(),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = spawn_named("fault-proxy-accept", move || {
            accept_loop(&accept_shared, listener)
        })?;
        Ok(FaultProxy {
            shared,
            local_addr,
            threads: vec![(local_addr, accept)],
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Adds a toxic (replacing one of the same kind); existing connections
    /// see it within [`POLL_MS`] or at their next chunk.
    pub fn set_toxic(&self, toxic: Toxic) {
        self.shared.apply(Command::Set(toxic));
    }

    /// Removes the toxic of this kind, if any.
    pub fn clear_toxic(&self, kind: ToxicKind) {
        self.shared.apply(Command::Clear(Some(kind)));
    }

    /// Removes every toxic.
    pub fn clear_toxics(&self) {
        self.shared.apply(Command::Clear(None));
    }

    /// The toxics in force.
    pub fn toxics(&self) -> Toxics {
        self.shared.toxics()
    }

    /// A copy of the counters and the toxics in force.
    pub fn status(&self) -> ProxyStatus {
        self.shared.status()
    }

    /// True once shutdown was asked for (by code or a control `shutdown`).
    pub fn is_stopping(&self) -> bool {
        self.shared.stopping()
    }

    /// Serves the control port on `addr` (loopback; port 0 = any free
    /// port); returns the bound address.
    pub fn serve_control(&mut self, addr: SocketAddr) -> io::Result<SocketAddr> {
        require_loopback(addr, "control")?;
        let listener = TcpListener::bind(addr)?;
        let bound = listener.local_addr()?;
        let shared = Arc::clone(&self.shared);
        let handle = spawn_named("fault-proxy-control", move || {
            control::serve(&shared, listener)
        })?;
        self.threads.push((bound, handle));
        Ok(bound)
    }

    /// Stops accepting, closes every connection and joins the threads
    /// (connections finish within a few [`POLL_MS`]; the wait is bounded).
    pub fn shutdown(&mut self) {
        self.shared.shutdown.store(true, Relaxed);
        for (addr, handle) in self.threads.drain(..) {
            // A connection wakes the blocking accept so it sees the flag.
            let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(500));
            let _ = handle.join();
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.shared.stats.active.load(Relaxed) > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(POLL_MS));
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: TcpListener) {
    let mut next_id = 0u64;
    for incoming in listener.incoming() {
        if shared.stopping() {
            break;
        }
        let Ok(client) = incoming else { continue };
        shared.stats.accepted.fetch_add(1, Relaxed);
        if shared.stats.active.load(Relaxed) >= shared.cfg.max_connections as u64 {
            shared.stats.rejected_over_limit.fetch_add(1, Relaxed);
            continue; // dropping `client` closes it
        }
        shared.stats.active.fetch_add(1, Relaxed);
        next_id += 1;
        let conn_shared = Arc::clone(shared);
        let seed = shared.cfg.seed.wrapping_add(next_id);
        let spawned = spawn_named("fault-proxy-conn", move || {
            pump::serve_connection(&conn_shared, client, seed);
            conn_shared.stats.active.fetch_sub(1, Relaxed);
        });
        if spawned.is_err() {
            shared.stats.active.fetch_sub(1, Relaxed);
        }
    }
}
