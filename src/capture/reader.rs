//! Reading captures: memory-mapped, one segment at a time, constant memory.
//!
//! [`CaptureReader`] maps each segment read-only, walks its records and
//! drops the mapping before mapping the next, so a multi-gigabyte capture
//! costs page cache, not heap. Per tick it only decodes from the mapping
//! into a `Tick` value. The summary's report lists are bounded.
//!
//! Damage policy (see `docs/capture-format.md`):
//! - A segment whose bytes end inside a record (a crash while writing) is
//!   read up to its last whole record; the point where it stopped (file,
//!   byte offset, record index) is reported in [`ReadSummary::truncated`],
//!   and reading goes on with the next segment.
//! - A record that fails its length, CRC or body check is damage. The
//!   reader scans forward byte by byte for the next valid record. Found:
//!   under [`CorruptPolicy::Skip`] the damaged span is reported (offset,
//!   index, reason, where reading resumed) and reading goes on; under
//!   [`CorruptPolicy::Stop`] the read ends with [`CaptureError::Corrupt`].
//!   Not found: the damage is a torn tail and is reported as truncation.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::{Advice, Mmap};

use super::format::{decode_record, CaptureHeader, HeaderError, RecordError};
use super::writer::expand_inputs;
use super::CaptureError;
use crate::model::{InstrumentTable, Tick};

/// Most damaged-record reports kept in a summary (the count goes on).
pub const CORRUPT_REPORTS_MAX: usize = 64;

/// What to do with a damaged record that has valid records after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CorruptPolicy {
    /// Report it, skip to the next valid record, go on (the default: one
    /// bad record should not end a day's replay).
    #[default]
    Skip,
    /// End the read with [`CaptureError::Corrupt`].
    Stop,
}

/// Reader settings.
#[derive(Debug, Clone, Default)]
pub struct ReaderOptions {
    /// What to do on a damaged record: skip it with a report, or stop.
    pub policy: CorruptPolicy,
    /// When set, every segment header must match this table (ids, names,
    /// digits), so ticks can go straight to an engine built on it.
    pub table: Option<InstrumentTable>,
}

/// Where a segment cut short stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopPoint {
    /// The segment file.
    pub path: PathBuf,
    /// Byte offset of the first byte after the last whole record.
    pub offset: u64,
    /// Whole records read from this segment before the stop.
    pub record_index: u64,
    /// Why: cut short, or damage with no valid record after it.
    pub reason: String,
}

impl std::fmt::Display for StopPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: stopped at byte offset {} after {} whole records ({})",
            self.path.display(),
            self.offset,
            self.record_index,
            self.reason
        )
    }
}

/// A damaged record that was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptRecord {
    /// The segment file.
    pub path: PathBuf,
    /// Byte offset of the damaged record in the file.
    pub offset: u64,
    /// Index the damaged record would have had in its segment.
    pub record_index: u64,
    /// What is wrong with it.
    pub reason: RecordError,
    /// Offset of the next valid record, where reading resumed.
    pub resumed_at: u64,
}

impl std::fmt::Display for CorruptRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: damaged record #{} at byte offset {} ({}); skipped {} bytes, resumed at offset {}",
            self.path.display(),
            self.record_index,
            self.offset,
            self.reason,
            self.resumed_at - self.offset,
            self.resumed_at
        )
    }
}

/// What a read saw so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadSummary {
    /// Segment files opened so far.
    pub files: u64,
    /// Ticks yielded so far.
    pub ticks: u64,
    /// Receive time of the first tick yielded (monotonic ns of the recording
    /// process); `None` before it.
    pub first_receive_ns: Option<u64>,
    /// Receive time of the last tick yielded; `None` before the first.
    pub last_receive_ns: Option<u64>,
    /// Segments cut short, one entry per such segment.
    pub truncated: Vec<StopPoint>,
    /// Skipped damaged records (first [`CORRUPT_REPORTS_MAX`]).
    pub corrupt: Vec<CorruptRecord>,
    /// Damaged records skipped, all of them (only the first few are in `corrupt`).
    pub corrupt_count: u64,
    /// Bytes skipped past damaged records.
    pub skipped_bytes: u64,
}

struct Segment {
    map: Mmap,
    path: PathBuf,
    header: CaptureHeader,
    pos: usize,
    index: u64,
}

/// Reads ticks from segment files and capture directories in order.
pub struct CaptureReader {
    files: Vec<PathBuf>,
    next_file: usize,
    current: Option<Segment>,
    last_header: Option<CaptureHeader>,
    opts: ReaderOptions,
    summary: ReadSummary,
    finished: bool,
}

impl CaptureReader {
    /// Prepares reading `inputs` (segment files, or directories whose
    /// `seg-*.pwcap` files are read in index order). Opens the first
    /// segment at once so an unreadable capture fails here.
    pub fn open(inputs: &[PathBuf], opts: ReaderOptions) -> Result<Self, CaptureError> {
        let files = expand_inputs(inputs)?;
        let mut r = CaptureReader {
            files,
            next_file: 0,
            current: None,
            last_header: None,
            opts,
            summary: ReadSummary::default(),
            finished: false,
        };
        r.advance_file()?;
        Ok(r)
    }

    /// The header of the segment being read (or the last one read).
    pub fn header(&self) -> Option<&CaptureHeader> {
        self.current
            .as_ref()
            .map(|s| &s.header)
            .or(self.last_header.as_ref())
    }

    /// The path of the segment being read.
    pub fn current_path(&self) -> Option<&Path> {
        self.current.as_ref().map(|s| s.path.as_path())
    }

    /// What the read saw so far: counts, span, cut-short segments, damage.
    pub fn summary(&self) -> &ReadSummary {
        &self.summary
    }

