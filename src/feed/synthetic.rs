//! The built-in synthetic feed: N providers quoting a random walk for every
//! instrument, paced to a target rate, deterministic under a seed.
//!
//! Each symbol has one "true" mid that random-walks; every provider quotes
//! it with its own skew and a spread jittered around the instrument's
//! typical spread. Now and then a provider goes quiet for a while (its
//! quotes go stale in the engine) or sends one spiking quote (the engine's
//! spike filter should reject it). All state is allocated in `new`.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{SourcePoll, TickSource};
use crate::clock::wall_ns;
use crate::model::{InstrumentTable, Mantissa, Tick};

/// Probability (per million ticks) that a quote is a spike.
pub(crate) const SPIKE_PPM_DEFAULT: u32 = 20;
/// Probability (per million ticks) that the quoting provider goes quiet.
pub(crate) const SILENCE_PPM_DEFAULT: u32 = 5;
/// How long a quiet provider stays quiet.
pub const SILENCE_NS: u64 = 3_000_000_000;

/// Settings of the synthetic feed.
#[derive(Debug, Clone, Copy)]
pub struct SyntheticConfig {
    /// Ticks per second across all symbols and providers; 0 = as fast as
    /// the ring takes them.
    pub rate_per_s: u64,
    /// Seed of the random walk: one seed, one tick sequence.
    pub seed: u64,
    /// Chance per million ticks that a quote is a spike.
    pub spike_ppm: u32,
    /// Chance per million ticks that the quoting provider goes quiet for
    /// [`SILENCE_NS`].
    pub silence_ppm: u32,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        SyntheticConfig {
            rate_per_s: 100_000,
            seed: 1,
            spike_ppm: SPIKE_PPM_DEFAULT,
            silence_ppm: SILENCE_PPM_DEFAULT,
        }
    }
}

struct SymbolState {
    mid: Mantissa,
    spread: Mantissa,
    /// Largest random-walk step, in points.
    step: Mantissa,
    floor: Mantissa,
}

/// The synthetic [`TickSource`].
pub struct SyntheticFeed {
    cfg: SyntheticConfig,
    rng: SmallRng,
    symbols: Vec<SymbolState>,
    skews: Vec<Mantissa>,
    /// Per provider: monotonic time until which it stays quiet.
    quiet_until_ns: Vec<u64>,
    start_ns: Option<u64>,
    wall_offset_ns: u64,
    emitted: u64,
    next_seq: u64,
}

impl SyntheticFeed {
    /// A feed over every instrument and provider of `table`, starting at each
    /// instrument's base price; allocates its state here.
    pub fn new(table: &InstrumentTable, cfg: SyntheticConfig) -> Self {
        let symbols = table
            .instruments()
            .iter()
            .map(|i| SymbolState {
                mid: i.base_price,
                spread: i.spread_points.max(1),
                step: (i.spread_points / 4).max(1),
                floor: (i.base_price / 10).max(1),
            })
            .collect();
        let skews = table.providers().iter().map(|p| p.skew_points).collect();
        SyntheticFeed {
            rng: SmallRng::seed_from_u64(cfg.seed),
            cfg,
            symbols,
            skews,
            quiet_until_ns: vec![0; table.providers().len()],
            start_ns: None,
            wall_offset_ns: 0,
            emitted: 0,
            next_seq: 1,
        }
    }

    /// How many ticks are due at `now_ns` under the configured rate.
    fn due(&mut self, now_ns: u64, room: usize) -> usize {
        let start = *self.start_ns.get_or_insert_with(|| {
            self.wall_offset_ns = wall_ns().saturating_sub(now_ns);
            now_ns
        });
        if self.cfg.rate_per_s == 0 {
            return room;
        }
        let elapsed = u128::from(now_ns.saturating_sub(start));
        let target = (elapsed * u128::from(self.cfg.rate_per_s) / 1_000_000_000) as u64;
        (target.saturating_sub(self.emitted) as usize).min(room)
    }

