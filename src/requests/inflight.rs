//! Jobs per account between the queue and the shard: dispatched, not yet
//! taken off the answer ring by the shard that asked.
//!
//! The promise: **one account holds at most [`ACCOUNT_INFLIGHT_MAX`] jobs
//! in the stages after the queue** (the hand-off to the workers, service,
//! the answer ring), so a quiet account's job waits there behind at most
//! that many of a flooding account's, whatever the flood's size: those
//! stages are FIFO, and only the queue is fair (per-account rotation,
//! LIFO under overload). A flood's further requests wait in the queue,
//! where they age, expire and are shed like anyone's. With one worker, 32
//! is two hand-offs' worth (`HANDOFF_PER_WORKER`) and one shard turn's
//! answer batch (`ANSWER_BATCH_MAX`): the flood keeps the worker busy and
//! the shard drains its answers in one turn.
//!
//! Counters per dense account id (`accounts_max` of them, allocated at
//! start); the dispatcher takes, the shard gives back when it pops the
//! answer and rings the dispatcher when an account comes off its cap.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::runtime::Doorbell;

/// Jobs one account may have past the queue at once.
pub const ACCOUNT_INFLIGHT_MAX: u32 = 32;

/// Jobs past the queue, per account.
pub struct AccountInflight {
    held: Box<[AtomicU32]>,
    dispatcher: Arc<Doorbell>,
}

impl AccountInflight {
    pub(crate) fn new(accounts_max: usize, dispatcher: Arc<Doorbell>) -> Arc<AccountInflight> {
        Arc::new(AccountInflight {
            held: (0..accounts_max).map(|_| AtomicU32::new(0)).collect(),
            dispatcher,
        })
    }

    /// Whether `account` may have one more job dispatched (an account
    /// outside the table is never held back: the queue refuses it).
    pub(crate) fn has_room(&self, account: u32) -> bool {
        self.held
            .get(account as usize)
            .is_none_or(|n| n.load(Ordering::Acquire) < ACCOUNT_INFLIGHT_MAX)
    }

    /// A job of `account` was dispatched.
    pub(crate) fn take(&self, account: u32) {
        if let Some(n) = self.held.get(account as usize) {
            n.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A job of `account` is done with (its answer popped by the shard, or
    /// it never left): rings the dispatcher if the account was at its cap.
    pub(crate) fn give(&self, account: u32) {
        let Some(n) = self.held.get(account as usize) else {
            return;
        };
        let before = n
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .unwrap_or(0);
        if before == ACCOUNT_INFLIGHT_MAX {
            self.dispatcher.ring();
        }
    }

    /// Jobs of `account` past the queue now.
    pub fn held(&self, account: u32) -> u32 {
        self.held
            .get(account as usize)
            .map_or(0, |n| n.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_at_its_cap_is_held_back_until_an_answer_is_popped() {
        let f = AccountInflight::new(4, Doorbell::new());
        for _ in 0..ACCOUNT_INFLIGHT_MAX {
            assert!(f.has_room(1));
            f.take(1);
        }
        assert!(!f.has_room(1));
        assert!(f.has_room(2), "another account is not held back");
        assert!(f.has_room(99), "outside the table: the queue refuses it");
        f.give(1);
        assert!(f.has_room(1));
        assert_eq!(f.held(1), ACCOUNT_INFLIGHT_MAX - 1);
        // Never below zero.
        f.give(3);
        assert_eq!(f.held(3), 0);
    }
}
