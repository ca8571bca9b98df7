//! Line-based importers: HistData, TrueFX, MetaTrader 5 and generic CSV.
//!
//! One line buffer per file, reused for every row; fields are byte slices
//! of it held in a fixed array. A good row allocates nothing.

use std::io::BufRead;
use std::path::Path;

use super::{
    io_err, open_text, ColumnMap, ImportError, ImportFormat, ImportOptions, Row, RowError, Sink,
    SymbolCache, TimeFormat, LINE_LEN_MAX,
};
use crate::capture::time::{date, digits, expect, fraction, parse_iso8601, CivilTime, NS_PER_HOUR};
use crate::model::price::parse_price_bytes;
use crate::model::{Mantissa, SymbolId, Tick, NO_PRICE};

/// Most fields a row may have.
pub(crate) const FIELDS_MAX: usize = 32;
/// HistData's fixed zone: EST all year (UTC-5, no daylight saving).
const HISTDATA_OFFSET_NS: i64 = -5 * NS_PER_HOUR;

/// Splits `line` on `delim` into `out`; returns the field count (fields
/// past [`FIELDS_MAX`] are folded into the last one).
#[inline]
fn split<'a>(line: &'a [u8], delim: u8, out: &mut [&'a [u8]; FIELDS_MAX]) -> usize {
    let mut n = 0;
    let mut start = 0;
    for (i, &c) in line.iter().enumerate() {
        if c == delim && n < FIELDS_MAX - 1 {
            out[n] = &line[start..i];
            n += 1;
            start = i + 1;
        }
    }
    out[n] = &line[start..];
    n + 1
}

#[inline]
fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

#[inline]
fn price(field: &'static str, text: &[u8], digits: u8) -> Result<Mantissa, RowError> {
    parse_price_bytes(trim(text), digits).map_err(|err| RowError::Price { field, err })
}

#[inline]
fn uint(field: &'static str, text: &[u8]) -> Result<u64, RowError> {
    let t = trim(text);
    if t.is_empty() || t.len() > 19 || !t.iter().all(u8::is_ascii_digit) {
        return Err(RowError::Size(field));
    }
    Ok(t.iter().fold(0u64, |v, &c| v * 10 + u64::from(c - b'0')))
}

fn quote(symbol: SymbolId, bid: Mantissa, ask: Mantissa, time_ns: u64) -> Tick {
    Tick {
        bid,
        ask,
        provider_time_ns: time_ns,
        symbol,
        ..Tick::EMPTY
    }
}

/// Per-file parsing state.
struct Parser<'o, 't> {
    opts: &'o ImportOptions,
    symbols: SymbolCache<'t>,
    /// The symbol given by flag or path, for formats whose rows lack it.
    fixed_symbol: Option<(SymbolId, u8)>,
    /// MT5: the last bid and ask, carried into one-sided rows.
    last_bid: Mantissa,
    last_ask: Mantissa,
    /// MT5 column positions (from its header line).
    mt5_cols: [usize; 4],
}

pub(super) fn import_file(
    opts: &ImportOptions,
    path: &Path,
    sink: &mut Sink,
) -> Result<(), ImportError> {
    if opts.format == ImportFormat::Csv && opts.columns.is_none() {
        return Err(ImportError::Options("csv import needs --columns".into()));
    }
    let mut p = Parser {
        opts,
        symbols: SymbolCache::new(&opts.table),
        fixed_symbol: None,
        last_bid: NO_PRICE,
        last_ask: NO_PRICE,
        mt5_cols: [0, 1, 2, 3],
    };
    p.fixed_symbol = p.symbol_for_file(path)?;
    let mut reader = open_text(path)?;
    let mut line = Vec::with_capacity(LINE_LEN_MAX);
    let mut line_no = 0u64;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| io_err(path, e))?;
        if n == 0 {
            return Ok(());
        }
        line_no += 1;
        let row = trim_eol(&line);
        if row.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed = if row.len() > LINE_LEN_MAX {
            Err(RowError::TooLong)
        } else {
            p.parse(row, line_no)
        };
        sink.row(path, line_no, parsed)?;
    }
}

#[inline]
fn trim_eol(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    &line[..end]
}

impl Parser<'_, '_> {
    /// The symbol for a file whose rows do not carry one: the flag, or a
    /// name in the file name (`DAT_ASCII_EURUSD_T_202401.csv`,
    /// `EURUSD_202401020000_202401022359.csv`).
    fn symbol_for_file(&mut self, path: &Path) -> Result<Option<(SymbolId, u8)>, ImportError> {
        let needs = match self.opts.format {
            ImportFormat::Histdata | ImportFormat::Mt5 => true,
            ImportFormat::Csv => self.opts.columns.is_some_and(|c| c.symbol.is_none()),
            _ => false,
        };
        if let Some(name) = &self.opts.symbol {
            return self
                .symbols
                .resolve(name.as_bytes())
                .map(Some)
                .map_err(|e| ImportError::Options(e.to_string()));
        }
        if !needs {
            return Ok(None);
        }
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let guess = stem
            .strip_prefix("DAT_ASCII_")
            .unwrap_or(stem)
            .split(['_', '-', '.', ' '])
            .next()
            .unwrap_or("");
        self.symbols
            .resolve(guess.as_bytes())
            .map(Some)
            .map_err(|_| {
                ImportError::Options(format!(
                    "{}: cannot tell the symbol from the file name; give --symbol",
                    path.display()
                ))
            })
    }

