//! Looking into captures: print records ([`cat`]) and summarise them
//! ([`stats`]). Both stream through [`CaptureReader`] in constant memory:
//! per-symbol counts are bounded by the symbol id space, rates go into a
//! fixed-bound histogram, and only the largest [`GAPS_TOP`] gaps are kept.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;

use super::reader::{CaptureReader, ReaderOptions, StopPoint};
use super::time::UtcNs;
use super::CaptureError;
use crate::model::{FixedPrice, Tick, NO_PRICE};

/// How many of the largest inter-arrival gaps [`stats`] reports.
pub const GAPS_TOP: usize = 5;

fn out_err(e: std::io::Error) -> CaptureError {
    CaptureError::io(Path::new("<output>"), e)
}

/// Prints every record of `files` (segment files or capture directories)
/// as one line each, with a `#` line per segment header and `#` lines for
/// truncation and damage at the end. Returns the number of records.
pub fn cat(files: &[PathBuf], out: &mut impl Write) -> Result<u64, CaptureError> {
    let mut r = CaptureReader::open(files, ReaderOptions::default())?;
    let mut shown: Option<PathBuf> = None;
    let mut n = 0u64;
    while let Some(t) = r.next_tick()? {
        if shown.as_deref() != r.current_path() {
            shown = r.current_path().map(Path::to_path_buf);
            write_header(&r, out).map_err(out_err)?;
        }
        write_tick(&r, n, &t, out).map_err(out_err)?;
        n += 1;
    }
    let s = r.summary();
    for stop in &s.truncated {
        writeln!(out, "# {stop}").map_err(out_err)?;
    }
    for bad in &s.corrupt {
        writeln!(out, "# {bad}").map_err(out_err)?;
    }
    Ok(n)
}

fn write_header(r: &CaptureReader, out: &mut impl Write) -> std::io::Result<()> {
    let (Some(h), Some(p)) = (r.header(), r.current_path()) else {
        return Ok(());
    };
    writeln!(
        out,
        "# {} segment {} version {} created {} source {:?}: {} instruments, {} providers",
        p.display(),
        h.segment_index,
        h.version,
        UtcNs(h.created_wall_ns),
        h.source,
        h.instruments.len(),
        h.providers.len()
    )?;
    writeln!(
        out,
        "# index provider_time receive_ns symbol provider bid ask bid_size ask_size feed_seq flags"
    )
}

fn write_tick(r: &CaptureReader, i: u64, t: &Tick, out: &mut impl Write) -> std::io::Result<()> {
    let h = r
        .header()
        .expect("a tick comes from a segment with a header");
    let d = h.digits(t.symbol).unwrap_or(0);
    writeln!(
        out,
        "{i} {} {} {} {} {} {} {} {} {} {:#x}",
        UtcNs(t.provider_time_ns),
        t.receive_time_ns,
        h.symbol_name(t.symbol),
        h.provider_name(t.provider),
        FixedPrice(t.bid, d),
        FixedPrice(t.ask, d),
        t.bid_size,
        t.ask_size,
        t.feed_seq,
        t.flags
    )
}

/// One inter-arrival gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// Receive-time distance from the previous tick, ns.
    pub gap_ns: u64,
    /// Provider time of the tick that ended the gap.
    pub at_provider_ns: u64,
}

/// Summary statistics of a capture.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CaptureStats {
    /// Segment files read.
    pub files: u64,
    /// Ticks read (damaged records skipped are not counted).
    pub ticks: u64,
    /// (symbol, ticks), most active first.
    pub symbols: Vec<(String, u64)>,
    /// Provider time of the first tick read (UTC ns); `None` for an empty capture.
    pub first_provider_ns: Option<u64>,
    /// Provider time of the last tick read (UTC ns); `None` for an empty capture.
    pub last_provider_ns: Option<u64>,
    /// Receive-time span (last - first), ns.
    pub span_ns: u64,
    /// Ticks per second over the seconds (by receive time) that had ticks.
    pub rate_p50_per_s: u64,
    /// 99th percentile of the per-second tick counts.
    pub rate_p99_per_s: u64,
    /// Busiest second's tick count.
    pub rate_max_per_s: u64,
    /// Largest inter-arrival gaps (by receive time), largest first.
    pub gaps: Vec<Gap>,
    /// Quotes with bid > ask.
    pub crossed: u64,
    /// Quotes with bid == ask.
    pub locked: u64,
    /// Quotes missing a side.
    pub one_sided: u64,
    /// Segments cut short, one entry per such segment.
    pub truncated: Vec<StopPoint>,
    /// Damaged records skipped.
    pub corrupt_count: u64,
}

struct Acc {
    /// Symbol id -> (name, ticks); bounded by the u16 id space.
    by_symbol: HashMap<u16, (String, u64)>,
    rates: Histogram<u64>,
    second: Option<u64>,
    in_second: u64,
    prev_recv: Option<u64>,
    gaps: Vec<Gap>,
    s: CaptureStats,
}

