//! Core side: the engine's prices from a shard ring onto the bus.
//!
//! The engine writes into an ordinary shard ring (every symbol wanted);
//! the `pw-bus` thread drains it, encodes each price into a fixed frame on
//! its stack and hands it to the NATS client. The engine never waits on
//! the bus: a full ring makes it conflate per symbol (latest wins, flagged
//! CONFLATED) exactly as for a slow gateway shard. When the ring is empty
//! the thread waits up to [`IDLE_POLL_MS`] on the NATS socket (answering
//! PINGs, reconnecting when due). Publishing allocates nothing: the
//! subjects are built once and the client encodes into a reused buffer.
//!
//! With `--threading shared` the engine has no thread of its own: it is a
//! hosted task of the ring's consumer (as it is of gateway shard 0 on a
//! standalone server), so the bus thread turns it ahead of draining the
//! ring, and does not wait on the socket while it has ticks to take. A
//! tick that arrives while the bus thread waits idle is taken at the end
//! of the wait, at most [`IDLE_POLL_MS`] later (the feeds' doorbell
//! cannot wake the NATS socket's wait either).
//!
//! Only the holder of the leader lease publishes ([`super::lease`]); a
//! standby drains its ring unpublished. On takeover each symbol's sequence
//! continues from the last value in the stream.
//!
//! The lease holder also sends a heartbeat ([`super::heartbeat`]) every
//! `--bus-heartbeat-ms`, checked once per turn of the bus thread (never per
//! price) and encoded on the stack, so edges can tell a quiet market from
//! a dead core. A standby, or a leader fenced at three quarters of its
//! lease, sends none.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::codec::BUS_MESSAGE_LEN;
use super::heartbeat::{self, Heartbeat, Pacer, HEARTBEAT_LEN};
use super::lease::Lease;
use super::nats::client::Client;
use super::nats::jetstream::{self, KvError, KvKey};
use super::thread::BusThread;
use super::{connect, BusConfig, BusError, BusStats, BATCH_MAX, IDLE_POLL_MS};
use crate::clock::monotonic_ns;
use crate::engine::ShardInput;
use crate::model::{price_flags, InstrumentTable, Price};
use crate::runtime::HostedTasks;

/// A running core publisher; [`BusPublisher::stop`] drains and flushes.
pub struct BusPublisher {
    thread: BusThread,
    /// The bus thread's counters.
    pub stats: Arc<BusStats>,
}

/// What the publishing loop needs, built before the thread starts.
struct Outbox {
    client: Client,
    /// One subject per symbol id, built once.
    subjects: Vec<String>,
    digits: Vec<u8>,
    wall_offset_ns: i64,
    stats: Arc<BusStats>,
    leader: Leader,
    beacon: Beacon,
}

/// The lease holder's heartbeat: subject, pacing and what it reports.
struct Beacon {
    subject: String,
    pacer: Pacer,
    core_id: u64,
    interval_ms: u32,
    /// Heartbeats sent so far (the next one's sequence is this + 1).
    seq: u64,
    /// Engine time (monotonic ns) of the newest price published; 0 before
    /// any.
    newest_engine_ns: u64,
}

/// The lease and what leading needs: the KV key, the last-value stream
/// (to continue sequences on takeover) and the per-symbol rebase.
struct Leader {
    lease: Lease,
    key: KvKey,
    cfg: BusConfig,
    names: Vec<String>,
    /// Per symbol: the last published sequence found at takeover.
    base: Vec<u64>,
    /// Per symbol: added to the engine's sequence, once known.
    offset: Vec<Option<u64>>,
    /// Per symbol: prices were drained unpublished (fenced) since the last
    /// publish, so the next one is flagged.
    missed: Vec<bool>,
}

/// The lease key's value (who holds it is told by the revision, not this).
const LEASE_VALUE: &[u8] = b"core";

impl BusPublisher {
    /// Connects, makes sure the last-value stream exists, then publishes
    /// every price the engine writes into `input` until stopped or until
    /// the engine lets go of the ring. Tasks hosted by `input` (the engine
    /// under `--threading shared`) are turned by the bus thread; they must
    /// not need socket events (the engine has none).
    pub fn start(
        cfg: &BusConfig,
        table: &InstrumentTable,
        input: ShardInput,
        supervisor: &crate::runtime::Supervisor,
    ) -> Result<BusPublisher, BusError> {
        input.interest.set_all();
        let stats = Arc::new(BusStats::default());
        let subjects = table
            .instruments()
            .iter()
            .map(|i| cfg.subject(&i.name))
            .collect();
        let digits = table.instruments().iter().map(|i| i.digits).collect();
        let names: Vec<String> = table.instruments().iter().map(|i| i.name.clone()).collect();
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let (cfg, st) = (cfg.clone(), stats.clone());
        // Transient: it ends by design once the engine lets go of the ring.
        let transient = crate::runtime::Policy::Transient;
        let thread = BusThread::spawn(supervisor, transient, move |stop| {
            let tables = (subjects, digits, names);
            let ring = (input.consumer, input.hosted);
            bus_thread(cfg, st, tables, ring, ready_tx, &stop)
        })?;
        let started = ready_rx
            .recv_timeout(super::CONNECT_TIMEOUT * 2)
            .map_err(|_| BusError::Thread("no start-up report".into()))
            .and_then(|r| r);
        // On an error the thread is halted as `thread` drops.
        started.map(|()| BusPublisher { thread, stats })
    }

