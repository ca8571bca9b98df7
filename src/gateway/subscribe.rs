//! Subscribe and Unsubscribe on the shard: symbol references resolved
//! against the table and the account's entitlements, the shard's
//! subscription index and symbol interest kept in step, the initial
//! snapshots queued.

use super::conn::Sub;
use super::fanout::resync_fresh;
use super::shard::Shard;
use super::subs::Subscriber;
use crate::wire::{self, RejectReason, SubscribeResult, SubscribeStatus, SYMBOL_BY_NAME};

impl Shard {
    pub(super) fn on_subscribe(&mut self, i: usize, s: &wire::Subscribe<'_>, now: u64) {
        let shared = self.shared.clone();
        if !self.conns[i]
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
                return self.reject(
                    i,
                    s.request_id,
                    t,
                    RejectReason::RATE_LIMITED,
                    r.retry_after_ms,
                    "",
                );
            }
        }
        let Some(acct) = self.conns[i]
            .as_ref()
            .and_then(|c| c.session.acct().cloned())
        else {
            return;
        };
        let acct = &*acct;
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        conn.session.set_first_subscribe_done();
        let tier = conn.session.tier(s.tier);
        self.results.clear();
        self.new_keys.clear();
        for entry in s.entries.clone() {
            let (id, status) = self.resolve(acct, tier, &entry);
            let status = if status == SubscribeStatus::OK {
                self.add_sub(i, id as usize * self.tiers + tier as usize)
            } else {
                status
            };
            self.results.push(SubscribeResult {
                symbol_id: id,
                name: entry.name,
                status,
            });
        }
        self.send_subscribe_response(i, s.request_id);
        self.send_snapshots(i, now);
    }

    /// Sends the per-symbol results collected in `self.results`.
    pub(super) fn send_subscribe_response(&mut self, i: usize, request_id: u64) {
        let results = std::mem::take(&mut self.results);
        self.send(i, |b| {
            wire::encode_subscribe_response(b, request_id, results.iter())
        });
        self.results = results;
    }

    /// Resolves a symbol reference against the table and entitlements.
    pub(super) fn resolve(
        &self,
        acct: &crate::config::Account,
        tier: u8,
        entry: &wire::SymbolRef,
    ) -> (u16, SubscribeStatus) {
        let table = &self.shared.config.table;
        let id = if entry.symbol_id == SYMBOL_BY_NAME {
            entry
                .name
                .as_str()
                .and_then(|n| table.by_name(n))
                .map(|i| i.id)
        } else {
            table.get(entry.symbol_id).map(|i| i.id)
        };
        let Some(id) = id else {
            return (entry.symbol_id, SubscribeStatus::UNKNOWN_SYMBOL);
        };
        if (tier as usize) >= self.tiers || !acct.entitled_tier(tier) {
            return (id, SubscribeStatus::TIER_NOT_ENTITLED);
        }
        if !acct.entitled_symbol(id) {
            return (id, SubscribeStatus::NOT_ENTITLED);
        }
        (id, SubscribeStatus::OK)
    }

    pub(super) fn add_sub(&mut self, i: usize, key: usize) -> SubscribeStatus {
        let max = self.shared.cfg.max_subscriptions;
        let Some(conn) = self.conns[i].as_mut() else {
            return SubscribeStatus::LIMIT_REACHED;
        };
        if conn.subs.iter().any(|s| s.key as usize == key) {
            return SubscribeStatus::OK;
        }
        if conn.subs.len() >= max {
            return SubscribeStatus::LIMIT_REACHED;
        }
        let slot = conn.subs.len() as u32;
        let pos = self.index.add(
            key,
            Subscriber {
                conn: i as u32,
                slot,
            },
        );
        conn.subs.push(Sub {
            key: key as u32,
            pos,
            last_seq: 0,
            dirty: false,
        });
        // Before the snapshot is read (send_snapshots): see SymbolInterest.
        let symbol = key / self.tiers;
        self.sym_subs[symbol] += 1;
        if self.sym_subs[symbol] == 1 {
            self.input.interest.hold(symbol as u16);
        }
        self.new_keys.push(key as u32);
        SubscribeStatus::OK
    }

    /// Sends a PriceSnapshot for every key subscribed by the last request.
    pub(super) fn send_snapshots(&mut self, i: usize, now: u64) {
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        for &key in &self.new_keys {
            let slot = conn.subs.iter().position(|s| s.key == key);
            if let Some(slot) = slot {
                conn.subs[slot].dirty = true;
                conn.dirty_subs += 1;
            }
        }
        if !conn.out.is_conflating() {
            resync_fresh(conn, &self.shared, self.tiers, &self.digits, now);
        }
        self.queue_write(i);
    }

    pub(super) fn remove_sub(&mut self, i: usize, slot: usize) {
        self.unindex(i, slot);
        let Some(conn) = self.conns[i].as_mut() else {
            return;
        };
        let sub = conn.subs.swap_remove(slot);
        if sub.dirty {
            conn.dirty_subs -= 1;
        }
        if slot < conn.subs.len() {
            let m = conn.subs[slot];
            self.index.set_slot(m.key as usize, m.pos, slot as u32);
        }
    }

    /// Takes subscription `slot` of connection `i` out of this shard's
    /// index (and the symbol out of its interest if it was the last),
    /// leaving the connection's own list as it is.
    pub(super) fn unindex(&mut self, i: usize, slot: usize) {
        let Some(sub) = self.conns[i].as_ref().map(|c| c.subs[slot]) else {
            return;
        };
        if let Some(moved) = self.index.remove(sub.key as usize, sub.pos) {
            if let Some(other) = self.conns[moved.conn as usize].as_mut() {
                other.subs[moved.slot as usize].pos = sub.pos;
            }
        }
        let symbol = sub.key as usize / self.tiers;
        self.sym_subs[symbol] -= 1;
        if self.sym_subs[symbol] == 0 {
            self.input.interest.release(symbol as u16);
        }
    }

    pub(super) fn on_unsubscribe(&mut self, i: usize, s: &wire::Subscribe<'_>) {
        let Some(acct) = self.conns[i]
            .as_ref()
            .and_then(|c| c.session.acct().cloned())
        else {
            return;
        };
        let acct = &*acct;
        let tier = self.conns[i]
            .as_ref()
            .map_or(s.tier, |c| c.session.tier(s.tier));
        self.results.clear();
        for entry in s.entries.clone() {
            let (id, mut status) = self.resolve(acct, tier, &entry);
            if status == SubscribeStatus::OK {
                let key = (id as usize * self.tiers + tier as usize) as u32;
                let slot = self.conns[i]
                    .as_ref()
                    .and_then(|c| c.subs.iter().position(|s| s.key == key));
                match slot {
                    Some(slot) => self.remove_sub(i, slot),
                    None => status = SubscribeStatus::NOT_SUBSCRIBED,
                }
            }
            self.results.push(SubscribeResult {
                symbol_id: id,
                name: entry.name,
                status,
            });
        }
        self.send_subscribe_response(i, s.request_id);
    }
}
