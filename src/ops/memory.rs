//! Memory comes back after a herd: when many connections have left and the
//! departures have settled, the ops loop asks the allocator to return its
//! free memory to the kernel.
//!
//! Connection buffers are large enough to live in their own mappings
//! ([`crate::runtime::sys::tune_allocator`]) and go back on close by
//! themselves; what stays behind is the smaller per-connection state
//! (session, subscriptions, socket bookkeeping) freed into the stage
//! threads' heap arenas. [`MemoryReturn`] decides when trimming those is
//! worth its cost (a few milliseconds of arena locks, on the ops thread):
//! once the count has dropped by [`TRIM_MIN_DROP`] connections below its
//! peak (or to zero from any peak), and no connection has left for
//! [`TRIM_QUIET_NS`], so a herd leaving over several seconds is trimmed
//! once, after it has gone. Time is injected.

use crate::ops::metrics::{catalogue, Registry};
use crate::ops::OpsError;
use crate::runtime::counter::Counter;
use std::sync::Arc;

/// Connections that must have left since the last trim (or the peak).
pub const TRIM_MIN_DROP: usize = 64;
/// How long departures must have stopped before trimming, in ns.
pub const TRIM_QUIET_NS: u64 = 1_000_000_000;

/// When to return free memory, from the live connection count.
#[derive(Debug)]
pub struct MemoryReturn {
    peak: usize,
    last: usize,
    last_drop_ns: u64,
    trims: Arc<Counter>,
}

impl Default for MemoryReturn {
    fn default() -> Self {
        MemoryReturn {
            peak: 0,
            last: 0,
            last_drop_ns: 0,
            trims: Arc::new(Counter::new()),
        }
    }
}

impl MemoryReturn {
    /// Takes the connection count at `now_ns`; true when the caller
    /// should trim now (the trim is counted).
    pub fn observe(&mut self, connections: usize, now_ns: u64) -> bool {
        self.peak = self.peak.max(connections);
        if connections < self.last {
            self.last_drop_ns = now_ns;
        }
        self.last = connections;
        let dropped = self.peak - connections;
        let settled = now_ns.saturating_sub(self.last_drop_ns) >= TRIM_QUIET_NS;
        if dropped == 0 || dropped < TRIM_MIN_DROP.min(self.peak) || !settled {
            return false;
        }
        self.peak = connections;
        self.trims.inc();
        true
    }

    /// Trims so far.
    pub fn trims(&self) -> u64 {
        self.trims.get()
    }

    /// `pricewire_memory_trims_total` and
    /// `pricewire_process_resident_bytes` (read at scrape time).
    pub fn register(&self, r: &Registry) -> Result<(), OpsError> {
        let trims = self.trims.clone();
        r.register_counter_fn(catalogue::MEMORY_TRIMS, &[], move || trims.get())?;
        r.register_gauge_fn(catalogue::PROCESS_RESIDENT, &[], || {
            crate::runtime::sys::resident_bytes().map_or(-1.0, |b| b as f64)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_herd_that_left_is_trimmed_once_after_it_settled() {
        let mut m = MemoryReturn::default();
        assert!(!m.observe(3_000, 0));
        // Leaving over two seconds: never while departures go on.
        for (k, n) in [2_000, 1_000, 10].into_iter().enumerate() {
            assert!(!m.observe(n, (k as u64 + 1) * S / 2));
        }
        assert!(!m.observe(10, 3 * S / 2 + S - 1), "not settled yet");
        assert!(m.observe(10, 3 * S / 2 + S), "settled: trim");
        assert!(!m.observe(10, 10 * S), "once");
        assert_eq!(m.trims(), 1);
    }

    #[test]
    fn small_churn_does_not_trim_but_emptying_does() {
        let mut m = MemoryReturn::default();
        m.observe(500, 0);
        m.observe(500 - (TRIM_MIN_DROP - 1), S);
        assert!(
            !m.observe(500 - (TRIM_MIN_DROP - 1), 5 * S),
            "below the drop"
        );
        let mut small = MemoryReturn::default();
        small.observe(3, 0);
        small.observe(0, S);
        assert!(small.observe(0, 2 * S), "to zero from any peak");
        assert!(!MemoryReturn::default().observe(0, 10 * S), "nothing left");
    }

    #[test]
    fn the_peak_restarts_after_a_trim() {
        let mut m = MemoryReturn::default();
        m.observe(1_000, 0);
        m.observe(900, S);
        assert!(m.observe(900, 2 * S));
        m.observe(950, 3 * S);
        m.observe(900, 4 * S);
        assert!(!m.observe(900, 6 * S), "50 below the new peak of 950");
        m.observe(880, 7 * S);
        assert!(m.observe(880, 8 * S), "70 below it");
    }
}
