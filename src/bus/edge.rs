//! Edge side: prices from the bus into the price table and the gateway
//! shards' rings.
//!
//! The `pw-bus` thread is the edge's only writer of the price table and
//! the producer of one SPSC ring per gateway shard (the same
//! [`ShardPublisher`] the engine uses, so a full ring conflates per symbol
//! and a shard receives only the symbols its sessions want). Before it
//! reports started it subscribes to every price subject and then loads
//! every configured symbol's last value from the stream, so the table is complete
//! before the first terminal is accepted; live prices at or below a
//! symbol's loaded sequence are dropped as duplicates. A price that skips
//! sequence numbers (missed while the edge was reconnecting to another
//! node, or dropped because more than the client keeps arrived during the
//! last-value gets) is delivered flagged CONFLATED and counted: no gap
//! reaches a terminal unflagged. Receiving a price allocates nothing: the
//! client hands the message over borrowed from its read buffer.
//!
//! Every applied price is also appended to the edge's tick history (the
//! store request workers answer HistoryRequest from), so every edge holds
//! the same recent prices of a symbol. While the edge hears nothing from
//! the bus for longer than the max age (`bus::staleness`), it repeats
//! every symbol's last price flagged STALE (and CONFLATED, so gateways send
//! it as a PriceSnapshot with the same sequence, which a terminal always
//! accepts); the next fresh price clears the flag. Hearing the bus means a
//! valid price or a heartbeat ([`super::heartbeat`]) of the current lease
//! epoch, so a quiet market whose core is alive is not flagged.
//!
//! Sequences count per stream (every price names its stream): a symbol's
//! price of another stream than its last one starts its sequence afresh
//! (gateways send it as a snapshot of the new stream), and the price
//! table names the current stream for LogonAccepted. A price is *backed*
//! while its epoch is the current one: after a takeover the new leader
//! restates every symbol it prices, and those it does not are flagged
//! STALE one max age after the old leader was last heard; a leader's
//! heartbeats clear the edge's STALE flag only from backed prices. An
//! edge that starts loads every last value, then waits (at most one max
//! age) to hear a live core before it reports started; hearing none, it
//! starts with every price flagged, as the edges already running show
//! them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::heartbeat::{self, FLAG_LEADER};
use super::nats::client::Client;
use super::nats::jetstream::{self, JsError};
use super::staleness::Staleness;
use super::thread::BusThread;
use super::{connect, BusConfig, BusError, BusStats, LOAD_TIMEOUT};
use crate::clock::monotonic_ns;
use crate::engine::{
    FanoutStats, PriceTable, ShardInput, ShardPublisher, SymbolInterest, TickHistory,
};
use crate::model::{price_flags, InstrumentTable, Markups, Price, Tick, TOP_OF_BOOK};
use crate::runtime::{Doorbell, HostedTasks};

/// How long the bus thread waits for a message before it checks for a
/// stop and flushes parked prices.
const POLL_MS: u64 = 50;
/// Pause before a direct get is asked again after status 503.
const RETRY_MS: u64 = 20;
/// The provider id of an edge's history ticks: an edge holds the core's
/// aggregated prices, not the providers' quotes, so no single provider
/// stands behind a tick.
pub const HISTORY_PROVIDER_AGGREGATED: u16 = u16::MAX;

/// What an edge's gateway is built from.
pub struct EdgeParts {
    /// One input per gateway shard, fed by the bus thread.
    pub shards: Vec<ShardInput>,
    /// The price table the bus thread writes (the gateway's snapshots).
    pub table: Arc<PriceTable>,
    /// Each shard ring's fan-out counters, in shard order.
    pub fanout: Vec<Arc<FanoutStats>>,
    /// Recent prices per symbol, fed by the bus thread (HistoryRequest).
    pub history: Arc<TickHistory>,
}

/// A running edge subscriber.
pub struct BusSubscriber {
    thread: BusThread,
    /// The bus thread's counters.
    pub stats: Arc<BusStats>,
}

