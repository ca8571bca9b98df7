//! Per-(symbol, tier) sequence expectations: gap and duplicate detection.
//!
//! The table is a `HashMap` created with room for `capacity_max` keys and
//! never grown past it, so looking up and updating a key on every price
//! allocates nothing; a key beyond the capacity is reported `Untracked`
//! and counted instead of growing the table.

use std::collections::HashMap;

use super::event::{ResetCause, SeqStatus};

#[derive(Debug, Clone, Copy)]
struct Expect {
    /// Next sequence number expected (last accepted + 1).
    next: u64,
    /// The stream `next` counts in: the last snapshot's stream id (0: a
    /// version-2 server, which sends none).
    stream: u64,
    /// A resync snapshot was asked for and has not arrived yet.
    resync_pending: bool,
    /// A reconnect happened: the next snapshot is checked against `next`.
    resuming: bool,
}

/// What [`SeqTracker::on_update`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateVerdict {
    /// Deliver the update with this status.
    Accept(SeqStatus),
    /// Old or duplicate (`seq < expected`): drop it.
    Old,
}

/// Expected sequence numbers, bounded by `capacity_max` keys.
///
/// A sequence counts within one stream id (docs/protocol.md, section 5):
/// every key remembers the stream of its last snapshot, and after a
/// reconnect a snapshot is a resume only if it is of that same stream and
/// continues the sequence; a snapshot of another stream (a restarted
/// server, an edge that follows a new stream) is a resync whatever its
/// sequence. Two version-2 servers (stream id 0 both times) are compared
/// by sequence alone, as before the stream id existed.
///
/// ```
/// use pricewire::client::{ResetCause, SeqStatus, SeqTracker};
///
/// let mut t = SeqTracker::new(4);
/// t.on_logon(7);
/// t.on_snapshot(1, 0, 100, 7);
/// t.resume(); // reconnected: expectations kept
/// // Same stream, the next seq: nothing was missed.
/// assert_eq!(t.on_snapshot(1, 0, 101, 7), SeqStatus::Resumed);
/// t.resume();
/// // A restarted server numbers a new stream: a resync, never a resume,
/// // even though its seq happens to continue.
/// let (status, cause) = t.on_snapshot_explained(1, 0, 102, 8);
/// assert_eq!(status, SeqStatus::Reset);
/// assert_eq!(cause, Some(ResetCause::NewStream { previous: 7 }));
/// ```
#[derive(Debug)]
pub struct SeqTracker {
    map: HashMap<(u16, u8), Expect>,
    capacity_max: usize,
    /// The stream LogonAccepted named for this session (updates of a key
    /// that has had no snapshot belong to it).
    session_stream: u64,
}

impl SeqTracker {
    /// An empty table with room for `capacity_max` keys, allocated here.
    ///
    /// # Panics
    ///
    /// If `capacity_max` is 0.
    pub fn new(capacity_max: usize) -> Self {
        assert!(capacity_max > 0, "sequence table needs room for one key");
        SeqTracker {
            map: HashMap::with_capacity(capacity_max),
            capacity_max,
            session_stream: 0,
        }
    }

    /// A LogonAccepted named `stream_id` as the session's stream.
    pub fn on_logon(&mut self, stream_id: u64) {
        self.session_stream = stream_id;
    }

    /// The stream a key's prices count in: its last snapshot's, else the
    /// session's.
    pub fn stream_of(&self, symbol: u16, tier: u8) -> u64 {
        self.map
            .get(&(symbol, tier))
            .map_or(self.session_stream, |e| e.stream)
    }

