//! Whether the data set Redis answers from is the one the accounts came
//! from: an empty or stale Redis is a dependency fault, never a revocation.
//!
//! Contract: every Redis read that could make an account absent
//! (`HGETALL` of a record) runs in one `MULTI`/`EXEC` transaction with a
//! read of the generation marker (`GET <prefix>generation`) and of the
//! index set (`SCARD <prefix>accounts`), so the record and the marker are
//! seen at the same instant ([`Observation`]). [`DataSet::observe`] judges
//! it ([`judge`]): absences are **trusted** (a deleted account is revoked)
//! only when the marker holds an integer at or above the highest this
//! process has seen, or, in a deployment that has never written a marker,
//! when the index set is non-empty. Otherwise the data set is **lost**
//! ([`DataSetFault`]): absences are ignored, cached accounts keep
//! serving, and the fault is on `/metrics` until a later read trusts the
//! data again. The high-water mark only rises (a marker that went
//! backwards is a stale replica, not a new data set). Allocates nothing;
//! single owner (the refresher thread); counters in [`DataSetStats`].

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

/// Why the data set is not trusted (or, for [`DataSetFault::IndexUnreadable`]
/// under a good marker, degraded: no prefetch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataSetFault {
    /// The marker was seen before and is gone (Redis restarted empty,
    /// flushed, or failed over to an empty replica).
    GenerationMissing,
    /// The marker is below the highest value seen (a stale replica).
    GenerationBehind,
    /// The marker is not an integer, or not a string key.
    GenerationUnreadable,
    /// No marker ever seen and the index set is empty or missing: there
    /// is no evidence of a data set at all.
    NoIndex,
    /// The index set is of another type (`SET pricewire:accounts oops`):
    /// no prefetch; untrusted unless a good marker vouches for the data.
    IndexUnreadable,
}

impl DataSetFault {
    /// Every fault, in metric-label order.
    pub const ALL: [DataSetFault; 5] = [
        DataSetFault::GenerationMissing,
        DataSetFault::GenerationBehind,
        DataSetFault::GenerationUnreadable,
        DataSetFault::NoIndex,
        DataSetFault::IndexUnreadable,
    ];

    /// The label value on `/metrics` and in logs.
    pub fn name(self) -> &'static str {
        match self {
            DataSetFault::GenerationMissing => "generation_missing",
            DataSetFault::GenerationBehind => "generation_behind",
            DataSetFault::GenerationUnreadable => "generation_unreadable",
            DataSetFault::NoIndex => "no_index",
            DataSetFault::IndexUnreadable => "index_unreadable",
        }
    }
}

impl std::fmt::Display for DataSetFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The generation marker as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// No such key.
    Absent,
    /// A decimal integer.
    Value(u64),
    /// Another type, or not a decimal integer.
    Unreadable,
}

/// The index set as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Index {
    /// `SCARD`: the names it holds (0 when the key is missing).
    Names(u64),
    /// Another type.
    Unreadable,
}

/// The marker and the index, read in one transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// `GET <prefix>generation`.
    pub marker: Marker,
    /// `SCARD <prefix>accounts`.
    pub index: Index,
}

/// What an observation means for absences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Absences (deleted records) may be acted upon.
    pub trusted: bool,
    /// What is wrong, if anything (with `trusted`, only `IndexUnreadable`).
    pub fault: Option<DataSetFault>,
}

/// The rule, on its own so it can be tested over every case: see the
/// module docs. `high_water` is the highest marker seen before.
pub fn judge(obs: Observation, high_water: Option<u64>) -> Verdict {
    let untrusted = |f| Verdict {
        trusted: false,
        fault: Some(f),
    };
    match obs.marker {
        Marker::Value(g) if high_water.is_none_or(|h| g >= h) => Verdict {
            trusted: true,
            fault: (obs.index == Index::Unreadable).then_some(DataSetFault::IndexUnreadable),
        },
        Marker::Value(_) => untrusted(DataSetFault::GenerationBehind),
        Marker::Unreadable => untrusted(DataSetFault::GenerationUnreadable),
        Marker::Absent if high_water.is_some() => untrusted(DataSetFault::GenerationMissing),
        Marker::Absent => match obs.index {
            Index::Names(n) if n > 0 => Verdict {
                trusted: true,
                fault: None,
            },
            Index::Names(_) => untrusted(DataSetFault::NoIndex),
            Index::Unreadable => untrusted(DataSetFault::IndexUnreadable),
        },
    }
}

