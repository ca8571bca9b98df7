//! The blocking driver: one `TcpStream` with timeouts, a [`Session`] for
//! the protocol, a [`ReconnectPolicy`] for when to come back.
//!
//! [`Client::next_event`] is the whole loop: it yields queued events, reads
//! and decodes frames, sends heartbeats when idle, declares the server dead
//! after `dead_after_heartbeats` silent intervals, asks for a snapshot when
//! a gap shows, and — while disconnected — waits out the backoff delay and
//! reconnects, logs on and resubscribes. Decisions read the injected
//! [`Clock`]; the wait itself is bounded by the caller's timeout in real
//! time, so the driver needs a clock that advances with real time (the
//! sans-IO parts take manual clocks in tests).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::event::{DisconnectCause, Event, LogonInfo, SeqStatus};
use super::reconnect::{
    DisconnectInfo, ReconnectPolicy, RECONNECT_ATTEMPTS_MAX_DEFAULT, RECONNECT_BASE_MS_DEFAULT,
    RECONNECT_CAP_MS_DEFAULT, STABLE_AFTER_MS_DEFAULT,
};
use super::session::{Session, SessionError};
use super::stats::ClientStats;
use crate::clock::{Clock, MonotonicClock, NS_PER_MS};
use crate::resilience::backoff::Backoff;
use crate::wire::{
    self, DisconnectReason, EncodeError, LogonRejectReason, SymbolListRequest, SymbolRef,
    FRAME_LEN_MAX,
};

/// Default connect timeout, in ms.
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 2_000;
/// Default wait for LogonAccepted, in ms.
pub const LOGON_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Default socket write timeout, in ms.
pub const WRITE_TIMEOUT_MS_DEFAULT: u64 = 2_000;
/// Default silent heartbeat intervals after which the server is dead.
pub const DEAD_AFTER_HEARTBEATS_DEFAULT: u32 = 3;
/// Default bound on subscription entries (and tracked (symbol, tier) keys).
pub const MAX_SUBSCRIPTIONS_DEFAULT: usize = 1_024;
/// Default budget of a gap-resync snapshot request, in µs.
pub const RESYNC_BUDGET_US_DEFAULT: u32 = 500_000;
/// Default bound on events queued inside the client.
pub const EVENTS_QUEUED_MAX_DEFAULT: usize = 4_096;
/// Most entries in one Subscribe frame: 500 x 18 bytes stays under the
/// gateway's default 16 KiB frame limit (`--max-frame-bytes`), not only
/// the protocol's 64 KiB, so a resubscribe is never refused as oversize.
pub const SUBSCRIBE_ENTRIES_MAX: usize = 500;
/// Most symbols in one SnapshotRequest (2 bytes each; same frame bound).
pub const SNAPSHOT_SYMBOLS_MAX: usize = 4_096;

/// Client settings; [`ClientConfig::new`] fills the defaults.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub addr: SocketAddr,
    pub account: String,
    pub token: String,
    /// Heartbeat interval to ask for (0 = the server's default).
    pub heartbeat_ms: u32,
    pub connect_timeout_ms: u64,
    pub logon_timeout_ms: u64,
    pub write_timeout_ms: u64,
    /// The server is dead after this many silent heartbeat intervals.
    pub dead_after_heartbeats: u32,
    /// Reconnect backoff (full jitter): first window and cap.
    pub backoff: Backoff,
    /// Consecutive failed reconnects before the client gives up.
    pub reconnect_attempts_max: u32,
    /// A session that lasted this long resets the backoff.
    pub stable_after_ms: u64,
    pub max_subscriptions: usize,
    /// Ask for a snapshot when a sequence gap shows.
    pub auto_resync: bool,
    pub resync_budget_us: u32,
    pub events_queued_max: usize,
    /// Seed of the backoff RNG (`None` = from entropy).
    pub rng_seed: Option<u64>,
}

