//! Round-robin over the accounts that have requests queued in one lane.
//!
//! An intrusive circular doubly linked list of account ids with a cursor:
//! `pop` serves the account at the cursor and then moves it on, so every
//! account with work gets one request per round however many its neighbour
//! holds. A quiet tenant's request waits for at most one request of each
//! other active account, not for a flooding tenant's whole backlog. All
//! arrays are allocated in `new`; `add`, `remove`, `advance` are O(1).

const NIL: u32 = u32::MAX;

pub(crate) struct Rotation {
    next: Box<[u32]>,
    prev: Box<[u32]>,
    /// The account served next; `NIL` when no account is active.
    cursor: u32,
}

impl Rotation {
    pub(crate) fn new(accounts_max: usize) -> Rotation {
        Rotation {
            next: vec![NIL; accounts_max].into_boxed_slice(),
            prev: vec![NIL; accounts_max].into_boxed_slice(),
            cursor: NIL,
        }
    }

    /// The account whose turn it is.
    pub(crate) fn current(&self) -> Option<u32> {
        (self.cursor != NIL).then_some(self.cursor)
    }

    /// `account` got its first entry: it joins at the end of the round.
    pub(crate) fn add(&mut self, account: u32) {
        let a = account as usize;
        debug_assert!(self.next[a] == NIL, "account already in the rotation");
        if self.cursor == NIL {
            self.next[a] = account;
            self.prev[a] = account;
            self.cursor = account;
            return;
        }
        let (after, before) = (self.cursor, self.prev[self.cursor as usize]);
        self.next[a] = after;
        self.prev[a] = before;
        self.next[before as usize] = account;
        self.prev[after as usize] = account;
    }

    /// `account` has no entry left.
    pub(crate) fn remove(&mut self, account: u32) {
        let a = account as usize;
        let (n, p) = (self.next[a], self.prev[a]);
        debug_assert!(n != NIL, "account not in the rotation");
        if n == account {
            self.cursor = NIL;
        } else {
            self.next[p as usize] = n;
            self.prev[n as usize] = p;
            if self.cursor == account {
                self.cursor = n;
            }
        }
        self.next[a] = NIL;
        self.prev[a] = NIL;
    }

    /// The first account from the cursor on that `eligible` accepts,
    /// looking at no more than `skip_max` others; each one passed over
    /// loses its turn in this round (the cursor moves past it), so the
    /// accounts behind it take turns rather than the first eligible one
    /// being served every time. `None` if none was found.
    pub(crate) fn next_eligible(
        &mut self,
        mut eligible: impl FnMut(u32) -> bool,
        skip_max: usize,
    ) -> Option<u32> {
        let start = self.current()?;
        for _ in 0..=skip_max {
            let a = self.current()?;
            if eligible(a) {
                return Some(a);
            }
            self.served(a);
            if self.cursor == start {
                return None;
            }
        }
        None
    }

    /// `account` was served: the turn passes to the next one (if `account`
    /// is still the current one; removing it moved the cursor already).
    pub(crate) fn served(&mut self, account: u32) {
        if self.cursor == account {
            self.cursor = self.next[account as usize];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ineligible_account_loses_its_turn_and_the_others_alternate() {
        let mut r = Rotation::new(8);
        for a in [1, 2, 3] {
            r.add(a);
        }
        let mut order = Vec::new();
        for _ in 0..4 {
            let a = r.next_eligible(|a| a != 1, 8).unwrap();
            order.push(a);
            r.served(a);
        }
        assert_eq!(order, vec![2, 3, 2, 3]);
        assert_eq!(r.next_eligible(|_| false, 8), None);
        // Bounded: gives up after `skip_max` passed over.
        assert_eq!(r.next_eligible(|a| a == 3, 0), None);
        assert_eq!(r.next_eligible(|_| true, 0), r.current());
    }

    #[test]
    fn each_active_account_gets_one_turn_per_round() {
        let mut r = Rotation::new(8);
        assert_eq!(r.current(), None);
        for a in [3, 5, 1] {
            r.add(a);
        }
        let mut order = Vec::new();
        for _ in 0..6 {
            let a = r.current().unwrap();
            order.push(a);
            r.served(a);
        }
        assert_eq!(order, vec![3, 5, 1, 3, 5, 1]);
        r.remove(5);
        r.add(7); // joins at the end of the round
        let mut order = Vec::new();
        for _ in 0..3 {
            let a = r.current().unwrap();
            order.push(a);
            r.served(a);
        }
        assert_eq!(order, vec![3, 1, 7]);
        r.remove(3);
        r.remove(1);
        assert_eq!(r.current(), Some(7));
        r.remove(7);
        assert_eq!(r.current(), None);
    }
}
