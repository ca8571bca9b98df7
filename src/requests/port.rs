//! A shard's end of the request path: the ring it hands requests over on,
//! the answer rings it drains, and the retry-after of the two refusals the
//! shard itself writes (so every Reject a client should back off from
//! carries a jittered value from a documented window, and is counted).

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::admission::RetryWindow;
use crate::pipeline::Doorbell;
use crate::requests::answers::AnswerRx;
use crate::requests::service::{RequestMsg, RequestStats};

/// Per-connection message limit: a refused client waits between one and
/// this many refill periods (`1000 / rate` ms each) before sending again.
pub const CONN_RATE_RETRY_PERIODS_MAX: u32 = 4;

/// The retry-after window of a Reject(rate_limited) from the per-connection
/// message limit at `rate_per_s`: `[p, 4 p]` ms with `p = 1000 / rate + 1`,
/// at least one token's refill.
pub fn conn_rate_retry_window(rate_per_s: u32) -> RetryWindow {
    let period = 1_000 / rate_per_s.max(1) + 1;
    RetryWindow::new(period, period * CONN_RATE_RETRY_PERIODS_MAX)
}

/// A shard's end of the request path.
pub struct RequestPort {
    pub requests: rtrb::Producer<RequestMsg>,
    pub dispatcher: Arc<Doorbell>,
    /// The dispatcher's ring first, then one per worker.
    pub answers: Vec<AnswerRx>,
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
        path_full_retry: RetryWindow,
        stats: Arc<RequestStats>,
    ) -> RequestPort {
        RequestPort {
            requests,
            dispatcher,
            answers: Vec::new(),
            path_full_retry,
            // Seeded per process (and per shard) from OS entropy: two
            // instances never send the same retry-after sequence.
            rng: SmallRng::from_entropy(),
            stats,
        }
    }

    /// The shard refuses a request because the ring to the dispatcher is
    /// full: counts it and draws its retry-after (Reject(overloaded)).
    pub fn path_full_retry_ms(&mut self) -> u32 {
        self.stats.refused_path_full.inc();
        self.path_full_retry.draw(&mut self.rng)
    }

    /// The per-connection message limit refused a message: counts it and
    /// draws its retry-after from [`conn_rate_retry_window`].
    pub fn conn_rate_retry_ms(&mut self, rate_per_s: u32) -> u32 {
        self.stats.refused_conn_rate.inc();
        conn_rate_retry_window(rate_per_s).draw(&mut self.rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_rate_window_covers_one_to_four_refill_periods() {
        assert_eq!(conn_rate_retry_window(200), RetryWindow::new(6, 24));
        assert_eq!(conn_rate_retry_window(0), RetryWindow::new(1001, 4004));
        assert!(conn_rate_retry_window(5000).is_valid());
    }

    #[test]
    fn two_ports_draw_different_retry_sequences() {
        let stats = Arc::new(RequestStats::default());
        let port = || {
            let (tx, _rx) = rtrb::RingBuffer::new(1);
            RequestPort::new(
                tx,
                Doorbell::new(),
                RetryWindow::new(2000, 5000),
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
        let d = a.conn_rate_retry_ms(200);
        assert!((6..=24).contains(&d));
        assert_eq!(stats.refused_conn_rate.get(), 1);
    }
}
