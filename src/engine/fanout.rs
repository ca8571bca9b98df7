//! Engine → shard fan-out with per-(symbol, tier) conflation.
//!
//! The engine writes every price to one SPSC ring per gateway shard. When a
//! shard's ring is full the engine must neither block nor allocate: the
//! price is parked in a preallocated per-(symbol, tier) slot; a newer price
//! for the same key replaces the parked one (latest wins, flagged
//! `CONFLATED`, counted) and the parked prices are published, oldest key
//! first, as soon as the ring has room. Prices of one key never overtake
//! each other: while a key is parked, new prices for it go to the slot.
//!
//! A shard receives only the symbols it has subscribers for
//! ([`SymbolInterest`]), and is woken only after a turn that gave it
//! something: a shard with no session for a symbol costs the engine
//! nothing for it, and sleeps through it.

use crate::runtime::sync::{fence, AtomicU32, Ordering};
use std::collections::VecDeque;
use std::sync::Arc;

use super::price_table::PriceTable;
use crate::model::{price_flags, Price};
use crate::runtime::counter::{Counter, Gauge};
use crate::runtime::hosting::HostedTasks;
use crate::runtime::wait::Doorbell;

/// The consumer side of one engine → shard ring, handed to a gateway shard
/// or a measuring sink (`pipeline::sink::ShardSink`).
pub struct ShardInput {
    /// Shard index, 0-based; the position of this shard's publisher in the engine.
    pub index: usize,
    /// The prices the engine publishes for this shard, tier-less tops of book.
    pub consumer: rtrb::Consumer<Price>,
    /// Rung by the engine after it pushes a batch; the shard sleeps on it.
    pub doorbell: Arc<Doorbell>,
    /// The symbols this shard wants from the engine; the shard keeps it.
    pub interest: Arc<SymbolInterest>,
    /// The engine's side of this shard's ring (prices it holds for a full
    /// ring: a session is not moved off the shard while any are held).
    pub fanout: Arc<FanoutStats>,
    /// Stages this shard's thread runs besides its own (`--threading
    /// shared`: the engine, and the ingest listener, on shard 0).
    pub hosted: HostedTasks,
}

/// Counters of one shard's fan-out.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct FanoutStats {
    /// Prices pushed into the ring.
    pub pushed: Counter,
    /// Prices parked because the ring was full.
    pub deferred: Counter,
    /// Parked prices replaced by a newer one for the same key.
    pub conflated: Counter,
    /// Keys currently parked.
    pub parked: Gauge,
    /// Ring occupancy after the last publish, in slots.
    pub ring_occupancy: Gauge,
}

/// Which symbols a shard wants: a count of holds per symbol, taken by the
/// shard for each symbol its sessions subscribe to, and by a session on
/// its way to the shard from another one (one hold per subscription, see
/// `gateway::moves`) until the shard has attached it. Written on
/// subscribe, unsubscribe and session moves; read by the engine on every
/// publish.
///
/// A count rather than a bit so two holders never race: the moving
/// session's hold and the receiving shard's own last unsubscribe are
/// independent, and the symbol stays wanted while either holds it.
///
/// The shard takes a hold *before* it reads the subscription's snapshot
/// from the price table; the engine writes the price table *before* it
/// reads the count. Both sides put a SeqCst fence between their store and
/// their load (Dekker's pattern, as in the doorbell), so at least one sees
/// the other: either the engine sees the hold and pushes the update, or the
/// shard's snapshot read sees the table write. No first update after a
/// subscription is lost. The engine's side is [`publish_top`]; the loom
/// model `engine::loom_models` checks the pair.
#[derive(Debug)]
pub struct SymbolInterest {
    holds: Box<[AtomicU32]>,
}

