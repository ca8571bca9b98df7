//! Admission: the outermost protection of a gateway listener. It decides,
//! before any work is spent, whether a connection, a logon, a first
//! subscription or a symbol-list request may proceed.
//!
//! # Contract
//!
//! - **Sans-IO, injected time**: [`Admission`] reads no clock and touches no
//!   socket; every decision takes `now_ns` (monotonic ns) and returns
//!   `Ok(())` or a [`Reject`] carrying the [`Stage`] that refused and a
//!   `retry_after_ms` drawn uniformly from the configured window. The caller
//!   sends the reject (e.g. Disconnect(busy, retryAfterMs) on accept) and
//!   closes. Rejects are immediate: nothing is ever queued here.
//! - **Bounded, allocation-free after construction**: the stage buckets, the
//!   per-IP table (`ip_table_capacity` addresses, never grows) and the
//!   per-account session table (`accounts_max`) are allocated in
//!   [`Admission::new`]. When the IP table is full of busy addresses an
//!   unknown address is decided by one shared overflow bucket and counted
//!   (`ip_table_overflow`).
//! - **Not synchronised**: `&mut self`; one per listener / event loop, with
//!   counters in the shared [`OverloadStats`].
//!
//! # Calls the gateway makes
//!
//! | event | call |
//! |---|---|
//! | TCP accept | [`Admission::on_accept`]`(ip, now_ns)` |
//! | connection closed (any reason, after an accepted `on_accept`) | [`Admission::on_close`]`(ip)` |
//! | logon frame | [`Admission::on_logon`]`(now_ns)` then, once authenticated, [`Admission::on_session_open`]`(account)` |
//! | session ends | [`Admission::on_session_close`]`(account)` |
//! | first subscribe of a session | [`Admission::on_first_subscribe`]`(now_ns)` |
//! | symbol-list request | [`Admission::on_symbol_list`]`(now_ns)` |
//!
//! # Why not `governor`
//!
//! governor (GCRA, lock-free) was evaluated and not used, for structural
//! reasons rather than speed: (1) its clock is a type parameter owned by
//! the limiter and read inside `check()`; it can be faked
//! (`FakeRelativeClock`, or our own `Clock` impl) but not handed a `now_ns`
//! per call, which is how every decision in pricewire is driven and tested;
//! (2) its keyed limiters store state in a `HashMap`/`DashMap` that inserts
//! (allocates) on every new key and grows without bound until the caller
//! runs `retain_recent` + `shrink_to_fit` — the per-IP table must have a
//! fixed capacity, evict idle entries itself and fall back to an overflow
//! bucket, which governor has no notion of; (3) the direct (un-keyed) case
//! is twenty lines of integer arithmetic ([`TokenBucket`]) that is exact
//! and needs no extra dependency tree. The hot path was therefore not the
//! deciding factor and no benchmark was needed to decide.

mod bucket;
pub mod ip_table;

use std::net::IpAddr;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::Rng;

pub use bucket::{refill_retry_ms, RetryWindow, TokenBucket, REFILL_RETRY_MAX_MS};
pub use ip_table::ip_key;

use crate::config::ACCOUNT_SESSIONS_DEFAULT;
use crate::overload::stats::{inc, set};
use crate::overload::OverloadStats;
pub use crate::overload::Stage;
use ip_table::IpTable;

/// A refusal: where, and when the client may come back (jittered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reject {
    /// The check that refused (counted per stage in `admission_rejects`).
    pub stage: Stage,
    /// Milliseconds the client should wait before reconnecting, drawn
    /// uniformly from [`AdmissionConfig::retry_after`].
    pub retry_after_ms: u32,
}

/// An admission configuration problem, or a call naming an unknown account.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// [`AdmissionConfig::validate`] refused a value.
    #[error("admission config `{key}`: {reason}")]
    Config {
        /// The offending [`AdmissionConfig`] field, e.g. `ip_table_capacity`.
        key: &'static str,
        /// What the value must be, e.g. `must be at least 1`.
        reason: &'static str,
    },
    /// An account index at or past `accounts_max`.
    #[error("account index {account} is outside the admission table ({accounts_max})")]
    UnknownAccount {
        /// The index the caller passed.
        account: u32,
        /// The table's size ([`AdmissionConfig::accounts_max`]).
        accounts_max: usize,
    },
}