/// The bus thread's state: table, rings, and per symbol the stream,
/// epoch and sequence of its last price.
struct Inbox {
    table: Arc<PriceTable>,
    instruments: InstrumentTable,
    publishers: Vec<ShardPublisher>,
    last_seq: Vec<u64>,
    sym_stream: Vec<u64>,
    sym_epoch: Vec<u64>,
    history: Arc<TickHistory>,
    /// Liveness of the bus, and the newest lease epoch heard.
    staleness: Staleness,
    /// When the subscriptions were made (the start-up wait counts from it).
    started_ns: u64,
    max_age_ms: u64,
    heartbeat_subject: String,
    /// The core whose heartbeats were taken last (0 before any).
    core_id: u64,
    /// Per symbol: this edge flagged its price stale (not the core's
    /// engine) and no fresh price came since.
    stale_by_edge: Vec<bool>,
    /// Some entry of `stale_by_edge` is set.
    stale_shown: bool,
    /// The last load of last values (at start or after a reconnect)
    /// succeeded: the table is as new as the stream.
    loaded: bool,
    wall_offset_ns: i64,
    stats: Arc<BusStats>,
}

fn build_shards(
    instruments: &InstrumentTable,
    shards: usize,
    ring: usize,
    history_depth: usize,
) -> (Vec<ShardPublisher>, EdgeParts) {
    let symbols = instruments.len();
    let mut publishers = Vec::with_capacity(shards);
    let mut inputs = Vec::with_capacity(shards);
    for index in 0..shards {
        let (producer, consumer) = rtrb::RingBuffer::new(ring);
        let doorbell = Doorbell::new();
        let interest = SymbolInterest::none(symbols);
        let p = ShardPublisher::new(producer, symbols, doorbell.clone())
            .with_interest(interest.clone());
        inputs.push(ShardInput {
            index,
            consumer,
            doorbell,
            interest,
            fanout: p.stats.clone(),
            hosted: HostedTasks::default(),
        });
        publishers.push(p);
    }
    let parts = EdgeParts {
        fanout: publishers.iter().map(|p| p.stats.clone()).collect(),
        shards: inputs,
        table: Arc::new(PriceTable::with_markups(Markups::new(instruments))),
        history: Arc::new(TickHistory::new(symbols.max(1), history_depth.max(1))),
    };
    (publishers, parts)
}

impl BusSubscriber {
    /// Connects, subscribes, loads every last value, and returns once the
    /// table holds them (or the error). `shards` rings of `ring` prices;
    /// `history_depth` prices kept per symbol for HistoryRequest.
    pub fn start(
        cfg: &BusConfig,
        instruments: &InstrumentTable,
        shards: usize,
        ring: usize,
        history_depth: usize,
        supervisor: &crate::runtime::Supervisor,
    ) -> Result<(BusSubscriber, EdgeParts), BusError> {
        let (publishers, parts) = build_shards(instruments, shards, ring, history_depth);
        let stats = Arc::new(BusStats::default());
        let inbox = Inbox {
            table: parts.table.clone(),
            instruments: instruments.clone(),
            publishers,
            last_seq: vec![0; instruments.len()],
            sym_stream: vec![0; instruments.len()],
            sym_epoch: vec![0; instruments.len()],
            history: parts.history.clone(),
            staleness: Staleness::new(cfg.max_age_ms, monotonic_ns()),
            started_ns: 0,
            max_age_ms: cfg.max_age_ms,
            heartbeat_subject: cfg.heartbeat_subject(),
            core_id: 0,
            stale_by_edge: vec![false; instruments.len()],
            stale_shown: false,
            loaded: false,
            wall_offset_ns: crate::wire::wall_offset_ns(crate::clock::wall_ns(), monotonic_ns()),
            stats: stats.clone(),
        };
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let cfg = cfg.clone();
        let permanent = crate::runtime::Policy::Permanent;
        let thread = BusThread::spawn(supervisor, permanent, move |stop| {
            inbox.run(cfg, ready_tx, stop)
        })?;
        let wait = super::CONNECT_TIMEOUT * 2 + LOAD_TIMEOUT;
        // On an error the thread is halted as `thread` drops.
        match ready_rx.recv_timeout(wait) {
            Ok(Ok(())) => Ok((BusSubscriber { thread, stats }, parts)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(BusError::Load(format!("not loaded within {wait:?}"))),
        }
    }

    /// Stops taking prices; the shards' rings are then abandoned.
    pub fn stop(mut self) {
        self.thread.halt();
    }
}

type Ready = crossbeam_channel::Sender<Result<(), BusError>>;

impl Inbox {
    fn run(mut self, cfg: BusConfig, ready: Ready, stop: Arc<AtomicBool>) {
        let mut client = match connect::client(&cfg, &self.stats).and_then(|mut c| {
            connect::last_value_stream(&mut c, &cfg)?;
            Ok(c)
        }) {
            Ok(c) => c,
            Err(e) => {
                crate::runtime::supervise::end_expected();
                return drop(ready.send(Err(e)));
            }
        };
        // Live first, then the last values: nothing published in between
        // is missed (it waits in the client during the gets), and the
        // overlap is dropped by sequence.
        client.subscribe(&cfg.wildcard());
        client.subscribe(&cfg.heartbeat_subject());
        self.started_ns = monotonic_ns();
        self.staleness = Staleness::new(self.max_age_ms, self.started_ns);
        if let Err(e) = self.load(&mut client, &cfg, &stop) {
            crate::runtime::supervise::end_expected();
            return drop(ready.send(Err(e)));
        }
        self.loaded = true;
        self.await_a_live_core(&mut client, &stop);
        let _ = ready.send(Ok(()));
        self.live(&mut client, &cfg, &stop);
    }

