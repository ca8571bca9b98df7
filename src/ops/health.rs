//! Process lifecycle and probe answers.
//!
//! [`Health`] is a handful of atomics the service flips and the ops thread
//! reads; no locks, no allocation after construction. The state only moves
//! forward — starting → serving → draining → stopped — so a late "serving"
//! can never undo a drain. Liveness is the truth about the process: it
//! fails at once when the stage [`Supervisor`] has seen a stage die (the
//! process then exits within its grace, `runtime::supervise`), and
//! otherwise once the process loop, which calls [`Health::beat`] every
//! turn, has not beaten for `liveness_stale_ms` (a wedged loop).

use crate::clock::{Clock, NS_PER_MS};
use crate::ops::metrics::{catalogue, Collect, Sink};
use crate::runtime::supervise::Death;
use crate::runtime::Supervisor;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// Default time without a heartbeat after which `/livez` fails.
pub const DEFAULT_LIVENESS_STALE_MS: u64 = 10_000;

/// Lifecycle state. Ordered: transitions only go to a larger value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum HealthState {
    /// Starting up: not ready, alive.
    Starting = 0,
    /// Ready for traffic.
    Serving = 1,
    /// Shutdown began: readiness fails, still alive.
    Draining = 2,
    /// Shut down.
    Stopped = 3,
}

impl HealthState {
    /// Every state, in order.
    pub const ALL: [HealthState; 4] = [
        HealthState::Starting,
        HealthState::Serving,
        HealthState::Draining,
        HealthState::Stopped,
    ];

    fn from_u8(v: u8) -> Self {
        match v {
            0 => HealthState::Starting,
            1 => HealthState::Serving,
            2 => HealthState::Draining,
            _ => HealthState::Stopped,
        }
    }

    /// The `state` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Starting => "starting",
            HealthState::Serving => "serving",
            HealthState::Draining => "draining",
            HealthState::Stopped => "stopped",
        }
    }
}

/// What `/livez` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// Every stage runs and the process loop beats.
    Live,
    /// No heartbeat within `liveness_stale_ms`.
    Stalled,
    /// A stage died (the first one).
    StageDied(Death),
}

