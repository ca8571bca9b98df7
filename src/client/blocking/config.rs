//! The client's settings and their defaults.

use std::net::SocketAddr;

use super::ClientError;
use crate::client::reconnect::{
    RECONNECT_ATTEMPTS_MAX_DEFAULT, RECONNECT_BASE_MS_DEFAULT, RECONNECT_CAP_MS_DEFAULT,
    STABLE_AFTER_MS_DEFAULT,
};
use crate::resilience::backoff::Backoff;

/// Default connect timeout, in ms.
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 2_000;
/// Default wait for LogonAccepted, in ms.
pub const LOGON_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Default socket write timeout, in ms.
pub const WRITE_TIMEOUT_MS_DEFAULT: u64 = 2_000;
/// Default silent heartbeat intervals after which the server is dead.
pub const DEAD_AFTER_HEARTBEATS_DEFAULT: u32 = 3;
/// Default bound on subscription entries (and tracked (symbol, tier) keys).
pub const MAX_SUBSCRIPTIONS_DEFAULT: usize = 1_024;
/// Default budget of a gap-resync snapshot request, in µs.
pub const RESYNC_BUDGET_US_DEFAULT: u32 = 500_000;
/// Default bound on events queued inside the client.
pub const EVENTS_QUEUED_MAX_DEFAULT: usize = 4_096;
/// Most entries in one Subscribe frame: 500 x 18 bytes stays under the
/// gateway's default 16 KiB frame limit (`--max-frame-bytes`), not only
/// the protocol's 64 KiB, so a resubscribe is never refused as oversize.
pub const SUBSCRIBE_ENTRIES_MAX: usize = 500;
/// Most gateway addresses a client fails over between (`addr` and
/// `failover` together).
pub const ADDRS_MAX: usize = 16;
/// Most symbols in one SnapshotRequest (2 bytes each; same frame bound).
pub const SNAPSHOT_SYMBOLS_MAX: usize = 4_096;

/// Client settings; [`ClientConfig::new`] fills the defaults.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The gateway's subscriber address (the first one tried).
    pub addr: SocketAddr,
    /// More gateways serving the same prices (other edges of one core),
    /// tried in turn after `addr`: the first connect tries each once, and
    /// every lost session or failed attempt moves the next attempt, after
    /// the usual jittered backoff, to the next address (wrapping). Empty by
    /// default; at most [`ADDRS_MAX`] addresses in all.
    pub failover: Vec<SocketAddr>,
    /// Account name (at most 255 bytes).
    pub account: String,
    /// Logon token (at most 255 bytes).
    pub token: String,
    /// Heartbeat interval to ask for (0 = the server's default).
    pub heartbeat_ms: u32,
    /// TCP connect timeout, in ms (at least 1).
    pub connect_timeout_ms: u64,
    /// Wait for LogonAccepted, in ms (at least 1).
    pub logon_timeout_ms: u64,
    /// Socket write timeout, in ms (at least 1).
    pub write_timeout_ms: u64,
    /// The server is dead after this many silent heartbeat intervals.
    pub dead_after_heartbeats: u32,
    /// Reconnect backoff (full jitter): first window and cap.
    pub backoff: Backoff,
    /// Consecutive failed reconnects before the client gives up.
    pub reconnect_attempts_max: u32,
    /// A session that lasted this long resets the backoff.
    pub stable_after_ms: u64,
    /// Most subscription entries (and tracked (symbol, tier) keys), at least 1.
    pub max_subscriptions: usize,
    /// Ask for a snapshot when a sequence gap shows.
    pub auto_resync: bool,
    /// Time budget of a gap-resync snapshot request, in µs.
    pub resync_budget_us: u32,
    /// Most events queued inside the client (at least 1), apart for each
    /// of two queues: the driver's own (logons, disconnects; more are
    /// dropped and counted) and the events `await_response` sets aside
    /// (never dropped: a full one stops the wait with
    /// [`ClientError::Backlog`]).
    pub events_queued_max: usize,
    /// Seed of the backoff RNG (`None` = from entropy).
    pub rng_seed: Option<u64>,
    /// TLS to the server (trusted CAs and server name); `None` is
    /// plaintext.
    pub tls: Option<crate::client::tls::ClientTls>,
}

impl ClientConfig {
    /// Settings for `account` at `addr` with every default.
    pub fn new(addr: SocketAddr, account: &str, token: &str) -> Self {
        ClientConfig {
            addr,
            failover: Vec::new(),
            account: account.to_string(),
            token: token.to_string(),
            heartbeat_ms: 0,
            connect_timeout_ms: CONNECT_TIMEOUT_MS_DEFAULT,
            logon_timeout_ms: LOGON_TIMEOUT_MS_DEFAULT,
            write_timeout_ms: WRITE_TIMEOUT_MS_DEFAULT,
            dead_after_heartbeats: DEAD_AFTER_HEARTBEATS_DEFAULT,
            backoff: Backoff::new(RECONNECT_BASE_MS_DEFAULT, RECONNECT_CAP_MS_DEFAULT),
            reconnect_attempts_max: RECONNECT_ATTEMPTS_MAX_DEFAULT,
            stable_after_ms: STABLE_AFTER_MS_DEFAULT,
            max_subscriptions: MAX_SUBSCRIPTIONS_DEFAULT,
            auto_resync: true,
            resync_budget_us: RESYNC_BUDGET_US_DEFAULT,
            events_queued_max: EVENTS_QUEUED_MAX_DEFAULT,
            rng_seed: None,
            tls: None,
        }
    }

    /// Refuses settings the client cannot work with.
    pub fn validate(&self) -> Result<(), ClientError> {
        let bad = |m: &str| Err(ClientError::Config(m.to_string()));
        if self.account.len() > 255 || self.token.len() > 255 {
            return bad("account and token: at most 255 bytes");
        }
        if self.backoff.base_ms == 0 || self.backoff.base_ms > self.backoff.cap_ms {
            return bad("backoff: 0 < base_ms <= cap_ms");
        }
        if self.dead_after_heartbeats < 2 {
            return bad("dead_after_heartbeats: at least 2");
        }
        if self.connect_timeout_ms == 0 || self.logon_timeout_ms == 0 || self.write_timeout_ms == 0
        {
            return bad("timeouts: at least 1 ms");
        }
        if self.failover.len() >= ADDRS_MAX {
            return bad("failover: at most 15 addresses after addr");
        }
        if self.max_subscriptions == 0 || self.events_queued_max == 0 {
            return bad("max_subscriptions and events_queued_max: at least 1");
        }
        Ok(())
    }
}