    /// Loads every configured symbol's last value from the stream (a
    /// direct get per subject, answered by any replica). A symbol the
    /// stream has never seen stays empty, as on a fresh core. A stream
    /// whose direct-get responders are not up yet (status 503, just
    /// created) is asked again until [`LOAD_TIMEOUT`].
    fn load(&mut self, c: &mut Client, cfg: &BusConfig, stop: &AtomicBool) -> Result<(), BusError> {
        let deadline = Instant::now() + LOAD_TIMEOUT;
        let stream = cfg.stream();
        let names: Vec<String> = self
            .instruments
            .instruments()
            .iter()
            .map(|i| i.name.clone())
            .collect();
        for name in names {
            let subject = cfg.subject(&name);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() || stop.load(Ordering::Acquire) {
                    return Err(BusError::Load(format!("stopped or past {LOAD_TIMEOUT:?}")));
                }
                match jetstream::last_for_subject(c, &stream, &subject, left) {
                    Ok(Some(m)) => {
                        if self.take_stored(subject.as_bytes(), &m.payload) {
                            self.stats.last_values_loaded.inc();
                        }
                    }
                    Ok(None) => {}
                    Err(JsError::Status(503)) => {
                        std::thread::sleep(Duration::from_millis(RETRY_MS).min(left));
                        continue;
                    }
                    Err(e) => return Err(BusError::Load(format!("{name}: {e}"))),
                }
                break;
            }
        }
        // Loaded prices of an older epoch than the newest: no live core
        // stands behind them.
        self.staleness.check_backing_now(monotonic_ns());
        self.notify();
        Ok(())
    }

    /// Before the edge reports started: polls until a price or heartbeat
    /// of a live core arrives, at most one max age from the subscription.
    /// Hearing none, every loaded price is flagged stale at once (the
    /// other edges already say so), not one max age later.
    fn await_a_live_core(&mut self, c: &mut Client, stop: &AtomicBool) {
        let deadline = self.started_ns + self.max_age_ms * 1_000_000;
        while !self.staleness.heard_any() && !stop.load(Ordering::Acquire) {
            let now = monotonic_ns();
            if now >= deadline {
                if self.staleness.force_flag() {
                    self.flag_stale();
                }
                break;
            }
            let wait = Duration::from_nanos(deadline - now).min(Duration::from_millis(POLL_MS));
            self.poll_once(c, wait);
        }
        self.check_staleness(monotonic_ns());
        self.notify();
    }

