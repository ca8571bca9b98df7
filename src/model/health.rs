//! Which providers may contribute to the aggregated price right now.
//!
//! Contract: one `AtomicBool` per configured provider, allocated at
//! start-up; written by the operator or a feed's breaker on another thread
//! and read (Relaxed) by the engine on every aggregation — a flip reaches
//! the next aggregation, no ordering with other data is needed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Per-provider health, flipped by the operator or a breaker on another
/// thread and read (Relaxed) by the engine on every aggregation.
#[derive(Debug)]
pub struct ProviderHealth {
    healthy: Box<[AtomicBool]>,
}

impl ProviderHealth {
    /// `providers` flags, all healthy, allocated once here.
    pub fn new(providers: usize) -> Arc<Self> {
        Arc::new(ProviderHealth {
            healthy: (0..providers).map(|_| AtomicBool::new(true)).collect(),
        })
    }
    /// Marks `provider` healthy or not; seen by the engine's next aggregation.
    /// An index past the configured providers is ignored.
    pub fn set(&self, provider: usize, healthy: bool) {
        if let Some(h) = self.healthy.get(provider) {
            h.store(healthy, Ordering::Relaxed);
        }
    }
    /// Whether `provider` may contribute now; `false` for an index past the
    /// configured providers.
    #[inline]
    pub fn is_healthy(&self, provider: usize) -> bool {
        self.healthy
            .get(provider)
            .is_some_and(|h| h.load(Ordering::Relaxed))
    }
}
