//! Timers of a bridge session, decided from injected time: the server's
//! heartbeat, the dead-peer drop and the limit on quote Rejects.

/// Heartbeat interval the listener announces in LogonAccepted and keeps:
/// it sends a Heartbeat when it sent nothing for this long.
pub const PROVIDER_HEARTBEAT_MS: u32 = 1_000;
/// A bridge that sent nothing (quotes, heartbeats, anything) for this many
/// heartbeat intervals is dropped with `Disconnect(idle_timeout)`; one
/// that has not logged on by then too.
pub const IDLE_INTERVALS: u64 = 3;
/// How often the listener checks its bridges' timers.
pub const CHECK_EVERY_NS: u64 = 50_000_000;
/// Most Rejects for refused quote entries per bridge per second; further
/// refusals in the same second are counted but not answered.
pub const QUOTE_REJECTS_PER_SEC: u32 = 10;

const INTERVAL_NS: u64 = PROVIDER_HEARTBEAT_MS as u64 * 1_000_000;

/// What a bridge's timers ask for at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// Nothing is due.
    Nothing,
    /// Nothing was sent for an interval: send a Heartbeat.
    Heartbeat,
    /// Nothing was received for [`IDLE_INTERVALS`]: drop the bridge.
    Drop,
}

/// The timer state of one bridge (monotonic nanoseconds).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keepalive {
    last_in_ns: u64,
    /// When the last quote batch arrived; 0: none yet.
    last_quote_ns: u64,
    last_out_ns: u64,
    rejects_window_ns: u64,
    rejects_in_window: u32,
}

impl Keepalive {
    /// Timers that start at `now_ns` (monotonic ns).
    pub(crate) fn new(now_ns: u64) -> Self {
        Keepalive {
            last_in_ns: now_ns,
            last_quote_ns: 0,
            last_out_ns: now_ns,
            rejects_window_ns: now_ns,
            rejects_in_window: 0,
        }
    }

    /// A frame arrived at `now_ns`.
    pub(crate) fn received(&mut self, now_ns: u64) {
        self.last_in_ns = now_ns;
    }

    /// A quote batch arrived at `now_ns`.
    pub(crate) fn quoted(&mut self, now_ns: u64) {
        self.last_quote_ns = now_ns;
    }

    /// Whether the bridge is streaming at `now_ns`: a quote batch arrived
    /// within the last heartbeat interval. A streaming bridge is read
    /// between chunks of its host's turns even when its last read found
    /// nothing (one `EAGAIN` read each time: about one per 32 subscriber
    /// writes or events, in turns with that many); a bridge that has not
    /// logged on, only heartbeats, or sent no quote for an interval waits
    /// for the poller.
    pub(crate) fn streaming(&self, now_ns: u64) -> bool {
        self.last_quote_ns != 0 && now_ns.saturating_sub(self.last_quote_ns) < INTERVAL_NS
    }

    /// A frame was sent at `now_ns`.
    pub(crate) fn sent(&mut self, now_ns: u64) {
        self.last_out_ns = now_ns;
    }

    /// What is due at `now_ns`.
    pub(crate) fn due(&self, now_ns: u64) -> Due {
        if now_ns.saturating_sub(self.last_in_ns) >= IDLE_INTERVALS * INTERVAL_NS {
            Due::Drop
        } else if now_ns.saturating_sub(self.last_out_ns) >= INTERVAL_NS {
            Due::Heartbeat
        } else {
            Due::Nothing
        }
    }

    /// Takes one of this second's quote Rejects; false when they are used up.
    pub(crate) fn take_quote_reject(&mut self, now_ns: u64) -> bool {
        // A window opens at the first Reject after the last one closed.
        if self.rejects_in_window > 0
            && now_ns.saturating_sub(self.rejects_window_ns) >= 1_000_000_000
        {
            self.rejects_in_window = 0;
        }
        if self.rejects_in_window == 0 {
            self.rejects_window_ns = now_ns;
        }
        if self.rejects_in_window >= QUOTE_REJECTS_PER_SEC {
            return false;
        }
        self.rejects_in_window += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_quiet_server_side_heartbeats_after_one_interval() {
        let mut k = Keepalive::new(0);
        assert_eq!(k.due(999 * MS), Due::Nothing);
        assert_eq!(k.due(1_000 * MS), Due::Heartbeat);
        k.sent(1_000 * MS);
        k.received(1_500 * MS);
        assert_eq!(k.due(1_999 * MS), Due::Nothing);
        assert_eq!(k.due(2_000 * MS), Due::Heartbeat);
    }

    #[test]
    fn a_bridge_streams_for_one_interval_after_its_last_quote() {
        let mut k = Keepalive::new(0);
        assert!(!k.streaming(1), "no quote yet: left to the poller");
        k.received(500 * MS);
        assert!(!k.streaming(500 * MS), "a heartbeat is not a quote");
        k.quoted(1_200 * MS);
        assert!(k.streaming(1_200 * MS) && k.streaming(2_199 * MS));
        assert!(!k.streaming(2_200 * MS), "no quote for an interval");
        // Another clock's earlier reading is not quiet.
        assert!(k.streaming(0));
    }

    #[test]
    fn a_silent_bridge_is_dropped_after_the_idle_intervals() {
        let mut k = Keepalive::new(0);
        k.sent(2_900 * MS);
        assert_eq!(k.due(2_999 * MS), Due::Nothing);
        assert_eq!(k.due(3_000 * MS), Due::Drop);
        k.received(3_000 * MS);
        assert_eq!(k.due(3_000 * MS), Due::Nothing, "input resets the drop");
    }

    #[test]
    fn quote_rejects_are_limited_per_second() {
        let mut k = Keepalive::new(0);
        let granted = (0..50).filter(|_| k.take_quote_reject(10 * MS)).count();
        assert_eq!(granted, QUOTE_REJECTS_PER_SEC as usize);
        assert!(!k.take_quote_reject(999 * MS));
        assert!(k.take_quote_reject(1_010 * MS), "a new second, new Rejects");
    }
}
