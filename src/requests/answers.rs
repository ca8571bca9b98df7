//! The shard end of the answer rings, and the room each answer needs.
//!
//! Every request the dispatcher admits gets exactly one answer or Reject,
//! and the path guarantees room for it on the way back:
//!
//! - **Worker answers** travel on the worker's own ring to the shard. A job
//!   is dispatched only while its shard owes fewer than [`ANSWER_RING`]
//!   worker answers (`ShardCredit`: taken at dispatch, given back when the
//!   shard pops the answer), so whichever worker serves it finds its ring
//!   to that shard with a free slot. A shard that stops draining holds
//!   dispatch back; nothing is dropped.
//! - **Rejects** from the dispatcher (shed, evicted, refused) go to its own
//!   ring per shard; one that does not fit waits in a bounded pending list
//!   (`PendingReject`, a few dozen bytes, encoded when it fits). The
//!   dispatcher admits a request only while fewer rejects than the queue's
//!   capacity wait, so queue + pending stay within twice the capacity and
//!   the list never grows past its preallocated size.
//!
//! The gateway sees only [`AnswerRx`], which pops like the ring it wraps.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::clock::monotonic_ns;
use crate::requests::hops::HopRecorder;
use crate::requests::inflight::AccountInflight;
use crate::requests::service::{Answer, RequestKind, RequestMsg, ANSWER_BYTES_MAX, ANSWER_RING};
use crate::requests::ShedReason;
use crate::runtime::Doorbell;
use crate::wire::{self, RejectReason};

/// Worker answers a shard owes: dispatched jobs whose answer it has not
/// popped yet. At most [`ANSWER_RING`].
pub struct ShardCredit {
    owed: AtomicU32,
    dispatcher: Arc<Doorbell>,
}

impl ShardCredit {
    pub(crate) fn new(dispatcher: Arc<Doorbell>) -> Arc<ShardCredit> {
        Arc::new(ShardCredit {
            owed: AtomicU32::new(0),
            dispatcher,
        })
    }

    /// Whether one more job for this shard has an answer slot.
    pub(crate) fn has_room(&self) -> bool {
        self.owed.load(Ordering::Acquire) < ANSWER_RING as u32
    }

    /// Reserves the answer slot of a dispatched job.
    pub(crate) fn take(&self) {
        self.owed.fetch_add(1, Ordering::AcqRel);
    }

    /// Gives a slot back (the answer was popped, or the job never left).
    pub(crate) fn give(&self) {
        let before = self.owed.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "answer credit below zero");
        if before == ANSWER_RING as u32 {
            // Dispatch may be held back for this shard: wake it.
            self.dispatcher.ring();
        }
    }
}

/// Answers one ring hands its shard in a row before it reports itself
/// empty once: the shard's loop drains answer rings with `while let
/// Ok(a) = pop()`, and a flood of answers must not hold it away from the
/// price stream for a whole burst. The shard comes back on its next turn
/// (`is_empty` still says false, so it does not sleep).
pub const ANSWER_BATCH_MAX: u32 = 32;

/// A shard's end of one answer ring (the dispatcher's or a worker's).
pub struct AnswerRx {
    ring: rtrb::Consumer<Answer>,
    /// Answers handed over since the ring last reported empty.
    in_a_row: u32,
    /// Set on worker rings: popping an answer gives its slot back, and
    /// its account's in-flight count.
    credit: Option<(Arc<ShardCredit>, Arc<AccountInflight>)>,
    hop: HopRecorder,
}

impl AnswerRx {
    pub(crate) fn new(
        ring: rtrb::Consumer<Answer>,
        credit: Option<(Arc<ShardCredit>, Arc<AccountInflight>)>,
        hop: HopRecorder,
    ) -> AnswerRx {
        AnswerRx {
            ring,
            in_a_row: 0,
            credit,
            hop,
        }
    }

    /// The next answer, if any; records its time on the ring. After
    /// [`ANSWER_BATCH_MAX`] in a row it reports empty once, ending the
    /// shard's batch for this loop turn.
    pub fn pop(&mut self) -> Result<Answer, rtrb::PopError> {
        if self.in_a_row >= ANSWER_BATCH_MAX {
            self.in_a_row = 0;
            return Err(rtrb::PopError::Empty);
        }
        let a = self.ring.pop().inspect_err(|_| self.in_a_row = 0)?;
        self.in_a_row += 1;
        if let Some((c, inflight)) = &self.credit {
            c.give();
            inflight.give(a.account);
        }
        let now = monotonic_ns();
        self.hop.record(now.saturating_sub(a.sent_ns), now);
        Ok(a)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}

/// A reject the dispatcher could not put on its ring yet: what it takes to
/// encode it later, without the 8 KiB answer frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingReject {
    pub shard: u16,
    pub conn: u32,
    pub session: u64,
    pub request_id: u64,
    pub kind: RequestKind,
    pub reason: RejectReason,
    pub retry_after_ms: u32,
    pub text: &'static str,
}

