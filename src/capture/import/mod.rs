//! Import of real tick files into captures.
//!
//! [`run`] reads each input file in order and appends one capture (in
//! `out_dir`, numbering after any existing segments). Text formats are read
//! line by line into one reused buffer and parsed as bytes: prices go
//! through [`parse_price_bytes`](crate::model::price::parse_price_bytes) at
//! the symbol's digits (exact, never via floats), timestamps through
//! integer calendar arithmetic into UTC nanoseconds. A good row allocates
//! nothing. Every imported tick has `receive_time_ns = provider_time_ns`
//! and `feed_seq` counting from 1 over the whole run.
//!
//! Bad rows are reported with file and line (for `.bi5`, the 1-based record
//! number) and skipped; with `strict` the first one ends the import with
//! [`ImportError::BadRow`]. Nothing is invented: a MetaTrader row that
//! carries only one side before any full quote is a bad row, not a guess.

mod dukascopy;
mod text;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::format::CaptureHeader;
use super::writer::{CaptureWriter, SEGMENT_BYTES_MAX_DEFAULT, WRITE_BUFFER_BYTES_DEFAULT};
use super::CaptureError;
use crate::model::price::PriceParseError;
use crate::model::{InstrumentTable, ProviderId, SymbolId, Tick};

/// Bad rows kept in a report (the count goes on).
pub const BAD_ROW_REPORTS_MAX: usize = 100;
/// Longest line accepted by the text importers.
pub const LINE_LEN_MAX: usize = 4096;
/// Read buffer of the text importers.
const READ_BUFFER_BYTES: usize = 1 << 20;

/// Input formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ImportFormat {
    /// HistData.com ASCII ticks: `YYYYMMDD HHMMSSfff,bid,ask,vol`, EST (UTC-5, no DST).
    Histdata,
    /// TrueFX: `EUR/USD,YYYYMMDD HH:MM:SS.mmm,bid,ask`, UTC.
    Truefx,
    /// MetaTrader 5 exported ticks (tab-separated, `<DATE> <TIME> <BID> <ASK> ...`).
    Mt5,
    /// Dukascopy `.bi5` hour files (LZMA, 20-byte big-endian records).
    Dukascopy,
    /// Any delimited file with a `--columns` mapping.
    Csv,
}

/// Timestamp encodings of the generic CSV importer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum TimeFormat {
    /// Whole seconds since the Unix epoch, UTC.
    UnixS,
    /// Milliseconds since the Unix epoch, UTC (the default).
    #[default]
    UnixMs,
    /// Microseconds since the Unix epoch, UTC.
    UnixUs,
    /// Nanoseconds since the Unix epoch, UTC.
    UnixNs,
    /// `YYYY-MM-DD[T ]HH:MM:SS[.f][Z|±HH:MM]`, UTC when no zone is given.
    Iso8601,
}

/// Column positions (0-based) of the generic CSV importer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnMap {
    /// Column of the timestamp, read as [`ImportOptions::time_format`].
    pub time: usize,
    /// Column of the bid, a decimal price at the symbol's digits.
    pub bid: usize,
    /// Column of the ask, a decimal price at the symbol's digits.
    pub ask: usize,
    /// Column of the symbol name; without it [`ImportOptions::symbol`] applies.
    pub symbol: Option<usize>,
    /// Column of the bid size (unsigned integer); 0 when absent.
    pub bid_size: Option<usize>,
    /// Column of the ask size (unsigned integer); 0 when absent.
    pub ask_size: Option<usize>,
}

impl FromStr for ColumnMap {
    type Err = String;

    /// `time=0,bid=1,ask=2[,symbol=3][,bid_size=4][,ask_size=5]`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (mut time, mut bid, mut ask) = (None, None, None);
        let mut map = ColumnMap {
            time: 0,
            bid: 0,
            ask: 0,
            symbol: None,
            bid_size: None,
            ask_size: None,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("column mapping {part:?} is not name=index"))?;
            let i: usize = v
                .trim()
                .parse()
                .map_err(|_| format!("column index {v:?} is not a number"))?;
            if i >= text::FIELDS_MAX {
                return Err(format!("column index {i} above {}", text::FIELDS_MAX - 1));
            }
            match k.trim() {
                "time" => time = Some(i),
                "bid" => bid = Some(i),
                "ask" => ask = Some(i),
                "symbol" => map.symbol = Some(i),
                "bid_size" => map.bid_size = Some(i),
                "ask_size" => map.ask_size = Some(i),
                other => return Err(format!("unknown column name {other:?}")),
            }
        }
        let need =
            |v: Option<usize>, n: &str| v.ok_or_else(|| format!("column mapping lacks {n}="));
        map.time = need(time, "time")?;
        map.bid = need(bid, "bid")?;
        map.ask = need(ask, "ask")?;
        Ok(map)
    }
}

