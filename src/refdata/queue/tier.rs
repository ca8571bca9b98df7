//! One tier of unknown-name misses: by sequence (oldest displaced first)
//! and by source (taken round robin over sources, each source's newest
//! first).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use super::SourceKey;

#[derive(Debug, Default)]
pub(super) struct Tier {
    by_seq: BTreeMap<u64, (SourceKey, String)>,
    by_source: HashMap<SourceKey, BTreeSet<u64>>,
    /// Sources with misses here, in round-robin order.
    ring: VecDeque<SourceKey>,
}

impl Tier {
    pub(super) fn len(&self) -> usize {
        self.by_seq.len()
    }

    pub(super) fn held_by(&self, source: SourceKey) -> usize {
        self.by_source.get(&source).map_or(0, BTreeSet::len)
    }

    pub(super) fn oldest(&self) -> Option<u64> {
        self.by_seq.keys().next().copied()
    }

    pub(super) fn oldest_of(&self, source: SourceKey) -> Option<u64> {
        self.by_source.get(&source)?.first().copied()
    }

    pub(super) fn insert(&mut self, seq: u64, source: SourceKey, name: String) {
        let set = self.by_source.entry(source).or_default();
        if set.is_empty() {
            self.ring.push_back(source);
        }
        set.insert(seq);
        self.by_seq.insert(seq, (source, name));
    }

    /// Removes `seq`; its name, if it was here.
    pub(super) fn remove(&mut self, seq: u64) -> Option<String> {
        let (source, name) = self.by_seq.remove(&seq)?;
        if let Some(set) = self.by_source.get_mut(&source) {
            set.remove(&seq);
            if set.is_empty() {
                self.by_source.remove(&source);
                self.ring.retain(|s| *s != source);
            }
        }
        Some(name)
    }

    /// The next source's newest miss.
    pub(super) fn pop(&mut self) -> Option<String> {
        let source = self.ring.pop_front()?;
        let set = self
            .by_source
            .get_mut(&source)
            .expect("ring sources hold misses");
        let seq = set.pop_last().expect("non-empty");
        if set.is_empty() {
            self.by_source.remove(&source);
        } else {
            self.ring.push_back(source);
        }
        self.by_seq.remove(&seq).map(|(_, n)| n)
    }

    /// Every source's count, for the bound checks in tests.
    #[cfg(test)]
    pub(super) fn per_source(&self) -> impl Iterator<Item = (SourceKey, usize)> + '_ {
        self.by_source.iter().map(|(s, set)| (*s, set.len()))
    }
}