/// Default limits for one instance serving 10,000 terminals; the reasons
/// are in `docs/overload.md`. Rates are tokens per second, bursts are
/// tokens (the bucket's size, also its content at start).
///
/// Default `accept_rate_per_s`: new TCP connections per second, all addresses.
pub const ACCEPT_RATE_PER_S_DEFAULT: u32 = 2000;
/// Default `accept_burst`: connections accepted back to back.
pub const ACCEPT_BURST_DEFAULT: u32 = 4000;
/// Default `logon_rate_per_s`: logon frames per second, all connections.
pub const LOGON_RATE_PER_S_DEFAULT: u32 = 1000;
/// Default `logon_burst`: logons admitted back to back.
pub const LOGON_BURST_DEFAULT: u32 = 2000;
/// Default `first_subscribe_rate_per_s`: sessions' first subscribes per second.
pub const FIRST_SUBSCRIBE_RATE_PER_S_DEFAULT: u32 = 1000;
/// Default `first_subscribe_burst`: first subscribes admitted back to back.
pub const FIRST_SUBSCRIBE_BURST_DEFAULT: u32 = 2000;
/// Default `symbol_list_rate_per_s`: symbol-list requests per second.
pub const SYMBOL_LIST_RATE_PER_S_DEFAULT: u32 = 200;
/// Default `symbol_list_burst`: symbol-list requests admitted back to back.
pub const SYMBOL_LIST_BURST_DEFAULT: u32 = 400;
/// Default `ip_connections_max`: open connections per address at once.
pub const IP_CONNECTIONS_MAX_DEFAULT: u32 = 256;
/// Default `ip_connect_rate_per_s`: new connections per second per address.
pub const IP_CONNECT_RATE_PER_S_DEFAULT: u32 = 50;
/// Default `ip_connect_burst`: connections one address may open back to back.
pub const IP_CONNECT_BURST_DEFAULT: u32 = 100;
/// Default `ip_table_capacity`: addresses tracked at once.
pub const IP_TABLE_CAPACITY_DEFAULT: usize = 16_384;
/// Default `ip_overflow_rate_per_s`: connections per second shared by every
/// address the full IP table cannot track.
pub const IP_OVERFLOW_RATE_PER_S_DEFAULT: u32 = 100;
/// Default `ip_overflow_burst`: untracked connections admitted back to back.
pub const IP_OVERFLOW_BURST_DEFAULT: u32 = 200;
/// Default `accounts_max`: size of the per-account session table.
pub const ADMISSION_ACCOUNTS_MAX_DEFAULT: usize = 4096;
/// Default `retry_after`: a rejected client is told to come back in 3 to 8 s.
pub const ADMISSION_RETRY_WINDOW_DEFAULT: RetryWindow = RetryWindow::new(3000, 8000);

/// Admission settings; [`Default`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// New TCP connections admitted per second, all addresses together.
    pub accept_rate_per_s: u32,
    /// Connections admitted back to back before the rate applies; at least 1.
    pub accept_burst: u32,
    /// Logon frames admitted per second, all connections together.
    pub logon_rate_per_s: u32,
    /// Logons admitted back to back; at least 1.
    pub logon_burst: u32,
    /// Sessions' first subscribes admitted per second (later subscribes
    /// are not limited here).
    pub first_subscribe_rate_per_s: u32,
    /// First subscribes admitted back to back; at least 1.
    pub first_subscribe_burst: u32,
    /// Symbol-list requests admitted per second.
    pub symbol_list_rate_per_s: u32,
    /// Symbol-list requests admitted back to back; at least 1.
    pub symbol_list_burst: u32,
    /// Open connections one address (IPv6: one /64) may hold; at least 1.
    pub ip_connections_max: u32,
    /// New connections per second one address (IPv6: one /64) may open.
    pub ip_connect_rate_per_s: u32,
    /// Connections one address may open back to back; at least 1.
    pub ip_connect_burst: u32,
    /// Addresses tracked at once, 1..=2^24; allocated up front, never grows.
    pub ip_table_capacity: usize,
    /// Connections per second shared by every address the full IP table
    /// cannot track (counted in `ip_table_overflow`).
    pub ip_overflow_rate_per_s: u32,
    /// Untracked connections admitted back to back; at least 1.
    pub ip_overflow_burst: u32,
    /// Size of the per-account session table: account indices are
    /// 0..accounts_max, which is 1..=2^32-1.
    pub accounts_max: usize,
    /// Session cap of an account until [`Admission::set_account_sessions_max`].
    pub account_sessions_max: u32,
    /// Window the `retry_after_ms` of every [`Reject`] is drawn from.
    pub retry_after: RetryWindow,
}

