//! A shard's end of the request path: the ring it hands requests over on,
//! the answer rings it drains, and the retry-after of the refusal the
//! shard itself writes when that ring is full (jittered from a documented
//! window, and counted). The per-connection message limit's refusal is the
//! session's (`gateway::session`, `rate_limited_retry`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::admission::RetryWindow;
use crate::requests::answers::AnswerRx;
use crate::requests::service::{RequestMsg, RequestStats, REQUEST_RING};
use crate::runtime::Doorbell;

/// Counters of the per-account share of a shard's request ring (the
/// shard adds, the dispatcher subtracts). Accounts are hashed onto
/// [`SHARE_SLOTS`] counters; two accounts sharing one are limited together.
pub struct RingShares {
    held: Box<[AtomicU32]>,
}

/// Counters per ring ([`RingShares`]).
pub const SHARE_SLOTS: usize = 1024;

impl RingShares {
    pub(crate) fn new() -> Arc<RingShares> {
        Arc::new(RingShares {
            held: (0..SHARE_SLOTS).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    fn slot(&self, account: u32) -> &AtomicU32 {
        &self.held[account as usize % SHARE_SLOTS]
    }

    /// The dispatcher took one of `account`'s requests off the ring.
    pub(crate) fn release(&self, account: u32) {
        let _ = self
            .slot(account)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// A shard's end of the request path.
pub struct RequestPort {
    /// Requests to the dispatcher; a full ring is an immediate reject.
    pub requests: rtrb::Producer<RequestMsg>,
    /// Rung after a push so a parked dispatcher wakes.
    pub dispatcher: Arc<Doorbell>,
    /// The dispatcher's ring first, then one per worker.
    pub answers: Vec<AnswerRx>,
    shares: Arc<RingShares>,
    /// Retry-after window of requests the shard refuses because the ring
    /// to the dispatcher is full (the queue's shed window).
    path_full_retry: RetryWindow,
    rng: SmallRng,
    stats: Arc<RequestStats>,
}

impl RequestPort {
    pub(crate) fn new(
        requests: rtrb::Producer<RequestMsg>,
        dispatcher: Arc<Doorbell>,
        shares: Arc<RingShares>,
        path_full_retry: RetryWindow,
        stats: Arc<RequestStats>,
    ) -> RequestPort {
        RequestPort {
            requests,
            dispatcher,
            answers: Vec::new(),
            shares,
            path_full_retry,
            // Seeded per process (and per shard) from OS entropy: two
            // instances never send the same retry-after sequence.
            rng: SmallRng::from_entropy(),
            stats,
        }
    }

    /// Hands a request to the dispatcher (true), or refuses it (false) when the
    /// ring is full — or more than an eighth full while this account
    /// already holds an eighth of it. Every account of the shard shares the
    /// ring: a flooding account is refused here, by the shard, before it
    /// fills the ring (the cheapest refusal there is: no dispatcher work),
    /// so a quiet account's request still finds a slot and a short line.
    pub fn push(&mut self, m: RequestMsg) -> bool {
        let held = self.shares.slot(m.account);
        let crowded = self.requests.slots() < REQUEST_RING - REQUEST_RING / 8;
        if crowded && held.load(Ordering::Acquire) >= (REQUEST_RING / 8) as u32 {
            return false;
        }
        held.fetch_add(1, Ordering::AcqRel);
        let pushed = self.requests.push(m).is_ok();
        if !pushed {
            self.shares.release(m.account);
        }
        pushed
    }

    /// The shard refuses a request because the ring to the dispatcher is
    /// full: counts it and draws its retry-after (Reject(overloaded)).
    pub fn path_full_retry_ms(&mut self) -> u32 {
        self.stats.refused_path_full.inc();
        self.path_full_retry.draw(&mut self.rng)
    }

    /// An answer came off its ring at or after its deadline: the shard
    /// sends Reject(deadline_expired) instead (counted as
    /// `pricewire_sheds_total{reason="expired_at_gateway"}`).
    pub fn expired_at_gateway(&self) {
        self.stats.expired_at_gateway.inc();
    }

    /// A recorder of the `gateway_write` hop for the shard that owns this
    /// port (allocates its local histogram: call once, at start).
    pub(crate) fn gateway_write_recorder(&self) -> crate::requests::hops::HopRecorder {
        self.stats
            .hops
            .recorder(crate::requests::hops::Hop::GatewayWrite)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_ports_draw_different_retry_sequences() {
        let stats = Arc::new(RequestStats::default());
        let port = || {
            let (tx, _rx) = rtrb::RingBuffer::new(1);
            let window = RetryWindow::new(2000, 5000);
            RequestPort::new(
                tx,
                Doorbell::new(),
                RingShares::new(),
                window,
                stats.clone(),
            )
        };
        let (mut a, mut b) = (port(), port());
        let draws =
            |p: &mut RequestPort| -> Vec<u32> { (0..16).map(|_| p.path_full_retry_ms()).collect() };
        let (da, db) = (draws(&mut a), draws(&mut b));
        assert!(da.iter().chain(&db).all(|d| (2000..=5000).contains(d)));
        assert_ne!(da, db, "entropy-seeded ports drew the same sequence");
        assert_eq!(stats.refused_path_full.get(), 32);
    }
}

#[cfg(test)]
mod share_tests {
    use super::*;
    use crate::requests::service::{RequestKind, ACCOUNT_NAME_MAX, SNAPSHOT_SYMBOLS_MAX};

    fn msg(account: u32) -> RequestMsg {
        RequestMsg {
            shard: 0,
            conn: 0,
            session: 0,
            account,
            request_id: 0,
            kind: RequestKind::Snapshot,
            tier: 0,
            symbols: [0; SNAPSHOT_SYMBOLS_MAX],
            nsym: 0,
            count: 0,
            budget_us: 0,
            critical: false,
            critical_entitled: false,
            arrival_ns: 0,
            account_name: [0; ACCOUNT_NAME_MAX],
            account_name_len: 0,
        }
    }

    #[test]
    fn a_flooding_account_cannot_fill_the_ring_a_quiet_one_shares() {
        let (tx, mut rx) = rtrb::RingBuffer::new(REQUEST_RING);
        let shares = RingShares::new();
        let stats = Arc::new(RequestStats::default());
        let window = RetryWindow::new(2000, 5000);
        let mut port = RequestPort::new(tx, Doorbell::new(), shares.clone(), window, stats);
        let mut flood_in = 0;
        while port.push(msg(7)) {
            flood_in += 1;
        }
        // It had the ring to itself until an eighth full, then no more.
        assert_eq!(flood_in, REQUEST_RING / 8 + 1);
        for _ in 0..100 {
            assert!(port.push(msg(8)), "the quiet account was refused");
        }
        // The dispatcher drains: the flood's share frees up again.
        while let Ok(m) = rx.pop() {
            shares.release(m.account);
        }
        assert!(port.push(msg(7)));
    }
}