/// Shared health of the process. Create once, share as `Arc<Health>`.
pub struct Health {
    state: AtomicU8,
    last_beat_ns: AtomicU64,
    liveness_stale_ns: u64,
    clock: Arc<dyn Clock>,
    supervisor: Supervisor,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Health {
    /// Starts in `Starting` with a fresh heartbeat, over a supervisor of
    /// its own (which sees only the ops threads).
    pub fn new(clock: Arc<dyn Clock>, liveness_stale_ms: u64) -> Arc<Self> {
        Self::with_supervisor(clock, liveness_stale_ms, Supervisor::new())
    }

    /// [`Health::new`] reporting the stages `supervisor` watches.
    pub fn with_supervisor(
        clock: Arc<dyn Clock>,
        liveness_stale_ms: u64,
        supervisor: Supervisor,
    ) -> Arc<Self> {
        let now = clock.now_ns();
        Arc::new(Health {
            state: AtomicU8::new(HealthState::Starting as u8),
            last_beat_ns: AtomicU64::new(now),
            liveness_stale_ns: liveness_stale_ms.saturating_mul(NS_PER_MS),
            clock,
            supervisor,
        })
    }

    /// The supervisor whose stages `/livez` reports (the ops threads
    /// register with it too).
    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    /// The current state (Acquire).
    pub fn state(&self) -> HealthState {
        HealthState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Moves forward to `to`; returns the previous state. Moving backwards
    /// (e.g. serving after draining) is a no-op.
    pub(crate) fn advance(&self, to: HealthState) -> HealthState {
        let previous = HealthState::from_u8(self.state.fetch_max(to as u8, Ordering::AcqRel));
        if previous < to {
            tracing::info!(from = previous.as_str(), to = to.as_str(), "health state");
        }
        previous
    }

    /// Start-up finished: ready for traffic.
    pub fn set_serving(&self) -> HealthState {
        self.advance(HealthState::Serving)
    }

    /// Shutdown began: readiness fails from this instant.
    pub fn begin_draining(&self) -> HealthState {
        self.advance(HealthState::Draining)
    }

    /// Shutdown finished.
    pub fn set_stopped(&self) -> HealthState {
        self.advance(HealthState::Stopped)
    }

    /// The process loop is alive; call every turn (cheap: one clock read
    /// and one relaxed store).
    pub fn beat(&self) {
        self.last_beat_ns
            .store(self.clock.now_ns(), Ordering::Relaxed);
    }

    /// `/livez`: no stage died and a heartbeat within
    /// `liveness_stale_ms`. Draining is alive: a drain must not get the
    /// process restarted.
    pub fn liveness(&self) -> Liveness {
        if let Some(d) = self.supervisor.first_death() {
            return Liveness::StageDied(d.clone());
        }
        let age_ns = self
            .clock
            .now_ns()
            .saturating_sub(self.last_beat_ns.load(Ordering::Relaxed));
        if age_ns <= self.liveness_stale_ns {
            Liveness::Live
        } else {
            Liveness::Stalled
        }
    }

    /// [`Health::liveness`] is [`Liveness::Live`].
    pub fn is_live(&self) -> bool {
        self.liveness() == Liveness::Live
    }

    /// `/readyz`: serving, not draining, and no stage died (the process
    /// is on its way out: no new traffic).
    pub fn is_ready(&self) -> bool {
        self.state() == HealthState::Serving && self.supervisor.first_death().is_none()
    }

    /// `/startupz`: start-up (including the stagger wait) is over. True in
    /// `Serving` and `Draining` — start-up is a one-way latch, and a process
    /// that already served has started; false while starting and after stop.
    pub(crate) fn is_started(&self) -> bool {
        matches!(self.state(), HealthState::Serving | HealthState::Draining)
    }
}

impl Collect for Health {
    fn collect(&self, sink: &mut Sink) {
        let current = self.state();
        for s in HealthState::ALL {
            let v = if s == current { 1.0 } else { 0.0 };
            sink.gauge(catalogue::HEALTH_STATE, &[("state", s.as_str())], v);
        }
        for (stage, up) in self.supervisor.stages() {
            let v = if up { 1.0 } else { 0.0 };
            sink.gauge(catalogue::STAGE_UP, &[("stage", &stage)], v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn state_only_moves_forward() {
        let h = Health::new(ManualClock::new(0), 1000);
        assert_eq!(h.state(), HealthState::Starting);
        assert!(!h.is_ready() && !h.is_started());
        h.set_serving();
        assert!(h.is_ready() && h.is_started());
        h.begin_draining();
        assert!(!h.is_ready() && h.is_started());
        assert_eq!(h.set_serving(), HealthState::Draining);
        assert_eq!(h.state(), HealthState::Draining);
        h.set_stopped();
        assert!(!h.is_started());
    }

    #[test]
    fn liveness_fails_without_heartbeat_and_recovers_with_one() {
        let clock = ManualClock::new(5);
        let h = Health::new(clock.clone(), 1000);
        clock.advance_ms(1000);
        assert!(h.is_live());
        clock.advance_ms(1);
        assert!(!h.is_live());
        h.beat();
        assert!(h.is_live());
    }

    #[test]
    fn a_dead_stage_fails_liveness_at_once_whatever_the_heartbeat() {
        let supervisor = Supervisor::new();
        let h = Health::with_supervisor(ManualClock::new(0), 1000, supervisor.clone());
        h.beat();
        assert_eq!(h.liveness(), Liveness::Live);
        let t = supervisor
            .spawn("pw-test-stage", crate::runtime::Policy::Permanent, || {
                panic!("boom")
            })
            .unwrap();
        let _ = t.join();
        h.beat();
        match h.liveness() {
            Liveness::StageDied(d) => assert_eq!(d.stage, "pw-test-stage"),
            other => panic!("{other:?}"),
        }
        h.set_serving();
        assert!(!h.is_ready(), "a process whose stage died takes no traffic");
    }

    #[test]
    fn draining_process_stays_live() {
        let clock = ManualClock::new(0);
        let h = Health::new(clock.clone(), 1000);
        h.set_serving();
        h.begin_draining();
        clock.advance_ms(500);
        assert!(h.is_live());
    }
}
