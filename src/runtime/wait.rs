//! Wait strategies for idle stages, and the doorbell a producer rings to
//! wake a parked consumer.
//!
//! A stage that finds its input empty calls [`Waiter::idle`]; one that found
//! work calls [`Waiter::reset`]. `spin` burns its core (lowest latency, needs
//! a dedicated core); `spin-yield` spins briefly then yields the core to
//! other threads; `spin-park` spins, yields, then parks with a bounded,
//! doubling timeout and is woken early by the producer through the
//! [`Doorbell`]. Nothing here allocates after construction.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::sync::{self, fence, AtomicBool, Ordering, Thread};

/// How an idle stage waits for input. A CLI choice per stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitStrategy {
    /// Busy-spin: the lowest wake-up latency, one full core per stage.
    Spin,
    /// Spin, then `yield_now` between checks.
    SpinYield,
    /// Spin, yield, then park with a bounded backoff; the producer's
    /// doorbell wakes it. The default: behaves on a 2-core machine.
    SpinPark,
    /// Park at once (the doorbell or, for poll-based stages, the socket
    /// wakes it): no CPU while idle, a kernel wake-up per idle period.
    /// What single-threaded servers do; pairs with `--threading shared`,
    /// where no hand-off inside the process needs a spinning consumer.
    Park,
}

/// Idle turns spent spinning before yielding.
pub const SPIN_TURNS: u32 = 128;
/// Idle turns spent yielding before parking (spin-park only). Measured
/// both ways (BENCHMARKS.md): 8 turns cut server CPU at 10k ticks/s from
/// ≈170 to ≈120 s per million updates, but raised p50 at 200k ticks/s from
/// 270 µs to 852 µs (more stages parked between batches). Latency first.
pub const YIELD_TURNS: u32 = 64;
/// First park timeout; doubles per idle park up to [`PARK_MAX_US`].
pub const PARK_MIN_US: u64 = 50;
/// Longest park. The doorbell normally wakes the stage much earlier; the
/// timeout is the safety net that also lets the stage poll its control
/// channel while idle.
pub const PARK_MAX_US: u64 = 2_000;
/// Longest park of a stage every one of whose inputs wakes it (a doorbell
/// or the kernel) and that has no timer due sooner: an idle gateway shard
/// without hosted stages, the request dispatcher with an empty queue. On a
/// 2-core machine each needless wake-up can preempt the thread carrying
/// prices; 500 per second per idle stage showed in p99.
pub const IDLE_PARK_MAX_US: u64 = 20_000;

/// How a producer wakes a sleeping consumer.
///
/// The consumer announces `sleeping` before its final emptiness check and
/// the producer reads it after publishing; both sides put a SeqCst fence
/// between their store and their load (Dekker's pattern), so at least one
/// of them sees the other: either the consumer sees the new item, or the
/// producer sees `sleeping` and wakes it. A wake-up costs a syscall only
/// when the consumer is really asleep, i.e. when the system is idle.
/// The loom model `runtime::loom_models` checks that no wake-up is lost.
#[derive(Debug, Default)]
pub struct Doorbell {
    sleeping: AtomicBool,
    thread: OnceLock<Thread>,
    waker: OnceLock<Arc<mio::Waker>>,
}

impl Doorbell {
    /// A doorbell with no thread or waker bound yet; bind before sleeping.
    pub fn new() -> Arc<Self> {
        Arc::new(Doorbell::default())
    }

    /// Registers the current thread as the one to unpark.
    pub fn bind_current_thread(&self) {
        let _ = self.thread.set(sync::current());
    }

    /// Registers a mio waker (for consumers that sleep in `Poll::poll`).
    pub fn bind_waker(&self, waker: Arc<mio::Waker>) {
        let _ = self.waker.set(waker);
    }

