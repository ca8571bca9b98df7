//! Bursts of events in a time window: "`max` events within `window_ns`".
//! The FIX session counts garbled messages with it (FIX says a garbled
//! message is ignored, but a line that produces nothing but garbage must
//! still be dropped). A [`BurstWindow`] remembers the times of the last `max` events and says
//! when `max` of them fall within `window_ns`.
//!
//! Allocation: the ring is allocated in [`BurstWindow::new`]; recording
//! allocates nothing. Time is the caller's monotonic `now_ns`.

/// The times of the last `max` events of one kind.
#[derive(Debug, Clone)]
pub(crate) struct BurstWindow {
    times: Box<[u64]>,
    next: usize,
    len: usize,
    window_ns: u64,
}

impl BurstWindow {
    /// `max` at least 1 (a config rule); 0 is taken as 1.
    pub(crate) fn new(max: u32, window_ns: u64) -> BurstWindow {
        BurstWindow {
            times: vec![0; max.max(1) as usize].into_boxed_slice(),
            next: 0,
            len: 0,
            window_ns,
        }
    }

    /// Records one event at `now_ns`; true when it is the `max`-th within
    /// the window.
    pub(crate) fn record(&mut self, now_ns: u64) -> bool {
        let cap = self.times.len();
        self.times[self.next] = now_ns;
        self.next = (self.next + 1) % cap;
        self.len = (self.len + 1).min(cap);
        // With the ring full, `next` is the oldest of the last `cap`.
        self.len == cap && now_ns.saturating_sub(self.times[self.next % cap]) < self.window_ns
    }

    /// Forgets everything (a new connection).
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.next = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn tears_down_only_at_max_within_the_window() {
        let mut w = BurstWindow::new(3, 10 * S);
        assert!(!w.record(0));
        assert!(!w.record(S));
        assert!(w.record(2 * S), "third within 10 s");
        let mut w = BurstWindow::new(3, 10 * S);
        assert!(!w.record(0));
        assert!(!w.record(6 * S));
        assert!(!w.record(11 * S), "the first fell out of the window");
        assert!(w.record(12 * S), "6, 11, 12 are within 10 s");
        w.clear();
        assert!(!w.record(13 * S));
    }

    #[test]
    fn max_one_tears_down_at_once() {
        let mut w = BurstWindow::new(1, S);
        assert!(w.record(5));
    }
}