impl Default for AdmissionConfig {
    fn default() -> AdmissionConfig {
        AdmissionConfig {
            accept_rate_per_s: ACCEPT_RATE_PER_S_DEFAULT,
            accept_burst: ACCEPT_BURST_DEFAULT,
            logon_rate_per_s: LOGON_RATE_PER_S_DEFAULT,
            logon_burst: LOGON_BURST_DEFAULT,
            first_subscribe_rate_per_s: FIRST_SUBSCRIBE_RATE_PER_S_DEFAULT,
            first_subscribe_burst: FIRST_SUBSCRIBE_BURST_DEFAULT,
            symbol_list_rate_per_s: SYMBOL_LIST_RATE_PER_S_DEFAULT,
            symbol_list_burst: SYMBOL_LIST_BURST_DEFAULT,
            ip_connections_max: IP_CONNECTIONS_MAX_DEFAULT,
            ip_connect_rate_per_s: IP_CONNECT_RATE_PER_S_DEFAULT,
            ip_connect_burst: IP_CONNECT_BURST_DEFAULT,
            ip_table_capacity: IP_TABLE_CAPACITY_DEFAULT,
            ip_overflow_rate_per_s: IP_OVERFLOW_RATE_PER_S_DEFAULT,
            ip_overflow_burst: IP_OVERFLOW_BURST_DEFAULT,
            accounts_max: ADMISSION_ACCOUNTS_MAX_DEFAULT,
            account_sessions_max: ACCOUNT_SESSIONS_DEFAULT,
            retry_after: ADMISSION_RETRY_WINDOW_DEFAULT,
        }
    }
}

impl AdmissionConfig {
    /// Refuses values admission cannot work with, naming the key.
    pub fn validate(&self) -> Result<(), AdmissionError> {
        let err = |key, reason| Err(AdmissionError::Config { key, reason });
        let bursts = [
            ("accept_burst", self.accept_burst),
            ("logon_burst", self.logon_burst),
            ("first_subscribe_burst", self.first_subscribe_burst),
            ("symbol_list_burst", self.symbol_list_burst),
            ("ip_connect_burst", self.ip_connect_burst),
            ("ip_overflow_burst", self.ip_overflow_burst),
        ];
        if let Some((key, _)) = bursts.iter().find(|(_, burst)| *burst == 0) {
            return err(key, "must be at least 1");
        }
        if self.ip_connections_max == 0 {
            return err("ip_connections_max", "must be at least 1");
        }
        if self.ip_table_capacity == 0 || self.ip_table_capacity > 1 << 24 {
            return err("ip_table_capacity", "must be in 1..=16777216");
        }
        if self.accounts_max == 0 || self.accounts_max > u32::MAX as usize {
            return err("accounts_max", "must be in 1..=2^32-1");
        }
        if !self.retry_after.is_valid() {
            return err("retry_after", "needs 0 <= min_ms <= max_ms, max_ms > 0");
        }
        Ok(())
    }
}

/// The admission state of one listener.
pub struct Admission<R: Rng = SmallRng> {
    cfg: AdmissionConfig,
    accept: TokenBucket,
    logon: TokenBucket,
    first_subscribe: TokenBucket,
    symbol_list: TokenBucket,
    ip_overflow: TokenBucket,
    ips: IpTable,
    sessions: Box<[u32]>,
    sessions_max: Box<[u32]>,
    rng: R,
    stats: Arc<OverloadStats>,
}

