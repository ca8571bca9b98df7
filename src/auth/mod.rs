//! Credentials and brute-force limits for the subscriber logon (and the
//! provider logon on the ingest listener); see docs/security.md.
//!
//! - [`hash`]: argon2id PHC strings (`pricewire token hash`) and the
//!   verifier; clear tokens only under `insecure_plain_tokens`.
//! - [`lockout`]: per-address and per-account failure tables with a
//!   growing, jittered lockout, fixed-size.
//! - [`cache`]: recent successful verifications, so a reconnect with the
//!   same token skips argon2.
//! - [`verifier`]: the bounded worker threads that run argon2 off the
//!   shard threads, serving accounts in turn.
//! - [`reservation`]: a guess's place in the lockout tables, taken before
//!   its token is checked and settled by the verdict.
//!
//! [`AuthGuard`] ties them together for one listener. The order a logon
//! goes through (in `gateway::logon`): address lockout → reference data
//! → cache (a hit logs on) → account lockout → the verifier queue (full:
//! LogonRejected(busy)) → on the worker: the cache again, then a
//! reservation against the address and account (refused: LogonRejected
//! (rate_limited)), then argon2 → the verdict settles the reservation and
//! goes back to the shard. A locked address or account never reaches
//! argon2, and however many logons run at once no more guesses of one
//! key reach argon2 than its lockout threshold before it locks.

pub mod cache;
pub mod hash;
pub mod lockout;
pub mod reservation;
pub mod verifier;

pub use reservation::Reservation;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use cache::VerifiedCache;
use lockout::{Keyer, Lockout, LockoutPolicy};

/// How long a successful verification is reused for new sessions of the
/// same account and token (a session itself never verifies again).
pub const CACHE_TTL_NS: u64 = 600 * 1_000_000_000;
/// Accounts in the verification cache.
pub const CACHE_ACCOUNTS_MAX: usize = 4096;

/// Why a logon failed, as `pricewire_logon_failures_total{reason}` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailReason {
    /// The account exists; the token is wrong.
    BadToken,
    /// No such account (verified against a decoy hash all the same).
    UnknownAccount,
    /// Refused before verification: the address or account is locked.
    Locked,
    /// Refused before verification: the verifier's queue is full.
    VerifierBusy,
    /// Refused before anything else: the account was cut for a message
    /// flood from this address, and its retry-after has not passed.
    FloodHold,
}

impl FailReason {
    /// Every reason, in label order.
    pub const ALL: [FailReason; 5] = [
        FailReason::BadToken,
        FailReason::UnknownAccount,
        FailReason::Locked,
        FailReason::VerifierBusy,
        FailReason::FloodHold,
    ];

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            FailReason::BadToken => "bad_token",
            FailReason::UnknownAccount => "unknown_account",
            FailReason::Locked => "locked",
            FailReason::VerifierBusy => "verifier_busy",
            FailReason::FloodHold => "flood_hold",
        }
    }
}

/// The scope of a lockout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The logon's source address (IPv6 by /64).
    Address,
    /// The account named in the logon.
    Account,
}

impl Scope {
    /// Both scopes, in label order.
    pub const ALL: [Scope; 2] = [Scope::Address, Scope::Account];

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Address => "address",
            Scope::Account => "account",
        }
    }
}

/// The listener a guard serves, as the `listener` label of the logon and
/// lockout families names it (the TLS families use the same values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// Subscriber terminals (`--listen`): address and account lockouts.
    Subscriber,
    /// Provider bridges (`--feed-listen`): address lockout only. A provider
    /// id is not locked: anyone who reaches the port could otherwise keep
    /// a liquidity provider's bridge from logging back on.
    Feed,
}

impl Listener {
    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Listener::Subscriber => "subscriber",
            Listener::Feed => "feed",
        }
    }

    /// The lockout scopes this listener enforces.
    pub fn scopes(self) -> &'static [Scope] {
        match self {
            Listener::Subscriber => &Scope::ALL,
            Listener::Feed => &[Scope::Address],
        }
    }
}

/// The brute-force and verifier limits of one listener (`serve` flags;
/// docs/security.md). The defaults are the documented constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthLimits {
    /// Per source address.
    pub address: LockoutPolicy,
    /// Per account (the subscriber listener only).
    pub account: LockoutPolicy,
    /// argon2 verifier threads (≥ 1; each hash takes 19 MiB while it runs).
    pub verifier_threads: usize,
    /// Logons waiting for a verifier thread (≥ 1); beyond it
    /// LogonRejected(busy).
    pub verifier_queue: usize,
}

impl Default for AuthLimits {
    /// The subscriber listener's defaults.
    fn default() -> Self {
        AuthLimits {
            address: LockoutPolicy::ADDRESS,
            account: LockoutPolicy::ACCOUNT,
            verifier_threads: verifier::WORKERS_DEFAULT,
            verifier_queue: verifier::QUEUE_DEFAULT,
        }
    }
}

impl AuthLimits {
    /// The provider listener's defaults: the same address lockout, one
    /// verifier thread with [`verifier::FEED_QUEUE_DEFAULT`] waiting.
    pub fn feed_default() -> AuthLimits {
        AuthLimits {
            verifier_threads: 1,
            verifier_queue: verifier::FEED_QUEUE_DEFAULT,
            ..AuthLimits::default()
        }
    }
}

/// Counters of one listener's logon checks.
#[derive(Debug, Default)]
pub struct AuthStats {
    failures: [AtomicU64; FailReason::ALL.len()],
    lockouts: [AtomicU64; 2],
    /// argon2 verifications run.
    pub verifications: AtomicU64,
    /// Logons that reused a cached verification.
    pub cache_hits: AtomicU64,
}

