//! Per-symbol aggregation: provider quotes in, tradable prices out.
//!
//! For each symbol the aggregator keeps the latest quote of every provider.
//! The aggregated price is the best bid and best ask across providers that
//! are healthy (not excluded by the operator or a breaker) and fresh (quote
//! younger than `max_quote_age`). The aggregator publishes that top of book
//! without markup; each tier's price is derived where it is read
//! ([`crate::model::Markups`]). All state is allocated in [`Aggregator::new`]; `on_tick` and
//! `sweep_stale` only index and overwrite arrays.
//!
//! Rules, in the order they apply to a tick:
//! 1. **Validation**: unknown symbol or provider, a missing side, a
//!    non-positive price or a crossed provider quote (bid > ask) is
//!    rejected and counted. A locked provider quote (bid == ask) is kept.
//! 2. **Spike filter**: a quote whose mid moves more than `spike_bps` basis
//!    points from the symbol's last accepted mid is rejected and counted.
//!    After `spike_confirm` consecutive spike rejections for the symbol the
//!    move is taken as real (every provider is quoting the new level) and
//!    the next quote is accepted, so a genuine gap cannot freeze a price.
//! 3. **Best of N**: best bid = highest bid, best ask = lowest ask over the
//!    healthy, fresh quotes. Sizes at the same best price add up. Each side
//!    is aggregated over the providers that quote it: a side no provider
//!    quotes is absent ([`NO_PRICE`]) in the published price.
//! 4. **Crossed or locked aggregate** (best bid >= best ask, i.e. two
//!    providers disagree): the aggregate falls back to the freshest
//!    contributing provider's own quote (never crossed, by rule 1) and is
//!    flagged `INDICATIVE`, so terminals show it but do not trade on it.
//! 5. **Flags**: `SINGLE_PROVIDER` when one provider contributes;
//!    `INDICATIVE` when a contributing quote was itself indicative; `STALE`
//!    when no provider is fresh — the last price is then republished once,
//!    flagged stale, by `sweep_stale` or the next tick.
//! 6. **Publish** only when the result differs from the last published
//!    price; each publish increments the symbol's sequence number, shared by
//!    all of its tiers.
//!
//! **Withdrawals.** A tick flagged [`tick_flags::WITHDRAWN_BID`] or
//! `WITHDRAWN_ASK` (a FIX delete, a snapshot without the side, a
//! MarketDataRequestReject of the symbol) removes that side of the
//! provider's quote at once and re-aggregates on the same tick, so the
//! withdrawn price is out of the very next publish; an unflagged side of
//! the tick updates the provider's other side (checked against the spike
//! filter's last mid, and withdrawn too if it fails). A provider's quote
//! with both sides withdrawn no longer counts.

use std::sync::Arc;

use super::stats::EngineStats;
use crate::config::EngineConfig;
use crate::model::{
    price_flags, tick_flags, InstrumentTable, Mantissa, Price, ProviderHealth, Tick, NO_PRICE,
    TOP_OF_BOOK,
};

pub use crate::model::PRICE_MAX;

#[derive(Debug, Clone, Copy, Default)]
struct Quote {
    bid: Mantissa,
    ask: Mantissa,
    bid_size: u64,
    ask_size: u64,
    provider_time_ns: u64,
    receive_time_ns: u64,
    indicative: bool,
    valid: bool,
}

/// The aggregated top of book before tier markups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Top {
    bid: Mantissa,
    ask: Mantissa,
    bid_size: u64,
    ask_size: u64,
    flags: u8,
    providers: u8,
}

#[derive(Debug, Clone, Copy)]
struct SymbolState {
    last_mid: Mantissa,
    spike_streak: u32,
    seq: u64,
    published: Option<Top>,
}

/// What happened to one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickOutcome {
    /// A new aggregated top of book was produced ([`Aggregator::output`]).
    Published,
    /// Accepted, but the aggregated price did not change.
    Unchanged,
    /// Refused: unknown symbol or provider, bid not positive, bid above ask,
    /// or ask above [`PRICE_MAX`]. Counted in `invalid`.
    Invalid,
    /// Refused as a spike: the mid moved more than `spike_bps` from the last
    /// accepted mid, and fewer than `spike_confirm` ticks in a row confirmed it.
    Spike,
}

