//! Single-writer counters readable from any thread.
//!
//! Each counter has exactly one writing thread, so an increment is a plain
//! load and store (no locked read-modify-write on the hot path); readers on
//! other threads see a recent value. Counters live in stats structs padded
//! to their own cache lines so that a reader never shares a line with a
//! different stage's writer.

use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonically increasing count written by one thread.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// A counter at zero, usable in a `static`.
    pub const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }
    /// Adds `n`. Only the owning thread may call this.
    #[inline]
    pub fn add(&self, n: u64) {
        let v = self.0.load(Ordering::Relaxed);
        self.0.store(v.wrapping_add(n), Ordering::Relaxed);
    }
    /// Adds 1. Only the owning thread may call this.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }
    /// The count so far, from any thread; may lag the writer slightly and wraps
    /// at `u64::MAX`.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value written by one thread (occupancy, state), read by others.
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    /// A gauge at zero, usable in a `static`.
    pub const fn new() -> Self {
        Gauge(AtomicU64::new(0))
    }
    /// Stores `v`. Only the owning thread may call this.
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    /// The last value set, from any thread.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
