//! Synchronous segment writer shared by the recorder thread and importers.
//!
//! The write buffer is allocated once in [`CaptureWriter::create`] and
//! reused across segments; a record is encoded into a fixed stack array and
//! copied into it, so steady-state writing allocates nothing. Segments are
//! opened lazily by the first record (whose times become the segment base)
//! and are flushed and fsynced when they are closed.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::format::{encode_record, CaptureHeader, SegmentBase, RECORD_LEN_MAX};
use super::CaptureError;
use crate::clock::wall_ns;
use crate::model::Tick;

/// Smallest accepted segment size limit (the header plus some records).
pub const SEGMENT_BYTES_MIN: u64 = 4096;
/// Default segment size limit.
pub const SEGMENT_BYTES_MAX_DEFAULT: u64 = 256 << 20;
/// Default write buffer size.
pub const WRITE_BUFFER_BYTES_DEFAULT: usize = 1 << 20;

/// File name of segment `index`: `seg-000001.pwcap`.
pub fn segment_file_name(index: u32) -> String {
    format!("seg-{index:06}.pwcap")
}

/// Parses a segment file name back to its index.
pub fn parse_segment_name(name: &str) -> Option<u32> {
    name.strip_prefix("seg-")?
        .strip_suffix(".pwcap")?
        .parse()
        .ok()
}

/// Totals of one writer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterTotals {
    /// Records written, all segments.
    pub records: u64,
    /// Bytes written, headers and records, all segments.
    pub bytes: u64,
    /// Segment files opened.
    pub segments: u64,
    /// Every segment file written, in order.
    pub paths: Vec<PathBuf>,
}

struct OpenSegment {
    file: File,
    path: PathBuf,
    base: SegmentBase,
    bytes: u64,
    records: u64,
}

/// Appends ticks to numbered segment files in one directory.
pub struct CaptureWriter {
    dir: PathBuf,
    header: CaptureHeader,
    next_index: u32,
    segment_bytes_max: u64,
    buf: Vec<u8>,
    current: Option<OpenSegment>,
    scratch: [u8; RECORD_LEN_MAX],
    totals: WriterTotals,
    /// Records handed to the kernel (written out of `buf`).
    handed: u64,
    /// `fdatasync` after every flush (`--record-fsync`).
    sync_on_flush: bool,
}

