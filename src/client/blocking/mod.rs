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

use crate::client::tls::ClientStream;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::event::{DisconnectCause, Event, LogonInfo, SeqStatus};
use super::reconnect::ReconnectPolicy;
use super::session::{Session, SessionError};
use super::stats::ClientStats;
use crate::clock::{Clock, MonotonicClock};
use crate::wire::{self, SymbolListRequest, SymbolRef, FRAME_LEN_MAX};

mod config;
mod error;
mod life;

pub use config::{
    ClientConfig, ADDRS_MAX, CONNECT_TIMEOUT_MS_DEFAULT, DEAD_AFTER_HEARTBEATS_DEFAULT,
    EVENTS_QUEUED_MAX_DEFAULT, LOGON_TIMEOUT_MS_DEFAULT, MAX_SUBSCRIPTIONS_DEFAULT,
    RESYNC_BUDGET_US_DEFAULT, SNAPSHOT_SYMBOLS_MAX, SUBSCRIBE_ENTRIES_MAX,
    WRITE_TIMEOUT_MS_DEFAULT,
};
pub use error::ClientError;
use error::OpenError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Connected,
    /// Disconnected; the next attempt is due at `retry_at_ns`.
    Waiting {
        retry_at_ns: u64,
    },
    /// Reconnected and Logon sent; the answer is due by `deadline_ns`.
    LoggingOn {
        deadline_ns: u64,
    },
    /// Will not reconnect.
    Closed,
}

/// A resilient subscriber connection.
pub struct Client {
    cfg: ClientConfig,
    clock: Arc<dyn Clock>,
    rng: SmallRng,
    stream: Option<ClientStream>,
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
    /// Events set aside while [`Client::await_response`] looked for an
    /// answer (at most `events_queued_max`: a full stash stops the wait).
    stash: VecDeque<Event>,
    logon: Option<LogonInfo>,
    logons: u64,
    heartbeat_ns: u64,
    last_rx_ns: u64,
    last_tx_ns: u64,
    stats: Arc<ClientStats>,
    /// Index of the address the next attempt uses: 0 is `cfg.addr`, `i`
    /// is `cfg.failover[i - 1]`.
    target: usize,
}

impl Client {
    /// Connects and logs on; an unreachable server or a refused logon is
    /// an error here (later losses are events and reconnect on their own).
    pub fn connect(cfg: ClientConfig) -> Result<Client, ClientError> {
        Self::connect_with_clock(cfg, Arc::new(MonotonicClock))
    }

    /// [`Client::connect`] with the time source injected: timeouts, heartbeats
    /// and backoff read `clock`.
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
            target: 0,
        };
        // Each address once, in order; the last refusal is the error.
        loop {
            match c.open() {
                Ok(info) => {
                    c.logged_on(info);
                    return Ok(c);
                }
                Err(e) if c.target + 1 == c.addrs() => {
                    return Err(e.into_error(&c.cfg, c.target_addr()))
                }
                Err(_) => c.target += 1,
            }
        }
    }

    /// How many gateway addresses the client fails over between.
    fn addrs(&self) -> usize {
        1 + self.cfg.failover.len()
    }

    /// The address the next attempt uses.
    fn target_addr(&self) -> std::net::SocketAddr {
        match self.target.checked_sub(1) {
            None => self.cfg.addr,
            Some(i) => self.cfg.failover[i],
        }
    }

    /// Shared counters (frames, gaps, reconnects, drops).
    pub fn stats(&self) -> &Arc<ClientStats> {
        &self.stats
    }

    /// The current (or last) session's logon answer.
    pub fn logon_info(&self) -> Option<LogonInfo> {
        self.logon
    }

    /// True while a session is logged on.
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

    /// Asks for the `count` most recent provider ticks of `symbol_id` (the
    /// server answers at most 190, raw quotes: the account needs a tier
    /// without markup, such as `raw`, else `Reject(not_entitled)`).
    /// `budget_us` and `critical` as for [`Client::request_snapshot`].
    pub fn request_history(
        &mut self,
        symbol_id: u16,
        count: u16,
        budget_us: u32,
        critical: bool,
    ) -> Result<u64, ClientError> {
        self.require_connected()?;
        let rid = self.request_id();
        let m = wire::HistoryRequest {
            request_id: rid,
            budget_us,
            critical,
            symbol_id,
            count,
        };
        let n = wire::encode_history_request(&mut self.tx, &m)?;
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
            State::Waiting { .. } | State::LoggingOn { .. } => Err(ClientError::NotConnected),
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

    /// Waits up to `timeout` for the answer (or Reject) to `request_id`;
    /// `Ok(None)` when none came in time. Every other event read
    /// meanwhile — prices above all — is set aside, in order, for
    /// [`Client::next_event`]: none is lost. The set-aside room is
    /// `events_queued_max`; when it is full the wait stops with
    /// [`ClientError::Backlog`] and the rest stays unread in the socket
    /// (the server conflates for a slow reader, flagged): take the events
    /// with `next_event`, then wait again. An answer already set aside by
    /// an earlier wait is found first.
    ///
    /// A caller with a busy stream may instead handle answers in its own
    /// event loop: every request method returns the id its answer carries.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use pricewire::client::{Client, ClientConfig, ClientError, Event};
    /// # fn show(_: &Event) {}
    /// # let mut client = Client::connect(ClientConfig::new("127.0.0.1:9400".parse()?, "demo", "demo"))?;
    /// let rid = client.request_symbols(500_000, false)?;
    /// let answer = loop {
    ///     match client.await_response(rid, Duration::from_secs(2)) {
    ///         Err(ClientError::Backlog(n)) => {
    ///             // Prices read meanwhile, in order: take them, then wait again.
    ///             for _ in 0..n {
    ///                 if let Some(ev) = client.next_event(Duration::ZERO)? {
    ///                     show(&ev);
    ///                 }
    ///             }
    ///         }
    ///         other => break other?,
    ///     }
    /// };
    /// # let _ = answer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn await_response(
        &mut self,
        request_id: u64,
        timeout: Duration,
    ) -> Result<Option<Event>, ClientError> {
        let mine = |e: &Event| e.request_id() == Some(request_id);
        if let Some(i) = self.stash.iter().position(mine) {
            return Ok(self.stash.remove(i));
        }
        let deadline = Instant::now() + timeout;
        while self.stash.len() < self.cfg.events_queued_max {
            match self.poll_event(deadline)? {
                Some(ev) if mine(&ev) => return Ok(Some(ev)),
                Some(ev) => self.stash.push_back(ev),
                None => return Ok(None),
            }
        }
        Err(ClientError::Backlog(self.stash.len()))
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
                State::LoggingOn { deadline_ns } => {
                    let left = remaining(deadline);
                    self.poll_logon(deadline_ns, left.unwrap_or(Duration::ZERO));
                    if left.is_none() && self.queue.is_empty() {
                        return Ok(None);
                    }
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
