//! A feed's producer side of its engine ring.
//!
//! `push` never blocks forever and never allocates: when the ring is full
//! it waits up to `full_wait` (spinning, then yielding) for the engine to
//! make room, and if there is still none it drops the tick and counts it.

use std::sync::Arc;

use super::counter::{Counter, Gauge};
use super::wait::Doorbell;
use crate::clock::monotonic_ns;
use crate::model::Tick;

/// Counters of one feed.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct FeedStats {
    /// Ticks pushed into the engine ring.
    pub pushed: Counter,
    /// Ticks that found the ring full and waited.
    pub full_waits: Counter,
    /// Ticks dropped because the ring stayed full for `full_wait`.
    pub dropped: Counter,
    /// Ring occupancy after the last batch, in slots.
    pub ring_occupancy: Gauge,
}

/// Producer end of one feed → engine ring.
pub struct FeedPort {
    producer: rtrb::Producer<Tick>,
    doorbell: Arc<Doorbell>,
    full_wait_ns: u64,
    /// Set when a wait for room timed out in the current batch: the rest of
    /// the batch is dropped without waiting again (one wait per batch, not
    /// per tick). Cleared by [`FeedPort::notify`].
    gave_up: bool,
    /// This feed's counters, shared with the metrics reporter.
    pub stats: Arc<FeedStats>,
    /// The producer's progress mark, read by the engine (untracked
    /// unless the producer marks it: the provider listener does).
    pub progress: Arc<super::Progress>,
}

impl FeedPort {
    /// A port onto a new ring of `ring_capacity` ticks; a push into a full
    /// ring waits up to `full_wait_us` for room, then drops and counts.
    pub fn new(
        ring_capacity: usize,
        full_wait_us: u64,
        doorbell: Arc<Doorbell>,
    ) -> (Self, rtrb::Consumer<Tick>) {
        assert!(ring_capacity > 0, "a feed ring needs a non-zero capacity");
        let (producer, consumer) = rtrb::RingBuffer::new(ring_capacity);
        (
            FeedPort {
                producer,
                doorbell,
                full_wait_ns: full_wait_us * 1_000,
                gave_up: false,
                stats: Arc::new(FeedStats::default()),
                progress: Arc::new(super::Progress::new()),
            },
            consumer,
        )
    }

    /// Pushes one tick. Returns false if it was dropped.
    #[inline]
    pub fn push(&mut self, tick: Tick) -> bool {
        match self.producer.push(tick) {
            Ok(()) => {
                self.stats.pushed.inc();
                true
            }
            Err(rtrb::PushError::Full(t)) => self.push_slow(t),
        }
    }

    #[cold]
    fn push_slow(&mut self, mut tick: Tick) -> bool {
        if self.gave_up {
            self.stats.dropped.inc();
            return false;
        }
        self.stats.full_waits.inc();
        // The engine may be parked waiting for a doorbell we have not rung
        // yet for this batch.
        self.doorbell.ring();
        let deadline = monotonic_ns() + self.full_wait_ns;
        let mut spins = 0u32;
        loop {
            match self.producer.push(tick) {
                Ok(()) => {
                    self.stats.pushed.inc();
                    return true;
                }
                Err(rtrb::PushError::Full(t)) => tick = t,
            }
            if monotonic_ns() >= deadline || self.producer.is_abandoned() {
                self.stats.dropped.inc();
                self.gave_up = true;
                return false;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// The doorbell this port rings (the engine's, or with `--threading
    /// shared` the host's).
    pub fn doorbell(&self) -> Arc<Doorbell> {
        self.doorbell.clone()
    }

    /// Free slots in the ring now.
    #[inline]
    pub fn room(&self) -> usize {
        self.producer.slots()
    }

    /// Never wait for room: a producer on the engine's own thread
    /// (`--threading shared`) would wait for itself. Such a producer checks
    /// [`FeedPort::room`] before it takes input instead.
    pub fn never_wait(&mut self) {
        self.full_wait_ns = 0;
    }

    /// Call after a batch: wakes the engine if it sleeps.
    #[inline]
    pub fn notify(&mut self) {
        self.gave_up = false;
        let cap = self.producer.buffer().capacity();
        self.stats
            .ring_occupancy
            .set((cap - self.producer.slots()) as u64);
        self.doorbell.ring();
    }
}

impl Drop for FeedPort {
    fn drop(&mut self) {
        // The engine notices the abandoned ring on its next turn; wake it.
        self.doorbell.ring();
    }
}