    /// Produces one quote (not paced): exposed for benches and tests.
    pub fn next_tick(&mut self, now_ns: u64) -> Tick {
        let symbol = self.rng.gen_range(0..self.symbols.len());
        let mut provider = self.rng.gen_range(0..self.skews.len());
        if self.quiet_until_ns[provider] > now_ns {
            // A quiet provider sends nothing; another one quotes instead.
            provider = (provider + 1) % self.skews.len();
        }
        if self.rng.gen_ratio(self.cfg.silence_ppm, 1_000_000) && self.skews.len() > 1 {
            self.quiet_until_ns[provider] = now_ns + SILENCE_NS;
        }
        let spike = self.rng.gen_ratio(self.cfg.spike_ppm, 1_000_000);
        let s = &mut self.symbols[symbol];
        s.mid = (s.mid + self.rng.gen_range(-s.step..=s.step)).max(s.floor);
        let jitter = self.rng.gen_range(0..=s.spread / 4);
        let spread = s.spread + jitter;
        let mut mid = s.mid + self.skews[provider];
        if spike {
            mid += mid / 20; // a 5% jump: far outside any sane spike band
        }
        let bid = mid - spread / 2;
        let size = 1_000_000 * self.rng.gen_range(1..=10u64);
        let seq = self.next_seq;
        self.next_seq += 1;
        Tick {
            bid,
            ask: bid + spread,
            bid_size: size,
            ask_size: size,
            provider_time_ns: now_ns + self.wall_offset_ns,
            receive_time_ns: now_ns,
            feed_seq: seq,
            symbol: symbol as u16,
            provider: provider as u16,
            flags: 0,
        }
    }
}

impl TickSource for SyntheticFeed {
    fn poll(&mut self, now_ns: u64, out: &mut [Tick]) -> SourcePoll {
        let n = self.due(now_ns, out.len());
        if n == 0 {
            return SourcePoll::Idle;
        }
        for slot in &mut out[..n] {
            *slot = self.next_tick(now_ns);
        }
        self.emitted += n as u64;
        SourcePoll::Ready(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(seed: u64, rate: u64) -> SyntheticFeed {
        let table = InstrumentTable::default_with_providers(3);
        SyntheticFeed::new(
            &table,
            SyntheticConfig {
                rate_per_s: rate,
                seed,
                ..SyntheticConfig::default()
            },
        )
    }

    fn collect(f: &mut SyntheticFeed, polls: &[u64]) -> Vec<Tick> {
        let mut buf = [Tick::EMPTY; 256];
        let mut out = Vec::new();
        for &now in polls {
            if let SourcePoll::Ready(n) = f.poll(now, &mut buf) {
                out.extend_from_slice(&buf[..n]);
            }
        }
        out
    }

    #[test]
    fn same_seed_same_ticks() {
        let polls = [1_000, 2_000_000, 3_000_000];
        let strip = |v: Vec<Tick>| {
            v.into_iter()
                .map(|t| (t.symbol, t.provider, t.bid, t.ask))
                .collect::<Vec<_>>()
        };
        let a = strip(collect(&mut feed(7, 100_000), &polls));
        let b = strip(collect(&mut feed(7, 100_000), &polls));
        let c = strip(collect(&mut feed(8, 100_000), &polls));
        assert!(!a.is_empty());
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn paces_to_the_configured_rate() {
        let mut f = feed(1, 100_000); // 100 per millisecond
        let polls: Vec<u64> = (0..=10).map(|ms| ms * 1_000_000).collect();
        let ticks = collect(&mut f, &polls);
        assert_eq!(ticks.len(), 1_000);
        assert!(ticks.windows(2).all(|w| w[1].feed_seq == w[0].feed_seq + 1));
    }

    #[test]
    fn quotes_are_sane() {
        let mut f = feed(3, 0);
        let table = InstrumentTable::default_with_providers(3);
        for t in collect(&mut f, &[1, 2, 3, 4]) {
            assert!(t.bid < t.ask, "{t:?}");
            assert!(t.bid > 0);
            assert!((t.symbol as usize) < table.len());
            assert!(t.provider < 3);
        }
    }
}
