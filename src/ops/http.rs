//! The ops HTTP listener: `/livez`, `/readyz`, `/startupz`, `/metrics`.
//!
//! Off the hot path, on its own threads: one accept thread (a mio poll with
//! a waker, so [`OpsHandle::stop`] returns promptly) and a fixed pool of
//! `workers` threads fed by a bounded queue of `queue_max` connections.
//! When the queue is full the accept thread answers 503 at once and closes
//! (counted in `pricewire_ops_http_rejected_total`) — a probe storm never
//! grows memory or threads. Each connection carries one HTTP/1.1 request:
//! GET only, the head at most `request_head_max_bytes`, the whole read
//! bounded by `read_timeout_ms`, the write by `write_timeout_ms`, and the
//! answer always says `Connection: close`.

use crate::clock::{monotonic_ns, NS_PER_MS};
use crate::ops::health::{Health, Liveness};
use crate::ops::metrics::{self, catalogue, Collect, Registry, Sink};
use crate::ops::OpsError;
use crate::runtime::{Policy, Supervised};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Default address of the ops listener (`--ops-listen`).
pub const DEFAULT_OPS_LISTEN: &str = "127.0.0.1:9401";
/// Default worker threads answering ops requests.
pub(crate) const DEFAULT_OPS_WORKERS: usize = 2;
/// Default bound of connections waiting for a worker.
pub(crate) const DEFAULT_OPS_QUEUE_MAX: usize = 16;
/// Default bound on reading one request head.
pub(crate) const DEFAULT_OPS_READ_TIMEOUT_MS: u64 = 2_000;
/// Default bound on writing one answer.
pub(crate) const DEFAULT_OPS_WRITE_TIMEOUT_MS: u64 = 2_000;
/// Largest request head accepted (request line plus headers).
pub(crate) const DEFAULT_OPS_REQUEST_HEAD_MAX_BYTES: usize = 8 * 1024;

/// Limits of the ops listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpsServerConfig {
    /// Worker threads answering requests (at least 1).
    pub workers: usize,
    /// Connections waiting for a worker (at least 1); more are refused.
    pub queue_max: usize,
    /// Bound on reading one request head, in ms.
    pub read_timeout_ms: u64,
    /// Bound on writing one answer, in ms.
    pub write_timeout_ms: u64,
    /// Largest request head accepted, in bytes.
    pub request_head_max_bytes: usize,
}

impl Default for OpsServerConfig {
    fn default() -> Self {
        OpsServerConfig {
            workers: DEFAULT_OPS_WORKERS,
            queue_max: DEFAULT_OPS_QUEUE_MAX,
            read_timeout_ms: DEFAULT_OPS_READ_TIMEOUT_MS,
            write_timeout_ms: DEFAULT_OPS_WRITE_TIMEOUT_MS,
            request_head_max_bytes: DEFAULT_OPS_REQUEST_HEAD_MAX_BYTES,
        }
    }
}

/// Paths the ops listener counts answers for (`path` label of `pricewire_ops_http_requests_total`).
pub const PATHS: [&str; 5] = ["/livez", "/readyz", "/startupz", "/metrics", "other"];
/// Status codes it answers with (`code` label).
pub const CODES: [u16; 6] = [200, 400, 404, 405, 431, 503];

/// Counters of the ops listener itself.
#[derive(Debug, Default)]
pub struct OpsHttpStats {
    answered: [[AtomicU64; CODES.len()]; PATHS.len()],
    rejected: AtomicU64,
    faults: AtomicU64,
}

impl OpsHttpStats {
    fn count(&self, path: &str, code: u16) {
        let p = PATHS
            .iter()
            .position(|&k| k == path)
            .unwrap_or(PATHS.len() - 1);
        if let Some(c) = CODES.iter().position(|&k| k == code) {
            self.answered[p][c].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Requests answered on `path` (one of the four, or "other") with `code`.
    pub fn answered(&self, path: &str, code: u16) -> u64 {
        let p = PATHS.iter().position(|&k| k == path);
        let c = CODES.iter().position(|&k| k == code);
        match (p, c) {
            (Some(p), Some(c)) => self.answered[p][c].load(Ordering::Relaxed),
            _ => 0,
        }
    }

    /// Connections refused because every worker was busy.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
}

impl Collect for OpsHttpStats {
    fn collect(&self, sink: &mut Sink) {
        for (p, path) in PATHS.iter().enumerate() {
            for (c, code) in CODES.iter().enumerate() {
                let n = self.answered[p][c].load(Ordering::Relaxed);
                if n > 0 {
                    let code = code.to_string();
                    let labels = [("path", *path), ("code", code.as_str())];
                    sink.counter(catalogue::OPS_HTTP_REQUESTS, &labels, n);
                }
            }
        }
        sink.counter(catalogue::OPS_HTTP_REJECTED, &[], self.rejected());
        let faults = self.faults.load(Ordering::Relaxed);
        let labels = [("listener", "ops"), ("stage", "ops-http")];
        sink.counter(catalogue::CONNECTION_FAULTS, &labels, faults);
    }
}

/// One answer, before it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Value of the `Content-Type` header.
    pub content_type: &'static str,
    /// The whole body.
    pub body: String,
}

impl Response {
    fn text(status: u16, body: &str) -> Self {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{body}\n"),
        }
    }

