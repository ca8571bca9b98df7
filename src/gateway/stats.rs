//! Gateway counters. Session-level counters are shared by every shard
//! (atomic adds on cold paths); per-update counters are per shard and
//! single-writer.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::runtime::counter::{Counter, Gauge};

/// Listener-wide session counters.
#[derive(Debug, Default)]
pub struct GatewayStats {
    /// Connections accepted by the listener.
    pub accepted: AtomicU64,
    /// Accepted, then refused by admission (Disconnect(busy)).
    pub refused: AtomicU64,
    /// Accepted, then refused busy at the descriptor limit less the
    /// reserve (`fdlimit.rs`).
    pub refused_fd: AtomicU64,
    /// Connections currently open (any state).
    pub open: AtomicU64,
    /// Sessions currently logged on.
    pub logged_on: AtomicU64,
    /// Logons accepted.
    pub logons_accepted: AtomicU64,
    /// Logons refused (LogonRejected).
    pub logons_rejected: AtomicU64,
    /// Sessions cut as slow consumers.
    pub disconnects_slow_consumer: AtomicU64,
    /// Sessions cut for protocol errors.
    pub disconnects_protocol_error: AtomicU64,
    /// Sessions cut for an idle timeout (silent past their heartbeats) or a
    /// logon timeout.
    pub disconnects_idle: AtomicU64,
    /// Sessions told Disconnect(shutdown).
    pub disconnects_shutdown: AtomicU64,
    /// Of `disconnects_idle`, the logon timeouts (no Logon sent in time).
    pub disconnects_logon_timeout: AtomicU64,
    /// Logons refused with LogonRejected(busy) because their verdict did
    /// not come within the logon timeout of their arrival.
    pub logons_verdict_late: AtomicU64,
    /// Sessions cut for a message flood.
    pub disconnects_flood: AtomicU64,
    /// Sessions that logged out.
    pub disconnects_logout: AtomicU64,
    /// Peers that closed or reset on their own.
    pub peer_closed: AtomicU64,
    /// Rejects the gateway wrote itself, any reason (the request path's own
    /// are counted in `sheds_total`).
    pub rejects_sent: AtomicU64,
    /// Messages refused by the per-connection message limit
    /// (Reject(rate_limited)).
    pub rejects_rate_limited: AtomicU64,
    /// Messages refused because they came inside the backoff window of an
    /// earlier Reject(rate_limited) (see `gateway::session::backoff`).
    pub rejects_backoff: AtomicU64,
    /// Times a session's input was held for want of room for the answers
    /// of its requests in flight (see `Conn::has_answer_room`).
    pub input_held_for_answers: AtomicU64,
    /// Connections closed because the acceptor's work on them panicked
    /// (contained: PROXY header, admission, TLS refusal).
    pub faults_acceptor: AtomicU64,
    /// Connections closed because a shard's work on them panicked
    /// (contained: TLS, decode, session logic).
    pub faults_shard: AtomicU64,
}

impl GatewayStats {
    /// Adds `n` to `field` (relaxed).
    pub fn add(field: &AtomicU64, n: u64) {
        field.fetch_add(n, Ordering::Relaxed);
    }
    /// Subtracts `n` from `field` (relaxed; callers never go below 0).
    pub fn sub(field: &AtomicU64, n: u64) {
        field.fetch_sub(n, Ordering::Relaxed);
    }
    /// Reads `field` (relaxed).
    pub fn get(field: &AtomicU64) -> u64 {
        field.load(Ordering::Relaxed)
    }
}

