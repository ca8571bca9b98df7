//! Recent successful verifications, so that a reconnect with the same
//! token does not pay argon2 again: per account, a keyed BLAKE2b MAC of
//! the token that verified (the key is random per process, so the table
//! holds nothing an attacker could test tokens against offline), the
//! stored hash it verified against (a rotated hash misses) and an expiry.
//! A different token misses and goes to the verifier.
//!
//! Bounded: at most `capacity` accounts; a full table drops expired
//! entries, then the entry closest to expiry.

use std::collections::HashMap;

use blake2::digest::consts::U32;
use blake2::digest::{FixedOutput, KeyInit, Update};
use blake2::Blake2bMac;

type Blake2bMac256 = Blake2bMac<U32>;
use rand::RngCore;

use super::hash::constant_time_eq;

struct Entry {
    stored: String,
    mac: [u8; 32],
    expires_ns: u64,
}

/// The cache (see the module docs). Time comes from the caller.
pub struct VerifiedCache {
    key: [u8; 32],
    ttl_ns: u64,
    capacity: usize,
    map: HashMap<String, Entry>,
}

impl VerifiedCache {
    /// An empty cache keeping entries `ttl_ns` for at most `capacity`
    /// accounts (0: caching off).
    pub fn new(ttl_ns: u64, capacity: usize) -> VerifiedCache {
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        VerifiedCache {
            key,
            ttl_ns,
            capacity,
            map: HashMap::with_capacity(capacity.min(4096)),
        }
    }

    fn mac(&self, account: &str, token: &[u8]) -> [u8; 32] {
        let mut m = <Blake2bMac256 as KeyInit>::new_from_slice(&self.key).expect("32-byte key");
        m.update(&(account.len() as u32).to_le_bytes());
        m.update(account.as_bytes());
        m.update(token);
        m.finalize_fixed().into()
    }

    /// Whether `token` verified for `account` against `stored` within the
    /// last TTL.
    pub fn hit(&self, account: &str, stored: &str, token: &[u8], now_ns: u64) -> bool {
        let Some(e) = self.map.get(account) else {
            return false;
        };
        e.expires_ns > now_ns
            && e.stored == stored
            && constant_time_eq(&e.mac, &self.mac(account, token))
    }

    /// Notes a successful verification at `now_ns`.
    pub fn insert(&mut self, account: &str, stored: &str, token: &[u8], now_ns: u64) {
        if self.capacity == 0 || self.ttl_ns == 0 {
            return;
        }
        if self.map.len() >= self.capacity && !self.map.contains_key(account) {
            self.map.retain(|_, e| e.expires_ns > now_ns);
            if self.map.len() >= self.capacity {
                let first = self
                    .map
                    .iter()
                    .min_by_key(|(_, e)| e.expires_ns)
                    .map(|(k, _)| k.clone());
                if let Some(k) = first {
                    self.map.remove(&k);
                }
            }
        }
        let e = Entry {
            stored: stored.to_string(),
            mac: self.mac(account, token),
            expires_ns: now_ns.saturating_add(self.ttl_ns),
        };
        self.map.insert(account.to_string(), e);
    }

    /// Accounts cached.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn hits_the_same_token_only_until_expiry_or_rotation() {
        let mut c = VerifiedCache::new(60 * S, 2);
        c.insert("a", "$h1", b"tok", S);
        assert!(c.hit("a", "$h1", b"tok", 2 * S));
        assert!(!c.hit("a", "$h1", b"tok2", 2 * S), "another token misses");
        assert!(!c.hit("a", "$h2", b"tok", 2 * S), "a rotated hash misses");
        assert!(!c.hit("b", "$h1", b"tok", 2 * S));
        assert!(!c.hit("a", "$h1", b"tok", 61 * S), "expired");
    }

    #[test]
    fn stays_within_capacity() {
        let mut c = VerifiedCache::new(60 * S, 2);
        c.insert("a", "$h", b"t", S);
        c.insert("b", "$h", b"t", 2 * S);
        c.insert("c", "$h", b"t", 3 * S);
        assert_eq!(c.len(), 2);
        assert!(!c.hit("a", "$h", b"t", 3 * S), "the oldest went");
        assert!(c.hit("c", "$h", b"t", 3 * S));
    }
}
