//! Core side: the engine's prices from a shard ring onto the bus.
//!
//! The engine writes into an ordinary shard ring (every symbol wanted);
//! the `pw-bus` thread drains it, numbers each price for the stream it
//! leads (`bus::sequencer`), encodes it into a fixed frame on its stack
//! and hands it to the NATS client. The engine never waits on the bus: a
//! full ring makes it conflate per symbol (latest wins, flagged CONFLATED)
//! exactly as for a slow gateway shard. When the ring is empty the thread
//! sleeps in the NATS socket's poll, woken by the engine's doorbell (a
//! mio waker on the same poll) when a price arrives, by the socket, or
//! after at most [`super::IDLE_WAIT_MS`] for its timers. Publishing
//! allocates nothing: the subjects are built once and the client encodes
//! into a reused buffer.
//!
//! With `--threading shared` the engine has no thread of its own: it is a
//! hosted task of the ring's consumer, so the bus thread turns it ahead of
//! draining the ring; the feeds ring the same doorbell.
//!
//! Every core follows the bus as an edge does (`bus::follow`): the
//! leader's prices and heartbeats tell a standby the current stream, its
//! epoch and every symbol's highest sequence. Only the holder of the
//! leader lease publishes (`bus::lease`, driven without blocking by
//! `bus::leadership`), and only a core whose feeds are healthy
//! (`bus::health`) holds it. On taking it a core reads every symbol's last
//! value, continues the stream it can prove (or starts a new one), and
//! restates its engine's current price of every symbol at once, so the
//! new leader stands behind every price terminals see. A standby drains
//! its ring unpublished.
//!
//! The lease holder also sends a heartbeat (`bus::heartbeat`) every
//! `--bus-heartbeat-ms`, checked once per turn of the bus thread (never per
//! price) and encoded on the stack. A standby, or a fenced leader, sends
//! none.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::codec::BUS_MESSAGE_LEN;
use super::follow::Known;
use super::health::FeedHealth;
use super::heartbeat::{self, Heartbeat, Pacer, HEARTBEAT_LEN};
use super::leadership::Leadership;
use super::lease::{Lease, LeaseState, LeaseTiming, LossCause, Transition};
use super::nats::client::Client;
use super::nats::jetstream;
use super::sequencer::{Numbered, Sequencer};
use super::thread::BusThread;
use super::{connect, BusConfig, BusError, BusStats, BATCH_MAX, IDLE_WAIT_MS};

/// How often a leader reads the last value of a symbol it holds back
/// (its highest sequence unknown at the takeover), in milliseconds; each
/// read waits at most this long.
const RELEARN_EVERY_MS: u64 = 100;
use crate::clock::monotonic_ns;
use crate::engine::{PriceTable, ShardInput};
use crate::model::{price_flags, InstrumentTable, Price, TOP_OF_BOOK};
use crate::runtime::{Doorbell, HostedTasks};

/// A running core publisher; [`BusPublisher::stop`] drains and flushes.
pub struct BusPublisher {
    thread: BusThread,
    /// The bus thread's counters.
    pub stats: Arc<BusStats>,
}

/// The lease holder's heartbeat: subject, pacing and what it reports.
struct Beacon {
    subject: String,
    pacer: Pacer,
    interval_ms: u32,
    /// Heartbeats sent so far (the next one's sequence is this + 1).
    seq: u64,
    /// Engine time (monotonic ns) of the newest price published; 0 before
    /// any.
    newest_engine_ns: u64,
}

/// The numbering on the bus and this core's place in it.
struct Stream {
    lead: Leadership,
    seq: Sequencer,
    known: Known,
    health: FeedHealth,
    /// The epoch this core last led with (0: never).
    led_epoch: u64,
    /// Leading but fenced (logged once per episode).
    fenced: bool,
    /// The client's disconnect count when last looked at (a change means
    /// what was followed since may have missed prices).
    disconnects: u64,
    /// When a symbol held back at a takeover is read again next.
    relearn_ns: u64,
}

/// What the publishing loop needs, built before the thread starts.
struct Outbox {
    client: Client,
    cfg: BusConfig,
    instruments: InstrumentTable,
    /// One subject per symbol id, built once.
    subjects: Vec<String>,
    digits: Vec<u8>,
    wall_offset_ns: i64,
    stats: Arc<BusStats>,
    stream: Stream,
    beacon: Beacon,
    /// The engine's latest prices (restated on taking the lease).
    engine: Arc<PriceTable>,
}

