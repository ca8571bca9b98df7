//! Opening one server connection: TCP, INFO, TLS when it is on, CONNECT
//! with the credentials, PING/PONG, then the subscriptions again (a
//! child of `client`, which owns the state). Every refusal is a
//! [`Failure`] whose kind is counted
//! (`pricewire_bus_connect_failures_total{reason}`).

use std::io;
use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Poll};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::super::access::Access;
use super::super::link::Link;
use super::super::liveness::Keepalive;
use super::super::proto::{self, Op, ReadBuf};
use super::super::session::{ServerInfo, Session};
use super::super::tls;
use super::{Client, Conn, ATTEMPT_TIMEOUT, PING_INTERVAL, PING_MAX_OUTSTANDING, SOCKET};
use crate::bus::security::host_of;
use crate::bus::{reconnect_delay, BusStats, SERVERS_MAX};
use crate::clock::Clock;

/// Why one connect attempt failed, by the kind that is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailKind {
    /// The server refused the credentials (or none were given and it
    /// wants some), or they could not be read here.
    Auth,
    /// TLS: the handshake failed (a chain or name that does not verify),
    /// or one side requires TLS and the other does not offer it.
    Tls,
    /// Another `-ERR` from the server during the handshake.
    Refused,
    /// TCP: refused, unreachable, reset, timed out, closed.
    Io,
}

impl FailKind {
    /// The `reason` label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            FailKind::Auth => "auth",
            FailKind::Tls => "tls",
            FailKind::Refused => "refused",
            FailKind::Io => "io",
        }
    }
}

/// A failed connect attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) kind: FailKind,
    pub(crate) reason: String,
}

impl Failure {
    fn new(kind: FailKind, reason: impl Into<String>) -> Failure {
        Failure {
            kind,
            reason: reason.into(),
        }
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        // The TLS layer's refusals carry its prefix.
        let kind = if e.to_string().starts_with("TLS") {
            FailKind::Tls
        } else {
            FailKind::Io
        };
        Failure::new(kind, e.to_string())
    }
}

/// The kind of a `-ERR` a server sends during the handshake.
fn refusal(reason: &[u8]) -> Failure {
    let text = String::from_utf8_lossy(reason)
        .trim_matches('\'')
        .to_string();
    let lower = text.to_ascii_lowercase();
    let kind = if lower.contains("authorization") || lower.contains("authentication") {
        FailKind::Auth
    } else if lower.contains("tls") || lower.contains("secure connection") {
        FailKind::Tls
    } else {
        FailKind::Refused
    };
    Failure::new(
        kind,
        format!("refused by the server: {}", crate::runtime::esc(&text)),
    )
}

