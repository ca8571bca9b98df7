//! The recorder: a thread that appends every inbound tick to a capture.
//!
//! The feed thread pushes copies of its ticks into the recorder's own
//! bounded rtrb ring through [`RecorderTap::push`], which never blocks: a
//! full ring counts the tick as lost and the feed moves on. The ring, the
//! write buffer and the header are allocated in [`Recorder::spawn`]; the
//! recorder thread drains the ring in chunks, encodes into a stack array
//! and copies into the preallocated buffer (no per-tick allocation). It
//! hands the buffer to the kernel once it has held records for
//! `flush_interval_ms` (default 5 ms), whether the thread is busy or idle,
//! rolls segments by size and by age (age read from the injected clock),
//! and fsyncs each segment it closes. When idle it parks for at most
//! `idle_park_us`, so it costs little CPU on a 2-core machine.
//!
//! Durability (docs/capture-format.md): `recorded` counts ticks handed to
//! the kernel, `buffered` those still in the write buffer. A kill of the
//! process loses the buffered ticks — at most `flush_interval_ms` of ticks
//! plus one chunk being encoded — and the ticks still in the ring; a power
//! loss also loses what the kernel had not written back, unless `fsync`
//! (`--record-fsync`) makes every flush wait for the disk. The reader
//! replays each segment up to its last whole record.
//!
//! An I/O error (disk full) never reaches the feed: the recorder counts it,
//! keeps the first message, and from then on drains and drops ticks
//! (counted in `dropped_io`) so the ring never backs up into the feed.

use crate::runtime::{Policy, Supervised, Supervisor};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::format::CaptureHeader;
use super::writer::{CaptureWriter, SEGMENT_BYTES_MAX_DEFAULT, WRITE_BUFFER_BYTES_DEFAULT};
use super::CaptureError;
use crate::clock::{Clock, MonotonicClock, NS_PER_MS};
use crate::model::{InstrumentTable, Tick};

/// Default ring capacity: 64 Ki ticks (4 MiB), 65 ms of a 1M/s burst.
pub const RING_CAPACITY_DEFAULT: usize = 1 << 16;
/// Largest ring accepted (64 MiB of ticks).
pub const RING_CAPACITY_MAX: usize = 1 << 20;
/// Default segment age limit: one hour.
pub const SEGMENT_DURATION_MS_DEFAULT: u64 = 3_600_000;
/// Default longest time a written tick stays in the write buffer before it
/// is handed to the kernel: what a kill of the process can lose at most
/// (plus one chunk of [`CHUNK_TICKS_MAX`] being encoded).
pub const FLUSH_INTERVAL_MS_DEFAULT: u64 = 5;
/// Largest flush interval accepted.
pub const FLUSH_INTERVAL_MS_MAX: u64 = 10_000;
/// Default longest park of the idle recorder thread.
pub const IDLE_PARK_US_DEFAULT: u64 = 500;
/// Ticks taken from the ring per chunk.
pub const CHUNK_TICKS_MAX: usize = 4096;

/// Recorder settings.
#[derive(Clone)]
pub struct RecorderConfig {
    /// Ticks the feed → recorder ring holds, 1..=[`RING_CAPACITY_MAX`];
    /// a push to a full ring counts the tick `lost`.
    pub ring_capacity: usize,
    /// Segment size limit in bytes (at least `SEGMENT_BYTES_MIN`, 4096);
    /// a segment that reaches it is closed and the next opened.
    pub segment_bytes_max: u64,
    /// Segments older than this (by the injected clock) are closed before
    /// the next tick is written.
    pub segment_duration_ms: u64,
    /// Bytes encoded before a write to the kernel; allocated at spawn.
    pub write_buffer_bytes: usize,
    /// Longest a tick waits in the write buffer, ms,
    /// 1..=[`FLUSH_INTERVAL_MS_MAX`]: what a kill can lose at most.
    pub flush_interval_ms: u64,
    /// `fdatasync` at every flush, so a power loss loses no more than a
    /// kill (`--record-fsync`).
    pub fsync: bool,
    /// Longest park of the idle recorder thread, µs.
    pub idle_park_us: u64,
    /// Stored in every segment header (`source`).
    pub source: String,
    /// Decides segment age and flush times; inject a manual clock in tests.
    pub clock: Arc<dyn Clock>,
    /// Watches the recorder thread (transient: it ends once the engine
    /// let go of its ring; a panic is a death).
    pub supervisor: Supervisor,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            ring_capacity: RING_CAPACITY_DEFAULT,
            segment_bytes_max: SEGMENT_BYTES_MAX_DEFAULT,
            segment_duration_ms: SEGMENT_DURATION_MS_DEFAULT,
            write_buffer_bytes: WRITE_BUFFER_BYTES_DEFAULT,
            flush_interval_ms: FLUSH_INTERVAL_MS_DEFAULT,
            fsync: false,
            idle_park_us: IDLE_PARK_US_DEFAULT,
            source: "pricewire recorder".to_string(),
            clock: Arc::new(MonotonicClock),
            supervisor: Supervisor::new(),
        }
    }
}