    fn reason(&self) -> &'static str {
        match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            431 => "Request Header Fields Too Large",
            _ => "Service Unavailable",
        }
    }

    /// The whole HTTP/1.1 message.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let allow = if self.status == 405 {
            "Allow: GET\r\n"
        } else {
            ""
        };
        let head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{allow}Connection: close\r\n\r\n",
            self.status,
            self.reason(),
            self.content_type,
            self.body.len()
        );
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(self.body.as_bytes());
        bytes
    }
}

fn probe(ok: bool, yes: &str, no: &str) -> Response {
    if ok {
        Response::text(200, yes)
    } else {
        Response::text(503, no)
    }
}

/// `/livez`: 503 names the dead stage (and why) or the stalled loop.
fn livez(health: &Health) -> Response {
    match health.liveness() {
        Liveness::Live => Response::text(200, "live"),
        Liveness::Stalled => Response::text(503, "process loop stalled"),
        Liveness::StageDied(d) => Response::text(503, &d.to_string()),
    }
}

/// Answers one request head (sans IO). Returns the path label for the stats.
pub(crate) fn route(head: &[u8], health: &Health, registry: &Registry) -> (&'static str, Response) {
    let Some((method, target)) = parse_request_line(head) else {
        return ("other", Response::text(400, "bad request"));
    };
    let path = target.split('?').next().unwrap_or(target);
    let label = PATHS
        .iter()
        .copied()
        .find(|&p| p == path)
        .unwrap_or("other");
    if label == "other" {
        return (label, Response::text(404, "not found"));
    }
    if method != "GET" {
        return (label, Response::text(405, "only GET"));
    }
    let state = health.state().as_str();
    let response = match label {
        "/livez" => livez(health),
        "/readyz" if health.supervisor().first_death().is_some() => {
            Response::text(503, "a stage died")
        }
        "/readyz" => probe(health.is_ready(), "ready", state),
        "/startupz" => probe(health.is_started(), "started", state),
        _ => Response {
            status: 200,
            content_type: metrics::CONTENT_TYPE,
            body: registry.scrape(),
        },
    };
    (label, response)
}

/// `GET /path HTTP/1.1` → ("GET", "/path"); None if malformed.
fn parse_request_line(head: &[u8]) -> Option<(&str, &str)> {
    let line_end = head.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&head[..line_end]).ok()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    let valid = parts.next().is_none()
        && !method.is_empty()
        && target.starts_with('/')
        && (version == "HTTP/1.1" || version == "HTTP/1.0");
    valid.then_some((method, target))
}

/// Result of reading a request head.
enum Head {
    Complete(usize),
    TooLarge,
    Broken,
}

fn read_head(stream: &mut TcpStream, buf: &mut [u8], timeout_ms: u64) -> Head {
    let deadline_ns = monotonic_ns() + timeout_ms * NS_PER_MS;
    let mut len = 0;
    loop {
        if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
            return Head::Complete(len);
        }
        if len == buf.len() {
            return Head::TooLarge;
        }
        let remaining_ns = deadline_ns.saturating_sub(monotonic_ns());
        if remaining_ns == 0
            || stream
                .set_read_timeout(Some(Duration::from_nanos(remaining_ns)))
                .is_err()
        {
            return Head::Broken;
        }
        match stream.read(&mut buf[len..]) {
            Ok(0) | Err(_) => return Head::Broken,
            Ok(n) => len += n,
        }
    }
}

/// The ops workers' thinned fault log.
static OPS_FAULTS: crate::runtime::contain::FaultLog = crate::runtime::contain::FaultLog::new();

struct Worker {
    health: Arc<Health>,
    registry: Registry,
    stats: Arc<OpsHttpStats>,
    config: OpsServerConfig,
}

