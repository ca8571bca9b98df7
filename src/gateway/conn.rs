//! One subscriber connection: socket, buffers, session state and its
//! subscriptions. Everything is allocated when the connection is accepted.

use std::net::SocketAddr;

use mio::net::TcpStream;

use super::outbound::OutBuf;
use crate::admission::TokenBucket;
use crate::wire::DisconnectReason;

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Connected; only Logon is accepted.
    AwaitingLogon,
    /// Logged on as account `account` (index in the config's accounts).
    Active { account: u32 },
    /// A Disconnect (or LogonRejected) was queued; flushing until
    /// `deadline_ns`, then closed. Reads are ignored.
    Closing { deadline_ns: u64 },
}

/// One subscription of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Sub {
    /// (symbol, tier) key.
    pub key: u32,
    /// Position in the shard index's list for `key`.
    pub pos: u32,
    /// Highest sequence number sent for this key.
    pub last_seq: u64,
    /// Changed while the connection was conflating; a snapshot is owed.
    pub dirty: bool,
}

/// A subscriber connection.
pub struct Conn {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    pub state: SessionState,
    pub session_id: u64,
    pub inbuf: Box<[u8]>,
    pub in_len: usize,
    pub out: OutBuf,
    pub subs: Vec<Sub>,
    /// Subscriptions with `dirty` set.
    pub dirty_subs: u32,
    pub default_tier: u8,
    pub heartbeat_ns: u64,
    pub connected_ns: u64,
    pub last_rx_ns: u64,
    pub last_tx_ns: u64,
    /// When the oldest incomplete frame in `inbuf` started arriving.
    pub partial_since_ns: Option<u64>,
    pub msg_bucket: TokenBucket,
    /// Consecutive rate-limited messages.
    pub flood_strikes: u32,
    pub first_subscribe_done: bool,
    /// Queued for a write this loop turn.
    pub in_write_list: bool,
    /// Why the server is closing it (for counters), if it is.
    pub closing_reason: Option<DisconnectReason>,
    /// Closing and flushed: our FIN was sent; waiting for the peer's.
    pub fin_sent: bool,
    /// Queued to read again next turn (its read budget ran out).
    pub in_read_list: bool,
    /// The logged-on account (entitlements), from the config or Redis.
    pub acct: Option<std::sync::Arc<crate::config::Account>>,
    /// Requests handed to the request path and not answered yet: a
    /// session with answers on their way to this shard is not moved to
    /// another (see `gateway::spill`).
    pub requests_out: u32,
    /// When the last of those was handed over: an answer the request path
    /// had to drop (its ring to this shard full) is never counted back,
    /// so past [`ANSWER_WAIT_NS`] the count no longer holds a move.
    pub last_request_ns: u64,
}

/// Longest a request's answer is waited for before a session may move
/// anyway (well past any request deadline).
pub const ANSWER_WAIT_NS: u64 = 30_000_000_000;

impl Conn {
    pub fn is_active(&self) -> bool {
        matches!(self.state, SessionState::Active { .. })
    }

    pub fn account(&self) -> Option<u32> {
        match self.state {
            SessionState::Active { account } => Some(account),
            _ => None,
        }
    }
}