impl std::fmt::Debug for RecorderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecorderConfig")
            .field("ring_capacity", &self.ring_capacity)
            .field("segment_bytes_max", &self.segment_bytes_max)
            .field("segment_duration_ms", &self.segment_duration_ms)
            .field("write_buffer_bytes", &self.write_buffer_bytes)
            .field("flush_interval_ms", &self.flush_interval_ms)
            .field("fsync", &self.fsync)
            .field("idle_park_us", &self.idle_park_us)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Recorder counters (Relaxed atomics, read by the metrics endpoint).
#[derive(Debug, Default)]
pub struct RecorderStats {
    /// Ticks handed to the kernel (written to the capture file): a kill of
    /// the process no longer loses them.
    pub recorded: AtomicU64,
    /// Ticks encoded into the write buffer but not yet handed to the
    /// kernel: what a kill of the process would lose now.
    pub buffered: AtomicU64,
    /// Ticks the feed could not push because the ring was full.
    pub lost: AtomicU64,
    /// Ticks drained but not written because writing had failed.
    pub dropped_io: AtomicU64,
    /// Bytes written, headers included.
    pub bytes: AtomicU64,
    /// Segments opened.
    pub segments: AtomicU64,
    /// Ring occupancy seen at the recorder's last drain (ticks behind).
    pub lag: AtomicU64,
    /// Write, flush or fsync failures.
    pub write_errors: AtomicU64,
}

/// A plain copy of [`RecorderStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderSnapshot {
    /// Ticks handed to the kernel.
    pub recorded: u64,
    /// Ticks in the write buffer, not yet handed to the kernel.
    pub buffered: u64,
    /// Ticks the feed could not push because the ring was full.
    pub lost: u64,
    /// Ticks drained but not written because writing had failed.
    pub dropped_io: u64,
    /// Bytes written, headers included.
    pub bytes: u64,
    /// Segments opened.
    pub segments: u64,
    /// Ring occupancy at the recorder's last drain (ticks behind).
    pub lag: u64,
    /// Write, flush or fsync failures.
    pub write_errors: u64,
}

impl RecorderStats {
    /// Copies every counter (relaxed loads; not a consistent cut).
    pub fn snapshot(&self) -> RecorderSnapshot {
        RecorderSnapshot {
            recorded: self.recorded.load(Relaxed),
            buffered: self.buffered.load(Relaxed),
            lost: self.lost.load(Relaxed),
            dropped_io: self.dropped_io.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            segments: self.segments.load(Relaxed),
            lag: self.lag.load(Relaxed),
            write_errors: self.write_errors.load(Relaxed),
        }
    }
}

/// What [`RecorderHandle::stop`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderTotals {
    /// Counters at the moment the recorder stopped.
    pub stats: RecorderSnapshot,
    /// Segment files written, in order.
    pub paths: Vec<std::path::PathBuf>,
    /// The first I/O error, if writing failed.
    pub error: Option<String>,
}

/// Pushes ticks into the recorder ring without ever waiting; a full ring
/// counts the tick as lost. Returns whether the tick was queued.
#[inline]
pub fn push_or_count(producer: &mut rtrb::Producer<Tick>, stats: &RecorderStats, t: Tick) -> bool {
    match producer.push(t) {
        Ok(()) => true,
        Err(rtrb::PushError::Full(_)) => {
            stats.lost.fetch_add(1, Relaxed);
            false
        }
    }
}

/// The feed side of the recorder: its ring producer plus the counters.
pub struct RecorderTap {
    producer: rtrb::Producer<Tick>,
    stats: Arc<RecorderStats>,
}

impl RecorderTap {
    /// Queues a copy of `t` for recording; never blocks (see [`push_or_count`]).
    #[inline]
    pub fn push(&mut self, t: Tick) -> bool {
        push_or_count(&mut self.producer, &self.stats, t)
    }

    /// Queues a batch; returns how many were queued (the rest are lost).
    #[inline]
    pub fn push_slice(&mut self, ticks: &[Tick]) -> usize {
        ticks.iter().filter(|t| self.push(**t)).count()
    }

    /// The recorder's counters, shared with its handle and the metrics endpoint.
    pub fn stats(&self) -> &Arc<RecorderStats> {
        &self.stats
    }