    /// One turn of the client; returns how many messages it delivered.
    fn poll_once(&mut self, c: &mut Client, wait: Duration) -> usize {
        let mut got = 0;
        c.poll(wait, &mut |subject, payload| {
            got += 1;
            if subject == self.heartbeat_subject.as_bytes() {
                crate::runtime::drill::point("bus", 0);
                self.take_heartbeat(payload);
            } else {
                self.take(subject, payload);
            }
        });
        got
    }

    /// The staleness decisions of one turn: a silence flags every price; a
    /// takeover's due time flags the prices nobody restated; hearing the
    /// bus again clears this edge's flags from backed prices.
    fn check_staleness(&mut self, now: u64) {
        if self.staleness.due(now) {
            self.flag_stale();
        } else if self.stale_shown && !self.staleness.is_flagged() && self.loaded {
            self.clear_stale();
        }
        if self.staleness.takeover_due(now) {
            self.flag_unbacked();
        }
    }

    fn live(&mut self, c: &mut Client, cfg: &BusConfig, stop: &AtomicBool) {
        use crate::runtime::wait::YIELD_TURNS;
        // The first connect is not a reconnect.
        self.stats.take_reconnected();
        let mut idle_turns = YIELD_TURNS;
        while !stop.load(Ordering::Acquire) {
            if self.stats.take_reconnected() {
                // Prices published while this edge had no server: the
                // newest of each symbol comes back from the stream (a
                // skipped sequence is flagged like any gap).
                self.stats.reloads.inc();
                self.loaded = false;
                match self.load(c, cfg, stop) {
                    Ok(()) => self.loaded = true,
                    Err(e) => {
                        tracing::warn!(error = %crate::runtime::esc(&e), "reloading last values after a reconnect")
                    }
                }
            }
            let wait = match (self.parked(), idle_turns < YIELD_TURNS) {
                (true, _) => Duration::from_millis(1),
                // As a gateway shard's default wait: a price that follows
                // the last within the yield turns is taken without a kernel
                // wake-up (BENCHMARKS.md, "Scale-out", bus-ratio).
                (false, true) => {
                    std::thread::yield_now();
                    Duration::ZERO
                }
                (false, false) => Duration::from_millis(POLL_MS),
            };
            let got = self.poll_once(c, wait);
            idle_turns = if got > 0 {
                0
            } else {
                idle_turns.saturating_add(1)
            };
            self.check_staleness(monotonic_ns());
            self.notify();
        }
    }

    fn parked(&self) -> bool {
        self.publishers.iter().any(|p| p.parked() > 0)
    }

    /// Decodes and applies one live message; true if it was applied. A
    /// price of an older lease epoch than one already seen is dropped
    /// (fencing a core that lost the lease).
    fn take(&mut self, subject: &[u8], payload: &[u8]) -> bool {
        let (epoch, stream) = (
            super::codec::epoch(payload),
            super::codec::stream_id(payload),
        );
        if !self.staleness.admits(epoch, stream) {
            self.stats.stale_epoch_dropped.inc();
            return false;
        }
        let Some(b) = self.decode(subject, payload) else {
            return false;
        };
        // Only a valid price moves the epoch on and shows the bus alive.
        self.staleness.heard(epoch, stream, b.price.receive_time_ns);
        self.on_current();
        self.apply(b.price, epoch)
    }

    /// A last value read from the stream: applied whatever its epoch (it
    /// is the symbol's newest price, flagged stale later if no live core
    /// stands behind it); it moves the epoch on but shows nothing alive.
    fn take_stored(&mut self, subject: &[u8], payload: &[u8]) -> bool {
        let Some(b) = self.decode(subject, payload) else {
            return false;
        };
        self.staleness.learn(b.epoch, b.price.stream_id);
        self.on_current();
        self.apply(b.price, b.epoch)
    }

    fn decode(&mut self, subject: &[u8], payload: &[u8]) -> Option<super::codec::BusPrice> {
        let token = subject.rsplit(|&b| b == b'.').next().unwrap_or_default();
        let symbol = std::str::from_utf8(token).unwrap_or_default();
        let now = monotonic_ns();
        match super::codec::decode(payload, symbol, &self.instruments, self.wall_offset_ns, now) {
            Ok(b) => Some(b),
            Err(e) => {
                self.stats.decode_errors.inc();
                tracing::debug!(
                    symbol = %crate::runtime::esc(symbol),
                    error = %crate::runtime::esc(&e),
                    "bus message refused"
                );
                None
            }
        }
    }

