//! The NATS bus between price cores and fan-out edges (`serve --role core`
//! and `--role edge`; docs/scale-out.md).
//!
//! Contract: the bus client runs on its own thread (`pw-bus`) and meets the
//! price path only through bounded SPSC rings, like any feed. On a core the
//! engine publishes into an ordinary shard ring ([`crate::engine::ShardInput`])
//! that the bus thread drains and publishes, so the engine side allocates
//! nothing per price and never waits on the network: when the bus thread
//! falls behind, the engine conflates per symbol as it does for a slow
//! shard. On an edge the bus thread is the only writer of the price table
//! and pushes received prices into one ring per gateway shard
//! ([`crate::engine::ShardPublisher`], conflating when a ring is full).
//!
//! On the wire every price is the protocol's own 76-byte SOFH+SBE
//! PriceUpdate frame (schema id and version in its header, so a newer
//! schema is refused by the decoder, not misread), the publishing core's
//! lease epoch ([`lease`]) and the id of the stream that numbered it
//! ([`codec`]), one subject per symbol: `<prefix>.price.<SYMBOL>`. The
//! core's per-symbol sequence number and stream id travel unchanged.
//!
//! The invariants, from a terminal's point of view (docs/scale-out.md;
//! checked across every failure by `tools/drill`): within one stream id a
//! symbol's sequence only rises and every skip is flagged; one (stream,
//! symbol, seq) is one price on every edge; a price no live core stands
//! behind is flagged stale within the max age; after a single failure
//! live prices resume with at most one flagged price per symbol. Cores
//! keep them by following the leader's output ([`follow`]), taking over
//! above every sequence seen ([`sequencer`]), leading only with healthy
//! feeds ([`health`]) and fencing by the lease; edges by admitting only
//! the newest epoch and flagging what it does not restate.
//!
//! A JetStream stream `<PREFIX>_PRICES` over `<prefix>.price.>`
//! keeps one message per subject: every symbol's last value, which an edge
//! loads before it reports itself started. The core that holds the lease
//! also sends a heartbeat on `<prefix>.heartbeat` ([`heartbeat`]), so an
//! edge tells a quiet market from a dead core (`staleness.rs`).
//!
//! The NATS client is pricewire's own (`nats`, private to this module): a
//! sans-IO protocol core and a readiness loop over one mio socket, driven
//! by the bus thread itself — no async runtime, no thread pool competing
//! with the pinned stages for the two cores of a small box. In steady
//! state the bus thread allocates nothing per price on either side
//! (`tests/bus_alloc.rs` holds it to 0); set-up, last-value loads and
//! reconnects allocate. It connects to the `--bus` servers in order, keeps
//! the connection alive with PING/PONG, reconnects to the next server with
//! [`reconnect_delay`] and subscribes again; JetStream (the last-value
//! stream, direct gets, the lease bucket) is reached by request/reply.

pub mod codec;
mod connect;
pub mod core;
pub mod edge;
pub mod follow;
pub mod health;
pub mod heartbeat;
mod leadership;
pub mod lease;
mod nats;
pub mod security;
pub mod sequencer;
mod staleness;
mod stats;
mod thread;

pub use self::staleness::{MAX_AGE_MS_DEFAULT, MAX_AGE_MS_MAX, MAX_AGE_MS_MIN};

pub use self::connect::reconnect_delay;

use std::time::Duration;

pub use self::core::BusPublisher;
pub use self::edge::{BusSubscriber, EdgeParts};
pub use self::stats::BusStats;

/// Default subject prefix.
pub const PREFIX_DEFAULT: &str = "pricewire";
/// Longest wait for the first connection and the stream set-up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for an edge to load every last value.
pub const LOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Most prices a core's bus thread publishes per turn before it writes
/// them out and reads from the server (PINGs, lease replies).
pub const BATCH_MAX: usize = 256;
/// Longest a core's bus thread sleeps on the NATS socket when its ring is
/// empty, in milliseconds: the engine's doorbell (a mio waker on the same
/// poll) wakes it at once for a price; this bounds the wait for its own
/// timers (lease calls, heartbeats).
pub const IDLE_WAIT_MS: u64 = 20;
/// Default leader lease period of cores, in milliseconds: long enough
/// that a leader's key outlives a JetStream stream-leader election of the
/// lease bucket (3.9–7.8 s measured on a 3-node cluster, docs/scale-out.md)
/// without it fencing itself ([`lease::LeaseTiming::outage_tolerated_ns`]:
/// 12.5 s). A crashed leader's standby does not wait for the key to
/// expire: it takes over after three missed heartbeats.
pub const LEASE_MS_DEFAULT: u64 = 15_000;
/// Shortest lease period `--bus-lease-ms` accepts, in milliseconds.
pub const LEASE_MS_MIN: u64 = 300;
/// Longest lease period `--bus-lease-ms` accepts, in milliseconds.
pub const LEASE_MS_MAX: u64 = 60_000;
/// Most servers in `--bus`.
pub const SERVERS_MAX: usize = 16;