/// Where the ring's prices come from, and who wakes the thread.
struct Input {
    ring: rtrb::Consumer<Price>,
    hosted: HostedTasks,
    doorbell: Arc<Doorbell>,
}

impl BusPublisher {
    /// Connects, makes sure the last-value stream and the lease bucket
    /// exist, then publishes every price the engine writes into `input`
    /// while this core leads, until stopped or until the engine lets go of
    /// the ring. `engine` is the engine's price table. Tasks hosted by
    /// `input` (the engine under `--threading shared`) are turned by the
    /// bus thread; they must not need socket events (the engine has none).
    pub fn start(
        cfg: &BusConfig,
        table: &InstrumentTable,
        engine: Arc<PriceTable>,
        input: ShardInput,
        supervisor: &crate::runtime::Supervisor,
    ) -> Result<BusPublisher, BusError> {
        input.interest.set_all();
        let stats = Arc::new(BusStats::default());
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let (cfg, st, table) = (cfg.clone(), stats.clone(), table.clone());
        // Transient: it ends by design once the engine lets go of the ring.
        let transient = crate::runtime::Policy::Transient;
        let thread = BusThread::spawn(supervisor, transient, move |stop| {
            let input = Input {
                ring: input.consumer,
                hosted: input.hosted,
                doorbell: input.doorbell,
            };
            bus_thread(cfg, st, table, engine, input, ready_tx, &stop)
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
    instruments: InstrumentTable,
    engine: Arc<PriceTable>,
    input: Input,
    ready_tx: Ready,
    stop: &AtomicBool,
) {
    let set_up = connect::client(&cfg, &st).and_then(|mut c| {
        connect::last_value_stream(&mut c, &cfg)?;
        let key = connect::lease_bucket(&mut c, &cfg)?;
        c.subscribe(&cfg.wildcard());
        c.subscribe(&cfg.heartbeat_subject());
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
    let core_id = crate::model::fresh_stream_id();
    tracing::info!(core_id = format_args!("{core_id:016x}"), "bus core");
    let now = monotonic_ns();
    let symbols = instruments.len();
    let timing = LeaseTiming::new(cfg.lease_ms, cfg.heartbeat_ms);
    let lease = Lease::new(timing, core_id, now);
    let outbox = Outbox {
        client,
        subjects: instruments
            .instruments()
            .iter()
            .map(|i| cfg.subject(&i.name))
            .collect(),
        digits: instruments.instruments().iter().map(|i| i.digits).collect(),
        beacon: Beacon {
            subject: cfg.heartbeat_subject(),
            pacer: Pacer::new(cfg.heartbeat_ms),
            interval_ms: u32::try_from(cfg.heartbeat_ms).unwrap_or(u32::MAX),
            seq: 0,
            newest_engine_ns: 0,
        },
        stream: Stream {
            lead: Leadership::new(lease, key, cfg.clone()),
            seq: Sequencer::new(symbols),
            known: Known::new(symbols),
            health: FeedHealth::new(symbols, now),
            led_epoch: 0,
            fenced: false,
            disconnects: 0,
            relearn_ns: 0,
        },
        cfg,
        instruments,
        wall_offset_ns: crate::wire::wall_offset_ns(crate::clock::wall_ns(), monotonic_ns()),
        stats: st,
        engine,
    };
    outbox.run(input, stop);
}

impl Outbox {
    fn run(mut self, mut input: Input, stop: &AtomicBool) {
        match self.client.waker() {
            Ok(w) => input.doorbell.bind_waker(w),
            Err(e) => tracing::warn!(error = %e, "no waker for the bus thread; it polls"),
        }
        let mut idle_turns = 0u32;
        loop {
            let now = monotonic_ns();
            self.lead_turn(now);
            self.beat(now);
            // A hosted engine prices what its feeds left, into the ring.
            self.relearn(now);
            let engine_work = input.hosted.turn(now);
            let moved = self.turn(&mut input.ring, now);
            if moved > 0 {
                idle_turns = 0;
                self.client.flush();
                self.poll(Duration::ZERO);
                continue;
            }
            // Empty: the engine has gone (orderly stop) or we were told to.
            if input.ring.is_abandoned() || stop.load(Ordering::Acquire) {
                if input.ring.is_empty() {
                    break;
                }
                continue;
            }
            if engine_work > 0 || input.hosted.has_work() {
                idle_turns = 0;
                self.poll(Duration::ZERO);
                continue;
            }
            idle_turns = self.idle(&input, idle_turns);
        }
        self.client.flush();
        let bound = Duration::from_millis(self.cfg.lease_ms / 4);
        self.stream.lead.resign(&mut self.client, bound);
        self.stats.leader.set(0);
    }

    /// One idle turn, as a gateway shard's default wait (`spin-park`):
    /// spin, then yield (taking what the socket has each time), then sleep
    /// in the socket's poll until the doorbell, the socket or the timers
    /// ([`IDLE_WAIT_MS`]) wake it. Returns the idle turns so far. A price
    /// that follows the last within the spin and yield turns leaves
    /// without a kernel wake-up, as it does from a standalone server's
    /// shard: measured in BENCHMARKS.md ("Scale-out", bus-ratio).
    fn idle(&mut self, input: &Input, turns: u32) -> u32 {
        use crate::runtime::wait::{SPIN_TURNS, YIELD_TURNS};
        if turns < SPIN_TURNS {
            std::hint::spin_loop();
            return turns + 1;
        }
        if turns < SPIN_TURNS + YIELD_TURNS {
            self.poll(Duration::ZERO);
            std::thread::yield_now();
            return turns + 1;
        }
        crate::runtime::drill::point("bus", 0);
        let (ring, hosted) = (&input.ring, &input.hosted);
        if input
            .doorbell
            .prepare_sleep(|| !ring.is_empty() || hosted.has_work())
        {
            self.poll(Duration::from_millis(IDLE_WAIT_MS));
            input.doorbell.woke();
        }
        turns
    }

    /// Takes what arrived on the bus: the leader's heartbeats and prices,
    /// followed (`bus::follow`). A newer leader's heartbeat deposes this
    /// core at once.
    fn poll(&mut self, wait: Duration) {
        let disconnects = self.stats.disconnects.get();
        if disconnects != self.stream.disconnects {
            self.stream.disconnects = disconnects;
            self.stream.known.disconnected();
        }
        let hb_subject = self.beacon.subject.as_bytes();
        let (instruments, stream) = (&self.instruments, &mut self.stream);
        let mut deposed = None;
        let now = monotonic_ns();
        self.client.poll(wait, &mut |subject, payload| {
            if subject == hb_subject {
                deposed = deposed.or(stream.follow_heartbeat(payload, now));
            } else {
                stream.follow_price(instruments, subject, payload, now);
            }
        });
        if let Some(t) = deposed {
            self.on_transition(t, now);
        }
    }

    fn lead_turn(&mut self, now: u64) {
        let leads = matches!(self.stream.lead.lease.state(), LeaseState::Leader { .. });
        let healthy = self.stream.health.may_lead(leads, now);
        if let Some(t) = self.stream.lead.turn(&mut self.client, now, healthy) {
            self.on_transition(t, now);
        }
        let publishing = self.stream.lead.lease.publishing_epoch(now).is_some();
        let leads = matches!(self.stream.lead.lease.state(), LeaseState::Leader { .. });
        let fenced = leads && !publishing;
        if fenced != self.stream.fenced {
            self.stream.fenced = fenced;
            if fenced {
                tracing::warn!(
                    "no renewal of the leader lease confirmed in time: fenced, publishing stopped"
                );
            } else if leads {
                tracing::info!("leader lease confirmed again; publishing");
            }
        }
        self.stats.leader.set(u64::from(publishing));
    }

    fn on_transition(&mut self, t: Transition, now: u64) {
        let bucket = self.cfg.lease_bucket();
        match t {
            Transition::Acquired { .. } => self.take_over(now),
            Transition::Lost(cause) => {
                self.stream.seq.stop();
                self.stats.leader.set(0);
                self.stats.leases_lost.inc();
                match cause {
                    LossCause::AnotherCore(id) => tracing::warn!(
                        holder = format_args!("{id:016x}"),
                        "leader lease lost: another core holds it"
                    ),
                    LossCause::KeyGone => {
                        tracing::warn!("leader lease lost: the key expired or a standby took over")
                    }
                    LossCause::BucketLost => tracing::warn!(
                        bucket = %bucket,
                        "leader lease lost: the lease bucket is gone; creating it again"
                    ),
                    LossCause::Resigned => {
                        self.stats.leases_resigned.inc();
                        tracing::warn!(
                            "no fresh price from this core's feeds: leader lease handed on"
                        );
                    }
                }
            }
            Transition::BucketMissing => {
                tracing::warn!(bucket = %bucket, "the lease bucket is gone; creating it again")
            }
            Transition::BucketRecreated => {
                self.stats.lease_buckets_recreated.inc();
                tracing::info!(bucket = %bucket, "lease bucket created again");
            }
        }
    }

    /// Leads from now on: learns every symbol's last value (within one
    /// call's timeout in all, so a new leader is not silent long enough to
    /// be taken for dead), decides the stream and its numbering, and
    /// restates every price the engine has, flagged when the stream
    /// continues. A symbol whose highest sequence is still unknown is held
    /// back and read again on later turns ([`Outbox::relearn`]).
    fn take_over(&mut self, now: u64) {
        let read = self.read_last_values();
        let s = &mut self.stream;
        s.lead.lease.observe_epoch(s.known.epoch());
        let epoch = s.lead.lease.settle_epoch();
        let previous = s.known.stream_id();
        let c = s.known.continuation(&read, crate::model::fresh_stream_id());
        s.seq.start(&c);
        s.lead.set_stream(c.stream_id);
        s.known.heard(c.stream_id, epoch);
        s.led_epoch = epoch;
        self.stats.leases_taken.inc();
        self.stats.epoch.set(epoch);
        let held = c.first_seq.iter().filter(|f| f.is_none()).count();
        let stream = format_args!("{:016x}", c.stream_id);
        if c.continues {
            tracing::info!(
                epoch,
                stream = %stream,
                held,
                "leader lease taken; the stream continues"
            );
        } else if previous != 0 {
            self.stats.streams_started.inc();
            tracing::warn!(epoch, stream = %stream, "leader lease taken; a new stream starts");
        } else {
            tracing::info!(epoch, stream = %stream, "leader lease taken; a new stream starts");
        }
        self.restate(epoch, now);
    }

    /// Reads symbols' last values into what is known, within one call's
    /// timeout in all; per symbol, whether it was read (found or not).
    fn read_last_values(&mut self) -> Vec<bool> {
        let budget = self.stream.lead.lease.timing().request_timeout_ns;
        let deadline = monotonic_ns() + budget;
        (0..self.subjects.len())
            .map(|i| {
                let left = deadline.saturating_sub(monotonic_ns());
                left > 0 && self.read_last_value(i, Duration::from_nanos(left))
            })
            .collect()
    }

    /// Reads symbol `i`'s last value, waiting at most `bound`; true if it
    /// was read (found or not).
    fn read_last_value(&mut self, i: usize, bound: Duration) -> bool {
        let stream = self.cfg.stream();
        let subject = &self.subjects[i];
        match jetstream::last_for_subject(&mut self.client, &stream, subject, bound) {
            Ok(Some(m)) => {
                if let Some((stream_id, epoch, seq)) = super::codec::peek(&m.payload) {
                    self.stream.known.price(i, stream_id, epoch, seq);
                    self.stream.lead.lease.observe_epoch(epoch);
                }
                true
            }
            Ok(None) => true,
            Err(e) => {
                let e = crate::runtime::esc(&e);
                tracing::debug!(subject = %subject, error = %e, "last value at takeover");
                false
            }
        }
    }

    /// A leader with a symbol held back at its takeover reads its last
    /// value again, one symbol every [`RELEARN_EVERY_MS`], each read
    /// bounded by that period.
    fn relearn(&mut self, now: u64) {
        if now < self.stream.relearn_ns || self.stream.lead.lease.publishing_epoch(now).is_none() {
            return;
        }
        let Some(i) = self.stream.seq.unknown() else {
            return;
        };
        self.stream.relearn_ns = now + RELEARN_EVERY_MS * 1_000_000;
        if self.read_last_value(i, Duration::from_millis(RELEARN_EVERY_MS)) {
            if let Some(first) = self.stream.known.first_seq(i, true) {
                self.stream.seq.learned(i, first);
                tracing::info!(subject = %self.subjects[i], "a held-back symbol's last value read");
            }
        }
    }

    /// Publishes the engine's current price of every symbol, numbered for
    /// the stream just taken.
    fn restate(&mut self, epoch: u64, now: u64) {
        for symbol in 0..self.subjects.len() {
            let Some(mut p) = self.engine.read(symbol as u16, TOP_OF_BOOK) else {
                continue;
            };
            if p.seq == 0 {
                continue;
            }
            self.stream
                .health
                .on_price(symbol, p.flags & price_flags::STALE != 0, now);
            if self.stream.seq.number(&mut p) == Numbered::Publish {
                self.publish(&p, epoch);
            }
        }
        self.client.flush();
    }

    /// Publishes up to [`BATCH_MAX`] prices (a standby drains them
    /// unpublished); returns how many it took from the ring.
    fn turn(&mut self, ring: &mut rtrb::Consumer<Price>, now: u64) -> usize {
        let mut moved = 0;
        let epoch = self.stream.lead.lease.publishing_epoch(now);
        while moved < BATCH_MAX {
            let Ok(mut price) = ring.pop() else { break };
            moved += 1;
            let s = price.symbol as usize;
            let stale = price.flags & price_flags::STALE != 0;
            self.stream.health.on_price(s, stale, now);
            let Some(epoch) = epoch else {
                self.stats.standby_discarded.inc();
                self.stream.seq.missed(s);
                continue;
            };
            match self.stream.seq.number(&mut price) {
                Numbered::Publish => self.publish(&price, epoch),
                Numbered::Superseded => self.stats.superseded.inc(),
                Numbered::Unknown => self.stats.held_unknown.inc(),
            }
        }
        moved
    }

    /// Publishes one numbered price with `epoch`.
    #[inline]
    fn publish(&mut self, price: &Price, epoch: u64) {
        let s = price.symbol as usize;
        let (Some(subject), Some(&digits)) = (self.subjects.get(s), self.digits.get(s)) else {
            self.stats.publish_errors.inc();
            return;
        };
        let mut frame = [0u8; BUS_MESSAGE_LEN];
        let n = super::codec::encode(&mut frame, price, epoch, digits, self.wall_offset_ns);
        if self.client.publish(subject, &frame[..n]) {
            self.stats.published.inc();
            self.beacon.newest_engine_ns = price.engine_time_ns;
            self.stream
                .known
                .price_live(s, price.stream_id, epoch, price.seq);
        } else {
            self.stats.publish_errors.inc();
        }
    }

    /// Sends a heartbeat when one is due and this core may publish (holds
    /// the lease, not fenced). Allocates nothing.
    fn beat(&mut self, now_ns: u64) {
        let Some(epoch) = self.stream.lead.lease.publishing_epoch(now_ns) else {
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
            core_id: self.stream.lead.lease.core_id(),
            seq: b.seq + 1,
            published: self.stats.published.get(),
            newest_price_utc_ns: match b.newest_engine_ns {
                0 => 0,
                t => utc(t),
            },
            sent_utc_ns: utc(now_ns),
            fresh_symbols: self.stream.health.fresh_symbols(),
            stream_id: self.stream.seq.stream_id(),
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

impl Stream {
    /// Another core's leader heartbeat: the current stream and epoch, the
    /// leader alive; one of a newer epoch than this core leads with
    /// deposes it.
    fn follow_heartbeat(&mut self, payload: &[u8], now: u64) -> Option<Transition> {
        let hb = heartbeat::decode(payload).ok()?;
        let lease = &mut self.lead.lease;
        if hb.flags & heartbeat::FLAG_LEADER == 0 || hb.core_id == lease.core_id() {
            return None;
        }
        self.known.heard(hb.stream_id, hb.epoch);
        lease.heard_leader(hb.epoch, now);
        lease.superseded(hb.epoch, now)
    }

    /// A price on the bus: its stream, epoch and sequence are known from
    /// now on. This core's own prices (its leading epoch) are skipped
    /// before they are decoded.
    #[inline]
    fn follow_price(
        &mut self,
        instruments: &InstrumentTable,
        subject: &[u8],
        payload: &[u8],
        now: u64,
    ) {
        let leading = self.lead.lease.publishing_epoch(now).is_some();
        if leading && super::codec::epoch(payload) == self.led_epoch {
            return;
        }
        let Some((stream_id, epoch, seq)) = super::codec::peek(payload) else {
            return;
        };
        let token = subject.rsplit(|&b| b == b'.').next().unwrap_or_default();
        let Some(inst) = std::str::from_utf8(token)
            .ok()
            .and_then(|n| instruments.by_name(n))
        else {
            return;
        };
        self.known
            .price_live(inst.id as usize, stream_id, epoch, seq);
        self.lead.lease.observe_epoch(epoch);
    }
}
