//! Adaptive concurrency limit for the request workers (and any dependency
//! call), after Netflix concurrency-limits' `Gradient2Limit`.
//!
//! # Contract
//!
//! - `try_acquire` / `release` are lock-free (one CAS / one atomic add) and
//!   callable from any thread through `&self`; they never block.
//! - `on_sample` updates the estimate under a `Mutex` taken with `try_lock`:
//!   a sample that arrives while another thread is updating is dropped and
//!   counted (`adaptive_samples_skipped`), never waited for. One RTT sample
//!   less changes nothing in an exponential average; a blocked worker would.
//! - Nothing allocates after construction; time is the `now_ns` argument.
//!
//! # Algorithm (per sample)
//!
//! ```text
//! short = EMA(rtt, short_window)           fast: the latency now
//! long  = EMA(rtt, long_window)            slow: the no-load baseline
//! if long / short > 2: long *= 0.95        recover the baseline quickly after a long overload
//! if inflight < limit / 2: keep limit      app-limited: no evidence about capacity
//! gradient = clamp(tolerance * long / short, 0.5, 1.0)
//! new = limit * gradient + queue_size      probe upwards by queue_size when latency is flat
//! limit = clamp(limit * (1 - smoothing) + new * smoothing, min, max)
//! ```
//!
//! `tolerance` is Gradient2's RTT tolerance: 1.5 lets latency rise by half
//! before the limit shrinks, so jitter does not cost capacity; set 1.0 for
//! the bare `clamp(long/short, 0.5, 1.0)`. The gradient never halves the
//! limit in one step, so an outlier cannot collapse it. The short and long
//! RTTs are published next to the limit in [`OverloadStats`].

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::overload::stats::{inc, set, OverloadStats};

/// An adaptive limit configuration problem.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdaptiveError {
    /// `validate` refused a value.
    #[error("adaptive limit config `{key}`: {reason}")]
    Config {
        /// The offending field, e.g. `limit_min`.
        key: &'static str,
        /// What the value must be.
        reason: &'static str,
    },
}

/// Settings; [`Default`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveConfig {
    /// Limit before the first update; in `limit_min..=limit_max`.
    pub limit_initial: u32,
    /// The limit never shrinks below this; at least 1.
    pub limit_min: u32,
    /// The limit never grows above this.
    pub limit_max: u32,
    /// Weight of the new estimate per sample (Gradient2 default 0.2).
    pub smoothing: f64,
    /// Latency rise tolerated before shrinking (Gradient2 default 1.5).
    pub rtt_tolerance: f64,
    /// Samples in the short EMA window.
    pub short_window_samples: u32,
    /// Samples in the long (baseline) EMA window.
    pub long_window_samples: u32,
    /// Samples averaged plainly before the EMAs take over.
    pub warmup_samples: u32,
    /// Headroom added per update: how far the limit probes above the
    /// concurrency that keeps latency flat.
    pub queue_size: u32,
}

impl Default for AdaptiveConfig {
    fn default() -> AdaptiveConfig {
        AdaptiveConfig {
            limit_initial: 20,
            limit_min: 4,
            limit_max: 256,
            smoothing: 0.2,
            rtt_tolerance: 1.5,
            short_window_samples: 10,
            long_window_samples: 600,
            warmup_samples: 10,
            queue_size: 4,
        }
    }
}

impl AdaptiveConfig {
    /// Refuses values the limit cannot work with, naming the key.
    pub fn validate(&self) -> Result<(), AdaptiveError> {
        let err = |key, reason| Err(AdaptiveError::Config { key, reason });
        if self.limit_min == 0 || self.limit_min > self.limit_max {
            return err("limit_min", "must be in 1..=limit_max");
        }
        if !(self.limit_min..=self.limit_max).contains(&self.limit_initial) {
            return err("limit_initial", "must be in limit_min..=limit_max");
        }
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            return err("smoothing", "must be in (0, 1]");
        }
        if !(self.rtt_tolerance >= 1.0 && self.rtt_tolerance.is_finite()) {
            return err("rtt_tolerance", "must be a finite number >= 1");
        }
        if self.short_window_samples == 0 || self.short_window_samples > self.long_window_samples {
            return err("short_window_samples", "must be in 1..=long_window_samples");
        }
        Ok(())
    }
}

