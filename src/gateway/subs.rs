//! A shard's subscription index: for each (symbol, tier) key, the
//! connections subscribed to it, as (connection slot, subscription slot)
//! pairs so fan-out reaches the per-connection state without a lookup.
//!
//! Add and remove are O(1) (swap-remove; the caller fixes the one entry
//! that moved). Lists grow only when a subscription is added — the control
//! path — never during fan-out.

/// One subscriber of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subscriber {
    /// Connection slot in the shard's slab.
    pub conn: u32,
    /// Index of the subscription in the connection's own list.
    pub slot: u32,
}

/// Per-key subscriber lists.
#[derive(Debug)]
pub struct SubIndex {
    keys: Vec<Vec<Subscriber>>,
}

impl SubIndex {
    /// An empty index for `keys` (symbol, tier) keys.
    pub fn new(keys: usize) -> Self {
        SubIndex {
            keys: (0..keys).map(|_| Vec::new()).collect(),
        }
    }

    /// Adds a subscriber; returns its position in the key's list.
    pub fn add(&mut self, key: usize, s: Subscriber) -> u32 {
        let list = &mut self.keys[key];
        list.push(s);
        (list.len() - 1) as u32
    }

    /// Removes the subscriber at `pos`. If another subscriber moved into
    /// `pos`, returns it so the caller can update its recorded position.
    pub fn remove(&mut self, key: usize, pos: u32) -> Option<Subscriber> {
        let list = &mut self.keys[key];
        let pos = pos as usize;
        debug_assert!(pos < list.len());
        list.swap_remove(pos);
        list.get(pos).copied()
    }

    /// Points the entry at `pos` to a new subscription slot (after the
    /// connection's own list moved it).
    pub fn set_slot(&mut self, key: usize, pos: u32, slot: u32) {
        self.keys[key][pos as usize].slot = slot;
    }

    /// The subscribers of `key`, in no particular order.
    #[inline]
    pub fn subscribers(&self, key: usize) -> &[Subscriber] {
        &self.keys[key]
    }

    /// Subscriptions over every key.
    pub fn total(&self) -> usize {
        self.keys.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_remove_reports_the_moved_entry() {
        let mut ix = SubIndex::new(2);
        let a = Subscriber { conn: 1, slot: 0 };
        let b = Subscriber { conn: 2, slot: 3 };
        let c = Subscriber { conn: 3, slot: 1 };
        assert_eq!(ix.add(0, a), 0);
        assert_eq!(ix.add(0, b), 1);
        assert_eq!(ix.add(0, c), 2);
        assert_eq!(ix.remove(0, 0), Some(c));
        assert_eq!(ix.subscribers(0), &[c, b]);
        assert_eq!(ix.remove(0, 1), None);
        ix.set_slot(0, 0, 9);
        assert_eq!(ix.subscribers(0)[0].slot, 9);
        assert_eq!(ix.total(), 1);
    }
}
