//! Provider health: whether one FIX provider belongs in the best price now.
//!
//! A per-provider state machine, decided from the caller's `now_ns`
//! (monotonic) on every session poll. One state at a time, in this order of
//! precedence:
//!
//! | State | When | Healthy |
//! |---|---|---|
//! | `breaker_open` | the feed breaker is not Closed (Open, HalfOpen, ForcedOpen) | no |
//! | `down` | the session is not logged on (waiting, connecting, logging on or out) — so every connect, logon and read timeout makes the provider unhealthy at once | no |
//! | `damped` | logged on, but the provider flaps: its sessions end early (see [`super::damping`]) | no |
//! | `silent` | logged on, but no quote on any subscribed symbol for `quote_silence_ms` | no |
//! | `gray` | logged on and quoting, but its last quote keeps aging past the engine's max quote age (the gray rule, docs/fix.md "Gray providers") | no |
//! | `probation` | logged on, quoting, but fewer than `probation_quotes` quotes or less than the probation (`probation_ms`, doubled per flap the damping penalty holds) since the session came up | no |
//! | `streaming` | none of the above | yes |
//!
//! Probation keeps a reconnect's snapshot alone from putting the provider
//! back into the best price; it rejoins only once it has kept quoting for
//! a while. Damping ([`super::damping`]) is what stops a provider whose
//! sessions outlast the probation from flapping in and out. A Disabled
//! breaker (operator) counts as Closed.
//!
//! Allocation: none after construction. [`HealthGauges`] (atomics) carry
//! the state to the metrics endpoint.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

use super::gray::{GrayChange, GrayDetector};
use crate::clock::NS_PER_MS;

/// The states (discriminants are the metric's stable numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ProviderState {
    /// No session: out of the price.
    Down = 0,
    /// Logged on, but too recently or with too few quotes: out of the price.
    Probation = 1,
    /// Logged on and quoting: in the best price.
    Streaming = 2,
    /// Logged on, but no quote for `quote_silence_ms`: out of the price.
    Silent = 3,
    /// The feed breaker is open: out of the price, whatever the session does.
    BreakerOpen = 4,
    /// Logged on, but damped for flapping: out of the price.
    Damped = 5,
    /// Logged on, but quoting too seldom for the engine's max quote age:
    /// out of the price.
    Gray = 6,
}

impl ProviderState {
    /// Every state, in discriminant order.
    pub const ALL: [ProviderState; 7] = [
        ProviderState::Down,
        ProviderState::Probation,
        ProviderState::Streaming,
        ProviderState::Silent,
        ProviderState::BreakerOpen,
        ProviderState::Damped,
        ProviderState::Gray,
    ];

    /// Lower-case name for logs and the `state` metric label.
    pub fn name(self) -> &'static str {
        match self {
            ProviderState::Down => "down",
            ProviderState::Probation => "probation",
            ProviderState::Streaming => "streaming",
            ProviderState::Silent => "silent",
            ProviderState::BreakerOpen => "breaker_open",
            ProviderState::Damped => "damped",
            ProviderState::Gray => "gray",
        }
    }

    /// True only for `Streaming`: the provider is in the best price.
    pub fn healthy(self) -> bool {
        self == ProviderState::Streaming
    }

    fn from_u8(v: u8) -> ProviderState {
        Self::ALL
            .get(usize::from(v))
            .copied()
            .unwrap_or(ProviderState::Down)
    }
}

/// Settings of the machine (from the session config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HealthConfig {
    /// 0: never silent.
    pub quote_silence_ms: u64,
    /// Quotes after logon before the provider leaves probation.
    pub probation_quotes: u32,
    /// The gray rule.
    pub gray: crate::config::fix::GrayRule,
}

/// What the machine is told on every evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inputs {
    /// The feed breaker lets quotes in (closed or disabled).
    pub breaker_closed: bool,
    /// The session is logged on.
    pub session_up: bool,
    /// The flap damping keeps the provider out.
    pub damped: bool,
    /// The probation a session must stream now, in ms.
    pub probation_ms: u64,
}

