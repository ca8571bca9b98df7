//! The connection's life: heartbeats and the dead-peer check while
//! connected; connect, logon, resubscribe and the reconnect schedule.

use std::io;
use std::net::TcpStream;

use crate::client::tls::ClientStream;
use std::time::{Duration, Instant};

use super::{is_timeout, remaining, Client, OpenError, State, SUBSCRIBE_ENTRIES_MAX};
use crate::client::event::{DisconnectCause, Event, LogonInfo};
use crate::client::reconnect::DisconnectInfo;
use crate::client::stats::ClientStats;
use crate::clock::NS_PER_MS;
use crate::wire::{self, SymbolRef};

impl Client {
    // ---- heartbeats and dead peers ------------------------------------

    fn dead_after_ns(&self) -> u64 {
        self.heartbeat_ns * u64::from(self.cfg.dead_after_heartbeats)
    }

    pub(super) fn next_timer_ns(&self) -> u64 {
        (self.last_tx_ns + self.heartbeat_ns).min(self.last_rx_ns + self.dead_after_ns() + 1)
    }

    /// Declares the server dead after the dead-peer interval of silence.
    pub(super) fn check_dead(&mut self, now: u64) {
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
    pub(super) fn heartbeat_if_idle(&mut self, now: u64) -> io::Result<()> {
        if now.saturating_sub(self.last_tx_ns) >= self.heartbeat_ns {
            let n = wire::encode_heartbeat(&mut self.tx).expect("heartbeat fits the send buffer");
            self.write(n)?;
            ClientStats::inc(&self.stats.heartbeats_sent);
        }
        Ok(())
    }

    // ---- connection life ----------------------------------------------

    /// Connects, sends Logon and waits for the answer (the first connect,
    /// whose errors [`Client::connect`](super::Client::connect) returns).
    pub(super) fn open(&mut self) -> Result<LogonInfo, OpenError> {
        self.begin_open()?;
        let deadline = Instant::now() + Duration::from_millis(self.cfg.logon_timeout_ms);
        let res = loop {
            let Some(left) = remaining(deadline) else {
                break Err(OpenError::Timeout);
            };
            match self.logon_step(left) {
                Ok(Some(info)) => break Ok(info),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
        };
        if res.is_err() {
            self.stream = None;
        }
        res
    }

    /// Connects (TCP and TLS, each within the connect timeout) and sends
    /// Logon; the answer is read by [`Client::logon_step`].
    fn begin_open(&mut self) -> Result<(), OpenError> {
        let timeout = Duration::from_millis(self.cfg.connect_timeout_ms);
        let stream = match TcpStream::connect_timeout(&self.target_addr(), timeout) {
            Ok(s) => s,
            Err(e) => {
                ClientStats::inc(&self.stats.connect_failures);
                return Err(OpenError::Connect(e));
            }
        };
        let _ = stream.set_nodelay(true);
        let write_timeout = Duration::from_millis(self.cfg.write_timeout_ms);
        stream
            .set_write_timeout(Some(write_timeout))
            .map_err(OpenError::Io)?;
        // The TLS handshake is part of connecting: a chain or name that
        // does not verify is a failed connect.
        let stream = match ClientStream::connect(stream, self.cfg.tls.as_ref(), timeout) {
            Ok(s) => s,
            Err(e) => {
                ClientStats::inc(&self.stats.connect_failures);
                return Err(OpenError::Connect(e));
            }
        };
        ClientStats::inc(&self.stats.connects);
        // Expectations survive the connection: the next gateway (this one
        // again, or another edge with the same sequences) resumes them.
        self.session.resume();
        self.stream = Some(stream);
        let logon = wire::Logon {
            heartbeat_interval_ms: self.cfg.heartbeat_ms,
            account: self.cfg.account.as_bytes(),
            token: self.cfg.token.as_bytes(),
        };
        let n = wire::encode_logon(&mut self.tx, &logon).expect("validated account and token fit");
        let sent = self.write(n).map_err(OpenError::Io);
        if sent.is_err() {
            self.stream = None;
        }
        sent
    }

    /// One step of the logon: the answer if one is buffered, else one read
    /// of at most `wait` (`Ok(None)`: no answer yet).
    fn logon_step(&mut self, wait: Duration) -> Result<Option<LogonInfo>, OpenError> {
        loop {
            match self.session.next_event().map_err(OpenError::Protocol)? {
                Some(Event::LoggedOn(info)) => return Ok(Some(info)),
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
                None => break,
            }
        }
        match self.read_some(wait.max(Duration::from_millis(1))) {
            Ok(0) => Err(OpenError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => Ok(None),
            Err(e) if is_timeout(&e) => Ok(None),
            Err(e) => Err(OpenError::Io(e)),
        }
    }

    pub(super) fn logged_on(&mut self, mut info: LogonInfo) {
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

    /// A reconnect fell due: connect and send Logon; the answer is awaited
    /// in [`Client::poll_logon`], within each caller's timeout.
    pub(super) fn reconnect(&mut self, now: u64) {
        match self.begin_open() {
            Ok(()) => {
                let logon_ns = self.cfg.logon_timeout_ms.saturating_mul(NS_PER_MS);
                let deadline_ns = self.clock.now_ns().saturating_add(logon_ns);
                self.state = State::LoggingOn { deadline_ns };
            }
            Err(e) => self.failed_open(e, now),
        }
    }

    /// While logging on again: one step of at most `wait`, or the logon
    /// timeout once `deadline_ns` passed.
    pub(super) fn poll_logon(&mut self, deadline_ns: u64, wait: Duration) {
        let now = self.clock.now_ns();
        let step = if now >= deadline_ns {
            Err(OpenError::Timeout)
        } else {
            self.logon_step(wait.min(Duration::from_nanos(deadline_ns - now)))
        };
        match step {
            Ok(Some(info)) => {
                self.logged_on(info);
                self.push(Event::LoggedOn(self.logon.expect("just logged on")));
                self.resubscribe();
            }
            Ok(None) => {}
            Err(e) => {
                self.stream = None;
                self.failed_open(e, self.clock.now_ns());
            }
        }
    }

    fn failed_open(&mut self, e: OpenError, now: u64) {
        let (cause, retry_after_ms) = e.cause();
        if let DisconnectCause::LogonRejected(reason) = cause {
            self.push(Event::LogonRejected {
                reason,
                retry_after_ms,
            });
        }
        self.schedule(cause, retry_after_ms, now);
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
    pub(super) fn lost(&mut self, cause: DisconnectCause, retry_after_ms: u32, now: u64) {
        if self.state == State::Connected {
            ClientStats::inc(&self.stats.disconnects);
        }
        self.schedule(cause, retry_after_ms, now);
    }

    fn schedule(&mut self, cause: DisconnectCause, retry_after_ms: u32, now: u64) {
        self.stream = None;
        // The next attempt goes to the next address (failover).
        self.target = (self.target + 1) % self.addrs();
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

    pub(super) fn push(&mut self, ev: Event) {
        if self.queue.len() < self.cfg.events_queued_max {
            self.queue.push_back(ev);
        } else {
            ClientStats::inc(&self.stats.events_dropped);
        }
    }
}