/// Per-shard fan-out counters (written by the shard thread only).
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct ShardStats {
    /// Prices taken from the engine ring.
    pub prices_in: Counter,
    /// Price frames copied into connection buffers.
    pub prices_out: Counter,
    /// Updates not appended because the connection was conflating.
    pub conflated: Counter,
    /// Prices taken off the engine ring older than `--price-age-max-ms`:
    /// not fanned out; their symbol's latest went out instead, flagged
    /// conflated (`gateway::fresh`).
    pub stale: Counter,
    /// Prices given to a connection and dropped unwritten because they
    /// waited past `--price-age-max-ms` (their keys' latest went out
    /// instead, flagged conflated; `gateway::fresh`).
    pub stale_dropped: Counter,
    /// Prices sent flagged stale because the engine's progress mark was
    /// older than twice `--price-age-max-ms` (`gateway::behind`).
    pub behind_flagged: Counter,
    /// Symbols restated unflagged once the engine had caught up.
    pub behind_restated: Counter,
    /// Prices that replaced their key's unwritten price in a connection's
    /// outbound buffer, in place (`--merge-after-us`; `gateway::append`).
    pub merged: Counter,
    /// Conflated snapshots sent after a connection drained below low.
    pub resync_snapshots: Counter,
    /// Updates older than what the connection already had (after resync).
    pub superseded: Counter,
    /// Prices held back by the maximum update frequency, once per price
    /// of a key with members whose cadence is not open (each later
    /// replaced, or sent at their next slots).
    pub paced_held: Counter,
    /// Held prices sent at a cadence's slot, once per member reached.
    pub paced_released: Counter,
    /// Of those, per member, the ones that replaced skipped prices (sent
    /// as a snapshot flagged conflated).
    pub paced_conflated: Counter,
    /// Bytes handed to sockets.
    pub bytes_written: Counter,
    /// Writes that handed bytes to sockets (`write_conn` passes that
    /// wrote something; a TLS record flush counts with its pass).
    pub socket_writes: Counter,
    /// Requests refused because the request ring was full.
    pub requests_refused: Counter,
    /// Answers whose connection had closed (or could not take them).
    pub answers_orphaned: Counter,
    /// Hosted stages run in the middle of a long loop turn
    /// (`--threading shared`).
    pub interleaves: Counter,
    /// Connections the shard holds now.
    pub connections: Gauge,
    /// Share of wall time the loop spent on turns that did work over the
    /// last measurement window, per-mille (`gateway::spill`).
    pub busy_permille: Gauge,
    /// Sessions this shard moved to another shard (it was busy).
    pub sessions_moved_out: Counter,
    /// Sessions this shard took over from another shard.
    pub sessions_moved_in: Counter,
    /// Request-heavy sessions held and then moved away (`gateway::drain`).
    pub drains_moved: Counter,
    /// Holds ended without a move: the answers took longer than the
    /// drain's wait, or no shard had room.
    pub drains_aborted: Counter,
    /// How long each session move stopped the shard's loop (draining its
    /// ring, then handing the session over): what every other session's
    /// prices and answers waited for it.
    pub move_pause: PauseHist,
    /// Per write that hands prices to the kernel, at most how long ago
    /// this process received the oldest of them (`OutBuf::handoff_age_ns`):
    /// the fan-out's freshness where the server lets go of a price.
    pub handoff_age: PauseHist,
    /// Connections above the high water mark right now.
    pub conflating_now: Gauge,
    /// Sum of bytes waiting in outbound buffers (sampled each sweep).
    pub outbound_bytes: Gauge,
    /// Loop stalls measured (sweeps late by more than
    /// [`super::shard::STALL_MIN_NS`]: the process stopped or starved).
    pub stalls: Counter,
    /// The longest stall measured, in milliseconds.
    pub max_stall_ms: Gauge,
    /// Loop lag: histogram, windowed value, lagging flag (`gateway::lag`).
    pub lag: super::lag::LagStats,
}

/// Upper bounds (seconds) of [`PauseHist`]'s buckets.
pub const PAUSE_BUCKETS_S: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0,
];

/// A histogram of short durations — pauses, ages (one writer: the shard
/// thread).
#[derive(Debug, Default)]
pub struct PauseHist {
    buckets: [Counter; PAUSE_BUCKETS_S.len()],
    count: Counter,
    sum_ns: Counter,
    /// The longest pause recorded, ns.
    pub max_ns: Gauge,
}

impl PauseHist {
    /// Records one pause of `ns`.
    pub fn record(&self, ns: u64) {
        let s = ns as f64 * 1e-9;
        let i = PAUSE_BUCKETS_S.partition_point(|&b| b < s);
        if let Some(b) = self.buckets.get(i) {
            b.inc();
        }
        self.count.inc();
        self.sum_ns.add(ns);
        if ns > self.max_ns.get() {
            self.max_ns.set(ns);
        }
    }

    /// The histogram for the exposition, in seconds.
    pub fn snapshot(&self) -> crate::ops::HistogramSnapshot {
        let mut cumulative = 0;
        let buckets = PAUSE_BUCKETS_S
            .iter()
            .zip(&self.buckets)
            .map(|(&b, n)| {
                cumulative += n.get();
                (b, cumulative)
            })
            .collect();
        crate::ops::HistogramSnapshot {
            buckets,
            count: self.count.get(),
            sum: self.sum_ns.get() as f64 * 1e-9,
        }
    }
}
