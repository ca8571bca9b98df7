//! Enumerations on the wire: template ids, reason codes, statuses, flags.
//!
//! Reason and status codes are *open* enums: a newtype over the wire integer
//! with named constants. A peer on a newer schema version may send a value
//! this build does not know; it decodes fine (as `RejectReason(99)`) and
//! prints as `unknown(99)` instead of failing the whole message.

use std::fmt;

use super::field::Field;

/// Template ids of every message in schema [`SCHEMA_ID`](super::SCHEMA_ID).
pub mod template {
    /// Logon (client → server): opens a subscriber session.
    pub const LOGON: u16 = 1;
    /// LogonAccepted (server → client): the session is open.
    pub const LOGON_ACCEPTED: u16 = 2;
    /// LogonRejected (server → client): the logon was refused; the server closes.
    pub const LOGON_REJECTED: u16 = 3;
    /// Heartbeat (either way): liveness, no body.
    pub const HEARTBEAT: u16 = 4;
    /// Logout (client → server): ends the session politely, no body.
    pub const LOGOUT: u16 = 5;
    /// Disconnect (server → client): the session ends; the server closes after it.
    pub const DISCONNECT: u16 = 6;
    /// SymbolListRequest (client → server): asks for the symbol directory.
    pub const SYMBOL_LIST_REQUEST: u16 = 10;
    /// SymbolDirectory (server → client): symbols and tiers the account may use.
    pub const SYMBOL_DIRECTORY: u16 = 11;
    /// Subscribe (client → server): start streaming some symbols at one tier.
    pub const SUBSCRIBE: u16 = 12;
    /// Unsubscribe (client → server): stop streaming some symbols; Subscribe's layout.
    pub const UNSUBSCRIBE: u16 = 13;
    /// SubscribeResponse (server → client): per-symbol outcome of a (un)subscribe.
    pub const SUBSCRIBE_RESPONSE: u16 = 14;
    /// PriceSnapshot (server → client): a symbol's full price on subscribe.
    pub const PRICE_SNAPSHOT: u16 = 15;
    /// PriceUpdate (server → client): a streamed price change.
    pub const PRICE_UPDATE: u16 = 16;
    /// SnapshotRequest (client → server): current prices of some symbols, once.
    pub const SNAPSHOT_REQUEST: u16 = 17;
    /// SnapshotResponse (server → client): answer to a SnapshotRequest.
    pub const SNAPSHOT_RESPONSE: u16 = 18;
    /// HistoryRequest (client → server): recent ticks of one symbol.
    pub const HISTORY_REQUEST: u16 = 19;
    /// HistoryResponse (server → client): answer to a HistoryRequest.
    pub const HISTORY_RESPONSE: u16 = 20;
    /// Reject (server → peer): a request or frame was refused, with a reason.
    pub const REJECT: u16 = 21;
    /// ProviderLogon (provider → server): opens a provider ingest session.
    pub const PROVIDER_LOGON: u16 = 30;
    /// ProviderQuote (provider → server): a batch of quotes.
    pub const PROVIDER_QUOTE: u16 = 31;
}

/// `tier` value in Subscribe/Unsubscribe meaning "the account's default tier".
pub const TIER_ACCOUNT_DEFAULT: u8 = 0xFF;
/// `symbolId` value in a subscription entry meaning "look the symbol up by name".
pub const SYMBOL_BY_NAME: u16 = 0xFFFF;

macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($repr:ty) {
            $( $(#[doc = $doc:literal])* $variant:ident = $value:literal => $wire:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub $repr);

        impl $name {
            $( $(#[doc = $doc])* pub const $variant: $name = $name($value); )*

            /// Every known value with its schema name, in code order.
            pub const ALL: &'static [($name, &'static str)] = &[$( ($name($value), $wire) ),*];

            /// The meaning of each value in [`Self::ALL`], from its doc comment.
            pub const DOCS: &'static [&'static str] = &[$( concat!($($doc),*) ),*];

            /// The schema name of a known value.
            pub fn name(self) -> Option<&'static str> {
                Self::ALL.iter().find(|(v, _)| *v == self).map(|(_, n)| *n)
            }

            /// True if this build knows the value.
            pub fn is_known(self) -> bool {
                self.name().is_some()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "unknown({})", self.0),
                }
            }
        }

        impl Field for $name {
            const SIZE: usize = <$repr as Field>::SIZE;
            const SBE_TYPE: &'static str = stringify!($name);
            #[inline(always)]
            fn get(b: &[u8], off: usize) -> Self {
                $name(<$repr as Field>::get(b, off))
            }
            #[inline(always)]
            fn put(self, b: &mut [u8], off: usize) {
                self.0.put(b, off)
            }
        }
    };
}

