//! The session's timers and the liveness facts they judge by: logon,
//! incomplete frame, slow consumer, dead peer, heartbeat and the closing
//! linger, all from the time the caller gives.
//!
//! Liveness is judged on what the peer sent, not on what the server got
//! round to reading: a complete frame waiting in the inbound buffer (left
//! there by a spent request budget) and input the shard found waiting in
//! the socket ([`Session::note_input_waiting`], e.g. from `FIONREAD`)
//! count as received. A connection whose bytes wait unread is never cut
//! as idle, and a Logon that arrived is never `logon_timeout`: from its
//! arrival the verifier's verdict is awaited for one logon timeout, and a
//! verdict that does not come gets LogonRejected(busy) with the busy
//! window's jittered retry-after.

use super::{Ctx, Session, SessionConfig, SessionState, Timer, MS};
use crate::gateway::GatewayStats;
use crate::wire::{self, DisconnectReason, LogonRejectReason, RejectReason};

/// Why an unlogged session is due for its logon timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LogonDue {
    /// No Logon arrived within the logon timeout, nothing waits unread.
    NoLogon,
    /// The Logon arrived; its verdict did not come within the timeout.
    VerdictLate,
}

impl Session {
    /// The server's loop stalled for `stall_ns` (it was stopped or
    /// starved): the peer's silence over that time is the server's, so
    /// the idle, logon and partial-frame deadlines move out by it.
    pub fn on_stall(&mut self, stall_ns: u64) {
        self.last_rx_ns = self.last_rx_ns.saturating_add(stall_ns);
        self.connected_ns = self.connected_ns.saturating_add(stall_ns);
        if let Some(t) = self.partial_since_ns.as_mut() {
            *t = t.saturating_add(stall_ns);
        }
        if let Some(t) = self.logon_seen_ns.as_mut() {
            *t = t.saturating_add(stall_ns);
        }
    }

    /// The shard found input from the peer waiting at `now_ns` that it has
    /// not read (bytes in the socket): the peer is not silent then, and a
    /// timer judged at the same time does not cut it for silence.
    pub fn note_input_waiting(&mut self, now_ns: u64) {
        self.unread_noted_ns = now_ns;
        self.last_rx_ns = self.last_rx_ns.max(now_ns);
    }

    /// A complete frame waits in the inbound buffer, unhandled.
    fn frame_buffered(&self, cfg: &SessionConfig) -> bool {
        let buf = &self.inbuf[self.in_off..self.in_len];
        matches!(wire::split_with_max(buf, cfg.max_frame_bytes), Ok(Some(_)))
    }

    /// Input from the peer waits for the server at `now_ns`.
    fn input_waiting(&self, cfg: &SessionConfig, now_ns: u64) -> bool {
        self.unread_noted_ns == now_ns || self.frame_buffered(cfg)
    }

    fn logon_due(&self, cfg: &SessionConfig, now_ns: u64) -> Option<LogonDue> {
        let late = |since: u64| now_ns.saturating_sub(since) > cfg.logon_timeout_ms * MS;
        match self.logon_seen_ns {
            Some(t) => late(t).then_some(LogonDue::VerdictLate),
            None => (late(self.connected_ns) && !self.input_waiting(cfg, now_ns))
                .then_some(LogonDue::NoLogon),
        }
    }

    fn idle_due(&self, cfg: &SessionConfig, now_ns: u64) -> bool {
        now_ns.saturating_sub(self.last_rx_ns) > self.idle_limit_ns(cfg)
            && !self.input_waiting(cfg, now_ns)
    }

    /// Whether [`Session::on_timer`] at `now_ns` would cut the peer for
    /// what it has not sent (silence, no logon, an unfinished frame): the
    /// shard reads its socket first (and, if still due, asks the socket
    /// whether bytes wait: [`Session::note_input_waiting`]).
    pub fn silence_due(&self, cfg: &SessionConfig, now_ns: u64) -> bool {
        let partial = self
            .partial_since_ns
            .is_some_and(|t| now_ns.saturating_sub(t) > cfg.frame_timeout_ms * MS);
        partial
            || match self.state {
                SessionState::Closing { .. } => false,
                SessionState::AwaitingLogon => {
                    self.logon_due(cfg, now_ns) == Some(LogonDue::NoLogon)
                }
                SessionState::Active { .. } => self.idle_due(cfg, now_ns),
            }
    }

    fn idle_limit_ns(&self, cfg: &SessionConfig) -> u64 {
        self.heartbeat_ns * u64::from(cfg.dead_after_heartbeats)
    }

    /// Judges the session's timers at `ctx.now_ns`: queues a Heartbeat or
    /// a Disconnect, or says the closing linger is over.
    pub fn on_timer(&mut self, ctx: &mut Ctx<'_>) -> Timer {
        let (cfg, now) = (ctx.cfg, ctx.now_ns);
        if let SessionState::Closing { deadline_ns } = self.state {
            return if now >= deadline_ns {
                Timer::CloseNow
            } else {
                Timer::Idle
            };
        }
        if self
            .partial_since_ns
            .is_some_and(|t| now.saturating_sub(t) > cfg.frame_timeout_ms * MS)
        {
            let reason = RejectReason::MALFORMED;
            self.protocol_error(ctx, reason, 0, 0, "incomplete frame timed out");
        } else if self.state == SessionState::AwaitingLogon {
            self.on_logon_timer(ctx);
        } else if ctx
            .out
            .above_high_for_ns(now)
            .is_some_and(|d| d > cfg.slow_consumer_ms * MS)
        {
            let retry = ctx.jitter(cfg.error_retry);
            let reason = DisconnectReason::SLOW_CONSUMER;
            self.disconnect(ctx, reason, retry, "slow consumer");
        } else if self.idle_due(cfg, now) {
            self.disconnect(ctx, DisconnectReason::IDLE_TIMEOUT, 0, "peer silent");
        } else if now.saturating_sub(self.last_tx_ns) >= self.heartbeat_ns {
            self.send(ctx, wire::encode_heartbeat);
        }
        Timer::Idle
    }

    fn on_logon_timer(&mut self, ctx: &mut Ctx<'_>) {
        match self.logon_due(ctx.cfg, ctx.now_ns) {
            None => {}
            Some(LogonDue::NoLogon) => {
                let retry = ctx.jitter(ctx.cfg.error_retry);
                let reason = DisconnectReason::LOGON_TIMEOUT;
                self.disconnect(ctx, reason, retry, "no logon");
            }
            Some(LogonDue::VerdictLate) => {
                // The client did its part: come back later, spread out.
                GatewayStats::add(&ctx.stats.logons_verdict_late, 1);
                let retry = ctx.jitter(ctx.cfg.busy_retry);
                self.logon_rejected(LogonRejectReason::BUSY, retry, ctx);
            }
        }
    }
}
