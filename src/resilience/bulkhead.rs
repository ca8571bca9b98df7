//! Bulkhead: a cap on concurrent calls to one dependency.
//!
//! Contract: [`Bulkhead::try_enter`] never blocks and never allocates (one
//! compare-and-swap plus an `Arc` count); a full bulkhead rejects at once.
//! [`Bulkhead::enter_wait`] may wait, but only up to the configured
//! `max_wait_ms` (`Condvar::wait_timeout`) — there is no unbounded wait. It
//! is meant for cold paths (reference data, admin), not the price hot path.
//! The slot is released when the [`BulkheadGuard`] drops.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::error::{invalid, BulkheadFull, ConfigError};

/// Default `max_concurrent`.
pub const MAX_CONCURRENT_DEFAULT: u32 = 16;
/// Most `max_concurrent` accepted.
pub const MAX_CONCURRENT_MAX: u32 = 100_000;
/// Default `max_wait_ms`: a full bulkhead rejects at once.
pub const MAX_WAIT_MS_DEFAULT: u64 = 0;
/// Longest wait a bulkhead accepts; anything longer is a queue in disguise.
pub const MAX_WAIT_MS_MAX: u64 = 60_000;

/// Bulkhead settings; [`Bulkhead::new`] validates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkheadConfig {
    /// Calls allowed in flight at once (1..=[`MAX_CONCURRENT_MAX`]).
    pub max_concurrent: u32,
    /// Longest [`Bulkhead::enter_wait`] waits for a slot; 0 = reject at once.
    pub max_wait_ms: u64,
}

impl Default for BulkheadConfig {
    fn default() -> Self {
        BulkheadConfig {
            max_concurrent: MAX_CONCURRENT_DEFAULT,
            max_wait_ms: MAX_WAIT_MS_DEFAULT,
        }
    }
}

/// Counters of one bulkhead.
#[derive(Debug, Default)]
pub struct BulkheadStats {
    /// Calls given a slot.
    pub admitted: AtomicU64,
    /// Calls refused: no slot free (in time).
    pub rejected: AtomicU64,
    /// Admissions that had to wait (a subset of `admitted`).
    pub admitted_after_wait: AtomicU64,
}

/// A plain copy of a bulkhead's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkheadSnapshot {
    /// Calls given a slot.
    pub admitted: u64,
    /// Calls refused.
    pub rejected: u64,
    /// Admissions that had to wait (a subset of `admitted`).
    pub admitted_after_wait: u64,
    /// Calls in flight when the copy was taken.
    pub current: u32,
}

#[derive(Debug)]
struct Inner {
    cfg: BulkheadConfig,
    current: AtomicU32,
    /// Threads inside `enter_wait`; a release only touches the mutex when
    /// someone waits.
    waiters: AtomicU32,
    lock: Mutex<()>,
    freed: Condvar,
    stats: BulkheadStats,
}

/// A shareable handle (clones share the same slots).
#[derive(Debug, Clone)]
pub struct Bulkhead {
    inner: Arc<Inner>,
}

/// One occupied slot; dropping it frees the slot.
#[derive(Debug)]
#[must_use = "the slot is released as soon as the guard drops"]
pub struct BulkheadGuard {
    inner: Arc<Inner>,
}

impl Bulkhead {
    /// A bulkhead with no call in flight. Errors: `max_concurrent` outside
    /// 1..=[`MAX_CONCURRENT_MAX`] or `max_wait_ms` above [`MAX_WAIT_MS_MAX`].
    pub fn new(cfg: BulkheadConfig) -> Result<Self, ConfigError> {
        if !(1..=MAX_CONCURRENT_MAX).contains(&cfg.max_concurrent) {
            let reason = format!("{} not in 1..={MAX_CONCURRENT_MAX}", cfg.max_concurrent);
            return Err(invalid("max_concurrent", reason));
        }
        if cfg.max_wait_ms > MAX_WAIT_MS_MAX {
            let reason = format!("{} above {MAX_WAIT_MS_MAX}", cfg.max_wait_ms);
            return Err(invalid("max_wait_ms", reason));
        }
        Ok(Bulkhead {
            inner: Arc::new(Inner {
                cfg,
                current: AtomicU32::new(0),
                waiters: AtomicU32::new(0),
                lock: Mutex::new(()),
                freed: Condvar::new(),
                stats: BulkheadStats::default(),
            }),
        })
    }

    fn full(&self) -> BulkheadFull {
        BulkheadFull {
            max_concurrent: self.inner.cfg.max_concurrent,
        }
    }

