//! The thin I/O driver: [`FixFeed`], a [`TickSource`] that runs several
//! FIX sessions on the feed thread that polls it.
//!
//! Why a `TickSource` and not a thread of its own: the pipeline already
//! owns a feed thread per source with pinning, a chosen wait strategy, an
//! orderly stop and a bounded ring into the engine; a FIX feed needs
//! nothing else. Each `poll` gives every session one bounded turn —
//! non-blocking connect progress, at most [`READS_PER_TURN_MAX`] socket
//! reads, the session's timers, one write attempt — so one slow or
//! flooding provider cannot starve the others, and nothing ever blocks:
//! sockets are non-blocking (mio's `TcpStream`, connect included) and
//! every timeout is decided by the session from `now_ns`.
//!
//! Allocation: per connection nothing (the receive buffer of
//! [`RX_BYTES`] is allocated once per session in [`FixFeed::new`]);
//! frames are parsed in place and ticks copied into the caller's batch.
//! Host names are resolved at every connect attempt, off this thread
//! (`resolver.rs`): a name that does not resolve fails that attempt under
//! the session's backoff and breaker, counted and logged, and never stops
//! the feed.
//!
//! Latency note: the feed thread learns about socket data by polling, not
//! by readiness; with the default spin-park feed wait an idle feed parks
//! for at most `PARK_MAX_US` between polls. Choose `spin-yield` for the
//! feed stage where that matters.

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

use super::codec;
use super::resolver::{Answer, Asked, Resolver};
use super::session::{FixSession, HealthSlot, Io, SessionState};
use super::stats::{FixFeedStats, FixProviderStats};
use super::FixError;
use crate::clock::{wall_ns, Clock, MonotonicClock, NS_PER_MS};
use crate::config::fix::FixSessionConfig;
use crate::feed::{SourcePoll, TickSource};
use crate::model::Tick;
use crate::resilience::BreakerState;

/// Receive buffer per session: two largest frames, so a complete frame
/// always fits behind a partial one.
pub const RX_BYTES: usize = 2 * (codec::BODY_LEN_MAX + 64);
/// Socket reads per session per poll.
pub const READS_PER_TURN_MAX: usize = 8;

/// The wall clock (UTC ns) used for SendingTime and quote latency.
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock;

impl Clock for WallClock {
    fn now_ns(&self) -> u64 {
        wall_ns()
    }
}

struct Conn {
    session: FixSession,
    /// The connect attempt waiting for its host name (see `resolver.rs`).
    resolving: Option<u64>,
    attempts: u64,
    /// The last lookup failure logged, so a name that keeps failing the
    /// same way is logged once, not at every backoff.
    unresolved: Option<String>,
    stream: Option<mio::net::TcpStream>,
    connecting: bool,
    rx: Box<[u8]>,
    rx_len: usize,
}

/// Several FIX sessions behind one [`TickSource`].
pub struct FixFeed {
    conns: Vec<Conn>,
    wall: Arc<dyn Clock>,
    stats: Arc<FixFeedStats>,
    health: HealthSlot,
    resolver: Resolver,
    next: usize,
    shut: bool,
}

impl FixFeed {
    /// Builds one session per config; first connects are staggered by
    /// position in `configs` from `start_ns`. `seed` makes the jitter
    /// reproducible. No host name is looked up here (see the module doc).
    pub fn new(
        configs: &[FixSessionConfig],
        start_ns: u64,
        seed: u64,
    ) -> Result<FixFeed, FixError> {
        let health = HealthSlot::default();
        let mut conns = Vec::with_capacity(configs.len());
        let mut stats = FixFeedStats::default();
        for (i, cfg) in configs.iter().enumerate() {
            cfg.validate().map_err(|reason| FixError::Config {
                provider: cfg.name.clone(),
                reason,
            })?;
            let session = FixSession::new(
                cfg.clone(),
                i,
                start_ns,
                seed.wrapping_add(i as u64),
                Arc::clone(&health),
            );
            stats.providers.push(FixProviderStats {
                provider: cfg.provider,
                name: cfg.name.clone(),
                session: session.stats(),
                breaker: session.breaker_stats(),
                health: session.health_gauges(),
            });
            conns.push(Conn {
                session,
                resolving: None,
                attempts: 0,
                unresolved: None,
                stream: None,
                connecting: false,
                rx: vec![0u8; RX_BYTES].into_boxed_slice(),
                rx_len: 0,
            });
        }
        Ok(FixFeed {
            conns,
            wall: Arc::new(WallClock),
            stats: Arc::new(stats),
            health,
            resolver: Resolver::default(),
            next: 0,
            shut: false,
        })
    }