    /// The raw producer and the counters, for feeds that push themselves.
    pub fn into_parts(self) -> (rtrb::Producer<Tick>, Arc<RecorderStats>) {
        (self.producer, self.stats)
    }
}

/// The recorder thread.
pub struct Recorder;

/// Owner's handle: stats, and [`RecorderHandle::stop`].
pub struct RecorderHandle {
    stats: Arc<RecorderStats>,
    stop: Arc<AtomicBool>,
    error: Arc<Mutex<Option<String>>>,
    thread: Option<Supervised<Result<Vec<std::path::PathBuf>, CaptureError>>>,
}

impl Recorder {
    /// Starts recording into `dir`. Validates the settings, prepares the
    /// writer (numbering continues after existing segments) and spawns the
    /// `recorder` thread. Segments are created by the first tick.
    pub fn spawn(
        dir: &Path,
        table: &InstrumentTable,
        cfg: RecorderConfig,
    ) -> Result<(RecorderHandle, RecorderTap), CaptureError> {
        if cfg.ring_capacity == 0 || cfg.ring_capacity > RING_CAPACITY_MAX {
            return Err(CaptureError::Config(format!(
                "ring capacity {} outside 1..={RING_CAPACITY_MAX}",
                cfg.ring_capacity
            )));
        }
        if cfg.flush_interval_ms == 0 || cfg.flush_interval_ms > FLUSH_INTERVAL_MS_MAX {
            return Err(CaptureError::Config(format!(
                "flush interval {} ms outside 1..={FLUSH_INTERVAL_MS_MAX}",
                cfg.flush_interval_ms
            )));
        }
        if cfg.segment_duration_ms == 0 {
            return Err(CaptureError::Config(
                "segment duration must be > 0 ms".into(),
            ));
        }
        let header = CaptureHeader::for_table(table, &cfg.source);
        let mut writer =
            CaptureWriter::create(dir, header, cfg.segment_bytes_max, cfg.write_buffer_bytes)?;
        writer.set_sync_on_flush(cfg.fsync);
        let (producer, consumer) = rtrb::RingBuffer::new(cfg.ring_capacity);
        let stats = Arc::new(RecorderStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let error = Arc::new(Mutex::new(None));
        let mut worker = Worker {
            writer,
            consumer,
            stats: stats.clone(),
            stop: stop.clone(),
            error: error.clone(),
            failed: false,
            segment_opened_ns: 0,
            segments_seen: 0,
            last_flush_ns: cfg.clock.now_ns(),
            cfg,
        };
        let thread = worker
            .cfg
            .supervisor
            .clone()
            .spawn("recorder", Policy::Transient, move || worker.run())
            .map_err(|e| CaptureError::io(dir, e))?;
        let handle = RecorderHandle {
            stats: stats.clone(),
            stop,
            error,
            thread: Some(thread),
        };
        Ok((handle, RecorderTap { producer, stats }))
    }
}

impl RecorderHandle {
    /// The recorder's counters, shared with the tap and the metrics endpoint.
    pub fn stats(&self) -> &Arc<RecorderStats> {
        &self.stats
    }

    /// Stops the recorder: it drains what is in the ring, flushes, fsyncs
    /// and closes the last segment. Stop the feed first: ticks pushed after
    /// the drain are not recorded. Blocks until the thread has finished.
    pub fn stop(mut self) -> RecorderTotals {
        self.finish()
    }

    fn finish(&mut self) -> RecorderTotals {
        // Release: pairs with the worker's Acquire load, so every push made
        // before stop() is visible when the worker sees the flag.
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let mut paths = Vec::new();
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            match t.join() {
                Ok(Ok(p)) => paths = p,
                Ok(Err(e)) => self.note_error(e.to_string()),
                Err(_) => self.note_error("recorder thread panicked".into()),
            }
        }
        RecorderTotals {
            stats: self.stats.snapshot(),
            paths,
            error: self.error.lock().map(|e| e.clone()).unwrap_or(None),
        }
    }

    fn note_error(&self, msg: String) {
        if let Ok(mut e) = self.error.lock() {
            e.get_or_insert(msg);
        }
    }
}

impl Drop for RecorderHandle {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.finish();
        }
    }
}

struct Worker {
    writer: CaptureWriter,
    consumer: rtrb::Consumer<Tick>,
    stats: Arc<RecorderStats>,
    stop: Arc<AtomicBool>,
    error: Arc<Mutex<Option<String>>>,
    failed: bool,
    segment_opened_ns: u64,
    segments_seen: u64,
    last_flush_ns: u64,
    cfg: RecorderConfig,
}

