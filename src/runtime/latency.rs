//! Latency histograms with the project's fixed bounds, and the exchange
//! through which a stage hands a full histogram to its reporter.
//!
//! Contract: histograms are allocated at start-up with explicit bounds;
//! recording never resizes them, and [`HistogramExchange::swap`] never
//! allocates or waits (two histograms ping-pong over the control plane).

use crossbeam_channel::{Receiver, Sender};
use hdrhistogram::Histogram;

/// Lowest latency the histograms track, in nanoseconds.
pub const LATENCY_NS_MIN: u64 = 1;
/// Highest latency tracked, 60 s in nanoseconds; the recorders use
/// `saturating_record`, so a longer latency counts as this.
pub const LATENCY_NS_MAX: u64 = 60_000_000_000;
/// Significant figures of every latency histogram.
pub const LATENCY_SIGFIG: u8 = 3;

/// A latency histogram with the project's fixed bounds.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(LATENCY_NS_MIN, LATENCY_NS_MAX, LATENCY_SIGFIG)
        .expect("static histogram bounds are valid")
}

/// Where a sink sends full histograms and gets empty ones back.
pub struct HistogramExchange {
    /// Full histograms go to the reporter here.
    pub full: Sender<Histogram<u64>>,
    /// Empty histograms (the reporter's request for data) arrive here.
    pub empty: Receiver<Histogram<u64>>,
}

impl HistogramExchange {
    /// If the reporter asked (it sent an empty histogram), swaps `hist`
    /// for the empty one and sends the full one back. Never allocates and
    /// never waits: histograms ping-pong.
    #[inline]
    pub fn swap(&self, hist: &mut Histogram<u64>) {
        if let Ok(empty) = self.empty.try_recv() {
            let full = std::mem::replace(hist, empty);
            let _ = self.full.try_send(full);
        }
    }
}
