//! Per-account queued counts with O(1) "which account holds the most".
//!
//! Accounts are bucketed by their count: bucket `c` is an intrusive doubly
//! linked list of the accounts holding exactly `c` entries. Counts only move
//! by one, so `inc`, `dec` and `heaviest` are O(1) and the maximum can only
//! fall by one per `dec`. All arrays are allocated at construction
//! (`accounts_max` and `capacity + 1` entries); nothing allocates later.

const NIL: u32 = u32::MAX;

pub(crate) struct Heaviest {
    count: Box<[u32]>,
    prev: Box<[u32]>,
    next: Box<[u32]>,
    /// Head of the list of accounts with count `c`; index 0 is unused
    /// (accounts with nothing queued are in no bucket).
    bucket_head: Box<[u32]>,
    max_count: u32,
}

impl Heaviest {
    pub(crate) fn new(accounts_max: usize, capacity: usize) -> Heaviest {
        Heaviest {
            count: vec![0; accounts_max].into_boxed_slice(),
            prev: vec![NIL; accounts_max].into_boxed_slice(),
            next: vec![NIL; accounts_max].into_boxed_slice(),
            bucket_head: vec![NIL; capacity + 1].into_boxed_slice(),
            max_count: 0,
        }
    }

    #[inline]
    pub(crate) fn count(&self, account: u32) -> u32 {
        self.count[account as usize]
    }

    /// The account holding the most entries (any one of them on a tie).
    #[inline]
    pub(crate) fn heaviest(&self) -> Option<u32> {
        (self.max_count > 0).then(|| self.bucket_head[self.max_count as usize])
    }

    pub(crate) fn inc(&mut self, account: u32) {
        let c = self.count[account as usize];
        if c > 0 {
            self.unlink(account, c);
        }
        let c = c + 1;
        self.count[account as usize] = c;
        self.link(account, c);
        self.max_count = self.max_count.max(c);
    }

    pub(crate) fn dec(&mut self, account: u32) {
        let c = self.count[account as usize];
        assert!(c > 0, "dec of an account with nothing queued");
        self.unlink(account, c);
        let c = c - 1;
        self.count[account as usize] = c;
        if c > 0 {
            self.link(account, c);
        }
        if c + 1 == self.max_count && self.bucket_head[self.max_count as usize] == NIL {
            self.max_count = c;
        }
    }

    fn link(&mut self, account: u32, c: u32) {
        let head = self.bucket_head[c as usize];
        self.prev[account as usize] = NIL;
        self.next[account as usize] = head;
        if head != NIL {
            self.prev[head as usize] = account;
        }
        self.bucket_head[c as usize] = account;
    }

    fn unlink(&mut self, account: u32, c: u32) {
        let (p, n) = (self.prev[account as usize], self.next[account as usize]);
        if p == NIL {
            debug_assert_eq!(self.bucket_head[c as usize], account);
            self.bucket_head[c as usize] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heaviest_follows_counts_up_and_down() {
        let mut h = Heaviest::new(4, 10);
        assert_eq!(h.heaviest(), None);
        h.inc(1);
        h.inc(2);
        h.inc(2);
        assert_eq!(h.heaviest(), Some(2));
        h.dec(2);
        h.dec(2);
        assert_eq!(h.heaviest(), Some(1));
        h.inc(3);
        h.inc(3);
        h.inc(3);
        assert_eq!(h.heaviest(), Some(3));
        assert_eq!(h.count(3), 3);
        h.dec(1);
        h.dec(3);
        h.dec(3);
        h.dec(3);
        assert_eq!(h.heaviest(), None);
    }

    #[test]
    fn heaviest_matches_a_scan_under_random_ops() {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(3);
        let mut h = Heaviest::new(8, 1000);
        let mut counts = [0u32; 8];
        for _ in 0..10_000 {
            let a = rng.gen_range(0..8u32);
            if counts[a as usize] > 0 && rng.gen_bool(0.5) {
                counts[a as usize] -= 1;
                h.dec(a);
            } else if counts.iter().sum::<u32>() < 1000 {
                counts[a as usize] += 1;
                h.inc(a);
            }
            let max = *counts.iter().max().unwrap();
            match h.heaviest() {
                None => assert_eq!(max, 0),
                Some(top) => assert_eq!(counts[top as usize], max),
            }
        }
    }
}
