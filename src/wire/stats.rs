//! Counters of decoded and refused frames by reason. Fixed size (one slot
//! per reason code), Relaxed atomics; recording never blocks or allocates.
//! The service does not use them: the gateway counts its rejects in
//! `overload::OverloadStats`, which /metrics reads.

use std::sync::atomic::{AtomicU64, Ordering};

use super::codes::RejectReason;

/// Reason codes 0..SLOTS get their own counter; anything above shares the last.
const SLOTS: usize = 32;

/// Frame and decode outcomes.
#[derive(Debug, Default)]
pub struct WireStats {
    frames_decoded: AtomicU64,
    rejected_by_reason: [AtomicU64; SLOTS],
}

/// A point-in-time copy of [`WireStats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireStatsSnapshot {
    /// Frames counted by [`WireStats::record_decoded`].
    pub frames_decoded: u64,
    /// `(reason, count)` for every known reason, in code order.
    pub rejected: Vec<(RejectReason, u64)>,
    /// Rejects with a reason this build does not name.
    pub rejected_other: u64,
}

impl WireStats {
    /// Counts one decoded frame.
    pub fn record_decoded(&self) {
        self.frames_decoded.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one refused frame or request.
    pub fn record_reject(&self, reason: RejectReason) {
        let slot = (reason.0 as usize).min(SLOTS - 1);
        self.rejected_by_reason[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// Reads every counter (Relaxed: each is exact, the set is not one
    /// instant). Allocates the `rejected` list.
    pub fn snapshot(&self) -> WireStatsSnapshot {
        let count = |r: RejectReason| {
            self.rejected_by_reason[(r.0 as usize).min(SLOTS - 1)].load(Ordering::Relaxed)
        };
        let rejected: Vec<_> = RejectReason::ALL
            .iter()
            .map(|&(r, _)| (r, count(r)))
            .collect();
        let named: u64 = rejected.iter().map(|(_, n)| n).sum();
        let total: u64 = self
            .rejected_by_reason
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum();
        WireStatsSnapshot {
            frames_decoded: self.frames_decoded.load(Ordering::Relaxed),
            rejected,
            rejected_other: total - named,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_reason_and_lumps_unknown_codes() {
        let s = WireStats::default();
        s.record_decoded();
        s.record_reject(RejectReason::MALFORMED);
        s.record_reject(RejectReason::MALFORMED);
        s.record_reject(RejectReason(900));
        let snap = s.snapshot();
        assert_eq!(snap.frames_decoded, 1);
        assert!(snap.rejected.contains(&(RejectReason::MALFORMED, 2)));
        assert!(snap.rejected.contains(&(RejectReason::OVERLOADED, 0)));
        assert_eq!(snap.rejected_other, 1);
    }
}
