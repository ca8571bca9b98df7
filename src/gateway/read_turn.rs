//! Fair reads: in which order a turn reads the connections with input
//! waiting, and how many requests each may hand over.
//!
//! The promise: **a connection with input waiting is read within a
//! bounded number of turns, whatever the others send, and one account's
//! connections cannot take a turn's request budget from another
//! account's.** Concretely, per turn:
//!
//! 1. First pass, in list order: each listed connection may handle up to
//!    [`super::queries::REQUESTS_PER_CONN_TURN`] requests, but its
//!    account no more than [`ACCOUNT_TURN_SHARE`] in all; a connection
//!    whose account has used its share is *deferred*.
//! 2. Second pass: the deferred connections share what is left of the
//!    turn's budget (work-conserving: a lone flood still gets the whole
//!    budget when nobody else asks).
//! 3. A connection the turn's budget did not reach is *skipped*: it goes
//!    to the front of the next turn's list (in its order), before the
//!    ones read this turn, so the list is a round-robin, not a fixed order in which the
//!    first few flood connections take every turn's budget and a quiet
//!    connection further down is never read (the fault of issue #30:
//!    the quiet tenant got nothing for 3–7 s, then 280 frames at once).
//!
//! The first connection of the list is always read, and what was read
//! goes behind what was not, so a connection moves up the list every
//! turn: it is read within as many turns as connections are listed ahead
//! of it, however the others flood. While at most
//! `REQUESTS_PER_TURN / ACCOUNT_TURN_SHARE` (4) accounts have input
//! waiting, every account is read in every turn.
//!
//! Accounts are hashed onto [`SHARE_SLOTS`] counters (two accounts on one
//! slot share a share, as at the request ring); a connection not logged
//! on yet has no account and only its own per-connection bound. The
//! counters are stamped with the turn, so a turn starts in O(1); the
//! lists are sized to the slab at start. Nothing allocates per turn.

/// Requests one account's connections may hand over in the first pass of
/// a turn: as many as one connection may, so a flood spread over many
/// connections counts as one connection in the first pass.
pub(crate) const ACCOUNT_TURN_SHARE: usize = super::queries::REQUESTS_PER_CONN_TURN;

/// Per-account counters of a turn (accounts hashed onto them).
pub(crate) const SHARE_SLOTS: usize = 1024;

/// The read order of one shard's turns (see the module docs).
pub(crate) struct ReadTurn {
    /// Per slot: the turn it was last charged in and the requests charged.
    used: Box<[(u32, u16)]>,
    /// Per connection slot: the last turn it was read in.
    read_in: Box<[u32]>,
    turn: u32,
    /// First-pass connections whose account had used its share.
    pub(crate) deferred: Vec<u32>,
    /// Connections the turn's budget did not reach: first next turn.
    pub(crate) skipped: Vec<u32>,
    /// The list being read this turn (swapped with the slab's).
    pub(crate) current: Vec<u32>,
}

impl ReadTurn {
    /// A read order for a shard of `slots` connections.
    pub(crate) fn new(slots: usize) -> ReadTurn {
        ReadTurn {
            used: vec![(0, 0); SHARE_SLOTS].into_boxed_slice(),
            read_in: vec![0; slots].into_boxed_slice(),
            turn: 1,
            deferred: Vec::with_capacity(slots),
            skipped: Vec::with_capacity(slots),
            current: Vec::with_capacity(slots),
        }
    }

    /// An empty stand-in while the shard runs its turn (allocates nothing).
    pub(crate) fn idle() -> ReadTurn {
        ReadTurn {
            used: Box::new([]),
            read_in: Box::new([]),
            turn: 0,
            deferred: Vec::new(),
            skipped: Vec::new(),
            current: Vec::new(),
        }
    }

    /// A new turn: every account's share is whole again.
    pub(crate) fn begin(&mut self) {
        self.turn = self.turn.wrapping_add(1).max(1);
        self.deferred.clear();
        self.skipped.clear();
    }

    fn slot(account: u32) -> usize {
        account as usize % SHARE_SLOTS
    }

    /// Requests `account` has handed over this turn.
    pub(crate) fn used(&self, account: u32) -> usize {
        let (turn, n) = self.used[Self::slot(account)];
        if turn == self.turn {
            usize::from(n)
        } else {
            0
        }
    }

    /// Requests a connection of `account` (`None`: not logged on) may
    /// handle in the first pass, at most `per_conn`: 0 means deferred.
    pub(crate) fn allowance(&self, account: Option<u32>, per_conn: usize) -> usize {
        match account {
            None => per_conn,
            Some(a) => per_conn.min(ACCOUNT_TURN_SHARE.saturating_sub(self.used(a))),
        }
    }

    /// `account` handed over `n` more requests this turn.
    pub(crate) fn charge(&mut self, account: Option<u32>, n: usize) {
        let Some(a) = account else { return };
        let turn = self.turn;
        let e = &mut self.used[Self::slot(a)];
        if e.0 != turn {
            *e = (turn, 0);
        }
        e.1 = e.1.saturating_add(n.min(usize::from(u16::MAX)) as u16);
    }

    /// The next turn's list: the skipped connections first, then `rest`
    /// (those queued again while reading, in their order); written into
    /// `out` (cleared first).
    pub(crate) fn next_list(&self, rest: &[u32], out: &mut Vec<u32>) {
        out.clear();
        out.extend_from_slice(&self.skipped);
        out.extend_from_slice(rest);
    }

    /// Reads the connections of `self.current` (the turn's list, taken
    /// from the slab by the caller) in the order of the module docs:
    /// first pass with account shares, second pass for the deferred, the
    /// rest skipped to the front of the next turn (see
    /// [`ReadTurn::next_list`]).
    pub(crate) fn run(&mut self, r: &mut impl Reader, per_conn: usize) {
        self.begin();
        for k in 0..self.current.len() {
            let i = self.current[k];
            let Some(account) = r.account_of(i) else {
                continue;
            };
            if r.turn_left() == 0 {
                break;
            }
            let allow = self.allowance(account, per_conn);
            if allow == 0 {
                self.deferred.push(i);
                continue;
            }
            let n = self.read(r, i, allow);
            self.charge(account, n);
        }
        for k in 0..self.deferred.len() {
            if r.turn_left() == 0 {
                break;
            }
            let i = self.deferred[k];
            if r.account_of(i).is_some() {
                self.read(r, i, per_conn);
            }
        }
        // What the budget did not reach, in list order: first next turn.
        for k in 0..self.current.len() {
            let i = self.current[k];
            let unread = self
                .read_in
                .get(i as usize)
                .is_some_and(|&t| t != self.turn);
            if unread && r.account_of(i).is_some() {
                self.skipped.push(i);
            }
        }
        self.current.clear();
    }

    fn read(&mut self, r: &mut impl Reader, i: u32, allow: usize) -> usize {
        if let Some(t) = self.read_in.get_mut(i as usize) {
            *t = self.turn;
        }
        r.read(i, allow)
    }
}

/// What [`ReadTurn::run`] needs of the shard.
pub(crate) trait Reader {
    /// Listed connection `i`'s account: `None` if the slot is empty,
    /// `Some(None)` if it is not logged on.
    fn account_of(&self, i: u32) -> Option<Option<u32>>;
    /// Requests this turn may still hand over.
    fn turn_left(&self) -> usize;
    /// Reads connection `i` (it is no longer listed), handling at most
    /// `allow` requests; it lists itself again if input remains. Returns
    /// the requests it handled.
    fn read(&mut self, i: u32, allow: usize) -> usize;
}

#[cfg(test)]
mod tests;
