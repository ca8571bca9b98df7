//! Brute-force limits on logons: a fixed-size table of failure counts per
//! key (a source address, or an account), and a growing lockout.
//!
//! Policy per scope ([`LockoutPolicy`]): `threshold` failures within
//! `window_ms` of the first lock the key for `base_ms`. Once a key has
//! been locked, its next failure after the lock locks it again, for twice
//! as long each time up to `cap_ms`, until the key has had no failure for
//! `forget_ms`. Failures while locked (verifications already under way
//! when the lock began) are counted but do not lengthen the lock. Every lock is lengthened by a random
//! 0–25 % so that a crowd of locked clients does not come back at once,
//! and a refusal's retry-after is the lock's remaining time (at least
//! 1 ms). A success clears the key.
//!
//! Memory is bounded: `capacity` slots allocated at construction, in
//! sets of [`WAYS`]; a new key takes an empty slot of its set, else the
//! least recently failed unlocked one, else the one whose lock ends first
//! (counted in [`Lockout::evictions`]). A flood of distinct keys therefore
//! never grows the table; it can only push out other keys' counts.
//!
//! Sans-IO: every call takes `now_ns` (monotonic); the caller owns the
//! clock. Keys are 64-bit; callers hash with a per-process secret key
//! ([`Keyer`]) so an attacker cannot aim many keys at one set.

use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const MS: u64 = 1_000_000;
/// Slots per set.
pub const WAYS: usize = 8;

/// The limits of one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockoutPolicy {
    /// Failures within `window_ms` that lock the key (≥ 1).
    pub threshold: u32,
    /// Window the failures are counted in, ms.
    pub window_ms: u64,
    /// First lock, ms; doubled by each further lock.
    pub base_ms: u64,
    /// Longest lock, ms.
    pub cap_ms: u64,
    /// A key without failures for this long starts over at `base_ms`.
    pub forget_ms: u64,
    /// Slots (keys tracked at once), rounded up to a multiple of [`WAYS`].
    pub capacity: usize,
}

impl LockoutPolicy {
    /// Per source address: 5 failures in 60 s lock 1 s, doubling to 5 min.
    pub const ADDRESS: LockoutPolicy = LockoutPolicy {
        threshold: 5,
        window_ms: 60_000,
        base_ms: 1_000,
        cap_ms: 300_000,
        forget_ms: 900_000,
        capacity: 16_384,
    };
    /// Per account (guessing one account from many addresses): 20
    /// failures in 60 s lock 1 s, doubling to 5 min.
    pub const ACCOUNT: LockoutPolicy = LockoutPolicy {
        threshold: 20,
        window_ms: 60_000,
        base_ms: 1_000,
        cap_ms: 300_000,
        forget_ms: 900_000,
        capacity: 4_096,
    };
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// 0: empty.
    key: u64,
    failures: u32,
    /// Lockouts so far (the next lock is `base << strikes`).
    strikes: u32,
    window_start_ns: u64,
    last_failure_ns: u64,
    locked_until_ns: u64,
}

/// What a failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// Counted; the key is not locked.
    Counted,
    /// This failure locked the key for the given ms.
    Locked(u64),
}

/// One scope's table (see the module docs).
pub struct Lockout {
    policy: LockoutPolicy,
    slots: Box<[Slot]>,
    rng: SmallRng,
    evictions: u64,
}

impl Lockout {
    /// A table for `policy`, with jitter drawn from `seed`.
    pub fn new(policy: LockoutPolicy, seed: u64) -> Lockout {
        let sets = policy.capacity.div_ceil(WAYS).max(1);
        Lockout {
            policy,
            slots: vec![Slot::default(); sets * WAYS].into_boxed_slice(),
            rng: SmallRng::seed_from_u64(seed),
            evictions: 0,
        }
    }

    /// The policy this table applies.
    pub fn policy(&self) -> &LockoutPolicy {
        &self.policy
    }

    /// `Err(retry_after_ms)` while `key` is locked at `now_ns`.
    pub fn check(&self, key: u64, now_ns: u64) -> Result<(), u32> {
        match self.find(key) {
            Some(i) if self.slots[i].locked_until_ns > now_ns => {
                let left = (self.slots[i].locked_until_ns - now_ns).div_ceil(MS);
                Err(u32::try_from(left).unwrap_or(u32::MAX).max(1))
            }
            _ => Ok(()),
        }
    }

