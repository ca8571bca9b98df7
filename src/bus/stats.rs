//! Counters of the bus thread (read by /metrics and the tests).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::runtime::counter::{Counter, Gauge};

/// What one bus thread did. Every refusal is counted, none is silent.
#[derive(Debug, Default)]
pub struct BusStats {
    /// Prices handed to the NATS client (core).
    pub published: Counter,
    /// Publishes the client refused (core; the price is lost to the bus,
    /// the next one for its symbol carries the newer sequence).
    pub publish_errors: Counter,
    /// Prices a standby core drained without publishing (core).
    pub standby_discarded: Counter,
    /// Times this core took the leader lease (core).
    pub leases_taken: Counter,
    /// Times this core lost the leader lease (core).
    pub leases_lost: Counter,
    /// Prices of an older lease epoch than one already seen, dropped (edge).
    pub stale_epoch_dropped: Counter,
    /// Prices taken off the bus and applied (edge).
    pub received: Counter,
    /// Last values loaded from the stream at start (edge).
    pub last_values_loaded: Counter,
    /// Prices at or below the symbol's last sequence, dropped (edge:
    /// replays after a reconnect, or the overlap with the last values).
    pub duplicates_dropped: Counter,
    /// Prices that skipped sequence numbers; each is delivered flagged
    /// CONFLATED so a terminal sees the gap (edge).
    pub gaps_flagged: Counter,
    /// Messages that were not a valid price for a configured symbol (edge).
    pub decode_errors: Counter,
    /// Connections to a server lost (the client then reconnects, to the
    /// next listed server first, with jittered backoff).
    pub disconnects: Counter,
    /// Prices repeated flagged STALE because the bus was silent for longer
    /// than the max age (edge; one per symbol per silence).
    pub stale_flagged: Counter,
    /// Prices restated without the STALE flag once the bus was heard
    /// again with the table as new as the stream (edge; one per symbol
    /// still flagged).
    pub stale_cleared: Counter,
    /// Last-value reloads after a reconnect (edge).
    pub reloads: Counter,
    /// Heartbeats handed to the NATS client (core, while it leads).
    pub heartbeats_sent: Counter,
    /// Heartbeats the client refused (core; no server at the time).
    pub heartbeat_errors: Counter,
    /// Heartbeats of the current lease epoch taken (edge).
    pub heartbeats_received: Counter,
    /// Heartbeats of an older lease epoch than one already seen, dropped
    /// (edge).
    pub heartbeat_stale_epoch: Counter,
    /// Messages on the heartbeat subject that were not a heartbeat this
    /// build reads (edge).
    pub heartbeat_refused: Counter,
    /// When the last heartbeat was sent (core) or taken (edge), monotonic
    /// ns; 0 before any.
    last_heartbeat_ns: AtomicU64,
    /// 1 while the client has a server connection.
    pub connected: Gauge,
    /// Connect attempts that failed, by kind (credentials, TLS, …).
    pub connect_failures: super::security::ConnectFailures,
    /// Publishes or subscriptions the server refused for this client's
    /// permissions (`-ERR 'Permissions Violation …'`).
    pub permission_denied: Counter,
    /// Set when the client reconnected: an edge reloads last values.
    reconnected: AtomicBool,
}

impl BusStats {
    pub(super) fn mark_reconnected(&self) {
        self.reconnected.store(true, Ordering::Release);
    }

    /// Records a heartbeat sent or taken at `now_ns` (monotonic).
    pub(super) fn heartbeat_at(&self, now_ns: u64) {
        self.last_heartbeat_ns
            .store(now_ns.max(1), Ordering::Relaxed);
    }

    /// Seconds from the last heartbeat sent (core) or taken (edge) to
    /// `now_ns` (monotonic); -1 before any.
    pub fn last_heartbeat_age_s(&self, now_ns: u64) -> f64 {
        match self.last_heartbeat_ns.load(Ordering::Relaxed) {
            0 => -1.0,
            t => now_ns.saturating_sub(t) as f64 / 1e9,
        }
    }

    /// True once after each reconnect.
    pub(super) fn take_reconnected(&self) -> bool {
        self.reconnected.swap(false, Ordering::AcqRel)
    }
}
