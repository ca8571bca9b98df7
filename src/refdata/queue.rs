//! The refresher's pending requests: bounded, one per name, in an order a
//! flood of unknown names cannot take over.
//!
//! Contract: at most `misses_max` misses (a logon is waiting) and at most
//! `refreshes_max` refreshes (a cached entry is serving meanwhile) are
//! pending, one request per name; a name asked for again is coalesced.
//! Misses are of two classes: a **known** name (one this process has seen
//! valid: the cache holds a record for it, however old) and an **unknown**
//! one. Order ([`Pending::pop`]): known misses first (oldest first), then
//! unknown misses and refreshes in turn, one each; unknown misses are
//! taken round robin over their sources (the client's address, IPv6 by
//! /64), each source's newest first. A source holds at most
//! `per_source_max` unknown misses: its next one displaces its oldest. At
//! the `misses_max` bound a new miss displaces the oldest unknown miss of
//! any source, so requests left over from a flood never keep out the
//! logons that come after it. Every displaced or dropped request is
//! counted ([`Offered`]); its client was answered `Unavailable` and asks
//! again. Operations are O(log n) on preallocated-at-first-use maps.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;

use super::cache::RequestKind;

/// A request's source for the per-source bound: the client's address
/// (IPv4, or an IPv6 /64), or [`SourceKey::ANY`] for lookups that name
/// none (no per-source bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SourceKey(u128);

impl SourceKey {
    /// Lookups without a source address: only the global bounds apply.
    pub(crate) const ANY: SourceKey = SourceKey(u128::MAX);

    /// The key of a client address: IPv4 (also IPv4-mapped IPv6) whole,
    /// IPv6 by its /64 (one site's allocation).
    pub(crate) fn of(ip: IpAddr) -> SourceKey {
        let v6 = match ip {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        let bits = u128::from(v6);
        match v6.to_ipv4_mapped() {
            Some(_) => SourceKey(bits),
            None => SourceKey(bits & !u128::from(u64::MAX)),
        }
    }
}

/// Which class a new request falls in (the caller knows from the cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Class {
    /// A logon waits for a name seen valid before.
    KnownMiss,
    /// A logon waits for a name never seen valid.
    UnknownMiss,
    /// A cached entry serves meanwhile (XFetch, expired).
    Refresh,
}

/// A request taken for a fetch; hand it back with [`Pending::done`] or
/// [`Pending::requeue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Taken {
    pub(crate) name: String,
    pub(crate) kind: RequestKind,
    pub(crate) class: Class,
    source: SourceKey,
}

/// What became of an offered request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offered {
    /// Queued.
    Queued,
    /// One for the name was pending (possibly moved up or made newest).
    Coalesced,
    /// Queued, and the oldest unknown miss was dropped for it.
    Displaced,
    /// Queued, and its source's oldest unknown miss was dropped for it.
    SourceLimited,
    /// Not queued: its class is full and nothing can make room.
    Dropped,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    class: Class,
    kind: RequestKind,
    seq: u64,
    source: SourceKey,
    in_flight: bool,
}

/// The queue (see the module docs). One `Mutex` around it, shared by the
/// lookups (offer) and the refresher (pop, done, requeue).
#[derive(Debug)]
pub(crate) struct Pending {
    names: HashMap<String, Slot>,
    known: BTreeMap<u64, String>,
    refresh: BTreeMap<u64, String>,
    /// Every unknown miss by sequence (the oldest is displaced first).
    unknown: BTreeMap<u64, String>,
    by_source: HashMap<SourceKey, BTreeSet<u64>>,
    /// Sources with unknown misses, in round-robin order.
    ring: VecDeque<SourceKey>,
    /// Sequence numbers rise from the middle; requeued FIFO entries take
    /// numbers below every queued one (`front`).
    next: u64,
    front: u64,
    refresh_turn: bool,
    misses_max: usize,
    refreshes_max: usize,
    per_source_max: usize,
}

const SEQ_START: u64 = 1 << 62;

impl Pending {
    /// An empty queue with its bounds (each at least 1).
    pub(crate) fn new(misses_max: usize, refreshes_max: usize, per_source_max: usize) -> Pending {
        assert!(misses_max >= 1 && refreshes_max >= 1 && per_source_max >= 1);
        Pending {
            names: HashMap::new(),
            known: BTreeMap::new(),
            refresh: BTreeMap::new(),
            unknown: BTreeMap::new(),
            by_source: HashMap::new(),
            ring: VecDeque::new(),
            next: SEQ_START,
            front: SEQ_START,
            refresh_turn: false,
            misses_max,
            refreshes_max,
            per_source_max,
        }
    }

    /// Requests pending (queued or being fetched).
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    /// Queued misses (known plus unknown).
    pub(crate) fn misses(&self) -> usize {
        self.known.len() + self.unknown.len()
    }

    /// Queued refreshes.
    pub(crate) fn refreshes(&self) -> usize {
        self.refresh.len()
    }

    /// Whether a request for `name` is pending.
    #[cfg(test)]
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// Offers a request (see [`Offered`]).
    pub(crate) fn offer(
        &mut self,
        name: &str,
        kind: RequestKind,
        class: Class,
        source: SourceKey,
    ) -> Offered {
        if let Some(slot) = self.names.get(name).copied() {
            self.coalesce(name, slot, kind, class, source);
            return Offered::Coalesced;
        }
        let made_room = match class {
            Class::Refresh if self.refresh.len() >= self.refreshes_max => return Offered::Dropped,
            Class::Refresh => Offered::Queued,
            Class::KnownMiss => match self.room_for_miss() {
                Some(o) => o,
                None => return Offered::Dropped,
            },
            Class::UnknownMiss => match self.room_for_unknown(source) {
                Some(o) => o,
                None => return Offered::Dropped,
            },
        };
        self.insert(name.to_string(), kind, class, source);
        made_room
    }

