//! [`Fanout::check`]: the fan-out state checked against the connections'
//! own subscription lists (debug builds, after a fault's discard).

use super::{Fanout, NOT_INDEXED, PACE_NONE};
use crate::gateway::slab::Slab;

impl Fanout {
    /// Checks that the index, the pace groups, the per-symbol counts and
    /// the interest agree with the connections' own subscription lists:
    /// every indexed or paced subscription is found where it says, no
    /// entry names a slot or subscription that is not there, and every
    /// symbol with subscribers is held. O(subscriptions): for a fault's
    /// discard in debug builds and for tests, never per price.
    pub(in crate::gateway) fn check(&self, slab: &Slab) -> Result<(), String> {
        let mut counted = vec![0u32; self.sym_subs.len()];
        let (mut indexed, mut paced) = (0usize, 0usize);
        for (i, conn) in slab.conns.iter().enumerate() {
            let Some(conn) = conn else { continue };
            for (k, s) in conn.subs.iter().enumerate() {
                let here = (i as u32, k as u32);
                if s.pace != PACE_NONE {
                    let m = self.pacer.member(s.pace);
                    if m.map(|(key, m)| (key, m.conn, m.slot)) != Some((s.key, here.0, here.1)) {
                        return Err(format!("conn {i} sub {k}: pace member {m:?}"));
                    }
                    paced += 1;
                } else if s.pos != NOT_INDEXED {
                    let at = self.index.subscribers(s.key as usize).get(s.pos as usize);
                    if at.map(|e| (e.conn, e.slot)) != Some(here) {
                        return Err(format!("conn {i} sub {k}: index entry {at:?}"));
                    }
                    indexed += 1;
                } else {
                    continue; // taken out for a move: counted nowhere
                }
                counted[s.key as usize / self.tiers] += 1;
            }
        }
        if indexed != self.index.total() || paced != self.pacer.member_total() {
            let (ix, pc) = (self.index.total(), self.pacer.member_total());
            return Err(format!("orphans: index {ix}/{indexed}, pacer {pc}/{paced}"));
        }
        for (sym, (&n, &c)) in self.sym_subs.iter().zip(&counted).enumerate() {
            if n != c || (n > 0 && self.interest.holds(sym as u16) == 0) {
                return Err(format!("symbol {sym}: count {n}, subscriptions {c}"));
            }
        }
        Ok(())
    }
}
