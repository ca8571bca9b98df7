//! The session's timers and the liveness facts they judge by: logon,
//! incomplete frame, slow consumer, dead peer, heartbeat and the closing
//! linger, all from the time the caller gives.

use super::{Ctx, Session, SessionConfig, SessionState, Timer, MS};
use crate::wire::{self, DisconnectReason, RejectReason};

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
    }

    /// Whether [`Session::on_timer`] at `now_ns` would cut the peer for
    /// what it has not sent (silence, no logon, an unfinished frame): the
    /// shard reads its socket first, so bytes waiting there count.
    pub fn silence_due(&self, cfg: &SessionConfig, now_ns: u64) -> bool {
        let late = |since: u64, ms: u64| now_ns.saturating_sub(since) > ms * MS;
        let partial = self
            .partial_since_ns
            .is_some_and(|t| late(t, cfg.frame_timeout_ms));
        partial
            || match self.state {
                SessionState::Closing { .. } => false,
                SessionState::AwaitingLogon => late(self.connected_ns, cfg.logon_timeout_ms),
                SessionState::Active { .. } => {
                    now_ns.saturating_sub(self.last_rx_ns) > self.idle_limit_ns(cfg)
                }
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
        let late = |since: u64, ms: u64| now.saturating_sub(since) > ms * MS;
        if self
            .partial_since_ns
            .is_some_and(|t| late(t, cfg.frame_timeout_ms))
        {
            let reason = RejectReason::MALFORMED;
            self.protocol_error(ctx, reason, 0, 0, "incomplete frame timed out");
        } else if self.state == SessionState::AwaitingLogon {
            if late(self.connected_ns, cfg.logon_timeout_ms) {
                let retry = ctx.jitter(cfg.error_retry);
                let reason = DisconnectReason::LOGON_TIMEOUT;
                self.disconnect(ctx, reason, retry, "no logon");
            }
        } else if ctx
            .out
            .above_high_for_ns(now)
            .is_some_and(|d| d > cfg.slow_consumer_ms * MS)
        {
            let retry = ctx.jitter(cfg.error_retry);
            let reason = DisconnectReason::SLOW_CONSUMER;
            self.disconnect(ctx, reason, retry, "slow consumer");
        } else if now.saturating_sub(self.last_rx_ns) > self.idle_limit_ns(cfg) {
            self.disconnect(ctx, DisconnectReason::IDLE_TIMEOUT, 0, "peer silent");
        } else if now.saturating_sub(self.last_tx_ns) >= self.heartbeat_ns {
            self.send(ctx, wire::encode_heartbeat);
        }
        Timer::Idle
    }
}