    /// Counts a failed logon of `key` at `now_ns`.
    pub fn failure(&mut self, key: u64, now_ns: u64) -> Failed {
        let p = self.policy;
        let i = self.slot_for(key, now_ns);
        let s = &mut self.slots[i];
        if s.locked_until_ns > now_ns {
            return Failed::Counted;
        }
        if s.strikes > 0 && now_ns.saturating_sub(s.last_failure_ns) > p.forget_ms * MS {
            s.strikes = 0;
        }
        if s.failures == 0 || now_ns.saturating_sub(s.window_start_ns) > p.window_ms * MS {
            s.failures = 0;
            s.window_start_ns = now_ns;
        }
        s.failures += 1;
        s.last_failure_ns = now_ns;
        let threshold = if s.strikes > 0 { 1 } else { p.threshold.max(1) };
        if s.failures < threshold {
            return Failed::Counted;
        }
        let lock = p
            .base_ms
            .saturating_mul(1u64 << s.strikes.min(40))
            .min(p.cap_ms);
        let lock = lock + self.rng.gen_range(0..=lock / 4);
        let s = &mut self.slots[i];
        s.strikes = s.strikes.saturating_add(1);
        s.failures = 0;
        s.locked_until_ns = now_ns.saturating_add(lock * MS);
        Failed::Locked(lock)
    }

    /// A successful logon of `key`: its counts are cleared.
    pub fn success(&mut self, key: u64) {
        if let Some(i) = self.find(key) {
            self.slots[i] = Slot::default();
        }
    }

    /// Keys locked at `now_ns` (a scan of the table).
    pub fn active(&self, now_ns: u64) -> usize {
        self.slots
            .iter()
            .filter(|s| s.key != 0 && s.locked_until_ns > now_ns)
            .count()
    }

    /// Keys pushed out of a full set to make room for another.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    fn set(&self, key: u64) -> std::ops::Range<usize> {
        let sets = self.slots.len() / WAYS;
        let start = (key % sets as u64) as usize * WAYS;
        start..start + WAYS
    }

    fn find(&self, key: u64) -> Option<usize> {
        let key = key.max(1);
        self.set(key).find(|&i| self.slots[i].key == key)
    }

    fn slot_for(&mut self, key: u64, now_ns: u64) -> usize {
        let key = key.max(1);
        if let Some(i) = self.find(key) {
            return i;
        }
        let set = self.set(key);
        let victim = set
            .clone()
            .find(|&i| self.slots[i].key == 0)
            .or_else(|| {
                set.clone()
                    .filter(|&i| self.slots[i].locked_until_ns <= now_ns)
                    .min_by_key(|&i| self.slots[i].last_failure_ns)
            })
            .unwrap_or_else(|| {
                set.min_by_key(|&i| self.slots[i].locked_until_ns)
                    .expect("a set has slots")
            });
        if self.slots[victim].key != 0 {
            self.evictions += 1;
        }
        self.slots[victim] = Slot {
            key,
            ..Slot::default()
        };
        victim
    }
}

/// Hashes addresses and account names to table keys with a per-process
/// random key (SipHash), so keys cannot be aimed at one set.
#[derive(Debug, Clone, Default)]
pub struct Keyer {
    state: std::collections::hash_map::RandomState,
}

impl Keyer {
    /// A source address's key (IPv6 by its /64, as admission counts it).
    pub fn address(&self, ip: IpAddr) -> u64 {
        let mut h = self.state.build_hasher();
        h.write_u8(1);
        h.write_u128(ip_key(ip));
        h.finish()
    }

    /// An account name's key.
    pub fn account(&self, name: &[u8]) -> u64 {
        let mut h = self.state.build_hasher();
        h.write_u8(2);
        h.write(name);
        h.finish()
    }
}

/// The address as admission counts it (`admission::ip_key`, kept here so
/// that `auth` stays below `admission` and `config`): IPv4 and
/// IPv4-mapped IPv6 by address, other IPv6 by its /64.
fn ip_key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)) | (0xffff << 32),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => ip_key(IpAddr::V4(v4)),
            None => u128::from(v6) & !u128::from(u64::MAX),
        },
    }
}

#[cfg(test)]
mod tests;