/// A TCP connection to the first address of `server` (`host:port`) that
/// accepts within `timeout` each.
fn dial(server: &str, timeout: Duration) -> io::Result<std::net::TcpStream> {
    let mut last = io::Error::other("no address");
    for addr in server.to_socket_addrs()? {
        match std::net::TcpStream::connect_timeout(&addr, timeout) {
            Ok(sock) => return Ok(sock),
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl Client {
    /// Connects to the first of `servers` (`nats://` or `tls://`
    /// `host:port`) that answers, in order, round after round with
    /// backoff, for at most `timeout`; the error names the last server's
    /// reason. A round in which every server refused the credentials or
    /// the TLS handshake ends it early: waiting does not mend those.
    pub(crate) fn connect(
        servers: &[String],
        access: Access,
        timeout: Duration,
        clock: Arc<dyn Clock>,
        stats: Arc<BusStats>,
    ) -> Result<Client, Failure> {
        let mut rng = SmallRng::from_entropy();
        let inbox = (0..22)
            .map(|_| char::from(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[rng.gen_range(0..36)]))
            .collect::<String>();
        let mut c = Client {
            conn: None,
            rbuf: ReadBuf::new(super::super::MAX_PAYLOAD_DEFAULT),
            st: Session::new(&format!("_INBOX.{inbox}.")),
            poll: Poll::new().map_err(|e| Failure::new(FailKind::Io, format!("poll: {e}")))?,
            events: mio::Events::with_capacity(8),
            servers: servers.iter().map(|s| host_port(s).to_string()).collect(),
            configured: servers.len().min(SERVERS_MAX),
            access,
            current: 0,
            attempt: 0,
            retry_at_ns: 0,
            keepalive: Keepalive::new(PING_INTERVAL.as_nanos() as u64, PING_MAX_OUTSTANDING),
            rng,
            clock,
            stats,
            last_refusal: None,
        };
        let deadline = c.clock.now_ns() + timeout.as_nanos() as u64;
        let mut why = Failure::new(FailKind::Io, "no server tried");
        for round in 0.. {
            let mut mendable = false;
            for i in 0..c.servers.len().min(SERVERS_MAX) {
                let left = deadline.saturating_sub(c.clock.now_ns());
                if left == 0 {
                    return Err(why);
                }
                match c.open(i, Duration::from_nanos(left).min(ATTEMPT_TIMEOUT)) {
                    Ok(()) => return Ok(c),
                    Err(e) => {
                        mendable |= matches!(e.kind, FailKind::Io | FailKind::Refused);
                        why = Failure::new(e.kind, format!("{}: {}", c.servers[i], e.reason));
                    }
                }
            }
            if !mendable {
                return Err(why);
            }
            let left = deadline.saturating_sub(c.clock.now_ns());
            std::thread::sleep(reconnect_delay(round, &mut c.rng).min(Duration::from_nanos(left)));
        }
        Err(why)
    }

    /// Opens server `i` within `timeout`; a failure is counted by kind.
    pub(super) fn open(&mut self, i: usize, timeout: Duration) -> Result<(), Failure> {
        self.access.refresh();
        let opened = self.try_open(i, timeout);
        if let Err(e) = &opened {
            self.stats.connect_failures.count(e.kind.label());
        }
        opened
    }

    fn try_open(&mut self, i: usize, timeout: Duration) -> Result<(), Failure> {
        // A socket deadline, in real time: the OS times these reads.
        let until = Instant::now() + timeout;
        let mut sock = dial(&self.servers[i], timeout)?;
        sock.set_nodelay(true)?;
        sock.set_write_timeout(Some(timeout))?;
        self.rbuf.clear();
        self.st.out.clear();
        let mut link = Link::Plain;
        let info = self.handshake_read(&mut sock, &mut link, true, until)?;
        let secure = self.secure(&mut sock, &mut link, &info, i, until)?;
        self.rbuf
            .reserve(info.max_payload.clamp(1, proto::PAYLOAD_MAX));
        self.st
            .hello(self.access.material(), info.nonce.as_deref(), secure)
            .map_err(|e| Failure::new(FailKind::Auth, e.to_string()))?;
        let sent = link.write_all(&mut sock, &self.st.out);
        // CONNECT may hold a password or token: wipe it from the buffer.
        zeroize::Zeroize::zeroize(self.st.out.as_mut_slice());
        self.st.out.clear();
        sent?;
        self.handshake_read(&mut sock, &mut link, false, until)?;
        self.st.resubscribe();
        link.write_all(&mut sock, &self.st.out)?;
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
            link,
            readable: true,
            writable: true,
            max_payload: info.max_payload.clamp(1, proto::PAYLOAD_MAX),
        });
        self.current = i;
        self.attempt = 0;
        self.last_refusal = None;
        self.keepalive.start(self.clock.now_ns());
        self.stats.connected.set(1);
        Ok(())
    }

    /// TLS when this client has it on (then a server that offers none is
    /// refused: credentials never go out in clear); a server that
    /// requires TLS from a client without it is refused with the flags
    /// that turn it on. Returns whether the link is now TLS.
    fn secure(
        &mut self,
        sock: &mut std::net::TcpStream,
        link: &mut Link,
        info: &ServerInfo,
        i: usize,
        until: Instant,
    ) -> Result<bool, Failure> {
        let Some(config) = self.access.tls_config() else {
            if info.tls_required {
                return Err(Failure::new(
                    FailKind::Tls,
                    "the server requires TLS: give --bus-tls-ca FILE (and tls:// URLs)",
                ));
            }
            return Ok(false);
        };
        if !(info.tls_required || info.tls_available) {
            return Err(Failure::new(
                FailKind::Tls,
                "the server offers no TLS and this client requires it",
            ));
        }
        let name = tls::server_name(self.tls_name(i))
            .map_err(|e| Failure::new(FailKind::Tls, e.to_string()))?;
        sock.set_read_timeout(Some(left(until)?))?;
        let session = tls::handshake(sock, &config, name).map_err(|e| {
            let why = e.to_string();
            let why = why.strip_prefix("TLS: ").unwrap_or(&why);
            Failure::new(FailKind::Tls, format!("TLS handshake: {why}"))
        })?;
        *link = Link::Tls(Box::new(session));
        Ok(true)
    }

    /// The name server `i`'s certificate must carry: its own host, except
    /// a learned server given by IP address, which is checked against the
    /// first configured host (a cluster announces its nodes by address).
    fn tls_name(&self, i: usize) -> &str {
        let host = host_of(&self.servers[i]);
        let is_ip = host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok();
        if i >= self.configured && is_ip {
            host_of(&self.servers[0])
        } else {
            host
        }
    }

    /// Reads blocking until INFO (`want_info`) or the PONG that answers
    /// CONNECT's PING; a `-ERR` is the server's refusal.
    fn handshake_read(
        &mut self,
        sock: &mut std::net::TcpStream,
        link: &mut Link,
        want_info: bool,
        until: Instant,
    ) -> Result<ServerInfo, Failure> {
        loop {
            let parsed = proto::parse(self.rbuf.data(), proto::PAYLOAD_MAX);
            let parsed = parsed.map_err(|e| Failure::new(FailKind::Refused, e.to_string()))?;
            let Some((op, n)) = parsed else {
                sock.set_read_timeout(Some(left(until)?))?;
                let room = self.rbuf.spare();
                match link.read(sock, room)? {
                    0 => return Err(Failure::new(FailKind::Io, "closed during the handshake")),
                    n => self.rbuf.filled(n),
                }
                continue;
            };
            let done = match op {
                Op::Info(json) if want_info => {
                    Some(self.st.info(json, &mut self.servers, SERVERS_MAX))
                }
                Op::Pong if !want_info => Some(ServerInfo::default()),
                Op::Err(r) => return Err(refusal(r)),
                Op::Ping => {
                    // Answered with what follows (CONNECT, or the SUBs).
                    proto::pong(&mut self.st.out);
                    None
                }
                _ => None,
            };
            self.rbuf.consume(n);
            if let Some(info) = done {
                return Ok(info);
            }
        }
    }
}

/// Time left before `until`, or the attempt has timed out.
fn left(until: Instant) -> Result<Duration, Failure> {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(Failure::new(FailKind::Io, "timed out"));
    }
    Ok(left)
}

/// `host:port` of a `--bus` URL.
fn host_port(url: &str) -> &str {
    url.strip_prefix("nats://")
        .or_else(|| url.strip_prefix("tls://"))
        .unwrap_or(url)
}
