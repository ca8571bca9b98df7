//! Requests on the shard (SymbolListRequest, SnapshotRequest,
//! HistoryRequest): entitlement checks, the hand-off to the request path
//! (a full ring is an immediate Reject(overloaded), never a wait) and the
//! answers copied back into their connections.

use super::conns::Conns;
use super::lag::LagState;
use super::outbound::Append;
use crate::clock::monotonic_ns;
use crate::requests::service::{
    Answer, RequestKind, RequestMsg, RequestPort, ACCOUNT_NAME_MAX, SNAPSHOT_SYMBOLS_MAX,
};
use crate::wire::{self, RejectReason};

/// Requests (SymbolList, Snapshot, History frames) one connection has
/// handled per loop turn; its further frames stay in its inbound buffer
/// and socket until the next turn. See [`REQUESTS_PER_TURN`].
pub(crate) const REQUESTS_PER_CONN_TURN: usize = 8;

/// Requests handled per loop turn over all connections of a shard (a
/// Logon or a Subscribe counts as one too: a reconnect herd's turn is
/// bounded like a flood's). The
/// turn fans out and writes its prices first, then reads and hands over at
/// most this many requests, then writes the prices that arrived meanwhile,
/// and only then copies a batch of answers (at most
/// `requests::answers::ANSWER_BATCH_MAX` per ring): a price waits for at
/// most one bounded batch of request work, never for a flood's backlog,
/// and the requests left over stay in their sockets (TCP pushes back on
/// the flooding client). In the storm drill (debug build) a turn's request
/// reads took a median 40–100 µs; 32 requests a turn is still several
/// times what one worker serves, so the bound costs no throughput.
pub(crate) const REQUESTS_PER_TURN: usize = 32;

/// Most ticks one HistoryRequest may ask for (the answer fits one
/// request-path answer frame).
pub(crate) const HISTORY_COUNT_MAX: u16 = 190;

/// The shard's request side: its port to the request path and what this
/// loop turn may still hand over.
pub(super) struct RequestSide {
    /// Rings to and from the request path.
    pub(super) port: RequestPort,
    /// Requests this loop turn may still handle (see
    /// [`REQUESTS_PER_TURN`]).
    pub(super) left: usize,
    /// This shard's index (answers come back to it).
    shard: u16,
}

impl RequestSide {
    pub(super) fn new(port: RequestPort, shard: usize) -> RequestSide {
        RequestSide {
            port,
            left: REQUESTS_PER_TURN,
            shard: shard as u16,
        }
    }

    /// A new loop turn: its request budget is full again.
    pub(super) fn begin_turn(&mut self) {
        self.left = REQUESTS_PER_TURN;
    }

    /// An answer is waiting in a ring from the request path.
    pub(super) fn has_answers(&self) -> bool {
        self.port.answers.iter().any(|a| !a.is_empty())
    }

    pub(super) fn on_symbol_list(
        &mut self,
        conns: &mut Conns,
        lag: &mut LagState,
        i: usize,
        account: u32,
        r: &wire::SymbolListRequest,
        now: u64,
    ) {
        let request_id = r.request_id;
        let t = wire::template::SYMBOL_LIST_REQUEST;
        let staged = conns
            .shared
            .admission
            .lock()
            .expect("admission lock")
            .on_symbol_list(now);
        if let Err(r) = staged {
            return conns.reject(
                i,
                request_id,
                t,
                RejectReason::RATE_LIMITED,
                r.retry_after_ms,
                "",
            );
        }
        let mut m = self.request_msg(conns, i, account, request_id, RequestKind::SymbolList, now);
        m.budget_us = r.budget_us;
        m.critical = r.critical;
        self.enqueue(conns, lag, i, m);
    }

