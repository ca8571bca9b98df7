//! An empty or stale Redis is a dependency fault, never a revocation: the
//! invariants over generated histories, by injected time, with the real
//! breaker, data-set rule, refresher and cache over a scripted Redis
//! (`util/refdata_world.rs`).
//!
//! A history mixes what happens to Redis (restarted empty, reloaded with
//! the marker kept or raised, failed over to a stale replica whose marker
//! went backwards, the index wrong-typed, down and up) with positive
//! revocations in the source of truth (a record deleted, or `revoked 1`)
//! and with logons and the gateway's re-checks of live sessions. After
//! every step:
//!
//! 1. `NotFound` and `Gone` (which disconnects a live session) only for an
//!    account the source of truth deleted or revoked;
//! 2. an account once served, and still valid in the truth, is served at
//!    every later logon (within `max_stale_ms`, longer than a history);
//! 3. a stale replica never serves an account the truth deleted.
//!
//! And, once Redis holds the truth again with a trusted marker, every
//! revocation reaches its live session within the documented bound.

use crate::util::refdata_world as world;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use proptest::prelude::*;

use pricewire::clock::NS_PER_MS;
use pricewire::config::Account;
use pricewire::refdata::dataset::{Index, Marker};
use pricewire::refdata::{Lookup, Recheck, Record};

use world::{Down, Rig, World};

const ACCOUNTS: usize = 12;
const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

#[derive(Debug, Clone)]
enum Op {
    Wait { ms: u64 },
    LogOn { i: usize },
    RestartEmpty,
    Reload { raise: bool },
    StaleReplica,
    WrongTypeIndex,
    Down,
    Up,
    Delete { i: usize },
    Revoke { i: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u64..15_000).prop_map(|ms| Op::Wait { ms }),
        6 => (0..ACCOUNTS).prop_map(|i| Op::LogOn { i }),
        1 => Just(Op::RestartEmpty),
        1 => any::<bool>().prop_map(|raise| Op::Reload { raise }),
        1 => Just(Op::StaleReplica),
        1 => Just(Op::WrongTypeIndex),
        1 => Just(Op::Down),
        1 => Just(Op::Up),
        1 => (0..ACCOUNTS).prop_map(|i| Op::Delete { i }),
        1 => (0..ACCOUNTS).prop_map(|i| Op::Revoke { i }),
    ]
}

fn name(i: usize) -> String {
    format!("acct{i:02}")
}

/// The source of truth and what Redis mirrors of it.
struct Truth {
    /// Accounts revoked or deleted in the truth.
    gone: BTreeSet<usize>,
    generation: u64,
    /// The first snapshot (for a stale replica): every account valid.
    first: World,
    /// Whether Redis holds the truth (so revocations are written to it).
    mirrored: bool,
}

