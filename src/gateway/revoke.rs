//! Revocation reaches live sessions: every [`REVALIDATE_NS`] a shard
//! re-checks the logged-on sessions among up to [`REVALIDATE_BATCH`] of its
//! connection slots (round robin over the slots in use) against the reference data ([`RefData::recheck`]), off
//! the price path (in the shard's sweep, only with `--redis`).
//!
//! - Account deleted (its data set trusted) or `revoked 1`:
//!   `Disconnect(auth)`. A fault of the reference data (Redis down, its
//!   data set lost, the record unreadable) ends no session.
//! - The session's default tier withdrawn: `Disconnect(auth)` (every
//!   request naming the default tier would be refused).
//! - A symbol or a tier withdrawn: each (symbol, tier) the session holds
//!   that the account may no longer see is unsubscribed and announced in
//!   an unsolicited SubscribeResponse with `requestId` 0 and status
//!   `not_entitled` or `tier_not_entitled`; no more prices follow for it.
//! - Anything else (a new token, more symbols): the session keeps going
//!   with the new record.
//!
//! The bound from a change in Redis to the session is in
//! `docs/refdata.md` ("Revocation"): the entry's jittered TTL, one
//! refresh, and one revalidation round.
//!
//! [`RefData::recheck`]: crate::refdata::RefData::recheck

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::conns::Conns;
use super::subscribe::Subscribing;
use crate::config::Account;
use crate::refdata::Recheck;
use crate::wire::{DisconnectReason, Name16, SubscribeResult, SubscribeStatus};

/// How often a shard starts a revalidation round.
pub const REVALIDATE_NS: u64 = 1_000_000_000;
/// Connection slots visited per round; a shard with more slots in use
/// takes several rounds (the slots are visited in turn).
pub const REVALIDATE_BATCH: usize = 1_024;
/// Entries per unsolicited SubscribeResponse.
const RESULTS_PER_FRAME: usize = 64;
/// The `requestId` of a SubscribeResponse no request asked for (a
/// withdrawal); clients number their requests from 1 (`docs/protocol.md`).
pub const UNSOLICITED_REQUEST_ID: u64 = 0;

/// The shard's revalidation rounds: when the next is due and where it
/// starts.
pub(super) struct Revalidator {
    /// When the next revalidation round is due.
    next_ns: u64,
    /// The next session a revalidation round looks at.
    cursor: usize,
}

impl Revalidator {
    pub(super) fn new() -> Revalidator {
        Revalidator {
            next_ns: 0,
            cursor: 0,
        }
    }

    /// One revalidation round if one is due (see the module docs);
    /// withdrawals are announced through `subscribing`.
    pub(super) fn revalidate(
        &mut self,
        conns: &mut Conns,
        subscribing: &mut Subscribing,
        now: u64,
    ) {
        if now < self.next_ns || !conns.shared.refdata.is_redis() {
            return;
        }
        self.next_ns = now + REVALIDATE_NS;
        let end = conns.slab.live_end;
        if end == 0 {
            return;
        }
        let stats = conns.shared.refdata.stats();
        let count = || {
            let d = stats.revoked_disconnected.load(Relaxed);
            (d, stats.revoked_unsubscribed.load(Relaxed))
        };
        let before = count();
        for _ in 0..end.min(REVALIDATE_BATCH) {
            let i = self.cursor % end;
            self.cursor = i + 1;
            revalidate_one(conns, subscribing, i, now);
        }
        // One line per round, however many sessions one change touched
        // (each session's own line is at debug level).
        let after = count();
        if after != before {
            tracing::info!(
                disconnected = after.0 - before.0,
                unsubscribed = after.1 - before.1,
                "reference data changed: live sessions revoked (Disconnect(auth)) or unsubscribed"
            );
        }
    }
}

fn revalidate_one(conns: &mut Conns, subscribing: &mut Subscribing, i: usize, now: u64) {
    let Some(held) = conns.slab.conns[i]
        .as_ref()
        .filter(|c| c.session.is_active())
        .and_then(|c| c.session.acct().cloned())
    else {
        return;
    };
    match conns.shared.refdata.recheck(&held, now) {
        Recheck::Same => {}
        Recheck::Gone => revoke_session(conns, i, &held, "account withdrawn", now),
        Recheck::Changed(new) => apply_change(conns, subscribing, i, &held, new, now),
    }
}

fn revoke_session(conns: &mut Conns, i: usize, held: &Account, why: &str, now: u64) {
    tracing::debug!(account = %crate::runtime::esc(&held.name), reason = why, "session ended: Disconnect(auth)");
    let stats = conns.shared.refdata.stats();
    stats.revoked_disconnected.fetch_add(1, Relaxed);
    conns.disconnect(i, DisconnectReason::AUTH, 0, why, now);
}

fn apply_change(
    conns: &mut Conns,
    subscribing: &mut Subscribing,
    i: usize,
    held: &Account,
    new: Arc<Account>,
    now: u64,
) {
    let tiers = conns.fanout.tiers;
    let Some(conn) = conns.slab.conns[i].as_mut() else {
        return;
    };
    if !new.entitled_tier(conn.session.default_tier()) {
        return revoke_session(conns, i, held, "default tier withdrawn", now);
    }
    let withdrawn: Vec<(usize, u16, SubscribeStatus)> = conn
        .subs
        .iter()
        .enumerate()
        .filter_map(|(slot, sub)| {
            let (symbol, tier) = (sub.key as usize / tiers, sub.key as usize % tiers);
            let symbol = symbol as u16;
            if !new.entitled_symbol(symbol) {
                Some((slot, symbol, SubscribeStatus::NOT_ENTITLED))
            } else if !new.entitled_tier(tier as u8) {
                Some((slot, symbol, SubscribeStatus::TIER_NOT_ENTITLED))
            } else {
                None
            }
        })
        .collect();
    conn.session.replace_acct(new);
    if withdrawn.is_empty() {
        return;
    }
    // Descending slots: a swap-remove only moves an entry already seen.
    for &(slot, _, _) in withdrawn.iter().rev() {
        conns.fanout.remove(&mut conns.slab, i, slot);
    }
    tracing::debug!(
        account = %crate::runtime::esc(&held.name),
        unsubscribed = withdrawn.len(),
        "entitlements withdrawn: subscriptions ended"
    );
    let stats = conns.shared.refdata.stats();
    stats.revoked_unsubscribed.fetch_add(1, Relaxed);
    for chunk in withdrawn.chunks(RESULTS_PER_FRAME) {
        subscribing.results.clear();
        for &(_, symbol, status) in chunk {
            let name = conns
                .shared
                .config
                .table
                .get(symbol)
                .and_then(|inst| Name16::new(&inst.name).ok())
                .unwrap_or_default();
            subscribing.results.push(SubscribeResult {
                symbol_id: symbol,
                name,
                status,
            });
        }
        subscribing.send_subscribe_response(conns, i, UNSOLICITED_REQUEST_ID);
    }
    conns.queue_write(i);
}