impl PendingReject {
    pub(crate) fn new(
        m: &RequestMsg,
        reason: RejectReason,
        retry_after_ms: u32,
        text: &'static str,
    ) -> Self {
        PendingReject {
            shard: m.shard,
            conn: m.conn,
            session: m.session,
            request_id: m.request_id,
            kind: m.kind,
            reason,
            retry_after_ms,
            text,
        }
    }

    /// Encodes the reject into `a` (header fields and frame).
    pub(crate) fn encode_into(&self, a: &mut Answer) {
        a.conn = self.conn;
        a.session = self.session;
        a.account = 0;
        a.request_id = self.request_id;
        a.ref_template_id = template_of(self.kind);
        a.deadline_ns = 0;
        a.refusal = (self.retry_after_ms > 0).then_some((self.reason, self.retry_after_ms));
        let r = wire::Reject {
            request_id: self.request_id,
            ref_template_id: template_of(self.kind),
            reason: self.reason,
            retry_after_ms: self.retry_after_ms,
            text: self.text.as_bytes(),
        };
        a.len = wire::encode_reject(&mut a.bytes[..ANSWER_BYTES_MAX], &r).unwrap_or(0) as u32;
    }
}

/// The Reject a shed request gets: reason code and text.
pub(crate) fn shed_reject(reason: ShedReason) -> (RejectReason, &'static str) {
    match reason {
        ShedReason::Overloaded => (RejectReason::OVERLOADED, "overloaded"),
        ShedReason::QueueFull => (RejectReason::OVERLOADED, "queue full"),
        ShedReason::RateLimited => (RejectReason::RATE_LIMITED, "account rate"),
        ShedReason::Expired => (RejectReason::DEADLINE_EXPIRED, "deadline expired"),
        ShedReason::BadAccount => (RejectReason::INTERNAL, "account"),
        ShedReason::LoopLag => (RejectReason::OVERLOADED, "loop lag"),
    }
}

pub(crate) fn template_of(kind: RequestKind) -> u16 {
    match kind {
        RequestKind::Snapshot => wire::template::SNAPSHOT_REQUEST,
        RequestKind::SymbolList => wire::template::SYMBOL_LIST_REQUEST,
        RequestKind::History => wire::template::HISTORY_REQUEST,
    }
}

/// Bytes of a response frame before its group's entries: header, a root
/// block (at most 32 bytes for the request responses) and the group header.
const RESPONSE_FIXED_BYTES: usize = wire::HEADER_LEN + 32 + 4;
/// Most bytes a Reject takes: header, root, and a text of 255 bytes with
/// its length.
pub(crate) const REJECT_BYTES_MAX: usize = wire::HEADER_LEN + 32 + 1 + 255;

/// Most bytes the answer to a request of `kind` naming `nsym` symbols (a
/// snapshot) or `count` ticks (a history) can take in its connection's
/// outbound buffer, whichever answer it gets: its response or a Reject.
/// The shard reserves it while the request is in flight (see
/// `gateway::conn`).
pub fn answer_bound(kind: RequestKind, nsym: usize, count: usize) -> usize {
    use wire::Block;
    let group = |n: usize, entry: u16| RESPONSE_FIXED_BYTES + n * usize::from(entry);
    let response = match kind {
        RequestKind::Snapshot => group(nsym, wire::PriceBody::BLOCK_LENGTH),
        RequestKind::History => group(count, wire::HistoryTick::BLOCK_LENGTH),
        // The directory's size is the server's, not the request's.
        RequestKind::SymbolList => ANSWER_BYTES_MAX,
    };
    response.clamp(REJECT_BYTES_MAX, ANSWER_BYTES_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::service::SNAPSHOT_SYMBOLS_MAX;

    #[test]
    fn every_answer_fits_the_bound_reserved_for_it() {
        let mut buf = vec![0u8; 64 * 1024];
        let text = [b'x'; 255];
        let reject = wire::Reject {
            request_id: u64::MAX,
            ref_template_id: 17,
            reason: RejectReason::OVERLOADED,
            retry_after_ms: u32::MAX,
            text: &text,
        };
        let n = wire::encode_reject(&mut buf, &reject).unwrap();
        assert!(n <= REJECT_BYTES_MAX, "{n}");
        for nsym in 0..=SNAPSHOT_SYMBOLS_MAX {
            let prices = vec![wire::PriceBody::default(); nsym];
            let n = wire::encode_snapshot_response(&mut buf, u64::MAX, &prices).unwrap();
            let bound = answer_bound(RequestKind::Snapshot, nsym, 0);
            assert!(
                n <= bound && bound < n + REJECT_BYTES_MAX,
                "{nsym}: {n} > {bound}"
            );
        }
        for count in [0, 1, 50, 190, 1000] {
            let ticks = vec![wire::HistoryTick::default(); count];
            let n = wire::encode_history_response(&mut buf, u64::MAX, 7, 5, &ticks).unwrap();
            let bound = answer_bound(RequestKind::History, 0, count);
            assert!(n.min(ANSWER_BYTES_MAX) <= bound, "{count}: {n} > {bound}");
        }
        let list = answer_bound(RequestKind::SymbolList, 0, 0);
        assert_eq!(list, ANSWER_BYTES_MAX);
    }
}