    fn try_claim(&self) -> bool {
        let max = self.inner.cfg.max_concurrent;
        // SeqCst pairs with the release path's `waiters` check; see `release`.
        self.inner
            .current
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                (c < max).then_some(c + 1)
            })
            .is_ok()
    }

    fn guard(&self) -> BulkheadGuard {
        self.inner.stats.admitted.fetch_add(1, Ordering::Relaxed);
        BulkheadGuard {
            inner: Arc::clone(&self.inner),
        }
    }

    fn reject(&self) -> BulkheadFull {
        self.inner.stats.rejected.fetch_add(1, Ordering::Relaxed);
        self.full()
    }

    /// Takes a slot if one is free; rejects at once otherwise.
    pub fn try_enter(&self) -> Result<BulkheadGuard, BulkheadFull> {
        if self.try_claim() {
            Ok(self.guard())
        } else {
            Err(self.reject())
        }
    }

    /// Takes a slot, waiting at most `max_wait_ms` for one to be freed.
    pub fn enter_wait(&self) -> Result<BulkheadGuard, BulkheadFull> {
        if self.try_claim() {
            return Ok(self.guard());
        }
        let max_wait = Duration::from_millis(self.inner.cfg.max_wait_ms);
        if max_wait.is_zero() {
            return Err(self.reject());
        }
        let deadline = Instant::now() + max_wait;
        let mut held = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.inner.waiters.fetch_add(1, Ordering::SeqCst);
        let claimed = loop {
            if self.try_claim() {
                break true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break false;
            }
            held = match self.inner.freed.wait_timeout(held, left) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        };
        self.inner.waiters.fetch_sub(1, Ordering::SeqCst);
        drop(held);
        if !claimed {
            return Err(self.reject());
        }
        self.inner
            .stats
            .admitted_after_wait
            .fetch_add(1, Ordering::Relaxed);
        Ok(self.guard())
    }

    /// Calls in flight.
    pub fn current(&self) -> u32 {
        self.inner.current.load(Ordering::Relaxed)
    }

    /// Reads every counter (Relaxed) and the calls in flight.
    pub fn snapshot(&self) -> BulkheadSnapshot {
        let s = &self.inner.stats;
        BulkheadSnapshot {
            admitted: s.admitted.load(Ordering::Relaxed),
            rejected: s.rejected.load(Ordering::Relaxed),
            admitted_after_wait: s.admitted_after_wait.load(Ordering::Relaxed),
            current: self.current(),
        }
    }
}

impl Drop for BulkheadGuard {
    /// Frees the slot and wakes one waiter. The lost-wakeup argument: a
    /// waiter increments `waiters` and then retries the claim while holding
    /// the mutex; this side decrements `current` and then reads `waiters`,
    /// all SeqCst. Either the waiter's retry sees the freed slot, or this
    /// side sees the waiter and notifies under the mutex, which the waiter
    /// only releases inside `wait_timeout`.
    fn drop(&mut self) {
        let before = self.inner.current.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(
            before > 0,
            "bulkhead released more slots than it handed out"
        );
        if self.inner.waiters.load(Ordering::SeqCst) > 0 {
            let _held = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.inner.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulkhead(max_concurrent: u32, max_wait_ms: u64) -> Bulkhead {
        Bulkhead::new(BulkheadConfig {
            max_concurrent,
            max_wait_ms,
        })
        .unwrap()
    }

    #[test]
    fn rejects_fast_when_full_and_guard_releases() {
        let b = bulkhead(2, 0);
        let g1 = b.try_enter().unwrap();
        let _g2 = b.try_enter().unwrap();
        let start = Instant::now();
        assert_eq!(
            b.try_enter().unwrap_err(),
            BulkheadFull { max_concurrent: 2 }
        );
        assert_eq!(
            b.enter_wait().unwrap_err().max_concurrent,
            2,
            "max_wait 0 = no wait"
        );
        assert!(
            start.elapsed() < Duration::from_millis(100),
            "rejection must not wait"
        );
        drop(g1);
        assert_eq!(b.current(), 1);
        let _g3 = b.try_enter().unwrap();
        let s = b.snapshot();
        assert_eq!((s.admitted, s.rejected, s.current), (3, 2, 2));
    }

    #[test]
    fn bounded_wait_times_out() {
        let b = bulkhead(1, 30);
        let _held = b.try_enter().unwrap();
        let start = Instant::now();
        assert!(b.enter_wait().is_err());
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(30),
            "gave up early after {waited:?}"
        );
        assert_eq!(b.snapshot().rejected, 1);
        assert_eq!(b.current(), 1);
    }

    #[test]
    fn waiter_gets_the_slot_released_by_another_thread() {
        let b = bulkhead(1, MAX_WAIT_MS_MAX);
        let held = b.try_enter().unwrap();
        let waiter = {
            let b = b.clone();
            std::thread::spawn(move || b.enter_wait().map(|_g| ()))
        };
        // Wait (bounded) until the waiter is parked, then free the slot.
        let deadline = Instant::now() + Duration::from_secs(10);
        while b.inner.waiters.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "waiter never arrived");
            std::thread::yield_now();
        }
        drop(held);
        assert!(waiter.join().unwrap().is_ok());
        let s = b.snapshot();
        assert_eq!((s.admitted, s.admitted_after_wait, s.current), (2, 1, 0));
    }

    #[test]
    fn concurrent_entries_never_exceed_the_cap() {
        let b = bulkhead(3, 0);
        let peak = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (b, peak) = (b.clone(), Arc::clone(&peak));
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        if let Ok(_g) = b.try_enter() {
                            peak.fetch_max(b.current(), Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert!(peak.load(Ordering::Relaxed) <= 3);
        let s = b.snapshot();
        assert_eq!(s.admitted + s.rejected, 8_000);
        assert_eq!(s.current, 0);
    }

    #[test]
    fn invalid_config_is_refused() {
        assert!(Bulkhead::new(BulkheadConfig {
            max_concurrent: 0,
            max_wait_ms: 0
        })
        .is_err());
        let too_long = BulkheadConfig {
            max_concurrent: 1,
            max_wait_ms: MAX_WAIT_MS_MAX + 1,
        };
        assert!(Bulkhead::new(too_long).is_err());
    }
}