impl SymbolInterest {
    /// No symbol wanted (a gateway shard before its first subscription).
    pub fn none(symbols: usize) -> Arc<Self> {
        Arc::new(SymbolInterest {
            holds: (0..symbols.max(1)).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// Every symbol wanted (sinks, benches).
    pub fn all(symbols: usize) -> Arc<Self> {
        let i = Self::none(symbols);
        i.set_all();
        i
    }

    /// Every symbol held once more (a sink that takes everything).
    pub fn set_all(&self) {
        for h in self.holds.iter() {
            h.fetch_add(1, Ordering::SeqCst);
        }
        fence(Ordering::SeqCst);
    }

    /// Shard side: one more holder wants `symbol`.
    pub fn hold(&self, symbol: u16) {
        if let Some(h) = self.holds.get(symbol as usize) {
            h.fetch_add(1, Ordering::SeqCst);
        }
        fence(Ordering::SeqCst);
    }

    /// Shard side: a holder of `symbol` let go (never below zero).
    pub fn release(&self, symbol: u16) {
        if let Some(h) = self.holds.get(symbol as usize) {
            let was = h.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            debug_assert!(was.is_ok(), "released symbol {symbol} more than held");
        }
        fence(Ordering::SeqCst);
    }

    /// Holds on `symbol` right now (tests, metrics).
    pub fn holds(&self, symbol: u16) -> u32 {
        self.holds
            .get(symbol as usize)
            .map_or(0, |h| h.load(Ordering::SeqCst))
    }

    /// Engine side (after its SeqCst fence).
    #[inline]
    pub fn has(&self, symbol: u16) -> bool {
        self.holds
            .get(symbol as usize)
            .is_some_and(|h| h.load(Ordering::Relaxed) != 0)
    }
}

/// The engine's publish of one tier-less top of book: the price table
/// first, then every shard that wants its symbol. The SeqCst fence between
/// the table write and the shards' interest reads pairs with the one in
/// [`SymbolInterest::hold`] (see there): a shard that takes a hold and then
/// reads the table either finds `top` there or is pushed it. Checked by the
/// loom model `engine::loom_models`.
#[inline]
pub fn publish_top(table: &PriceTable, shards: &mut [ShardPublisher], top: &Price) {
    table.write(top);
    fence(Ordering::SeqCst);
    for shard in shards {
        shard.publish(top);
    }
}

/// The engine's producer side of one shard ring.
pub struct ShardPublisher {
    producer: rtrb::Producer<Price>,
    /// One slot per symbol: the engine publishes one tier-less top of book
    /// per change, so the latest price per symbol is all a full ring keeps.
    parked: Box<[Price]>,
    is_parked: Box<[bool]>,
    /// Keys in the order they were first parked; capacity = every key, so
    /// it never reallocates.
    order: VecDeque<u32>,
    doorbell: Arc<Doorbell>,
    interest: Arc<SymbolInterest>,
    /// Something was pushed or parked since the last [`Self::notify`].
    touched: bool,
    /// Counters of this ring, shared with the shard's [`ShardInput::fanout`].
    pub stats: Arc<FanoutStats>,
}

impl ShardPublisher {
    /// A publisher for a ring of `producer`'s (non-zero) capacity and `symbols`
    /// park slots, allocated here. Interested in every symbol until the shard
    /// installs its own interest.
    pub fn new(producer: rtrb::Producer<Price>, symbols: usize, doorbell: Arc<Doorbell>) -> Self {
        assert!(
            producer.buffer().capacity() > 0,
            "a shard ring needs a non-zero capacity"
        );
        let keys = symbols;
        ShardPublisher {
            producer,
            parked: vec![Price::EMPTY; keys].into_boxed_slice(),
            is_parked: vec![false; keys].into_boxed_slice(),
            order: VecDeque::with_capacity(keys),
            doorbell,
            interest: SymbolInterest::all(symbols),
            touched: false,
            stats: Arc::new(FanoutStats::default()),
        }
    }

    /// Publishes only the symbols `interest` names (default: all).
    pub fn with_interest(mut self, interest: Arc<SymbolInterest>) -> Self {
        self.interest = interest;
        self
    }

    #[inline]
    fn key(&self, p: &Price) -> usize {
        debug_assert!((p.symbol as usize) < self.parked.len());
        p.symbol as usize
    }

    /// Publishes one price: into the ring, or parked (conflating) if full.
    #[inline]
    pub fn publish(&mut self, price: &Price) {
        if !self.interest.has(price.symbol) {
            return;
        }
        self.touched = true;
        let key = self.key(price);
        debug_assert!(key < self.parked.len());
        if self.is_parked[key] {
            let mut p = *price;
            p.flags |= price_flags::CONFLATED;
            self.parked[key] = p;
            self.stats.conflated.inc();
            return;
        }
        match self.producer.push(*price) {
            Ok(()) => self.stats.pushed.inc(),
            Err(rtrb::PushError::Full(p)) => self.park(key, p),
        }
    }

    #[cold]
    fn park(&mut self, key: usize, p: Price) {
        debug_assert!(!self.is_parked[key], "key {key} parked twice");
        self.parked[key] = p;
        self.is_parked[key] = true;
        debug_assert!(self.order.len() < self.order.capacity());
        self.order.push_back(key as u32);
        self.stats.deferred.inc();
        self.stats.parked.set(self.order.len() as u64);
    }

    /// Publishes parked prices while the ring has room; returns how many
    /// it pushed.
    #[inline]
    pub fn flush_some(&mut self) -> usize {
        let before = self.order.len();
        self.flush();
        before - self.order.len()
    }

    /// Publishes parked prices while the ring has room. Returns how many
    /// keys are still parked.
    #[inline]
    pub fn flush(&mut self) -> usize {
        while let Some(&key) = self.order.front() {
            let key = key as usize;
            debug_assert!(self.is_parked[key], "key {key} queued but not parked");
            if self.producer.push(self.parked[key]).is_err() {
                break;
            }
            self.is_parked[key] = false;
            self.order.pop_front();
            self.stats.pushed.inc();
            self.touched = true;
        }
        self.stats.parked.set(self.order.len() as u64);
        self.order.len()
    }

    /// Records ring occupancy and, if this shard was given anything since
    /// the last call, wakes it if it sleeps.
    #[inline]
    pub fn notify(&mut self) {
        let cap = self.producer.buffer().capacity();
        self.stats
            .ring_occupancy
            .set((cap - self.producer.slots()) as u64);
        if std::mem::take(&mut self.touched) {
            self.doorbell.ring();
        }
    }

    pub(crate) fn parked(&self) -> usize {
        self.order.len()
    }

    /// True once the shard dropped its consumer (it stopped).
    pub fn is_abandoned(&self) -> bool {
        self.producer.is_abandoned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(symbol: u16, tier: u8, seq: u64) -> Price {
        Price {
            symbol,
            tier,
            seq,
            bid: seq as i64,
            ask: seq as i64 + 1,
            ..Price::EMPTY
        }
    }

    #[test]
    fn only_wanted_symbols_are_published_and_only_a_touched_shard_is_woken() {
        let (producer, mut consumer) = rtrb::RingBuffer::new(16);
        let interest = SymbolInterest::none(100);
        let bell = Doorbell::new();
        let mut publisher =
            ShardPublisher::new(producer, 100, bell.clone()).with_interest(interest.clone());
        publisher.publish(&price(70, 0, 1));
        publisher.notify();
        assert!(consumer.is_empty(), "nobody wants symbol 70 yet");
        assert!(!publisher.touched, "nothing given: no wake-up");
        interest.hold(70);
        assert!(interest.has(70) && !interest.has(6) && !interest.has(71));
        publisher.publish(&price(70, 0, 2));
        publisher.publish(&price(6, 0, 2));
        assert_eq!(consumer.pop().unwrap().seq, 2);
        assert!(consumer.is_empty(), "symbol 6 is still unwanted");
        assert!(publisher.touched);
        publisher.notify();
        assert!(!publisher.touched);
        interest.release(70);
        publisher.publish(&price(70, 0, 3));
        assert!(consumer.is_empty());
        let all = SymbolInterest::all(100);
        assert!((0..100).all(|s| all.has(s)));
    }

    #[test]
    fn a_symbol_stays_wanted_while_any_holder_holds_it() {
        let interest = SymbolInterest::none(10);
        // The shard's own subscription and a session moving in.
        interest.hold(3);
        interest.hold(3);
        assert_eq!(interest.holds(3), 2);
        // The shard's last subscriber leaves: the mover still holds it.
        interest.release(3);
        assert!(interest.has(3));
        interest.release(3);
        assert!(!interest.has(3));
        assert_eq!(interest.holds(3), 0);
        // Out of range: ignored, never wanted.
        interest.hold(400);
        assert!(!interest.has(400));
    }

    #[test]
    fn full_ring_conflates_and_keeps_the_latest_for_every_symbol() {
        let (producer, mut consumer) = rtrb::RingBuffer::new(4);
        let mut publisher = ShardPublisher::new(producer, 20, Doorbell::new());
        // 50 rounds over 20 symbols into a 4-slot ring nobody reads.
        for round in 1..=50u64 {
            for s in 0..20u16 {
                publisher.publish(&price(s, 0, round));
            }
        }
        // Keys 0..4 went into the ring in round 1, then parked in round 2;
        // keys 4..20 were parked in round 1.
        assert_eq!(publisher.parked(), 20);
        assert!(publisher.stats.conflated.get() > 0);
        // Drain: the reader catches up; every key must end at seq 50.
        let mut latest = vec![0u64; 20];
        let mut conflated_seen = 0;
        let mut drain = |consumer: &mut rtrb::Consumer<Price>| {
            while let Ok(p) = consumer.pop() {
                let k = p.symbol as usize;
                assert!(p.seq > latest[k], "key {k} went backwards");
                latest[k] = p.seq;
                if p.flags & price_flags::CONFLATED != 0 {
                    conflated_seen += 1;
                }
            }
        };
        loop {
            drain(&mut consumer);
            if publisher.flush() == 0 {
                drain(&mut consumer);
                break;
            }
        }
        assert!(latest.iter().all(|&s| s == 50), "{latest:?}");
        assert_eq!(conflated_seen, 20);
        assert_eq!(
            publisher.stats.pushed.get(),
            4 + 20,
            "4 direct pushes, then one per parked key"
        );
    }

    #[test]
    fn no_overtaking_while_a_key_is_parked() {
        let (producer, mut consumer) = rtrb::RingBuffer::new(1);
        let mut publisher = ShardPublisher::new(producer, 2, Doorbell::new());
        publisher.publish(&price(0, 0, 1)); // fills the ring
        publisher.publish(&price(1, 0, 1)); // parked
        assert_eq!(consumer.pop().unwrap().seq, 1);
        publisher.publish(&price(1, 0, 2)); // key 1 parked: replaces, not pushed
        assert_eq!(publisher.flush(), 0);
        let p = consumer.pop().unwrap();
        assert_eq!((p.symbol, p.seq), (1, 2));
        assert_ne!(p.flags & price_flags::CONFLATED, 0);
    }
}