/// The state machine of one provider.
#[derive(Debug, Clone)]
pub(crate) struct ProviderHealthMachine {
    cfg: HealthConfig,
    state: ProviderState,
    up_since_ns: Option<u64>,
    last_quote_ns: Option<u64>,
    quotes_since_up: u32,
    gray: GrayDetector,
}

impl ProviderHealthMachine {
    /// A machine in `Down`.
    pub(crate) fn new(cfg: HealthConfig) -> Self {
        ProviderHealthMachine {
            state: ProviderState::Down,
            up_since_ns: None,
            last_quote_ns: None,
            quotes_since_up: 0,
            gray: GrayDetector::new(cfg.gray),
            cfg,
        }
    }

    /// The state at the last evaluation.
    pub(crate) fn state(&self) -> ProviderState {
        self.state
    }

    /// The session logged on at `now_ns`: probation starts.
    pub(crate) fn on_session_up(&mut self, now_ns: u64) {
        self.up_since_ns = Some(now_ns);
        self.quotes_since_up = 0;
        self.gray.on_session_up();
    }

    /// When the current session logged on; `None` while down.
    pub(crate) fn up_since_ns(&self) -> Option<u64> {
        self.up_since_ns
    }

    /// Quotes delivered since the current session logged on.
    pub(crate) fn quotes_since_up(&self) -> u32 {
        self.quotes_since_up
    }

    /// The session closed.
    pub(crate) fn on_session_down(&mut self) {
        self.up_since_ns = None;
        self.quotes_since_up = 0;
    }

    /// Counts a quote received at `now_ns`.
    pub(crate) fn on_quote(&mut self, now_ns: u64) {
        self.last_quote_ns = Some(now_ns);
        self.quotes_since_up = self.quotes_since_up.saturating_add(1);
        self.gray.on_quote();
    }

    /// The gray rule at `now_ns` (a lapse, gray begun or ended), judged on
    /// this session's quotes.
    pub(crate) fn judge_gray(&mut self, now_ns: u64) -> GrayChange {
        let Some(up) = self.up_since_ns else {
            return GrayChange::default();
        };
        let last = self.last_quote_ns.filter(|&q| q >= up);
        self.gray.evaluate(now_ns, last)
    }

    /// The gray rule's settings.
    pub(crate) fn gray_rule(&self) -> &crate::config::fix::GrayRule {
        self.gray.rule()
    }

    /// True while logged on with no quote for `quote_silence_ms` (counted
    /// from the logon when no quote has come since).
    pub(crate) fn silent(&self, now_ns: u64) -> bool {
        let Some(up) = self.up_since_ns else {
            return false;
        };
        if self.cfg.quote_silence_ms == 0 {
            return false;
        }
        let from = self.last_quote_ns.map_or(up, |q| q.max(up));
        now_ns.saturating_sub(from) >= self.cfg.quote_silence_ms * NS_PER_MS
    }

    /// Decides the state at `now_ns`; returns `Some((from, to))` when it
    /// changed.
    pub(crate) fn evaluate(
        &mut self,
        now_ns: u64,
        inputs: Inputs,
    ) -> Option<(ProviderState, ProviderState)> {
        let next = if !inputs.breaker_closed {
            ProviderState::BreakerOpen
        } else if !inputs.session_up || self.up_since_ns.is_none() {
            ProviderState::Down
        } else if inputs.damped {
            ProviderState::Damped
        } else if self.silent(now_ns) {
            ProviderState::Silent
        } else if self.gray.gray() {
            ProviderState::Gray
        } else if self.in_probation(now_ns, inputs.probation_ms) {
            ProviderState::Probation
        } else {
            ProviderState::Streaming
        };
        let prev = std::mem::replace(&mut self.state, next);
        (prev != next).then_some((prev, next))
    }

    /// True until the session has been up `probation_ms` and brought
    /// `probation_quotes` quotes (also while down).
    pub(crate) fn in_probation(&self, now_ns: u64, probation_ms: u64) -> bool {
        let up = self.up_since_ns.unwrap_or(now_ns);
        self.quotes_since_up < self.cfg.probation_quotes
            || now_ns.saturating_sub(up) < probation_ms * NS_PER_MS
    }
}

