//! FIX 4.4 market-data initiator: what FX liquidity providers speak.
//!
//! Contract: a [`FixFeed`] is a [`crate::feed::TickSource`]; every poll is
//! bounded and non-blocking, and after construction the quote path (read
//! into a per-session receive buffer, frame and verify in place, parse
//! fields as byte slices, update a preallocated book, copy ticks into the
//! caller's batch) allocates nothing. Decisions by time take `now_ns`.
//!
//! Layers, inside out:
//! - [`codec`]: tag=value framing with BodyLength (9) and CheckSum (10)
//!   verification, allocation-free field iteration, the encoder.
//! - [`session`]: the sans-IO session state machine — logon, heartbeats,
//!   TestRequest, MsgSeqNum and the gap policy, market data into ticks,
//!   timeouts, the per-provider feed breaker and provider health.
//! - [`feed`]: the thin I/O driver over non-blocking sockets.
//! - [`sim`]: a provider simulator (FIX acceptor) for tests and drills.
//!
//! See `docs/fix.md` for the supported subset and the operating rules.

pub(crate) mod burst;
pub mod codec;
pub mod damping;
pub mod feed;
pub(crate) mod gray;
pub mod health;
pub mod metrics;
pub mod resolver;
pub mod session;
pub mod sim;
pub mod stats;

pub use crate::config::fix::{FixProviderFile, FixSessionConfig, SymbolMapping};
pub use feed::{FixFeed, WallClock};
pub use session::{bound_slot, FixSession, HealthSlot, Io, SessionState};
pub use stats::{FixFeedStats, FixProviderStats, FixSessionStats};

/// Errors of the FIX subsystem at construction; run-time trouble is
/// handled by the sessions (reconnects, breaker) and counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FixError {
    /// A session's settings are refused.
    #[error("FIX provider {provider}: invalid settings: {reason}")]
    Config {
        /// The provider's configured name.
        provider: String,
        /// Which setting and why.
        #[source]
        reason: crate::config::fix::FixConfigError,
    },
    /// The FIX simulator could not start (the reason).
    #[error("FIX simulator: {0}")]
    Sim(String),
}