/// Everything an import needs.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// How the input files are laid out.
    pub format: ImportFormat,
    /// Files to import, in order; at least one.
    pub inputs: Vec<PathBuf>,
    /// Capture directory written to (created if missing); numbering continues
    /// after any segment already there, nothing is overwritten.
    pub out_dir: PathBuf,
    /// Symbols, digits and providers; stored in the capture header.
    pub table: InstrumentTable,
    /// Symbol for formats whose rows do not name it (HistData, MT5, CSV
    /// without a symbol column, Dukascopy); otherwise taken from the path.
    pub symbol: Option<String>,
    /// Provider id every imported tick carries; must be in the table.
    pub provider: ProviderId,
    /// MT5 server time zone, ns east of UTC (`+02:00` is 7.2e12).
    pub tz_offset_ns: i64,
    /// Generic CSV: where each field is; required for [`ImportFormat::Csv`].
    pub columns: Option<ColumnMap>,
    /// Generic CSV: how the time column is encoded.
    pub time_format: TimeFormat,
    /// Generic CSV: the field separator byte (default `,`).
    pub delimiter: u8,
    /// Generic CSV: the first line is a header.
    pub has_header: bool,
    /// Dukascopy: the file's hour (UTC ns); otherwise from the path.
    pub hour_utc_ns: Option<u64>,
    /// Dukascopy: decimals of the file's integer points when they differ
    /// from the table's digits (e.g. 3 for XAUUSD).
    pub point_digits: Option<u8>,
    /// Stop at the first bad row ([`ImportError::BadRow`]) instead of
    /// counting it and going on.
    pub strict: bool,
    /// Segment size limit in bytes, at least `SEGMENT_BYTES_MIN` (4096).
    pub segment_bytes_max: u64,
}

impl ImportOptions {
    /// Defaults for everything but the format, inputs, output and table.
    pub fn new(
        format: ImportFormat,
        inputs: Vec<PathBuf>,
        out_dir: PathBuf,
        table: InstrumentTable,
    ) -> Self {
        ImportOptions {
            format,
            inputs,
            out_dir,
            table,
            symbol: None,
            provider: 0,
            tz_offset_ns: 0,
            columns: None,
            time_format: TimeFormat::default(),
            delimiter: b',',
            has_header: false,
            hour_utc_ns: None,
            point_digits: None,
            strict: false,
            segment_bytes_max: SEGMENT_BYTES_MAX_DEFAULT,
        }
    }
}

/// One rejected row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRow {
    /// The input file the row is in.
    pub file: PathBuf,
    /// 1-based line (record number for `.bi5`).
    pub line: u64,
    /// Why the row was rejected.
    pub reason: String,
}

impl std::fmt::Display for BadRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.reason)
    }
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Input files read.
    pub files: u64,
    /// Data rows seen (headers and blank lines excluded).
    pub rows: u64,
    /// Ticks written to the capture.
    pub ticks: u64,
    /// Rows that are valid but carry no quote (an MT5 trade-only row).
    pub rows_without_quote: u64,
    /// Rows rejected (all of them; only the first few are in `bad_row_samples`).
    pub bad_rows: u64,
    /// The first [`BAD_ROW_REPORTS_MAX`] bad rows.
    pub bad_row_samples: Vec<BadRow>,
    /// Provider time of the first tick written (UTC ns); `None` if none was.
    pub first_time_ns: Option<u64>,
    /// Provider time of the last tick written (UTC ns); `None` if none was.
    pub last_time_ns: Option<u64>,
    /// Segment files written.
    pub segments: u64,
    /// Bytes written, headers included.
    pub bytes: u64,
    /// Every segment file written, in order.
    pub paths: Vec<PathBuf>,
}

impl std::fmt::Display for ImportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "imported {} ticks from {} rows in {} files into {} segments ({} bytes); {} bad rows",
            self.ticks, self.rows, self.files, self.segments, self.bytes, self.bad_rows
        )?;
        if self.rows_without_quote > 0 {
            write!(f, ", {} rows without a quote", self.rows_without_quote)?;
        }
        if let (Some(a), Some(b)) = (self.first_time_ns, self.last_time_ns) {
            write!(
                f,
                "\n  from {} to {}",
                super::time::UtcNs(a),
                super::time::UtcNs(b)
            )?;
        }
        for bad in &self.bad_row_samples {
            write!(f, "\n  {bad}")?;
        }
        if self.bad_rows > self.bad_row_samples.len() as u64 {
            write!(
                f,
                "\n  ... and {} more",
                self.bad_rows - self.bad_row_samples.len() as u64
            )?;
        }
        Ok(())
    }
}