    #[inline]
    fn parse(&mut self, row: &[u8], line_no: u64) -> Result<Row, RowError> {
        match self.opts.format {
            ImportFormat::Histdata => self.histdata(row),
            ImportFormat::Truefx => self.truefx(row),
            ImportFormat::Mt5 => self.mt5(row, line_no),
            ImportFormat::Csv => self.csv(row, line_no),
            ImportFormat::Dukascopy => unreachable!("bi5 is not a text format"),
        }
    }

    fn fixed(&self) -> (SymbolId, u8) {
        self.fixed_symbol
            .expect("symbol_for_file resolved the symbol of this format")
    }

    /// `20240115 170000123,1.08123,1.08125,0`
    fn histdata(&mut self, row: &[u8]) -> Result<Row, RowError> {
        let mut f = [&[][..]; FIELDS_MAX];
        if split(row, b',', &mut f) != 4 {
            return Err(RowError::Shape(
                "expected 4 comma-separated fields: time,bid,ask,volume",
            ));
        }
        let (symbol, d) = self.fixed();
        let time =
            histdata_time(trim(f[0])).ok_or(RowError::Time("expected YYYYMMDD HHMMSSfff"))?;
        let mut t = quote(symbol, price("bid", f[1], d)?, price("ask", f[2], d)?, time);
        t.bid_size = uint("volume", f[3])?;
        t.ask_size = t.bid_size;
        Ok(Row::Tick(t))
    }

    /// `EUR/USD,20240115 13:00:00.123,1.08123,1.08125`
    fn truefx(&mut self, row: &[u8]) -> Result<Row, RowError> {
        let mut f = [&[][..]; FIELDS_MAX];
        if split(row, b',', &mut f) != 4 {
            return Err(RowError::Shape(
                "expected 4 comma-separated fields: pair,time,bid,ask",
            ));
        }
        let (symbol, d) = self.symbols.resolve(trim(f[0]))?;
        let time =
            truefx_time(trim(f[1])).ok_or(RowError::Time("expected YYYYMMDD HH:MM:SS.mmm"))?;
        Ok(Row::Tick(quote(
            symbol,
            price("bid", f[2], d)?,
            price("ask", f[3], d)?,
            time,
        )))
    }

    /// `2024.01.15 \t 13:00:00.123 \t bid \t ask \t last \t volume \t flags`;
    /// the header line names the columns.
    fn mt5(&mut self, row: &[u8], line_no: u64) -> Result<Row, RowError> {
        let mut f = [&[][..]; FIELDS_MAX];
        let n = split(row, b'\t', &mut f);
        if line_no == 1 && row.first() == Some(&b'<') {
            return self.mt5_header(&f[..n]);
        }
        let [date, time, bid, ask] = self.mt5_cols;
        if n <= date.max(time).max(bid).max(ask) {
            return Err(RowError::Shape("too few tab-separated fields"));
        }
        let (symbol, d) = self.fixed();
        let ns = mt5_time(trim(f[date]), trim(f[time]), self.opts.tz_offset_ns)
            .ok_or(RowError::Time("expected YYYY.MM.DD and HH:MM:SS.mmm"))?;
        let (bid_text, ask_text) = (trim(f[bid]), trim(f[ask]));
        if bid_text.is_empty() && ask_text.is_empty() {
            return Ok(Row::Skip {
                counts_as_row: true,
            });
        }
        let new_bid = if bid_text.is_empty() {
            self.last_bid
        } else {
            price("bid", bid_text, d)?
        };
        let new_ask = if ask_text.is_empty() {
            self.last_ask
        } else {
            price("ask", ask_text, d)?
        };
        if new_bid == NO_PRICE {
            return Err(RowError::NoQuoteYet("ask"));
        }
        if new_ask == NO_PRICE {
            return Err(RowError::NoQuoteYet("bid"));
        }
        self.last_bid = new_bid;
        self.last_ask = new_ask;
        Ok(Row::Tick(quote(symbol, new_bid, new_ask, ns)))
    }

    fn mt5_header(&mut self, names: &[&[u8]]) -> Result<Row, RowError> {
        let find = |want: &[u8]| {
            names
                .iter()
                .position(|n| trim(n).eq_ignore_ascii_case(want))
        };
        match (
            find(b"<DATE>"),
            find(b"<TIME>"),
            find(b"<BID>"),
            find(b"<ASK>"),
        ) {
            (Some(a), Some(b), Some(c), Some(d)) => {
                self.mt5_cols = [a, b, c, d];
                Ok(Row::Skip {
                    counts_as_row: false,
                })
            }
            _ => Err(RowError::Shape(
                "header lacks <DATE>, <TIME>, <BID> or <ASK>",
            )),
        }
    }

