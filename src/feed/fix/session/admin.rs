//! Session-level handling: MsgSeqNum and the gap policy, Logon (and the
//! in-session reset), Logout, SequenceReset, ResendRequest, Reject,
//! MarketDataRequest(Reject). Part of [`super::FixSession`].

use super::EMPTY_BOOK;
use super::{DisconnectReason, Failure, FixSession, Io, MsgHeader, SessionState};
use crate::clock::NS_PER_MS;
use crate::feed::fix::codec;
use crate::resilience::Outcome;
use crate::runtime::esc_bytes;

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
            self.stats.missing_seq_nums.inc();
            self.fail(Failure::MissingSeqNum, now_ns);
            return false;
        };
        // A SequenceReset-Reset (no GapFill) is not sequenced itself; a
        // GapFill is, like any other message.
        if msg_type == b"4" && !hdr.gap_fill {
            return true;
        }
        // A Logon with ResetSeqNumFlag at MsgSeqNum 1 while logged on: the
        // peer restarts both sequences (FIX 4.4; the daily reset of
        // 24-hour LPs).
        if is_reset_request(msg_type, hdr) && self.state == SessionState::Active {
            self.in_seq = seq + 1;
            // Right after our answer, before anything else from the peer:
            // the peer's acknowledgement of it (QuickFIX acceptors send
            // one), followed but not answered, or the two sides would
            // reset each other for ever.
            return !std::mem::take(&mut self.reset_answered);
        }
        if seq == self.in_seq {
            self.in_seq += 1;
            self.reset_answered = false;
            return true;
        }
        if self.state == SessionState::LoggingOut {
            // Our Logout is out: only the peer's Logout still matters, and
            // numbering trouble no longer costs anything.
            self.in_seq = self.in_seq.max(seq + 1);
            return msg_type == b"5";
        }
        if seq < self.in_seq {
            return self.seq_too_low(seq, hdr, now_ns, wall_ns);
        }
        if self.state != SessionState::Active {
            // Logging on: no gap recovery, just follow the number.
            self.in_seq = seq + 1;
            return true;
        }
        self.stats.seq_gaps.inc();
        self.in_seq = seq + 1;
        self.gaps_this_connection += 1;
        self.note_failure(Failure::SeqGap, now_ns);
        if self.gaps.record(now_ns) {
            self.stats.logouts_for_gaps.inc();
            let (n, ms) = (self.cfg.gaps_before_logout, self.cfg.gap_window_ms);
            tracing::warn!(provider = %self.cfg.name, gaps = n, window_ms = ms,
                "FIX sequence gaps: logging out");
            self.logout(now_ns, wall_ns, DisconnectReason::GapLogout, |e| {
                e.fmt(58, format_args!("{n} MsgSeqNum gaps within {ms} ms"))
            });
            return false;
        }
        // The message after the gap is still handled (a Logout or a fresh
        // snapshot is valid); only the books are suspect.
        self.resubscribe(now_ns, wall_ns);
        true
    }

    /// MsgSeqNum below the expected one: a PossDup is ignored; anything
    /// else means the peer lost its state (FIX: a serious error, end the
    /// session): Logout naming both numbers.
    fn seq_too_low(&mut self, seq: u64, hdr: &MsgHeader<'_>, now_ns: u64, wall_ns: u64) -> bool {
        if hdr.poss_dup {
            self.stats.messages_ignored.inc();
            return false;
        }
        self.stats.seq_too_low.inc();
        let expected = self.in_seq;
        self.note_failure(Failure::SeqTooLow, now_ns);
        tracing::warn!(provider = %self.cfg.name, expected, received = seq,
            "FIX MsgSeqNum too low: logging out");
        self.logout(now_ns, wall_ns, DisconnectReason::SeqTooLow, |e| {
            e.fmt(
                58,
                format_args!("MsgSeqNum too low, expecting {expected} but received {seq}"),
            )
        });
        false
    }

    pub(super) fn on_logon(&mut self, hdr: &MsgHeader<'_>, now_ns: u64, wall_ns: u64) {
        if self.state == SessionState::Active && is_reset_request(b"A", hdr) {
            return self.in_session_reset(now_ns, wall_ns);
        }
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

    /// The peer's Logon with ResetSeqNumFlag while we are logged on:
    /// answered with our own Logon (141=Y, MsgSeqNum 1), both sequences
    /// restart (the peer's is already followed by `check_seq`). The
    /// subscriptions are renewed, so an LP that dropped them with its
    /// sequence numbers streams again, and one that kept them sends fresh
    /// snapshots.
    fn in_session_reset(&mut self, now_ns: u64, wall_ns: u64) {
        self.stats.seq_resets.inc();
        self.reset_answered = true;
        tracing::info!(provider = %self.cfg.name, "FIX in-session sequence reset (Logon 141=Y)");
        self.out_seq = 1;
        let hb = u64::from(self.cfg.heartbeat_s);
        self.send(b"A", now_ns, wall_ns, |e| {
            e.uint(98, 0);
            e.uint(108, hb);
            e.bytes(141, b"Y");
        });
        self.resubscribe(now_ns, wall_ns);
    }

    pub(super) fn on_logout(&mut self, hdr: &MsgHeader<'_>, now_ns: u64, wall_ns: u64) {
        let text = esc_bytes(hdr.text.unwrap_or(b""));
        match self.state {
            SessionState::LoggingOut => self.end_quietly(),
            SessionState::LogonSent => {
                // Refused at logon (credentials, a locked or disabled
                // account, outside the LP's hours): what the LP says is
                // what the connectivity team needs.
                self.stats.logouts_received.inc();
                self.stats.logons_rejected.inc();
                tracing::warn!(provider = %self.cfg.name, %text, "FIX logon rejected by the provider");
                self.fail(Failure::LogonRejected, now_ns);
            }
            _ => {
                self.stats.logouts_received.inc();
                tracing::warn!(provider = %self.cfg.name, %text, "FIX provider logged out");
                self.stats.logouts_sent.inc();
                self.send(b"5", now_ns, wall_ns, |e| {
                    e.bytes(58, b"Logout acknowledged")
                });
                self.fail(Failure::UnexpectedLogout, now_ns);
            }
        }
    }

    /// SequenceReset (35=4). GapFill mode is sequenced (`check_seq`) and
    /// moves the expected number forward. Reset mode, as FIX 4.4 defines
    /// it: a NewSeqNo above the expected number is followed; equal is a
    /// no-op; below it is refused with a session Reject (373=5, value out
    /// of range for NewSeqNo 36) and the expected number is NOT lowered —
    /// "Sequence Reset may only increment the sequence number". (An LP
    /// that means to start again at 1 sends Logon 141=Y; one that goes on
    /// numbering from the lower value then meets the MsgSeqNum-too-low
    /// rule.)
    pub(super) fn on_sequence_reset(&mut self, hdr: &MsgHeader<'_>, now_ns: u64, wall_ns: u64) {
        let expected = self.in_seq;
        match hdr.new_seq_no {
            Some(n) if n > expected => self.in_seq = n,
            Some(n) if n < expected && !hdr.gap_fill => {
                self.stats.seq_reset_rejects.inc();
                tracing::warn!(provider = %self.cfg.name, new_seq_no = n, expected,
                    "FIX SequenceReset-Reset below the expected MsgSeqNum: rejected");
                let ref_seq = hdr.seq.unwrap_or(0);
                self.send_reject(ref_seq, 36, b"4", 5, now_ns, wall_ns, |e| {
                    e.fmt(
                        58,
                        format_args!("NewSeqNo {n} below the expected MsgSeqNum {expected}"),
                    )
                });
            }
            _ => self.stats.messages_ignored.inc(),
        }
    }

    /// A session-level Reject (35=3): 45 RefSeqNum, 371 RefTagID, 372
    /// RefMsgType, 373 SessionRejectReason, and the Text.
    #[allow(clippy::too_many_arguments)] // the Reject's own fields
    fn send_reject(
        &mut self,
        ref_seq: u64,
        ref_tag: u64,
        ref_msg_type: &[u8],
        reason: u64,
        now_ns: u64,
        wall_ns: u64,
        text: impl FnOnce(&mut codec::Encoder),
    ) {
        self.stats.rejects_sent.inc();
        self.send(b"3", now_ns, wall_ns, |e| {
            e.uint(45, ref_seq);
            e.uint(371, ref_tag);
            e.bytes(372, ref_msg_type);
            e.uint(373, reason);
            text(e);
        });
    }

    /// A session-level Reject of one of our messages: our own fault, so a
    /// business error for the breaker; logged with what it says.
    pub(super) fn on_session_reject(&mut self, hdr: &MsgHeader<'_>, now_ns: u64) {
        self.stats.session_rejects.inc();
        tracing::warn!(provider = %self.cfg.name, ref_seq_num = hdr.ref_seq_num,
            reason = %esc_bytes(hdr.reject_reason.unwrap_or(b"")),
            text = %esc_bytes(hdr.text.unwrap_or(b"")), "FIX session Reject from the provider");
        self.record(Outcome::Ignored, now_ns);
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
            self.reject_symbol(i, now_ns);
            tracing::warn!(provider = %self.cfg.name, symbol = %crate::runtime::esc(&self.cfg.symbols[i].provider_symbol),
                reason = %esc_bytes(hdr.reject_reason.unwrap_or(b"")),
                text = %esc_bytes(hdr.text.unwrap_or(b"")), "MarketDataRequest rejected");
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

    /// Our Logout, its Text (58) written by `text`; the connection ends
    /// for `why` when the peer answers or `logout_ms` passes.
    pub(super) fn logout(
        &mut self,
        now_ns: u64,
        wall_ns: u64,
        why: DisconnectReason,
        text: impl FnOnce(&mut codec::Encoder),
    ) {
        // Once: a peer that keeps sending must not push the deadline out.
        if self.state == SessionState::LoggingOut {
            return;
        }
        self.end_for(Some(why));
        self.stats.logouts_sent.inc();
        self.send(b"5", now_ns, wall_ns, text);
        self.state = SessionState::LoggingOut;
        self.deadline_ns = now_ns + self.cfg.logout_timeout_ms * NS_PER_MS;
    }

    /// Operator or shutdown: log out politely.
    pub fn request_logout(&mut self, now_ns: u64, wall_ns: u64) -> Io {
        if self.state == SessionState::Active {
            self.logout(now_ns, wall_ns, DisconnectReason::Shutdown, |e| {
                e.bytes(58, b"pricewire shutting down")
            });
        }
        self.take_io(now_ns)
    }
}

/// A reset request: Logon with ResetSeqNumFlag and MsgSeqNum 1 (FIX 4.4).
/// A Logon with the flag at a later number is not one (a peer answering
/// our answer at its next number).
fn is_reset_request(msg_type: &[u8], hdr: &MsgHeader<'_>) -> bool {
    msg_type == b"A" && hdr.reset_seq_num && hdr.seq == Some(1)
}