impl AuthStats {
    /// Counts a failed logon.
    pub fn failed(&self, r: FailReason) {
        self.failures[r as usize].fetch_add(1, Relaxed);
    }
    /// Failed logons for `r` since start.
    pub fn failures(&self, r: FailReason) -> u64 {
        self.failures[r as usize].load(Relaxed)
    }
    /// Lockouts started in `s` since start.
    pub fn lockouts(&self, s: Scope) -> u64 {
        self.lockouts[s as usize].load(Relaxed)
    }
}

/// One listener's credential checks and brute-force tables (see the
/// module docs). Every decision takes `now_ns` from the caller's clock.
pub struct AuthGuard {
    listener: Listener,
    keyer: Keyer,
    addresses: Mutex<Lockout>,
    accounts: Mutex<Lockout>,
    /// (account, address) pairs cut for a message flood, until their
    /// retry-after has passed.
    holds: Mutex<Lockout>,
    cache: Mutex<VerifiedCache>,
    /// The counters.
    pub stats: AuthStats,
}

impl AuthGuard {
    /// A guard for `listener` with the lockout policies of `limits` and
    /// the default cache. The feed listener has no account table.
    pub fn new(listener: Listener, limits: &AuthLimits) -> AuthGuard {
        let seed = rand::random::<u64>();
        let account = match listener {
            Listener::Subscriber => limits.account,
            Listener::Feed => LockoutPolicy {
                capacity: lockout::WAYS,
                ..limits.account
            },
        };
        AuthGuard {
            listener,
            keyer: Keyer::default(),
            addresses: Mutex::new(Lockout::new(limits.address, seed)),
            accounts: Mutex::new(Lockout::new(account, seed ^ 0x9e37_79b9_7f4a_7c15)),
            holds: Mutex::new(Lockout::new(
                LockoutPolicy::FLOOD_HOLD,
                seed.rotate_left(17),
            )),
            cache: Mutex::new(VerifiedCache::new(CACHE_TTL_NS, CACHE_ACCOUNTS_MAX)),
            stats: AuthStats::default(),
        }
    }

    /// Whether a panic left one of the tables poisoned (a connection
    /// boundary then does not contain the fault: the tables are shared).
    pub fn is_poisoned(&self) -> bool {
        self.addresses.is_poisoned()
            || self.accounts.is_poisoned()
            || self.holds.is_poisoned()
            || self.cache.is_poisoned()
    }

    /// `Err(retry_after_ms)` while `ip` is locked (counted as a failure).
    pub fn check_address(&self, ip: IpAddr, now_ns: u64) -> Result<(), u32> {
        let r = lock(&self.addresses).check(self.keyer.address(ip), now_ns);
        if r.is_err() {
            self.stats.failed(FailReason::Locked);
        }
        r
    }

    /// `Err(retry_after_ms)` while `account` is locked (counted).
    pub fn check_account(&self, account: &[u8], now_ns: u64) -> Result<(), u32> {
        let r = lock(&self.accounts).check(self.keyer.account(account), now_ns);
        if r.is_err() {
            self.stats.failed(FailReason::Locked);
        }
        r
    }

    /// `account`'s session from `ip` was cut for a message flood and told
    /// to come back in `retry_after_ms`: its logons from `ip` are refused
    /// until then ([`check_hold`](Self::check_hold)).
    pub fn hold_after_flood(&self, account: &[u8], ip: IpAddr, retry_after_ms: u32, now_ns: u64) {
        let key = self.keyer.pair(account, ip);
        lock(&self.holds).hold(key, now_ns, u64::from(retry_after_ms));
    }

    /// `Err(retry_after_ms)` while `account` from `ip` is held after a
    /// flood cut (counted); a logon inside the hold ignored its
    /// retry-after, so the hold grows (see [`Lockout::try_held`]).
    pub fn check_hold(&self, account: &[u8], ip: IpAddr, now_ns: u64) -> Result<(), u32> {
        let r = lock(&self.holds).try_held(self.keyer.pair(account, ip), now_ns);
        if r.is_err() {
            self.stats.failed(FailReason::FloodHold);
        }
        r
    }

    /// Whether `token` verified for `account` against `stored` recently.
    pub fn cached(&self, account: &str, stored: &str, token: &[u8], now_ns: u64) -> bool {
        let hit = lock(&self.cache).hit(account, stored, token, now_ns);
        if hit {
            self.stats.cache_hits.fetch_add(1, Relaxed);
        }
        hit
    }

    /// The listener this guard serves.
    pub fn listener(&self) -> Listener {
        self.listener
    }

    /// Guesses of `account` being checked (reserved, not yet settled).
    pub fn pending_account(&self, account: &[u8]) -> u32 {
        lock(&self.accounts).pending(self.keyer.account(account))
    }

    /// Guesses from `ip` being checked (reserved, not yet settled).
    pub fn pending_address(&self, ip: IpAddr) -> u32 {
        lock(&self.addresses).pending(self.keyer.address(ip))
    }

    /// The fairness key of `account` in the verifier queue (its account
    /// lockout key).
    pub fn account_key(&self, account: &[u8]) -> u64 {
        self.keyer.account(account)
    }

    /// Keys of `scope` locked at `now_ns`.
    pub fn active_lockouts(&self, scope: Scope, now_ns: u64) -> usize {
        match scope {
            Scope::Address => lock(&self.addresses).active(now_ns),
            Scope::Account => lock(&self.accounts).active(now_ns),
        }
    }
}

impl Default for AuthGuard {
    /// The subscriber listener's guard on the default limits.
    fn default() -> Self {
        AuthGuard::new(Listener::Subscriber, &AuthLimits::default())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The tables stay consistent under a panic elsewhere (plain values).
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