/// The aggregation state for every symbol.
pub struct Aggregator {
    providers: usize,
    max_quote_age_ns: u64,
    spike_bps: i128,
    spike_confirm: u32,
    /// `symbols * providers` latest quotes.
    quotes: Box<[Quote]>,
    state: Box<[SymbolState]>,
    health: Arc<ProviderHealth>,
    stats: Arc<EngineStats>,
    /// The top of book of the last publish, while `published` says so.
    out: Price,
    published: bool,
    /// Stamped on every price: the stream this engine's sequences number.
    stream_id: u64,
}

impl Aggregator {
    /// Allocates every per-(symbol, provider) quote slot now, sized from
    /// `table`; the hot path allocates nothing after this.
    pub fn new(
        table: &InstrumentTable,
        cfg: &EngineConfig,
        health: Arc<ProviderHealth>,
        stats: Arc<EngineStats>,
    ) -> Self {
        let (symbols, providers) = (table.len(), table.providers().len());
        Aggregator {
            providers,
            max_quote_age_ns: cfg.max_quote_age_ms * 1_000_000,
            spike_bps: i128::from(cfg.spike_bps),
            spike_confirm: cfg.spike_confirm,
            quotes: vec![Quote::default(); symbols * providers].into_boxed_slice(),
            state: vec![
                SymbolState {
                    last_mid: 0,
                    spike_streak: 0,
                    seq: 0,
                    published: None,
                };
                symbols
            ]
            .into_boxed_slice(),
            health,
            stats,
            out: Price::EMPTY,
            published: false,
            stream_id: crate::model::fresh_stream_id(),
        }
    }

    /// The same engine numbering stream `stream_id` (nonzero) instead of
    /// the fresh random one [`Aggregator::new`] picked: a deterministic
    /// replay, or a test.
    pub fn with_stream_id(mut self, stream_id: u64) -> Self {
        assert!(stream_id != 0, "a stream id is nonzero");
        self.stream_id = stream_id;
        self
    }

    /// The stream this engine's sequences number (stamped on every price):
    /// picked at random when the engine was built, so a restarted process
    /// is a new stream.
    pub fn stream_id(&self) -> u64 {
        self.stream_id
    }

    /// The tier-less top of book (tier [`TOP_OF_BOOK`], no markup) produced
    /// by the last call that returned `Published`; `None` after any other
    /// outcome. Tiers are derived where they are read
    /// ([`crate::model::Markups::apply`]).
    #[inline]
    pub fn output(&self) -> Option<&Price> {
        self.published.then_some(&self.out)
    }

    /// Number of symbols aggregated (the instrument table's length).
    pub fn symbols(&self) -> usize {
        self.state.len()
    }

    /// Applies one tick at engine time `now_ns` (monotonic).
    #[inline]
    pub fn on_tick(&mut self, t: &Tick, now_ns: u64) -> TickOutcome {
        self.published = false;
        if t.flags & tick_flags::WITHDRAWN != 0 {
            return self.on_withdrawal(t, now_ns);
        }
        if !self.valid(t) {
            self.stats.invalid.inc();
            return TickOutcome::Invalid;
        }
        let sym = t.symbol as usize;
        if self.is_spike(sym, t) {
            self.stats.spikes_rejected.inc();
            return TickOutcome::Spike;
        }
        self.quotes[sym * self.providers + t.provider as usize] = Quote {
            bid: t.bid,
            ask: t.ask,
            bid_size: t.bid_size,
            ask_size: t.ask_size,
            provider_time_ns: t.provider_time_ns,
            receive_time_ns: t.receive_time_ns,
            indicative: t.flags & tick_flags::INDICATIVE != 0,
            valid: true,
        };
        match self.aggregate(sym, now_ns) {
            Some(top) => self.publish(sym, top, t.provider_time_ns, t.receive_time_ns, now_ns),
            None => self.publish_stale(sym, now_ns),
        }
    }

