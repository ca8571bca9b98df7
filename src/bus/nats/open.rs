//! Opening one server connection: TCP, INFO, CONNECT, PING/PONG, then
//! the subscriptions again (a child of `client`, which owns the state).

use std::io::{self, Read, Write};
use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::super::liveness::Keepalive;
use super::super::proto::{self, Op, ReadBuf};
use super::super::session::Session;
use super::{io_err, Client, Conn, ATTEMPT_TIMEOUT, PING_INTERVAL, PING_MAX_OUTSTANDING, SOCKET};
use crate::bus::{reconnect_delay, BusStats, SERVERS_MAX};
use crate::clock::Clock;

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
            rbuf: ReadBuf::new(super::super::MAX_PAYLOAD_DEFAULT),
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
    pub(super) fn open(&mut self, i: usize, timeout: Duration) -> io::Result<()> {
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
}