/// The machine's state, the last quote's time and the flap damping, for
/// the metrics thread.
#[derive(Debug, Default)]
pub struct HealthGauges {
    state: AtomicU8,
    /// Wall-clock (UTC ns) receive time of the last quote; 0 before any.
    last_quote_wall_ns: AtomicU64,
    damped: AtomicU8,
    /// The flap penalty, rounded.
    penalty: AtomicU64,
    /// Time until damping ends (no new flap), in ms; 0 when not damped.
    damped_left_ms: AtomicU64,
    /// The probation a new session must stream now, in ms.
    probation_ms: AtomicU64,
}

/// The flap damping as the session last published it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DampingGauges {
    /// The provider is damped.
    pub damped: bool,
    /// The flap penalty, rounded (one flap is 1000).
    pub penalty: u64,
    /// Time until damping ends if no flap comes first, in ms.
    pub damped_left_ms: u64,
    /// The probation a new session must stream now, in ms.
    pub probation_ms: u64,
}

impl HealthGauges {
    /// Publishes the machine's state.
    pub(crate) fn set_state(&self, s: ProviderState) {
        self.state.store(s as u8, Relaxed);
    }
    /// The last published state.
    pub fn state(&self) -> ProviderState {
        ProviderState::from_u8(self.state.load(Relaxed))
    }
    /// Records the wall-clock receive time (UTC ns) of the latest quote.
    pub(crate) fn set_last_quote_wall_ns(&self, wall_ns: u64) {
        self.last_quote_wall_ns.store(wall_ns, Relaxed);
    }
    /// Publishes the flap damping.
    pub(crate) fn set_damping(&self, d: DampingGauges) {
        self.damped.store(u8::from(d.damped), Relaxed);
        self.penalty.store(d.penalty, Relaxed);
        self.damped_left_ms.store(d.damped_left_ms, Relaxed);
        self.probation_ms.store(d.probation_ms, Relaxed);
    }
    /// The last published flap damping.
    pub fn damping(&self) -> DampingGauges {
        DampingGauges {
            damped: self.damped.load(Relaxed) != 0,
            penalty: self.penalty.load(Relaxed),
            damped_left_ms: self.damped_left_ms.load(Relaxed),
            probation_ms: self.probation_ms.load(Relaxed),
        }
    }
    /// Seconds since the last quote at `wall_now_ns`; -1 before any quote.
    pub(crate) fn last_quote_age_s(&self, wall_now_ns: u64) -> f64 {
        match self.last_quote_wall_ns.load(Relaxed) {
            0 => -1.0,
            t => wall_now_ns.saturating_sub(t) as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = NS_PER_MS;
    const UP: Inputs = Inputs {
        breaker_closed: true,
        session_up: true,
        damped: false,
        probation_ms: 1_000,
    };

    fn machine() -> ProviderHealthMachine {
        ProviderHealthMachine::new(HealthConfig {
            quote_silence_ms: 5_000,
            probation_quotes: 3,
            gray: crate::config::fix::GrayRule::default(),
        })
    }

    #[test]
    fn probation_then_streaming_then_silent() {
        let mut m = machine();
        assert_eq!(m.evaluate(0, UP), None, "never up: down");
        m.on_session_up(0);
        assert_eq!(
            m.evaluate(0, UP),
            Some((ProviderState::Down, ProviderState::Probation))
        );
        for t in [10, 20, 30] {
            m.on_quote(t * MS);
        }
        assert_eq!(
            m.evaluate(999 * MS, UP),
            None,
            "3 quotes, 999 ms: probation"
        );
        assert_eq!(
            m.evaluate(1_000 * MS, UP),
            Some((ProviderState::Probation, ProviderState::Streaming))
        );
        assert!(m.state().healthy());
        assert_eq!(m.evaluate(5_029 * MS, UP), None);
        assert_eq!(
            m.evaluate(5_030 * MS, UP),
            Some((ProviderState::Streaming, ProviderState::Silent)),
            "5 s after the last quote"
        );
        m.on_quote(5_100 * MS);
        assert_eq!(
            m.evaluate(5_100 * MS, UP).map(|c| c.1),
            Some(ProviderState::Streaming)
        );
    }

    #[test]
    fn a_snapshot_after_a_reconnect_does_not_rejoin() {
        let mut m = machine();
        m.on_session_up(0);
        for t in 0..10 {
            m.on_quote(t * 10 * MS);
        }
        m.evaluate(2_000 * MS, UP);
        assert!(m.state().healthy());
        m.on_session_down();
        let down = Inputs {
            session_up: false,
            ..UP
        };
        assert_eq!(
            m.evaluate(2_001 * MS, down).map(|c| c.1),
            Some(ProviderState::Down)
        );
        m.on_session_up(3_000 * MS);
        m.on_quote(3_000 * MS);
        m.on_quote(3_001 * MS); // the snapshot
        assert_eq!(
            m.evaluate(4_500 * MS, UP).map(|c| c.1),
            Some(ProviderState::Probation)
        );
        assert_eq!(
            m.evaluate(8_001 * MS, UP).map(|c| c.1),
            Some(ProviderState::Silent),
            "the snapshot and then nothing: silent, never streaming"
        );
    }

    #[test]
    fn a_logon_with_no_quote_is_silent_after_the_threshold() {
        let mut m = machine();
        m.on_session_up(100 * MS);
        m.evaluate(100 * MS, UP);
        assert_eq!(m.evaluate(5_099 * MS, UP), None);
        assert_eq!(
            m.evaluate(5_100 * MS, UP).map(|c| c.1),
            Some(ProviderState::Silent)
        );
        let open = Inputs {
            breaker_closed: false,
            ..UP
        };
        assert_eq!(
            m.evaluate(5_200 * MS, open).map(|c| c.1),
            Some(ProviderState::BreakerOpen)
        );
    }

    #[test]
    fn damped_and_gray_keep_a_logged_on_provider_out() {
        let mut m = machine();
        m.on_session_up(0);
        for t in 0..20 {
            m.on_quote(t * 50 * MS);
        }
        let damped = Inputs { damped: true, ..UP };
        assert_eq!(
            m.evaluate(1_000 * MS, damped).map(|c| c.1),
            Some(ProviderState::Damped)
        );
        let long = Inputs {
            probation_ms: 4_000,
            ..UP
        };
        assert_eq!(
            m.evaluate(1_000 * MS, long).map(|c| c.1),
            Some(ProviderState::Probation),
            "the grown probation"
        );
        assert_eq!(
            m.evaluate(4_000 * MS, long).map(|c| c.1),
            Some(ProviderState::Streaming)
        );
        // One quote every 4 s from here: gray at the third lapse.
        let mut gray_at = None;
        for t in (4_000..20_000u64).step_by(10) {
            if t % 4_000 == 0 {
                m.on_quote(t * MS);
            }
            m.judge_gray(t * MS);
            if m.evaluate(t * MS, UP).map(|c| c.1) == Some(ProviderState::Gray) {
                gray_at = Some(t);
            }
        }
        assert_eq!(gray_at, Some(14_010), "lapses at 6.01, 10.01, 14.01 s");
        let down = Inputs {
            session_up: false,
            ..damped
        };
        assert_eq!(
            m.evaluate(20_000 * MS, down).map(|c| c.1),
            Some(ProviderState::Down),
            "down wins over damped"
        );
    }

    #[test]
    fn gauges_report_state_and_age() {
        let g = HealthGauges::default();
        assert_eq!(g.state(), ProviderState::Down);
        assert_eq!(g.last_quote_age_s(5), -1.0);
        g.set_state(ProviderState::Silent);
        g.set_last_quote_wall_ns(1_000_000_000);
        assert_eq!(g.state(), ProviderState::Silent);
        assert_eq!(g.last_quote_age_s(3_500_000_000), 2.5);
    }
}