impl<R: Rng> Admission<R> {
    /// Allocates every table; all buckets start full at `now_ns`.
    pub fn new(
        cfg: AdmissionConfig,
        rng: R,
        stats: Arc<OverloadStats>,
        now_ns: u64,
    ) -> Result<Self, AdmissionError> {
        cfg.validate()?;
        let bucket = |rate, burst| TokenBucket::new(rate, burst, now_ns);
        let ip_blank = bucket(cfg.ip_connect_rate_per_s, cfg.ip_connect_burst);
        Ok(Admission {
            accept: bucket(cfg.accept_rate_per_s, cfg.accept_burst),
            logon: bucket(cfg.logon_rate_per_s, cfg.logon_burst),
            first_subscribe: bucket(cfg.first_subscribe_rate_per_s, cfg.first_subscribe_burst),
            symbol_list: bucket(cfg.symbol_list_rate_per_s, cfg.symbol_list_burst),
            ip_overflow: bucket(cfg.ip_overflow_rate_per_s, cfg.ip_overflow_burst),
            ips: IpTable::new(cfg.ip_table_capacity, ip_blank),
            sessions: vec![0; cfg.accounts_max].into_boxed_slice(),
            sessions_max: vec![cfg.account_sessions_max; cfg.accounts_max].into_boxed_slice(),
            rng,
            stats,
            cfg,
        })
    }

    /// A new TCP connection from `ip`. On `Err` the caller sends
    /// Disconnect(busy, retry_after_ms) and closes; on `Ok` it must call
    /// [`on_close`](Self::on_close) when the connection ends.
    ///
    /// Checks run cheapest first and a token is taken only when every check
    /// passed, so a refusal at one stage does not spend another's budget.
    pub fn on_accept(&mut self, ip: IpAddr, now_ns: u64) -> Result<(), Reject> {
        self.accept.refill(now_ns);
        if !self.accept.has_token() {
            return Err(self.reject(Stage::Accept));
        }
        match self.track(ip_key(ip), now_ns) {
            Some(index) => self.admit_tracked(index, now_ns)?,
            None => self.admit_overflow(now_ns)?,
        }
        self.accept.take();
        inc(&self.stats.admitted);
        Ok(())
    }

    /// A connection admitted by [`on_accept`](Self::on_accept) closed.
    /// Connections admitted through the overflow bucket are not tracked per
    /// address; if such an address is later tracked, its close may release
    /// a tracked slot instead (lenient, never below zero).
    pub fn on_close(&mut self, ip: IpAddr) {
        if let Some(index) = self.ips.find(ip_key(ip)) {
            let entry = self.ips.entry_mut(index);
            entry.connections = entry.connections.saturating_sub(1);
        }
    }

    /// A logon frame arrived (before authentication work is spent).
    pub fn on_logon(&mut self, now_ns: u64) -> Result<(), Reject> {
        self.stage_check(Stage::Logon, now_ns)
    }

    /// A session subscribes for the first time (snapshots for every symbol
    /// follow, so this is the second most expensive step).
    pub fn on_first_subscribe(&mut self, now_ns: u64) -> Result<(), Reject> {
        self.stage_check(Stage::FirstSubscribe, now_ns)
    }

    /// A symbol-list request (the largest answer; limited most).
    pub fn on_symbol_list(&mut self, now_ns: u64) -> Result<(), Reject> {
        self.stage_check(Stage::SymbolList, now_ns)
    }

    /// An authenticated session of `account` opens. On `Err` the caller
    /// rejects the logon; on `Ok` it must call
    /// [`on_session_close`](Self::on_session_close) when the session ends.
    pub fn on_session_open(&mut self, account: u32) -> Result<(), Reject> {
        let index = account as usize;
        let allowed =
            index < self.sessions.len() && self.sessions[index] < self.sessions_max[index];
        if !allowed {
            return Err(self.reject(Stage::AccountSessions));
        }
        self.sessions[index] += 1;
        inc(&self.stats.admitted);
        Ok(())
    }

