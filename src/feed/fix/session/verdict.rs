//! Verdicts: failures and their log line, closing and the reconnect
//! schedule, breaker records and the consecutive-failures rule, and the
//! provider health published to the engine. Part of [`super::FixSession`].

use super::{
    DisconnectReason, Failure, FixSession, Io, SessionState, EMPTY_BOOK, FAIL_LOG_EVERY_NS,
};
use crate::clock::NS_PER_MS;
use crate::feed::fix::health::{DampingGauges, Inputs, ProviderState};
use crate::resilience::{BreakerState, Outcome};

impl FixSession {
    /// Records a failure and asks the driver to close; the connection
    /// ends for this reason unless an earlier cause was recorded.
    pub(super) fn fail(&mut self, why: Failure, now_ns: u64) {
        self.note_failure(why, now_ns);
        self.end_for(DisconnectReason::of_failure(why));
        self.close = true;
    }

    /// Records why the connection ends, if nothing did before.
    pub(super) fn end_for(&mut self, why: Option<DisconnectReason>) {
        if self.ending.is_none() {
            self.ending = why;
        }
    }

    /// A breaker failure with a log line, at most one a second per
    /// session (the lines held back are counted in the next).
    pub(super) fn note_failure(&mut self, why: Failure, now_ns: u64) {
        let due = self
            .fail_logged_ns
            .is_none_or(|t| now_ns.saturating_sub(t) >= FAIL_LOG_EVERY_NS);
        if due {
            let held_back = std::mem::take(&mut self.fail_log_held);
            tracing::warn!(provider = %self.cfg.name, ?why, held_back, "FIX session failure");
            self.fail_logged_ns = Some(now_ns);
        } else {
            self.fail_log_held += 1;
        }
        self.record(Outcome::Failure { duration_ns: 0 }, now_ns);
    }

    /// Closes without a failure (our Logout was answered or timed out):
    /// the reason is the one the Logout recorded.
    pub(super) fn end_quietly(&mut self) {
        self.end_for(Some(DisconnectReason::PeerClosed));
        self.close = true;
    }

    pub(super) fn take_io(&mut self, now_ns: u64) -> Io {
        if !self.close {
            return Io::Nothing;
        }
        let was_open = self.state != SessionState::Waiting;
        self.finish_close(now_ns);
        if was_open {
            Io::Close
        } else {
            Io::Nothing
        }
    }

    /// Back to `Waiting` with the next attempt after full-jitter backoff.
    pub(super) fn finish_close(&mut self, now_ns: u64) {
        self.close = false;
        let ending = self.ending.take().unwrap_or(DisconnectReason::PeerClosed);
        if std::mem::take(&mut self.connected) {
            ending.counter(&self.stats).inc();
        }
        self.state = SessionState::Waiting;
        // The outbound buffer keeps a parting Logout for the driver's last
        // write; it is cleared when the next connection comes up.
        self.pending.clear();
        self.pending_pos = 0;
        self.books.fill(EMPTY_BOOK);
        // A session that logged on and quoted, ended other than by our
        // shutdown: judged by its length. (One that never quoted never
        // entered the price; a hung LP is the breaker's concern.)
        if let Some(up) = self.machine.up_since_ns() {
            if ending != DisconnectReason::Shutdown && self.machine.quotes_since_up() > 0 {
                self.judge_session_length(now_ns.saturating_sub(up), ending, now_ns);
            }
        }
        self.machine.on_session_down();
        let floor_ms = self
            .damper
            .reconnect_floor_ms(&self.cfg.reconnect, now_ns, &mut self.rng);
        let delay_ms = self
            .cfg
            .reconnect
            .delay_ms(self.attempt, floor_ms, &mut self.rng);
        self.attempt = self.attempt.saturating_add(1);
        self.next_connect_ns = now_ns + delay_ms * NS_PER_MS;
        self.stats.reconnects_scheduled.inc();
        self.update_health(now_ns);
    }

