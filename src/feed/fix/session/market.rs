//! Market data into ticks: W/X entries into the per-symbol books, books
//! into ticks, and each quote's verdict for the breaker and the provider
//! health. Part of [`super::FixSession`]; allocation-free.
//!
//! A book with both sides is a quote. A book that lost a side (an `X`
//! delete `279=2`, a `W` full refresh without it) or the whole symbol (a
//! `35=Y` for our current request) becomes a **withdrawal tick**
//! (`tick_flags::WITHDRAWN_BID` / `WITHDRAWN_ASK`) on the message that
//! withdrew it, so the engine drops the side before its next publish
//! instead of when the quote ages out. Quotes the feed does not deliver
//! are counted by reason (`quotes_discarded{reason}`).

use super::{Failure, FixSession, MsgHeader};
use crate::clock::NS_PER_MS;
use crate::feed::fix::codec::{self, Fields};
use crate::model::price::parse_price_bytes;
use crate::model::{tick_flags, Mantissa, Tick, NO_PRICE};
use crate::resilience::{BreakerState, Outcome};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Bid,
    Offer,
}

/// Top of book of one subscribed symbol.
#[derive(Debug, Clone, Copy)]
pub(super) struct Book {
    bid: Mantissa,
    ask: Mantissa,
    bid_size: u64,
    ask_size: u64,
    provider_time_ns: u64,
    /// The LP said what each side is (an entry or a full refresh), since
    /// the book was last cleared: an absent side that is known was
    /// withdrawn; one that is not (after a gap cleared the book, before
    /// the new snapshot) is merely unknown.
    bid_known: bool,
    ask_known: bool,
    touched: bool,
    pub(super) rejected: bool,
}

pub(super) const EMPTY_BOOK: Book = Book {
    bid: NO_PRICE,
    ask: NO_PRICE,
    bid_size: 0,
    ask_size: 0,
    provider_time_ns: 0,
    bid_known: false,
    ask_known: false,
    touched: false,
    rejected: false,
};

/// One MDEntry being read.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Entry<'a> {
    started: bool,
    action: u8,
    side: Option<Side>,
    symbol: Option<&'a [u8]>,
    price: Option<&'a [u8]>,
    size: Option<&'a [u8]>,
    date_days: Option<u64>,
    time_ns: Option<u64>,
}

impl FixSession {
    pub(super) fn on_market_data(
        &mut self,
        full_refresh: bool,
        hdr: &MsgHeader<'_>,
        body: Fields<'_>,
        now_ns: u64,
        wall_ns: u64,
    ) {
        if full_refresh {
            self.clear_for_full_refresh(hdr);
        }
        let mut entry = Entry::default();
        let mut in_group = false;
        for field in body {
            let Ok((tag, value)) = field else {
                // The rest of the message is unreadable: garbled (the
                // entries before it stand, as any later update would).
                self.note_garbled(codec::DecodeError::MalformedField, now_ns);
                return;
            };
            match tag {
                268 => in_group = true,
                279 | 269 if in_group && entry.started && (tag == 279 || entry.side.is_some()) => {
                    self.apply_entry(&entry, hdr, now_ns);
                    entry = Entry::default();
                }
                _ => {}
            }
            if in_group {
                read_entry_field(&mut entry, tag, value);
            }
        }
        if entry.started {
            self.apply_entry(&entry, hdr, now_ns);
        }
        self.emit_touched(now_ns, wall_ns);
    }

    /// A `W` replaces the symbol's whole book: a side it does not carry
    /// is gone (withdrawn on this message).
    fn clear_for_full_refresh(&mut self, hdr: &MsgHeader<'_>) {
        let Some(i) = hdr.symbol.and_then(|s| self.symbol_index(s)) else {
            return;
        };
        let b = &mut self.books[i];
        if b.rejected {
            return;
        }
        (b.bid, b.ask, b.bid_size, b.ask_size) = (NO_PRICE, NO_PRICE, 0, 0);
        (b.bid_known, b.ask_known, b.touched) = (true, true, true);
    }

