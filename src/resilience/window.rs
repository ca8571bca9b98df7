//! Sliding windows of call outcomes for the circuit breaker.
//!
//! Both kinds keep running totals next to a preallocated ring, so recording
//! and reading the rates are O(1) (the time window does at most one pass over
//! its ring when a long idle gap is skipped). Nothing allocates after
//! construction.

use super::NS_PER_S;

/// One recorded (non-ignored) call: failed and/or slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Sample {
    pub failed: bool,
    pub slow: bool,
}

/// Running totals over a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Totals {
    pub calls: u32,
    pub failures: u32,
    pub slow: u32,
}

impl Totals {
    fn add(&mut self, s: Sample) {
        self.calls += 1;
        self.failures += s.failed as u32;
        self.slow += s.slow as u32;
    }

    fn sub(&mut self, other: &Totals) {
        self.calls -= other.calls;
        self.failures -= other.failures;
        self.slow -= other.slow;
    }

    fn sub_sample(&mut self, s: Sample) {
        self.calls -= 1;
        self.failures -= s.failed as u32;
        self.slow -= s.slow as u32;
    }
}

/// Outcomes of the last `window_s` seconds, in one bucket per second.
#[derive(Debug)]
pub(crate) struct TimeWindow {
    buckets: Box<[Totals]>,
    /// Second (`now_ns / 1e9`) the newest bucket belongs to.
    head_s: u64,
    totals: Totals,
}

impl TimeWindow {
    pub(crate) fn new(window_s: u32) -> Self {
        assert!(window_s > 0, "time window needs at least one bucket");
        TimeWindow {
            buckets: vec![Totals::default(); window_s as usize].into_boxed_slice(),
            head_s: 0,
            totals: Totals::default(),
        }
    }

    fn index(&self, second: u64) -> usize {
        (second % self.buckets.len() as u64) as usize
    }

    /// Expires the buckets that fell out of the window by `now_ns`. A clock
    /// that steps back keeps the newer head (its samples land in the head).
    pub(crate) fn advance(&mut self, now_ns: u64) {
        let now_s = now_ns / NS_PER_S;
        if now_s <= self.head_s {
            return;
        }
        let len = self.buckets.len() as u64;
        let steps = (now_s - self.head_s).min(len);
        for second in now_s + 1 - steps..=now_s {
            let i = self.index(second);
            let old = std::mem::take(&mut self.buckets[i]);
            self.totals.sub(&old);
        }
        self.head_s = now_s;
    }

    pub(crate) fn record(&mut self, sample: Sample, now_ns: u64) {
        self.advance(now_ns);
        let i = self.index(self.head_s);
        self.buckets[i].add(sample);
        self.totals.add(sample);
    }

    pub(crate) fn totals(&self) -> Totals {
        self.totals
    }

    pub(crate) fn clear(&mut self) {
        self.buckets.fill(Totals::default());
        self.totals = Totals::default();
    }
}

/// Outcomes of the last `size` calls.
#[derive(Debug)]
pub(crate) struct CountWindow {
    ring: Box<[Sample]>,
    next: usize,
    filled: usize,
    totals: Totals,
}

impl CountWindow {
    pub(crate) fn new(size: u32) -> Self {
        assert!(size > 0, "count window needs at least one slot");
        CountWindow {
            ring: vec![Sample::default(); size as usize].into_boxed_slice(),
            next: 0,
            filled: 0,
            totals: Totals::default(),
        }
    }

    pub(crate) fn record(&mut self, sample: Sample) {
        debug_assert!(self.next < self.ring.len());
        if self.filled == self.ring.len() {
            self.totals.sub_sample(self.ring[self.next]);
        } else {
            self.filled += 1;
        }
        self.ring[self.next] = sample;
        self.totals.add(sample);
        self.next = (self.next + 1) % self.ring.len();
    }

    pub(crate) fn totals(&self) -> Totals {
        self.totals
    }

    pub(crate) fn clear(&mut self) {
        self.next = 0;
        self.filled = 0;
        self.totals = Totals::default();
    }
}

/// The breaker's window, either kind.
#[derive(Debug)]
pub(crate) enum Window {
    Time(TimeWindow),
    Count(CountWindow),
}

impl Window {
    pub(crate) fn record(&mut self, sample: Sample, now_ns: u64) {
        match self {
            Window::Time(w) => w.record(sample, now_ns),
            Window::Count(w) => w.record(sample),
        }
    }

    pub(crate) fn totals(&mut self, now_ns: u64) -> Totals {
        match self {
            Window::Time(w) => {
                w.advance(now_ns);
                w.totals()
            }
            Window::Count(w) => w.totals(),
        }
    }

    pub(crate) fn clear(&mut self) {
        match self {
            Window::Time(w) => w.clear(),
            Window::Count(w) => w.clear(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAIL: Sample = Sample {
        failed: true,
        slow: false,
    };
    const OK: Sample = Sample {
        failed: false,
        slow: false,
    };

    #[test]
    fn time_window_forgets_seconds_that_slid_out() {
        let mut w = TimeWindow::new(3);
        w.record(FAIL, 10 * NS_PER_S);
        w.record(OK, 11 * NS_PER_S + 5);
        w.record(FAIL, 12 * NS_PER_S);
        assert_eq!(w.totals().calls, 3);
        w.advance(13 * NS_PER_S);
        assert_eq!(
            w.totals(),
            Totals {
                calls: 2,
                failures: 1,
                slow: 0
            }
        );
        w.advance(100 * NS_PER_S);
        assert_eq!(w.totals(), Totals::default());
    }

    #[test]
    fn count_window_keeps_last_n() {
        let mut w = CountWindow::new(3);
        for s in [FAIL, FAIL, OK, OK] {
            w.record(s);
        }
        assert_eq!(
            w.totals(),
            Totals {
                calls: 3,
                failures: 1,
                slow: 0
            }
        );
        w.record(OK);
        assert_eq!(
            w.totals(),
            Totals {
                calls: 3,
                failures: 0,
                slow: 0
            }
        );
    }
}