impl Worker {
    /// [`Worker::serve`] inside the connection's unwind boundary: a fault
    /// drops the stream (closed) and the worker takes the next. Nothing
    /// shared is written while a request is answered (the health state
    /// and the registry are read; the counters are atomics), so nothing
    /// is left half-updated.
    fn serve_contained(&self, stream: TcpStream, buf: &mut [u8]) {
        let peer = stream.peer_addr().ok();
        if let Err(fault) = crate::runtime::contain::contain(|| self.serve(stream, buf)) {
            self.stats.faults.fetch_add(1, Ordering::Relaxed);
            let shown = peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
            OPS_FAULTS.report("ops-http", &shown, &fault);
        }
    }

    fn serve(&self, mut stream: TcpStream, buf: &mut [u8]) {
        let write_timeout = Duration::from_millis(self.config.write_timeout_ms.max(1));
        if stream.set_nonblocking(false).is_err()
            || stream.set_write_timeout(Some(write_timeout)).is_err()
        {
            return;
        }
        let (label, response) = match read_head(&mut stream, buf, self.config.read_timeout_ms) {
            Head::Complete(len) => route(&buf[..len], &self.health, &self.registry),
            Head::TooLarge => ("other", Response::text(431, "request head too large")),
            // A peer that sent nothing useful in time gets no answer.
            Head::Broken => return,
        };
        self.stats.count(label, response.status);
        // The peer may be gone; there is nobody to tell.
        let _ = stream.write_all(&response.to_bytes());
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
}

/// The ops listener. See the module doc for its limits.
#[derive(Debug)]
pub struct OpsServer;

/// A running ops listener. `stop` (or drop) closes it and joins its threads.
#[derive(Debug)]
pub struct OpsHandle {
    local_addr: SocketAddr,
    waker: Arc<mio::Waker>,
    threads: Vec<Supervised<()>>,
    stats: Arc<OpsHttpStats>,
}

const LISTENER: mio::Token = mio::Token(0);
const WAKE: mio::Token = mio::Token(1);

impl OpsServer {
    /// Binds `addr` and serves with default limits. Registers the health
    /// state and the listener's own counters into `registry`.
    pub fn spawn(
        addr: SocketAddr,
        health: Arc<Health>,
        registry: Registry,
    ) -> Result<OpsHandle, OpsError> {
        Self::spawn_with(addr, health, registry, OpsServerConfig::default())
    }

    /// As [`OpsServer::spawn`] with explicit limits.
    pub fn spawn_with(
        addr: SocketAddr,
        health: Arc<Health>,
        registry: Registry,
        config: OpsServerConfig,
    ) -> Result<OpsHandle, OpsError> {
        assert!(
            config.workers > 0 && config.queue_max > 0,
            "ops server needs a worker and a queue"
        );
        let bind = |e| OpsError::Bind { addr, source: e };
        let std_listener = crate::runtime::listen::bind(addr).map_err(bind)?;
        let local_addr = std_listener.local_addr().map_err(bind)?;
        std_listener.set_nonblocking(true).map_err(bind)?;
        let mut listener = mio::net::TcpListener::from_std(std_listener);
        let poll = mio::Poll::new().map_err(bind)?;
        poll.registry()
            .register(&mut listener, LISTENER, mio::Interest::READABLE)
            .map_err(bind)?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE).map_err(bind)?);

        let stats = Arc::new(OpsHttpStats::default());
        registry.register_collect(health.clone());
        registry.register_collect(stats.clone());
        let (tx, rx) = crossbeam_channel::bounded::<TcpStream>(config.queue_max);
        let mut threads = Vec::with_capacity(config.workers + 1);
        let supervisor = health.supervisor().clone();
        for i in 0..config.workers {
            let worker = Worker {
                health: health.clone(),
                registry: registry.clone(),
                stats: stats.clone(),
                config,
            };
            let rx = rx.clone();
            let body = move || {
                let mut buf = vec![0u8; worker.config.request_head_max_bytes];
                for stream in rx.iter() {
                    crate::runtime::drill::point("ops-http", i as u32);
                    worker.serve_contained(stream, &mut buf);
                }
            };
            let spawned = supervisor.spawn(format!("ops-http-{i}"), Policy::Permanent, body);
            threads.push(spawned.map_err(bind)?);
        }
        let accept_stats = stats.clone();
        let body = move || accept_loop(poll, listener, tx, &accept_stats);
        let spawned = supervisor.spawn("ops-accept", Policy::Permanent, body);
        threads.push(spawned.map_err(bind)?);
        tracing::info!(%local_addr, "ops listener up");
        Ok(OpsHandle {
            local_addr,
            waker,
            threads,
            stats,
        })
    }
}