    pub(super) fn apply_entry(&mut self, e: &Entry<'_>, hdr: &MsgHeader<'_>, now_ns: u64) {
        let Some(i) = e.symbol.or(hdr.symbol).and_then(|s| self.symbol_index(s)) else {
            self.stats.unknown_symbols.inc();
            return;
        };
        if self.books[i].rejected {
            // The LP refused this symbol's request: nothing of it counts
            // until the next subscription.
            self.stats.discarded_rejected_symbol.inc();
            return;
        }
        let Some(side) = e.side else { return };
        let digits = self.cfg.symbols[i].digits;
        let (price, size) = if e.action == b'2' {
            (NO_PRICE, 0)
        } else {
            let price = e.price.map(|p| parse_price_bytes(p, digits));
            let size = e.size.map_or(Some(0), codec::parse_size);
            match (price, size) {
                (Some(Ok(p)), Some(s)) if p > 0 => (p, s),
                _ => {
                    // A bad value in a well-framed message: the entry is
                    // skipped and the provider charged a failure, but the
                    // stream itself is intact, so the session stays up.
                    self.stats.bad_prices.inc();
                    self.note_failure(Failure::BadPrice, now_ns);
                    return;
                }
            }
        };
        let time_ns = entry_time(e, hdr).unwrap_or(0);
        let book = &mut self.books[i];
        match side {
            Side::Bid => (book.bid, book.bid_size, book.bid_known) = (price, size, true),
            Side::Offer => (book.ask, book.ask_size, book.ask_known) = (price, size, true),
        }
        book.provider_time_ns = time_ns;
        book.touched = true;
    }

    pub(super) fn symbol_index(&self, provider_symbol: &[u8]) -> Option<usize> {
        self.index
            .binary_search_by(|(s, _)| (**s).cmp(provider_symbol))
            .ok()
            .map(|k| usize::from(self.index[k].1))
    }

    pub(super) fn emit_touched(&mut self, now_ns: u64, wall_ns: u64) {
        for i in 0..self.books.len() {
            let b = self.books[i];
            if !b.touched {
                continue;
            }
            self.books[i].touched = false;
            let stale = self.stale_on_arrival(b.provider_time_ns, wall_ns);
            if b.bid != NO_PRICE && b.ask != NO_PRICE {
                if stale {
                    // Old by the provider's own stamp: it never enters the
                    // price and is not a quote for health; a slow call
                    // for the breaker.
                    self.stats.stale_quotes.inc();
                    self.breaker_sample(b.provider_time_ns, now_ns, wall_ns);
                    continue;
                }
                self.push_tick(i, &b, 0, now_ns);
                self.on_quote(b.provider_time_ns, now_ns, wall_ns);
                continue;
            }
            let deleted = (b.bid == NO_PRICE && b.bid_known) || (b.ask == NO_PRICE && b.ask_known);
            if !deleted {
                // Only unknown sides (a gap cleared the book): not a quote
                // and nothing withdrawn; the snapshot comes.
                continue;
            }
            // A side the LP withdrew: it leaves now, and so does a side we
            // do not know (a tick carries a price for every side it keeps)
            // and one whose update is stale.
            let mut flags = 0;
            let mut b = b;
            if b.bid == NO_PRICE || stale {
                (b.bid, b.bid_size, flags) = (NO_PRICE, 0, flags | tick_flags::WITHDRAWN_BID);
            }
            if b.ask == NO_PRICE || stale {
                (b.ask, b.ask_size, flags) = (NO_PRICE, 0, flags | tick_flags::WITHDRAWN_ASK);
            }
            self.push_tick(i, &b, flags, now_ns);
            if flags != tick_flags::WITHDRAWN {
                // A one-sided update: the LP is quoting.
                self.on_quote(b.provider_time_ns, now_ns, wall_ns);
            }
        }
    }

    /// The symbol's request was refused (35=Y), at the start or
    /// mid-stream: its book is dropped and both sides leave the price on
    /// this message (the engine may hold a quote the feed's book no longer
    /// has, after a gap cleared it).
    pub(super) fn reject_symbol(&mut self, i: usize, now_ns: u64) {
        let time = self.books[i].provider_time_ns;
        self.books[i] = EMPTY_BOOK;
        self.books[i].rejected = true;
        self.books[i].provider_time_ns = time;
        let b = self.books[i];
        self.push_tick(i, &b, tick_flags::WITHDRAWN, now_ns);
    }