    fn csv(&mut self, row: &[u8], line_no: u64) -> Result<Row, RowError> {
        if line_no == 1 && self.opts.has_header {
            return Ok(Row::Skip {
                counts_as_row: false,
            });
        }
        let cols: ColumnMap = self.opts.columns.expect("checked by import_file");
        let mut f = [&[][..]; FIELDS_MAX];
        let n = split(row, self.opts.delimiter, &mut f);
        let widest = [
            Some(cols.time),
            Some(cols.bid),
            Some(cols.ask),
            cols.symbol,
            cols.bid_size,
            cols.ask_size,
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0);
        if n <= widest {
            return Err(RowError::Shape(
                "fewer fields than the column mapping needs",
            ));
        }
        let (symbol, d) = match cols.symbol {
            Some(i) => self.symbols.resolve(trim(f[i]))?,
            None => self.fixed(),
        };
        let time = csv_time(trim(f[cols.time]), self.opts.time_format)
            .ok_or(RowError::Time("does not match --time-format"))?;
        let mut t = quote(
            symbol,
            price("bid", f[cols.bid], d)?,
            price("ask", f[cols.ask], d)?,
            time,
        );
        if let Some(i) = cols.bid_size {
            t.bid_size = uint("bid_size", f[i])?;
        }
        t.ask_size = match cols.ask_size {
            Some(i) => uint("ask_size", f[i])?,
            None => t.bid_size,
        };
        Ok(Row::Tick(t))
    }
}

/// `YYYYMMDD HHMMSSfff` in EST (UTC-5 all year).
pub(crate) fn histdata_time(b: &[u8]) -> Option<u64> {
    let mut p = 0;
    let ymd = date(b, &mut p, None)?;
    expect(b, &mut p, b' ')?;
    let hms = (
        digits(b, &mut p, 2)?,
        digits(b, &mut p, 2)?,
        digits(b, &mut p, 2)?,
    );
    let millis = digits(b, &mut p, 3)?;
    (p == b.len()).then_some(())?;
    CivilTime::new(ymd, hms, millis * 1_000_000).to_utc_ns(HISTDATA_OFFSET_NS)
}

/// `YYYYMMDD HH:MM:SS[.fff]` in UTC.
pub(crate) fn truefx_time(b: &[u8]) -> Option<u64> {
    let mut p = 0;
    let ymd = date(b, &mut p, None)?;
    expect(b, &mut p, b' ')?;
    let (hour, minute, second, nanos) = hms(b, &mut p)?;
    (p == b.len()).then_some(())?;
    CivilTime::new(ymd, (hour, minute, second), nanos).to_utc_ns(0)
}

/// `YYYY.MM.DD` + `HH:MM:SS[.fff]` in server time at `offset_ns`.
pub(crate) fn mt5_time(date_b: &[u8], time: &[u8], offset_ns: i64) -> Option<u64> {
    let mut p = 0;
    let ymd = date(date_b, &mut p, Some(b'.'))?;
    (p == date_b.len()).then_some(())?;
    let mut q = 0;
    let (hour, minute, second, nanos) = hms(time, &mut q)?;
    (q == time.len()).then_some(())?;
    CivilTime::new(ymd, (hour, minute, second), nanos).to_utc_ns(offset_ns)
}

fn hms(b: &[u8], p: &mut usize) -> Option<(u32, u32, u32, u32)> {
    let hour = digits(b, p, 2)?;
    expect(b, p, b':')?;
    let minute = digits(b, p, 2)?;
    expect(b, p, b':')?;
    let second = digits(b, p, 2)?;
    Some((hour, minute, second, fraction(b, p, b'.')?))
}

fn csv_time(b: &[u8], format: TimeFormat) -> Option<u64> {
    let scale: u64 = match format {
        TimeFormat::Iso8601 => return parse_iso8601(b),
        TimeFormat::UnixS => 1_000_000_000,
        TimeFormat::UnixMs => 1_000_000,
        TimeFormat::UnixUs => 1_000,
        TimeFormat::UnixNs => 1,
    };
    if b.is_empty() || b.len() > 20 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = b.iter().try_fold(0u64, |v, &c| {
        v.checked_mul(10)?.checked_add(u64::from(c - b'0'))
    })?;
    v.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histdata_is_est_all_year() {
        // 17:00 EST is 22:00 UTC in January and in July alike.
        assert_eq!(
            histdata_time(b"20240115 170000123"),
            crate::capture::time::parse_iso8601(b"2024-01-15T22:00:00.123Z")
        );
        assert_eq!(
            histdata_time(b"20240715 170000000"),
            crate::capture::time::parse_iso8601(b"2024-07-15T22:00:00Z")
        );
        assert_eq!(histdata_time(b"20240115 17000012"), None);
    }

    #[test]
    fn split_keeps_empty_fields() {
        let mut f = [&[][..]; FIELDS_MAX];
        assert_eq!(split(b"a\t\tb", b'\t', &mut f), 3);
        assert_eq!(f[1], b"");
        assert_eq!(f[2], b"b");
    }
}
