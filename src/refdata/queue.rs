//! The refresher's pending requests: bounded, one per name, in an order a
//! flood of unknown names cannot take over.
//!
//! Contract: at most `misses_max` misses (a logon is waiting) and at most
//! `refreshes_max` refreshes (a cached entry is serving meanwhile) are
//! queued, one request per name, plus the one being fetched; a name asked
//! for again is coalesced (a refresh a logon now waits for becomes a miss
//! when the misses have room, so misses and refreshes together stay
//! within both bounds). Misses are of two classes: a **known** name (one
//! this process has seen valid: the cache holds a record for it, however
//! old) and an **unknown** one; an unknown miss whose client came back
//! (asked again while it waited) is **repeated**, the sign of a client
//! that is still there, which a spray of names never gives.
//!
//! Order ([`Pending::pop`]): known misses first (oldest first); then, in
//! turn, repeated unknown misses, refreshes (only while the data set is
//! trusted) and unknown misses asked once, each turn skipped when empty.
//! Unknown misses are taken round robin over their sources (the client's
//! address, IPv6 by /64), each source's newest first. A source holds at
//! most `per_source_max` unknown misses: its next one displaces its
//! oldest. At the `misses_max` bound a new miss displaces the oldest
//! unknown miss asked once (else the oldest repeated one), so what is
//! left of a flood never keeps out the logons that come after it, nor
//! the clients still retrying. Every displaced or dropped request is
//! counted ([`Offered`]); its client was answered `Unavailable` and asks
//! again. Operations are O(log n), except removing a source from its
//! round-robin ring (O(sources), when a source's last miss leaves).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use super::cache::RequestKind;
use tier::Tier;

mod tier;

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
    /// An unknown miss asked again.
    repeated: bool,
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
    /// Unknown misses asked once, and asked again.
    once: Tier,
    repeated: Tier,
    /// Sequence numbers rise from the middle; requeued FIFO entries take
    /// numbers below every queued one (`front`).
    next: u64,
    front: u64,
    /// Whose turn it is after the known misses (0 repeated, 1 refresh,
    /// 2 once).
    turn: u8,
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
            once: Tier::default(),
            repeated: Tier::default(),
            next: SEQ_START,
            front: SEQ_START,
            turn: 0,
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
        self.known.len() + self.once.len() + self.repeated.len()
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
            name,
        })
    }

    /// The fetch of `t` is over: the name may be asked for again.
    pub(crate) fn done(&mut self, name: &str) {
        self.names.remove(name);
    }

    /// The fetch of `t` could not be made (Redis failed): back in the
    /// queue where it was taken from (FIFO classes at their front, an
    /// unknown miss as its source's newest). If the misses filled up
    /// while it was in flight, the oldest unknown miss gives way (the
    /// return is how many did, for the caller to count).
    pub(crate) fn requeue(&mut self, t: Taken) -> usize {
        let Some(slot) = self.names.remove(&t.name) else {
            return 0;
        };
        let seq = match slot.class {
            Class::UnknownMiss => self.bump(),
            _ => {
                self.front -= 1;
                self.front
            }
        };
        self.place(
            t.name,
            Slot {
                seq,
                in_flight: false,
                ..slot
            },
        );
        let mut displaced = 0;
        while self.misses() > self.misses_max && self.drop_oldest_unknown() {
            displaced += 1;
        }
        displaced
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
            // Asked again: repeated, and the newest of its source.
            Class::UnknownMiss if class == Class::UnknownMiss => {
                self.remove_unknown(name, slot);
                let seq = self.bump();
                let moved = Slot {
                    seq,
                    repeated: true,
                    ..slot
                };
                self.place(name.to_string(), moved);
            }
            _ => {}
        }
    }

    fn room_for_miss(&mut self) -> Option<Offered> {
        if self.misses() < self.misses_max {
            return Some(Offered::Queued);
        }
        self.drop_oldest_unknown().then_some(Offered::Displaced)
    }

    fn room_for_unknown(&mut self, source: SourceKey) -> Option<Offered> {
        let held = self.once.held_by(source) + self.repeated.held_by(source);
        if source != SourceKey::ANY && held >= self.per_source_max {
            let oldest = [self.once.oldest_of(source), self.repeated.oldest_of(source)];
            let seq = oldest.into_iter().flatten().min().expect("held > 0");
            self.drop_unknown_seq(seq);
            return Some(Offered::SourceLimited);
        }
        self.room_for_miss()
    }

    /// Drops the oldest unknown miss asked once, else the oldest repeated
    /// one; false when there is none.
    fn drop_oldest_unknown(&mut self) -> bool {
        match self.once.oldest().or_else(|| self.repeated.oldest()) {
            Some(seq) => {
                self.drop_unknown_seq(seq);
                true
            }
            None => false,
        }
    }

    fn drop_unknown_seq(&mut self, seq: u64) {
        let name = self
            .once
            .remove(seq)
            .or_else(|| self.repeated.remove(seq))
            .expect("a queued unknown miss");
        self.names.remove(&name);
    }

    fn remove_unknown(&mut self, name: &str, slot: Slot) {
        let tier = if slot.repeated {
            &mut self.repeated
        } else {
            &mut self.once
        };
        tier.remove(slot.seq);
        self.names.remove(name);
    }

    /// After the known misses: repeated unknown misses, refreshes and
    /// unknown misses asked once in turn, skipping empty turns.
    fn pop_unknown_or_refresh(&mut self, refreshes: bool) -> Option<(Class, String)> {
        for _ in 0..3 {
            let turn = self.turn;
            self.turn = (self.turn + 1) % 3;
            let got = match turn {
                0 => self.repeated.pop().map(|n| (Class::UnknownMiss, n)),
                1 if refreshes => self.refresh.pop_first().map(|(_, n)| (Class::Refresh, n)),
                1 => None,
                _ => self.once.pop().map(|n| (Class::UnknownMiss, n)),
            };
            if got.is_some() {
                return got;
            }
        }
        None
    }

    fn bump(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn insert(&mut self, name: String, kind: RequestKind, class: Class, source: SourceKey) {
        let seq = self.bump();
        let slot = Slot {
            class,
            repeated: false,
            kind,
            seq,
            source,
            in_flight: false,
        };
        self.place(name, slot);
    }

    fn place(&mut self, name: String, slot: Slot) {
        let seq = slot.seq;
        match slot.class {
            Class::KnownMiss => drop(self.known.insert(seq, name.clone())),
            Class::Refresh => drop(self.refresh.insert(seq, name.clone())),
            Class::UnknownMiss if slot.repeated => {
                self.repeated.insert(seq, slot.source, name.clone())
            }
            Class::UnknownMiss => self.once.insert(seq, slot.source, name.clone()),
        }
        self.names.insert(name, slot);
    }

    /// Each source's unknown misses (both tiers), for tests.
    #[cfg(test)]
    pub(crate) fn per_source(&self) -> HashMap<SourceKey, usize> {
        let mut m = HashMap::new();
        for (s, n) in self.once.per_source().chain(self.repeated.per_source()) {
            *m.entry(s).or_insert(0) += n;
        }
        m
    }

    /// Queued entries of every class (not the one in flight), for tests.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.known.len() + self.refresh.len() + self.once.len() + self.repeated.len()
    }
}

#[cfg(test)]
mod tests;