    /// One tick into the pending queue (its capacity is one per symbol and
    /// a message emits at most one per symbol).
    fn push_tick(&mut self, i: usize, b: &Book, flags: u32, now_ns: u64) {
        debug_assert!(self.pending.len() < self.pending.capacity());
        self.feed_seq += 1;
        if flags & tick_flags::WITHDRAWN != 0 {
            self.stats.withdrawals.inc();
        } else {
            self.stats.quotes.inc();
        }
        self.pending.push(Tick {
            bid: b.bid,
            ask: b.ask,
            bid_size: b.bid_size,
            ask_size: b.ask_size,
            provider_time_ns: b.provider_time_ns,
            receive_time_ns: now_ns,
            feed_seq: self.feed_seq,
            symbol: self.cfg.symbols[i].symbol,
            provider: self.cfg.provider,
            flags,
        });
    }

    /// Quote age by provider time: older than `provider_age_max_ms` plus
    /// the `clock_skew_ms` allowance (both clocks are UTC, but not the same
    /// clock). Off when the limit is 0 or the quote carries no time.
    fn stale_on_arrival(&self, provider_time_ns: u64, wall_ns: u64) -> bool {
        let limit_ms = self.cfg.provider_age_max_ms;
        if limit_ms == 0 || provider_time_ns == 0 {
            return false;
        }
        let allowed_ns = (limit_ms + self.cfg.clock_skew_ms) * NS_PER_MS;
        wall_ns.saturating_sub(provider_time_ns) > allowed_ns
    }

    /// A quote delivered to the engine: health, the failure run, the last
    /// quote's age, and a breaker success.
    pub(super) fn on_quote(&mut self, provider_time_ns: u64, now_ns: u64, wall_ns: u64) {
        self.attempt = 0;
        self.machine.on_quote(now_ns);
        // Only a provider past its probation has shown it works: an LP
        // that sends its snapshot after each logon and then nothing must
        // not reset the run of failures every cycle.
        if !self.machine.in_probation(now_ns, self.probation_ms_now) {
            self.consecutive_failures = 0;
        }
        self.gauges.set_last_quote_wall_ns(wall_ns);
        self.breaker_sample(provider_time_ns, now_ns, wall_ns);
    }

    /// A quote's verdict for the breaker: success (slow when late),
    /// sampled while Closed, every quote a trial in HalfOpen.
    fn breaker_sample(&mut self, provider_time_ns: u64, now_ns: u64, wall_ns: u64) {
        let latency_ns = wall_ns.saturating_sub(provider_time_ns);
        if latency_ns > self.cfg.slow_quote_ms * NS_PER_MS {
            self.stats.slow_quotes.inc();
        }
        let state = self.breaker.state(now_ns);
        let due = self
            .last_sample_ns
            .is_none_or(|t| now_ns.saturating_sub(t) >= self.cfg.quote_sample_ms * NS_PER_MS);
        let record = match state {
            BreakerState::Closed => due,
            BreakerState::HalfOpen => true,
            _ => false,
        };
        if record {
            self.last_sample_ns = Some(now_ns);
            self.record(
                Outcome::Success {
                    duration_ns: latency_ns,
                },
                now_ns,
            );
        }
    }
}

pub(super) fn read_entry_field<'a>(e: &mut Entry<'a>, tag: u32, v: &'a [u8]) {
    match tag {
        279 => {
            e.started = true;
            e.action = v.first().copied().unwrap_or(b'0');
        }
        269 => {
            e.started = true;
            e.side = match v {
                b"0" => Some(Side::Bid),
                b"1" => Some(Side::Offer),
                _ => None,
            };
        }
        55 => e.symbol = Some(v),
        270 => e.price = Some(v),
        271 => e.size = Some(v),
        272 => e.date_days = codec::parse_date(v),
        273 => e.time_ns = codec::parse_time_only(v),
        _ => {}
    }
}

const NS_PER_DAY: u64 = 86_400_000_000_000;

/// MDEntryTime (273) on MDEntryDate (272) or SendingTime's date; else
/// SendingTime (52).
fn entry_time(e: &Entry<'_>, hdr: &MsgHeader<'_>) -> Option<u64> {
    let day = e
        .date_days
        .map(|d| d.checked_mul(NS_PER_DAY))
        .unwrap_or(hdr.sending_time_ns.map(|t| t - t % NS_PER_DAY));
    match (e.time_ns, day) {
        (Some(t), Some(d)) => d.checked_add(t).or(hdr.sending_time_ns),
        _ => hdr.sending_time_ns,
    }
}
