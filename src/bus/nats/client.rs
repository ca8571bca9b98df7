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
//!   attempts, forever, then subscribes again. Publishes while it has no
//!   server are refused (the caller counts them).

use std::io::{self, Read, Write};
use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::liveness::{Beat, Keepalive};
use super::proto::{self, Op, ReadBuf};
use super::session::{RequestError, Session};
use crate::bus::{reconnect_delay, BusStats, SERVERS_MAX};
use crate::clock::Clock;

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
    current: usize,
    attempt: usize,
    retry_at_ns: u64,
    keepalive: Keepalive,
    rng: SmallRng,
    clock: Arc<dyn Clock>,
    stats: Arc<BusStats>,
}

fn io_err(reason: impl Into<String>) -> io::Error {
    io::Error::other(reason.into())
}

/// A TCP connection to the first address of `server` (`host:port`) that
/// accepts within `timeout` each.
fn dial(server: &str, timeout: Duration) -> io::Result<std::net::TcpStream> {
    let mut last = io_err("no address");
    for addr in server.to_socket_addrs()? {
        match std::net::TcpStream::connect_timeout(&addr, timeout) {
            Ok(sock) => return Ok(sock),
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl Client {
    /// Connects to the first of `servers` (`nats://host:port`) that
    /// answers, in order, round after round with backoff, for at most
    /// `timeout`; the error names the last server's reason.
    pub(crate) fn connect(
        servers: &[String],
        timeout: Duration,
        clock: Arc<dyn Clock>,
        stats: Arc<BusStats>,
    ) -> Result<Client, String> {
        let mut rng = SmallRng::from_entropy();
        let inbox = (0..22)
            .map(|_| char::from(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[rng.gen_range(0..36)]))
            .collect::<String>();
        let mut c = Client {
            conn: None,
            rbuf: ReadBuf::new(super::MAX_PAYLOAD_DEFAULT),
            st: Session::new(&format!("_INBOX.{inbox}.")),
            poll: Poll::new().map_err(|e| format!("poll: {e}"))?,
            events: Events::with_capacity(8),
            servers: servers
                .iter()
                .map(|s| s.strip_prefix("nats://").unwrap_or(s).to_string())
                .collect(),
            current: 0,
            attempt: 0,
            retry_at_ns: 0,
            keepalive: Keepalive::new(PING_INTERVAL.as_nanos() as u64, PING_MAX_OUTSTANDING),
            rng,
            clock,
            stats,
        };
        let deadline = c.clock.now_ns() + timeout.as_nanos() as u64;
        let mut why = String::from("no server tried");
        for round in 0.. {
            for i in 0..c.servers.len().min(SERVERS_MAX) {
                let left = deadline.saturating_sub(c.clock.now_ns());
                if left == 0 {
                    return Err(why);
                }
                match c.open(i, Duration::from_nanos(left).min(ATTEMPT_TIMEOUT)) {
                    Ok(()) => return Ok(c),
                    Err(e) => why = format!("{}: {e}", c.servers[i]),
                }
            }
            let left = deadline.saturating_sub(c.clock.now_ns());
            std::thread::sleep(reconnect_delay(round, &mut c.rng).min(Duration::from_nanos(left)));
        }
        Err(why)
    }

    /// Opens server `i`: TCP, INFO, CONNECT, PING/PONG, then the
    /// subscriptions again.
    fn open(&mut self, i: usize, timeout: Duration) -> io::Result<()> {
        // A socket deadline, in real time: the OS times these reads.
        let until = std::time::Instant::now() + timeout;
        let mut sock = dial(&self.servers[i], timeout)?;
        sock.set_nodelay(true)?;
        sock.set_write_timeout(Some(timeout))?;
        self.rbuf.clear();
        self.st.out.clear();
        let max_payload = self.handshake_read(&mut sock, true, until)?;
        self.rbuf.reserve(max_payload);
        self.st.hello();
        sock.write_all(&self.st.out)?;
        self.st.out.clear();
        self.handshake_read(&mut sock, false, until)?;
        self.st.resubscribe();
        sock.write_all(&self.st.out)?;
        self.st.out.clear();
        sock.set_nonblocking(true)?;
        let mut sock = TcpStream::from_std(sock);
        self.poll.registry().register(
            &mut sock,
            SOCKET,
            Interest::READABLE | Interest::WRITABLE,
        )?;
        self.conn = Some(Conn {
            sock,
            readable: true,
            writable: true,
            max_payload,
        });
        self.current = i;
        self.attempt = 0;
        self.keepalive.start(self.clock.now_ns());
        self.stats.connected.set(1);
        Ok(())
    }

    /// Reads blocking until INFO (`want_info`; its max_payload returned)
    /// or the PONG that answers CONNECT's PING.
    fn handshake_read(
        &mut self,
        sock: &mut std::net::TcpStream,
        want_info: bool,
        until: std::time::Instant,
    ) -> io::Result<usize> {
        loop {
            let parsed = proto::parse(self.rbuf.data(), proto::PAYLOAD_MAX);
            let Some((op, n)) = parsed.map_err(|e| io_err(e.to_string()))? else {
                let left = until.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return Err(io::Error::from(io::ErrorKind::TimedOut));
                }
                sock.set_read_timeout(Some(left))?;
                let room = self.rbuf.spare();
                match sock.read(room)? {
                    0 => return Err(io_err("closed during the handshake")),
                    n => self.rbuf.filled(n),
                }
                continue;
            };
            let done = match op {
                Op::Info(json) if want_info => {
                    Some(self.st.info(json, &mut self.servers, SERVERS_MAX))
                }
                Op::Pong if !want_info => Some(0),
                Op::Err(r) => {
                    return Err(io_err(format!("refused: {}", String::from_utf8_lossy(r))))
                }
                Op::Ping => {
                    proto::pong(&mut self.st.out);
                    None
                }
                _ => None,
            };
            self.rbuf.consume(n);
            if let Some(max_payload) = done {
                return Ok(max_payload.clamp(1, proto::PAYLOAD_MAX));
            }
        }
    }

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
            match c.sock.read(room) {
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
            if op == Op::Pong {
                self.keepalive.pong();
            }
            self.st.handle(op, &mut self.servers, on_msg);
            self.rbuf.consume(n);
        }
    }

    fn write_out(&mut self) -> io::Result<()> {
        let deadline = self.clock.now_ns() + WRITE_TIMEOUT.as_nanos() as u64;
        let mut at = 0;
        while at < self.st.out.len() {
            let Some(c) = self.conn.as_mut() else {
                self.st.out.clear();
                return Ok(());
            };
            if !c.writable {
                let left = deadline.saturating_sub(self.clock.now_ns());
                if left == 0 {
                    return Err(io_err("write stalled"));
                }
                self.wait_events(Duration::from_nanos(left))?;
                continue;
            }
            match c.sock.write(&self.st.out[at..]) {
                Ok(0) => return Err(io_err("wrote nothing")),
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
                tracing::debug!(server = %crate::runtime::esc(&self.servers[i]), error = %crate::runtime::esc(&e), "NATS reconnect failed");
                self.attempt += 1;
                self.current = (i + 1) % self.servers.len();
                let delay = reconnect_delay(self.attempt, &mut self.rng);
                self.retry_at_ns = self.clock.now_ns() + delay.as_nanos() as u64;
            }
        }
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