impl CaptureWriter {
    /// Prepares writing into `dir` (created if missing). Numbering continues
    /// after the highest existing segment: a capture is never overwritten.
    pub fn create(
        dir: &Path,
        header: CaptureHeader,
        segment_bytes_max: u64,
        buffer_bytes: usize,
    ) -> Result<Self, CaptureError> {
        if segment_bytes_max < SEGMENT_BYTES_MIN {
            return Err(CaptureError::Config(format!(
                "segment size {segment_bytes_max} below the minimum {SEGMENT_BYTES_MIN} bytes"
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| CaptureError::io(dir, e))?;
        let next_index = highest_segment(dir)? + 1;
        Ok(CaptureWriter {
            dir: dir.to_path_buf(),
            header,
            next_index,
            segment_bytes_max,
            buf: Vec::with_capacity(buffer_bytes.max(RECORD_LEN_MAX * 16)),
            current: None,
            scratch: [0; RECORD_LEN_MAX],
            totals: WriterTotals::default(),
            handed: 0,
            sync_on_flush: false,
        })
    }

    /// Appends one tick; opens or rolls a segment as needed. Returns the
    /// bytes the record took.
    #[inline]
    pub fn write(&mut self, t: &Tick) -> Result<usize, CaptureError> {
        let base = match &self.current {
            Some(seg) => seg.base,
            None => self.open(t)?,
        };
        let n = encode_record(t, &base, &mut self.scratch);
        debug_assert!(n > 0 && n <= RECORD_LEN_MAX, "record of {n} bytes");
        let seg_bytes = self.current.as_ref().map_or(0, |s| s.bytes);
        let seg_records = self.current.as_ref().map_or(0, |s| s.records);
        // A segment is never rolled empty, so an oversize first record
        // still lands somewhere.
        if seg_bytes + n as u64 > self.segment_bytes_max && seg_records > 0 {
            self.rotate()?;
            return self.write(t);
        }
        if self.buf.len() + n > self.buf.capacity() {
            self.drain_buffer()?;
        }
        // Never grows: the buffer holds at least 16 records from creation.
        debug_assert!(self.buf.len() + n <= self.buf.capacity());
        self.buf.extend_from_slice(&self.scratch[..n]);
        if let Some(seg) = self.current.as_mut() {
            seg.bytes += n as u64;
            seg.records += 1;
        }
        self.totals.records += 1;
        self.totals.bytes += n as u64;
        Ok(n)
    }

    fn open(&mut self, first: &Tick) -> Result<SegmentBase, CaptureError> {
        let path = self.dir.join(segment_file_name(self.next_index));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| CaptureError::io(&path, e))?;
        let base = SegmentBase::from_first(first);
        self.header.segment_index = self.next_index;
        self.header.created_wall_ns = wall_ns();
        self.header.base = base;
        let bytes = self.header.encode();
        self.header.len = bytes.len();
        file.write_all(&bytes)
            .map_err(|e| CaptureError::io(&path, e))?;
        self.next_index += 1;
        self.totals.segments += 1;
        self.totals.bytes += bytes.len() as u64;
        self.totals.paths.push(path.clone());
        self.current = Some(OpenSegment {
            file,
            path,
            base,
            bytes: bytes.len() as u64,
            records: 0,
        });
        Ok(base)
    }

    fn drain_buffer(&mut self) -> Result<(), CaptureError> {
        if let Some(seg) = self.current.as_mut() {
            seg.file
                .write_all(&self.buf)
                .map_err(|e| CaptureError::io(&seg.path, e))?;
        }
        self.buf.clear();
        self.handed = self.totals.records;
        Ok(())
    }

    /// With `on`, every [`CaptureWriter::flush`] also waits for the disk
    /// (`fdatasync`): a power loss then loses no flushed record either.
    pub fn set_sync_on_flush(&mut self, on: bool) {
        self.sync_on_flush = on;
    }

    /// Hands buffered records to the OS: a crash of this process then
    /// loses nothing already flushed. With sync on flush, also to the disk.
    pub fn flush(&mut self) -> Result<(), CaptureError> {
        self.drain_buffer()?;
        if self.sync_on_flush {
            if let Some(seg) = &self.current {
                seg.file
                    .sync_data()
                    .map_err(|e| CaptureError::io(&seg.path, e))?;
            }
        }
        Ok(())
    }

    /// Records handed to the kernel so far: they survive a kill of this
    /// process (and, with sync on flush, a power loss once flushed).
    pub fn handed(&self) -> u64 {
        self.handed
    }

    /// Records written but still in the buffer (lost if the process dies).
    pub fn buffered(&self) -> u64 {
        self.totals.records - self.handed
    }

    /// Closes the open segment: flush, fsync, close. The next record opens
    /// a new one. A no-op when no segment is open.
    pub fn rotate(&mut self) -> Result<(), CaptureError> {
        self.drain_buffer()?;
        if let Some(seg) = self.current.take() {
            seg.file
                .sync_all()
                .map_err(|e| CaptureError::io(&seg.path, e))?;
        }
        Ok(())
    }

    /// True while a segment is open.
    pub fn is_open(&self) -> bool {
        self.current.is_some()
    }

    /// Segments opened so far.
    pub fn segments(&self) -> u64 {
        self.totals.segments
    }

    /// Closes the last segment and returns the totals.
    pub fn finish(mut self) -> Result<WriterTotals, CaptureError> {
        self.rotate()?;
        if let Ok(d) = File::open(&self.dir) {
            // Persist the new directory entries too; best effort (not every
            // platform can fsync a directory).
            let _ = d.sync_all();
        }
        Ok(std::mem::take(&mut self.totals))
    }

    /// Totals so far.
    pub fn totals(&self) -> &WriterTotals {
        &self.totals
    }
}

/// Highest segment index present in `dir` (0 when none).
fn highest_segment(dir: &Path) -> Result<u32, CaptureError> {
    let entries = std::fs::read_dir(dir).map_err(|e| CaptureError::io(dir, e))?;
    let mut highest = 0;
    for entry in entries.flatten() {
        if let Some(i) = entry.file_name().to_str().and_then(parse_segment_name) {
            highest = highest.max(i);
        }
    }
    Ok(highest)
}

/// The segment files of a capture directory, in index order.
pub fn list_segments(dir: &Path) -> Result<Vec<PathBuf>, CaptureError> {
    let entries = std::fs::read_dir(dir).map_err(|e| CaptureError::io(dir, e))?;
    let mut found: Vec<(u32, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let i = e.file_name().to_str().and_then(parse_segment_name)?;
            Some((i, e.path()))
        })
        .collect();
    found.sort();
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// Expands inputs: a directory becomes its segments in order, a file stays.
pub fn expand_inputs(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, CaptureError> {
    let mut out = Vec::new();
    for p in inputs {
        if p.is_dir() {
            out.extend(list_segments(p)?);
        } else {
            out.push(p.clone());
        }
    }
    if out.is_empty() {
        return Err(CaptureError::NoFiles);
    }
    Ok(out)
}
