//! Session-level handling: MsgSeqNum and the gap policy, Logon, Logout,
//! ResendRequest, MarketDataRequest(Reject). Part of [`super::FixSession`].

use super::{Failure, FixSession, Io, MsgHeader, SessionState, EMPTY_BOOK};
use crate::clock::NS_PER_MS;
use crate::feed::fix::codec;
use crate::resilience::Outcome;

impl FixSession {
    /// MsgSeqNum check and gap policy; false when the message must not be
    /// processed further.
    pub(super) fn check_seq(
        &mut self,
        msg_type: &[u8],
        hdr: &MsgHeader<'_>,
        now_ns: u64,
        wall_ns: u64,
    ) -> bool {
        let Some(seq) = hdr.seq else {
            self.stats.decode_errors.inc();
            self.fail(Failure::Decode, now_ns);
            return false;
        };
        // A SequenceReset-Reset (no GapFill) is not sequenced itself; a
        // GapFill is, like any other message.
        if msg_type == b"4" && !hdr.gap_fill {
            return true;
        }
        if seq == self.in_seq {
            self.in_seq += 1;
            return true;
        }
        if seq < self.in_seq {
            if hdr.poss_dup {
                self.stats.messages_ignored.inc();
                return false;
            }
            self.stats.seq_too_low.inc();
            self.fail_and_logout(Failure::SeqTooLow, now_ns, wall_ns);
            return false;
        }
        if self.state != SessionState::Active {
            // Logging on or out: no gap recovery, just follow the number.
            self.in_seq = seq + 1;
            return true;
        }
        self.stats.seq_gaps.inc();
        self.in_seq = seq + 1;
        self.gaps_this_connection += 1;
        self.note_failure(Failure::SeqGap, now_ns);
        if self.gaps_this_connection >= self.cfg.gaps_before_logout {
            self.stats.logouts_for_gaps.inc();
            self.logout(now_ns, wall_ns);
            return false;
        }
        // The message after the gap is still handled (a Logout or a fresh
        // snapshot is valid); only the books are suspect.
        self.resubscribe(now_ns, wall_ns);
        true
    }

    pub(super) fn on_logon(&mut self, now_ns: u64, wall_ns: u64) {
        if self.state != SessionState::LogonSent {
            self.stats.messages_ignored.inc();
            return;
        }
        self.state = SessionState::Active;
        self.machine.on_session_up(now_ns);
        self.silence_mark_ns = now_ns;
        self.stats.logons.inc();
        tracing::info!(provider = %self.cfg.name, "FIX logon accepted");
        self.subscribe(now_ns, wall_ns);
    }

    pub(super) fn on_logout(&mut self, hdr: &MsgHeader<'_>, now_ns: u64, wall_ns: u64) {
        if self.state == SessionState::LoggingOut {
            self.close_quietly();
            return;
        }
        let text = crate::runtime::esc_bytes(hdr.text.unwrap_or_default());
        tracing::warn!(provider = %self.cfg.name, %text, "FIX provider logged out unasked");
        self.stats.logouts_received.inc();
        self.stats.logouts_sent.inc();
        self.send(b"5", now_ns, wall_ns, |_| {});
        self.fail(Failure::UnexpectedLogout, now_ns);
    }

    /// A ResendRequest (35=2). Nothing we send is worth resending: our
    /// messages are session-level (never resent, by FIX) or
    /// MarketDataRequests of a subscription that the reconnect or gap
    /// policy has already renewed. So the whole range is answered with one
    /// SequenceReset-GapFill: MsgSeqNum = BeginSeqNo, PossDupFlag=Y,
    /// OrigSendingTime, NewSeqNo = EndSeqNo + 1, or our next number when
    /// EndSeqNo is 0 (infinity) or beyond it. It does not use a number.
    pub(super) fn on_resend_request(&mut self, hdr: &MsgHeader<'_>, now_ns: u64, wall_ns: u64) {
        self.stats.resend_requests.inc();
        let next = self.out_seq;
        let begin = hdr.begin_seq_no.unwrap_or(0).max(1);
        if begin >= next {
            // Asks for messages we have not sent: nothing to fill.
            self.stats.messages_ignored.inc();
            return;
        }
        let new_seq = match hdr.end_seq_no {
            Some(end) if end != 0 && end + 1 < next => end + 1,
            _ => next,
        };
        tracing::info!(provider = %self.cfg.name, begin, new_seq, "FIX ResendRequest answered by GapFill");
        self.stats.gap_fills_sent.inc();
        self.out_seq = begin;
        self.send(b"4", now_ns, wall_ns, |e| {
            e.bytes(43, b"Y");
            e.timestamp(122, wall_ns);
            e.bytes(123, b"Y");
            e.uint(36, new_seq);
        });
        self.out_seq = next;
    }