    /// The current stream is what the price table names for LogonAccepted
    /// (a change is logged and counted once).
    fn on_current(&mut self) {
        let (epoch, stream) = self.staleness.current();
        self.stats.epoch.set(epoch);
        let before = self.table.stream_id();
        if before == stream {
            return;
        }
        self.table.set_stream_id(stream);
        if before != 0 {
            self.stats.streams_adopted.inc();
        }
        tracing::info!(
            stream = format_args!("{stream:016x}"),
            epoch,
            previous = format_args!("{before:016x}"),
            "prices of a new stream"
        );
    }

    /// Takes one message of the heartbeat subject: a leader's heartbeat of
    /// the current (or a newer) epoch shows the bus alive; an older
    /// epoch's is dropped, anything else refused, each counted. Allocates
    /// nothing except the log line when a new core's heartbeats begin.
    fn take_heartbeat(&mut self, payload: &[u8]) {
        let hb = match heartbeat::decode(payload) {
            Ok(hb) if hb.flags & FLAG_LEADER != 0 => hb,
            Ok(_) => return self.stats.heartbeat_refused.inc(),
            Err(e) => {
                self.stats.heartbeat_refused.inc();
                return tracing::debug!(error = %crate::runtime::esc(&e), "bus heartbeat refused");
            }
        };
        let now = monotonic_ns();
        if !self.staleness.heard(hb.epoch, hb.stream_id, now) {
            return self.stats.heartbeat_stale_epoch.inc();
        }
        self.on_current();
        self.stats.heartbeats_received.inc();
        self.stats.heartbeat_at(now);
        if hb.core_id != self.core_id {
            self.core_id = hb.core_id;
            tracing::info!(
                core_id = format_args!("{:016x}", hb.core_id),
                epoch = hb.epoch,
                interval_ms = hb.interval_ms,
                "heartbeats from a core"
            );
            if u64::from(hb.interval_ms).saturating_mul(2) > self.max_age_ms {
                tracing::warn!(
                    interval_ms = hb.interval_ms,
                    max_age_ms = self.max_age_ms,
                    "the core's heartbeat period is more than half this edge's \
                     --bus-max-age-ms: a quiet market may be flagged stale"
                );
            }
        }
    }

    /// Applies one price of `epoch` in sequence order within its stream:
    /// duplicates dropped, gaps flagged; the first price of another stream
    /// starts the symbol's sequence afresh.
    fn apply(&mut self, mut p: Price, epoch: u64) -> bool {
        let s = p.symbol as usize;
        debug_assert!(s < self.last_seq.len());
        let last = self.last_seq[s];
        if p.stream_id != self.sym_stream[s] {
            self.sym_stream[s] = p.stream_id;
        } else if p.seq <= last {
            self.stats.duplicates_dropped.inc();
            return false;
        } else if last != 0 && p.seq > last + 1 {
            p.flags |= price_flags::CONFLATED;
            self.stats.gaps_flagged.inc();
        }
        self.last_seq[s] = p.seq;
        self.sym_epoch[s] = epoch;
        self.stale_by_edge[s] = false;
        self.table.write(&p);
        for publisher in &mut self.publishers {
            publisher.publish(&p);
        }
        self.history.push(&history_tick(&p));
        self.stats.received.inc();
        true
    }

    /// The bus has been silent past the max age: every symbol's last price
    /// goes out again, same sequence, flagged STALE and CONFLATED (a
    /// PriceSnapshot on the wire, which terminals always accept). A price
    /// already stale is left alone. Allocates nothing.
    fn flag_stale(&mut self) {
        let mut flagged = 0u64;
        for symbol in 0..self.last_seq.len() {
            flagged += u64::from(self.repeat_stale(symbol));
        }
        self.stats.stale_flagged.add(flagged);
        self.stale_shown |= flagged > 0;
        tracing::warn!(
            symbols = flagged,
            "no price from the bus within the max age; flagged stale"
        );
    }