    /// Producer side: call after publishing a batch.
    #[inline]
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.wake();
        }
    }

    #[cold]
    fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
        if let Some(w) = self.waker.get() {
            // A failed eventfd write means the poller is gone; the consumer's
            // bounded poll timeout still wakes it, so nothing is lost.
            let _ = w.wake();
        }
    }

    /// Consumer side: announce sleep. Returns false (and stays awake) if
    /// `has_work` reports input after the announcement.
    #[inline]
    pub fn prepare_sleep(&self, has_work: impl Fn() -> bool) -> bool {
        self.sleeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if has_work() {
            self.sleeping.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Consumer side: awake again.
    #[inline]
    pub fn woke(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }
}

/// Per-stage idle state.
#[derive(Debug)]
pub struct Waiter {
    strategy: WaitStrategy,
    idle_turns: u32,
    park_us: u64,
    park_max_us: u64,
    /// Parks last `park_max_us` from the first one (see
    /// [`Waiter::set_idle_park`]).
    straight: bool,
    doorbell: Arc<Doorbell>,
}

impl Waiter {
    /// An idle-state waiter for `strategy`: no idle turns yet, parks doubling
    /// from [`PARK_MIN_US`] to [`PARK_MAX_US`] when the strategy parks.
    pub fn new(strategy: WaitStrategy, doorbell: Arc<Doorbell>) -> Self {
        Waiter {
            strategy,
            idle_turns: 0,
            park_us: PARK_MIN_US,
            park_max_us: PARK_MAX_US,
            straight: false,
            doorbell,
        }
    }

    /// Sets the longest park (default [`PARK_MAX_US`]); parks double up
    /// to it from [`PARK_MIN_US`], for a stage that has something to
    /// retry on a timer.
    pub fn set_park_max(&mut self, us: u64) {
        if self.straight {
            // Leaving straight parks: the retries start short.
            self.park_us = PARK_MIN_US;
            self.straight = false;
        }
        self.park_max_us = us.max(PARK_MIN_US);
        self.park_us = self.park_us.min(self.park_max_us);
    }

    /// For a stage every one of whose inputs wakes it (a doorbell or the
    /// kernel) and with no timer due sooner than `us` (see
    /// [`IDLE_PARK_MAX_US`]): every park lasts up to `us` from the first,
    /// instead of doubling up from [`PARK_MIN_US`]. A short first timeout
    /// there only adds a wake-up between inputs: at 10k ticks/s shard 0
    /// woke at 50 µs and again at 100 µs for each tick.
    pub fn set_idle_park(&mut self, us: u64) {
        self.park_max_us = us.max(PARK_MIN_US);
        self.park_us = self.park_max_us;
        self.straight = true;
    }

    /// The one switch stages use: `true` while the stage holds something
    /// it must retry on a timer, which nothing will wake it for (queued
    /// requests' deadlines, an engine's prices parked for a full ring):
    /// short parks doubling up to [`PARK_MAX_US`]. `false` when every input
    /// wakes it: parks of up to [`IDLE_PARK_MAX_US`] from the first.
    #[inline]
    pub fn set_retrying(&mut self, retrying: bool) {
        if retrying {
            self.set_park_max(PARK_MAX_US);
        } else {
            self.set_idle_park(IDLE_PARK_MAX_US);
        }
    }

    pub(crate) fn strategy(&self) -> WaitStrategy {
        self.strategy
    }

    /// Work was found: the next idle period starts from spinning again.
    #[inline]
    pub fn reset(&mut self) {
        self.idle_turns = 0;
        self.park_us = if self.straight {
            self.park_max_us
        } else {
            PARK_MIN_US
        };
    }

    /// Nothing to do this turn. `has_work` re-checks the input before the
    /// stage parks, closing the race with the producer's doorbell.
    #[inline]
    pub fn idle(&mut self, has_work: impl Fn() -> bool) {
        self.idle_turns = self.idle_turns.saturating_add(1);
        match self.strategy {
            WaitStrategy::Spin => sync::spin_loop(),
            WaitStrategy::SpinYield => self.spin_then_yield(),
            WaitStrategy::SpinPark => self.spin_yield_park(has_work),
            WaitStrategy::Park => self.park(has_work),
        }
    }

    fn spin_then_yield(&self) {
        if self.idle_turns < SPIN_TURNS {
            sync::spin_loop();
        } else {
            sync::yield_now();
        }
    }

    fn spin_yield_park(&mut self, has_work: impl Fn() -> bool) {
        if self.idle_turns < SPIN_TURNS + YIELD_TURNS {
            self.spin_then_yield();
            return;
        }
        self.park(has_work);
    }

    fn park(&mut self, has_work: impl Fn() -> bool) {
        if self.doorbell.prepare_sleep(has_work) {
            sync::park_timeout(Duration::from_micros(self.park_us));
            self.doorbell.woke();
            self.park_us = (self.park_us * 2).min(self.park_max_us);
        }
    }

    /// How long a poll-based consumer (mio) may block now: zero while
    /// spinning, a bounded backoff once parked. The caller brackets its
    /// poll with [`Doorbell::prepare_sleep`] / [`Doorbell::woke`].
    pub fn poll_timeout(&mut self) -> Option<Duration> {
        self.idle_turns = self.idle_turns.saturating_add(1);
        let parked = match self.strategy {
            WaitStrategy::Spin | WaitStrategy::SpinYield => false,
            WaitStrategy::SpinPark => self.idle_turns >= SPIN_TURNS + YIELD_TURNS,
            WaitStrategy::Park => true,
        };
        if !parked {
            return Some(Duration::ZERO);
        }
        let d = Duration::from_micros(self.park_us);
        self.park_us = (self.park_us * 2).min(self.park_max_us);
        Some(d)
    }

    pub(crate) fn doorbell(&self) -> &Arc<Doorbell> {
        &self.doorbell
    }
}

/// `timeout` (`None`: no limit) shortened so a poll at `now_ns` returns by
/// `due_ns`, when the stage's next timer is due: an idle park of up to
/// [`IDLE_PARK_MAX_US`] must not make a periodic sweep late.
#[inline]
pub fn until_due(timeout: Option<Duration>, now_ns: u64, due_ns: u64) -> Option<Duration> {
    let left = Duration::from_nanos(due_ns.saturating_sub(now_ns));
    Some(timeout.map_or(left, |t| t.min(left)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::time::Instant;

    #[test]
    fn parked_consumer_is_woken_by_the_doorbell() {
        parked_consumer_sees_every_value(WaitStrategy::SpinPark);
        parked_consumer_sees_every_value(WaitStrategy::Park);
    }

    fn parked_consumer_sees_every_value(strategy: WaitStrategy) {
        // A consumer parks on an empty "ring" (an atomic counter); the
        // producer bumps it and rings. The consumer must observe every
        // value; the bounded park timeout guarantees progress regardless.
        let bell = Doorbell::new();
        let value = Arc::new(AtomicU64::new(0));
        let (b2, v2) = (bell.clone(), value.clone());
        let consumer = std::thread::spawn(move || {
            b2.bind_current_thread();
            let mut w = Waiter::new(strategy, b2.clone());
            let mut seen = 0;
            let deadline = Instant::now() + Duration::from_secs(10);
            while seen < 1_000 && Instant::now() < deadline {
                let v = v2.load(Ordering::Acquire);
                if v > seen {
                    seen = v;
                    w.reset();
                } else {
                    w.idle(|| v2.load(Ordering::Acquire) > seen);
                }
            }
            seen
        });
        for i in 1..=1_000 {
            value.store(i, Ordering::Release);
            bell.ring();
            if i % 100 == 0 {
                std::thread::yield_now();
            }
        }
        assert_eq!(consumer.join().unwrap(), 1_000);
    }

    #[test]
    fn prepare_sleep_refuses_when_work_arrived() {
        let bell = Doorbell::new();
        assert!(!bell.prepare_sleep(|| true));
        assert!(!bell.sleeping.load(Ordering::Relaxed));
        assert!(bell.prepare_sleep(|| false));
        bell.woke();
    }

    #[test]
    fn poll_timeout_backs_off_within_bounds() {
        let mut w = Waiter::new(WaitStrategy::SpinPark, Doorbell::new());
        let mut last = Duration::ZERO;
        for _ in 0..1_000 {
            last = w.poll_timeout().unwrap();
        }
        assert_eq!(last, Duration::from_micros(PARK_MAX_US));
        w.reset();
        assert_eq!(w.poll_timeout(), Some(Duration::ZERO));
        let mut spin = Waiter::new(WaitStrategy::Spin, Doorbell::new());
        for _ in 0..1_000 {
            assert_eq!(spin.poll_timeout(), Some(Duration::ZERO));
        }
        // A longer cap for stages whose every input wakes them.
        let mut idle = Waiter::new(WaitStrategy::Park, Doorbell::new());
        idle.set_park_max(IDLE_PARK_MAX_US);
        for _ in 0..1_000 {
            last = idle.poll_timeout().unwrap();
        }
        assert_eq!(last, Duration::from_micros(IDLE_PARK_MAX_US));
        idle.set_park_max(PARK_MAX_US);
        assert!(idle.poll_timeout().unwrap() <= Duration::from_micros(PARK_MAX_US));
        // Park sleeps from the first idle turn.
        let mut park = Waiter::new(WaitStrategy::Park, Doorbell::new());
        assert_eq!(
            park.poll_timeout(),
            Some(Duration::from_micros(PARK_MIN_US))
        );
    }

    #[test]
    fn idle_parks_last_the_cap_from_the_first_and_retries_start_short() {
        let cap = Duration::from_micros(IDLE_PARK_MAX_US);
        let mut w = Waiter::new(WaitStrategy::Park, Doorbell::new());
        w.set_idle_park(IDLE_PARK_MAX_US);
        assert_eq!(w.poll_timeout(), Some(cap));
        // Work found: the next idle period parks for the cap again, not
        // from PARK_MIN_US (no wake-up between two inputs).
        w.reset();
        assert_eq!(w.poll_timeout(), Some(cap));
        assert_eq!(w.poll_timeout(), Some(cap));
        // Something to retry (a host's engine holding prices for a full
        // ring): back to short, doubling parks.
        w.set_park_max(PARK_MAX_US);
        assert_eq!(w.poll_timeout(), Some(Duration::from_micros(PARK_MIN_US)));
        assert_eq!(
            w.poll_timeout(),
            Some(Duration::from_micros(2 * PARK_MIN_US))
        );
        w.set_park_max(PARK_MAX_US); // still retrying: keeps doubling
        assert_eq!(
            w.poll_timeout(),
            Some(Duration::from_micros(4 * PARK_MIN_US))
        );
        w.reset();
        assert_eq!(w.poll_timeout(), Some(Duration::from_micros(PARK_MIN_US)));
        // A thread-parking stage (the request dispatcher) uses the same
        // state: spin-park reaches the cap at its first park.
        let mut sp = Waiter::new(WaitStrategy::SpinPark, Doorbell::new());
        sp.set_idle_park(IDLE_PARK_MAX_US);
        for _ in 1..SPIN_TURNS + YIELD_TURNS {
            assert_eq!(sp.poll_timeout(), Some(Duration::ZERO));
        }
        assert_eq!(sp.poll_timeout(), Some(cap));
    }

    #[test]
    fn parks_end_when_the_next_timer_is_due() {
        let ms = |n: u64| Duration::from_millis(n);
        // A 20-ms park 5 ms before a sweep ends at the sweep.
        assert_eq!(until_due(Some(ms(20)), 45_000_000, 50_000_000), Some(ms(5)));
        // A shorter park is kept.
        assert_eq!(until_due(Some(ms(2)), 0, 50_000_000), Some(ms(2)));
        // No limit at all becomes the time to the timer.
        assert_eq!(until_due(None, 10_000_000, 50_000_000), Some(ms(40)));
        // A timer already due: do not sleep.
        assert_eq!(
            until_due(Some(ms(20)), 60_000_000, 50_000_000),
            Some(Duration::ZERO)
        );
        // No timer (`u64::MAX`): the park is kept.
        assert_eq!(until_due(Some(ms(20)), 1, u64::MAX), Some(ms(20)));
    }
}
