//! [`Fanout::check`]: the fan-out state checked against the connections'
//! own subscription lists (debug builds, after a fault's discard).

use super::{Fanout, NOT_INDEXED, PACE_NONE};
use crate::gateway::pacer::Member;
use crate::gateway::slab::Slab;

/// The first place [`Fanout::check`] found the fan-out state and the
/// connections' subscription lists disagreeing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(in crate::gateway) enum FanoutMismatch {
    /// A paced subscription whose pace member is missing or elsewhere.
    #[error("conn {conn} sub {sub}: pace member {found:?}")]
    PaceMember {
        /// The connection's slab slot.
        conn: u32,
        /// The subscription's slot in the connection's list.
        sub: u32,
        /// What the pacer holds under the subscription's pace id.
        found: Option<(u32, Member)>,
    },
    /// An indexed subscription whose index entry is missing or elsewhere.
    #[error("conn {conn} sub {sub}: index entry (conn, slot) {found:?}")]
    IndexEntry {
        /// The connection's slab slot.
        conn: u32,
        /// The subscription's slot in the connection's list.
        sub: u32,
        /// (conn, slot) of the index entry at the subscription's position.
        found: Option<(u32, u32)>,
    },
    /// Index or pacer entries no subscription accounts for.
    #[error("orphans: index {index}/{indexed}, pacer {pacer}/{paced}")]
    Orphans {
        /// Entries in the index.
        index: usize,
        /// Indexed subscriptions found.
        indexed: usize,
        /// Members in the pacer.
        pacer: usize,
        /// Paced subscriptions found.
        paced: usize,
    },
    /// A symbol's subscriber count (or interest) that does not match.
    #[error("symbol {symbol}: count {count}, subscriptions {subscriptions}")]
    SymbolCount {
        /// The symbol id.
        symbol: usize,
        /// The count the fan-out keeps.
        count: u32,
        /// Subscriptions found for it.
        subscriptions: u32,
    },
}

impl Fanout {
    /// Checks that the index, the pacer, the per-symbol counts and
    /// the interest agree with the connections' own subscription lists:
    /// every indexed or paced subscription is found where it says, no
    /// entry names a slot or subscription that is not there, and every
    /// symbol with subscribers is held. O(subscriptions): for a fault's
    /// discard in debug builds and for tests, never per price.
    pub(in crate::gateway) fn check(&self, slab: &Slab) -> Result<(), FanoutMismatch> {
        let mut counted = vec![0u32; self.sym_subs.len()];
        let (mut indexed, mut paced) = (0usize, 0usize);
        for (i, conn) in slab.conns.iter().enumerate() {
            let Some(conn) = conn else { continue };
            for (k, s) in conn.subs.iter().enumerate() {
                let here = (i as u32, k as u32);
                if s.pace != PACE_NONE {
                    let m = self.pacer.member(s.pace);
                    if m.map(|(key, m)| (key, m.conn, m.slot)) != Some((s.key, here.0, here.1)) {
                        let (conn, sub) = here;
                        return Err(FanoutMismatch::PaceMember {
                            conn,
                            sub,
                            found: m,
                        });
                    }
                    paced += 1;
                } else if s.pos != NOT_INDEXED {
                    let at = self.index.subscribers(s.key as usize).get(s.pos as usize);
                    let found = at.map(|e| (e.conn, e.slot));
                    if found != Some(here) {
                        let (conn, sub) = here;
                        return Err(FanoutMismatch::IndexEntry { conn, sub, found });
                    }
                    indexed += 1;
                } else {
                    continue; // taken out for a move: counted nowhere
                }
                counted[s.key as usize / self.tiers] += 1;
            }
        }
        if indexed != self.index.total() || paced != self.pacer.member_total() {
            return Err(FanoutMismatch::Orphans {
                index: self.index.total(),
                indexed,
                pacer: self.pacer.member_total(),
                paced,
            });
        }
        for (sym, (&n, &c)) in self.sym_subs.iter().zip(&counted).enumerate() {
            if n != c || (n > 0 && self.interest.holds(sym as u16) == 0) {
                return Err(FanoutMismatch::SymbolCount {
                    symbol: sym,
                    count: n,
                    subscriptions: c,
                });
            }
        }
        Ok(())
    }
}