    /// Repeats `symbol`'s last price flagged STALE and CONFLATED, same
    /// sequence, to the table and every publisher; true if it did (false
    /// for a symbol never priced or already stale).
    fn repeat_stale(&mut self, symbol: usize) -> bool {
        let Some(mut p) = self.table.read(symbol as u16, TOP_OF_BOOK) else {
            return false;
        };
        if p.seq == 0 || p.flags & price_flags::STALE != 0 {
            return false;
        }
        p.flags |= price_flags::STALE | price_flags::CONFLATED;
        self.table.write(&p);
        for publisher in &mut self.publishers {
            publisher.publish(&p);
        }
        self.stale_by_edge[symbol] = true;
        true
    }

    /// Whether the core that leads now stands behind `symbol`'s price:
    /// it is of the current epoch and stream.
    fn backed(&self, symbol: usize) -> bool {
        (self.sym_epoch[symbol], self.sym_stream[symbol]) == self.staleness.current()
    }

    /// A takeover's due time came (or prices were loaded): every price the
    /// leader of the current epoch has not published is repeated flagged
    /// STALE (and CONFLATED), same sequence. A frozen price is stale
    /// whatever the heartbeats say. Allocates nothing.
    fn flag_unbacked(&mut self) {
        let mut flagged = 0u64;
        for symbol in 0..self.last_seq.len() {
            if self.backed(symbol) || self.stale_by_edge[symbol] {
                continue;
            }
            flagged += u64::from(self.repeat_stale(symbol));
        }
        self.stats.unbacked_flagged.add(flagged);
        self.stale_shown |= flagged > 0;
        if flagged > 0 {
            tracing::warn!(
                symbols = flagged,
                "prices no live core stands behind (an older epoch's); flagged stale"
            );
        }
    }

    /// The bus is heard again (a price or heartbeat of the current epoch)
    /// and the table is as new as the stream: every backed price this edge
    /// flagged STALE (not one the core's engine flagged) goes out again,
    /// same sequence, without the flag (CONFLATED, so gateways send it as
    /// a PriceSnapshot to subscribers that had the stale one). A quiet
    /// market's prices do not stay stale until its next tick; an older
    /// epoch's stay stale until the current leader publishes them.
    /// Allocates nothing.
    fn clear_stale(&mut self) {
        let mut cleared = 0u64;
        for symbol in 0..self.last_seq.len() {
            if !self.stale_by_edge[symbol] || !self.backed(symbol) {
                continue;
            }
            self.stale_by_edge[symbol] = false;
            let Some(mut p) = self.table.read(symbol as u16, TOP_OF_BOOK) else {
                continue;
            };
            if p.flags & price_flags::STALE == 0 {
                continue;
            }
            p.flags = (p.flags & !price_flags::STALE) | price_flags::CONFLATED;
            self.table.write(&p);
            for publisher in &mut self.publishers {
                publisher.publish(&p);
            }
            cleared += 1;
        }
        self.stats.stale_cleared.add(cleared);
        // Those left flagged are unbacked: only a fresh price clears them.
        self.stale_shown = false;
        if cleared > 0 {
            tracing::info!(
                symbols = cleared,
                "the bus is heard again; stale flags cleared"
            );
        }
    }

    fn notify(&mut self) {
        for publisher in &mut self.publishers {
            publisher.flush();
            publisher.notify();
        }
    }
}

/// The history entry of a price received from the bus: the aggregated top
/// of book, with no single provider behind it.
#[inline]
fn history_tick(p: &Price) -> Tick {
    Tick {
        bid: p.bid,
        ask: p.ask,
        bid_size: p.bid_size,
        ask_size: p.ask_size,
        provider_time_ns: p.provider_time_ns,
        receive_time_ns: p.receive_time_ns,
        feed_seq: p.seq,
        symbol: p.symbol,
        provider: HISTORY_PROVIDER_AGGREGATED,
        flags: 0,
    }
}
