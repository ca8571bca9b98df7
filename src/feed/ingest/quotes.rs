//! A ProviderQuote batch: each entry checked, the usable ones pushed to the
//! engine ring, the refused ones counted and answered with one
//! `Reject(invalid_quote)` per batch (at most
//! [`QUOTE_REJECTS_PER_SEC`](super::keepalive::QUOTE_REJECTS_PER_SEC) a
//! second per bridge, so a broken bridge cannot flood its own socket).

use std::io::Write;
use std::sync::atomic::Ordering;

use super::frames::{push_reject, Ctx, Peer, Readable};
use crate::clock::monotonic_ns;
use crate::model::PRICE_MAX;
use crate::model::{Tick, NO_PRICE};
use crate::wire::{self, RejectReason};

/// Why a quote entry was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A side is i64::MIN ("no price on this side"): the engine prices two-sided books only.
    OneSided,
    /// Bid above ask.
    Crossed,
    /// A side at or below zero, or above the largest mantissa.
    OutOfRange,
}

impl Refusal {
    /// Every refusal, in the order of the metric labels.
    pub const ALL: [Refusal; 3] = [Refusal::OneSided, Refusal::Crossed, Refusal::OutOfRange];

    /// Lower-case name for logs and the `reason` metric label.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::OneSided => "one_sided",
            Refusal::Crossed => "crossed",
            Refusal::OutOfRange => "out_of_range",
        }
    }
}

/// Checks one entry's prices.
pub fn check(bid: i64, ask: i64) -> Option<Refusal> {
    if bid == NO_PRICE || ask == NO_PRICE {
        Some(Refusal::OneSided)
    } else if bid <= 0 || ask > PRICE_MAX {
        Some(Refusal::OutOfRange)
    } else if bid > ask {
        Some(Refusal::Crossed)
    } else {
        None
    }
}

/// Pushes a batch's usable entries for `provider`.
pub(super) fn quotes(q: &wire::ProviderQuote<'_>, provider: u16, peer: Peer<'_>, cx: &mut Ctx<'_>) {
    let now = monotonic_ns();
    peer.keep.quoted(now);
    cx.batch.clear();
    let mut refused = 0u32;
    let mut first: Option<(u16, Refusal)> = None;
    for e in q.quotes.clone() {
        if cx.batch.len() == cx.batch.capacity() {
            break;
        }
        if let Some(why) = check(e.bid, e.ask) {
            cx.stats.refused(why).fetch_add(1, Ordering::Relaxed);
            refused += 1;
            first.get_or_insert((e.symbol_id, why));
            continue;
        }
        cx.batch.push(Tick {
            bid: e.bid,
            ask: e.ask,
            bid_size: e.bid_size,
            ask_size: e.ask_size,
            provider_time_ns: e.provider_time_ns,
            receive_time_ns: now,
            feed_seq: 0,
            symbol: e.symbol_id,
            provider,
            flags: u32::from(e.flags),
        });
    }
    cx.stats
        .quotes
        .fetch_add(cx.batch.len() as u64, Ordering::Relaxed);
    for t in cx.batch.iter() {
        cx.port.push(*t);
    }
    if let Some((symbol, why)) = first {
        if peer.keep.take_quote_reject(cx.now_ns) {
            let mut text = [0u8; 96];
            let len = text.len();
            let mut w = &mut text[..];
            let _ = write!(
                w,
                "{refused} quote(s) refused; first: symbol {symbol} {}",
                why.name()
            );
            let n = len - w.len();
            let r = Readable {
                template_id: wire::template::PROVIDER_QUOTE,
                request_id: 0,
            };
            let text = std::str::from_utf8(&text[..n]).unwrap_or("invalid quote");
            push_reject(peer.out, r, RejectReason::INVALID_QUOTE, text);
        } else {
            cx.stats
                .quote_rejects_unsent
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_checked_like_the_engine_would() {
        assert_eq!(check(100, 101), None);
        assert_eq!(check(100, 100), None, "a locked book is a price");
        assert_eq!(check(NO_PRICE, 101), Some(Refusal::OneSided));
        assert_eq!(check(100, NO_PRICE), Some(Refusal::OneSided));
        assert_eq!(check(101, 100), Some(Refusal::Crossed));
        assert_eq!(check(0, 100), Some(Refusal::OutOfRange));
        assert_eq!(check(1, PRICE_MAX + 1), Some(Refusal::OutOfRange));
    }
}