    /// A withdrawal tick (see the module docs): the flagged sides leave,
    /// an unflagged side is updated, and the symbol is aggregated again.
    fn on_withdrawal(&mut self, t: &Tick, now_ns: u64) -> TickOutcome {
        if !self.valid_withdrawal(t) {
            self.stats.invalid.inc();
            return TickOutcome::Invalid;
        }
        self.stats.withdrawals.inc();
        let sym = t.symbol as usize;
        let (mut bid, mut ask) = (t.bid, t.ask);
        for side in [&mut bid, &mut ask] {
            if *side != NO_PRICE && self.side_is_spike(sym, *side) {
                self.stats.spikes_rejected.inc();
                *side = NO_PRICE;
            }
        }
        let q = &mut self.quotes[sym * self.providers + t.provider as usize];
        (q.bid, q.bid_size) = if bid == NO_PRICE {
            (NO_PRICE, 0)
        } else {
            (bid, t.bid_size)
        };
        (q.ask, q.ask_size) = if ask == NO_PRICE {
            (NO_PRICE, 0)
        } else {
            (ask, t.ask_size)
        };
        if bid != NO_PRICE || ask != NO_PRICE {
            // The side that stays was quoted now.
            (q.provider_time_ns, q.receive_time_ns) = (t.provider_time_ns, t.receive_time_ns);
            q.indicative = t.flags & tick_flags::INDICATIVE != 0;
        }
        q.valid = q.bid != NO_PRICE || q.ask != NO_PRICE;
        match self.aggregate(sym, now_ns) {
            Some(top) => self.publish(sym, top, t.provider_time_ns, t.receive_time_ns, now_ns),
            None => self.publish_stale(sym, now_ns),
        }
    }

    /// Ids in range; a withdrawn side carries [`NO_PRICE`] and an
    /// unflagged side a valid price (checked on both ends: the feed builds
    /// them so, the engine refuses anything else).
    fn valid_withdrawal(&self, t: &Tick) -> bool {
        let side_ok = |px: Mantissa, withdrawn: bool| {
            if withdrawn {
                px == NO_PRICE
            } else {
                px > 0 && px <= PRICE_MAX
            }
        };
        (t.symbol as usize) < self.state.len()
            && (t.provider as usize) < self.providers
            && side_ok(t.bid, t.flags & tick_flags::WITHDRAWN_BID != 0)
            && side_ok(t.ask, t.flags & tick_flags::WITHDRAWN_ASK != 0)
    }

    /// One side against the last accepted mid, by the spike threshold
    /// (no streak: a one-sided update never moves the mid).
    fn side_is_spike(&self, sym: usize, px: Mantissa) -> bool {
        let last = self.state[sym].last_mid;
        last > 0 && i128::from((px - last).abs()) * 10_000 > i128::from(last) * self.spike_bps
    }

    fn valid(&self, t: &Tick) -> bool {
        (t.symbol as usize) < self.state.len()
            && (t.provider as usize) < self.providers
            && t.bid > 0
            && t.bid <= t.ask
            && t.ask <= PRICE_MAX
    }

    fn is_spike(&mut self, sym: usize, t: &Tick) -> bool {
        let mid = t.bid / 2 + t.ask / 2;
        let st = &mut self.state[sym];
        if st.last_mid > 0 {
            let moved = i128::from((mid - st.last_mid).abs()) * 10_000;
            if moved > i128::from(st.last_mid) * self.spike_bps {
                st.spike_streak += 1;
                if st.spike_streak <= self.spike_confirm {
                    return true;
                }
                self.stats.spikes_confirmed.inc();
            }
        }
        st.last_mid = mid;
        st.spike_streak = 0;
        false
    }

    /// Best bid / best ask over healthy, fresh quotes; `None` if none is.
    fn aggregate(&self, sym: usize, now_ns: u64) -> Option<Top> {
        let quotes = &self.quotes[sym * self.providers..(sym + 1) * self.providers];
        let mut top = Top {
            bid: Mantissa::MIN,
            ask: Mantissa::MAX,
            bid_size: 0,
            ask_size: 0,
            flags: 0,
            providers: 0,
        };
        // The freshest two-sided quote: the fallback of a crossed book.
        let mut freshest: Option<&Quote> = None;
        for (p, q) in quotes.iter().enumerate() {
            if !q.valid
                || now_ns.saturating_sub(q.receive_time_ns) > self.max_quote_age_ns
                || !self.health.is_healthy(p)
            {
                continue;
            }
            top.providers += 1;
            if q.indicative {
                top.flags |= price_flags::INDICATIVE;
            }
            let two_sided = q.bid != NO_PRICE && q.ask != NO_PRICE;
            if two_sided && freshest.is_none_or(|f| q.receive_time_ns >= f.receive_time_ns) {
                freshest = Some(q);
            }
            if q.bid != NO_PRICE {
                let better = q.bid > top.bid;
                merge_side(&mut top.bid, &mut top.bid_size, q.bid, q.bid_size, better);
            }
            if q.ask != NO_PRICE {
                let better = q.ask < top.ask;
                merge_side(&mut top.ask, &mut top.ask_size, q.ask, q.ask_size, better);
            }
        }
        if top.providers == 0 {
            return None;
        }
        // Mantissa::MIN is NO_PRICE already; an ask nobody quotes is too.
        const _: () = assert!(Mantissa::MIN == NO_PRICE);
        if top.ask == Mantissa::MAX {
            top.ask = NO_PRICE;
        }
        let both = top.bid != NO_PRICE && top.ask != NO_PRICE;
        if both && top.bid >= top.ask && top.providers > 1 {
            self.stats.crossed.inc();
            if let Some(f) = freshest {
                (top.bid, top.ask, top.bid_size, top.ask_size) =
                    (f.bid, f.ask, f.bid_size, f.ask_size);
            }
            top.flags |= price_flags::INDICATIVE;
        }
        if top.providers == 1 {
            top.flags |= price_flags::SINGLE_PROVIDER;
        }
        Some(top)
    }

