//! A NATS client for the `pw-bus` thread: one server connection at a time,
//! driven by the thread's own loop.
//!
//! Why not async: the bus thread owns exactly one connection and has
//! nothing else to wait on, so a runtime, its tasks and its channels would
//! only add allocations per message and threads to schedule. This is a
//! readiness loop over one non-blocking socket (mio: one `epoll` per turn,
//! nothing allocated per turn) around the sans-IO [`proto`] core.
//!
//! Contract:
//! - **Allocation**: buffers (read, write, reply, pending) are sized at
//!   start and reused; publishing, receiving, keepalive and a request
//!   whose reply fits what earlier replies needed allocate nothing.
//! - **Blocking**: [`Client::poll`] waits at most the given time (plus a
//!   connect attempt, at most [`ATTEMPT_TIMEOUT`], when one is due); a
//!   write waits at most [`WRITE_TIMEOUT`] for the socket before the
//!   connection is declared lost; [`Client::request`] at most its timeout.
//! - **Failures**: a lost connection (closed, reset, protocol error, write
//!   stall, [`PING_MAX_OUTSTANDING`] unanswered PINGs) is counted in
//!   [`BusStats`], and the client reconnects from [`Client::poll`] to the
//!   next server in the list with [`crate::bus::reconnect_delay`] between
//!   attempts, forever, then subscribes again; each failed attempt is
//!   counted by kind (`open.rs`), and refused credentials or a TLS
//!   handshake that fails are logged as warnings, once per new reason.
//!   Publishes while it has no server are refused (the caller counts
//!   them); a publish or subscription the server's permissions refuse is
//!   counted and logged at the 1st, 2nd, 4th, 8th… time.
//! - **Security**: TLS (`tls.rs`) and credentials (`auth.rs`) are set up
//!   in `open.rs` and cost the steady state one enum match per socket
//!   call; sealing and opening records allocate nothing.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Events, Poll, Token};
use rand::rngs::SmallRng;

use super::access::Access;
use super::link::Link;
use super::liveness::{Beat, Keepalive};
use super::proto::{self, Op, ReadBuf};
use super::session::{RequestError, Session};
use crate::bus::{reconnect_delay, BusStats};
use crate::clock::Clock;

pub(crate) use open::{FailKind, Failure};

/// Longest one connect attempt (TCP, INFO, CONNECT, PONG) may take.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a write may wait for room in the socket.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Client PING period, and unanswered PINGs that mean a dead server.
pub(crate) const PING_INTERVAL: Duration = Duration::from_secs(2);
pub(crate) const PING_MAX_OUTSTANDING: u32 = 2;
/// Buffered output written out at this size even before a flush.
const WRITE_FLUSH_BYTES: usize = 32 * 1024;
/// Socket reads per [`Client::poll`] turn before it returns.
const READS_PER_TURN: usize = 16;
const SOCKET: Token = Token(0);

/// The open connection.
struct Conn {
    sock: TcpStream,
    link: Link,
    readable: bool,
    writable: bool,
    max_payload: usize,
}

/// The client; see the module doc.
pub(crate) struct Client {
    conn: Option<Conn>,
    rbuf: ReadBuf,
    st: Session,
    poll: Poll,
    events: Events,
    /// `host:port`: the configured servers first, then learned ones.
    servers: Vec<String>,
    /// How many of `servers` were configured (`--bus`).
    configured: usize,
    /// Credentials and TLS, read again before each attempt.
    access: Access,
    current: usize,
    attempt: usize,
    retry_at_ns: u64,
    keepalive: Keepalive,
    rng: SmallRng,
    clock: Arc<dyn Clock>,
    stats: Arc<BusStats>,
    /// The last refusal warned about while reconnecting.
    last_refusal: Option<String>,
}

fn io_err(reason: impl Into<String>) -> io::Error {
    io::Error::other(reason.into())
}

impl Client {
    /// Subscribes to `subject` (again after every reconnect); its messages
    /// go to [`Client::poll`]'s handler.
    pub(crate) fn subscribe(&mut self, subject: &str) {
        self.st.subscribe(subject);
    }

    /// Queues a publish (written out at [`WRITE_FLUSH_BYTES`] or by the
    /// next poll or flush); false if there is no server now.
    pub(crate) fn publish(&mut self, subject: &str, payload: &[u8]) -> bool {
        if self.conn.is_none() {
            return false;
        }
        proto::publish(&mut self.st.out, subject, None, payload);
        if self.st.out.len() >= WRITE_FLUSH_BYTES {
            self.flush();
        }
        self.conn.is_some()
    }

