//! A table behind its engine's input: what a shard sends while the
//! engine's progress mark (`runtime::progress`) is older than the limit
//! goes out flagged STALE (and CONFLATED, a snapshot), and once the
//! engine has caught up each symbol sent so is restated — its latest
//! price, unflagged, same sequence if no newer one came — so no terminal
//! is left showing a stale flag on a current price, nor a price the
//! engine had not caught up with as live.
//!
//! The limit is twice `--price-age-max-ms`, the age the fan-out's gates
//! hold a delivered price to (`gateway::fresh`): an engine a scheduler
//! delays for less is not flagged. An engine behind for longer than the
//! engine's max quote age (`[engine] max_quote_age_ms`, the age at which
//! a silent provider's price goes stale) has every subscribed symbol's
//! last price restated flagged stale, same sequence, as an edge does when
//! its bus falls silent: a terminal is not left showing a frozen price as
//! live because nothing new was sent to it. The check is one load per
//! shard turn (`Fanout::check_progress`); the symbols sent stale are
//! flags sized to the symbol table at start, so nothing allocates.

use crate::model::price_flags;
use crate::runtime::Progress;

/// What a check of the mark found owed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owed {
    Nothing,
    /// Caught up: each symbol sent stale is owed its latest price
    /// unflagged ([`Behind::restate`]).
    Restatements,
    /// Behind past the max quote age: every subscribed symbol is owed its
    /// last price flagged stale, once per episode.
    AllStale,
}

/// Whether this shard's table is behind, and the symbols it sent stale
/// because it was.
pub(super) struct Behind {
    limit_ns: u64,
    all_after_ns: u64,
    behind: bool,
    /// Every subscribed symbol was restated stale in this episode.
    all_flagged: bool,
    flagged: Box<[bool]>,
    flagged_list: Vec<u16>,
}

impl Behind {
    /// Behind past `limit_ns`, every symbol flagged past `all_after_ns`,
    /// for a table of `symbols`.
    pub(super) fn new((limit_ns, all_after_ns): (u64, u64), symbols: usize) -> Behind {
        Behind {
            limit_ns,
            all_after_ns: all_after_ns.max(limit_ns),
            behind: false,
            all_flagged: false,
            flagged: vec![false; symbols].into_boxed_slice(),
            flagged_list: Vec::with_capacity(symbols),
        }
    }

    /// Reads the mark at `now`: what the shard owes its subscribers.
    #[inline]
    pub(super) fn check(&mut self, progress: &Progress, now: u64) -> Owed {
        let lag = progress.lag_ns(now);
        self.behind = lag > self.limit_ns;
        if !self.behind {
            self.all_flagged = false;
            if self.flagged_list.is_empty() {
                return Owed::Nothing;
            }
            return Owed::Restatements;
        }
        if lag > self.all_after_ns && !self.all_flagged {
            self.all_flagged = true;
            return Owed::AllStale;
        }
        Owed::Nothing
    }

    /// Whether the last check found the table behind.
    #[cfg(test)]
    pub(super) fn is_behind(&self) -> bool {
        self.behind
    }

    /// The flags a price of `symbol` sent now gets: STALE and CONFLATED
    /// while behind (the symbol is then owed a restatement), else none.
    #[inline]
    pub(super) fn flags_for(&mut self, symbol: u16) -> u8 {
        if !self.behind {
            return 0;
        }
        if let Some(f) = self.flagged.get_mut(symbol as usize) {
            if !*f {
                *f = true;
                self.flagged_list.push(symbol);
            }
        }
        price_flags::STALE | price_flags::CONFLATED
    }

    /// Symbols owed a restatement, one at a time: the caller sends each
    /// one's latest price (O(symbols sent stale), once per catch-up).
    pub(super) fn restate(&mut self) -> Option<u16> {
        let symbol = self.flagged_list.pop()?;
        self.flagged[symbol as usize] = false;
        Some(symbol)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behind_flags_each_symbol_once_and_owes_it_once_caught_up() {
        let progress = Progress::new();
        let mut b = Behind::new((40, 1_000), 4);
        let nothing = Owed::Nothing;
        assert_eq!(b.check(&progress, 1_000), nothing, "untracked");
        assert_eq!(b.flags_for(1), 0);
        progress.caught_up(1_000);
        assert_eq!(b.check(&progress, 1_040), nothing, "at the limit");
        assert!(!b.is_behind());
        assert_eq!(b.check(&progress, 1_041), nothing);
        assert!(b.is_behind());
        let stale = price_flags::STALE | price_flags::CONFLATED;
        assert_eq!(b.flags_for(1), stale);
        assert_eq!(b.flags_for(3), stale);
        assert_eq!(b.flags_for(1), stale);
        assert_eq!(b.check(&progress, 2_000), nothing, "at the max age");
        assert_eq!(b.check(&progress, 2_001), Owed::AllStale);
        assert_eq!(b.check(&progress, 5_000), nothing, "once per episode");
        progress.caught_up(5_000);
        assert_eq!(b.check(&progress, 5_010), Owed::Restatements);
        let mut owed = vec![];
        while let Some(s) = b.restate() {
            owed.push(s);
        }
        owed.sort_unstable();
        assert_eq!(owed, vec![1, 3], "each symbol once");
        assert_eq!(b.check(&progress, 5_020), nothing);
        assert_eq!(b.flags_for(1), 0);
        // A new episode flags every symbol again.
        assert_eq!(b.check(&progress, 6_001), Owed::AllStale);
    }
}