    pub(super) fn on_snapshot_request(
        &mut self,
        conns: &mut Conns,
        lag: &mut LagState,
        i: usize,
        account: u32,
        r: &wire::SnapshotRequest<'_>,
        now: u64,
    ) {
        let t = wire::template::SNAPSHOT_REQUEST;
        let Some(tier) = entitled_tier(conns, i, r.tier) else {
            return conns.reject(i, r.request_id, t, RejectReason::NOT_ENTITLED, 0, "tier");
        };
        if r.symbols.len() > SNAPSHOT_SYMBOLS_MAX {
            let text = "too many symbols in one request";
            return conns.reject(i, r.request_id, t, RejectReason::LIMIT_REACHED, 0, text);
        }
        let mut m = self.request_msg(conns, i, account, r.request_id, RequestKind::Snapshot, now);
        // Unknown and not-entitled ids are left out of the answer; only a
        // request with nothing answerable is refused (by its first refusal).
        let mut refused = None;
        for id in r.symbols.clone() {
            match entitled_symbol(conns, i, id) {
                Ok(()) => {
                    m.symbols[m.nsym as usize] = id;
                    m.nsym += 1;
                }
                Err(reason) => {
                    refused.get_or_insert(reason);
                }
            }
        }
        if let (0, Some(reason)) = (m.nsym, refused) {
            return conns.reject(i, r.request_id, t, reason, 0, "");
        }
        m.tier = tier;
        m.budget_us = r.budget_us;
        m.critical = r.critical;
        self.enqueue(conns, lag, i, m);
    }

    pub(super) fn on_history_request(
        &mut self,
        conns: &mut Conns,
        lag: &mut LagState,
        i: usize,
        account: u32,
        r: &wire::HistoryRequest,
        now: u64,
    ) {
        let t = wire::template::HISTORY_REQUEST;
        if let Err(reason) = entitled_symbol(conns, i, r.symbol_id) {
            return conns.reject(i, r.request_id, t, reason, 0, "");
        }
        // History is the providers' raw quotes: only for an account that
        // may already see the symbol without markup.
        if !entitled_unmarked(conns, i, r.symbol_id) {
            let text = "history needs a tier without markup";
            return conns.reject(i, r.request_id, t, RejectReason::NOT_ENTITLED, 0, text);
        }
        let mut m = self.request_msg(conns, i, account, r.request_id, RequestKind::History, now);
        m.symbols[0] = r.symbol_id;
        m.nsym = 1;
        m.count = r.count.min(HISTORY_COUNT_MAX);
        m.budget_us = r.budget_us;
        m.critical = r.critical;
        self.enqueue(conns, lag, i, m);
    }

    pub(super) fn request_msg(
        &self,
        conns: &Conns,
        i: usize,
        account: u32,
        request_id: u64,
        kind: RequestKind,
        now: u64,
    ) -> RequestMsg {
        let conn = conns.slab.conns[i].as_ref();
        let mut m = RequestMsg {
            shard: self.shard,
            conn: i as u32,
            session: conn.map_or(0, |c| c.session.session_id()),
            account,
            request_id,
            kind,
            tier: 0,
            symbols: [0; SNAPSHOT_SYMBOLS_MAX],
            nsym: 0,
            count: 0,
            budget_us: 0,
            critical: false,
            critical_entitled: conn
                .and_then(|c| c.session.acct())
                .is_some_and(|a| a.critical),
            // Its wait began when the shard could first have read it.
            arrival_ns: conn.map_or(now, |c| c.arrival_ns(now)),
            account_name: [0; ACCOUNT_NAME_MAX],
            account_name_len: 0,
        };
        if let Some(a) = conn.and_then(|c| c.session.acct()) {
            let n = a.name.len().min(ACCOUNT_NAME_MAX);
            m.account_name[..n].copy_from_slice(&a.name.as_bytes()[..n]);
            m.account_name_len = n as u8;
        }
        m
    }

    /// Hands a request to the request path; a full ring is an immediate
    /// Reject(overloaded) with a jittered retry-after, never a wait.
    pub(super) fn enqueue(
        &mut self,
        conns: &mut Conns,
        lag: &mut LagState,
        i: usize,
        m: RequestMsg,
    ) {
        if lag.shed_request(
            conns,
            i,
            m.request_id,
            crate::requests::answers::template_of(m.kind),
        ) {
            return;
        }
        let bound = crate::requests::answers::answer_bound(m.kind, m.nsym.into(), m.count.into());
        // The port keeps one account from filling the ring.
        let pushed = self.port.push(m);
        if pushed {
            if let Some(c) = conns.slab.conns[i].as_mut() {
                c.on_request_out(bound, monotonic_ns());
            }
            self.port.dispatcher.ring();
            return;
        }
        conns.stats.requests_refused.inc();
        // The queue's shed window, counted (requests::port).
        let retry = self.port.path_full_retry_ms();
        let t = match m.kind {
            RequestKind::Snapshot => wire::template::SNAPSHOT_REQUEST,
            RequestKind::SymbolList => wire::template::SYMBOL_LIST_REQUEST,
            RequestKind::History => wire::template::HISTORY_REQUEST,
        };
        conns.reject(
            i,
            m.request_id,
            t,
            RejectReason::OVERLOADED,
            retry,
            "request path full",
        );
    }