/// Data-set gauges and counters for `/metrics`.
#[derive(Debug)]
pub struct DataSetStats {
    /// 1 trusted, 0 lost, -1 not observed yet.
    pub trusted: AtomicI64,
    /// 1 while the fault (indexed as [`DataSetFault::ALL`]) is observed.
    pub fault: [AtomicU8; 5],
    /// Times each fault began.
    pub faults_total: [AtomicU64; 5],
    /// The marker last read (-1 absent or unreadable).
    pub generation: AtomicI64,
    /// The highest marker seen (-1 none yet).
    pub generation_high_water: AtomicI64,
    /// Observations made (transactions and probes).
    pub observations: AtomicU64,
}

impl Default for DataSetStats {
    fn default() -> Self {
        DataSetStats {
            trusted: AtomicI64::new(-1),
            fault: Default::default(),
            faults_total: Default::default(),
            generation: AtomicI64::new(-1),
            generation_high_water: AtomicI64::new(-1),
            observations: AtomicU64::new(0),
        }
    }
}

impl DataSetStats {
    /// Whether absences are trusted now (`None` before the first read).
    pub fn is_trusted(&self) -> Option<bool> {
        match self.trusted.load(Relaxed) {
            -1 => None,
            v => Some(v == 1),
        }
    }

    /// The fault observed now, if any.
    pub fn current_fault(&self) -> Option<DataSetFault> {
        DataSetFault::ALL
            .into_iter()
            .zip(&self.fault)
            .find(|(_, f)| f.load(Relaxed) == 1)
            .map(|(d, _)| d)
    }
}

fn as_gauge(v: Option<u64>) -> i64 {
    v.map_or(-1, |g| i64::try_from(g).unwrap_or(i64::MAX))
}

/// A change of verdict, for the caller to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The verdict before (`None`: the first observation).
    pub before: Option<Verdict>,
    /// The verdict now.
    pub now: Verdict,
    /// The highest marker seen, after this observation.
    pub high_water: Option<u64>,
}

/// The tracker: the high-water mark and the current verdict.
#[derive(Debug)]
pub struct DataSet {
    high_water: Option<u64>,
    verdict: Option<Verdict>,
    stats: Arc<DataSetStats>,
}

impl DataSet {
    /// Nothing observed yet.
    pub fn new(stats: Arc<DataSetStats>) -> DataSet {
        DataSet {
            high_water: None,
            verdict: None,
            stats,
        }
    }

    /// Judges one observation, raises the high-water mark, publishes the
    /// gauges; returns the change when the verdict moved.
    pub fn observe(&mut self, obs: Observation) -> (Verdict, Option<Change>) {
        let v = judge(obs, self.high_water);
        let s = &self.stats;
        s.observations.fetch_add(1, Relaxed);
        let marker = match obs.marker {
            Marker::Value(g) => Some(g),
            _ => None,
        };
        if v.trusted {
            self.high_water = self.high_water.max(marker);
        }
        s.generation.store(as_gauge(marker), Relaxed);
        s.generation_high_water
            .store(as_gauge(self.high_water), Relaxed);
        s.trusted.store(i64::from(v.trusted), Relaxed);
        for (i, f) in DataSetFault::ALL.into_iter().enumerate() {
            let on = v.fault == Some(f);
            let was = self.verdict.and_then(|p| p.fault) == Some(f);
            if on && !was {
                s.faults_total[i].fetch_add(1, Relaxed);
            }
            s.fault[i].store(u8::from(on), Relaxed);
        }
        let before = self.verdict.replace(v);
        let change = (before != Some(v)).then_some(Change {
            before,
            now: v,
            high_water: self.high_water,
        });
        (v, change)
    }

