//! Tick captures: record every inbound tick, read and replay it, import
//! real tick files, inspect captures.
//!
//! Contract:
//! - **Recording never blocks the feed.** [`recorder::Recorder::spawn`]
//!   starts a recorder thread fed by its own bounded rtrb ring of
//!   [`Tick`](crate::model::Tick)s; the feed pushes with
//!   [`recorder::RecorderTap::push`] (or [`recorder::push_or_count`]),
//!   which never waits: a full ring counts the tick as lost. The ring and
//!   the write buffer are allocated at spawn; the recorder thread encodes
//!   into a stack array and allocates nothing per tick. Segments roll by
//!   size and by time (injected [`Clock`](crate::clock::Clock)) and are
//!   flushed and fsynced when closed; [`recorder::RecorderHandle::stop`]
//!   drains the ring, flushes, fsyncs and returns totals.
//! - **Reading is constant-memory.** [`reader::CaptureReader`] memory-maps
//!   one segment at a time and yields ticks across segments and files. A
//!   file cut short replays up to its last whole record and reports where
//!   it stopped; a damaged record is caught by its CRC and, by policy
//!   ([`reader::CorruptPolicy`]), either skipped with a report (records are
//!   self-contained, so the rest decode exactly) or ends the read with an
//!   error. Nothing panics on bad bytes.
//! - **Replay** ([`replay::ReplaySource`]) is a
//!   [`TickSource`](crate::runtime::TickSource) paced at `1x`, `Nx` or `max`
//!   from the recorded receive times; it does not keep receive times (the
//!   feed re-stamps them so latency is measured in the replaying process)
//!   and keeps provider times as recorded.
//! - **Import** ([`import::run`]) turns HistData, TrueFX, MetaTrader 5,
//!   Dukascopy `.bi5` and mapped generic CSV files into captures, parsing
//!   prices as exact fixed-point from bytes with a reused line buffer.
//!   Bad rows are reported with file and line; `strict` stops at the first.
//! - **Inspect** ([`inspect::cat`], [`inspect::stats`]) prints records and
//!   summary statistics in bounded memory.
//! - [`cli`] holds the clap argument structs the main binary embeds.
//!
//! The byte layout is specified in `docs/capture-format.md`.
//!
//! # Using it
//!
//! Recording from the feed thread:
//!
//! ```no_run
//! use pricewire::capture::{Recorder, RecorderConfig};
//! use pricewire::model::{InstrumentTable, Tick};
//!
//! let table = InstrumentTable::default_with_providers(3);
//! let (handle, mut tap) =
//!     Recorder::spawn("captures/today".as_ref(), &table, RecorderConfig::default())?;
//! // Feed thread, per received tick: never blocks; a full ring counts `lost`.
//! tap.push(Tick::EMPTY);
//! // Metrics: handle.stats().snapshot() (recorded, lost, bytes, segments, lag, ...).
//! // Shutdown, after the feed has stopped: drain, flush, fsync.
//! let totals = handle.stop();
//! println!("{} ticks, {} lost", totals.stats.recorded, totals.stats.lost);
//! # Ok::<(), pricewire::capture::CaptureError>(())
//! ```
//!
//! Replaying into the pipeline (the feed polls it like any source), then
//! reading the summary:
//!
//! ```no_run
//! use pricewire::capture::{ReaderOptions, ReplaySource, ReplaySpeed};
//! use pricewire::feed::{SourcePoll, TickSource};
//! use pricewire::model::{InstrumentTable, Tick};
//!
//! let table = InstrumentTable::default_with_providers(3);
//! let opts = ReaderOptions { table: Some(table), ..ReaderOptions::default() };
//! let mut src = ReplaySource::open(&["captures/today".into()], "10x".parse()?, opts)?;
//! let mut batch = [Tick::EMPTY; 256];
//! while src.poll(pricewire::clock::monotonic_ns(), &mut batch) != SourcePoll::Done {}
//! println!("{}", src.summary());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Importing, reading and inspecting:
//!
//! ```no_run
//! use pricewire::capture::import::{self, ImportFormat, ImportOptions};
//! use pricewire::capture::{inspect, CaptureReader, ReaderOptions};
//! use pricewire::model::InstrumentTable;
//!
//! let table = InstrumentTable::default_with_providers(1);
//! let mut o = ImportOptions::new(
//!     ImportFormat::Mt5,
//!     vec!["EURUSD_ticks.csv".into()],
//!     "captures/eurusd".into(),
//!     table,
//! );
//! o.tz_offset_ns = 2 * 3_600_000_000_000; // server time +02:00
//! let report = import::run(&o)?; // bad rows: report.bad_row_samples (file:line)
//! for tick in CaptureReader::open(&["captures/eurusd".into()], ReaderOptions::default())? {
//!     let _tick = tick?;
//! }
//! println!("{report}\n{}", inspect::stats(&["captures/eurusd".into()])?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod cli;
pub mod format;
pub mod import;
pub mod inspect;
pub mod reader;
pub mod recorder;
pub mod replay;
pub mod time;
pub mod writer;

use std::path::Path;

pub use format::{CaptureHeader, HeaderError, RecordError, TableMismatch};
pub use reader::{CaptureReader, CorruptPolicy, ReadSummary, ReaderOptions, StopPoint};
pub use recorder::{Recorder, RecorderConfig, RecorderHandle, RecorderStats, RecorderTap};
pub use replay::{ReplaySource, ReplaySpeed, ReplaySummary};
pub use writer::CaptureWriter;

/// Errors of the capture subsystem.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Opening, reading, writing or syncing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory, as displayed.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A segment's header could not be read.
    #[error("{path}: {source}")]
    Header {
        /// The segment file.
        path: String,
        /// What is wrong with the header.
        source: HeaderError,
    },
    /// A damaged record under [`CorruptPolicy::Stop`].
    #[error("{path}: damaged record #{record_index} at byte offset {offset}: {reason}")]
    Corrupt {
        /// The segment file.
        path: String,
        /// Byte offset of the record in the file.
        offset: u64,
        /// 0-based index of the record in the segment.
        record_index: u64,
        /// What is wrong with the record.
        reason: RecordError,
    },
    /// The inputs named no segment file (empty list or empty directories).
    #[error("no capture files given or found")]
    NoFiles,
    /// A segment's instruments or providers differ from the table the
    /// reader was given ([`ReaderOptions::table`]).
    #[error("{path}: capture does not match the instrument table: {reason}")]
    Table {
        /// The segment file.
        path: String,
        /// The first difference found.
        #[source]
        reason: TableMismatch,
    },
    /// A recorder or writer setting out of range; the text names it.
    #[error("invalid capture setting: {0}")]
    Config(String),
}

impl CaptureError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        CaptureError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