impl Acc {
    fn add(&mut self, name: &str, t: &Tick) {
        let s = &mut self.s;
        s.ticks += 1;
        s.first_provider_ns.get_or_insert(t.provider_time_ns);
        s.last_provider_ns = Some(t.provider_time_ns);
        if t.bid == NO_PRICE || t.ask == NO_PRICE {
            s.one_sided += 1;
        } else if t.bid > t.ask {
            s.crossed += 1;
        } else if t.bid == t.ask {
            s.locked += 1;
        }
        match self.by_symbol.get_mut(&t.symbol) {
            Some((_, c)) => *c += 1,
            None => {
                self.by_symbol.insert(t.symbol, (name.to_string(), 1));
            }
        }
        self.rate(t.receive_time_ns);
    }

    fn rate(&mut self, recv_ns: u64) {
        let sec = recv_ns / 1_000_000_000;
        if self.second != Some(sec) {
            self.flush_second();
            self.second = Some(sec);
        }
        self.in_second += 1;
        if let Some(prev) = self.prev_recv.replace(recv_ns) {
            if let Some(gap_ns) = recv_ns.checked_sub(prev) {
                self.gap(gap_ns, recv_ns);
            }
        }
    }

    fn gap(&mut self, gap_ns: u64, at_ns: u64) {
        if self.gaps.len() == GAPS_TOP && self.gaps[GAPS_TOP - 1].gap_ns >= gap_ns {
            return;
        }
        let g = Gap {
            gap_ns,
            at_provider_ns: self.s.last_provider_ns.unwrap_or(at_ns),
        };
        let pos = self.gaps.partition_point(|x| x.gap_ns >= gap_ns);
        self.gaps.insert(pos, g);
        self.gaps.truncate(GAPS_TOP);
    }

    fn flush_second(&mut self) {
        if self.in_second > 0 {
            self.rates.saturating_record(self.in_second);
        }
        self.in_second = 0;
    }
}

/// Reads `files` once and summarises them.
pub fn stats(files: &[PathBuf]) -> Result<CaptureStats, CaptureError> {
    let mut r = CaptureReader::open(files, ReaderOptions::default())?;
    let mut acc = Acc {
        by_symbol: HashMap::new(),
        rates: Histogram::new_with_max(1 << 40, 3).expect("static histogram bounds are valid"),
        second: None,
        in_second: 0,
        prev_recv: None,
        gaps: Vec::with_capacity(GAPS_TOP + 1),
        s: CaptureStats::default(),
    };
    while let Some(t) = r.next_tick()? {
        let name = r.header().map_or("?", |h| h.symbol_name(t.symbol));
        acc.add(name, &t);
    }
    acc.flush_second();
    let sum = r.summary();
    let mut s = acc.s;
    s.files = sum.files;
    s.span_ns = sum
        .last_receive_ns
        .zip(sum.first_receive_ns)
        .map_or(0, |(l, f)| l.saturating_sub(f));
    s.rate_p50_per_s = acc.rates.value_at_quantile(0.5);
    s.rate_p99_per_s = acc.rates.value_at_quantile(0.99);
    s.rate_max_per_s = acc.rates.max();
    s.gaps = acc.gaps;
    s.truncated = sum.truncated.clone();
    s.corrupt_count = sum.corrupt_count;
    let mut symbols: Vec<(String, u64)> = acc.by_symbol.into_values().collect();
    symbols.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    s.symbols = symbols;
    Ok(s)
}

impl std::fmt::Display for CaptureStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "ticks: {} in {} files", self.ticks, self.files)?;
        if let (Some(a), Some(b)) = (self.first_provider_ns, self.last_provider_ns) {
            writeln!(f, "provider time: {} .. {}", UtcNs(a), UtcNs(b))?;
        }
        writeln!(f, "receive span: {:.3} s", self.span_ns as f64 / 1e9)?;
        writeln!(
            f,
            "rate per second: p50 {} p99 {} max {}",
            self.rate_p50_per_s, self.rate_p99_per_s, self.rate_max_per_s
        )?;
        write!(f, "symbols ({}):", self.symbols.len())?;
        for (name, n) in &self.symbols {
            write!(f, " {name}={n}")?;
        }
        writeln!(f)?;
        write!(f, "largest gaps:")?;
        for g in &self.gaps {
            write!(
                f,
                " {:.3} ms before {};",
                g.gap_ns as f64 / 1e6,
                UtcNs(g.at_provider_ns)
            )?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "crossed: {} locked: {} one-sided: {}",
            self.crossed, self.locked, self.one_sided
        )?;
        if self.corrupt_count > 0 {
            writeln!(f, "damaged records skipped: {}", self.corrupt_count)?;
        }
        for stop in &self.truncated {
            writeln!(f, "truncated: {stop}")?;
        }
        Ok(())
    }
}
