//! Where a request's time goes: one latency histogram per hop of the
//! request path, so a slow answer can be located from `/metrics`
//! (`pricewire_request_hop_seconds{hop=...}`).
//!
//! - `queue_wait`: arrival at the shard to a worker taking it (dispatcher);
//! - `service`: the worker building the answer (worker);
//! - `answer_ring`: the answer pushed to its ring to the shard popping it;
//! - `gateway_write`: the shard popping the answer to its last byte handed
//!   to the socket (`write` returned past it): time in the connection's
//!   outbound buffer behind other bytes, and behind the shard's turn.
//!
//! Each recording thread keeps a local histogram ([`HopRecorder`]) and
//! merges it into the shared one with `try_lock` every 64 values or 10 ms,
//! whichever comes first: recording never waits for a scrape.

use std::sync::Arc;

use hdrhistogram::Histogram;

use crate::clock::NS_PER_MS;
use crate::ops::metrics::SharedHistogram;

/// The hops, in the order a request passes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// Arrival at the shard to a worker taking the request (dispatcher).
    QueueWait = 0,
    /// The worker building the answer.
    Service = 1,
    /// The answer pushed to its ring to the shard popping it.
    AnswerRing = 2,
    /// The answer popped by the shard to its last byte handed to the socket.
    GatewayWrite = 3,
}

impl Hop {
    pub(crate) const ALL: [Hop; 4] = [
        Hop::QueueWait,
        Hop::Service,
        Hop::AnswerRing,
        Hop::GatewayWrite,
    ];

    /// The `hop` label.
    pub fn name(self) -> &'static str {
        match self {
            Hop::QueueWait => "queue_wait",
            Hop::Service => "service",
            Hop::AnswerRing => "answer_ring",
            Hop::GatewayWrite => "gateway_write",
        }
    }
}

/// Largest value kept (ns); longer ones saturate.
const HOP_MAX_NS: u64 = 60_000 * NS_PER_MS;
const MERGE_EVERY: u32 = 64;
const MERGE_AFTER_NS: u64 = 10 * NS_PER_MS;

fn hdr() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HOP_MAX_NS, 2).expect("static hop histogram bounds")
}

/// The shared histograms, one per hop (values in ns).
#[derive(Debug)]
pub struct HopStats {
    shared: [Arc<SharedHistogram>; 4],
}

impl Default for HopStats {
    fn default() -> Self {
        let one = || Arc::new(SharedHistogram::new(1, HOP_MAX_NS, 2).expect("static bounds"));
        HopStats {
            shared: [one(), one(), one(), one()],
        }
    }
}

impl HopStats {
    pub(crate) fn shared(&self, hop: Hop) -> Arc<SharedHistogram> {
        self.shared[hop as usize].clone()
    }

    /// A recorder for one thread and hop (allocates its local histogram).
    pub fn recorder(&self, hop: Hop) -> HopRecorder {
        HopRecorder {
            local: hdr(),
            shared: self.shared(hop),
            pending: 0,
            last_merge_ns: 0,
        }
    }
}

/// A thread's recording side of one hop.
pub struct HopRecorder {
    local: Histogram<u64>,
    shared: Arc<SharedHistogram>,
    pending: u32,
    last_merge_ns: u64,
}

impl HopRecorder {
    /// Records `value_ns` taken at `now_ns`; merges when due.
    pub fn record(&mut self, value_ns: u64, now_ns: u64) {
        self.local.saturating_record(value_ns.max(1));
        self.pending += 1;
        let due = self.pending >= MERGE_EVERY
            || now_ns.saturating_sub(self.last_merge_ns) >= MERGE_AFTER_NS;
        if due && self.shared.try_merge_from(&mut self.local) {
            self.pending = 0;
            self.last_merge_ns = now_ns;
        }
    }
}
