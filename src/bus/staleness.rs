//! When an edge tells its terminals that its prices are stale.
//!
//! An edge hears the bus or it does not. It counts as hearing it on every
//! valid price and every leader heartbeat (`bus::heartbeat`) of the
//! current lease epoch: the newest epoch seen, which moves on when a core
//! that took the lease speaks; an older epoch's messages (a core that lost
//! the lease) are not admitted and keep nothing alive. So a quiet market
//! with a live core is not stale (its heartbeats keep coming), while a
//! dead core with no standby, or a bus the edge cannot reach, goes stale
//! once nothing of the current epoch was heard for longer than the max age.
//!
//! A message names its stream too. The one exception to "older epochs are
//! not admitted": once the edge has gone stale (nothing of its epoch heard
//! for the max age), a message of another stream is admitted whatever its
//! epoch, and becomes current. That is a core which could not continue the
//! old stream and, the lease store lost with every record of the old
//! epochs, started again below them; a fenced core of the old stream is
//! still refused by its epoch.
//!
//! When the epoch moves on (a takeover), the prices the new leader does
//! not restate are not backed by any live core: [`Staleness::takeover_due`]
//! says when to flag them, one max age after the previous leader was last
//! heard — as if it had simply gone silent. The decision is a pure
//! function of the times, epochs and streams it is given (the bus thread
//! passes its monotonic clock's `now`), so it is tested without waiting.

/// Default max age of an edge's prices without news from the bus, in
/// milliseconds (the engine's own max quote age by default).
pub const MAX_AGE_MS_DEFAULT: u64 = 2_000;
/// Shortest `--bus-max-age-ms`.
pub const MAX_AGE_MS_MIN: u64 = 100;
/// Longest `--bus-max-age-ms`.
pub const MAX_AGE_MS_MAX: u64 = 600_000;

/// The bus's liveness as seen by one edge.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Staleness {
    max_age_ns: u64,
    /// When a price or heartbeat of the current epoch last arrived (or the
    /// watch started), monotonic ns.
    last_heard_ns: u64,
    /// The newest lease epoch heard, and its stream.
    epoch: u64,
    stream: u64,
    /// The prices were flagged stale and nothing was heard since.
    flagged: bool,
    /// Something of the current epoch was heard since the watch started.
    heard_any: bool,
    /// After a takeover: when to flag the prices the new leader has not
    /// restated (the previous leader's last word + the max age).
    takeover_due_ns: Option<u64>,
}

impl Staleness {
    /// A watch that starts fresh at `now_ns`, having heard no epoch yet.
    pub(crate) fn new(max_age_ms: u64, now_ns: u64) -> Staleness {
        Staleness {
            max_age_ns: max_age_ms.saturating_mul(1_000_000),
            last_heard_ns: now_ns,
            epoch: 0,
            stream: 0,
            flagged: false,
            heard_any: false,
            takeover_due_ns: None,
        }
    }

    /// True if a message of `epoch` and `stream` may be taken: not older
    /// than the newest epoch heard (of another stream, only once the
    /// current one has gone stale).
    #[inline]
    pub(crate) fn admits(&self, epoch: u64, stream: u64) -> bool {
        if stream == self.stream || self.epoch == 0 {
            return epoch >= self.epoch;
        }
        // Another stream: a newer epoch, or any once this one went stale.
        epoch > self.epoch || self.flagged
    }

    /// A valid price or heartbeat of `epoch` and `stream` arrived at
    /// `now_ns`: the bus is alive, and they are now current. Returns false
    /// (and changes nothing) for a message not admitted.
    #[inline]
    pub(crate) fn heard(&mut self, epoch: u64, stream: u64, now_ns: u64) -> bool {
        if !self.admits(epoch, stream) {
            return false;
        }
        if epoch != self.epoch || stream != self.stream {
            if self.heard_any {
                // Already flagged: every price is; check the backing at once.
                let due = match self.flagged {
                    true => now_ns,
                    false => self.last_heard_ns.saturating_add(self.max_age_ns),
                };
                self.takeover_due_ns = Some(due);
            }
            self.epoch = epoch;
            self.stream = stream;
        }
        self.last_heard_ns = now_ns;
        self.flagged = false;
        self.heard_any = true;
        true
    }

    /// A stored message (a last value) of `epoch` and `stream`: they become
    /// current if admitted, but nothing was heard live — a last value says
    /// nothing of whether its core is alive.
    pub(crate) fn learn(&mut self, epoch: u64, stream: u64) {
        if self.admits(epoch, stream) && epoch > self.epoch {
            self.epoch = epoch;
            self.stream = stream;
        }
    }

    /// True exactly once per silence: the first call at which nothing of
    /// the current epoch was heard for longer than the max age. The caller
    /// flags every price.
    pub(crate) fn due(&mut self, now_ns: u64) -> bool {
        if self.flagged || now_ns.saturating_sub(self.last_heard_ns) <= self.max_age_ns {
            return false;
        }
        self.flagged = true;
        true
    }

    /// True once per takeover, at the time the prices no core of the new
    /// epoch stands behind are to be flagged (`now_ns` past it).
    pub(crate) fn takeover_due(&mut self, now_ns: u64) -> bool {
        match self.takeover_due_ns {
            Some(t) if now_ns >= t => {
                self.takeover_due_ns = None;
                true
            }
            _ => false,
        }
    }

    /// Asks for the check of [`Staleness::takeover_due`] at once (prices
    /// loaded from the stream whose epoch is not the current one).
    pub(crate) fn check_backing_now(&mut self, now_ns: u64) {
        self.takeover_due_ns = Some(now_ns);
    }

    /// Nothing was heard: flag at once (an edge that starts with no live
    /// core does not serve its last values unflagged for a max age).
    pub(crate) fn force_flag(&mut self) -> bool {
        !std::mem::replace(&mut self.flagged, true)
    }

    /// The newest lease epoch heard (0 before any), and its stream.
    pub(crate) fn current(&self) -> (u64, u64) {
        (self.epoch, self.stream)
    }

    /// Something of the current epoch was heard since the watch started.
    pub(crate) fn heard_any(&self) -> bool {
        self.heard_any
    }

    /// True while the prices are flagged stale (nothing of the current
    /// epoch heard since they were).
    pub(crate) fn is_flagged(&self) -> bool {
        self.flagged
    }
}

#[cfg(test)]
#[path = "staleness_tests.rs"]
mod tests;