/// Exponential moving average with a plain-mean warm-up.
#[derive(Debug, Clone, Copy)]
struct Ema {
    value: f64,
    count: u32,
    warmup: u32,
    factor: f64,
}

impl Ema {
    fn new(window: u32, warmup: u32) -> Ema {
        Ema {
            value: 0.0,
            count: 0,
            warmup,
            factor: 2.0 / (f64::from(window) + 1.0),
        }
    }

    fn add(&mut self, sample: f64) -> f64 {
        if self.count < self.warmup {
            self.count += 1;
            self.value += (sample - self.value) / f64::from(self.count);
        } else {
            self.value = self.value * (1.0 - self.factor) + sample * self.factor;
        }
        self.value
    }
}

#[derive(Debug)]
struct Estimator {
    limit: f64,
    short: Ema,
    long: Ema,
    last_sample_ns: u64,
}

/// The Gradient2-style adaptive concurrency limit; share it by `Arc`.
#[derive(Debug)]
pub struct AdaptiveLimit {
    cfg: AdaptiveConfig,
    limit: AtomicU32,
    inflight: AtomicU32,
    estimator: Mutex<Estimator>,
    stats: Arc<OverloadStats>,
}

impl AdaptiveLimit {
    /// A limit at `limit_initial`, published to `stats`; refuses an invalid
    /// `cfg`.
    pub fn new(cfg: AdaptiveConfig, stats: Arc<OverloadStats>) -> Result<Self, AdaptiveError> {
        cfg.validate()?;
        let short_window = cfg.short_window_samples;
        let warmup = cfg.warmup_samples.min(short_window);
        let estimator = Estimator {
            limit: f64::from(cfg.limit_initial),
            short: Ema::new(short_window, warmup),
            long: Ema::new(cfg.long_window_samples, cfg.warmup_samples),
            last_sample_ns: 0,
        };
        set(&stats.adaptive_limit, u64::from(cfg.limit_initial));
        Ok(AdaptiveLimit {
            limit: AtomicU32::new(cfg.limit_initial),
            inflight: AtomicU32::new(0),
            estimator: Mutex::new(estimator),
            stats,
            cfg,
        })
    }