    /// Writes out everything queued (false if the connection was lost).
    pub(crate) fn flush(&mut self) -> bool {
        if let Err(e) = self.write_out() {
            self.lost(&e.to_string());
        }
        self.conn.is_some()
    }

    /// One turn: delivers buffered and arriving messages to `on_msg`
    /// (subject, payload), answers PINGs, keeps the connection alive;
    /// waits at most `wait` for something to arrive. Reconnects when due.
    pub(crate) fn poll(&mut self, wait: Duration, on_msg: &mut dyn FnMut(&[u8], &[u8])) {
        self.st.pending.drain(on_msg);
        if self.conn.is_none() {
            return self.reconnect_when_due(wait);
        }
        if let Err(e) = self.turn(wait, on_msg) {
            self.lost(&e.to_string());
        }
    }

    fn turn(&mut self, wait: Duration, on_msg: &mut dyn FnMut(&[u8], &[u8])) -> io::Result<()> {
        match self.keepalive.tick(self.clock.now_ns()) {
            Beat::Idle => {}
            Beat::Ping => proto::ping(&mut self.st.out),
            Beat::Dead => return Err(io_err("no PONG from the server")),
        }
        self.write_out()?;
        if !self.conn.as_ref().is_some_and(|c| c.readable) {
            self.wait_events(wait)?;
        }
        self.read_some(on_msg)?;
        self.write_out()
    }

