//! Deterministic replay: a capture through the engine's aggregation on one
//! thread, with engine time taken from the capture, so the same capture
//! gives the same published price stream — and the same digest — on every
//! run at every speed.
//!
//! Why engine time comes from the capture: the aggregator's quote-age rule
//! and the stale sweep decide by time. Driven by the wall clock (as the
//! live pipeline is), which quotes are stale at a tick depends on how fast
//! the replay runs and how the threads were scheduled, and so does the
//! stream. Here every tick is applied at its recorded receive time,
//! re-based onto one monotonic timeline (a capture that spans restarts
//! jumps back in receive time: each later session continues where the
//! previous one ended), and the stale sweep runs every
//! [`STALE_SWEEP_NS`] of that timeline. Pacing (`--speed`) only decides
//! when a tick is released, never what it produces.
//!
//! No tick is dropped: there is no ring between the reader and the engine,
//! the engine takes each released tick before the next is read
//! (back-pressure by construction). Latency is measured per tick from its
//! release (when pacing let it go) to its price being computed, so pacing
//! waits are not in it.

use crate::clock::Clock;
use crate::config::Config;
use crate::engine::{Aggregator, EngineStats, TickOutcome, STALE_SWEEP_NS};
use crate::model::{Price, ProviderHealth, Tick};
use crate::runtime::{SourcePoll, TickSource};

use crate::capture::replay::{ReplaySource, REANCHOR_BACKWARD_NS};

/// Ticks taken from the source per poll.
const BATCH: usize = 256;

/// FNV-1a 64 over the published stream: per price its symbol, sequence,
/// bid, ask and flags, little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamDigest(u64);

impl Default for StreamDigest {
    fn default() -> Self {
        StreamDigest(0xcbf2_9ce4_8422_2325)
    }
}

impl StreamDigest {
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// Adds one published price.
    pub fn add(&mut self, p: &Price) {
        self.bytes(&p.symbol.to_le_bytes());
        self.bytes(&p.seq.to_le_bytes());
        self.bytes(&p.bid.to_le_bytes());
        self.bytes(&p.ask.to_le_bytes());
        self.bytes(&[p.flags]);
    }