    /// Takes the next request (module docs); refreshes only when
    /// `refreshes` (the data set is trusted).
    pub(crate) fn pop(&mut self, refreshes: bool) -> Option<Taken> {
        let seq_name = match self.known.pop_first() {
            Some((_, n)) => Some((Class::KnownMiss, n)),
            None => self.pop_unknown_or_refresh(refreshes),
        };
        let (class, name) = seq_name?;
        let slot = self.names.get_mut(&name).expect("queued names have a slot");
        slot.in_flight = true;
        Some(Taken {
            kind: slot.kind,
            class,
            source: slot.source,
            name,
        })
    }

    /// The fetch of `t` is over: the name may be asked for again.
    pub(crate) fn done(&mut self, name: &str) {
        self.names.remove(name);
    }

    /// The fetch of `t` could not be made (Redis failed): back in the
    /// queue where it was taken from (FIFO classes at their front, an
    /// unknown miss as its source's newest). Never dropped: it held its
    /// place under the bounds while in flight.
    pub(crate) fn requeue(&mut self, t: Taken) {
        let Some(slot) = self.names.get(&t.name).copied() else {
            return;
        };
        let seq = match slot.class {
            Class::UnknownMiss => self.bump(),
            _ => {
                self.front -= 1;
                self.front
            }
        };
        self.names.remove(&t.name);
        self.place(t.name, slot.kind, slot.class, slot.source, seq);
    }

    fn coalesce(
        &mut self,
        name: &str,
        slot: Slot,
        kind: RequestKind,
        class: Class,
        source: SourceKey,
    ) {
        if slot.in_flight {
            return;
        }
        match slot.class {
            // A refresh of a name a logon now waits for becomes a miss
            // (the entry no longer serves), if the misses have room.
            Class::Refresh if class != Class::Refresh => {
                let room = match class {
                    Class::UnknownMiss => self.room_for_unknown(source),
                    _ => self.room_for_miss(),
                };
                if room.is_some() {
                    self.refresh.remove(&slot.seq);
                    self.names.remove(name);
                    self.insert(name.to_string(), kind, class, source);
                }
            }
            // Asked again: the newest of its source.
            Class::UnknownMiss if class == Class::UnknownMiss => {
                self.remove_unknown(slot.seq, slot.source);
                self.names.remove(name);
                let seq = self.bump();
                self.place(name.to_string(), slot.kind, slot.class, slot.source, seq);
            }
            _ => {}
        }
    }

    fn room_for_miss(&mut self) -> Option<Offered> {
        if self.misses() < self.misses_max {
            return Some(Offered::Queued);
        }
        let (&oldest, _) = self.unknown.first_key_value()?;
        self.drop_unknown(oldest);
        Some(Offered::Displaced)
    }

    fn room_for_unknown(&mut self, source: SourceKey) -> Option<Offered> {
        let held = self.by_source.get(&source).map_or(0, BTreeSet::len);
        if source != SourceKey::ANY && held >= self.per_source_max {
            let oldest = *self.by_source[&source].first().expect("held > 0");
            self.drop_unknown(oldest);
            return Some(Offered::SourceLimited);
        }
        self.room_for_miss()
    }

    fn drop_unknown(&mut self, seq: u64) {
        let name = self
            .unknown
            .get(&seq)
            .cloned()
            .expect("a queued unknown miss");
        let source = self.names[&name].source;
        self.remove_unknown(seq, source);
        self.names.remove(&name);
    }

    fn remove_unknown(&mut self, seq: u64, source: SourceKey) {
        self.unknown.remove(&seq);
        if let Some(set) = self.by_source.get_mut(&source) {
            set.remove(&seq);
            if set.is_empty() {
                self.by_source.remove(&source);
                self.ring.retain(|s| *s != source);
            }
        }
    }

    /// Unknown misses and refreshes in turn; either when the other has
    /// none.
    fn pop_unknown_or_refresh(&mut self, refreshes: bool) -> Option<(Class, String)> {
        let turn = self.refresh_turn;
        self.refresh_turn = !turn;
        if turn {
            if let Some(r) = self.take_refresh(refreshes) {
                return Some(r);
            }
        }
        if let Some(n) = self.pop_unknown() {
            return Some((Class::UnknownMiss, n));
        }
        if turn {
            None
        } else {
            self.take_refresh(refreshes)
        }
    }

    fn take_refresh(&mut self, refreshes: bool) -> Option<(Class, String)> {
        if !refreshes {
            return None;
        }
        let (_, n) = self.refresh.pop_first()?;
        Some((Class::Refresh, n))
    }

    fn pop_unknown(&mut self) -> Option<String> {
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
        self.unknown.remove(&seq)
    }

    fn bump(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn insert(&mut self, name: String, kind: RequestKind, class: Class, source: SourceKey) {
        let seq = self.bump();
        self.place(name, kind, class, source, seq);
    }

    fn place(
        &mut self,
        name: String,
        kind: RequestKind,
        class: Class,
        source: SourceKey,
        seq: u64,
    ) {
        let slot = Slot {
            class,
            kind,
            seq,
            source,
            in_flight: false,
        };
        match class {
            Class::KnownMiss => self.known.insert(seq, name.clone()),
            Class::Refresh => self.refresh.insert(seq, name.clone()),
            Class::UnknownMiss => {
                let set = self.by_source.entry(source).or_default();
                if set.is_empty() {
                    self.ring.push_back(source);
                }
                set.insert(seq);
                self.unknown.insert(seq, name.clone())
            }
        };
        self.names.insert(name, slot);
    }
}

#[cfg(test)]
mod tests;