struct Sim {
    rig: Rig,
    truth: Truth,
    /// Accounts served once, with the record a live session holds.
    sessions: BTreeMap<usize, Arc<Account>>,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let names: Vec<String> = (0..ACCOUNTS).map(name).collect();
        let world = World::with_accounts(&names, Some(10));
        let first = World {
            marker: Marker::Value(5),
            ..world.clone()
        };
        let mut rig = Rig::new(world, seed, |c| c.cache.ttl_ms = 5_000);
        rig.settle();
        Sim {
            rig,
            truth: Truth {
                gone: BTreeSet::new(),
                generation: 10,
                first,
                mirrored: true,
            },
            sessions: BTreeMap::new(),
        }
    }

    fn truth_world(&self) -> World {
        let mut w = self.truth.first.clone();
        for &i in &self.truth.gone {
            w.records.remove(&name(i));
        }
        w.marker = Marker::Value(self.truth.generation);
        w.index = Index::Names(w.records.len() as u64);
        w
    }

    fn apply(&mut self, op: &Op) {
        let now = self.rig.now();
        match *op {
            // The gateway re-checks its live sessions every second.
            Op::Wait { ms } => {
                let end = now + ms * NS_PER_MS;
                while self.rig.now() < end {
                    let next = (self.rig.now() + 1_000 * NS_PER_MS).min(end);
                    self.rig.run_until(next);
                    self.recheck_sessions();
                }
            }
            Op::LogOn { i } => self.log_on(i),
            Op::RestartEmpty => {
                self.rig.world().restart_empty();
                self.truth.mirrored = false;
            }
            Op::Reload { raise } => {
                if raise {
                    self.truth.generation += 1;
                }
                let down = self.rig.world().down;
                *self.rig.world() = World {
                    down,
                    ..self.truth_world()
                };
                self.truth.mirrored = true;
            }
            Op::StaleReplica => {
                let down = self.rig.world().down;
                *self.rig.world() = World {
                    down,
                    ..self.truth.first.clone()
                };
                self.truth.mirrored = false;
            }
            Op::WrongTypeIndex => self.rig.world().index = Index::Unreadable,
            Op::Down => self.rig.world().down = Some(Down::Refused),
            Op::Up => self.rig.world().down = None,
            Op::Delete { i } | Op::Revoke { i } => {
                self.truth.gone.insert(i);
                self.truth.generation += 1;
                if self.truth.mirrored {
                    let mut w = self.rig.world();
                    match op {
                        Op::Delete { .. } => {
                            w.records.remove(&name(i));
                        }
                        _ => {
                            w.records.insert(name(i), Record::Revoked);
                        }
                    }
                    w.marker = Marker::Value(self.truth.generation);
                }
            }
        }
        self.rig.settle();
        self.recheck_sessions();
    }

    fn log_on(&mut self, i: usize) {
        let now = self.rig.now();
        let gone = self.truth.gone.contains(&i);
        match self.rig.refdata.lookup_from(&name(i), CLIENT, now) {
            Lookup::Found(a) => {
                // 3: a deleted account is not served back from a replica.
                assert!(
                    !gone || self.sessions.contains_key(&i),
                    "{} resurrected",
                    name(i)
                );
                self.sessions.entry(i).or_insert(a);
            }
            Lookup::NotFound => assert!(gone, "{} refused as unknown, valid in the truth", name(i)),
            Lookup::Unavailable { .. } => {
                // 2: once served and still valid, always served.
                assert!(
                    gone || !self.sessions.contains_key(&i),
                    "{} refused (busy) after it was served",
                    name(i)
                );
            }
        }
    }

    fn recheck_sessions(&mut self) {
        let now = self.rig.now();
        let mut ended = Vec::new();
        for (&i, held) in &self.sessions {
            match self.rig.refdata.recheck(held, now) {
                Recheck::Gone => {
                    assert!(
                        self.truth.gone.contains(&i),
                        "{} disconnected, valid in the truth",
                        name(i)
                    );
                    ended.push(i);
                }
                Recheck::Same | Recheck::Changed(_) => {}
            }
        }
        for i in ended {
            self.sessions.remove(&i);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn an_empty_or_stale_redis_never_revokes(
        ops in proptest::collection::vec(op(), 1..40),
        seed in any::<u64>(),
    ) {
        let mut sim = Sim::new(seed);
        for i in 0..ACCOUNTS {
            sim.log_on(i);
        }
        prop_assert_eq!(sim.sessions.len(), ACCOUNTS, "all prefetched");
        for o in &ops {
            sim.apply(o);
        }
        // Redis holds the truth again, reachable, with a raised marker:
        // every revocation reaches its live session within the bound
        // (the jittered TTL, a re-check round and one refresh).
        sim.apply(&Op::Up);
        sim.apply(&Op::Reload { raise: true });
        let cfg = &sim.rig.cfg;
        let ttl_max_ms = cfg.cache.ttl_ms * (100 + u64::from(cfg.cache.ttl_jitter_pct)) / 100;
        let bound_ms = ttl_max_ms + 2_000 + cfg.redis.attempt_max_ms() + cfg.trust_bound_ms().unwrap();
        let deadline = sim.rig.now() + bound_ms * NS_PER_MS;
        while sim.rig.now() < deadline {
            sim.apply(&Op::Wait { ms: 1_000 });
        }
        for i in sim.truth.gone.clone() {
            prop_assert!(!sim.sessions.contains_key(&i), "{} still live {} ms after the reload", name(i), bound_ms);
        }
        prop_assert_eq!(sim.sessions.len() + sim.truth.gone.len(), ACCOUNTS);
    }
}

#[test]
fn a_restart_empty_is_seen_and_a_reload_is_trusted_again() {
    let mut sim = Sim::new(1);
    for i in 0..ACCOUNTS {
        sim.log_on(i);
    }
    let ds = sim.rig.refresher.source().data_set_stats();
    assert_eq!(ds.is_trusted(), Some(true));
    sim.apply(&Op::RestartEmpty);
    sim.apply(&Op::Wait { ms: 20_000 });
    assert_eq!(ds.is_trusted(), Some(false));
    assert_eq!(
        ds.current_fault(),
        Some(pricewire::refdata::dataset::DataSetFault::GenerationMissing)
    );
    for i in 0..ACCOUNTS {
        sim.log_on(i);
    }
    assert_eq!(sim.sessions.len(), ACCOUNTS);
    sim.apply(&Op::Reload { raise: false });
    sim.apply(&Op::Wait { ms: 3_000 });
    assert_eq!((ds.is_trusted(), ds.current_fault()), (Some(true), None));
}

#[test]
fn a_stale_replica_does_not_bring_back_a_deleted_account() {
    let mut sim = Sim::new(2);
    for i in 0..ACCOUNTS {
        sim.log_on(i);
    }
    sim.apply(&Op::Delete { i: 3 });
    sim.apply(&Op::Wait { ms: 10_000 });
    assert!(
        !sim.sessions.contains_key(&3),
        "the deletion reached the session"
    );
    sim.apply(&Op::StaleReplica);
    for _ in 0..4 {
        sim.log_on(3);
        sim.apply(&Op::Wait { ms: 6_000 });
    }
    let s = sim.rig.refdata.stats().snapshot();
    assert!(
        s.redis_absent_untrusted + s.lookups_unavailable > 0,
        "{s:?}"
    );
    // The replica's other records are not used either, while the cached
    // accounts keep serving.
    for i in (0..ACCOUNTS).filter(|&i| i != 3) {
        sim.log_on(i);
    }
}