    fn wait_events(&mut self, wait: Duration) -> io::Result<()> {
        match self.poll.poll(&mut self.events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        if let Some(c) = self.conn.as_mut() {
            for ev in self.events.iter() {
                c.readable |= ev.is_readable() || ev.is_read_closed() || ev.is_error();
                c.writable |= ev.is_writable() || ev.is_error();
            }
        }
        Ok(())
    }

    fn read_some(&mut self, on_msg: &mut dyn FnMut(&[u8], &[u8])) -> io::Result<()> {
        // Ops that came in with the handshake's last read.
        if let Some(c) = self.conn.as_ref().filter(|_| !self.rbuf.data().is_empty()) {
            self.dispatch(c.max_payload, on_msg)?;
        }
        for _ in 0..READS_PER_TURN {
            let Some(c) = self.conn.as_mut() else {
                return Ok(());
            };
            if !c.readable {
                return Ok(());
            }
            let room = self.rbuf.spare();
            if room.is_empty() {
                return Err(io_err("read buffer full"));
            }
            match c.link.read(&mut c.sock, room) {
                Ok(0) => return Err(io_err("closed by the server")),
                Ok(n) => self.rbuf.filled(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let max_payload = c.max_payload;
            self.dispatch(max_payload, on_msg)?;
        }
        Ok(())
    }

    /// Handles every complete op in the read buffer.
    fn dispatch(
        &mut self,
        max_payload: usize,
        on_msg: &mut dyn FnMut(&[u8], &[u8]),
    ) -> io::Result<()> {
        loop {
            let parsed = proto::parse(self.rbuf.data(), max_payload);
            let Some((op, n)) = parsed.map_err(|e| io_err(e.to_string()))? else {
                return Ok(());
            };
            match op {
                Op::Pong => self.keepalive.pong(),
                Op::Err(reason) => server_error(&self.stats, &self.access, reason),
                _ => {}
            }
            self.st.handle(op, &mut self.servers, on_msg);
            self.rbuf.consume(n);
        }
    }

    fn write_out(&mut self) -> io::Result<()> {
        let deadline = self.clock.now_ns() + WRITE_TIMEOUT.as_nanos() as u64;
        let mut at = 0;
        loop {
            let Some(c) = self.conn.as_mut() else {
                self.st.out.clear();
                return Ok(());
            };
            if at >= self.st.out.len() && !c.link.pending() {
                break;
            }
            if !c.writable {
                let left = deadline.saturating_sub(self.clock.now_ns());
                if left == 0 {
                    return Err(io_err("write stalled"));
                }
                self.wait_events(Duration::from_nanos(left))?;
                continue;
            }
            let wrote = if at < self.st.out.len() {
                c.link.write(&mut c.sock, &self.st.out[at..])
            } else {
                c.link.flush(&mut c.sock).map(|()| 0)
            };
            match wrote {
                Ok(0) if at < self.st.out.len() => return Err(io_err("wrote nothing")),
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.writable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.st.out.clear();
        Ok(())
    }

    /// Sends a request to `subject` (with `headers` if any) and waits at
    /// most `timeout` for its reply through the inbox subscription.
    /// Messages of other subscriptions meanwhile are kept for the next
    /// [`Client::poll`].
    pub(crate) fn request(
        &mut self,
        subject: &str,
        headers: &[(&str, &[u8])],
        payload: &[u8],
        timeout: Duration,
    ) -> Result<&super::session::Reply, RequestError> {
        if self.conn.is_none() {
            return Err(RequestError::NotConnected);
        }
        self.st.start_request(subject, headers, payload);
        let deadline = self.clock.now_ns() + timeout.as_nanos() as u64;
        let result = loop {
            if self.st.reply.done {
                break Ok(());
            }
            if self.st.reply.denied {
                break Err(RequestError::Denied);
            }
            let left = deadline.saturating_sub(self.clock.now_ns());
            if left == 0 {
                break Err(RequestError::Timeout);
            }
            let wait = Duration::from_nanos(left).min(Duration::from_millis(50));
            if let Err(e) = self.turn(wait, &mut |_, _| {}) {
                self.lost(&e.to_string());
                break Err(RequestError::Lost);
            }
        };
        self.st.buffering = false;
        result.map(|()| &self.st.reply)
    }

    /// The connection is gone: count it and schedule the next server.
    fn lost(&mut self, why: &str) {
        let Some(mut c) = self.conn.take() else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut c.sock);
        self.rbuf.clear();
        self.st.out.clear();
        self.stats.connected.set(0);
        self.stats.disconnects.inc();
        tracing::warn!(server = %crate::runtime::esc(&self.servers[self.current]), reason = %crate::runtime::esc(why), "NATS connection lost");
        self.attempt = 0;
        self.current = (self.current + 1) % self.servers.len();
        self.retry_at_ns =
            self.clock.now_ns() + reconnect_delay(0, &mut self.rng).as_nanos() as u64;
    }

    /// A failed reconnect: credentials or TLS refused are warnings (once
    /// per new reason: they need an operator); the rest is debug.
    fn refused(&mut self, i: usize, e: &Failure) {
        let server = crate::runtime::esc(&self.servers[i]);
        if !matches!(e.kind, FailKind::Auth | FailKind::Tls) {
            tracing::debug!(%server, error = %e.reason, "NATS reconnect failed");
            return;
        }
        if self.last_refusal.as_deref() != Some(e.reason.as_str()) {
            tracing::warn!(%server, reason = %e.reason, credentials = %self.access.describe(), "NATS refused the connection; retrying with backoff");
            self.last_refusal = Some(e.reason.clone());
        }
    }

    fn reconnect_when_due(&mut self, wait: Duration) {
        let now = self.clock.now_ns();
        if now < self.retry_at_ns {
            let until = Duration::from_nanos(self.retry_at_ns - now);
            std::thread::sleep(until.min(wait));
            return;
        }
        let i = self.current;
        match self.open(i, ATTEMPT_TIMEOUT) {
            Ok(()) => {
                self.stats.mark_reconnected();
                tracing::info!(server = %crate::runtime::esc(&self.servers[i]), "NATS connection restored");
            }
            Err(e) => {
                self.refused(i, &e);
                self.attempt += 1;
                self.current = (i + 1) % self.servers.len();
                let delay = reconnect_delay(self.attempt, &mut self.rng);
                self.retry_at_ns = self.clock.now_ns() + delay.as_nanos() as u64;
            }
        }
    }
}

/// A `-ERR` after the handshake: counted; a permission refusal is logged
/// at the 1st, 2nd, 4th… time (a core publishing with an edge's
/// credentials would otherwise log every price).
fn server_error(stats: &BusStats, access: &Access, reason: &[u8]) {
    let text = String::from_utf8_lossy(reason);
    if !text.contains("Permissions Violation") {
        tracing::warn!(reason = %crate::runtime::esc_bytes(reason), "NATS server error");
        return;
    }
    stats.permission_denied.inc();
    let n = stats.permission_denied.get();
    if n.is_power_of_two() {
        tracing::warn!(
            reason = %crate::runtime::esc_bytes(reason),
            times = n,
            credentials = %access.describe(),
            "NATS refused an operation for these credentials' permissions"
        );
    }
}

#[path = "open.rs"]
mod open;

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
