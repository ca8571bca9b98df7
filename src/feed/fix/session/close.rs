//! Why a connection ended: every close of an established TCP connection
//! is counted exactly once, under the first cause that asked for it
//! (`pricewire_fix_disconnects_total{reason}`). A Logout we send names
//! the cause in its Text (58). Part of [`super::FixSession`].

use super::Failure;
use crate::feed::fix::stats::FixSessionStats;
use crate::runtime::counter::Counter;

/// The reason a connection ended (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DisconnectReason {
    /// The peer closed or reset the connection.
    PeerClosed,
    /// The peer sent a Logout while logged on.
    PeerLogout,
    /// The peer answered our Logon with a Logout (credentials, account).
    LogonRejected,
    /// No Logon answer within `logon_ms`.
    LogonTimeout,
    /// Nothing received within the read timeout.
    ReadTimeout,
    /// `garbled_max` garbled messages within `garbled_window_ms`.
    Garbled,
    /// Our Logout after `gaps_before_logout` gaps within `gap_window_ms`.
    GapLogout,
    /// Our Logout after a MsgSeqNum below the expected one.
    SeqTooLow,
    /// A message whose 49/56 named another session.
    WrongCompId,
    /// A message without MsgSeqNum (34).
    MissingSeqNum,
    /// Our outbound buffer overflowed (the peer does not read).
    OutboundFull,
    /// Our Logout on shutdown or by request.
    Shutdown,
}

impl DisconnectReason {
    /// Every reason, in label order.
    pub const ALL: [DisconnectReason; 12] = [
        DisconnectReason::PeerClosed,
        DisconnectReason::PeerLogout,
        DisconnectReason::LogonRejected,
        DisconnectReason::LogonTimeout,
        DisconnectReason::ReadTimeout,
        DisconnectReason::Garbled,
        DisconnectReason::GapLogout,
        DisconnectReason::SeqTooLow,
        DisconnectReason::WrongCompId,
        DisconnectReason::MissingSeqNum,
        DisconnectReason::OutboundFull,
        DisconnectReason::Shutdown,
    ];

    /// The metric label value.
    pub fn name(self) -> &'static str {
        match self {
            DisconnectReason::PeerClosed => "peer_closed",
            DisconnectReason::PeerLogout => "peer_logout",
            DisconnectReason::LogonRejected => "logon_rejected",
            DisconnectReason::LogonTimeout => "logon_timeout",
            DisconnectReason::ReadTimeout => "read_timeout",
            DisconnectReason::Garbled => "garbled",
            DisconnectReason::GapLogout => "gap_logout",
            DisconnectReason::SeqTooLow => "seq_too_low",
            DisconnectReason::WrongCompId => "wrong_comp_id",
            DisconnectReason::MissingSeqNum => "missing_seq_num",
            DisconnectReason::OutboundFull => "outbound_full",
            DisconnectReason::Shutdown => "shutdown",
        }
    }

    /// The counter of closes for this reason.
    pub fn counter(self, s: &FixSessionStats) -> &Counter {
        match self {
            DisconnectReason::PeerClosed => &s.close_peer_closed,
            DisconnectReason::PeerLogout => &s.close_peer_logout,
            DisconnectReason::LogonRejected => &s.close_logon_rejected,
            DisconnectReason::LogonTimeout => &s.close_logon_timeout,
            DisconnectReason::ReadTimeout => &s.close_read_timeout,
            DisconnectReason::Garbled => &s.close_garbled,
            DisconnectReason::GapLogout => &s.close_gap_logout,
            DisconnectReason::SeqTooLow => &s.close_seq_too_low,
            DisconnectReason::WrongCompId => &s.close_wrong_comp_id,
            DisconnectReason::MissingSeqNum => &s.close_missing_seq_num,
            DisconnectReason::OutboundFull => &s.close_outbound_full,
            DisconnectReason::Shutdown => &s.close_shutdown,
        }
    }

    /// The reason a closing failure ends a connection with; `None` for a
    /// failure that leaves the session up or that has no connection
    /// (connect failures and timeouts are counted as connects).
    pub(crate) fn of_failure(f: Failure) -> Option<DisconnectReason> {
        Some(match f {
            Failure::Disconnected => DisconnectReason::PeerClosed,
            Failure::UnexpectedLogout => DisconnectReason::PeerLogout,
            Failure::LogonRejected => DisconnectReason::LogonRejected,
            Failure::LogonTimeout => DisconnectReason::LogonTimeout,
            Failure::ReadTimeout => DisconnectReason::ReadTimeout,
            Failure::Garbled => DisconnectReason::Garbled,
            Failure::WrongCompId => DisconnectReason::WrongCompId,
            Failure::MissingSeqNum => DisconnectReason::MissingSeqNum,
            Failure::OutboundFull => DisconnectReason::OutboundFull,
            Failure::ConnectFailed
            | Failure::ConnectTimeout
            | Failure::QuoteSilence
            | Failure::BadPrice
            // These two end a connection by our Logout, which names them.
            | Failure::SeqGap
            | Failure::SeqTooLow => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_counter_and_name() {
        let s = FixSessionStats::default();
        for (i, r) in DisconnectReason::ALL.iter().enumerate() {
            r.counter(&s).inc();
            let total: u64 = DisconnectReason::ALL
                .iter()
                .map(|r| r.counter(&s).get())
                .sum();
            assert_eq!(total, i as u64 + 1, "{r:?} shares a counter");
        }
        let mut names: Vec<_> = DisconnectReason::ALL.iter().map(|r| r.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DisconnectReason::ALL.len());
    }
}
