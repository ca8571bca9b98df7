//! Client counters: every protective action the SDK takes is counted.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! client_stats {
    ($($(#[$m:meta])* $name:ident,)*) => {
        /// Counters of one client (atomics, Relaxed; readable from any thread).
        #[derive(Debug, Default)]
        pub struct ClientStats { $($(#[$m])* pub $name: AtomicU64,)* }

        /// A plain copy of [`ClientStats`].
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct ClientStatsSnapshot { $($(#[$m])* pub $name: u64,)* }

        impl ClientStats {
            /// Reads every counter (Relaxed).
            pub fn snapshot(&self) -> ClientStatsSnapshot {
                ClientStatsSnapshot { $($name: self.$name.load(Relaxed),)* }
            }
        }
    };
}

client_stats! {
    /// TCP connections established.
    connects,
    /// Connect attempts that failed (refused, timed out, reset).
    connect_failures,
    /// Sessions logged on (first logon and reconnects).
    logons,
    /// Logons refused by the server.
    logons_rejected,
    /// Sessions lost after logon.
    disconnects,
    /// Sessions declared dead: nothing received for the dead-peer interval.
    dead_peers,
    /// Heartbeats sent while idle.
    heartbeats_sent,
    /// Price frames decoded.
    prices,
    /// Sequence gaps seen.
    gaps,
    /// Snapshot requests sent to resync a gap.
    resync_requests,
    /// Old or duplicate updates dropped.
    old_dropped,
    /// Keys the bounded sequence table had no room for.
    untracked,
    /// Subscribe requests sent again after a reconnect.
    resubscribes,
    /// Snapshots after a reconnect that continued the sequence held before
    /// it (no price missed): delivered as [`SeqStatus::Resumed`](super::SeqStatus::Resumed).
    resumed,
    /// Snapshots after a reconnect that did not continue it (prices were
    /// missed, or the server is behind): a resync ([`SeqStatus::Reset`](super::SeqStatus::Reset)).
    resume_resyncs,
    /// Events dropped because the bounded event queue was full.
    events_dropped,
    /// Frames from the server with a bad body (skipped).
    bad_frames,
    /// Frames the client does not expect from a server (skipped).
    unexpected_frames,
}

impl ClientStats {
    #[inline]
    pub(crate) fn inc(field: &AtomicU64) {
        field.fetch_add(1, Relaxed);
    }
}