    pub(super) fn on_md_reject(&mut self, hdr: &MsgHeader<'_>, now_ns: u64) {
        self.stats.md_rejects.inc();
        if let Some(i) = hdr.req_id.and_then(|id| self.req_index(id)) {
            self.books[i].rejected = true;
            let symbol = crate::runtime::esc(&self.cfg.symbols[i].provider_symbol);
            let text = crate::runtime::esc_bytes(hdr.text.unwrap_or_default());
            tracing::warn!(provider = %self.cfg.name, %symbol, %text, "MarketDataRequest rejected");
        }
        self.record(Outcome::Ignored, now_ns);
    }

    /// Index of the symbol of one of our current MDReqIDs (`<gen>-<index>`).
    pub(super) fn req_index(&self, id: &[u8]) -> Option<usize> {
        let dash = id.iter().position(|&b| b == b'-')?;
        let gen = codec::parse_u64(&id[..dash])?;
        let i = codec::parse_u64(&id[dash + 1..])? as usize;
        (gen == self.req_gen && i < self.books.len()).then_some(i)
    }

    /// One MarketDataRequest per symbol, so a reject for one symbol leaves
    /// the others streaming.
    pub(super) fn subscribe(&mut self, now_ns: u64, wall_ns: u64) {
        self.req_gen += 1;
        let gen = self.req_gen;
        for i in 0..self.cfg.symbols.len() {
            self.books[i] = EMPTY_BOOK;
            let sym = std::mem::take(&mut self.cfg.symbols[i].provider_symbol);
            self.send(b"V", now_ns, wall_ns, |e| {
                e.fmt(262, format_args!("{gen}-{i}"));
                e.uint(263, 1);
                e.uint(264, 1);
                e.uint(265, 1);
                e.uint(267, 2);
                e.uint(269, 0);
                e.uint(269, 1);
                e.uint(146, 1);
                e.bytes(55, sym.as_bytes());
            });
            self.cfg.symbols[i].provider_symbol = sym;
        }
    }

    /// Gap recovery: unsubscribe the old generation, subscribe afresh.
    pub(super) fn resubscribe(&mut self, now_ns: u64, wall_ns: u64) {
        self.stats.resubscribes.inc();
        tracing::info!(provider = %self.cfg.name, gaps = self.gaps_this_connection,
            "FIX sequence gap: resubscribing with fresh MarketDataRequests");
        let gen = self.req_gen;
        for i in 0..self.cfg.symbols.len() {
            let sym = std::mem::take(&mut self.cfg.symbols[i].provider_symbol);
            self.send(b"V", now_ns, wall_ns, |e| {
                e.fmt(262, format_args!("{gen}-{i}"));
                e.uint(263, 2);
                e.uint(264, 1);
                // FIX44.xml requires NoMDEntryTypes on every request.
                e.uint(267, 2);
                e.uint(269, 0);
                e.uint(269, 1);
                e.uint(146, 1);
                e.bytes(55, sym.as_bytes());
            });
            self.cfg.symbols[i].provider_symbol = sym;
        }
        self.subscribe(now_ns, wall_ns);
    }

    pub(super) fn logout(&mut self, now_ns: u64, wall_ns: u64) {
        // Once: a peer that keeps sending must not push the deadline out.
        if self.state == SessionState::LoggingOut {
            return;
        }
        self.stats.logouts_sent.inc();
        self.send(b"5", now_ns, wall_ns, |_| {});
        self.state = SessionState::LoggingOut;
        self.deadline_ns = now_ns + self.cfg.logout_timeout_ms * NS_PER_MS;
    }

    pub(super) fn fail_and_logout(&mut self, why: Failure, now_ns: u64, wall_ns: u64) {
        self.note_failure(why, now_ns);
        tracing::warn!(provider = %self.cfg.name, ?why, "FIX session logging out");
        self.logout(now_ns, wall_ns);
    }

    /// Operator or shutdown: log out politely.
    pub fn request_logout(&mut self, now_ns: u64, wall_ns: u64) -> Io {
        if self.state == SessionState::Active {
            self.logout(now_ns, wall_ns);
        }
        self.take_io(now_ns)
    }
}