    /// The digest so far.
    pub fn value(&self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for StreamDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Recorded receive times onto one monotonic engine timeline.
#[derive(Debug, Default)]
pub struct Timeline {
    /// (engine time at the session start, its first receive time, the
    /// highest receive time seen in it).
    session: Option<(u64, u64, u64)>,
    first_engine_ns: Option<u64>,
    last_engine_ns: u64,
    sessions: u64,
}

/// Engine time of the first tick (any value works; times are not digested).
const ENGINE_BASE_NS: u64 = 1_000_000_000;

impl Timeline {
    /// Engine time of a tick received at `recv_ns` by the recording process.
    pub fn map(&mut self, recv_ns: u64) -> u64 {
        let new_session = match self.session {
            None => true,
            Some((_, _, max)) => recv_ns.saturating_add(REANCHOR_BACKWARD_NS) < max,
        };
        if new_session {
            let start = self.session.map_or(ENGINE_BASE_NS, |_| self.last_engine_ns);
            self.session = Some((start, recv_ns, recv_ns));
            self.sessions += 1;
        }
        let (start, first, max) = self
            .session
            .get_or_insert((ENGINE_BASE_NS, recv_ns, recv_ns));
        *max = (*max).max(recv_ns);
        let engine = *start + (*max - *first);
        self.first_engine_ns.get_or_insert(engine);
        self.last_engine_ns = engine;
        engine
    }

    /// Recorded time covered: the sum of every session's span.
    pub fn span_ns(&self) -> u64 {
        self.first_engine_ns
            .map_or(0, |f| self.last_engine_ns.saturating_sub(f))
    }

    /// Recording sessions seen (restarts of the recording process + 1).
    pub fn sessions(&self) -> u64 {
        self.sessions
    }
}

/// What a deterministic replay produced.
#[derive(Debug)]
pub struct DeterministicRun {
    /// Ticks taken from the capture and applied.
    pub ticks: u64,
    /// Prices published (ticks and stale sweeps).
    pub published: u64,
    /// Digest of every published price, in order.
    pub digest: StreamDigest,
    /// The receive times the replay was paced on.
    pub timeline: Timeline,
    /// Release → price computed, in ns (pacing waits excluded).
    pub latency: hdrhistogram::Histogram<u64>,
}

struct Engine {
    agg: Aggregator,
    symbols: usize,
    next_sweep_ns: u64,
    published: u64,
    digest: StreamDigest,
}

impl Engine {
    fn publish(&mut self, outcome: TickOutcome) {
        if outcome == TickOutcome::Published {
            if let Some(p) = self.agg.output() {
                self.digest.add(p);
                self.published += 1;
            }
        }
    }

    fn sweep_at(&mut self, now_ns: u64) {
        for sym in 0..self.symbols {
            let o = self.agg.reevaluate(sym, now_ns);
            self.publish(o);
        }
    }

    /// Runs the stale sweeps due by `engine_ns`, each at its own time (a
    /// long gap runs its first and its last: the ones between find nothing
    /// new to flag).
    fn sweeps_until(&mut self, engine_ns: u64) {
        if self.next_sweep_ns == 0 {
            self.next_sweep_ns = engine_ns;
        }
        if self.next_sweep_ns > engine_ns {
            return;
        }
        let first = self.next_sweep_ns;
        self.sweep_at(first);
        let last = first + (engine_ns - first) / STALE_SWEEP_NS * STALE_SWEEP_NS;
        if last > first {
            self.sweep_at(last);
        }
        self.next_sweep_ns = last + STALE_SWEEP_NS;
    }

    fn apply(&mut self, t: &mut Tick, timeline: &mut Timeline) {
        let engine_ns = timeline.map(t.receive_time_ns);
        self.sweeps_until(engine_ns);
        t.receive_time_ns = engine_ns;
        let o = self.agg.on_tick(t, engine_ns);
        self.publish(o);
    }
}

/// Replays `source` (its pacing read from `clock`) through the engine.
pub fn run(source: &mut ReplaySource, config: &Config, clock: &dyn Clock) -> DeterministicRun {
    source.keep_recorded_times();
    let table = &config.table;
    let health = ProviderHealth::new(table.providers().len());
    let stats = std::sync::Arc::new(EngineStats::default());
    let mut engine = Engine {
        agg: Aggregator::new(table, &config.engine, health, stats),
        symbols: table.len(),
        next_sweep_ns: 0,
        published: 0,
        digest: StreamDigest::default(),
    };
    let mut timeline = Timeline::default();
    let mut latency = crate::runtime::latency::latency_histogram();
    let mut batch = [Tick::EMPTY; BATCH];
    let mut ticks = 0u64;
    loop {
        let released_ns = clock.now_ns();
        match source.poll(released_ns, &mut batch) {
            SourcePoll::Ready(n) => {
                for t in &mut batch[..n] {
                    engine.apply(t, &mut timeline);
                    let took = clock.now_ns().saturating_sub(released_ns);
                    let _ = latency.record(took.max(1));
                }
                ticks += n as u64;
            }
            SourcePoll::Idle => std::thread::yield_now(),
            SourcePoll::Done => break,
        }
    }
    DeterministicRun {
        ticks,
        published: engine.published,
        digest: engine.digest,
        timeline,
        latency,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn sessions_continue_one_timeline_and_their_spans_add_up() {
        let mut t = Timeline::default();
        assert_eq!(t.map(100 * S), ENGINE_BASE_NS);
        assert_eq!(t.map(102 * S), ENGINE_BASE_NS + 2 * S);
        // A restart: receive times start again near 5 s.
        assert_eq!(t.map(5 * S), ENGINE_BASE_NS + 2 * S);
        assert_eq!(t.map(8 * S), ENGINE_BASE_NS + 5 * S);
        assert_eq!((t.span_ns(), t.sessions()), (5 * S, 2));
    }

    #[test]
    fn a_small_step_back_keeps_engine_time_monotonic() {
        let mut t = Timeline::default();
        t.map(10 * S);
        let a = t.map(11 * S);
        let b = t.map(11 * S - 1_000); // another feed's tick, 1 µs earlier
        let c = t.map(11 * S + 500);
        assert!(a <= b && b <= c, "{a} {b} {c}");
        assert_eq!(t.sessions(), 1);
        assert_eq!(c - a, 500);
    }

    #[test]
    fn the_digest_covers_every_digested_field() {
        let p = Price::EMPTY;
        let base = {
            let mut d = StreamDigest::default();
            d.add(&p);
            d
        };
        let changed = [
            Price { symbol: 1, ..p },
            Price { seq: 2, ..p },
            Price { bid: 3, ..p },
            Price { ask: 4, ..p },
            Price { flags: 5, ..p },
        ];
        for q in changed {
            let mut d = StreamDigest::default();
            d.add(&q);
            assert_ne!(d, base, "{q:?}");
        }
        // Times are not part of the stream's identity.
        let mut d = StreamDigest::default();
        d.add(&Price {
            engine_time_ns: 9,
            receive_time_ns: 9,
            ..p
        });
        assert_eq!(d, base);
    }
}
