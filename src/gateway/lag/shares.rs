//! Which accounts a shedding shard refuses requests of: the heaviest.
//!
//! The shard counts each account's requests per lag window. While it
//! sheds for its own load, a request is refused only if its account sent
//! more than [`QUIET_REQUESTS_PER_WINDOW`] in the current or the last
//! window *and* at least the mean of the accounts that sent any: a flood
//! is refused, a quiet account keeps its share, and when every account
//! sends alike (no heaviest) all above the quiet floor are refused alike.
//!
//! Accounts are hashed onto [`LOAD_SLOTS`] counters stamped with the
//! window (a window starts in O(1)); nothing allocates after start.

/// Requests per lag window (100 ms) an account may send and never be
/// refused for lag: the default account request rate (100/s).
pub const QUIET_REQUESTS_PER_WINDOW: u32 = 10;
/// Counters (accounts hashed onto them).
pub const LOAD_SLOTS: usize = 1024;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    window: u32,
    now: u32,
    last: u32,
}

/// Requests per account in the current and the last lag window.
pub(crate) struct AccountLoad {
    slots: Box<[Slot]>,
    window: u32,
    /// (requests, accounts that sent any) of the current window.
    cur: (u64, u64),
    /// The same of the last closed window.
    last: (u64, u64),
}

impl AccountLoad {
    pub(crate) fn new() -> AccountLoad {
        AccountLoad {
            slots: vec![Slot::default(); LOAD_SLOTS].into_boxed_slice(),
            window: 1,
            cur: (0, 0),
            last: (0, 0),
        }
    }

    fn slot(&mut self, account: u32) -> &mut Slot {
        let w = self.window;
        let s = &mut self.slots[account as usize % LOAD_SLOTS];
        if s.window != w {
            s.last = if s.window.wrapping_add(1) == w {
                s.now
            } else {
                0
            };
            s.now = 0;
            s.window = w;
        }
        s
    }

    /// Counts one request of `account`.
    pub(crate) fn note(&mut self, account: u32) {
        let s = self.slot(account);
        s.now = s.now.saturating_add(1);
        let first = s.now == 1;
        self.cur.0 += 1;
        self.cur.1 += u64::from(first);
    }

    /// Closes the window.
    pub(crate) fn roll(&mut self) {
        self.last = std::mem::take(&mut self.cur);
        self.window = self.window.wrapping_add(1).max(1);
    }

    /// Whether `account` is among the heaviest (see the module docs).
    pub(crate) fn heavy(&mut self, account: u32) -> bool {
        let s = *self.slot(account);
        let n = u64::from(s.now.max(s.last));
        if n <= u64::from(QUIET_REQUESTS_PER_WINDOW) {
            return false;
        }
        let (total, active) = if self.last.0 >= self.cur.0 {
            self.last
        } else {
            self.cur
        };
        n * active.max(1) >= total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(l: &mut AccountLoad, account: u32, n: u32) {
        for _ in 0..n {
            l.note(account);
        }
    }

    #[test]
    fn a_flood_is_heavy_and_a_quiet_account_beside_it_is_not() {
        let mut l = AccountLoad::new();
        send(&mut l, 1, 900);
        send(&mut l, 2, 5);
        l.roll();
        assert!(l.heavy(1));
        assert!(!l.heavy(2));
        // The next window: the flood goes on, the quiet account too.
        send(&mut l, 1, 50);
        send(&mut l, 2, 3);
        assert!(l.heavy(1));
        assert!(!l.heavy(2));
    }

    #[test]
    fn heaviest_first_then_alike_when_all_send_alike() {
        let mut l = AccountLoad::new();
        send(&mut l, 1, 600);
        send(&mut l, 2, 300);
        send(&mut l, 3, 60);
        l.roll();
        // Mean 320: the 600 is refused, the 300 and 60 are not.
        assert!(l.heavy(1));
        assert!(!l.heavy(2));
        assert!(!l.heavy(3));
        l.roll();
        send(&mut l, 4, 100);
        send(&mut l, 5, 100);
        assert!(l.heavy(4) && l.heavy(5), "no heaviest: alike");
    }

    #[test]
    fn counts_older_than_the_last_window_are_forgotten() {
        let mut l = AccountLoad::new();
        send(&mut l, 7, 500);
        l.roll();
        l.roll();
        assert!(!l.heavy(7));
    }
}