    /// Forgets every key (a new session starts from snapshots again).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// A new session resumes the old one: every key keeps its expectation,
    /// and its next snapshot says whether prices were missed
    /// ([`SeqStatus::Resumed`] or [`SeqStatus::Reset`]).
    pub fn resume(&mut self) {
        for e in self.map.values_mut() {
            e.resuming = true;
            e.resync_pending = false;
        }
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// True while a key waits for its first snapshot after a reconnect.
    pub fn is_resuming(&self, symbol: u16, tier: u8) -> bool {
        self.map.get(&(symbol, tier)).is_some_and(|e| e.resuming)
    }

    /// The next sequence number expected for a key, if tracked.
    pub fn expected(&self, symbol: u16, tier: u8) -> Option<u64> {
        self.map.get(&(symbol, tier)).map(|e| e.next)
    }

    /// A PriceSnapshot of stream `stream_id`: always accepted, resets the
    /// expectation. The first one of a key after [`SeqTracker::resume`] is
    /// [`SeqStatus::Resumed`] when it is of the key's stream and its `seq`
    /// is the last one accepted or the next: nothing was missed. A
    /// snapshot of another stream is [`SeqStatus::Reset`].
    pub fn on_snapshot(&mut self, symbol: u16, tier: u8, seq: u64, stream_id: u64) -> SeqStatus {
        self.on_snapshot_explained(symbol, tier, seq, stream_id).0
    }

    /// [`SeqTracker::on_snapshot`], with what the key held before it when
    /// the verdict is [`SeqStatus::Reset`] (`None` otherwise).
    pub fn on_snapshot_explained(
        &mut self,
        symbol: u16,
        tier: u8,
        seq: u64,
        stream_id: u64,
    ) -> (SeqStatus, Option<ResetCause>) {
        let Some(e) = self.slot(symbol, tier) else {
            return (SeqStatus::Untracked, None);
        };
        let prior = *e;
        // `checked_add`: a seq of u64::MAX from a broken server continues
        // nothing (and must not overflow).
        let continues = seq.checked_add(1) == Some(prior.next) || seq == prior.next;
        let resumed = prior.resuming && prior.next > 0 && prior.stream == stream_id && continues;
        *e = Expect {
            next: seq.saturating_add(1),
            stream: stream_id,
            resync_pending: false,
            resuming: false,
        };
        if resumed {
            return (SeqStatus::Resumed, None);
        }
        let cause = if prior.next == 0 {
            ResetCause::Fresh
        } else if prior.stream != stream_id {
            ResetCause::NewStream {
                previous: prior.stream,
            }
        } else {
            ResetCause::Resync {
                expected: prior.next,
                after_reconnect: prior.resuming,
            }
        };
        (SeqStatus::Reset, Some(cause))
    }

    /// A price from a SnapshotResponse. An answer is not part of the
    /// stream: it can overtake updates still on their way to the
    /// connection, which must still be accepted, so it leaves every
    /// expectation where it is (and adds no key). It only ends a tracked
    /// key's resync episode, so that a later gap asks again.
    pub fn on_response_price(&mut self, symbol: u16, tier: u8) {
        if let Some(e) = self.map.get_mut(&(symbol, tier)) {
            e.resync_pending = false;
        }
    }

    /// A PriceUpdate. A gap moves the expectation past the update (it is
    /// the newest full price) and asks for one resync per gap episode.
    pub fn on_update(&mut self, symbol: u16, tier: u8, seq: u64) -> UpdateVerdict {
        let known = self.map.contains_key(&(symbol, tier));
        let session_stream = self.session_stream;
        let Some(e) = self.slot(symbol, tier) else {
            return UpdateVerdict::Accept(SeqStatus::Untracked);
        };
        let next = seq.saturating_add(1);
        if !known {
            e.next = next;
            e.stream = session_stream;
            return UpdateVerdict::Accept(SeqStatus::First);
        }
        if seq < e.next {
            return UpdateVerdict::Old;
        }
        let expected = e.next;
        e.next = next;
        if seq == expected {
            return UpdateVerdict::Accept(SeqStatus::InOrder);
        }
        let resync = !e.resync_pending;
        e.resync_pending = true;
        UpdateVerdict::Accept(SeqStatus::Gap { expected, resync })
    }

    /// The key's entry, inserted if there is room. New keys start with
    /// `next = 0` (callers overwrite it).
    fn slot(&mut self, symbol: u16, tier: u8) -> Option<&mut Expect> {
        let full = self.map.len() >= self.capacity_max;
        if full && !self.map.contains_key(&(symbol, tier)) {
            return None;
        }
        Some(self.map.entry((symbol, tier)).or_insert(Expect {
            next: 0,
            stream: 0,
            resync_pending: false,
            resuming: false,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stream of the tests' server.
    const S: u64 = 9;

    #[test]
    fn snapshot_then_contiguous_updates_are_in_order() {
        let mut t = SeqTracker::new(8);
        assert_eq!(t.on_snapshot(1, 0, 10, S), SeqStatus::Reset);
        for seq in 11..20 {
            assert_eq!(
                t.on_update(1, 0, seq),
                UpdateVerdict::Accept(SeqStatus::InOrder)
            );
        }
        assert_eq!(t.expected(1, 0), Some(20));
    }

    #[test]
    fn gap_asks_once_until_a_snapshot_arrives() {
        let mut t = SeqTracker::new(8);
        t.on_snapshot(1, 2, 5, S);
        let gap = |expected, resync| UpdateVerdict::Accept(SeqStatus::Gap { expected, resync });
        assert_eq!(t.on_update(1, 2, 8), gap(6, true));
        assert_eq!(
            t.on_update(1, 2, 9),
            UpdateVerdict::Accept(SeqStatus::InOrder)
        );
        assert_eq!(
            t.on_update(1, 2, 12),
            gap(10, false),
            "resync already in flight"
        );
        assert_eq!(t.on_snapshot(1, 2, 20, S), SeqStatus::Reset);
        assert_eq!(
            t.on_update(1, 2, 23),
            gap(21, true),
            "a new episode asks again"
        );
    }

    #[test]
    fn after_a_resume_a_snapshot_resyncs_only_on_a_real_gap() {
        let mut t = SeqTracker::new(8);
        for (sym, seq) in [(1, 10), (2, 10), (3, 10), (4, 10)] {
            t.on_snapshot(sym, 0, seq, S);
        }
        t.resume();
        assert!(t.is_resuming(1, 0));
        // The price held, or the next one: nothing missed.
        assert_eq!(t.on_snapshot(1, 0, 10, S), SeqStatus::Resumed);
        assert_eq!(t.on_snapshot(2, 0, 11, S), SeqStatus::Resumed);
        // Prices missed, or a server behind (restarted): a resync.
        assert_eq!(t.on_snapshot(3, 0, 13, S), SeqStatus::Reset);
        assert_eq!(t.on_snapshot(4, 0, 4, S), SeqStatus::Reset);
        assert_eq!(t.expected(4, 0), Some(5));
        // Only the first snapshot after the resume is checked.
        assert!(!t.is_resuming(1, 0));
        assert_eq!(t.on_snapshot(1, 0, 10, S), SeqStatus::Reset);
        assert_eq!(
            t.on_update(2, 0, 12),
            UpdateVerdict::Accept(SeqStatus::InOrder)
        );
    }

    #[test]
    fn old_and_duplicate_updates_are_dropped() {
        let mut t = SeqTracker::new(8);
        t.on_snapshot(3, 1, 100, S);
        assert_eq!(t.on_update(3, 1, 100), UpdateVerdict::Old);
        assert_eq!(t.on_update(3, 1, 50), UpdateVerdict::Old);
        assert_eq!(
            t.on_update(3, 1, 101),
            UpdateVerdict::Accept(SeqStatus::InOrder)
        );
    }

    #[test]
    fn snapshot_resets_even_backwards_but_a_response_moves_nothing() {
        let mut t = SeqTracker::new(8);
        t.on_snapshot(1, 0, 50, S);
        t.on_snapshot(1, 0, 40, S);
        assert_eq!(t.expected(1, 0), Some(41));
        t.on_response_price(1, 0);
        assert_eq!(t.expected(1, 0), Some(41));
        // Updates the answer overtook are still the stream's next prices.
        for seq in 41..46 {
            assert_eq!(
                t.on_update(1, 0, seq),
                UpdateVerdict::Accept(SeqStatus::InOrder)
            );
        }
        // An answer for a key the stream does not carry adds none.
        t.on_response_price(7, 0);
        assert_eq!((t.len(), t.expected(7, 0)), (1, None));
    }

    #[test]
    fn a_response_ends_the_resync_episode_so_the_next_gap_asks_again() {
        let mut t = SeqTracker::new(8);
        t.on_snapshot(1, 0, 5, S);
        let gap = |expected, resync| UpdateVerdict::Accept(SeqStatus::Gap { expected, resync });
        assert_eq!(t.on_update(1, 0, 8), gap(6, true));
        t.on_response_price(1, 0);
        assert_eq!(t.on_update(1, 0, 11), gap(9, true));
    }

    #[test]
    fn a_reset_says_what_the_key_held_before_it() {
        let mut t = SeqTracker::new(8);
        let fresh = t.on_snapshot_explained(1, 0, 10, S);
        assert_eq!(fresh, (SeqStatus::Reset, Some(ResetCause::Fresh)));
        let mid = t.on_snapshot_explained(1, 0, 20, S);
        let resync = |expected, after_reconnect| ResetCause::Resync {
            expected,
            after_reconnect,
        };
        assert_eq!(mid, (SeqStatus::Reset, Some(resync(11, false))));
        t.resume();
        let missed = t.on_snapshot_explained(1, 0, 30, S);
        assert_eq!(missed, (SeqStatus::Reset, Some(resync(21, true))));
        t.resume();
        let other = t.on_snapshot_explained(1, 0, 31, S + 1);
        let new = ResetCause::NewStream { previous: S };
        assert_eq!(other, (SeqStatus::Reset, Some(new)));
        t.resume();
        assert_eq!(
            t.on_snapshot_explained(1, 0, 31, S + 1),
            (SeqStatus::Resumed, None)
        );
        // A broken server's u64::MAX continues nothing and does not overflow.
        t.resume();
        let (status, _) = t.on_snapshot_explained(1, 0, u64::MAX, S + 1);
        assert_eq!(status, SeqStatus::Reset);
        assert_eq!(t.expected(1, 0), Some(u64::MAX));
    }

    #[test]
    fn tiers_are_tracked_apart() {
        let mut t = SeqTracker::new(8);
        t.on_snapshot(1, 0, 5, S);
        t.on_snapshot(1, 1, 7, S);
        assert_eq!(
            t.on_update(1, 0, 6),
            UpdateVerdict::Accept(SeqStatus::InOrder)
        );
        assert_eq!(
            t.on_update(1, 1, 8),
            UpdateVerdict::Accept(SeqStatus::InOrder)
        );
    }

    #[test]
    fn table_is_bounded() {
        let mut t = SeqTracker::new(2);
        t.on_snapshot(1, 0, 1, S);
        t.on_snapshot(2, 0, 1, S);
        assert_eq!(t.on_snapshot(3, 0, 1, S), SeqStatus::Untracked);
        assert_eq!(
            t.on_update(3, 0, 2),
            UpdateVerdict::Accept(SeqStatus::Untracked)
        );
        assert_eq!(t.len(), 2);
        assert_eq!(
            t.on_update(1, 0, 2),
            UpdateVerdict::Accept(SeqStatus::InOrder)
        );
    }

    #[test]
    fn first_update_without_snapshot_starts_tracking() {
        let mut t = SeqTracker::new(4);
        assert_eq!(
            t.on_update(9, 0, 77),
            UpdateVerdict::Accept(SeqStatus::First)
        );
        assert_eq!(
            t.on_update(9, 0, 78),
            UpdateVerdict::Accept(SeqStatus::InOrder)
        );
    }

    #[test]
    fn a_snapshot_of_another_stream_is_a_resync_whatever_its_sequence() {
        let mut t = SeqTracker::new(8);
        t.on_logon(S);
        for sym in 1..=3 {
            t.on_snapshot(sym, 0, 10, S);
        }
        t.resume();
        t.on_logon(77);
        // A restarted server (stream 77) that reached the held sequence,
        // or the next one: still a resync, never a resume.
        assert_eq!(t.on_snapshot(1, 0, 10, 77), SeqStatus::Reset);
        assert_eq!(t.on_snapshot(2, 0, 11, 77), SeqStatus::Reset);
        // The same stream continued elsewhere (another edge): a resume.
        assert_eq!(t.on_snapshot(3, 0, 11, S), SeqStatus::Resumed);
        assert_eq!(t.stream_of(1, 0), 77);
        assert_eq!(t.stream_of(3, 0), S);
        // Updates of a key with no snapshot count in the session's stream.
        assert_eq!(t.stream_of(4, 0), 77);
        t.on_update(4, 0, 5);
        assert_eq!(t.stream_of(4, 0), 77);
    }

    #[test]
    fn version_2_servers_without_a_stream_id_resume_by_sequence_alone() {
        let mut t = SeqTracker::new(8);
        t.on_snapshot(1, 0, 10, 0);
        t.on_snapshot(2, 0, 10, 0);
        t.resume();
        assert_eq!(t.on_snapshot(1, 0, 11, 0), SeqStatus::Resumed);
        // A version-3 server after a version-2 one: no common stream.
        assert_eq!(t.on_snapshot(2, 0, 11, S), SeqStatus::Reset);
    }
}
