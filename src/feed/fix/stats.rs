//! Counters of the FIX sessions, for the metrics endpoint.
//!
//! One [`FixSessionStats`] per session (atomics, `Relaxed`), and a
//! [`FixFeedStats`] that collects, per provider, the session counters and
//! the feed breaker's [`BreakerStats`]. Built when the feed is built;
//! reading a snapshot allocates only the snapshot.

use std::sync::Arc;

use super::health::HealthGauges;
use crate::model::ProviderId;
use crate::resilience::breaker::BreakerSnapshot;
use crate::resilience::BreakerStats;
use crate::runtime::counter::Counter;

macro_rules! session_stats {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Counters of one FIX session.
        #[derive(Debug, Default)]
        pub struct FixSessionStats {
            $($(#[$doc])* pub $name: Counter,)*
        }

        /// A plain copy of [`FixSessionStats`].
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct FixSessionSnapshot {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl FixSessionStats {
            /// Reads every counter (Relaxed).
            pub fn snapshot(&self) -> FixSessionSnapshot {
                FixSessionSnapshot { $($name: self.$name.get(),)* }
            }
        }

        impl FixSessionSnapshot {
            /// `(name, value)` pairs with stable metric names.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

session_stats! {
    /// Connect attempts started.
    connects_attempted,
    /// Connects refused or otherwise failed (unresolved host names
    /// included).
    connects_failed,
    /// Connect attempts whose host name gave no address.
    resolve_failures,
    /// TCP connections established (connects that completed).
    connections,
    /// Connects that took longer than `connect_ms`.
    connect_timeouts,
    /// Logons not answered within `logon_ms`.
    logon_timeouts,
    /// Logons accepted by the provider.
    logons,
    /// Connections closed or reset by the peer.
    disconnects,
    /// Reconnects scheduled (after any close).
    reconnects_scheduled,
    /// Garbled messages other than a CheckSum mismatch (framing, fields).
    decode_errors,
    /// Messages with a CheckSum mismatch.
    checksum_errors,
    /// Messages whose 49/56 did not name this session (decode failures).
    comp_id_mismatches,
    /// Messages without MsgSeqNum (34) (decode failures).
    missing_seq_nums,
    /// Sessions closed because nothing arrived for the read timeout.
    read_timeouts,
    /// MsgSeqNum gaps (messages missed).
    seq_gaps,
    /// MsgSeqNum below the expected one without PossDupFlag.
    seq_too_low,
    /// Gap recoveries by fresh MarketDataRequests.
    resubscribes,
    /// Gap recoveries by Logout and reconnect.
    logouts_for_gaps,
    /// Logouts the provider sent.
    logouts_received,
    /// Logons the provider answered with a Logout.
    logons_rejected,
    /// In-session sequence resets: a Logon with ResetSeqNumFlag (141=Y)
    /// while logged on, answered with ours.
    seq_resets,
    /// SequenceReset-Reset (35=4 without 123=Y) to a number below the
    /// expected one: refused with a session Reject, as FIX 4.4 says.
    seq_reset_rejects,
    /// Session Rejects (35=3) we sent.
    rejects_sent,
    /// MarketDataRequestRejects (business errors).
    md_rejects,
    /// Session-level Rejects of our messages (business errors).
    session_rejects,
    /// Messages received and verified.
    messages_received,
    /// Messages dropped without effect (duplicates, out-of-state admin).
    messages_ignored,
    /// Two-sided quotes delivered to the engine (ticks).
    quotes,
    /// Withdrawal ticks delivered to the engine (a side or a symbol that
    /// left: a delete, a full refresh without the side, a 35=Y).
    withdrawals,
    /// Entries for a symbol whose request the LP refused (35=Y).
    discarded_rejected_symbol,
    /// Market data received while not logged on (before the Logon or
    /// after our Logout).
    discarded_not_logged_on,
    /// Quotes older than the slow threshold on arrival.
    slow_quotes,
    /// Entries whose price or size could not be read.
    bad_prices,
    /// Entries for a symbol we did not subscribe.
    unknown_symbols,
    /// TestRequests answered with a Heartbeat.
    test_requests_answered,
    /// TestRequests sent after silence.
    test_requests_sent,
    /// Heartbeats sent.
    heartbeats_sent,
    /// Closes because the outbound buffer was full.
    outbound_full,
    /// Flips of the provider's health flag by the breaker.
    health_changes,
    /// Garbled messages (bad CheckSum, BodyLength or framing) ignored.
    garbled_ignored,
    /// Sessions torn down for `garbled_max` garbled messages in a window.
    garbled_teardowns,
    /// ResendRequests received from the provider.
    resend_requests,
    /// SequenceReset-GapFills sent in answer.
    gap_fills_sent,
    /// Logouts we sent (shutdown, gap policy, sequence too low).
    logouts_sent,
    /// Intervals of `quote_silence_ms` without a quote while logged on.
    quote_silences,
    /// Breaker opened by the consecutive-failures rule.
    breaker_trips,
    /// Quotes older than provider_age_max_ms + clock_skew_ms by their
    /// provider time: not delivered.
    stale_quotes,
    /// Logged-on sessions that ended sooner than `flap_stable_ms` (flaps).
    flaps,
    /// Times the provider became damped for flapping.
    damped_entries,
    /// Times the last delivered quote aged past the engine's max quote age
    /// while logged on (lapses).
    quote_lapses,
    /// Times the provider became gray.
    gray_entries,
    /// Connections ended by the peer closing or resetting them.
    close_peer_closed,
    /// Connections ended by the peer's Logout while logged on.
    close_peer_logout,
    /// Connections ended by a Logout answering our Logon.
    close_logon_rejected,
    /// Connections ended by the logon timeout.
    close_logon_timeout,
    /// Connections ended by the read timeout.
    close_read_timeout,
    /// Connections ended for garbled input.
    close_garbled,
    /// Connections ended by our Logout for sequence gaps.
    close_gap_logout,
    /// Connections ended by our Logout for a MsgSeqNum too low.
    close_seq_too_low,
    /// Connections ended for a message naming another session.
    close_wrong_comp_id,
    /// Connections ended for a message without MsgSeqNum.
    close_missing_seq_num,
    /// Connections ended because our outbound buffer overflowed.
    close_outbound_full,
    /// Connections ended by our Logout on shutdown or request.
    close_shutdown,
}

/// Counters of one provider's session and feed breaker.
#[derive(Debug, Clone)]
pub struct FixProviderStats {
    /// The provider's id.
    pub provider: ProviderId,
    /// The provider's configured name (the `provider` metric label).
    pub name: String,
    /// Its session's counters.
    pub session: Arc<FixSessionStats>,
    /// Its feed breaker's counters.
    pub breaker: Arc<BreakerStats>,
    /// Its health state and last quote time.
    pub health: Arc<HealthGauges>,
}

/// Every FIX provider's counters, shared with the metrics endpoint.
#[derive(Debug, Clone, Default)]
pub struct FixFeedStats {
    /// One entry per FIX provider, in configuration order.
    pub providers: Vec<FixProviderStats>,
}

/// A snapshot of one provider.
#[derive(Debug, Clone)]
pub struct FixProviderSnapshot {
    /// The provider's id.
    pub provider: ProviderId,
    /// The provider's configured name.
    pub name: String,
    /// Its session's counters.
    pub session: FixSessionSnapshot,
    /// Its feed breaker's counters and rates.
    pub breaker: BreakerSnapshot,
}

impl FixFeedStats {
    /// Reads every provider's counters; allocates the list.
    pub fn snapshot(&self) -> Vec<FixProviderSnapshot> {
        self.providers
            .iter()
            .map(|p| FixProviderSnapshot {
                provider: p.provider,
                name: p.name.clone(),
                session: p.session.snapshot(),
                breaker: p.breaker.snapshot(),
            })
            .collect()
    }

    /// The stats of one provider by name.
    pub fn by_name(&self, name: &str) -> Option<&FixProviderStats> {
        self.providers.iter().find(|p| p.name == name)
    }
}