impl Worker {
    fn run(&mut self) -> Result<Vec<std::path::PathBuf>, CaptureError> {
        loop {
            let waiting = self.consumer.slots();
            self.stats.lag.store(waiting as u64, Relaxed);
            if waiting > 0 {
                self.drain_chunk(waiting.min(CHUNK_TICKS_MAX));
                continue;
            }
            // Check the stop flag only after seeing an empty ring, so a stop
            // always drains what the feed pushed before it.
            if self.stop.load(std::sync::atomic::Ordering::Acquire) || self.consumer.is_abandoned()
            {
                if self.consumer.slots() > 0 {
                    continue;
                }
                break;
            }
            self.idle();
        }
        let result = self.close();
        self.stats.lag.store(0, Relaxed);
        self.stats.recorded.store(self.writer.handed(), Relaxed);
        self.stats.buffered.store(self.writer.buffered(), Relaxed);
        result
    }

    fn drain_chunk(&mut self, n: usize) {
        let now_ns = self.cfg.clock.now_ns();
        self.maybe_rotate_by_age(now_ns);
        let Ok(chunk) = self.consumer.read_chunk(n) else {
            return;
        };
        let (a, b) = chunk.as_slices();
        let mut recorded = 0u64;
        let mut error = None;
        if !self.failed {
            for t in a.iter().chain(b) {
                match self.writer.write(t) {
                    Ok(_) => recorded += 1,
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
        }
        let dropped = n as u64 - recorded;
        chunk.commit_all();
        if let Some(e) = error {
            self.fail(e);
        }
        self.account(dropped, now_ns);
    }

    fn account(&mut self, dropped: u64, now_ns: u64) {
        let segments = self.writer.segments();
        if segments != self.segments_seen {
            self.segment_opened_ns = now_ns;
            self.segments_seen = segments;
            self.stats.segments.store(segments, Relaxed);
        }
        self.maybe_flush(now_ns);
        // One writer thread: storing the writer's own totals is exact.
        self.stats.bytes.store(self.writer.totals().bytes, Relaxed);
        self.stats.recorded.store(self.writer.handed(), Relaxed);
        self.stats.buffered.store(self.writer.buffered(), Relaxed);
        self.stats.dropped_io.fetch_add(dropped, Relaxed);
    }

    /// Hands the buffer to the kernel once its oldest record may be
    /// `flush_interval_ms` old, busy or idle: a kill loses at most that.
    fn maybe_flush(&mut self, now_ns: u64) {
        let due =
            now_ns.saturating_sub(self.last_flush_ns) >= self.cfg.flush_interval_ms * NS_PER_MS;
        if self.writer.buffered() == 0 {
            // Nothing waits: the next record starts a fresh interval.
            self.last_flush_ns = now_ns;
        } else if due && !self.failed {
            if let Err(e) = self.writer.flush() {
                self.fail(e);
            }
            self.last_flush_ns = now_ns;
        }
    }

    fn maybe_rotate_by_age(&mut self, now_ns: u64) {
        if self.failed {
            return; // one error, logged once: no retry storm on a full disk
        }
        let age_ns = now_ns.saturating_sub(self.segment_opened_ns);
        if self.writer.is_open() && age_ns >= self.cfg.segment_duration_ms * NS_PER_MS {
            if let Err(e) = self.writer.rotate() {
                self.fail(e);
            }
        }
    }

    fn idle(&mut self) {
        crate::runtime::drill::point("recorder", 0);
        let now_ns = self.cfg.clock.now_ns();
        self.maybe_flush(now_ns);
        self.stats.recorded.store(self.writer.handed(), Relaxed);
        self.stats.buffered.store(self.writer.buffered(), Relaxed);
        std::thread::park_timeout(Duration::from_micros(self.cfg.idle_park_us));
    }

    fn fail(&mut self, e: CaptureError) {
        self.failed = true;
        self.stats.write_errors.fetch_add(1, Relaxed);
        tracing::error!(error = %e, "capture recording failed; further ticks are dropped");
        if let Ok(mut slot) = self.error.lock() {
            slot.get_or_insert(e.to_string());
        }
    }

    fn close(&mut self) -> Result<Vec<std::path::PathBuf>, CaptureError> {
        let paths = self.writer.totals().paths.clone();
        if self.failed {
            return Ok(paths);
        }
        if let Err(e) = self.writer.rotate() {
            self.fail(e);
        }
        // Make the new segments' directory entries durable too.
        if let Some(dir) = paths.first().and_then(|p| p.parent()) {
            if let Err(e) = std::fs::File::open(dir).and_then(|d| d.sync_all()) {
                tracing::warn!(error = %e, "fsync of the capture directory failed");
            }
        }
        Ok(paths)
    }
}