    /// Publishes what is left in the ring, flushes the client and joins.
    pub fn stop(mut self) {
        self.thread.halt();
    }
}

type Ready = crossbeam_channel::Sender<Result<(), BusError>>;

/// The `pw-bus` thread of a core: connect, report, then publish.
fn bus_thread(
    cfg: BusConfig,
    st: Arc<BusStats>,
    (subjects, digits, names): (Vec<String>, Vec<u8>, Vec<String>),
    (ring, hosted): (rtrb::Consumer<Price>, HostedTasks),
    ready_tx: Ready,
    stop: &AtomicBool,
) {
    let set_up = connect::client(&cfg, &st).and_then(|mut c| {
        connect::last_value_stream(&mut c, &cfg)?;
        let key = connect::lease_bucket(&mut c, &cfg)?;
        Ok((c, key))
    });
    let (client, key) = match set_up {
        Ok(c) => c,
        Err(e) => {
            crate::runtime::supervise::end_expected();
            return drop(ready_tx.send(Err(e)));
        }
    };
    let _ = ready_tx.send(Ok(()));
    let core_id = rand::random::<u64>();
    tracing::info!(core_id = format_args!("{core_id:016x}"), "bus core");
    let beacon = Beacon {
        subject: cfg.heartbeat_subject(),
        pacer: Pacer::new(cfg.heartbeat_ms),
        core_id,
        interval_ms: u32::try_from(cfg.heartbeat_ms).unwrap_or(u32::MAX),
        seq: 0,
        newest_engine_ns: 0,
    };
    let leader = Leader {
        lease: Lease::new(cfg.lease_ms * 1_000_000),
        key,
        base: vec![0; names.len()],
        offset: vec![None; names.len()],
        missed: vec![false; names.len()],
        names,
        cfg,
    };
    let outbox = Outbox {
        client,
        leader,
        beacon,
        subjects,
        digits,
        wall_offset_ns: crate::wire::wall_offset_ns(
            crate::clock::wall_ns(),
            crate::clock::monotonic_ns(),
        ),
        stats: st,
    };
    outbox.run(ring, hosted, stop);
}

impl Outbox {
    fn run(mut self, mut ring: rtrb::Consumer<Price>, mut hosted: HostedTasks, stop: &AtomicBool) {
        let idle = Duration::from_millis(IDLE_POLL_MS);
        loop {
            self.leader.turn(&mut self.client, &self.stats);
            self.beat(monotonic_ns());
            // A hosted engine prices what its feeds left, into the ring.
            let engine_work = hosted.turn(monotonic_ns());
            let moved = self.turn(&mut ring);
            if moved > 0 {
                self.client.flush();
                self.client.poll(Duration::ZERO, &mut |_, _| {});
                continue;
            }
            // Empty: the engine has gone (orderly stop) or we were told to.
            if ring.is_abandoned() || stop.load(Ordering::Acquire) {
                if ring.is_empty() {
                    break;
                }
                continue;
            }
            let busy = engine_work > 0 || hosted.has_work();
            if !busy {
                crate::runtime::drill::point("bus", 0);
            }
            self.client
                .poll(if busy { Duration::ZERO } else { idle }, &mut |_, _| {});
        }
        self.client.flush();
        self.leader.resign(&mut self.client);
    }

    /// Publishes up to [`BATCH_MAX`] prices (a standby drains them
    /// unpublished); returns how many it took from the ring.
    fn turn(&mut self, ring: &mut rtrb::Consumer<Price>) -> usize {
        let mut moved = 0;
        let mut frame = [0u8; BUS_MESSAGE_LEN];
        let epoch = self.leader.lease.publishing_epoch(monotonic_ns());
        let mut newest_engine_ns = 0;
        while moved < BATCH_MAX {
            let Ok(mut price) = ring.pop() else { break };
            moved += 1;
            let Some(epoch) = epoch else {
                self.stats.standby_discarded.inc();
                if let Some(m) = self.leader.missed.get_mut(price.symbol as usize) {
                    *m = true;
                }
                continue;
            };
            let s = price.symbol as usize;
            let (Some(subject), Some(&digits)) = (self.subjects.get(s), self.digits.get(s)) else {
                self.stats.publish_errors.inc();
                continue;
            };
            self.leader.continue_sequence(&mut price);
            let n = super::codec::encode(&mut frame, &price, epoch, digits, self.wall_offset_ns);
            if self.client.publish(subject, &frame[..n]) {
                self.stats.published.inc();
                newest_engine_ns = price.engine_time_ns;
            } else {
                self.stats.publish_errors.inc();
            }
        }
        if newest_engine_ns != 0 {
            self.beacon.newest_engine_ns = newest_engine_ns;
        }
        moved
    }

