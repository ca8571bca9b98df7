//! The subscriber SDK: a blocking client for the pricewire protocol
//! (`docs/protocol.md`) with reconnect, resubscribe and gap resync.
//!
//! # Contract
//!
//! - **Blocking, no runtime.** [`Client`] drives one `std::net::TcpStream`
//!   with connect, read and write timeouts; [`Client::next_event`] blocks
//!   for the timeout it is given, plus at most a write timeout when a
//!   heartbeat or request goes out, or one connect timeout (TCP connect,
//!   then the TLS handshake) when a reconnect falls due inside the call.
//!   The logon answer after a reconnect is awaited across calls, each
//!   within its own timeout: a server that accepts and never answers
//!   does not hold the caller for the logon timeout.
//! - **Allocated up front.** The receive buffer (1 MiB, the largest server
//!   frame), the send buffer (64 KiB, the largest client frame), the
//!   sequence table (`max_subscriptions` keys) and the event queues
//!   (`events_queued_max` each) are allocated by [`Client::connect`]. Decoding a
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
//! - **No price lost to a request.** Answers (snapshot, history, symbol
//!   list, Reject) arrive in the same event stream as prices, matched by
//!   the request id every request method returns; an answer never moves a
//!   key's expected sequence (it can overtake updates still on their way,
//!   which are then delivered as usual), and
//!   [`Client::await_response`] sets every other event aside for
//!   [`Client::next_event`] — when its bounded room is full it stops with
//!   [`ClientError::Backlog`] rather than drop one.
//! - **Sans-IO core.** [`Session`] (frames → events, sequence tracking) and
//!   [`ReconnectPolicy`] (delays from an injected RNG and `now_ns`) are plain
//!   state machines; tests drive them with scripted bytes and a manual
//!   clock, without sockets or sleeps.
//!
//! # Example
//!
//! Subscribe and print every price with its place in the sequence (a
//! running `pricewire serve` on the default port; `examples/subscriber.rs`
//! is the whole program, with failover and reconnect reporting):
//!
//! ```no_run
//! use std::time::Duration;
//! use pricewire::client::{Client, ClientConfig, Event};
//! use pricewire::wire::TIER_ACCOUNT_DEFAULT;
//!
//! let addr = "127.0.0.1:9400".parse()?;
//! let mut client = Client::connect(ClientConfig::new(addr, "demo", "demo"))?;
//! client.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD", "GBPUSD"])?;
//! for ev in client.events(Duration::from_millis(500)) {
//!     match ev? {
//!         Event::Price(p) => println!("{} seq {} {}", p.body.symbol_id, p.body.seq, p.seq_label()),
//!         Event::Disconnected { cause, reconnect_in_ms, .. } => {
//!             println!("lost ({cause}), reconnecting in {reconnect_in_ms:?} ms")
//!         }
//!         _ => {}
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The sans-IO [`Session`] needs no server: feed it bytes, take events.
//!
//! ```
//! use std::sync::Arc;
//! use pricewire::client::{ClientStats, Event, SeqStatus, Session};
//! use pricewire::wire::{self, PriceBody, PriceKind, PRICE_SLOT_LEN};
//!
//! let mut session = Session::new(16, Arc::new(ClientStats::default()));
//! let mut frame = [0u8; PRICE_SLOT_LEN];
//! for (kind, seq) in [(PriceKind::Snapshot, 10), (PriceKind::Update, 11), (PriceKind::Update, 14)] {
//!     let body = PriceBody { symbol_id: 1, tier: 1, digits: 5, seq, bid: 108_000, ask: 108_004, ..Default::default() };
//!     let n = wire::encode_price(&mut frame, kind, &body, 7);
//!     session.feed(&frame[..n]);
//! }
//! let mut status = Vec::new();
//! while let Some(Event::Price(p)) = session.next_event()? {
//!     status.push(p.seq);
//! }
//! assert_eq!(status[..2], [SeqStatus::Reset, SeqStatus::InOrder]);
//! assert_eq!(status[2], SeqStatus::Gap { expected: 12, resync: true });
//! assert_eq!(session.take_resync(), Some((1, 1)), "the client asks for a snapshot");
//! # Ok::<(), pricewire::client::SessionError>(())
//! ```

pub mod blocking;
pub mod event;
pub mod reconnect;
pub mod seq;
pub mod session;
pub mod stats;
pub mod tls;

pub use blocking::{Client, ClientConfig, ClientError, Events};
pub use event::{DisconnectCause, Event, LogonInfo, PriceEvent, ResetCause, SeqStatus};
pub use reconnect::{DisconnectInfo, ReconnectPolicy};
pub use seq::SeqTracker;
pub use session::{Session, SessionError};
pub use stats::{ClientStats, ClientStatsSnapshot};
