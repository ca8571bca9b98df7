//! Histogram snapshots for the exposition, converted from hdrhistogram.
//!
//! Hot paths record latencies into a thread-local `hdrhistogram::Histogram`
//! with fixed bounds (`saturating_record`, no resizing). Off the hot path —
//! every few hundred milliseconds, from the owning thread's idle turn — the
//! owner merges it into a [`SharedHistogram`] with `try_merge_from`, which
//! never waits for the lock. A scrape converts the shared histogram into
//! Prometheus buckets with [`HistogramSnapshot::from_hdr`].

use hdrhistogram::Histogram;
use std::sync::Mutex;

/// Default bucket upper bounds, in seconds, for latencies from 1 µs to
/// 100 ms: the range a tick-to-publish or queue sojourn lives in.
pub const LATENCY_BUCKETS_S: &[f64] = &[
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
    1e-1,
];

/// A Prometheus histogram at one instant: cumulative bucket counts at
/// ascending upper bounds (`le`), total count and sum. The `+Inf` bucket is
/// implied by `count`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HistogramSnapshot {
    /// `(upper bound, cumulative count of values <= bound)`, bounds ascending.
    pub buckets: Vec<(f64, u64)>,
    /// Values recorded (the implied `+Inf` bucket).
    pub count: u64,
    /// Sum of the values recorded, in base units.
    pub sum: f64,
}

impl HistogramSnapshot {
    /// Converts an hdrhistogram whose values are in some unit (e.g.
    /// nanoseconds) into buckets at `bounds` expressed in base units
    /// (`unit_s` = seconds per recorded unit, 1e-9 for ns).
    ///
    /// Each recorded value is placed by the lowest value of its hdr bucket,
    /// so a bucket count is exact to the histogram's precision (3
    /// significant digits: within 0.1 % of the bound). The sum is
    /// mean × count, as hdrhistogram keeps no exact sum.
    pub fn from_hdr(h: &Histogram<u64>, bounds: &[f64], unit_s: f64) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bounds ascend");
        let mut per_bucket = vec![0u64; bounds.len()];
        for v in h.iter_recorded() {
            let x = h.lowest_equivalent(v.value_iterated_to()) as f64 * unit_s;
            let index = bounds.partition_point(|&b| b < x);
            if let Some(slot) = per_bucket.get_mut(index) {
                *slot += v.count_at_value();
            }
        }
        let mut cumulative = 0;
        let buckets = bounds
            .iter()
            .zip(per_bucket)
            .map(|(&b, n)| {
                cumulative += n;
                (b, cumulative)
            })
            .collect();
        HistogramSnapshot {
            buckets,
            count: h.len(),
            sum: h.mean() * h.len() as f64 * unit_s,
        }
    }

    /// Non-cumulative counts per bucket, as the encoder wants them.
    pub(crate) fn per_bucket(&self) -> Vec<(f64, u64)> {
        let mut previous = 0;
        self.buckets
            .iter()
            .map(|&(b, cumulative)| {
                let n = cumulative.saturating_sub(previous);
                previous = cumulative;
                (b, n)
            })
            .collect()
    }
}

/// A histogram shared between its recording thread and the scrape, behind a
/// cold-path lock. The recorder never waits: `try_merge_from` gives up if a
/// scrape holds the lock and the values stay in the local histogram for the
/// next turn.
#[derive(Debug)]
pub struct SharedHistogram {
    inner: Mutex<Histogram<u64>>,
}

impl SharedHistogram {
    /// Bounds like the recording side's (`high` in recorded units, 3
    /// significant digits). Allocates once here.
    pub fn new(low: u64, high: u64, sigfig: u8) -> Result<Self, hdrhistogram::CreationError> {
        Ok(SharedHistogram {
            inner: Mutex::new(Histogram::new_with_bounds(low, high, sigfig)?),
        })
    }

    /// Adds `local` into the shared histogram and resets `local`, unless the
    /// lock is busy (returns false; nothing is lost, try again later).
    pub(crate) fn try_merge_from(&self, local: &mut Histogram<u64>) -> bool {
        let Ok(mut shared) = self.inner.try_lock() else {
            return false;
        };
        // Values beyond the shared bounds saturate rather than fail, so a
        // mismatched bound costs precision at the top, never a panic.
        for v in local.iter_recorded() {
            shared.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
        local.reset();
        true
    }

    /// Prometheus snapshot at `bounds` (base units), values scaled by `unit_s`.
    pub fn snapshot(&self, bounds: &[f64], unit_s: f64) -> HistogramSnapshot {
        let h = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        HistogramSnapshot::from_hdr(&h, bounds, unit_s)
    }
}
