//! Why a shard lags: its own work, or a host that does not give it the
//! CPU. Per lag window the shard compares the CPU time its thread ran and
//! the time it spent runnable but waiting for a CPU (the run-queue delay,
//! `/proc/thread-self/schedstat`) with the window's wall time.
//!
//! - **Starved**: the thread waited for a CPU for at least
//!   [`STARVED_WAIT_PERMILLE`] of the window (a neighbour spinning on every
//!   core, an oversubscribed host), or ran less than
//!   [`STARVED_CPU_PERMILLE`] of it (a loop that is late without being
//!   busy is held by something else: the CPU, a stopped process, the
//!   kernel). Shedding its own sessions would not give it the time back,
//!   so a starved shard refuses nobody for lag: it conflates prices (one
//!   per symbol per turn) and admits what comes.
//! - **Own**: otherwise the loop is late because of its own work (a
//!   herd's logons, a flood's requests): busy most of the window and not
//!   kept waiting. It sheds, heaviest accounts first, and admits logons
//!   at a paced rate.
//!
//! Where schedstat is missing (a kernel without it), the CPU share alone
//! decides.
//!
//! [`classify`] is pure; `CauseMeter` reads the clocks once per window on
//! the shard thread (two reads, no allocation).

use crate::runtime::sys::{thread_cpu_ns, SchedStat};

/// Run-queue delay, per-mille of a window, at or above which a window is
/// starved: a quarter of the window spent waiting for a CPU is a host
/// that does not run the thread, whatever its own load.
pub const STARVED_WAIT_PERMILLE: u64 = 250;
/// CPU share, per-mille of a window, below which a lagging window is not
/// the shard's own work.
pub const STARVED_CPU_PERMILLE: u64 = 500;

/// What a closed window says about the lag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The shard's own work keeps it late: shed.
    Own,
    /// The host keeps it from running: conflate, refuse nobody.
    Starved,
}

/// One closed window's shares of wall time, per-mille.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowShares {
    /// CPU time the shard's thread ran.
    pub cpu_permille: u64,
    /// Time it was runnable and waiting for a CPU (`None`: unknown).
    pub wait_permille: Option<u64>,
}

/// The cause a window with these shares shows (see the module docs).
pub fn classify(s: WindowShares) -> Cause {
    let waited = s.wait_permille.is_some_and(|w| w >= STARVED_WAIT_PERMILLE);
    let starved = waited || s.cpu_permille < STARVED_CPU_PERMILLE;
    if starved {
        Cause::Starved
    } else {
        Cause::Own
    }
}

fn permille(part: u64, whole: u64) -> u64 {
    part.saturating_mul(1000)
        .checked_div(whole)
        .map_or(0, |p| p.min(1000))
}

/// The shard thread's CPU and run-queue readings, per window.
pub(crate) struct CauseMeter {
    /// Opened on the first roll, on the thread that rolls (the shard's).
    sched: Option<SchedStat>,
    start_ns: u64,
    cpu0: u64,
    wait0: Option<u64>,
    last: WindowShares,
}

impl CauseMeter {
    /// A meter whose readings start at its first [`CauseMeter::roll`].
    pub(crate) fn new() -> CauseMeter {
        CauseMeter {
            sched: None,
            start_ns: 0,
            cpu0: 0,
            wait0: None,
            last: WindowShares::default(),
        }
    }

    /// Closes the window if `window_ns` have passed since it opened; returns
    /// the closed window's shares. The first call opens the first window.
    pub(crate) fn roll(&mut self, now: u64, window_ns: u64) -> Option<WindowShares> {
        let sched = self.sched.get_or_insert_with(SchedStat::for_current_thread);
        if self.start_ns == 0 {
            self.wait0 = sched.read().map(|(_, w)| w);
            (self.start_ns, self.cpu0) = (now.max(1), thread_cpu_ns());
            return None;
        }
        let wall = now.saturating_sub(self.start_ns);
        if wall < window_ns {
            return None;
        }
        let cpu = thread_cpu_ns();
        let wait = sched.read().map(|(_, w)| w);
        self.last = WindowShares {
            cpu_permille: permille(cpu.saturating_sub(self.cpu0), wall),
            wait_permille: match (wait, self.wait0) {
                (Some(w), Some(w0)) => Some(permille(w.saturating_sub(w0), wall)),
                _ => None,
            },
        };
        (self.start_ns, self.cpu0, self.wait0) = (now, cpu, wait);
        Some(self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(cpu: u64, wait: Option<u64>) -> WindowShares {
        WindowShares {
            cpu_permille: cpu,
            wait_permille: wait,
        }
    }

    #[test]
    fn a_thread_kept_waiting_for_a_cpu_is_starved_whatever_it_ran() {
        assert_eq!(classify(w(900, Some(300))), Cause::Starved);
        assert_eq!(classify(w(100, Some(700))), Cause::Starved);
        assert_eq!(classify(w(950, Some(20))), Cause::Own);
    }

    #[test]
    fn a_late_loop_that_ran_little_is_held_by_something_else() {
        // Stopped (SIGSTOP) or blocked: neither running nor queued.
        assert_eq!(classify(w(150, Some(0))), Cause::Starved);
        assert_eq!(classify(w(600, Some(100))), Cause::Own);
    }

    #[test]
    fn without_schedstat_a_late_loop_that_is_not_busy_is_starved() {
        assert_eq!(classify(w(150, None)), Cause::Starved);
        assert_eq!(classify(w(800, None)), Cause::Own);
    }

    #[test]
    fn the_meter_closes_a_window_once_it_is_over() {
        let mut m = CauseMeter::new();
        assert_eq!(m.roll(10, 100), None, "opens");
        assert_eq!(m.roll(50, 100), None);
        let s = m.roll(1_000_000_000, 100).expect("closed");
        assert!(s.cpu_permille <= 1000);
    }
}