    /// A logged-on session that quoted lasted `up_ns`: shorter than
    /// `flap_stable_ms` is a flap for the damping (docs/fix.md "Flap
    /// damping").
    fn judge_session_length(&mut self, up_ns: u64, ending: DisconnectReason, now_ns: u64) {
        let was_damped = self.damper.damped();
        if !self.damper.on_session_end(up_ns, now_ns) {
            return;
        }
        self.stats.flaps.inc();
        let (provider, up_ms) = (&self.cfg.name, up_ns / NS_PER_MS);
        let penalty = self.damper.penalty(now_ns).round() as u64;
        let damped = self.damper.damped();
        tracing::warn!(%provider, up_ms, reason = ending.name(), penalty, damped,
            stable_ms = self.cfg.flap.stable_ms, "FIX session ended early: a flap");
        if damped && !was_damped {
            self.stats.damped_entries.inc();
            let out_ms = self.damper.damped_left_ns(now_ns) / NS_PER_MS;
            tracing::warn!(%provider, penalty, out_ms,
                "FIX provider damped for flapping: out of the price until it stops");
        }
    }

    pub(super) fn record(&mut self, outcome: Outcome, now_ns: u64) {
        if let Ok(permit) = self.breaker.try_acquire(now_ns) {
            self.breaker.record(permit, outcome, now_ns);
        }
        if matches!(outcome, Outcome::Failure { .. }) {
            self.consecutive_failures = self.consecutive_failures.saturating_add(1);
            let k = self.cfg.breaker_consecutive_failures;
            if k > 0 && self.consecutive_failures >= k && self.breaker.trip(now_ns) {
                self.stats.breaker_trips.inc();
                tracing::warn!(provider = %self.cfg.name, failures = k,
                    "FIX feed breaker opened: consecutive failures");
            }
        }
        self.update_health(now_ns);
    }

    /// Evaluates the provider-health machine; publishes `healthy` (state
    /// `streaming`) to the engine and the state to the gauges.
    pub(super) fn update_health(&mut self, now_ns: u64) {
        let damped = self.update_damping(now_ns);
        self.update_gray(now_ns);
        let inputs = Inputs {
            breaker_closed: matches!(
                self.breaker.state(now_ns),
                BreakerState::Closed | BreakerState::Disabled
            ),
            session_up: self.state == SessionState::Active,
            damped,
            probation_ms: self.probation_ms_now,
        };
        if let Some((from, to)) = self.machine.evaluate(now_ns, inputs) {
            self.gauges.set_state(to);
            if from.healthy() != to.healthy() {
                self.stats.health_changes.inc();
            }
            let (provider, from, to_name) = (&self.cfg.name, from.name(), to.name());
            match to {
                ProviderState::Streaming | ProviderState::Probation => {
                    tracing::info!(%provider, from, to = to_name, healthy = to.healthy(),
                        "FIX provider state changed")
                }
                _ => tracing::warn!(%provider, from, to = to_name, healthy = to.healthy(),
                    "FIX provider state changed"),
            }
        }
        let healthy = self.machine.state().healthy();
        if self.published != Some(healthy) {
            if let Some(h) = self.health.get() {
                h.set(usize::from(self.cfg.provider), healthy);
                self.published = Some(healthy);
            }
        }
    }

    /// The damping at `now_ns`: its end by the timer, the grown
    /// probation, the gauges. Returns whether the provider is damped.
    fn update_damping(&mut self, now_ns: u64) -> bool {
        let (damped, changed) = self.damper.update(now_ns);
        if changed {
            tracing::info!(provider = %self.cfg.name, "FIX provider no longer damped");
        }
        self.probation_ms_now = self.damper.probation_ms(self.cfg.probation_ms, now_ns);
        self.gauges.set_damping(DampingGauges {
            damped,
            penalty: self.damper.penalty(now_ns).round() as u64,
            damped_left_ms: self.damper.damped_left_ns(now_ns) / NS_PER_MS,
            probation_ms: self.probation_ms_now,
        });
        damped
    }

    /// The gray rule at `now_ns`: lapses counted, gray begun or ended
    /// logged.
    fn update_gray(&mut self, now_ns: u64) {
        let change = self.machine.judge_gray(now_ns);
        if change.lapse {
            self.stats.quote_lapses.inc();
        }
        let rule = *self.machine.gray_rule();
        match change.gray {
            Some(true) => {
                self.stats.gray_entries.inc();
                tracing::warn!(provider = %self.cfg.name, lapses = rule.lapses,
                    window_ms = rule.window_ms, max_quote_age_ms = rule.max_quote_age_ms,
                    "FIX provider gray: its quotes keep aging past the engine's max quote age");
            }
            Some(false) => tracing::info!(provider = %self.cfg.name, clear_ms = rule.clear_ms,
                "FIX provider no longer gray: quotes fresh again"),
            None => {}
        }
    }
}