/// What a `serve` process is in a deployment (`--role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Role {
    /// Feeds, engine and gateway in one process (no bus).
    #[default]
    Standalone,
    /// Feeds and engine; every price goes to the bus. No subscribers.
    Core,
    /// Gateway and requests; prices come from the bus. No feeds.
    Edge,
}

/// The bus side a service runs, with its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusRole {
    /// `--role core`: publish the engine's prices.
    Core(BusConfig),
    /// `--role edge`: serve subscribers from the bus.
    Edge(BusConfig),
}

/// A running bus thread, either side.
pub enum BusHandle {
    /// A core's publishing thread.
    Core(BusPublisher),
    /// An edge's receiving thread.
    Edge(BusSubscriber),
}

impl BusHandle {
    /// The thread's counters (shared with /metrics).
    pub fn stats(&self) -> &std::sync::Arc<BusStats> {
        match self {
            BusHandle::Core(p) => &p.stats,
            BusHandle::Edge(s) => &s.stats,
        }
    }

    /// Core: publishes what the engine left and flushes; edge: stops
    /// taking prices. Either way the thread is joined.
    pub fn stop(self) {
        match self {
            BusHandle::Core(p) => p.stop(),
            BusHandle::Edge(s) => s.stop(),
        }
    }
}

/// Where the bus is and how prices are named on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusConfig {
    /// `nats://host:port` of every server the client may use.
    pub servers: Vec<String>,
    /// Subject prefix: prices go to `<prefix>.price.<SYMBOL>`.
    pub prefix: String,
    /// Replicas of the last-value stream (1 or 3 on a 3-node cluster).
    pub replicas: usize,
    /// Leader lease period of cores, in milliseconds.
    pub lease_ms: u64,
    /// Edge: how long without any price or heartbeat of the current
    /// lease epoch (no server, or no live core) before every price is
    /// flagged stale, in milliseconds.
    pub max_age_ms: u64,
    /// Core: the lease holder's heartbeat period on
    /// `<prefix>.heartbeat`, in milliseconds.
    pub heartbeat_ms: u64,
    /// How the client authenticates to NATS ([`security`]).
    pub auth: security::BusAuth,
    /// TLS to every server, verified against these CAs (on with a
    /// `tls://` URL, `--bus-tls` or `--bus-tls-ca`).
    pub tls: Option<security::BusTls>,
}

/// Why the bus could not start or was refused.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// A flag's value is refused (`flag` names it).
    #[error("invalid setting `{flag}`: {reason}")]
    Invalid {
        /// The command-line flag.
        flag: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The credentials or TLS files could not be used (`what` says which).
    #[error("invalid setting `{what}`: {source}")]
    Access {
        /// `bus credentials` or `bus TLS`.
        what: &'static str,
        /// What was wrong, naming the flag or file.
        source: security::AccessError,
    },
    /// The credentials or TLS files could not be read at the first
    /// connect attempt.
    #[error("connecting to NATS ({servers}): {source}")]
    ConnectAccess {
        /// The `--bus` list.
        servers: String,
        /// What was wrong, naming the flag or file.
        source: security::AccessError,
    },
    /// No server of `--bus` answered within [`CONNECT_TIMEOUT`].
    #[error("connecting to NATS ({servers}): {reason}")]
    Connect {
        /// The `--bus` list.
        servers: String,
        /// The last server's reason.
        reason: String,
    },
    /// The last-value stream or the lease bucket could not be found or
    /// created.
    #[error("last-value stream {stream}: {reason}")]
    Stream {
        /// The stream or bucket name.
        stream: String,
        /// The JetStream API's answer.
        reason: String,
    },
    /// An edge could not load every last value within [`LOAD_TIMEOUT`].
    #[error("loading last values: {0}")]
    Load(String),
    /// The bus thread could not start or report.
    #[error("bus thread: {0}")]
    Thread(String),
}

