//! Timers: the connect schedule, connect/logon/logout deadlines,
//! heartbeats, TestRequest, the read timeout and quote silence. Part of
//! [`super::FixSession`].

use super::{Failure, FixSession, Io, SessionState, TEST_REQUEST_AFTER_PCT};
use crate::clock::NS_PER_MS;
use crate::resilience::BreakerState;

impl FixSession {
    /// Timers: connect schedule, connect/logon/logout deadlines, heartbeat,
    /// TestRequest, read timeout; and the breaker's own timer, so health
    /// follows Open -> HalfOpen with no traffic.
    pub fn poll(&mut self, now_ns: u64, wall_ns: u64) -> Io {
        self.update_health(now_ns);
        // Half-open is the time to probe: connect now instead of at the end
        // of a long backoff, so the trial calls come before the breaker's
        // half_open_max_wait_ms (the read timeout) ends it without a verdict.
        if self.state == SessionState::Waiting
            && self.next_connect_ns > now_ns
            && self.breaker.state(now_ns) == BreakerState::HalfOpen
        {
            self.next_connect_ns = now_ns;
        }
        match self.state {
            SessionState::Waiting if now_ns >= self.next_connect_ns => {
                self.state = SessionState::Connecting;
                self.deadline_ns = now_ns + self.cfg.connect_timeout_ms * NS_PER_MS;
                self.stats.connects_attempted.inc();
                return Io::Connect;
            }
            SessionState::Connecting if now_ns >= self.deadline_ns => {
                self.stats.connect_timeouts.inc();
                self.fail(Failure::ConnectTimeout, now_ns);
            }
            SessionState::LogonSent if now_ns >= self.deadline_ns => {
                self.stats.logon_timeouts.inc();
                self.fail(Failure::LogonTimeout, now_ns);
            }
            SessionState::LoggingOut if now_ns >= self.deadline_ns => self.end_quietly(),
            SessionState::LogonSent | SessionState::Active | SessionState::LoggingOut => {
                self.check_silence(now_ns, wall_ns)
            }
            _ => {}
        }
        self.take_io(now_ns)
    }

    pub(super) fn check_silence(&mut self, now_ns: u64, wall_ns: u64) {
        let silent_ns = now_ns.saturating_sub(self.last_recv_ns);
        let hb_ns = u64::from(self.cfg.heartbeat_s) * 1_000 * NS_PER_MS;
        if silent_ns >= self.cfg.read_timeout_ms * NS_PER_MS {
            self.stats.read_timeouts.inc();
            self.fail(Failure::ReadTimeout, now_ns);
            return;
        }
        if self.state != SessionState::Active {
            return;
        }
        self.check_quote_silence(now_ns);
        if silent_ns >= hb_ns * TEST_REQUEST_AFTER_PCT / 100 && !self.test_req_pending {
            self.test_req_pending = true;
            self.test_req_id += 1;
            self.stats.test_requests_sent.inc();
            let id = self.test_req_id;
            self.send(b"1", now_ns, wall_ns, |e| {
                e.fmt(112, format_args!("TEST{id}"))
            });
        } else if now_ns.saturating_sub(self.last_sent_ns) >= hb_ns {
            self.stats.heartbeats_sent.inc();
            self.send(b"0", now_ns, wall_ns, |_| {});
        }
    }

    /// Logged on and no quote for `quote_silence_ms`: one failure per
    /// silent interval (a hung LP that still heartbeats opens the breaker
    /// by the consecutive rule); the session stays up.
    pub(super) fn check_quote_silence(&mut self, now_ns: u64) {
        let interval_ns = self.cfg.quote_silence_ms * NS_PER_MS;
        if self.machine.silent(now_ns) && now_ns.saturating_sub(self.silence_mark_ns) >= interval_ns
        {
            self.silence_mark_ns = now_ns;
            self.stats.quote_silences.inc();
            self.note_failure(Failure::QuoteSilence, now_ns);
        }
    }
}
