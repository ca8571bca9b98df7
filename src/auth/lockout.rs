//! Brute-force limits on logons: a fixed-size table of failure counts per
//! key (a source address, or an account), and a growing lockout.
//!
//! Policy per scope ([`LockoutPolicy`]): `threshold` failures within
//! `window_ms` of the first lock the key for `base_ms`. Once a key has
//! been locked, its next failure after the lock locks it again, for twice
//! as long each time up to `cap_ms`, until the key has had no failure for
//! `forget_ms`. A failure counted while locked (only a failure counted
//! without a reservation can be) does not lengthen the lock. Every
//! lock is lengthened by a random 0–25 % so that a crowd of locked clients
//! does not come back at once, and a refusal's retry-after is the lock's
//! remaining time (at least 1 ms). A success clears the key's counts.
//!
//! **Count before verifying.** A guess is *reserved* ([`Lockout::reserve`])
//! before its token is checked and *settled* afterwards: a failure
//! ([`Lockout::confirm`]) turns the reservation into a counted failure, a
//! success or a check that never ran ([`Lockout::release`]) gives it back.
//! The invariant, per key and at every instant:
//!
//! > failures counted in the window + reservations pending ≤ threshold
//! > (1 once the key has been locked and not yet forgotten),
//!
//! and no reservation is granted while the key is locked. So however many
//! checks run at once, at most `threshold` guesses of one key are checked
//! before its first lock, and at most one between two later locks. A
//! reservation refused because the budget is taken by pending ones gets
//! retry-after `base_ms` (the lock those would start if they all fail).
//! A slot with a reservation pending is never evicted, so its count
//! cannot be pushed out of the table while its guesses are checked; a
//! set whose slots all have one refuses the reservation (fail closed).
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
    /// Per account and address after a `message_flood` cut
    /// ([`Lockout::hold`], [`Lockout::try_held`]): held for the cut's
    /// retry-after; each logon inside it doubles what is left, to 60 s.
    pub const FLOOD_HOLD: LockoutPolicy = LockoutPolicy {
        threshold: 1,
        window_ms: 0,
        base_ms: 1_000,
        cap_ms: 60_000,
        forget_ms: 0,
        capacity: 4_096,
    };
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// 0: empty.
    key: u64,
    failures: u32,
    /// Lockouts so far (the next lock is `base << strikes`).
    strikes: u16,
    /// Reservations granted and not yet settled (at most the threshold).
    pending: u16,
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
        let Some(i) = self.slot_for(key, now_ns) else {
            // Every slot of the set has a reservation pending: this key
            // held none, so there is nothing of its own to count against.
            return Failed::Counted;
        };
        let s = &mut self.slots[i];
        if s.locked_until_ns > now_ns {
            return Failed::Counted;
        }
        roll(s, &p, now_ns);
        if s.failures == 0 {
            s.window_start_ns = now_ns;
        }
        s.failures += 1;
        s.last_failure_ns = now_ns;
        if s.failures < threshold(s, &p) {
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

    /// Reserves one guess of `key` before its check: `Err(retry_after_ms)`
    /// while the key is locked, while its failures and pending
    /// reservations already reach the threshold, or when its set has no
    /// slot free of reservations (see the module docs).
    pub fn reserve(&mut self, key: u64, now_ns: u64) -> Result<(), u32> {
        self.check(key, now_ns)?;
        let p = self.policy;
        let busy = u32::try_from(p.base_ms).unwrap_or(u32::MAX).max(1);
        let Some(i) = self.slot_for(key, now_ns) else {
            return Err(busy);
        };
        let s = &mut self.slots[i];
        roll(s, &p, now_ns);
        if s.failures + u32::from(s.pending) >= threshold(s, &p) || s.pending == u16::MAX {
            return Err(busy);
        }
        s.pending += 1;
        Ok(())
    }

    /// A reserved guess of `key` failed: the reservation becomes a counted
    /// failure ([`Lockout::failure`]), which may lock the key.
    pub fn confirm(&mut self, key: u64, now_ns: u64) -> Failed {
        self.release(key);
        self.failure(key, now_ns)
    }

    /// A reserved guess of `key` was not a failure (it matched, or was
    /// never checked): the reservation is given back.
    pub fn release(&mut self, key: u64) {
        if let Some(i) = self.find(key) {
            let s = &mut self.slots[i];
            debug_assert!(s.pending > 0, "a release without a reservation");
            s.pending = s.pending.saturating_sub(1);
        }
    }

    /// A successful logon of `key`: its counts and locks are cleared
    /// (other guesses still being checked keep their reservations).
    pub fn success(&mut self, key: u64) {
        if let Some(i) = self.find(key) {
            let pending = self.slots[i].pending;
            self.slots[i] = Slot::default();
            if pending > 0 {
                self.slots[i] = Slot {
                    key: key.max(1),
                    pending,
                    ..Slot::default()
                };
            }
        }
    }

    /// Locks `key` until at least `now_ns + ms`: a penalty decided
    /// elsewhere (a flood cut's retry-after), not a counted failure. A
    /// longer lock already running is kept.
    pub fn hold(&mut self, key: u64, now_ns: u64, ms: u64) {
        let Some(i) = self.slot_for(key, now_ns) else {
            // Every slot of the set has a guess pending; the hold is the
            // lesser protection and gives way.
            return;
        };
        let s = &mut self.slots[i];
        s.locked_until_ns = s.locked_until_ns.max(now_ns.saturating_add(ms * MS));
        s.last_failure_ns = now_ns;
    }

    /// A try of `key` at `now_ns`: `Ok` unless it is locked, else
    /// `Err(retry_after_ms)` with the lock lengthened, because the try
    /// ignored the retry-after it was given: what was left is doubled
    /// (at least `base_ms` more), to at most `cap_ms` from now.
    pub fn try_held(&mut self, key: u64, now_ns: u64) -> Result<(), u32> {
        let Some(i) = self.find(key) else {
            return Ok(());
        };
        let p = self.policy;
        let s = &mut self.slots[i];
        if s.locked_until_ns <= now_ns {
            return Ok(());
        }
        let left_ns = s.locked_until_ns - now_ns;
        let longer_ns = left_ns.saturating_mul(2).max(left_ns + p.base_ms * MS);
        s.locked_until_ns = now_ns.saturating_add(longer_ns.min(p.cap_ms * MS));
        s.last_failure_ns = now_ns;
        self.check(key, now_ns)
    }

    /// Reservations pending for `key`.
    pub fn pending(&self, key: u64) -> u32 {
        self.find(key)
            .map_or(0, |i| u32::from(self.slots[i].pending))
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

    /// `key`'s slot, else a new one in its set: an empty slot, else the
    /// least recently failed unlocked one, else the one whose lock ends
    /// first; never one with a reservation pending (`None` if all are).
    fn slot_for(&mut self, key: u64, now_ns: u64) -> Option<usize> {
        let key = key.max(1);
        if let Some(i) = self.find(key) {
            return Some(i);
        }
        let slots = &self.slots;
        let set = self.set(key).filter(|&i| slots[i].pending == 0);
        let victim = set
            .clone()
            .find(|&i| slots[i].key == 0)
            .or_else(|| {
                set.clone()
                    .filter(|&i| slots[i].locked_until_ns <= now_ns)
                    .min_by_key(|&i| slots[i].last_failure_ns)
            })
            .or_else(|| set.min_by_key(|&i| slots[i].locked_until_ns))?;
        if self.slots[victim].key != 0 {
            self.evictions += 1;
        }
        self.slots[victim] = Slot {
            key,
            ..Slot::default()
        };
        Some(victim)
    }
}

/// Starts the key over where its history has expired: strikes after
/// `forget_ms` without a failure, failures after the window.
fn roll(s: &mut Slot, p: &LockoutPolicy, now_ns: u64) {
    if s.strikes > 0 && now_ns.saturating_sub(s.last_failure_ns) > p.forget_ms * MS {
        s.strikes = 0;
    }
    if s.failures > 0 && now_ns.saturating_sub(s.window_start_ns) > p.window_ms * MS {
        s.failures = 0;
    }
}

/// Failures that lock the key: the policy's threshold, 1 once locked.
fn threshold(s: &Slot, p: &LockoutPolicy) -> u32 {
    if s.strikes > 0 {
        1
    } else {
        p.threshold.max(1)
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

    /// The key of an account name from one source address.
    pub fn pair(&self, name: &[u8], ip: IpAddr) -> u64 {
        let mut h = self.state.build_hasher();
        h.write_u8(3);
        h.write_u128(ip_key(ip));
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