/// Pause before retrying accept after an error (e.g. out of descriptors):
/// readiness is edge-triggered, so the backlog must be retried on a timer
/// rather than waiting for an edge that may never come.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

fn accept_loop(
    mut poll: mio::Poll,
    listener: mio::net::TcpListener,
    tx: crossbeam_channel::Sender<TcpStream>,
    stats: &OpsHttpStats,
) {
    let mut events = mio::Events::with_capacity(16);
    let mut retry = false;
    loop {
        if let Err(e) = poll.poll(&mut events, retry.then_some(ACCEPT_RETRY)) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!(error = %e, "ops listener poll failed; ops endpoints are down");
            return;
        }
        if events.iter().any(|e| e.token() == WAKE) {
            return; // dropping `tx` ends the workers once the queue is empty
        }
        crate::runtime::drill::point("ops-accept", 0);
        retry = accept_ready(&listener, &tx, stats);
    }
}

/// Drains the listener's readiness until WouldBlock (mio's contract).
/// Returns true if accept failed and must be retried after a pause.
fn accept_ready(
    listener: &mio::net::TcpListener,
    tx: &crossbeam_channel::Sender<TcpStream>,
    stats: &OpsHttpStats,
) -> bool {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                let stream = TcpStream::from(stream);
                if let Err(crossbeam_channel::TrySendError::Full(stream)) = tx.try_send(stream) {
                    reject_busy(stream, stats);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(error = %e, "ops accept failed; retrying shortly");
                return true;
            }
        }
    }
}

#[cold]
fn reject_busy(mut stream: TcpStream, stats: &OpsHttpStats) {
    stats.rejected.fetch_add(1, Ordering::Relaxed);
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = stream.write_all(&Response::text(503, "ops listener busy").to_bytes());
}

impl OpsHandle {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The listener's own counters.
    pub fn stats(&self) -> &OpsHttpStats {
        &self.stats
    }

    /// Stops accepting, lets the workers finish the queued connections and
    /// joins every thread.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        for t in &self.threads {
            t.request_stop();
        }
        if let Err(e) = self.waker.wake() {
            tracing::error!(error = %e, "ops listener wake failed; not joining its threads");
            self.threads.clear();
            return;
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        tracing::info!(local_addr = %self.local_addr, "ops listener stopped");
    }
}

impl Drop for OpsHandle {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Loopback address of the same family, for clients of an unspecified bind.
pub fn connectable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port())
        }
        _ => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn fixture() -> (Arc<Health>, Registry) {
        (Health::new(ManualClock::new(0), 1000), Registry::new())
    }

    #[test]
    fn readyz_follows_state() {
        let (h, r) = fixture();
        assert_eq!(route(b"GET /readyz HTTP/1.1\r\n\r\n", &h, &r).1.status, 503);
        h.set_serving();
        assert_eq!(route(b"GET /readyz HTTP/1.1\r\n\r\n", &h, &r).1.status, 200);
        h.begin_draining();
        assert_eq!(
            route(b"GET /readyz?x=1 HTTP/1.1\r\n\r\n", &h, &r).1.status,
            503
        );
    }

    #[test]
    fn non_get_is_refused_with_allow_header() {
        let (h, r) = fixture();
        let (_, resp) = route(b"POST /livez HTTP/1.1\r\n\r\n", &h, &r);
        assert_eq!(resp.status, 405);
        assert!(String::from_utf8(resp.to_bytes())
            .unwrap()
            .contains("Allow: GET\r\n"));
    }

    #[test]
    fn malformed_and_unknown_requests() {
        let (h, r) = fixture();
        assert_eq!(route(b"GET\r\n\r\n", &h, &r).1.status, 400);
        assert_eq!(route(b"GET /livez HTTP/2\r\n\r\n", &h, &r).1.status, 400);
        assert_eq!(route(b"\xff\xfe /x HTTP/1.1\r\n\r\n", &h, &r).1.status, 400);
        assert_eq!(route(b"GET /admin HTTP/1.1\r\n\r\n", &h, &r).1.status, 404);
    }

    #[test]
    fn response_has_length_and_close() {
        let text = String::from_utf8(Response::text(200, "ok").to_bytes()).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(text.contains("Content-Length: 3\r\n") && text.contains("Connection: close\r\n"));
        assert!(text.ends_with("\r\n\r\nok\n"));
    }
}
