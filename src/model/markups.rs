//! Tier markups: the one place a tier's price is derived from the
//! aggregated top of book.
//!
//! The engine publishes one tier-less top of book per change (a [`Price`]
//! whose `tier` is [`TOP_OF_BOOK`] and whose bid and ask carry no markup).
//! Every reader that needs a tier's price — the price table, a gateway
//! shard fanning out to a tier's subscribers, a request worker answering a
//! snapshot — derives it here, where it reads, with [`Markups::apply`].
//! So a publish costs one price whatever the number of tiers, and no tier
//! is computed that nobody reads.
//!
//! Contract: built once at start-up from the instrument table; `apply` is a
//! table lookup and two saturating additions — no allocation, no branch on
//! the tier count.

use super::aggregated::{Price, TierId};
use super::instruments::InstrumentTable;
use super::price::{Mantissa, NO_PRICE};
use super::tick::SymbolId;

/// The `tier` of a tier-less top of book as the engine publishes it. Its
/// bid and ask carry no markup; [`Markups::apply`] turns it into any
/// tier's price.
pub const TOP_OF_BOOK: TierId = 0;

/// Markup in points per side for every (symbol, tier).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Markups {
    tiers: usize,
    /// `symbols * tiers`, row per symbol.
    points: Box<[Mantissa]>,
}

impl Markups {
    /// The markups the instrument table's tiers define (with per-symbol
    /// overrides).
    pub fn new(table: &InstrumentTable) -> Markups {
        let tiers = table.tiers();
        let points = (0..table.len())
            .flat_map(|s| tiers.iter().map(move |t| t.markup_for(s as SymbolId)))
            .collect();
        Markups::from_points(tiers.len(), points)
    }

    /// Markups from a `symbols * tiers` table of points per side.
    pub fn from_points(tiers: usize, points: Vec<Mantissa>) -> Markups {
        assert!(tiers > 0, "at least one tier");
        assert!(
            !points.is_empty() && points.len().is_multiple_of(tiers),
            "one markup per (symbol, tier)"
        );
        Markups {
            tiers,
            points: points.into_boxed_slice(),
        }
    }

    /// `symbols` x `tiers` with no markup anywhere.
    pub fn none(symbols: usize, tiers: usize) -> Markups {
        Markups::from_points(tiers, vec![0; symbols * tiers])
    }

    /// Number of tiers (columns per symbol); at least 1.
    pub fn tiers(&self) -> usize {
        self.tiers
    }

    /// Number of symbols (rows).
    pub fn symbols(&self) -> usize {
        self.points.len() / self.tiers
    }

    /// Points per side for (symbol, tier). Both must be in range.
    #[inline]
    pub fn points(&self, symbol: SymbolId, tier: TierId) -> Mantissa {
        let i = symbol as usize * self.tiers + tier as usize;
        debug_assert!((tier as usize) < self.tiers && i < self.points.len());
        self.points[i]
    }

    /// `top` (a tier-less top of book) as tier `tier` sees it: the bid
    /// lowered and the ask raised by the tier's markup for the symbol.
    #[inline]
    pub fn apply(&self, top: &Price, tier: TierId) -> Price {
        let m = self.points(top.symbol, tier);
        let mut p = *top;
        p.tier = tier;
        // An absent side (a one-sided price) stays absent.
        if p.bid != NO_PRICE {
            p.bid = p.bid.saturating_sub(m);
        }
        if p.ask != NO_PRICE {
            p.ask = p.ask.saturating_add(m);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::InstrumentTable;

    fn top(symbol: SymbolId, bid: Mantissa, ask: Mantissa) -> Price {
        Price {
            symbol,
            bid,
            ask,
            tier: TOP_OF_BOOK,
            ..Price::EMPTY
        }
    }

    #[test]
    fn apply_widens_each_side_by_the_tier_and_symbol_markup() {
        let m = Markups::from_points(3, vec![0, 5, 12, 0, 20, 40]);
        assert_eq!((m.symbols(), m.tiers()), (2, 3));
        let p = m.apply(&top(1, 1_000, 1_010), 2);
        assert_eq!((p.tier, p.bid, p.ask), (2, 960, 1_050));
        let p = m.apply(&top(0, 1_000, 1_010), 1);
        assert_eq!((p.tier, p.bid, p.ask), (1, 995, 1_015));
        let p = m.apply(&top(0, 1_000, 1_010), 0);
        assert_eq!((p.bid, p.ask), (1_000, 1_010), "no markup: the top itself");
    }

    #[test]
    fn apply_saturates_instead_of_wrapping() {
        let m = Markups::from_points(1, vec![10]);
        let p = m.apply(&top(0, i64::MIN + 3, i64::MAX - 3), 0);
        assert_eq!((p.bid, p.ask), (i64::MIN, i64::MAX));
    }

    #[test]
    fn an_absent_side_stays_absent() {
        let m = Markups::from_points(2, vec![0, 10]);
        let p = m.apply(&top(0, NO_PRICE, 1_010), 1);
        assert_eq!((p.bid, p.ask), (NO_PRICE, 1_020));
        let p = m.apply(&top(0, 1_000, NO_PRICE), 1);
        assert_eq!((p.bid, p.ask), (990, NO_PRICE));
    }

    #[test]
    fn the_built_in_tiers_follow_the_instrument_table() {
        let table = InstrumentTable::default_with_providers(1);
        let m = Markups::new(&table);
        assert_eq!((m.symbols(), m.tiers()), (table.len(), table.tiers().len()));
        for (s, t) in [(0u16, 0u8), (0, 1), (3, 2)] {
            assert_eq!(m.points(s, t), table.tiers()[t as usize].markup_for(s));
        }
    }
}
