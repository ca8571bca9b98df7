//! A fixed-capacity map from client address to its connection count and
//! connect-rate bucket.
//!
//! Open addressing with linear probing over a power-of-two array at most half
//! full, and backward-shift deletion (no tombstones, so probe lengths do not
//! decay with churn). Everything is allocated at construction; the table
//! never grows. When it is full, an insert first sweeps a bounded number of
//! slots for an idle entry (no connections, bucket refilled — state that is
//! indistinguishable from a fresh entry) and reuses it; if none is found the
//! caller falls back to its shared overflow bucket. The hash is keyed per
//! process (`RandomState`) so a client cannot pick addresses that collide.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;

use crate::admission::TokenBucket;

/// Slots examined per eviction sweep: bounds the work of one accept.
const SWEEP_SLOTS_MAX: usize = 64;

/// The key for an address: IPv4 (also when IPv4-mapped in IPv6) as itself,
/// IPv6 by its /64 prefix — one host or one home network gets a whole /64,
/// so per-address limits on full IPv6 addresses would be trivially evaded.
pub fn ip_key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)) | (0xffff << 32),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => ip_key(IpAddr::V4(v4)),
            None => u128::from(v6) & !u128::from(u64::MAX),
        },
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct IpEntry {
    key: u128,
    home: u32,
    used: bool,
    pub(crate) connections: u32,
    pub(crate) bucket: TokenBucket,
}

pub(crate) struct IpTable {
    slots: Box<[IpEntry]>,
    mask: usize,
    len: usize,
    capacity: usize,
    hasher: RandomState,
    sweep_cursor: usize,
}

impl IpTable {
    /// A table for `capacity` addresses; `blank` is the bucket state copied
    /// into unused slots (it is reset on insert).
    pub(crate) fn new(capacity: usize, blank: TokenBucket) -> IpTable {
        assert!(capacity > 0, "ip table capacity must be at least 1");
        let slot_count = (capacity * 2).next_power_of_two();
        let empty = IpEntry {
            key: 0,
            home: 0,
            used: false,
            connections: 0,
            bucket: blank,
        };
        IpTable {
            slots: vec![empty; slot_count].into_boxed_slice(),
            mask: slot_count - 1,
            len: 0,
            capacity,
            hasher: RandomState::new(),
            sweep_cursor: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn home_of(&self, key: u128) -> usize {
        self.hasher.hash_one(key) as usize & self.mask
    }

    pub(crate) fn find(&self, key: u128) -> Option<usize> {
        // The probe ends at a free slot: there is always one (len <= cap,
        // slots >= 2 * cap).
        debug_assert!(self.len < self.slots.len());
        let mut i = self.home_of(key);
        loop {
            let slot = &self.slots[i];
            if !slot.used {
                return None;
            }
            if slot.key == key {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    pub(crate) fn entry(&self, index: usize) -> &IpEntry {
        debug_assert!(self.slots[index].used);
        &self.slots[index]
    }

    pub(crate) fn entry_mut(&mut self, index: usize) -> &mut IpEntry {
        debug_assert!(self.slots[index].used);
        &mut self.slots[index]
    }

    /// Inserts `key` (known absent) with a fresh `bucket`, evicting an idle
    /// entry if the table is full. Returns the slot, whether an entry was
    /// evicted for it, or `None` when full of busy entries.
    pub(crate) fn insert(
        &mut self,
        key: u128,
        bucket: TokenBucket,
        now_ns: u64,
    ) -> Option<(usize, bool)> {
        debug_assert!(self.find(key).is_none());
        let evicted = self.len >= self.capacity;
        if evicted && !self.evict_idle(now_ns) {
            return None;
        }
        let home = self.home_of(key);
        let mut i = home;
        while self.slots[i].used {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = IpEntry {
            key,
            home: home as u32,
            used: true,
            connections: 0,
            bucket,
        };
        self.len += 1;
        debug_assert!(self.len <= self.capacity);
        Some((i, evicted))
    }

    /// Sweeps up to `SWEEP_SLOTS_MAX` slots from a rotating cursor for an
    /// idle entry and removes it.
    fn evict_idle(&mut self, now_ns: u64) -> bool {
        for _ in 0..SWEEP_SLOTS_MAX.min(self.slots.len()) {
            let i = self.sweep_cursor;
            self.sweep_cursor = (i + 1) & self.mask;
            let slot = &mut self.slots[i];
            if slot.used && slot.connections == 0 && slot.bucket.is_full(now_ns) {
                self.remove_at(i);
                return true;
            }
        }
        false
    }

    /// Backward-shift deletion: pull later members of the probe run into
    /// the hole when their home allows it, so lookups never need tombstones.
    fn remove_at(&mut self, index: usize) {
        let mut hole = index;
        let mut j = (index + 1) & self.mask;
        while self.slots[j].used {
            let home = self.slots[j].home as usize;
            let dist_from_home = j.wrapping_sub(home) & self.mask;
            let dist_from_hole = j.wrapping_sub(hole) & self.mask;
            if dist_from_home >= dist_from_hole {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
            j = (j + 1) & self.mask;
        }
        self.slots[hole].used = false;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(n: u32) -> u128 {
        ip_key(IpAddr::V4(Ipv4Addr::from(n)))
    }

    #[test]
    fn ipv6_keys_by_prefix_and_mapped_v4_as_v4() {
        let a: Ipv6Addr = "2001:db8:1:2::1".parse().unwrap();
        let b: Ipv6Addr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(ip_key(a.into()), ip_key(b.into()));
        assert_ne!(ip_key(a.into()), ip_key(c.into()));
        let mapped = Ipv4Addr::LOCALHOST.to_ipv6_mapped();
        assert_eq!(ip_key(mapped.into()), ip_key(Ipv4Addr::LOCALHOST.into()));
    }

    #[test]
    fn find_after_churn_with_backward_shift() {
        let b = TokenBucket::new(1, 1, 0);
        let mut t = IpTable::new(64, b);
        for n in 0..64 {
            assert!(t.insert(v4(n), b, 0).is_some());
        }
        // Full of entries with full buckets and no connections: every new
        // key evicts an idle one, and every surviving key is still found.
        for n in 64..1000 {
            let (_, evicted) = t.insert(v4(n), b, 0).unwrap();
            assert!(evicted);
            assert_eq!(t.len(), 64);
        }
        let found = (0..1000).filter(|&n| t.find(v4(n)).is_some()).count();
        assert_eq!(found, 64);
    }

    #[test]
    fn full_table_of_busy_entries_refuses() {
        let b = TokenBucket::new(1, 1, 0);
        let mut t = IpTable::new(8, b);
        for n in 0..8 {
            let (i, _) = t.insert(v4(n), b, 0).unwrap();
            t.entry_mut(i).connections = 1;
        }
        assert!(t.insert(v4(99), b, 0).is_none());
        assert_eq!(t.len(), 8);
    }
}
