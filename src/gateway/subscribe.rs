//! Subscribe and Unsubscribe on the shard: symbol references resolved
//! against the table and the account's entitlements, the shard's
//! subscription index and symbol interest kept in step, the initial
//! snapshots queued.

use super::conns::Conns;
use crate::wire::{self, Name16, RejectReason, SubscribeResult, SubscribeStatus, SYMBOL_BY_NAME};

/// The shard's Subscribe and Unsubscribe handling: the scratch of one
/// request's results and newly subscribed keys (sized at start).
pub(super) struct Subscribing {
    /// The per-symbol results of the request being answered.
    pub(super) results: Vec<SubscribeResult>,
    /// Keys the request being answered subscribed anew.
    new_keys: Vec<u32>,
}

impl Subscribing {
    /// After a fault in a connection's work: the results scratch gets its
    /// room back if the fault came while it was lent out.
    pub(super) fn restore(&mut self) {
        let want = self.new_keys.capacity();
        if self.results.capacity() < want {
            self.results.reserve(want);
        }
    }

    /// Scratch for requests of up to `max_entries` entries.
    pub(super) fn new(max_entries: usize) -> Subscribing {
        Subscribing {
            results: Vec::with_capacity(max_entries),
            new_keys: Vec::with_capacity(max_entries),
        }
    }

    pub(super) fn on_subscribe(
        &mut self,
        conns: &mut Conns,
        i: usize,
        s: &wire::Subscribe<'_>,
        now: u64,
    ) {
        let shared = conns.shared.clone();
        if !conns.slab.conns[i]
            .as_ref()
            .is_some_and(|c| c.session.first_subscribe_done())
        {
            let ok = shared
                .admission
                .lock()
                .expect("admission lock")
                .on_first_subscribe(now);
            if let Err(r) = ok {
                let t = wire::template::SUBSCRIBE;
                return conns.reject(
                    i,
                    s.request_id,
                    t,
                    RejectReason::RATE_LIMITED,
                    r.retry_after_ms,
                    "",
                );
            }
        }
        let Some(acct) = conns.slab.conns[i]
            .as_ref()
            .and_then(|c| c.session.acct().cloned())
        else {
            return;
        };
        let acct = &*acct;
        let Some(conn) = conns.slab.conns[i].as_mut() else {
            return;
        };
        conn.session.set_first_subscribe_done();
        let tier = conn.session.tier(s.tier);
        let interval_ns = conns.fanout.interval_for(Some(acct));
        self.results.clear();
        self.new_keys.clear();
        for entry in s.entries.clone() {
            crate::runtime::drill::connection_point(entry.name.as_bytes(), "Subscribe");
            let (id, status) = resolve(conns, acct, tier, &entry);
            let status = if status == SubscribeStatus::OK {
                let key = id as usize * conns.fanout.tiers + tier as usize;
                let max = conns.shared.cfg.max_subscriptions;
                let new = &mut self.new_keys;
                conns
                    .fanout
                    .add(&mut conns.slab, i, key, (max, interval_ns), new)
            } else {
                status
            };
            let name = answer_name(conns, id, status, &entry);
            self.results.push(SubscribeResult {
                symbol_id: id,
                name,
                status,
            });
        }
        self.send_subscribe_response(conns, i, s.request_id);
        self.send_snapshots(conns, i, now);
    }

    /// Sends the per-symbol results collected in `self.results`.
    pub(super) fn send_subscribe_response(&mut self, conns: &mut Conns, i: usize, request_id: u64) {
        let results = std::mem::take(&mut self.results);
        conns.send(i, |b| {
            wire::encode_subscribe_response(b, request_id, results.iter())
        });
        self.results = results;
    }

    /// Sends a PriceSnapshot for every key subscribed by the last request.
    pub(super) fn send_snapshots(&mut self, conns: &mut Conns, i: usize, now: u64) {
        let Some(conn) = conns.slab.conns[i].as_mut() else {
            return;
        };
        for &key in &self.new_keys {
            let slot = conn.subs.iter().position(|s| s.key == key);
            if let Some(slot) = slot.filter(|&s| !conn.subs[s].dirty) {
                conn.subs[slot].dirty = true;
                conn.dirty_subs += 1;
            }
        }
        if !conn.out.is_conflating() {
            conns.fanout.resync_fresh(conn, &conns.stats, now);
        }
        conns.queue_write(i);
    }

    pub(super) fn on_unsubscribe(&mut self, conns: &mut Conns, i: usize, s: &wire::Subscribe<'_>) {
        let Some(acct) = conns.slab.conns[i]
            .as_ref()
            .and_then(|c| c.session.acct().cloned())
        else {
            return;
        };
        let acct = &*acct;
        let tier = conns.slab.conns[i]
            .as_ref()
            .map_or(s.tier, |c| c.session.tier(s.tier));
        self.results.clear();
        for entry in s.entries.clone() {
            let (id, mut status) = resolve(conns, acct, tier, &entry);
            if status == SubscribeStatus::OK {
                let key = (id as usize * conns.fanout.tiers + tier as usize) as u32;
                let slot = conns.slab.conns[i]
                    .as_ref()
                    .and_then(|c| c.subs.iter().position(|s| s.key == key));
                match slot {
                    Some(slot) => conns.fanout.remove(&mut conns.slab, i, slot),
                    None => status = SubscribeStatus::NOT_SUBSCRIBED,
                }
            }
            let name = answer_name(conns, id, status, &entry);
            self.results.push(SubscribeResult {
                symbol_id: id,
                name,
                status,
            });
        }
        self.send_subscribe_response(conns, i, s.request_id);
    }
}

/// Resolves a symbol reference against the table and entitlements.
fn resolve(
    conns: &Conns,
    acct: &crate::config::Account,
    tier: u8,
    entry: &wire::SymbolRef,
) -> (u16, SubscribeStatus) {
    let table = &conns.shared.config.table;
    let id = if entry.symbol_id == SYMBOL_BY_NAME {
        entry
            .name
            .as_str()
            .and_then(|n| table.by_name(n))
            .map(|i| i.id)
    } else {
        // An entry with both an id and a name must name one symbol.
        let name = entry.name;
        table
            .get(entry.symbol_id)
            .filter(|i| name.is_empty() || name.as_bytes() == i.name.as_bytes())
            .map(|i| i.id)
    };
    let Some(id) = id else {
        return (entry.symbol_id, SubscribeStatus::UNKNOWN_SYMBOL);
    };
    if (tier as usize) >= conns.fanout.tiers || !acct.entitled_tier(tier) {
        return (id, SubscribeStatus::TIER_NOT_ENTITLED);
    }
    if !acct.entitled_symbol(id) {
        return (id, SubscribeStatus::NOT_ENTITLED);
    }
    (id, SubscribeStatus::OK)
}

/// The name a SubscribeResponse entry carries: the symbol's own name
/// once resolved (also for entries by id), else the name as sent.
fn answer_name(conns: &Conns, id: u16, status: SubscribeStatus, entry: &wire::SymbolRef) -> Name16 {
    if status == SubscribeStatus::UNKNOWN_SYMBOL {
        return entry.name;
    }
    let table = &conns.shared.config.table;
    table
        .get(id)
        .and_then(|i| Name16::new(&i.name).ok())
        .unwrap_or(entry.name)
}