    /// Copies answers from the request workers into their connections.
    /// An answer taken at or after its deadline is not delivered: the
    /// connection gets Reject(deadline_expired) instead. A refusal that
    /// asks the client to wait is noted in its session (its backoff).
    pub(super) fn drain_answers(&mut self, conns: &mut Conns) -> usize {
        let mut n = 0;
        for r in 0..self.port.answers.len() {
            while let Ok(a) = self.port.answers[r].pop() {
                n += 1;
                self.deliver(conns, &a);
            }
        }
        n
    }

    fn deliver(&mut self, conns: &mut Conns, a: &Answer) {
        let i = a.conn as usize;
        let live = conns
            .slab
            .conns
            .get(i)
            .and_then(Option::as_ref)
            .is_some_and(|c| c.session.session_id() == a.session && c.is_active());
        if !live {
            conns.stats.answers_orphaned.inc();
            return;
        }
        let now = monotonic_ns();
        if let Some(conn) = conns.slab.conns[i].as_mut() {
            conn.on_answer_back(a.len);
        }
        if a.deadline_ns != 0 && now >= a.deadline_ns {
            self.port.expired_at_gateway();
            let reason = RejectReason::DEADLINE_EXPIRED;
            let (id, t) = (a.request_id, a.ref_template_id);
            return conns.reject(i, id, t, reason, 0, "deadline expired");
        }
        let bytes = &a.bytes[..a.len as usize];
        let mut lost = false;
        if let Some(conn) = conns.slab.conns[i].as_mut() {
            if conn.out.append(bytes) == Append::Overflow {
                conns.stats.answers_orphaned.inc();
                lost = true;
            } else {
                conn.answer_marks.on_append(conn.out.len(), now);
            }
            conn.session.note_sent(now);
            if let Some((reason, retry_ms)) = a.refusal {
                conn.session.note_refusal(reason, retry_ms, now);
            }
        }
        conns.queue_write(i);
        // An answer that does not fit is never lost silently: the
        // client is not reading, so it is closed as a slow consumer
        // (and learns its open requests are gone).
        if lost {
            let retry = conns.jitter(conns.shared.cfg.error_retry);
            let reason = wire::DisconnectReason::SLOW_CONSUMER;
            conns.disconnect(i, reason, retry, "answer did not fit", monotonic_ns());
        }
    }
}

/// The tier a request names (or the session default), if entitled.
fn entitled_tier(conns: &Conns, i: usize, tier: u8) -> Option<u8> {
    let conn = conns.slab.conns[i].as_ref()?;
    let tier = conn.session.tier(tier);
    let ok = (tier as usize) < conns.fanout.tiers && conn.session.acct()?.entitled_tier(tier);
    ok.then_some(tier)
}

/// Whether the session's account has a tier with no markup on `id`
/// (so raw provider quotes tell it nothing it may not see).
fn entitled_unmarked(conns: &Conns, i: usize, id: u16) -> bool {
    let tiers = conns.shared.config.table.tiers();
    conns.slab.conns[i]
        .as_ref()
        .and_then(|c| c.session.acct())
        .is_some_and(|a| {
            a.tiers.iter().any(|&t| {
                tiers
                    .get(usize::from(t))
                    .is_some_and(|t| t.markup_for(id) == 0)
            })
        })
}

fn entitled_symbol(conns: &Conns, i: usize, id: u16) -> Result<(), RejectReason> {
    if conns.shared.config.table.get(id).is_none() {
        return Err(RejectReason::UNKNOWN_SYMBOL);
    }
    let entitled = conns.slab.conns[i]
        .as_ref()
        .and_then(|c| c.session.acct())
        .is_some_and(|a| a.entitled_symbol(id));
    if entitled {
        Ok(())
    } else {
        Err(RejectReason::NOT_ENTITLED)
    }
}