    /// Replaces the wall clock (tests stamp quote latency with their own).
    pub fn with_wall_clock(mut self, wall: Arc<dyn Clock>) -> Self {
        self.wall = wall;
        self
    }

    /// Where the sessions publish provider health; bind it to the
    /// pipeline's `handles.health` once the pipeline has started.
    pub fn health_slot(&self) -> HealthSlot {
        Arc::clone(&self.health)
    }

    /// Per-provider session and breaker counters.
    pub fn stats(&self) -> Arc<FixFeedStats> {
        Arc::clone(&self.stats)
    }

    /// The breaker state of session `i` at `now_ns`.
    pub fn breaker_state(&mut self, i: usize, now_ns: u64) -> BreakerState {
        self.conns[i].session.breaker_state(now_ns)
    }

    /// Session `i`, for inspection.
    pub fn session(&self, i: usize) -> &FixSession {
        &self.conns[i].session
    }

    /// Logs every active session out (shutdown); the Logouts go out on the
    /// next polls.
    pub(crate) fn logout_all(&mut self, now_ns: u64) {
        let wall = self.wall.now_ns();
        for c in &mut self.conns {
            let io = c.session.request_logout(now_ns, wall);
            c.apply(io);
        }
    }
}

impl FixFeed {
    /// Shutdown: every Active session sends Logout; the feed then keeps
    /// turning the sessions that are logging out until each has the peer's
    /// Logout or its `logout_ms` has passed (time from `clock`), and closes
    /// every connection. Runs once; `Drop` calls it with the monotonic
    /// clock, so a stopped pipeline logs its providers out.
    pub fn shutdown(&mut self, clock: &dyn Clock) {
        if std::mem::replace(&mut self.shut, true) {
            return;
        }
        let start = clock.now_ns();
        self.logout_all(start);
        let longest_ms = self
            .conns
            .iter()
            .map(|c| c.session.config().logout_timeout_ms);
        let deadline = start + longest_ms.max().unwrap_or(0) * NS_PER_MS;
        let mut scratch = [Tick::EMPTY; 16];
        loop {
            let (now, wall) = (clock.now_ns(), self.wall.now_ns());
            let mut waiting = false;
            for c in &mut self.conns {
                if c.session.state() == SessionState::LoggingOut && c.stream.is_some() {
                    waiting = true;
                    c.turn(now, wall, &mut scratch);
                }
            }
            if !waiting || now >= deadline {
                break;
            }
            // Between polls of a socket, not a synchronisation.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        for c in &mut self.conns {
            c.write_out();
            c.drop_stream();
        }
    }
}

impl Drop for FixFeed {
    fn drop(&mut self) {
        self.shutdown(&MonotonicClock);
    }
}

impl FixFeed {
    /// Hands every finished lookup to its session.
    fn take_answers(&mut self, now_ns: u64) {
        let answers: &Resolver = &self.resolver;
        for a in answers.answers() {
            if let Some(c) = self.conns.get_mut(a.conn) {
                c.answered(a, now_ns);
            }
        }
    }
}