    /// The next tick, `Ok(None)` at the end of the last file.
    #[inline]
    pub fn next_tick(&mut self) -> Result<Option<Tick>, CaptureError> {
        loop {
            let Some(seg) = self.current.as_mut() else {
                return Ok(None);
            };
            match decode_record(&seg.map[seg.pos..], &seg.header.base) {
                Ok((t, n)) => {
                    seg.pos += n;
                    seg.index += 1;
                    self.note(&t);
                    return Ok(Some(t));
                }
                Err(_) if seg.pos == seg.map.len() => self.advance_file()?,
                Err(RecordError::Short) => {
                    self.stop_segment("cut short inside a record")?;
                }
                Err(reason) => self.damaged(reason)?,
            }
        }
    }

    #[inline]
    fn note(&mut self, t: &Tick) {
        self.summary.ticks += 1;
        self.summary
            .first_receive_ns
            .get_or_insert(t.receive_time_ns);
        self.summary.last_receive_ns = Some(t.receive_time_ns);
    }

    fn damaged(&mut self, reason: RecordError) -> Result<(), CaptureError> {
        let seg = self
            .current
            .as_mut()
            .expect("damage is found in an open segment");
        let Some(resume) = resync(&seg.map, seg.pos + 1, &seg.header) else {
            let why = format!("{reason}, and no valid record after it");
            return self.stop_segment(&why);
        };
        let report = CorruptRecord {
            path: seg.path.clone(),
            offset: seg.pos as u64,
            record_index: seg.index,
            reason,
            resumed_at: resume as u64,
        };
        if self.opts.policy == CorruptPolicy::Stop {
            self.current = None;
            self.finished = true;
            return Err(CaptureError::Corrupt {
                path: report.path.display().to_string(),
                offset: report.offset,
                record_index: report.record_index,
                reason,
            });
        }
        tracing::warn!(%report, "capture damage skipped");
        self.summary.skipped_bytes += (resume - seg.pos) as u64;
        seg.pos = resume;
        seg.index += 1;
        self.summary.corrupt_count += 1;
        if self.summary.corrupt.len() < CORRUPT_REPORTS_MAX {
            self.summary.corrupt.push(report);
        }
        Ok(())
    }

    fn stop_segment(&mut self, reason: &str) -> Result<(), CaptureError> {
        if let Some(seg) = self.current.as_ref() {
            let stop = StopPoint {
                path: seg.path.clone(),
                offset: seg.pos as u64,
                record_index: seg.index,
                reason: reason.to_string(),
            };
            tracing::warn!(%stop, "capture segment cut short");
            self.summary.truncated.push(stop);
        }
        self.advance_file()
    }

    /// Closes the current segment and opens the next readable one.
    fn advance_file(&mut self) -> Result<(), CaptureError> {
        if let Some(seg) = self.current.take() {
            self.last_header = Some(seg.header);
        }
        while !self.finished && self.next_file < self.files.len() {
            let path = self.files[self.next_file].clone();
            self.next_file += 1;
            self.summary.files += 1;
            if let Some(seg) = self.open_segment(&path)? {
                self.current = Some(seg);
                return Ok(());
            }
        }
        Ok(())
    }

    fn open_segment(&mut self, path: &Path) -> Result<Option<Segment>, CaptureError> {
        let file = File::open(path).map_err(|e| CaptureError::io(path, e))?;
        let len = file
            .metadata()
            .map_err(|e| CaptureError::io(path, e))?
            .len();
        if len == 0 {
            self.truncated_header(path);
            return Ok(None);
        }
        // SAFETY: the mapping is read-only and private to this reader.
        // Captures are written append-only and never truncated or rewritten
        // by pricewire, so the mapped bytes do not change under us; a file
        // truncated by another program while mapped is outside the contract.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| CaptureError::io(path, e))?;
        let _ = map.advise(Advice::Sequential); // a hint; failure is harmless
        let header = match CaptureHeader::decode(&map) {
            Ok(h) => h,
            Err(HeaderError::Truncated) => {
                self.truncated_header(path);
                return Ok(None);
            }
            Err(source) => {
                return Err(CaptureError::Header {
                    path: path.display().to_string(),
                    source,
                })
            }
        };
        if let Some(table) = &self.opts.table {
            header
                .check_table(table)
                .map_err(|reason| CaptureError::Table {
                    path: path.display().to_string(),
                    reason,
                })?;
        }
        let pos = header.len;
        Ok(Some(Segment {
            map,
            path: path.to_path_buf(),
            header,
            pos,
            index: 0,
        }))
    }

    fn truncated_header(&mut self, path: &Path) {
        self.summary.truncated.push(StopPoint {
            path: path.to_path_buf(),
            offset: 0,
            record_index: 0,
            reason: "cut short inside the header".to_string(),
        });
    }
}

/// The first offset at or after `from` holding a valid record.
fn resync(map: &[u8], from: usize, header: &CaptureHeader) -> Option<usize> {
    (from..map.len()).find(|&p| decode_record(&map[p..], &header.base).is_ok())
}

impl Iterator for CaptureReader {
    type Item = Result<Tick, CaptureError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.next_tick().transpose()
    }
}

/// Reads a whole capture and returns its ticks (tests and small tools;
/// replay and inspect stream instead).
pub fn read_all(
    inputs: &[PathBuf],
    opts: ReaderOptions,
) -> Result<(Vec<Tick>, ReadSummary), CaptureError> {
    let mut r = CaptureReader::open(inputs, opts)?;
    let mut ticks = Vec::new();
    while let Some(t) = r.next_tick()? {
        ticks.push(t);
    }
    Ok((ticks, r.summary().clone()))
}