    /// Whether absences are trusted now (false before any observation).
    pub fn trusted(&self) -> bool {
        self.verdict.is_some_and(|v| v.trusted)
    }

    /// The current verdict, if any observation was made.
    pub fn verdict(&self) -> Option<Verdict> {
        self.verdict
    }

    /// The counters.
    pub fn stats(&self) -> Arc<DataSetStats> {
        Arc::clone(&self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn obs(marker: Marker, index: Index) -> Observation {
        Observation { marker, index }
    }

    fn marker() -> impl Strategy<Value = Marker> {
        prop_oneof![
            Just(Marker::Absent),
            Just(Marker::Unreadable),
            (0u64..8).prop_map(Marker::Value),
        ]
    }

    fn index() -> impl Strategy<Value = Index> {
        prop_oneof![Just(Index::Unreadable), (0u64..3).prop_map(Index::Names)]
    }

    #[test]
    fn an_empty_redis_is_never_trusted() {
        let empty = obs(Marker::Absent, Index::Names(0));
        for hw in [None, Some(0), Some(7)] {
            assert!(!judge(empty, hw).trusted, "high water {hw:?}");
        }
    }

    #[test]
    fn a_wrong_typed_index_is_a_fault_a_good_marker_can_vouch_past() {
        let v = judge(obs(Marker::Value(3), Index::Unreadable), Some(3));
        assert_eq!(
            (v.trusted, v.fault),
            (true, Some(DataSetFault::IndexUnreadable))
        );
        let v = judge(obs(Marker::Absent, Index::Unreadable), None);
        assert_eq!(
            (v.trusted, v.fault),
            (false, Some(DataSetFault::IndexUnreadable))
        );
    }

    proptest! {
        /// Over every history of observations: an observation is trusted
        /// only if its marker is at least every marker trusted before it,
        /// or no marker was ever trusted and the index holds names; a
        /// marker once trusted makes its absence a fault for ever after.
        #[test]
        fn trusted_only_with_evidence_and_never_backwards(
            history in proptest::collection::vec((marker(), index()), 1..40)
        ) {
            let mut ds = DataSet::new(Arc::default());
            let mut best: Option<u64> = None;
            for (m, i) in history {
                let (v, _) = ds.observe(obs(m, i));
                let evidence = match m {
                    Marker::Value(g) => best.is_none_or(|b| g >= b),
                    Marker::Absent => best.is_none() && matches!(i, Index::Names(n) if n > 0),
                    Marker::Unreadable => false,
                };
                prop_assert_eq!(v.trusted, evidence);
                match v.trusted {
                    true => prop_assert!(v.fault.is_none_or(|f| f == DataSetFault::IndexUnreadable)),
                    false => prop_assert!(v.fault.is_some()),
                }
                if let (true, Marker::Value(g)) = (v.trusted, m) {
                    best = best.max(Some(g));
                }
                let s = ds.stats();
                prop_assert_eq!(s.is_trusted(), Some(v.trusted));
                prop_assert_eq!(s.current_fault(), v.fault);
                prop_assert_eq!(s.generation_high_water.load(Relaxed), as_gauge(best));
            }
        }
    }

    #[test]
    fn a_fault_is_counted_once_per_episode() {
        let mut ds = DataSet::new(Arc::default());
        ds.observe(obs(Marker::Value(5), Index::Names(1)));
        for _ in 0..3 {
            ds.observe(obs(Marker::Absent, Index::Names(0)));
        }
        ds.observe(obs(Marker::Value(6), Index::Names(1)));
        let (_, change) = ds.observe(obs(Marker::Absent, Index::Names(0)));
        let s = ds.stats();
        assert_eq!(s.faults_total[0].load(Relaxed), 2);
        let change = change.expect("trusted -> lost is a change");
        assert_eq!(change.now.fault, Some(DataSetFault::GenerationMissing));
        assert_eq!(change.high_water, Some(6));
    }
}
