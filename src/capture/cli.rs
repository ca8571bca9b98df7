//! Command-line arguments for the capture commands, for the main binary to
//! embed with `#[command(flatten)]` / `#[command(subcommand)]`:
//! `pricewire import` ([`ImportArgs`]), `pricewire capture cat|stats`
//! ([`CaptureCmd`]) and `pricewire replay` ([`ReplayArgs`]; the caller
//! wires the [`ReplaySource`] into the engine or a server).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};

use super::import::{self, ColumnMap, ImportFormat, ImportOptions, ImportReport, TimeFormat};
use super::inspect;
use super::reader::{CorruptPolicy, ReaderOptions};
use super::replay::{ReplaySource, ReplaySpeed};
use super::time::{parse_iso8601, parse_offset};
use crate::model::InstrumentTable;

/// `pricewire import`: real tick files into a capture.
#[derive(Debug, Clone, clap::Args)]
pub struct ImportArgs {
    /// Input format.
    #[arg(long, value_enum)]
    pub format: ImportFormat,
    /// Input files, imported in the order given.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Capture directory to write (created; numbering continues after
    /// existing segments).
    #[arg(long, short = 'o')]
    pub out: PathBuf,
    /// Symbol, for files whose rows do not name it (default: from the file name/path).
    #[arg(long)]
    pub symbol: Option<String>,
    /// Provider name to record the ticks under (default: the first provider).
    #[arg(long)]
    pub provider: Option<String>,
    /// MT5 server time zone as a fixed offset, e.g. +02:00.
    #[arg(long, default_value = "+00:00", value_parser = parse_tz)]
    pub tz: i64,
    /// CSV column mapping, e.g. time=0,bid=1,ask=2,symbol=3.
    #[arg(long)]
    pub columns: Option<ColumnMap>,
    /// CSV timestamp encoding.
    #[arg(long, value_enum, default_value_t = TimeFormat::UnixMs)]
    pub time_format: TimeFormat,
    /// CSV field delimiter (one ASCII character; `\t` for tab).
    #[arg(long, default_value = ",")]
    pub delimiter: String,
    /// CSV: the first line is a header.
    #[arg(long)]
    pub header: bool,
    /// Dukascopy: the file's hour, YYYY-MM-DDTHH (UTC), when the path does not say.
    #[arg(long, value_parser = parse_hour)]
    pub hour: Option<u64>,
    /// Dukascopy: decimals of the file's points when they differ from the instrument's.
    #[arg(long)]
    pub point_digits: Option<u8>,
    /// Stop at the first bad row.
    #[arg(long)]
    pub strict: bool,
    /// Segment size limit in MiB.
    #[arg(long, default_value_t = 256)]
    pub segment_mb: u64,
}

fn parse_tz(s: &str) -> Result<i64, String> {
    parse_offset(s).ok_or_else(|| format!("invalid offset {s:?}: expected +HH:MM or -HH:MM"))
}

fn parse_hour(s: &str) -> Result<u64, String> {
    parse_iso8601(format!("{s}:00:00Z").as_bytes())
        .ok_or_else(|| format!("invalid hour {s:?}: expected YYYY-MM-DDTHH"))
}

impl ImportArgs {
    /// The library options these arguments stand for.
    pub fn to_options(&self, table: &InstrumentTable) -> anyhow::Result<ImportOptions> {
        let mut o = ImportOptions::new(
            self.format,
            self.files.clone(),
            self.out.clone(),
            table.clone(),
        );
        o.symbol = self.symbol.clone();
        if let Some(name) = &self.provider {
            o.provider = table
                .provider_by_name(name)
                .with_context(|| format!("unknown provider {name:?}"))?
                .id;
        }
        o.tz_offset_ns = self.tz;
        o.columns = self.columns;
        o.time_format = self.time_format;
        o.delimiter = match self.delimiter.as_str() {
            "\\t" | "tab" => b'\t',
            d if d.len() == 1 && d.is_ascii() => d.as_bytes()[0],
            d => bail!("delimiter {d:?} is not one ASCII character"),
        };
        o.has_header = self.header;
        o.hour_utc_ns = self.hour;
        o.point_digits = self.point_digits;
        o.strict = self.strict;
        o.segment_bytes_max = self.segment_mb.saturating_mul(1 << 20);
        Ok(o)
    }

    /// Runs the import and prints its report to `out`.
    pub fn run(
        &self,
        table: &InstrumentTable,
        out: &mut impl Write,
    ) -> anyhow::Result<ImportReport> {
        let report = import::run(&self.to_options(table)?).context("import failed")?;
        writeln!(out, "{report}")?;
        Ok(report)
    }
}

/// `pricewire capture ...`: look into captures.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum CaptureCmd {
    /// Print every record.
    Cat {
        /// Segment files or capture directories.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Counts, symbols, time span, rates, gaps, crossed quotes.
    Stats {
        /// Segment files or capture directories.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

impl CaptureCmd {
    /// Runs the subcommand, printing to `out`; reads in bounded memory.
    pub fn run(&self, out: &mut impl Write) -> anyhow::Result<()> {
        match self {
            CaptureCmd::Cat { files } => {
                inspect::cat(files, out)?;
            }
            CaptureCmd::Stats { files } => {
                write!(out, "{}", inspect::stats(files)?)?;
            }
        }
        Ok(())
    }
}

/// `pricewire replay`: the caller builds the pipeline around
/// [`ReplayArgs::open`].
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Segment files or capture directories, replayed in order.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// 1x (recorded pace), Nx (N times faster, e.g. 10x or 0.5x) or max.
    #[arg(long, default_value = "1x")]
    pub speed: ReplaySpeed,
    /// Where replayed ticks go; interpreted by the caller (e.g. an ingest
    /// address host:port). None: the in-process, deterministic engine
    /// replay (`pipeline::determ`).
    #[arg(long)]
    pub to: Option<String>,
    /// End the replay at the first damaged record instead of skipping it.
    #[arg(long)]
    pub stop_on_damage: bool,
}

impl ReplayArgs {
    /// Opens the replay source; with `table`, every segment must match it.
    pub fn open(&self, table: Option<&InstrumentTable>) -> anyhow::Result<ReplaySource> {
        let opts = ReaderOptions {
            policy: if self.stop_on_damage {
                CorruptPolicy::Stop
            } else {
                CorruptPolicy::Skip
            },
            table: table.cloned(),
        };
        Ok(ReplaySource::open(&self.files, self.speed, opts)?)
    }
}
