//! Read access to a [`Session`] and the few notes the shard makes in it.

use std::sync::Arc;

use super::{Session, SessionState};
use crate::config::Account;
use crate::wire::{DisconnectReason, TIER_ACCOUNT_DEFAULT};

impl Session {
    /// Where the session is in its life.
    pub fn state(&self) -> SessionState {
        self.state
    }

    /// Whether it is logged on and not closing.
    pub fn is_active(&self) -> bool {
        matches!(self.state, SessionState::Active { .. })
    }

    /// Whether a Disconnect was queued and it is flushing before close.
    pub fn is_closing(&self) -> bool {
        matches!(self.state, SessionState::Closing { .. })
    }

    /// The logged-on account's index, if logged on.
    pub fn account(&self) -> Option<u32> {
        match self.state {
            SessionState::Active { account } => Some(account),
            _ => None,
        }
    }

    /// The logged-on account (entitlements), from the config or Redis.
    pub fn acct(&self) -> Option<&Arc<Account>> {
        self.acct.as_ref()
    }

    /// The account's record changed in the reference data: later requests
    /// are checked against `acct` (the shard has already ended what it
    /// withdrew). No effect on a session that is not logged on.
    pub fn replace_acct(&mut self, acct: Arc<Account>) {
        if self.acct.is_some() {
            self.acct = Some(acct);
        }
    }

    /// The session id given at logon (0 before).
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// The tier a request naming the account default gets.
    pub fn default_tier(&self) -> u8 {
        self.default_tier
    }

    /// `tier` as a request names it: the session's default for
    /// [`TIER_ACCOUNT_DEFAULT`].
    pub fn tier(&self, tier: u8) -> u8 {
        if tier == TIER_ACCOUNT_DEFAULT {
            self.default_tier
        } else {
            tier
        }
    }

    /// The agreed heartbeat interval, ns.
    pub fn heartbeat_ns(&self) -> u64 {
        self.heartbeat_ns
    }

    /// Why the server is closing it, if it is.
    pub fn closing_reason(&self) -> Option<DisconnectReason> {
        self.closing_reason
    }

    /// Whether the session's first Subscribe has passed admission.
    pub fn first_subscribe_done(&self) -> bool {
        self.first_subscribe_done
    }

    /// Notes that the session's first Subscribe passed admission.
    pub fn set_first_subscribe_done(&mut self) {
        self.first_subscribe_done = true;
    }

    /// The shard queued bytes (prices, answers) at `now_ns`: the heartbeat
    /// timer restarts.
    #[inline]
    pub fn note_sent(&mut self, now_ns: u64) {
        self.last_tx_ns = now_ns;
    }

    /// Refusals in a row now (see `session::backoff`).
    pub fn backoff_strikes(&self) -> u32 {
        self.backoff.strikes()
    }
}
