//! The shard's timer sweep clock: when the next sweep is due, when the
//! last one ran, and the loop stalls measured between them. The sweep
//! itself runs every session's timers (`Shard::sweep`, `reads.rs`).

use super::conns::Conns;

/// Timer sweep period.
pub const SWEEP_NS: u64 = 50_000_000;
/// A sweep later than its period by more than this is a loop stall (the
/// process was stopped or starved of CPU): the sessions' deadlines move
/// out by it and idleness is judged only after the sockets are read.
pub const STALL_MIN_NS: u64 = 100_000_000;

/// When the shard's sweeps are due and ran.
pub(super) struct Sweeps {
    /// When the next sweep is due (0: at once).
    pub(super) next_ns: u64,
    /// When the last sweep ran (0: none yet); a stall is measured from it.
    pub(super) last_ns: u64,
}

impl Sweeps {
    pub(super) fn new() -> Sweeps {
        Sweeps {
            next_ns: 0,
            last_ns: 0,
        }
    }

    /// Measures how late this sweep is (from the last one); a lateness of
    /// [`STALL_MIN_NS`] or more is a loop stall: counted, and every
    /// session's deadlines move out by it (see
    /// [`super::session::Session::on_stall`]). Returns whether it was one.
    pub(super) fn note_stall(&mut self, conns: &mut Conns, now: u64) -> bool {
        let last = std::mem::replace(&mut self.last_ns, now);
        let stall = now.saturating_sub(last).saturating_sub(SWEEP_NS);
        if last == 0 || stall < STALL_MIN_NS {
            return false;
        }
        conns.stats.stalls.inc();
        let ms = stall / 1_000_000;
        if ms > conns.stats.max_stall_ms.get() {
            conns.stats.max_stall_ms.set(ms);
        }
        let slab = &mut conns.slab;
        for conn in slab.conns[..slab.live_end].iter_mut().flatten() {
            conn.session.on_stall(stall);
            conn.stream.extend_deadline(stall);
        }
        true
    }
}

/// The loop stall at `now` that the sweep has not yet noted: how much later
/// than its period the next sweep comes after the last one at
/// `last_sweep_ns` (0: none yet), if that is a stall (at least
/// [`STALL_MIN_NS`]); else 0. The measure of [`Sweeps::note_stall`].
pub(super) fn unnoted_stall_ns(last_sweep_ns: u64, now: u64) -> u64 {
    let late = now.saturating_sub(last_sweep_ns).saturating_sub(SWEEP_NS);
    if last_sweep_ns == 0 || late < STALL_MIN_NS {
        0
    } else {
        late
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::session::{Session, SessionConfig};

    #[test]
    fn a_session_moved_after_a_stall_carries_it_and_not_otherwise() {
        let ms = 1_000_000;
        let last = 10_000 * ms;
        assert_eq!(unnoted_stall_ns(0, last), 0, "no sweep yet");
        assert_eq!(unnoted_stall_ns(last, last + SWEEP_NS + 20 * ms), 0);
        let stall = 6_000 * ms;
        assert_eq!(unnoted_stall_ns(last, last + SWEEP_NS + stall), stall);
        let cfg = SessionConfig::from(&crate::gateway::GatewayConfig::default());
        let mut s = Session::new(&cfg, last);
        // Waiting for a logon (5 s) through a 6-s stall.
        let before = s.silence_due(&cfg, last + stall);
        s.on_stall(unnoted_stall_ns(last, last + SWEEP_NS + stall));
        assert!(!s.silence_due(&cfg, last + stall));
        assert!(before, "the stall alone would have made it silent");
    }
}