    /// The current limit.
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Requests in flight now.
    pub fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Takes one in-flight slot if under the limit. Pair every `true` with
    /// one [`release`](Self::release).
    pub fn try_acquire(&self) -> bool {
        let limit = self.limit();
        let acquired = self
            .inflight
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < limit).then_some(n + 1)
            });
        match acquired {
            Ok(n) => {
                set(&self.stats.adaptive_inflight, u64::from(n + 1));
                true
            }
            Err(_) => {
                inc(&self.stats.adaptive_rejected);
                false
            }
        }
    }

    /// Returns one in-flight slot. A release without an acquire is a caller
    /// bug; it saturates at 0 rather than wrapping.
    pub fn release(&self) {
        let prev = self
            .inflight
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1));
        debug_assert!(prev.is_ok(), "release without acquire");
        let now = prev.map_or(0, |n| n - 1);
        set(&self.stats.adaptive_inflight, u64::from(now));
    }

    /// Feeds one completed request: its round-trip time and the number in
    /// flight when it started. Returns the limit after the update.
    pub fn on_sample(&self, rtt_ns: u64, inflight: u32, now_ns: u64) -> u32 {
        let Ok(mut est) = self.estimator.try_lock() else {
            inc(&self.stats.adaptive_samples_skipped);
            return self.limit();
        };
        est.last_sample_ns = now_ns;
        let limit = self.update(&mut est, rtt_ns.max(1) as f64, inflight);
        self.limit.store(limit, Ordering::Relaxed);
        set(&self.stats.adaptive_limit, u64::from(limit));
        set(&self.stats.rtt_short_ns, est.short.value as u64);
        set(&self.stats.rtt_long_ns, est.long.value as u64);
        limit
    }

    /// Short-term and long-term average RTT, ns.
    pub fn rtts_ns(&self) -> (u64, u64) {
        let get = |gauge: &std::sync::atomic::AtomicU64| gauge.load(Ordering::Relaxed);
        (get(&self.stats.rtt_short_ns), get(&self.stats.rtt_long_ns))
    }

    fn update(&self, est: &mut Estimator, rtt: f64, inflight: u32) -> u32 {
        let short = est.short.add(rtt);
        let mut long = est.long.add(rtt);
        if long / short > 2.0 {
            long *= 0.95;
            est.long.value = long;
        }
        if f64::from(inflight) >= est.limit / 2.0 {
            let cfg = &self.cfg;
            let gradient = (cfg.rtt_tolerance * long / short).clamp(0.5, 1.0);
            let target = est.limit * gradient + f64::from(cfg.queue_size);
            let smoothed = est.limit * (1.0 - cfg.smoothing) + target * cfg.smoothing;
            est.limit = smoothed.clamp(f64::from(cfg.limit_min), f64::from(cfg.limit_max));
        }
        est.limit as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::NS_PER_MS;

    fn limiter(cfg: AdaptiveConfig) -> (AdaptiveLimit, Arc<OverloadStats>) {
        let stats = Arc::new(OverloadStats::new());
        (AdaptiveLimit::new(cfg, stats.clone()).unwrap(), stats)
    }

    /// Feeds `n` samples of `rtt_ns` with the limiter fully used; checks the
    /// bounds after every one.
    fn feed(l: &AdaptiveLimit, n: u32, rtt_ns: u64, now_ns: &mut u64) -> u32 {
        let cfg = &l.cfg;
        for _ in 0..n {
            *now_ns += rtt_ns;
            let limit = l.on_sample(rtt_ns, l.limit(), *now_ns);
            assert!(
                (cfg.limit_min..=cfg.limit_max).contains(&limit),
                "limit {limit}"
            );
        }
        l.limit()
    }

    #[test]
    fn limit_falls_when_latency_rises_and_recovers_when_it_falls() {
        let (l, stats) = limiter(AdaptiveConfig::default());
        let mut now = 0;
        let steady = feed(&l, 1000, NS_PER_MS, &mut now);
        assert_eq!(steady, 256, "flat latency probes up to the maximum");
        let loaded = feed(&l, 100, 10 * NS_PER_MS, &mut now);
        assert!(loaded < steady / 4, "limit {loaded} after latency rose");
        let snap = stats.snapshot();
        assert!(snap.rtt_short_ns > 8 * NS_PER_MS);
        assert!(snap.rtt_long_ns < snap.rtt_short_ns / 2);
        assert_eq!(snap.adaptive_limit, u64::from(loaded));
        let recovered = feed(&l, 500, NS_PER_MS, &mut now);
        assert!(
            recovered > steady * 9 / 10,
            "limit {recovered} after recovery"
        );
        assert_eq!(
            l.rtts_ns(),
            (stats.snapshot().rtt_short_ns, stats.snapshot().rtt_long_ns)
        );
    }

    #[test]
    fn limit_stays_within_bounds_under_wild_samples() {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        let cfg = AdaptiveConfig {
            limit_min: 8,
            limit_max: 64,
            limit_initial: 16,
            ..AdaptiveConfig::default()
        };
        let (l, _) = limiter(cfg);
        let mut rng = SmallRng::seed_from_u64(1);
        for i in 0..20_000u64 {
            let rtt = rng.gen_range(0..1_000_000_000u64);
            let limit = l.on_sample(rtt, rng.gen_range(0..200), i);
            assert!((8..=64).contains(&limit));
        }
    }

    #[test]
    fn app_limited_samples_do_not_move_the_limit() {
        let (l, _) = limiter(AdaptiveConfig::default());
        for i in 0..500 {
            l.on_sample(NS_PER_MS, 2, i);
        }
        assert_eq!(l.limit(), 20);
    }

    #[test]
    fn acquire_is_bounded_by_the_limit_and_release_frees() {
        let (l, stats) = limiter(AdaptiveConfig {
            limit_initial: 4,
            ..AdaptiveConfig::default()
        });
        assert!((0..4).all(|_| l.try_acquire()));
        assert!(!l.try_acquire());
        assert_eq!(l.inflight(), 4);
        l.release();
        assert!(l.try_acquire());
        let snap = stats.snapshot();
        assert_eq!((snap.adaptive_inflight, snap.adaptive_rejected), (4, 1));
    }

    #[test]
    fn invalid_config_is_refused() {
        let bad = AdaptiveConfig {
            limit_min: 10,
            limit_max: 5,
            ..AdaptiveConfig::default()
        };
        assert!(AdaptiveLimit::new(bad, Arc::new(OverloadStats::new())).is_err());
    }
}