impl TickSource for FixFeed {
    fn poll(&mut self, now_ns: u64, out: &mut [Tick]) -> SourcePoll {
        let wall = self.wall.now_ns();
        self.take_answers(now_ns);
        let mut n = 0;
        let count = self.conns.len();
        for k in 0..count {
            let i = (self.next + k) % count;
            n += self.conns[i].turn(now_ns, wall, &mut out[n..]);
            if self.conns[i].connect_due() {
                self.conns[i].resolve(i, now_ns, &mut self.resolver);
            }
            if n == out.len() {
                break;
            }
        }
        self.next = if count == 0 {
            0
        } else {
            (self.next + 1) % count
        };
        if n > 0 {
            SourcePoll::Ready(n)
        } else {
            SourcePoll::Idle
        }
    }
}

impl Conn {
    /// One bounded turn of this session; returns ticks written to `out`.
    fn turn(&mut self, now_ns: u64, wall: u64, out: &mut [Tick]) -> usize {
        let mut n = self.session.drain_ticks(out);
        if self.connecting {
            self.check_connect(now_ns, wall);
        }
        let io = self.session.poll(now_ns, wall);
        self.apply(io);
        if self.stream.is_some() && !self.connecting {
            n += self.read_frames(now_ns, wall, &mut out[n..]);
            self.write_out();
        }
        n
    }

    fn apply(&mut self, io: Io) {
        match io {
            Io::Nothing => {}
            // The host name first (the feed asks its resolver next).
            Io::Connect => self.resolving = Some(0),
            Io::Close => {
                // Best effort: a parting Logout, then close.
                self.write_out();
                self.drop_stream();
            }
        }
    }

    fn drop_stream(&mut self) {
        self.stream = None;
        self.connecting = false;
        self.rx_len = 0;
        self.resolving = None;
    }

    /// A connect was asked for and its lookup not started yet.
    fn connect_due(&self) -> bool {
        self.resolving == Some(0)
    }

    /// Starts the lookup of attempt `self.attempts + 1`; an IP literal
    /// connects at once, a refusal fails the attempt.
    fn resolve(&mut self, index: usize, now_ns: u64, resolver: &mut Resolver) {
        self.attempts += 1;
        self.resolving = Some(self.attempts);
        let cfg = self.session.config();
        match resolver.ask(index, self.attempts, &cfg.host, cfg.port) {
            Asked::Now(addr) => self.connect(addr, now_ns),
            Asked::Queued => {}
            Asked::Refused(why) => self.unresolvable(why, now_ns),
        }
    }

    /// A lookup finished: connect, unless the attempt is over (the
    /// session's connect timeout came first).
    fn answered(&mut self, answer: Answer, now_ns: u64) {
        let current = self.resolving == Some(answer.attempt)
            && self.session.state() == SessionState::Connecting;
        if !current {
            return;
        }
        match answer.addr {
            Ok(addr) => self.connect(addr, now_ns),
            Err(why) => self.unresolvable(why.to_string(), now_ns),
        }
    }

