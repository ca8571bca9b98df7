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
//! node, or dropped by a full client buffer) is delivered flagged
//! CONFLATED and counted: no gap reaches a terminal unflagged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use super::{connect, BusConfig, BusError, BusStats, BATCH_MAX, LOAD_TIMEOUT};
use crate::clock::monotonic_ns;
use crate::engine::{FanoutStats, PriceTable, ShardInput, ShardPublisher, SymbolInterest};
use crate::model::{price_flags, InstrumentTable, Markups, Price};
use crate::runtime::{Doorbell, HostedTasks};

/// How long the bus thread waits for a message before it checks for a
/// stop and flushes parked prices.
const POLL_MS: u64 = 50;

/// What an edge's gateway is built from.
pub struct EdgeParts {
    /// One input per gateway shard, fed by the bus thread.
    pub shards: Vec<ShardInput>,
    pub table: Arc<PriceTable>,
    pub fanout: Vec<Arc<FanoutStats>>,
}

/// A running edge subscriber.
pub struct BusSubscriber {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<BusStats>,
}

/// The bus thread's state: table, rings, and the last sequence per symbol.
struct Inbox {
    table: Arc<PriceTable>,
    instruments: InstrumentTable,
    publishers: Vec<ShardPublisher>,
    last_seq: Vec<u64>,
    /// The newest lease epoch seen.
    epoch: u64,
    wall_offset_ns: i64,
    stats: Arc<BusStats>,
}

fn build_shards(
    instruments: &InstrumentTable,
    shards: usize,
    ring: usize,
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
    };
    (publishers, parts)
}