    /// Sends a heartbeat when one is due and this core may publish (holds
    /// the lease, not fenced). Allocates nothing.
    fn beat(&mut self, now_ns: u64) {
        let Some(epoch) = self.leader.lease.publishing_epoch(now_ns) else {
            return;
        };
        if !self.beacon.pacer.due(now_ns) {
            return;
        }
        let utc = |mono: u64| mono.saturating_add_signed(self.wall_offset_ns);
        let b = &mut self.beacon;
        let hb = Heartbeat {
            flags: heartbeat::FLAG_LEADER,
            interval_ms: b.interval_ms,
            epoch,
            core_id: b.core_id,
            seq: b.seq + 1,
            published: self.stats.published.get(),
            newest_price_utc_ns: match b.newest_engine_ns {
                0 => 0,
                t => utc(t),
            },
            sent_utc_ns: utc(now_ns),
        };
        let mut frame = [0u8; HEARTBEAT_LEN];
        let n = heartbeat::encode(&mut frame, &hb);
        if self.client.publish(&b.subject, &frame[..n]) {
            b.seq += 1;
            self.stats.heartbeats_sent.inc();
            self.stats.heartbeat_at(now_ns);
        } else {
            self.stats.heartbeat_errors.inc();
        }
    }
}

impl Leader {
    /// Takes or renews the lease when due (each KV call bounded by a
    /// quarter of the lease period).
    fn turn(&mut self, c: &mut Client, stats: &BusStats) {
        let now = monotonic_ns();
        let bound = Duration::from_millis(self.cfg.lease_ms / 4);
        if self.lease.acquire_due(now) {
            self.lease.tried(now);
            if let Ok(revision) = self.key.create(c, LEASE_VALUE, bound) {
                self.take_over(c, revision, stats);
            }
        } else if self.lease.renew_due(now) {
            self.lease.tried(now);
            let Some(rev) = self.lease.revision() else {
                return;
            };
            match self.key.update(c, LEASE_VALUE, rev, bound) {
                Ok(revision) => self.lease.renewed(revision, monotonic_ns()),
                Err(KvError::WrongLastRevision) => {
                    self.lease.lost();
                    stats.leases_lost.inc();
                    tracing::warn!("leader lease lost: another core holds it");
                }
                // No answer: keep trying; fencing stops publishing at 3/4.
                _ => {}
            }
        }
    }

    /// Leads from `revision` on: reads every symbol's last published
    /// sequence so the next price continues from it.
    fn take_over(&mut self, c: &mut Client, revision: u64, stats: &BusStats) {
        let stream = self.cfg.stream();
        let bound = Duration::from_millis(self.cfg.lease_ms / 4);
        for (i, name) in self.names.iter().enumerate() {
            let last = jetstream::last_for_subject(c, &stream, &self.cfg.subject(name), bound);
            self.base[i] = match last {
                Ok(Some(m)) => match crate::wire::decode(&m.payload) {
                    Ok(crate::wire::Message::PriceUpdate(b)) => b.seq,
                    _ => 0,
                },
                _ => 0,
            };
            self.offset[i] = None;
        }
        // Stamped now: the loads above took time from the lease.
        self.lease.acquired(revision, monotonic_ns());
        stats.leases_taken.inc();
        tracing::info!(epoch = revision, "leader lease taken");
    }

    /// Continues the symbol's sequence from the last value published before
    /// this core led; the first price after a takeover is flagged
    /// CONFLATED (prices may have been missed in between).
    fn continue_sequence(&mut self, price: &mut Price) {
        let s = price.symbol as usize;
        debug_assert!(s < self.offset.len());
        let offset = match self.offset[s] {
            Some(o) => o,
            None => {
                let base = self.base[s];
                if base > 0 {
                    price.flags |= price_flags::CONFLATED;
                }
                // Next is base + 1; an engine sequence starts at 1.
                let o = (base + 1).saturating_sub(price.seq);
                self.offset[s] = Some(o);
                o
            }
        };
        price.seq += offset;
        if std::mem::take(&mut self.missed[s]) {
            price.flags |= price_flags::CONFLATED;
        }
    }

    /// An orderly stop hands the lease on at once instead of letting it
    /// expire.
    fn resign(&mut self, c: &mut Client) {
        if let Some(rev) = self.lease.revision() {
            let bound = Duration::from_millis(self.cfg.lease_ms / 4);
            let _ = self.key.delete(c, rev, bound);
            self.lease.lost();
        }
    }
}