impl BusConfig {
    /// Parses `--bus` (comma-separated `nats://host:port` or
    /// `tls://host:port`, no credentials in them) and checks the prefix;
    /// every refusal names the flag and the reason.
    pub fn parse(bus: &str, prefix: &str, replicas: usize) -> Result<BusConfig, BusError> {
        let servers: Vec<String> = bus
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let invalid = |flag, reason: String| BusError::Invalid { flag, reason };
        if servers.is_empty() || servers.len() > SERVERS_MAX {
            return Err(invalid(
                "--bus",
                format!(
                    "{:?}: give 1..={SERVERS_MAX} nats://host:port, comma-separated",
                    bus.split(',')
                        .map(security::redact)
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            ));
        }
        for s in &servers {
            security::check_server(s)
                .map_err(|r| invalid("--bus", format!("{:?}: {r}", security::redact(s))))?;
        }
        check_prefix(prefix).map_err(|r| invalid("--bus-prefix", format!("{prefix:?}: {r}")))?;
        if !(1..=5).contains(&replicas) {
            return Err(invalid(
                "--bus-replicas",
                format!("{replicas}: must be 1..=5"),
            ));
        }
        Ok(BusConfig {
            servers,
            prefix: prefix.to_string(),
            replicas,
            lease_ms: LEASE_MS_DEFAULT,
            max_age_ms: MAX_AGE_MS_DEFAULT,
            heartbeat_ms: heartbeat::HEARTBEAT_MS_DEFAULT,
            auth: security::BusAuth::None,
            tls: None,
        })
    }

    /// The same, with credentials and TLS (`--bus-user`…, `--bus-tls…`):
    /// a `tls://` URL or `tls_flag` needs `tls` (its CA). No file is read
    /// here ([`BusConfig::check_access`]).
    pub fn with_security(
        mut self,
        auth: security::BusAuth,
        tls: Option<security::BusTls>,
        tls_flag: bool,
    ) -> Result<BusConfig, BusError> {
        if tls.is_none() && (tls_flag || security::tls_scheme(&self.servers)) {
            let flag = if tls_flag { "--bus-tls" } else { "--bus" };
            return Err(BusError::Invalid {
                flag,
                reason:
                    "TLS needs --bus-tls-ca FILE: the CA certificates the servers' chains verify to"
                        .into(),
            });
        }
        self.auth = auth;
        self.tls = tls;
        Ok(self)
    }

    /// Reads the credentials and TLS files once (at start, so a missing
    /// file or a malformed seed is refused before anything runs); errors
    /// name the flag or variable and the file, never a secret.
    pub fn check_access(&self) -> Result<(), BusError> {
        let refused = |what| move |source| BusError::Access { what, source };
        if let Some(t) = &self.tls {
            t.check().map_err(refused("bus TLS"))?;
        }
        self.auth.check().map_err(refused("bus credentials"))
    }

    /// The same, with an edge's max age of `max_age_ms` (`--bus-max-age-ms`).
    pub fn with_max_age_ms(mut self, max_age_ms: u64) -> Result<BusConfig, BusError> {
        if !(MAX_AGE_MS_MIN..=MAX_AGE_MS_MAX).contains(&max_age_ms) {
            return Err(BusError::Invalid {
                flag: "--bus-max-age-ms",
                reason: format!("{max_age_ms}: must be {MAX_AGE_MS_MIN}..={MAX_AGE_MS_MAX}"),
            });
        }
        self.max_age_ms = max_age_ms;
        Ok(self)
    }

    /// The same, with a core's heartbeat period of `heartbeat_ms`
    /// (`--bus-heartbeat-ms`).
    pub fn with_heartbeat_ms(mut self, heartbeat_ms: u64) -> Result<BusConfig, BusError> {
        use heartbeat::{HEARTBEAT_MS_MAX, HEARTBEAT_MS_MIN};
        if !(HEARTBEAT_MS_MIN..=HEARTBEAT_MS_MAX).contains(&heartbeat_ms) {
            return Err(BusError::Invalid {
                flag: "--bus-heartbeat-ms",
                reason: format!("{heartbeat_ms}: must be {HEARTBEAT_MS_MIN}..={HEARTBEAT_MS_MAX}"),
            });
        }
        self.heartbeat_ms = heartbeat_ms;
        Ok(self)
    }

    /// The same, with a lease period of `lease_ms` (`--bus-lease-ms`).
    pub fn with_lease_ms(mut self, lease_ms: u64) -> Result<BusConfig, BusError> {
        if !(LEASE_MS_MIN..=LEASE_MS_MAX).contains(&lease_ms) {
            return Err(BusError::Invalid {
                flag: "--bus-lease-ms",
                reason: format!("{lease_ms}: must be {LEASE_MS_MIN}..={LEASE_MS_MAX}"),
            });
        }
        self.lease_ms = lease_ms;
        Ok(self)
    }

    /// The KV bucket of the cores' leader lease.
    pub fn lease_bucket(&self) -> String {
        self.stream().replace("_PRICES", "_LEASE")
    }

    /// The subject of one symbol's prices.
    pub fn subject(&self, symbol: &str) -> String {
        format!("{}.price.{symbol}", self.prefix)
    }

    /// The subject of the lease holder's heartbeats (outside the price
    /// wildcard, so not kept in the last-value stream).
    pub fn heartbeat_subject(&self) -> String {
        format!("{}.heartbeat", self.prefix)
    }

    /// The wildcard over every symbol's prices.
    pub fn wildcard(&self) -> String {
        format!("{}.price.>", self.prefix)
    }

    /// The last-value stream's name (`<PREFIX>_PRICES`, dots and dashes
    /// as underscores: stream names take no dots).
    pub fn stream(&self) -> String {
        let p: String = self
            .prefix
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect();
        format!("{p}_PRICES")
    }
}

fn check_prefix(prefix: &str) -> Result<(), &'static str> {
    let ok_token = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if prefix.is_empty() || prefix.len() > 64 || !prefix.split('.').all(ok_token) {
        return Err("1..=64 characters of [A-Za-z0-9_-] tokens separated by dots");
    }
    Ok(())
}

/// A symbol name usable as one subject token.
pub fn symbol_token_ok(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'.' && b != b'*' && b != b'>')
}

#[cfg(test)]
mod tests;