impl BusSubscriber {
    /// Connects, subscribes, loads every last value, and returns once the
    /// table holds them (or the error). `shards` rings of `ring` prices.
    pub fn start(
        cfg: &BusConfig,
        instruments: &InstrumentTable,
        shards: usize,
        ring: usize,
    ) -> Result<(BusSubscriber, EdgeParts), BusError> {
        let (publishers, parts) = build_shards(instruments, shards, ring);
        let stats = Arc::new(BusStats::default());
        let inbox = Inbox {
            table: parts.table.clone(),
            instruments: instruments.clone(),
            publishers,
            last_seq: vec![0; instruments.len()],
            epoch: 0,
            wall_offset_ns: crate::wire::wall_offset_ns(crate::clock::wall_ns(), monotonic_ns()),
            stats: stats.clone(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let (cfg, stop2) = (cfg.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("pw-bus".into())
            .spawn(move || {
                let rt = match super::runtime() {
                    Ok(rt) => rt,
                    Err(e) => return drop(ready_tx.send(Err(e))),
                };
                rt.block_on(inbox.run(cfg, ready_tx, stop2));
            })
            .map_err(|e| BusError::Thread(e.to_string()))?;
        let mut sub = BusSubscriber {
            stop,
            thread: Some(thread),
            stats,
        };
        let wait = super::CONNECT_TIMEOUT * 2 + LOAD_TIMEOUT;
        match ready_rx.recv_timeout(wait) {
            Ok(Ok(())) => Ok((sub, parts)),
            Ok(Err(e)) => {
                sub.halt();
                Err(e)
            }
            Err(_) => {
                sub.halt();
                Err(BusError::Load(format!("not loaded within {wait:?}")))
            }
        }
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Stops taking prices; the shards' rings are then abandoned.
    pub fn stop(mut self) {
        self.halt();
    }
}

impl Drop for BusSubscriber {
    fn drop(&mut self) {
        self.halt();
    }
}

type Ready = crossbeam_channel::Sender<Result<(), BusError>>;

impl Inbox {
    async fn run(mut self, cfg: BusConfig, ready: Ready, stop: Arc<AtomicBool>) {
        let (client, stream) = match connect::edge(&cfg, &self.stats).await {
            Ok(c) => c,
            Err(e) => return drop(ready.send(Err(e))),
        };
        // Live first, then the last values: nothing published in between
        // is missed, and the overlap is dropped by sequence.
        let mut live = match client.subscribe(cfg.wildcard()).await {
            Ok(s) => s,
            Err(e) => return drop(ready.send(Err(BusError::Load(e.to_string())))),
        };
        if let Err(e) = self.load(&cfg, &stream, &stop).await {
            return drop(ready.send(Err(e)));
        }
        let _ = ready.send(Ok(()));
        self.live(&mut live, &cfg, &stream, &stop).await;
    }

    /// Loads every configured symbol's last value from the stream (a
    /// direct get per subject, answered by the stream's leader). A symbol
    /// the stream has never seen stays empty, as on a fresh core.
    async fn load(
        &mut self,
        cfg: &BusConfig,
        stream: &async_nats::jetstream::stream::Stream,
        stop: &AtomicBool,
    ) -> Result<(), BusError> {
        use async_nats::jetstream::stream::DirectGetErrorKind;
        let deadline = Instant::now() + LOAD_TIMEOUT;
        let names: Vec<String> = self
            .instruments
            .instruments()
            .iter()
            .map(|i| i.name.clone())
            .collect();
        for name in names {
            if Instant::now() >= deadline || stop.load(Ordering::Acquire) {
                return Err(BusError::Load(format!("stopped or past {LOAD_TIMEOUT:?}")));
            }
            match stream.direct_get_last_for_subject(cfg.subject(&name)).await {
                Ok(m) => {
                    if self.take(m.subject.as_str(), &m.payload) {
                        self.stats.last_values_loaded.inc();
                    }
                }
                Err(e) if e.kind() == DirectGetErrorKind::NotFound => {}
                Err(e) => return Err(BusError::Load(format!("{name}: {e}"))),
            }
        }
        self.notify();
        Ok(())
    }

    async fn live(
        &mut self,
        live: &mut async_nats::Subscriber,
        cfg: &BusConfig,
        stream: &async_nats::jetstream::stream::Stream,
        stop: &AtomicBool,
    ) {
        let poll = Duration::from_millis(POLL_MS);
        // The first connect is not a reconnect.
        self.stats.take_reconnected();
        while !stop.load(Ordering::Acquire) {
            if self.stats.take_reconnected() {
                // Prices published while this edge had no server: the
                // newest of each symbol comes back from the stream (a
                // skipped sequence is flagged like any gap).
                self.stats.reloads.inc();
                if let Err(e) = self.load(cfg, stream, stop).await {
                    tracing::warn!(error = %e, "reloading last values after a reconnect");
                }
            }
            let wait = if self.parked() {
                Duration::from_millis(1)
            } else {
                poll
            };
            if let Ok(Some(m)) = tokio::time::timeout(wait, live.next()).await {
                self.take(m.subject.as_str(), &m.payload);
                // Whatever else already arrived goes out in the same turn.
                let mut more = 1;
                while more < BATCH_MAX {
                    let Some(Some(m)) = futures_util::FutureExt::now_or_never(live.next()) else {
                        break;
                    };
                    self.take(m.subject.as_str(), &m.payload);
                    more += 1;
                }
            }
            self.notify();
        }
    }

    fn parked(&self) -> bool {
        self.publishers.iter().any(|p| p.parked() > 0)
    }

    /// Decodes and applies one message; true if it was applied. A price
    /// of an older lease epoch than one already seen is dropped (fencing
    /// a core that lost the lease).
    fn take(&mut self, subject: &str, payload: &[u8]) -> bool {
        let epoch = super::codec::epoch(payload);
        if epoch < self.epoch {
            self.stats.stale_epoch_dropped.inc();
            return false;
        }
        let symbol = subject.rsplit('.').next().unwrap_or_default();
        let now = monotonic_ns();
        match super::codec::decode(payload, symbol, &self.instruments, self.wall_offset_ns, now) {
            Ok(p) => {
                // Only a valid price moves the epoch on.
                self.epoch = epoch;
                self.apply(p)
            }
            Err(e) => {
                self.stats.decode_errors.inc();
                tracing::debug!(subject, error = %e, "bus message refused");
                false
            }
        }
    }

    /// Applies one price in sequence order: duplicates dropped, gaps flagged.
    fn apply(&mut self, mut p: Price) -> bool {
        let s = p.symbol as usize;
        debug_assert!(s < self.last_seq.len());
        let last = self.last_seq[s];
        if p.seq <= last {
            self.stats.duplicates_dropped.inc();
            return false;
        }
        if last != 0 && p.seq > last + 1 {
            p.flags |= price_flags::CONFLATED;
            self.stats.gaps_flagged.inc();
        }
        self.last_seq[s] = p.seq;
        self.table.write(&p);
        for publisher in &mut self.publishers {
            publisher.publish(&p);
        }
        self.stats.received.inc();
        true
    }

    fn notify(&mut self) {
        for publisher in &mut self.publishers {
            publisher.flush();
            publisher.notify();
        }
    }
}