open_enum! {
    /// Why a request or frame was refused (`Reject.reason`, uint16).
    pub struct RejectReason(u16) {
        /// The frame or a field in it is malformed (short block, truncated group or var data, length mismatch).
        MALFORMED = 1 => "malformed",
        /// The template id is not in the schema.
        UNKNOWN_TEMPLATE = 2 => "unknown_template",
        /// The schema id is not 0x5057.
        UNKNOWN_SCHEMA = 3 => "unknown_schema",
        /// The schema version is below the lowest supported one.
        UNSUPPORTED_VERSION = 4 => "unsupported_version",
        /// The SOFH length exceeds the frame maximum.
        FRAME_TOO_LARGE = 5 => "frame_too_large",
        /// The SOFH length is below the 14-byte minimum.
        FRAME_TOO_SMALL = 6 => "frame_too_small",
        /// The SOFH encoding type is not 0xEB50.
        BAD_ENCODING_TYPE = 7 => "bad_encoding_type",
        /// A request arrived before LogonAccepted.
        NOT_LOGGED_ON = 8 => "not_logged_on",
        /// A second Logon on a session that is already logged on.
        ALREADY_LOGGED_ON = 9 => "already_logged_on",
        /// The account or connection exceeded its request rate.
        RATE_LIMITED = 10 => "rate_limited",
        /// The server is shedding load; retry after `retryAfterMs`.
        OVERLOADED = 11 => "overloaded",
        /// The request's budget ran out before it could be served.
        DEADLINE_EXPIRED = 12 => "deadline_expired",
        /// No such symbol id or name.
        UNKNOWN_SYMBOL = 13 => "unknown_symbol",
        /// The account may not see this symbol or tier.
        NOT_ENTITLED = 14 => "not_entitled",
        /// A per-session or per-account limit (subscriptions, symbols per request) was reached.
        LIMIT_REACHED = 15 => "limit_reached",
        /// The server is shutting down; reconnect elsewhere or after `retryAfterMs`.
        SHUTTING_DOWN = 16 => "shutting_down",
        /// A server fault; the request may be retried.
        INTERNAL = 17 => "internal",
        /// The message is valid but not allowed in this direction or role.
        UNEXPECTED_MESSAGE = 18 => "unexpected_message",
        /// A provider quote entry has no price on a side (i64::MIN), is crossed (bid above ask) or is out of range; the entry was not used.
        INVALID_QUOTE = 19 => "invalid_quote",
    }
}

open_enum! {
    /// Why a Logon or ProviderLogon was refused (`LogonRejected.reason`, uint8).
    pub struct LogonRejectReason(u8) {
        /// Unknown account or provider, or a wrong token.
        AUTH = 1 => "auth",
        /// The server cannot take this logon now (its logon capacity, the token verifier's queue full, or reference data unreachable); a full connection capacity is refused at accept with Disconnect(busy) instead.
        BUSY = 2 => "busy",
        /// Too many logons recently: the logon rate, a brute-force lockout of this address or account after failed logons, or this account's logon from an address whose session was cut with Disconnect(message_flood) less than its retryAfterMs ago (retryAfterMs: the lock's remaining time).
        RATE_LIMITED = 3 => "rate_limited",
        /// The server is shutting down.
        SHUTTING_DOWN = 4 => "shutting_down",
        /// The account already has its maximum number of sessions; on the ingest listener, another session holds this providerId.
        SESSION_LIMIT = 5 => "session_limit",
        /// The account has no market-data entitlement (no symbol); sent only after the token verified.
        NOT_ENTITLED = 6 => "not_entitled",
    }
}

open_enum! {
    /// Why the server ends a session (`Disconnect.reason`, uint8).
    pub struct DisconnectReason(u8) {
        /// The client read too slowly: its outbound buffer stayed above the high water mark.
        SLOW_CONSUMER = 1 => "slow_consumer",
        /// The server is shutting down (deploy, restart).
        SHUTDOWN = 2 => "shutdown",
        /// The client broke the protocol (malformed frame, wrong state).
        PROTOCOL_ERROR = 3 => "protocol_error",
        /// Nothing was received for the dead-peer interval.
        IDLE_TIMEOUT = 4 => "idle_timeout",
        /// Credentials were revoked or entitlements withdrawn.
        AUTH = 5 => "auth",
        /// The server is at its connection capacity (sent at accept, before any Logon), or sheds sessions under load.
        BUSY = 6 => "busy",
        /// Reply to the client's Logout.
        LOGOUT = 7 => "logout",
        /// The connection did not log on within the logon timeout.
        LOGON_TIMEOUT = 8 => "logon_timeout",
        /// The client kept sending faster than its message rate after being told `rate_limited`.
        MESSAGE_FLOOD = 9 => "message_flood",
    }
}

open_enum! {
    /// Outcome for one symbol of a Subscribe/Unsubscribe (`SubscribeResponse` entry, uint8).
    pub struct SubscribeStatus(u8) {
        /// Done; for a subscription a PriceSnapshot follows.
        OK = 0 => "ok",
        /// No such symbol id or name.
        UNKNOWN_SYMBOL = 1 => "unknown_symbol",
        /// The account may not see this symbol.
        NOT_ENTITLED = 2 => "not_entitled",
        /// The session's subscription limit is reached.
        LIMIT_REACHED = 3 => "limit_reached",
        /// Unsubscribe for a symbol that was not subscribed.
        NOT_SUBSCRIBED = 4 => "not_subscribed",
        /// The account may not use the requested tier.
        TIER_NOT_ENTITLED = 5 => "tier_not_entitled",
    }
}

/// Named bits of the `flags` field of prices (`PriceFlags` set in the
/// schema); the same values as [`crate::model::price_flags`].
pub const PRICE_FLAG_NAMES: &[(u8, &str)] = &[
    (crate::model::price_flags::CONFLATED, "conflated"),
    (crate::model::price_flags::STALE, "stale"),
    (
        crate::model::price_flags::SINGLE_PROVIDER,
        "single_provider",
    ),
    (crate::model::price_flags::INDICATIVE, "indicative"),
];

/// Bits of `ProviderQuote` entry `flags` (`QuoteFlags` set in the schema).
pub mod quote_flags {
    /// The provider marks the quote indicative (not firm). Same bit as
    /// [`crate::model::tick_flags::INDICATIVE`], so it maps straight onto
    /// `Tick::flags`.
    pub const INDICATIVE: u8 = 1 << 0;
}

const _: () = assert!(quote_flags::INDICATIVE as u32 == crate::model::tick_flags::INDICATIVE);

/// Named bits of `QuoteFlags`.
pub const QUOTE_FLAG_NAMES: &[(u8, &str)] = &[(quote_flags::INDICATIVE, "indicative")];
