//! What the client returns when it cannot connect or log on, and the
//! driver's own record of why opening a session failed.

use std::io;
use std::net::SocketAddr;

use super::ClientConfig;
use crate::client::event::DisconnectCause;
use crate::client::session::SessionError;
use crate::wire::{DisconnectReason, EncodeError, LogonRejectReason};

/// Client failures returned to the caller. Connection losses after the
/// first logon are not errors: they arrive as [`Event::Disconnected`](crate::client::Event::Disconnected).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TCP connect failed or timed out.
    #[error("cannot connect to {addr}: {source}")]
    Unreachable {
        /// The address tried.
        addr: SocketAddr,
        /// Why the connect failed.
        source: io::Error,
    },
    /// The server answered LogonRejected.
    #[error("logon rejected: {reason} (retry after {retry_after_ms} ms)")]
    LogonRejected {
        /// Why, as the server sent it.
        reason: LogonRejectReason,
        /// The server's retry floor, in ms.
        retry_after_ms: u32,
    },
    /// The server sent Disconnect instead of a logon answer.
    #[error("server refused the session: {reason} {text:?} (retry after {retry_after_ms} ms)")]
    Refused {
        /// Why, as the server sent it.
        reason: DisconnectReason,
        /// The server's retry floor, in ms.
        retry_after_ms: u32,
        /// The server's text.
        text: String,
    },
    /// No logon answer within the logon timeout (in ms).
    #[error("no logon answer within {0} ms")]
    LogonTimeout(u64),
    /// The connection failed while logging on.
    #[error("connection lost during logon: {0}")]
    Io(io::Error),
    /// The server sent bytes the session cannot accept.
    #[error("protocol error from the server: {0}")]
    Protocol(#[from] SessionError),
    /// The client gave up or was closed; the text says why.
    #[error("client closed: {0}")]
    Closed(String),
    /// A request was made between sessions (while reconnecting).
    #[error("not connected")]
    NotConnected,
    /// A subscribe would exceed `max_subscriptions` (the limit).
    #[error("at most {0} subscriptions")]
    TooManySubscriptions(usize),
    /// A request has more entries than one frame may carry (the limit).
    #[error("at most {0} entries per request; split it")]
    TooManyEntries(usize),
    /// The request could not be encoded (a name or text too long).
    #[error("cannot encode the request: {0}")]
    Encode(#[from] EncodeError),
    /// [`Client::await_response`](super::Client::await_response) set aside
    /// this many events (`events_queued_max`) without seeing the answer:
    /// nothing was dropped; take them with `next_event`, then wait again.
    #[error("{0} events wait for next_event (events_queued_max); take them, then wait again")]
    Backlog(usize),
    /// A [`ClientConfig`] setting is refused (see [`ClientConfig::validate`]).
    #[error("invalid client setting: {0}")]
    Config(String),
}

/// Why opening a session failed.
pub(super) enum OpenError {
    Connect(io::Error),
    Io(io::Error),
    Rejected(LogonRejectReason, u32),
    Refused(DisconnectReason, u32, String),
    Timeout,
    Protocol(SessionError),
}

impl OpenError {
    pub(super) fn cause(&self) -> (DisconnectCause, u32) {
        match self {
            OpenError::Connect(e) | OpenError::Io(e) => (DisconnectCause::Io(e.kind()), 0),
            OpenError::Rejected(r, ms) => (DisconnectCause::LogonRejected(*r), *ms),
            OpenError::Refused(reason, ms, text) => (
                DisconnectCause::Server {
                    reason: *reason,
                    text: text.clone(),
                },
                *ms,
            ),
            OpenError::Timeout => (DisconnectCause::LogonTimeout, 0),
            OpenError::Protocol(SessionError::Framing(e)) => {
                (DisconnectCause::Protocol((*e).into()), 0)
            }
        }
    }

    pub(super) fn into_error(self, cfg: &ClientConfig, addr: SocketAddr) -> ClientError {
        match self {
            OpenError::Connect(source) => ClientError::Unreachable { addr, source },
            OpenError::Io(e) => ClientError::Io(e),
            OpenError::Rejected(reason, retry_after_ms) => ClientError::LogonRejected {
                reason,
                retry_after_ms,
            },
            OpenError::Refused(reason, retry_after_ms, text) => ClientError::Refused {
                reason,
                retry_after_ms,
                text,
            },
            OpenError::Timeout => ClientError::LogonTimeout(cfg.logon_timeout_ms),
            OpenError::Protocol(e) => ClientError::Protocol(e),
        }
    }
}
