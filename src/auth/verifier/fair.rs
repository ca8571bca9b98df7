//! The verifier's queue: bounded, and fair between keys (accounts on the
//! subscriber listener, provider ids on the feed listener).
//!
//! - **Bounded**: at most `capacity` items in all, so at most `capacity`
//!   keys.
//! - **In turn**: keys with items queued are served round-robin, one item
//!   each per round, each key's items in arrival order. An item whose key
//!   has `k` items ahead of it waits for at most `k + 1` items of each
//!   other key: a key's first item waits for at most one item of each
//!   other key, however many another key has queued.
//! - **Full**: an item arriving at a full queue pushes out the newest item
//!   of the key holding the most, if that key would still hold at least as
//!   many as the arriving key afterwards (it holds two or more than the
//!   arriving key holds now); otherwise the arriving item is refused. So a
//!   key holding few items is never refused because one other key holds
//!   many: one account's flood can neither delay another account's first
//!   logon by more than one verification per account queued, nor keep it
//!   out of the queue.
//!
//! Not synchronised: the verifier holds it in a mutex, each call O(log n).
//! It allocates per key (a deque) on the cold logon path only.

use std::collections::{BTreeSet, HashMap, VecDeque};

/// What a push did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed<T> {
    /// Queued.
    Queued,
    /// Queued, pushing out this item of the heaviest key (answer it busy).
    Evicted(T),
    /// The queue is full and no key holds enough more: refused.
    Full(T),
}

pub(crate) struct FairQueue<T> {
    per_key: HashMap<u64, VecDeque<T>>,
    /// Keys with items, in service order.
    turn: VecDeque<u64>,
    /// (items queued, key) of every key with items: the heaviest last.
    sizes: BTreeSet<(usize, u64)>,
    len: usize,
    capacity: usize,
}

impl<T> FairQueue<T> {
    pub(crate) fn new(capacity: usize) -> FairQueue<T> {
        assert!(capacity > 0, "a verifier queue holds at least one job");
        FairQueue {
            per_key: HashMap::new(),
            turn: VecDeque::new(),
            sizes: BTreeSet::new(),
            len: 0,
            capacity,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn count(&self, key: u64) -> usize {
        self.per_key.get(&key).map_or(0, VecDeque::len)
    }

    fn resize(&mut self, key: u64, from: usize, to: usize) {
        self.sizes.remove(&(from, key));
        if to > 0 {
            self.sizes.insert((to, key));
        }
    }

    pub(crate) fn push(&mut self, key: u64, item: T) -> Pushed<T> {
        let mine = self.count(key);
        let mut evicted = None;
        if self.len >= self.capacity {
            match self.sizes.last().copied() {
                Some((most, heavy)) if most >= mine + 2 => {
                    let q = self.per_key.get_mut(&heavy).expect("a sized key has items");
                    evicted = q.pop_back();
                    self.resize(heavy, most, most - 1);
                    self.len -= 1;
                }
                _ => return Pushed::Full(item),
            }
        }
        let q = self.per_key.entry(key).or_default();
        q.push_back(item);
        if mine == 0 {
            self.turn.push_back(key);
        }
        self.resize(key, mine, mine + 1);
        self.len += 1;
        debug_assert!(self.len <= self.capacity);
        match evicted {
            Some(e) => Pushed::Evicted(e),
            None => Pushed::Queued,
        }
    }

    pub(crate) fn pop(&mut self) -> Option<T> {
        let key = self.turn.pop_front()?;
        let q = self.per_key.get_mut(&key).expect("a key in turn has items");
        let item = q.pop_front().expect("a key in turn has items");
        let left = q.len();
        if left == 0 {
            self.per_key.remove(&key);
        } else {
            self.turn.push_back(key);
        }
        self.resize(key, left + 1, left);
        self.len -= 1;
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn serves_keys_in_turn_and_a_new_key_pushes_out_the_flood() {
        let mut q = FairQueue::new(4);
        for n in 0..4 {
            assert_eq!(q.push(1, (1, n)), Pushed::Queued);
        }
        assert_eq!(q.push(1, (1, 4)), Pushed::Full((1, 4)));
        // Key 2's first item evicts key 1's newest, and is served second.
        assert_eq!(q.push(2, (2, 0)), Pushed::Evicted((1, 3)));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, [(1, 0), (2, 0), (1, 1), (1, 2)]);
        assert_eq!(q.len(), 0);
    }

    proptest! {
        /// Over any pushes and pops: never more than the capacity; a key
        /// holding fewer than the heaviest minus one is never refused; and
        /// an item is served after at most (items of its key ahead + 1) of
        /// each other key that arrived before it was served.
        #[test]
        fn bounded_fair_and_never_refuses_the_light(
            ops in proptest::collection::vec((0u64..6, any::<bool>()), 1..400),
            capacity in 1usize..24,
        ) {
            let mut q = FairQueue::new(capacity);
            // Per item: (key, items of its key ahead, others served since).
            let mut waiting: HashMap<u64, (u64, usize, HashMap<u64, usize>)> = HashMap::new();
            let mut next = 0u64;
            for (key, is_push) in ops {
                if is_push {
                    let mine = q.count(key);
                    let heaviest = q.sizes.last().map_or(0, |s| s.0);
                    let full = q.len() >= capacity;
                    match q.push(key, next) {
                        Pushed::Queued => prop_assert!(!full),
                        Pushed::Evicted(e) => {
                            prop_assert!(full && heaviest >= mine + 2);
                            waiting.remove(&e);
                        }
                        Pushed::Full(_) => {
                            prop_assert!(full && heaviest < mine + 2);
                            next += 1;
                            continue;
                        }
                    }
                    waiting.insert(next, (key, mine, HashMap::new()));
                    next += 1;
                } else if let Some(id) = q.pop() {
                    let (key, ahead, others) = waiting.remove(&id).expect("a queued item");
                    for (k, n) in &others {
                        prop_assert!(*n <= ahead + 1, "key {k} served {n} before an item {ahead} deep");
                    }
                    for (k2, _, o) in waiting.values_mut() {
                        if *k2 != key {
                            *o.entry(key).or_default() += 1;
                        }
                    }
                }
                prop_assert!(q.len() <= capacity);
                prop_assert_eq!(q.len(), waiting.len());
            }
        }
    }
}