    /// A session opened by [`on_session_open`](Self::on_session_open) ended.
    pub fn on_session_close(&mut self, account: u32) {
        if let Some(n) = self.sessions.get_mut(account as usize) {
            *n = n.saturating_sub(1);
        }
    }

    /// Sets an account's session cap (from its config `max_sessions`).
    pub fn set_account_sessions_max(
        &mut self,
        account: u32,
        max: u32,
    ) -> Result<(), AdmissionError> {
        let accounts_max = self.sessions_max.len();
        let slot =
            self.sessions_max
                .get_mut(account as usize)
                .ok_or(AdmissionError::UnknownAccount {
                    account,
                    accounts_max,
                })?;
        *slot = max;
        Ok(())
    }

    /// Open sessions of `account` (0 if unknown).
    pub fn sessions_of(&self, account: u32) -> u32 {
        self.sessions.get(account as usize).copied().unwrap_or(0)
    }

    /// Open connections tracked for `ip`'s key (0 if untracked).
    pub fn ip_connections(&self, ip: IpAddr) -> u32 {
        let key = ip_key(ip);
        self.ips
            .find(key)
            .map_or(0, |i| self.ip_entry(i).connections)
    }

    /// Addresses in the per-IP table (never above `ip_table_capacity`).
    pub fn tracked_ips(&self) -> usize {
        self.ips.len()
    }

    /// The validated settings this listener runs with.
    pub fn config(&self) -> &AdmissionConfig {
        &self.cfg
    }

    /// The shared counters every decision here updates.
    pub fn stats(&self) -> &Arc<OverloadStats> {
        &self.stats
    }

    fn ip_entry(&self, index: usize) -> &ip_table::IpEntry {
        // `find` only returns used slots.
        self.ips.entry(index)
    }

    /// The table slot of `key`, inserting it if there is room (evicting an
    /// idle entry if needed); `None` means "decide by the overflow bucket".
    fn track(&mut self, key: u128, now_ns: u64) -> Option<usize> {
        if let Some(index) = self.ips.find(key) {
            return Some(index);
        }
        let rate = self.cfg.ip_connect_rate_per_s;
        let fresh = TokenBucket::new(rate, self.cfg.ip_connect_burst, now_ns);
        let inserted = self.ips.insert(key, fresh, now_ns);
        set(&self.stats.ip_table_entries, self.ips.len() as u64);
        match inserted {
            Some((index, evicted)) => {
                if evicted {
                    inc(&self.stats.ip_table_evictions);
                }
                Some(index)
            }
            None => {
                inc(&self.stats.ip_table_overflow);
                None
            }
        }
    }

    fn admit_tracked(&mut self, index: usize, now_ns: u64) -> Result<(), Reject> {
        let connections_max = self.cfg.ip_connections_max;
        let entry = self.ips.entry_mut(index);
        if entry.connections >= connections_max {
            return Err(self.reject(Stage::IpConnections));
        }
        if !entry.bucket.try_take(now_ns) {
            return Err(self.reject(Stage::IpRate));
        }
        entry.connections += 1;
        Ok(())
    }

    fn admit_overflow(&mut self, now_ns: u64) -> Result<(), Reject> {
        if !self.ip_overflow.try_take(now_ns) {
            return Err(self.reject(Stage::IpOverflow));
        }
        Ok(())
    }

    fn stage_check(&mut self, stage: Stage, now_ns: u64) -> Result<(), Reject> {
        let bucket = match stage {
            Stage::Logon => &mut self.logon,
            Stage::FirstSubscribe => &mut self.first_subscribe,
            Stage::SymbolList => &mut self.symbol_list,
            _ => unreachable!("stage_check is only called for rate stages"),
        };
        if !bucket.try_take(now_ns) {
            return Err(self.reject(stage));
        }
        inc(&self.stats.admitted);
        Ok(())
    }

    fn reject(&mut self, stage: Stage) -> Reject {
        self.stats.record_reject(stage);
        Reject {
            stage,
            retry_after_ms: self.cfg.retry_after.draw(&mut self.rng),
        }
    }
}

#[cfg(test)]
mod tests;
