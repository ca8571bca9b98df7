//! The subscriber SDK: a blocking client for the pricewire protocol
//! (`docs/protocol.md`) with reconnect, resubscribe and gap resync.
//!
//! # Contract
//!
//! - **Blocking, no runtime.** [`Client`] drives one `std::net::TcpStream`
//!   with connect, read and write timeouts; [`Client::next_event`] blocks
//!   for the timeout it is given, plus at most a write timeout when a
//!   heartbeat or request goes out, or one connect + logon timeout when a
//!   reconnect falls due inside the call.
//! - **Allocated up front.** The receive buffer (1 MiB, the largest server
//!   frame), the send buffer (64 KiB, the largest client frame), the
//!   sequence table (`max_subscriptions` keys) and the event queue
//!   (`events_queued_max`) are allocated by [`Client::connect`]. Decoding a
//!   price and yielding [`Event::Price`] allocates nothing; answers to
//!   requests (subscribe results, snapshot responses, directories, rejects)
//!   are cold and own their lists.
//! - **Resilient.** A lost session (server Disconnect, peer close, I/O error,
//!   no bytes for `dead_after_heartbeats` heartbeat intervals) is reported
//!   as [`Event::Disconnected`]; the client then reconnects after a
//!   full-jitter exponential backoff ([`ReconnectPolicy`]; the server's
//!   `retryAfterMs` is a floor, never a schedule), logs on again and
//!   resubscribes everything it was asked for. A session that cannot be
//!   resumed (bad credentials, logout, attempts exhausted) ends the client:
//!   `next_event` returns [`ClientError::Closed`].
//! - **Sequenced.** Every (symbol, tier) has an expected sequence number; a
//!   PriceSnapshot resets it, a PriceUpdate with `seq > expected` is a gap
//!   that triggers one critical SnapshotRequest for that key
//!   ([`SeqTracker`]), and an old or duplicate update is dropped (counted).
//! - **Sans-IO core.** [`Session`] (frames → events, sequence tracking) and
//!   [`ReconnectPolicy`] (delays from an injected RNG and `now_ns`) are plain
//!   state machines; tests drive them with scripted bytes and a manual
//!   clock, without sockets or sleeps.

pub mod blocking;
pub mod event;
pub mod reconnect;
pub mod seq;
pub mod session;
pub mod stats;
pub mod tls;

pub use blocking::{Client, ClientConfig, ClientError, Events};
pub use event::{DisconnectCause, Event, LogonInfo, PriceEvent, SeqStatus};
pub use reconnect::{DisconnectInfo, ReconnectPolicy};
pub use seq::SeqTracker;
pub use session::{Session, SessionError};
pub use stats::{ClientStats, ClientStatsSnapshot};