/// Errors of an import.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Reading an input file failed.
    #[error("{path}: {source}")]
    Io {
        /// The input file, as displayed.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Writing the capture failed (or its settings were refused).
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// The first bad row under `strict`.
    #[error("{0}")]
    BadRow(BadRow),
    /// The options do not fit the format (e.g. CSV without `columns`);
    /// the text says which.
    #[error("invalid import options: {0}")]
    Options(String),
}

/// Why one row was rejected. Built only for bad rows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RowError {
    #[error("{0}")]
    Shape(&'static str),
    #[error("bad timestamp: {0}")]
    Time(&'static str),
    #[error("bad {field}: {err}")]
    Price {
        field: &'static str,
        err: PriceParseError,
    },
    #[error("bad {0}: not an unsigned integer")]
    Size(&'static str),
    #[error("unknown symbol {0:?} (not in the instrument table)")]
    Symbol(String),
    #[error("{0} only, and no earlier row to take the other side from")]
    NoQuoteYet(&'static str),
    #[error("line longer than {LINE_LEN_MAX} bytes")]
    TooLong,
}

/// What a row parser made of one row.
pub(crate) enum Row {
    Tick(Tick),
    /// A header line or a row without a quote.
    Skip {
        counts_as_row: bool,
    },
}

/// Resolves symbol names to (id, digits), remembering the last one so a
/// file of one symbol costs one compare per row.
pub(crate) struct SymbolCache<'t> {
    table: &'t InstrumentTable,
    last: [u8; 16],
    last_len: usize,
    last_id: (SymbolId, u8),
}

impl<'t> SymbolCache<'t> {
    pub(crate) fn new(table: &'t InstrumentTable) -> Self {
        SymbolCache {
            table,
            last: [0; 16],
            last_len: usize::MAX,
            last_id: (0, 0),
        }
    }

    /// Looks up `name`, ignoring `/` and ASCII case (`EUR/USD` is EURUSD).
    #[inline]
    pub(crate) fn resolve(&mut self, name: &[u8]) -> Result<(SymbolId, u8), RowError> {
        let mut key = [0u8; 16];
        let mut n = 0;
        for &c in name.iter().filter(|&&c| c != b'/') {
            if n == key.len() {
                return Err(RowError::Symbol(String::from_utf8_lossy(name).into_owned()));
            }
            key[n] = c.to_ascii_uppercase();
            n += 1;
        }
        if n == self.last_len && key[..n] == self.last[..n] {
            return Ok(self.last_id);
        }
        let unknown = || RowError::Symbol(String::from_utf8_lossy(name).into_owned());
        let text = std::str::from_utf8(&key[..n]).map_err(|_| unknown())?;
        let inst = self.table.by_name(text).ok_or_else(unknown)?;
        self.last = key;
        self.last_len = n;
        self.last_id = (inst.id, inst.digits);
        Ok(self.last_id)
    }
}

/// The capture being written plus the report.
pub(crate) struct Sink {
    writer: CaptureWriter,
    report: ImportReport,
    strict: bool,
    provider: ProviderId,
    next_seq: u64,
}

impl Sink {
    #[inline]
    pub(crate) fn tick(&mut self, mut t: Tick) -> Result<(), ImportError> {
        t.provider = self.provider;
        t.receive_time_ns = t.provider_time_ns;
        t.feed_seq = self.next_seq;
        self.next_seq += 1;
        self.writer.write(&t)?;
        self.report.ticks += 1;
        self.report.first_time_ns.get_or_insert(t.provider_time_ns);
        self.report.last_time_ns = Some(t.provider_time_ns);
        Ok(())
    }

    pub(crate) fn bad(&mut self, file: &Path, line: u64, err: RowError) -> Result<(), ImportError> {
        let bad = BadRow {
            file: file.to_path_buf(),
            line,
            reason: err.to_string(),
        };
        if self.strict {
            return Err(ImportError::BadRow(bad));
        }
        self.report.bad_rows += 1;
        if self.report.bad_row_samples.len() < BAD_ROW_REPORTS_MAX {
            self.report.bad_row_samples.push(bad);
        }
        Ok(())
    }

    /// Routes one parsed row.
    #[inline]
    pub(crate) fn row(
        &mut self,
        file: &Path,
        line: u64,
        row: Result<Row, RowError>,
    ) -> Result<(), ImportError> {
        match row {
            Ok(Row::Tick(t)) => {
                self.report.rows += 1;
                self.tick(t)
            }
            Ok(Row::Skip { counts_as_row }) => {
                if counts_as_row {
                    self.report.rows += 1;
                    self.report.rows_without_quote += 1;
                }
                Ok(())
            }
            Err(e) => {
                self.report.rows += 1;
                self.bad(file, line, e)
            }
        }
    }
}

/// Runs an import; see the module doc.
pub fn run(opts: &ImportOptions) -> Result<ImportReport, ImportError> {
    if opts.inputs.is_empty() {
        return Err(ImportError::Options("no input files".into()));
    }
    if opts.table.providers().get(opts.provider as usize).is_none() {
        return Err(ImportError::Options(format!(
            "provider id {} is not in the provider table",
            opts.provider
        )));
    }
    let format_name = clap::ValueEnum::to_possible_value(&opts.format)
        .map_or_else(String::new, |v| v.get_name().to_string());
    let source = format!("import {format_name} {}", describe_inputs(&opts.inputs));
    let header = CaptureHeader::for_table(&opts.table, &source);
    let writer = CaptureWriter::create(
        &opts.out_dir,
        header,
        opts.segment_bytes_max,
        WRITE_BUFFER_BYTES_DEFAULT,
    )?;
    let mut sink = Sink {
        writer,
        report: ImportReport::default(),
        strict: opts.strict,
        provider: opts.provider,
        next_seq: 1,
    };
    for path in &opts.inputs {
        sink.report.files += 1;
        match opts.format {
            ImportFormat::Dukascopy => dukascopy::import_file(opts, path, &mut sink)?,
            _ => text::import_file(opts, path, &mut sink)?,
        }
    }
    let totals = sink.writer.finish()?;
    let mut report = sink.report;
    report.segments = totals.segments;
    report.bytes = totals.bytes;
    report.paths = totals.paths;
    Ok(report)
}

fn describe_inputs(inputs: &[PathBuf]) -> String {
    let first = inputs[0].display().to_string();
    match inputs.len() {
        1 => first,
        n => format!("{first} and {} more", n - 1),
    }
}

pub(crate) fn io_err(path: &Path, source: std::io::Error) -> ImportError {
    ImportError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Opens a text file, dropping a UTF-8 byte-order mark and decoding
/// UTF-16LE (MetaTrader's export encoding) to bytes on the fly.
pub(crate) fn open_text(path: &Path) -> Result<Box<dyn BufRead>, ImportError> {
    let mut f = File::open(path).map_err(|e| io_err(path, e))?;
    let mut bom = [0u8; 3];
    let mut got = 0;
    while got < 3 {
        match f.read(&mut bom[got..]).map_err(|e| io_err(path, e))? {
            0 => break,
            n => got += n,
        }
    }
    let skip = match &bom[..got] {
        [0xEF, 0xBB, 0xBF] => 3,
        [0xFF, 0xFE, ..] => {
            f.seek(SeekFrom::Start(2)).map_err(|e| io_err(path, e))?;
            let dec = Utf16LeBytes::new(f);
            return Ok(Box::new(BufReader::with_capacity(READ_BUFFER_BYTES, dec)));
        }
        _ => 0,
    };
    f.seek(SeekFrom::Start(skip)).map_err(|e| io_err(path, e))?;
    Ok(Box::new(BufReader::with_capacity(READ_BUFFER_BYTES, f)))
}

/// UTF-16LE to single bytes: ASCII code units pass, anything else becomes
/// 0xFF, which no parser accepts (tick files are ASCII).
struct Utf16LeBytes<R> {
    inner: R,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl<R: Read> Utf16LeBytes<R> {
    fn new(inner: R) -> Self {
        Utf16LeBytes {
            inner,
            buf: vec![0; 64 * 1024].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }
}

impl<R: Read> Read for Utf16LeBytes<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.end - self.start < 2 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            let n = self.inner.read(&mut self.buf[self.end..])?;
            if n == 0 {
                return Ok(0); // an odd trailing byte is not a character
            }
            self.end += n;
        }
        let pairs = ((self.end - self.start) / 2).min(out.len());
        for (i, o) in out[..pairs].iter_mut().enumerate() {
            let lo = self.buf[self.start + 2 * i];
            let hi = self.buf[self.start + 2 * i + 1];
            *o = if hi == 0 && lo < 0x80 { lo } else { 0xFF };
        }
        self.start += 2 * pairs;
        Ok(pairs)
    }
}
