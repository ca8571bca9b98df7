//! XFetch: probabilistic early refresh of cached values, and TTL jitter.
//!
//! A cache entry that expires for everyone at once sends every reader to the
//! backing source in the same instant (a stampede). XFetch (Vattani, Chierichetti
//! and Lowenstein, "Optimal Probabilistic Cache Stampede Prevention", VLDB 2015)
//! lets each reader decide on its own to recompute early, with a probability
//! that rises as expiry nears and with the recompute cost:
//!
//! `refresh  iff  now - delta * beta * ln(u) >= expiry`, `u` uniform in (0, 1]
//!
//! where `delta` is the measured recompute time stored with the value and
//! `beta` (default 1) scales eagerness. All times are nanoseconds on the
//! injected clock. Reading an entry allocates nothing and never blocks;
//! the RNG is the caller's (seeded in tests).
//!
//! [`jittered_ttl_ns`] spreads the expiries of entries filled together
//! (say at start-up) so they do not all expire in the same second either.

use rand::Rng;

/// Default eagerness of the early refresh.
pub const BETA_DEFAULT: f64 = 1.0;
/// Default TTL jitter: ±20%.
pub const TTL_JITTER_PCT_DEFAULT: u32 = 20;

/// The XFetch decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct XFetch;

impl XFetch {
    /// Whether this reader should recompute the value now (before or at
    /// `expiry_ns`). Past expiry it is always true.
    pub fn should_refresh(
        now_ns: u64,
        expiry_ns: u64,
        delta_ns: u64,
        beta: f64,
        rng: &mut impl Rng,
    ) -> bool {
        // gen::<f64>() is in [0, 1); 1 - x is in (0, 1], so ln never sees 0
        // and -ln(u) is finite and >= 0.
        let u = 1.0 - rng.gen::<f64>();
        let early_ns = delta_ns as f64 * beta.max(0.0) * -u.ln();
        // `as u64` saturates, so a huge product cannot wrap.
        now_ns.saturating_add(early_ns as u64) >= expiry_ns
    }
}

/// A cached value with what XFetch needs to know about it.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheEntry<V> {
    /// The cached value.
    pub value: V,
    /// When the value expires, on the caller's clock in ns.
    pub expiry_ns: u64,
    /// How long the last recompute took.
    pub delta_ns: u64,
}

impl<V> CacheEntry<V> {
    /// A value computed over `[started_ns, now_ns]` that lives for `ttl_ns`.
    pub fn computed(value: V, started_ns: u64, now_ns: u64, ttl_ns: u64) -> Self {
        CacheEntry {
            value,
            expiry_ns: now_ns.saturating_add(ttl_ns),
            delta_ns: now_ns.saturating_sub(started_ns),
        }
    }

    /// True from `expiry_ns` on.
    pub fn is_expired(&self, now_ns: u64) -> bool {
        now_ns >= self.expiry_ns
    }

    /// XFetch's early-refresh draw for this entry ([`XFetch::should_refresh`]).
    pub fn should_refresh(&self, now_ns: u64, beta: f64, rng: &mut impl Rng) -> bool {
        XFetch::should_refresh(now_ns, self.expiry_ns, self.delta_ns, beta, rng)
    }
}