impl ClientConfig {
    pub fn new(addr: SocketAddr, account: &str, token: &str) -> Self {
        ClientConfig {
            addr,
            account: account.to_string(),
            token: token.to_string(),
            heartbeat_ms: 0,
            connect_timeout_ms: CONNECT_TIMEOUT_MS_DEFAULT,
            logon_timeout_ms: LOGON_TIMEOUT_MS_DEFAULT,
            write_timeout_ms: WRITE_TIMEOUT_MS_DEFAULT,
            dead_after_heartbeats: DEAD_AFTER_HEARTBEATS_DEFAULT,
            backoff: Backoff::new(RECONNECT_BASE_MS_DEFAULT, RECONNECT_CAP_MS_DEFAULT),
            reconnect_attempts_max: RECONNECT_ATTEMPTS_MAX_DEFAULT,
            stable_after_ms: STABLE_AFTER_MS_DEFAULT,
            max_subscriptions: MAX_SUBSCRIPTIONS_DEFAULT,
            auto_resync: true,
            resync_budget_us: RESYNC_BUDGET_US_DEFAULT,
            events_queued_max: EVENTS_QUEUED_MAX_DEFAULT,
            rng_seed: None,
        }
    }

    /// Refuses settings the client cannot work with.
    pub fn validate(&self) -> Result<(), ClientError> {
        let bad = |m: &str| Err(ClientError::Config(m.to_string()));
        if self.account.len() > 255 || self.token.len() > 255 {
            return bad("account and token: at most 255 bytes");
        }
        if self.backoff.base_ms == 0 || self.backoff.base_ms > self.backoff.cap_ms {
            return bad("backoff: 0 < base_ms <= cap_ms");
        }
        if self.dead_after_heartbeats < 2 {
            return bad("dead_after_heartbeats: at least 2");
        }
        if self.connect_timeout_ms == 0 || self.logon_timeout_ms == 0 || self.write_timeout_ms == 0
        {
            return bad("timeouts: at least 1 ms");
        }
        if self.max_subscriptions == 0 || self.events_queued_max == 0 {
            return bad("max_subscriptions and events_queued_max: at least 1");
        }
        Ok(())
    }
}

