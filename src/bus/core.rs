//! Core side: the engine's prices from a shard ring onto the bus.
//!
//! The engine writes into an ordinary shard ring (every symbol wanted);
//! the `pw-bus` thread drains it, encodes each price into a fixed frame on
//! its stack and hands it to the NATS client. The engine never waits on
//! the bus: a full ring makes it conflate per symbol (latest wins, flagged
//! CONFLATED) exactly as for a slow gateway shard. When the ring is empty
//! the thread sleeps [`IDLE_POLL_MS`] on the runtime's timer, which lets
//! the client's connection task run (pings, reconnects).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use async_nats::Subject;
use bytes::Bytes;

use super::{connect, BusConfig, BusError, BusStats, BATCH_MAX, IDLE_POLL_MS};
use crate::engine::ShardInput;
use crate::model::{InstrumentTable, Price};
use crate::wire::PRICE_FRAME_LEN;

/// A running core publisher; [`BusPublisher::stop`] drains and flushes.
pub struct BusPublisher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<BusStats>,
}

/// What the publishing loop needs, built before the thread starts.
struct Outbox {
    client: async_nats::Client,
    /// One subject per symbol id, built once (cloning one is a reference
    /// count, not an allocation).
    subjects: Vec<Subject>,
    digits: Vec<u8>,
    wall_offset_ns: i64,
    stats: Arc<BusStats>,
}

impl BusPublisher {
    /// Connects, makes sure the last-value stream exists, then publishes
    /// every price the engine writes into `input` until stopped or until
    /// the engine lets go of the ring.
    pub fn start(
        cfg: &BusConfig,
        table: &InstrumentTable,
        input: ShardInput,
    ) -> Result<BusPublisher, BusError> {
        input.interest.set_all();
        let stats = Arc::new(BusStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let subjects = table
            .instruments()
            .iter()
            .map(|i| Subject::from(cfg.subject(&i.name)))
            .collect();
        let digits = table.instruments().iter().map(|i| i.digits).collect();
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let (cfg, st, stop2) = (cfg.clone(), stats.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("pw-bus".into())
            .spawn(move || {
                let rt = match super::runtime() {
                    Ok(rt) => rt,
                    Err(e) => return drop(ready_tx.send(Err(e))),
                };
                rt.block_on(async move {
                    let client = match connect::core(&cfg, &st).await {
                        Ok(c) => c,
                        Err(e) => return drop(ready_tx.send(Err(e))),
                    };
                    let _ = ready_tx.send(Ok(()));
                    let outbox = Outbox {
                        client,
                        subjects,
                        digits,
                        wall_offset_ns: crate::wire::wall_offset_ns(
                            crate::clock::wall_ns(),
                            crate::clock::monotonic_ns(),
                        ),
                        stats: st,
                    };
                    outbox.run(input.consumer, &stop2).await;
                });
            })
            .map_err(|e| BusError::Thread(e.to_string()))?;
        let started = ready_rx
            .recv_timeout(super::CONNECT_TIMEOUT * 2)
            .map_err(|_| BusError::Thread("no start-up report".into()))
            .and_then(|r| r);
        let mut publisher = BusPublisher {
            stop,
            thread: Some(thread),
            stats,
        };
        match started {
            Ok(()) => Ok(publisher),
            Err(e) => {
                publisher.halt();
                Err(e)
            }
        }
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Publishes what is left in the ring, flushes the client and joins.
    pub fn stop(mut self) {
        self.halt();
    }
}

impl Drop for BusPublisher {
    fn drop(&mut self) {
        self.halt();
    }
}

impl Outbox {
    async fn run(self, mut ring: rtrb::Consumer<Price>, stop: &AtomicBool) {
        let idle = Duration::from_millis(IDLE_POLL_MS);
        loop {
            let moved = self.turn(&mut ring).await;
            if moved > 0 {
                tokio::task::yield_now().await;
                continue;
            }
            // Empty: the engine has gone (orderly stop) or we were told to.
            if ring.is_abandoned() || stop.load(Ordering::Acquire) {
                if ring.is_empty() {
                    break;
                }
                continue;
            }
            tokio::time::sleep(idle).await;
        }
        let _ = self.client.flush().await;
    }

    /// Publishes up to [`BATCH_MAX`] prices; returns how many.
    async fn turn(&self, ring: &mut rtrb::Consumer<Price>) -> usize {
        let mut moved = 0;
        let mut frame = [0u8; PRICE_FRAME_LEN];
        while moved < BATCH_MAX {
            let Ok(price) = ring.pop() else { break };
            moved += 1;
            let s = price.symbol as usize;
            let (Some(subject), Some(&digits)) = (self.subjects.get(s), self.digits.get(s)) else {
                self.stats.publish_errors.inc();
                continue;
            };
            let n = super::codec::encode(&mut frame, &price, digits, self.wall_offset_ns);
            let payload = Bytes::copy_from_slice(&frame[..n]);
            match self.client.publish(subject.clone(), payload).await {
                Ok(()) => self.stats.published.inc(),
                Err(_) => self.stats.publish_errors.inc(),
            }
        }
        moved
    }
}