/// `ttl_ns` moved by a uniform amount within ±`jitter_pct` percent
/// (clamped to 0..=100).
pub fn jittered_ttl_ns(ttl_ns: u64, jitter_pct: u32, rng: &mut impl Rng) -> u64 {
    let spread = (u128::from(ttl_ns) * u128::from(jitter_pct.min(100)) / 100) as u64;
    let lo = ttl_ns - spread;
    let hi = ttl_ns.saturating_add(spread);
    rng.gen_range(lo..=hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::NS_PER_MS;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    const TTL_NS: u64 = 10_000 * NS_PER_MS;
    const DELTA_NS: u64 = 200 * NS_PER_MS;

    /// 10,000 readers, one per millisecond over the 10 s life of an entry.
    /// A reader that decides to refresh starts a recompute taking `delta`
    /// (others keep reading the old value meanwhile) that renews the expiry.
    /// Then, at the original expiry instant, 1,000 readers arrive at once.
    #[test]
    fn readers_refresh_early_and_never_stampede_at_expiry() {
        let mut rng = SmallRng::seed_from_u64(42);
        let t0 = 1_000 * NS_PER_MS;
        let original_expiry = t0 + TTL_NS;
        let mut entry = CacheEntry {
            value: 0u32,
            expiry_ns: original_expiry,
            delta_ns: DELTA_NS,
        };
        let mut refresh_done_ns: Option<u64> = None;
        let (mut refreshes, mut expired_reads, mut first_refresh_ns) = (0, 0, None);
        for i in 0..10_000u64 {
            let now = t0 + i * NS_PER_MS;
            if let Some(done) = refresh_done_ns.filter(|&d| now >= d) {
                entry = CacheEntry::computed(entry.value + 1, done - DELTA_NS, done, TTL_NS);
                refresh_done_ns = None;
            }
            expired_reads += entry.is_expired(now) as u32;
            if refresh_done_ns.is_none() && entry.should_refresh(now, BETA_DEFAULT, &mut rng) {
                refreshes += 1;
                first_refresh_ns.get_or_insert(now);
                refresh_done_ns = Some(now + DELTA_NS);
            }
        }
        let first = first_refresh_ns.expect("at least one early refresh");
        assert!(refreshes >= 1);
        assert!(
            first + DELTA_NS < original_expiry,
            "refresh finished before expiry"
        );
        assert_eq!(expired_reads, 0, "no reader ever saw an expired entry");
        assert!(entry.value >= 1 && entry.expiry_ns > original_expiry);

        // The stampede instant: everyone reads at the old expiry.
        let deciders = (0..1_000)
            .filter(|_| entry.should_refresh(original_expiry, BETA_DEFAULT, &mut rng))
            .count();
        assert!(
            deciders <= 2,
            "{deciders} readers would refresh at the old expiry"
        );

        // Without the renewal (plain TTL) they would all have gone at once:
        // the same check against the old expiry proves the test can fail.
        let stale = CacheEntry {
            value: 0u32,
            expiry_ns: original_expiry,
            delta_ns: DELTA_NS,
        };
        let stampede = (0..1_000)
            .filter(|_| stale.should_refresh(original_expiry, BETA_DEFAULT, &mut rng))
            .count();
        assert_eq!(stampede, 1_000);
    }

    #[test]
    fn refresh_probability_follows_the_formula() {
        // P(refresh at `expiry - x`) = exp(-x / (delta * beta)).
        let mut rng = SmallRng::seed_from_u64(9);
        let expiry = 100 * TTL_NS;
        let x = DELTA_NS; // one delta before expiry: e^-1 ~ 0.368
        let hits = (0..20_000)
            .filter(|_| XFetch::should_refresh(expiry - x, expiry, DELTA_NS, 1.0, &mut rng))
            .count();
        let p = hits as f64 / 20_000.0;
        assert!((p - (-1.0f64).exp()).abs() < 0.02, "p = {p}");
        // Far from expiry practically never; beta 0 means plain TTL.
        assert!(!XFetch::should_refresh(0, expiry, DELTA_NS, 1.0, &mut rng));
        assert!(!XFetch::should_refresh(
            expiry - 1,
            expiry,
            DELTA_NS,
            0.0,
            &mut rng
        ));
        assert!(XFetch::should_refresh(
            expiry, expiry, DELTA_NS, 0.0, &mut rng
        ));
    }

    #[test]
    fn ttl_jitter_stays_within_twenty_percent_and_spreads() {
        let mut rng = SmallRng::seed_from_u64(5);
        let ttl = 60_000 * NS_PER_MS;
        let (mut lo, mut hi) = (u64::MAX, 0);
        for _ in 0..10_000 {
            let t = jittered_ttl_ns(ttl, TTL_JITTER_PCT_DEFAULT, &mut rng);
            assert!(
                (48_000 * NS_PER_MS..=72_000 * NS_PER_MS).contains(&t),
                "{t}"
            );
            lo = lo.min(t);
            hi = hi.max(t);
        }
        assert!(
            lo < 49_000 * NS_PER_MS && hi > 71_000 * NS_PER_MS,
            "{lo}..{hi}"
        );
        assert_eq!(jittered_ttl_ns(ttl, 0, &mut rng), ttl);
    }
}