/// Client failures returned to the caller. Connection losses after the
/// first logon are not errors: they arrive as [`Event::Disconnected`].
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {addr}: {source}")]
    Unreachable { addr: SocketAddr, source: io::Error },
    #[error("logon rejected: {reason} (retry after {retry_after_ms} ms)")]
    LogonRejected {
        reason: LogonRejectReason,
        retry_after_ms: u32,
    },
    #[error("server refused the session: {reason} {text:?} (retry after {retry_after_ms} ms)")]
    Refused {
        reason: DisconnectReason,
        retry_after_ms: u32,
        text: String,
    },
    #[error("no logon answer within {0} ms")]
    LogonTimeout(u64),
    #[error("connection lost during logon: {0}")]
    Io(io::Error),
    #[error("protocol error from the server: {0}")]
    Protocol(#[from] SessionError),
    #[error("client closed: {0}")]
    Closed(String),
    #[error("not connected")]
    NotConnected,
    #[error("at most {0} subscriptions")]
    TooManySubscriptions(usize),
    #[error("at most {0} entries per request; split it")]
    TooManyEntries(usize),
    #[error("cannot encode the request: {0}")]
    Encode(#[from] EncodeError),
    #[error("invalid client setting: {0}")]
    Config(String),
}

/// Why opening a session failed.
enum OpenError {
    Connect(io::Error),
    Io(io::Error),
    Rejected(LogonRejectReason, u32),
    Refused(DisconnectReason, u32, String),
    Timeout,
    Protocol(SessionError),
}

impl OpenError {
    fn cause(&self) -> (DisconnectCause, u32) {
        match self {
            OpenError::Connect(e) | OpenError::Io(e) => (DisconnectCause::Io(e.kind()), 0),
            OpenError::Rejected(r, ms) => (DisconnectCause::LogonRejected(*r), *ms),
            OpenError::Refused(reason, ms, text) => (
                DisconnectCause::Server {
                    reason: *reason,
                    text: text.clone(),
                },
                *ms,
            ),
            OpenError::Timeout => (DisconnectCause::LogonTimeout, 0),
            OpenError::Protocol(SessionError::Framing(e)) => {
                (DisconnectCause::Protocol((*e).into()), 0)
            }
        }
    }

    fn into_error(self, cfg: &ClientConfig) -> ClientError {
        match self {
            OpenError::Connect(source) => ClientError::Unreachable {
                addr: cfg.addr,
                source,
            },
            OpenError::Io(e) => ClientError::Io(e),
            OpenError::Rejected(reason, retry_after_ms) => ClientError::LogonRejected {
                reason,
                retry_after_ms,
            },
            OpenError::Refused(reason, retry_after_ms, text) => ClientError::Refused {
                reason,
                retry_after_ms,
                text,
            },
            OpenError::Timeout => ClientError::LogonTimeout(cfg.logon_timeout_ms),
            OpenError::Protocol(e) => ClientError::Protocol(e),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Connected,
    /// Disconnected; the next attempt is due at `retry_at_ns`.
    Waiting {
        retry_at_ns: u64,
    },
    /// Will not reconnect.
    Closed,
}

/// A resilient subscriber connection.
pub struct Client {
    cfg: ClientConfig,
    clock: Arc<dyn Clock>,
    rng: SmallRng,
    stream: Option<TcpStream>,
    session: Session,
    policy: ReconnectPolicy,
    state: State,
    closed_because: String,
    /// Every subscription asked for, sent again after a reconnect.
    subs: Vec<(u8, SymbolRef)>,
    next_request_id: u64,
    tx: Box<[u8]>,
    /// Events the driver produced itself (logons, disconnects).
    queue: VecDeque<Event>,
    /// Events set aside while [`Client::await_response`] looked for one.
    stash: VecDeque<Event>,
    logon: Option<LogonInfo>,
    logons: u64,
    heartbeat_ns: u64,
    last_rx_ns: u64,
    last_tx_ns: u64,
    stats: Arc<ClientStats>,
}

impl Client {
    /// Connects and logs on; an unreachable server or a refused logon is
    /// an error here (later losses are events and reconnect on their own).
    pub fn connect(cfg: ClientConfig) -> Result<Client, ClientError> {
        Self::connect_with_clock(cfg, Arc::new(MonotonicClock))
    }

    pub fn connect_with_clock(
        cfg: ClientConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Client, ClientError> {
        cfg.validate()?;
        let stats = Arc::new(ClientStats::default());
        let rng = match cfg.rng_seed {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => SmallRng::from_entropy(),
        };
        let mut c = Client {
            session: Session::new(cfg.max_subscriptions, stats.clone()),
            policy: ReconnectPolicy::new(
                cfg.backoff,
                cfg.reconnect_attempts_max,
                cfg.stable_after_ms,
            ),
            rng,
            stream: None,
            state: State::Closed,
            closed_because: String::new(),
            subs: Vec::with_capacity(cfg.max_subscriptions),
            next_request_id: 1,
            tx: vec![0u8; FRAME_LEN_MAX].into_boxed_slice(),
            queue: VecDeque::with_capacity(cfg.events_queued_max),
            stash: VecDeque::with_capacity(cfg.events_queued_max),
            logon: None,
            logons: 0,
            heartbeat_ns: 0,
            last_rx_ns: 0,
            last_tx_ns: 0,
            stats,
            clock,
            cfg,
        };
        match c.open() {
            Ok(info) => {
                c.logged_on(info);
                Ok(c)
            }
            Err(e) => Err(e.into_error(&c.cfg)),
        }
    }

    pub fn stats(&self) -> &Arc<ClientStats> {
        &self.stats
    }

    /// The current (or last) session's logon answer.
    pub fn logon_info(&self) -> Option<LogonInfo> {
        self.logon
    }

    pub fn is_connected(&self) -> bool {
        self.state == State::Connected
    }

    /// The next sequence number expected for a (symbol, tier), if tracked.
    pub fn expected_seq(&self, symbol: u16, tier: u8) -> Option<u64> {
        self.session.seq().expected(symbol, tier)
    }

    /// Subscription entries kept for resubscribing.
    pub fn subscriptions(&self) -> usize {
        self.subs.len()
    }

    // ---- requests -----------------------------------------------------

    /// Subscribes to symbols by name at `tier` ([`wire::TIER_ACCOUNT_DEFAULT`]
    /// for the account default). Kept and sent again after every reconnect
    /// (with fresh request ids). Returns the request id the
    /// SubscribeResponse will carry; while disconnected the entries are only
    /// kept, and go out with the next logon. At most
    /// [`SUBSCRIBE_ENTRIES_MAX`] names per call.
    pub fn subscribe_names<S: AsRef<str>>(
        &mut self,
        tier: u8,
        names: &[S],
    ) -> Result<u64, ClientError> {
        let refs = names
            .iter()
            .map(|n| SymbolRef::by_name(n.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        self.subscribe_refs(tier, refs)
    }

    /// Subscribes to symbols by id at `tier`.
    pub fn subscribe_ids(&mut self, tier: u8, ids: &[u16]) -> Result<u64, ClientError> {
        self.subscribe_refs(tier, ids.iter().map(|&id| SymbolRef::by_id(id)).collect())
    }

    fn subscribe_refs(&mut self, tier: u8, refs: Vec<SymbolRef>) -> Result<u64, ClientError> {
        if refs.len() > SUBSCRIBE_ENTRIES_MAX {
            return Err(ClientError::TooManyEntries(SUBSCRIBE_ENTRIES_MAX));
        }
        let new = refs
            .iter()
            .filter(|r| !self.subs.contains(&(tier, **r)))
            .count();
        if self.subs.len() + new > self.cfg.max_subscriptions {
            return Err(ClientError::TooManySubscriptions(
                self.cfg.max_subscriptions,
            ));
        }
        for r in &refs {
            if !self.subs.contains(&(tier, *r)) {
                self.subs.push((tier, *r));
            }
        }
        let rid = self.request_id();
        if self.state == State::Connected {
            let n = wire::encode_subscribe(&mut self.tx, rid, tier, &refs)?;
            self.send_or_lose(n);
        }
        Ok(rid)
    }

    /// Asks for the current prices of `symbols` at `tier` without
    /// subscribing. `budget_us` is the time the caller will still wait
    /// (relative; 0 = server default); `critical` requests are shed last.
    pub fn request_snapshot(
        &mut self,
        tier: u8,
        symbols: &[u16],
        budget_us: u32,
        critical: bool,
    ) -> Result<u64, ClientError> {
        self.require_connected()?;
        if symbols.len() > SNAPSHOT_SYMBOLS_MAX {
            return Err(ClientError::TooManyEntries(SNAPSHOT_SYMBOLS_MAX));
        }
        let rid = self.request_id();
        let n =
            wire::encode_snapshot_request(&mut self.tx, rid, budget_us, critical, tier, symbols)?;
        self.send_request(n)?;
        Ok(rid)
    }

    /// Asks for the symbol and tier directory of the account.
    pub fn request_symbols(&mut self, budget_us: u32, critical: bool) -> Result<u64, ClientError> {
        self.require_connected()?;
        let rid = self.request_id();
        let m = SymbolListRequest {
            request_id: rid,
            budget_us,
            critical,
        };
        let n = wire::encode_symbol_list_request(&mut self.tx, &m)?;
        self.send_request(n)?;
        Ok(rid)
    }

    /// Sends Logout; the server answers Disconnect(logout), after which the
    /// client is closed.
    pub fn logout(&mut self) -> Result<(), ClientError> {
        self.require_connected()?;
        let n = wire::encode_logout(&mut self.tx)?;
        self.send_request(n)
    }

    fn request_id(&mut self) -> u64 {
        let id = self.next_request_id;
        self.next_request_id += 1;
        id
    }

    fn require_connected(&self) -> Result<(), ClientError> {
        match self.state {
            State::Connected => Ok(()),
            State::Closed => Err(ClientError::Closed(self.closed_because.clone())),
            State::Waiting { .. } => Err(ClientError::NotConnected),
        }
    }

    fn send_request(&mut self, n: usize) -> Result<(), ClientError> {
        self.send_or_lose(n);
        self.require_connected()
    }

    /// Writes `tx[..n]`; a failed write loses the session.
    fn send_or_lose(&mut self, n: usize) {
        if let Err(e) = self.write(n) {
            let now = self.clock.now_ns();
            self.lost(DisconnectCause::Io(e.kind()), 0, now);
        }
    }

    fn write(&mut self, n: usize) -> io::Result<()> {
        let stream = self.stream.as_mut().ok_or(io::ErrorKind::NotConnected)?;
        stream.write_all(&self.tx[..n])?;
        self.last_tx_ns = self.clock.now_ns();
        Ok(())
    }

    // ---- events -------------------------------------------------------

    /// The next event, waiting at most `timeout`; `Ok(None)` when nothing
    /// arrived in time. `Err(Closed)` once the client will not reconnect.
    /// When a reconnect is due it is attempted inside this call, which can
    /// then take up to `connect_timeout_ms + logon_timeout_ms`. Requests in
    /// flight on a lost session are not answered; the Disconnected event
    /// tells the caller to ask again.
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<Event>, ClientError> {
        if let Some(ev) = self.stash.pop_front() {
            return Ok(Some(ev));
        }
        self.poll_event(Instant::now() + timeout)
    }

    /// An endless iterator over events: each item waits up to
    /// `poll_timeout` (silently retrying on timeout) and yields an event or
    /// the error that ended the client; it ends after that error.
    pub fn events(&mut self, poll_timeout: Duration) -> Events<'_> {
        Events {
            client: self,
            poll_timeout,
            done: false,
        }
    }

    /// Waits for the answer (or Reject) to `request_id`; other events are
    /// kept, in order, for [`Client::next_event`] (bounded; excess counted
    /// as dropped).
    pub fn await_response(
        &mut self,
        request_id: u64,
        timeout: Duration,
    ) -> Result<Option<Event>, ClientError> {
        let deadline = Instant::now() + timeout;
        while let Some(ev) = self.poll_event(deadline)? {
            if ev.request_id() == Some(request_id) {
                return Ok(Some(ev));
            }
            if self.stash.len() < self.cfg.events_queued_max {
                self.stash.push_back(ev);
            } else {
                ClientStats::inc(&self.stats.events_dropped);
            }
        }
        Ok(None)
    }

    fn poll_event(&mut self, deadline: Instant) -> Result<Option<Event>, ClientError> {
        loop {
            if let Some(ev) = self.queue.pop_front() {
                return Ok(Some(ev));
            }
            let now = self.clock.now_ns();
            match self.state {
                State::Closed => return Err(ClientError::Closed(self.closed_because.clone())),
                State::Waiting { retry_at_ns } if now >= retry_at_ns => self.reconnect(now),
                State::Waiting { retry_at_ns } => {
                    let Some(left) = remaining(deadline) else {
                        return Ok(None);
                    };
                    // The blocking driver's one deliberate wait: the backoff
                    // delay, cut short by the caller's timeout.
                    std::thread::sleep(left.min(Duration::from_nanos(retry_at_ns - now)));
                }
                State::Connected => {
                    if let Some(ev) = self.poll_connected(now, deadline) {
                        return Ok(Some(ev));
                    }
                    if remaining(deadline).is_none() && self.queue.is_empty() {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// One step while connected: a buffered event, timers, or one read.
    fn poll_connected(&mut self, now: u64, deadline: Instant) -> Option<Event> {
        match self.session.next_event() {
            Ok(Some(ev)) => return self.on_session_event(ev, now),
            Ok(None) => {}
            Err(SessionError::Framing(e)) => {
                self.lost(DisconnectCause::Protocol(e.into()), 0, now);
                return None;
            }
        }
        if let Err(e) = self.heartbeat_if_idle(now) {
            self.lost(DisconnectCause::Io(e.kind()), 0, now);
            return None;
        }
        let left = remaining(deadline)?;
        let until_timer = Duration::from_nanos(self.next_timer_ns().saturating_sub(now));
        let wait = left.min(until_timer).max(Duration::from_millis(1));
        // Read before judging the peer dead: bytes may be waiting in the
        // socket while the caller was busy elsewhere.
        match self.read_some(wait) {
            Ok(0) => self.lost(DisconnectCause::PeerClosed, 0, self.clock.now_ns()),
            Ok(_) => self.last_rx_ns = self.clock.now_ns(),
            Err(e) if is_timeout(&e) => self.check_dead(self.clock.now_ns()),
            Err(e) => self.lost(DisconnectCause::Io(e.kind()), 0, self.clock.now_ns()),
        }
        None
    }

    fn on_session_event(&mut self, ev: Event, now: u64) -> Option<Event> {
        match ev {
            Event::Disconnected {
                cause,
                retry_after_ms,
                ..
            } => {
                self.lost(cause, retry_after_ms, now);
                None
            }
            Event::Price(p) => {
                if matches!(p.seq, SeqStatus::Gap { resync: true, .. }) {
                    self.request_resyncs();
                }
                Some(ev)
            }
            other => Some(other),
        }
    }

    /// One critical snapshot request per queued gap key.
    fn request_resyncs(&mut self) {
        while let Some((symbol, tier)) = self.session.take_resync() {
            if !self.cfg.auto_resync || self.state != State::Connected {
                continue;
            }
            let rid = self.request_id();
            let budget = self.cfg.resync_budget_us;
            if let Ok(n) =
                wire::encode_snapshot_request(&mut self.tx, rid, budget, true, tier, [symbol])
            {
                ClientStats::inc(&self.stats.resync_requests);
                self.send_or_lose(n);
            }
        }
    }

    fn read_some(&mut self, wait: Duration) -> io::Result<usize> {
        let stream = self.stream.as_mut().ok_or(io::ErrorKind::NotConnected)?;
        stream.set_read_timeout(Some(wait))?;
        let buf = self.session.read_buf();
        let n = loop {
            match stream.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        self.session.commit(n);
        Ok(n)
    }

    // ---- heartbeats and dead peers ------------------------------------

    fn dead_after_ns(&self) -> u64 {
        self.heartbeat_ns * u64::from(self.cfg.dead_after_heartbeats)
    }

    fn next_timer_ns(&self) -> u64 {
        (self.last_tx_ns + self.heartbeat_ns).min(self.last_rx_ns + self.dead_after_ns() + 1)
    }

    /// Declares the server dead after the dead-peer interval of silence.
    fn check_dead(&mut self, now: u64) {
        let silent = now.saturating_sub(self.last_rx_ns);
        if silent > self.dead_after_ns() {
            ClientStats::inc(&self.stats.dead_peers);
            let cause = DisconnectCause::DeadPeer {
                silent_ms: silent / NS_PER_MS,
            };
            self.lost(cause, 0, now);
        }
    }

    /// Sends a Heartbeat when nothing was sent for one interval.
    fn heartbeat_if_idle(&mut self, now: u64) -> io::Result<()> {
        if now.saturating_sub(self.last_tx_ns) >= self.heartbeat_ns {
            let n = wire::encode_heartbeat(&mut self.tx).expect("heartbeat fits the send buffer");
            self.write(n)?;
            ClientStats::inc(&self.stats.heartbeats_sent);
        }
        Ok(())
    }

    // ---- connection life ----------------------------------------------

    /// Connects, sends Logon and waits for the answer.
    fn open(&mut self) -> Result<LogonInfo, OpenError> {
        let timeout = Duration::from_millis(self.cfg.connect_timeout_ms);
        let stream = match TcpStream::connect_timeout(&self.cfg.addr, timeout) {
            Ok(s) => s,
            Err(e) => {
                ClientStats::inc(&self.stats.connect_failures);
                return Err(OpenError::Connect(e));
            }
        };
        ClientStats::inc(&self.stats.connects);
        let _ = stream.set_nodelay(true);
        let write_timeout = Duration::from_millis(self.cfg.write_timeout_ms);
        stream
            .set_write_timeout(Some(write_timeout))
            .map_err(OpenError::Io)?;
        self.session.reset();
        self.stream = Some(stream);
        let res = self.logon_exchange();
        if res.is_err() {
            self.stream = None;
        }
        res
    }

    fn logon_exchange(&mut self) -> Result<LogonInfo, OpenError> {
        let logon = wire::Logon {
            heartbeat_interval_ms: self.cfg.heartbeat_ms,
            account: self.cfg.account.as_bytes(),
            token: self.cfg.token.as_bytes(),
        };
        let n = wire::encode_logon(&mut self.tx, &logon).expect("validated account and token fit");
        self.write(n).map_err(OpenError::Io)?;
        let deadline = Instant::now() + Duration::from_millis(self.cfg.logon_timeout_ms);
        loop {
            match self.session.next_event().map_err(OpenError::Protocol)? {
                Some(Event::LoggedOn(info)) => return Ok(info),
                Some(Event::LogonRejected {
                    reason,
                    retry_after_ms,
                }) => {
                    ClientStats::inc(&self.stats.logons_rejected);
                    return Err(OpenError::Rejected(reason, retry_after_ms));
                }
                Some(Event::Disconnected {
                    cause: DisconnectCause::Server { reason, text },
                    retry_after_ms,
                    ..
                }) => return Err(OpenError::Refused(reason, retry_after_ms, text)),
                Some(_) => continue, // nothing else is sent before the answer
                None => {}
            }
            let left = remaining(deadline).ok_or(OpenError::Timeout)?;
            match self.read_some(left.max(Duration::from_millis(1))) {
                Ok(0) => return Err(OpenError::Io(io::ErrorKind::UnexpectedEof.into())),
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {}
                Err(e) => return Err(OpenError::Io(e)),
            }
        }
    }

    fn logged_on(&mut self, mut info: LogonInfo) {
        let now = self.clock.now_ns();
        info.reconnects = self.logons;
        self.logons += 1;
        self.logon = Some(info);
        // A server's interval below 100 ms would make the client heartbeat
        // and declare the server dead at millisecond scale.
        self.heartbeat_ns = u64::from(info.heartbeat_interval_ms.max(100)) * NS_PER_MS;
        self.last_rx_ns = now;
        self.last_tx_ns = now;
        self.state = State::Connected;
        self.policy.on_connected(now);
        ClientStats::inc(&self.stats.logons);
    }

    fn reconnect(&mut self, now: u64) {
        match self.open() {
            Ok(info) => {
                self.logged_on(info);
                self.push(Event::LoggedOn(self.logon.expect("just logged on")));
                self.resubscribe();
            }
            Err(e) => {
                let (cause, retry_after_ms) = e.cause();
                if let DisconnectCause::LogonRejected(reason) = cause {
                    self.push(Event::LogonRejected {
                        reason,
                        retry_after_ms,
                    });
                }
                self.schedule(cause, retry_after_ms, now);
            }
        }
    }

    /// Sends every kept subscription again, one Subscribe per tier chunk.
    fn resubscribe(&mut self) {
        let mut tiers: Vec<u8> = self.subs.iter().map(|(t, _)| *t).collect();
        tiers.sort_unstable();
        tiers.dedup();
        for tier in tiers {
            let refs: Vec<SymbolRef> = self
                .subs
                .iter()
                .filter(|(t, _)| *t == tier)
                .map(|(_, r)| *r)
                .collect();
            for chunk in refs.chunks(SUBSCRIBE_ENTRIES_MAX) {
                let rid = self.request_id();
                if let Ok(n) = wire::encode_subscribe(&mut self.tx, rid, tier, chunk) {
                    ClientStats::inc(&self.stats.resubscribes);
                    self.send_or_lose(n);
                }
                if self.state != State::Connected {
                    return;
                }
            }
        }
    }

    /// The session is gone: close, report, and schedule a reconnect.
    fn lost(&mut self, cause: DisconnectCause, retry_after_ms: u32, now: u64) {
        if self.state == State::Connected {
            ClientStats::inc(&self.stats.disconnects);
        }
        self.schedule(cause, retry_after_ms, now);
    }

    fn schedule(&mut self, cause: DisconnectCause, retry_after_ms: u32, now: u64) {
        self.stream = None;
        let info = DisconnectInfo::new(&cause, retry_after_ms);
        let delay_ms = self.policy.next_delay(now, &info, &mut self.rng);
        self.state = match delay_ms {
            Some(ms) => State::Waiting {
                retry_at_ns: now + ms * NS_PER_MS,
            },
            None => {
                self.closed_because = format!("{cause:?}");
                State::Closed
            }
        };
        self.push(Event::Disconnected {
            cause,
            retry_after_ms,
            reconnect_in_ms: delay_ms,
        });
    }

    fn push(&mut self, ev: Event) {
        if self.queue.len() < self.cfg.events_queued_max {
            self.queue.push_back(ev);
        } else {
            ClientStats::inc(&self.stats.events_dropped);
        }
    }
}

/// See [`Client::events`].
pub struct Events<'a> {
    client: &'a mut Client,
    poll_timeout: Duration,
    done: bool,
}

impl Iterator for Events<'_> {
    type Item = Result<Event, ClientError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            match self.client.next_event(self.poll_timeout) {
                Ok(Some(ev)) => return Some(Ok(ev)),
                Ok(None) => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}