    fn publish(
        &mut self,
        sym: usize,
        top: Top,
        provider_time_ns: u64,
        receive_time_ns: u64,
        now_ns: u64,
    ) -> TickOutcome {
        let st = &mut self.state[sym];
        if st.published == Some(top) {
            self.stats.unchanged.inc();
            return TickOutcome::Unchanged;
        }
        st.published = Some(top);
        st.seq += 1;
        let seq = st.seq;
        self.fill_top(sym, &top, seq, provider_time_ns, receive_time_ns, now_ns);
        self.stats.published.inc();
        TickOutcome::Published
    }

    fn publish_stale(&mut self, sym: usize, now_ns: u64) -> TickOutcome {
        let st = &mut self.state[sym];
        let Some(mut top) = st.published else {
            return TickOutcome::Unchanged;
        };
        if top.flags & price_flags::STALE != 0 {
            return TickOutcome::Unchanged;
        }
        top.flags = price_flags::STALE;
        top.providers = 0;
        st.published = Some(top);
        st.seq += 1;
        let seq = st.seq;
        self.fill_top(sym, &top, seq, 0, now_ns, now_ns);
        self.stats.stale.inc();
        TickOutcome::Published
    }

    fn fill_top(
        &mut self,
        sym: usize,
        top: &Top,
        seq: u64,
        provider_time_ns: u64,
        receive_time_ns: u64,
        now_ns: u64,
    ) {
        self.out = Price {
            bid: top.bid,
            ask: top.ask,
            bid_size: top.bid_size,
            ask_size: top.ask_size,
            seq,
            provider_time_ns,
            engine_time_ns: now_ns,
            receive_time_ns,
            stream_id: self.stream_id,
            symbol: sym as u16,
            tier: TOP_OF_BOOK,
            flags: top.flags,
            providers: top.providers,
            _reserved: [0; 3],
        };
        self.published = true;
    }

    /// Re-evaluates symbol `sym` without a new tick (quotes may have aged
    /// out or a provider may have been marked unhealthy). Returns
    /// `Published` with the new prices in [`Aggregator::output`].
    pub fn reevaluate(&mut self, sym: usize, now_ns: u64) -> TickOutcome {
        self.published = false;
        if self.state[sym].published.is_none() {
            return TickOutcome::Unchanged;
        }
        match self.aggregate(sym, now_ns) {
            Some(top) => {
                let (pt, rt) = self.freshest_times(sym);
                self.publish(sym, top, pt, rt.max(now_ns), now_ns)
            }
            None => self.publish_stale(sym, now_ns),
        }
    }

    fn freshest_times(&self, sym: usize) -> (u64, u64) {
        self.quotes[sym * self.providers..(sym + 1) * self.providers]
            .iter()
            .filter(|q| q.valid)
            .map(|q| (q.provider_time_ns, q.receive_time_ns))
            .max_by_key(|&(_, r)| r)
            .unwrap_or((0, 0))
    }
}

#[inline]
fn merge_side(best: &mut Mantissa, size: &mut u64, px: Mantissa, qty: u64, better: bool) {
    if better {
        *best = px;
        *size = qty;
    } else if px == *best {
        *size = size.saturating_add(qty);
    }
}