    fn connect(&mut self, addr: SocketAddr, now_ns: u64) {
        self.resolving = None;
        if self.unresolved.take().is_some() {
            let cfg = self.session.config();
            tracing::info!(provider = %crate::runtime::esc(&cfg.name), host = %crate::runtime::esc(&cfg.host), %addr, "FIX provider host resolves again");
        }
        match mio::net::TcpStream::connect(addr) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                self.stream = Some(s);
                self.connecting = true;
                self.rx_len = 0;
            }
            Err(_) => {
                let io = self.session.on_connect_failed(now_ns);
                self.apply(io);
            }
        }
    }

    /// The host name gave no address: one failed connect (backoff and
    /// breaker as any), counted as `unresolved`, logged when the reason
    /// changes.
    fn unresolvable(&mut self, why: String, now_ns: u64) {
        self.resolving = None;
        self.session.stats().resolve_failures.inc();
        if self.unresolved.as_deref() != Some(why.as_str()) {
            let cfg = self.session.config();
            tracing::warn!(
                provider = %crate::runtime::esc(&cfg.name),
                host = %crate::runtime::esc(&cfg.host),
                reason = %crate::runtime::esc(&why),
                "FIX provider host does not resolve; retrying with the session's backoff"
            );
            self.unresolved = Some(why);
        }
        let io = self.session.on_connect_failed(now_ns);
        self.apply(io);
    }

    /// Non-blocking connect progress: SO_ERROR first, then a peer address
    /// means connected; `NotConnected` means still in progress.
    fn check_connect(&mut self, now_ns: u64, wall: u64) {
        let Some(s) = &self.stream else { return };
        let failed = match s.take_error() {
            Ok(Some(_)) | Err(_) => true,
            Ok(None) => match s.peer_addr() {
                Ok(_) => false,
                Err(e) if e.kind() == ErrorKind::NotConnected => return,
                Err(_) => true,
            },
        };
        if failed {
            self.drop_stream();
            let io = self.session.on_connect_failed(now_ns);
            self.apply(io);
        } else {
            self.connecting = false;
            let io = self.session.on_connected(now_ns, wall);
            self.apply(io);
        }
    }

    fn read_frames(&mut self, now_ns: u64, wall: u64, out: &mut [Tick]) -> usize {
        let mut n = 0;
        for _ in 0..READS_PER_TURN_MAX {
            n += self.drain_frames(now_ns, wall, &mut out[n..]);
            if self.stream.is_none() || self.session.has_pending_ticks() || n == out.len() {
                break;
            }
            if !self.read_some(now_ns) {
                break;
            }
        }
        n
    }

    /// Handles the complete frames in the receive buffer while `out` has
    /// room; keeps the rest for the next turn.
    fn drain_frames(&mut self, now_ns: u64, wall: u64, out: &mut [Tick]) -> usize {
        let mut n = 0;
        let mut start = 0;
        while self.stream.is_some() && !self.session.has_pending_ticks() && n < out.len() {
            match codec::frame_len(&self.rx[start..self.rx_len]) {
                Ok(Some(len)) => {
                    let frame = &self.rx[start..start + len];
                    start += len;
                    let io = self.session.handle_frame(frame, now_ns, wall);
                    n += self.session.drain_ticks(&mut out[n..]);
                    self.apply(io);
                }
                Ok(None) => break,
                Err(e) => {
                    // Garbled: skip to the next BeginString and go on;
                    // the session decides whether the line is beyond use.
                    start += codec::resync(&self.rx[start..self.rx_len]);
                    let io = self.session.on_garbled(e, now_ns);
                    self.apply(io);
                }
            }
        }
        if self.stream.is_some() && start > 0 {
            self.rx.copy_within(start..self.rx_len, 0);
            self.rx_len -= start;
        }
        n
    }

    /// One non-blocking read; false when nothing more is to be had now.
    fn read_some(&mut self, now_ns: u64) -> bool {
        let Some(s) = self.stream.as_mut() else {
            return false;
        };
        debug_assert!(self.rx_len < self.rx.len(), "a full buffer holds a frame");
        match s.read(&mut self.rx[self.rx_len..]) {
            Ok(0) => self.lost(now_ns),
            Ok(m) => {
                self.rx_len += m;
                true
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            Err(e) if e.kind() == ErrorKind::Interrupted => true,
            Err(_) => self.lost(now_ns),
        }
    }

    fn lost(&mut self, now_ns: u64) -> bool {
        self.drop_stream();
        let io = self.session.on_disconnected(now_ns);
        self.apply(io);
        false
    }

    fn write_out(&mut self) {
        let Some(s) = self.stream.as_mut() else {
            return;
        };
        while !self.session.outbound().is_empty() {
            match s.write(self.session.outbound()) {
                Ok(0) => break,
                Ok(m) => self.session.consume_outbound(m),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // WouldBlock: the rest goes next turn (bounded by the
                // session's outbound cap). Other errors surface as a
                // read error or EOF on the next read.
                Err(_) => break,
            }
        }
    }
}
