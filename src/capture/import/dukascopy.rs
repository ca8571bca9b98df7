//! Dukascopy `.bi5` hour files.
//!
//! A file is an LZMA ("alone" format) stream of 20-byte big-endian
//! records: `u32` milliseconds since the start of the hour, `u32` ask and
//! `u32` bid in integer points, `f32` ask volume and `f32` bid volume in
//! millions of units. The symbol and the hour come from the path
//! `SYMBOL/YYYY/MM/DD/HHh_ticks.bi5`, where MM counts months from 00
//! (January), or from the options. Points are at the instrument's digits
//! unless `point_digits` says otherwise. The one hour file (at most a few
//! MiB decompressed) is decompressed into memory in one piece.

use std::io::BufReader;
use std::path::Path;

use super::{io_err, ImportError, ImportOptions, RowError, Sink, SymbolCache};
use crate::capture::time::{CivilTime, NS_PER_HOUR};
use crate::model::price::{rescale, DIGITS_MAX, POW10};
use crate::model::{Mantissa, SymbolId, Tick};

/// Bytes per `.bi5` record.
pub(crate) const RECORD_BYTES: usize = 20;
/// Largest decompressed hour accepted (about 3.3 M ticks).
const DECOMPRESSED_BYTES_MAX: u64 = 64 << 20;

pub(super) fn import_file(
    opts: &ImportOptions,
    path: &Path,
    sink: &mut Sink,
) -> Result<(), ImportError> {
    let (symbol, digits, hour_ns) = resolve(opts, path)?;
    let file = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    if file.metadata().map_err(|e| io_err(path, e))?.len() == 0 {
        return Ok(()); // Dukascopy serves hours without ticks as empty files
    }
    let mut data = Vec::new();
    let lzma_opts = lzma_rs::decompress::Options {
        memlimit: Some(DECOMPRESSED_BYTES_MAX as usize),
        ..Default::default()
    };
    lzma_rs::lzma_decompress_with_options(&mut BufReader::new(file), &mut data, &lzma_opts)
        .map_err(|e| {
            io_err(
                path,
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("LZMA: {e}")),
            )
        })?;
    let point_digits = opts.point_digits.unwrap_or(digits);
    let chunks = data.chunks_exact(RECORD_BYTES);
    let tail = chunks.remainder().len();
    for (i, rec) in chunks.enumerate() {
        let row = record(rec, symbol, digits, point_digits, hour_ns);
        sink.report.rows += 1;
        match row {
            Ok(t) => sink.tick(t)?,
            Err(e) => sink.bad(path, i as u64 + 1, e)?,
        }
    }
    if tail != 0 {
        let n = (data.len() / RECORD_BYTES) as u64 + 1;
        sink.bad(path, n, RowError::Shape("trailing partial record"))?;
    }
    Ok(())
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn record(
    rec: &[u8],
    symbol: SymbolId,
    digits: u8,
    point_digits: u8,
    hour_ns: u64,
) -> Result<Tick, RowError> {
    let ms = be32(rec, 0);
    if ms >= 3_600_000 {
        return Err(RowError::Time("millisecond offset beyond the hour"));
    }
    let ask = points(be32(rec, 4), point_digits, digits)?;
    let bid = points(be32(rec, 8), point_digits, digits)?;
    let ask_size = volume(f32::from_bits(be32(rec, 12)))?;
    let bid_size = volume(f32::from_bits(be32(rec, 16)))?;
    Ok(Tick {
        bid,
        ask,
        bid_size,
        ask_size,
        provider_time_ns: hour_ns + u64::from(ms) * 1_000_000,
        symbol,
        ..Tick::EMPTY
    })
}

/// File points to instrument points: widening is exact; narrowing must
/// drop only zeros, or the row is refused (no rounding of quotes).
fn points(raw: u32, from: u8, to: u8) -> Result<Mantissa, RowError> {
    let v = Mantissa::from(raw);
    if from > to && v % POW10[(from - to) as usize] != 0 {
        return Err(RowError::Shape(
            "price has more decimals than the instrument",
        ));
    }
    Ok(rescale(v, from, to))
}

/// Volume in millions (a float in the file) to units, rounded.
fn volume(v: f32) -> Result<u64, RowError> {
    if !v.is_finite() || !(0.0..=1.0e9).contains(&v) {
        return Err(RowError::Size("volume"));
    }
    Ok((f64::from(v) * 1_000_000.0).round() as u64)
}

/// (symbol id, digits, hour start in UTC ns) from the options or the path.
fn resolve(opts: &ImportOptions, path: &Path) -> Result<(SymbolId, u8, u64), ImportError> {
    if opts.point_digits.is_some_and(|d| d > DIGITS_MAX) {
        return Err(ImportError::Options(format!(
            "--point-digits above {DIGITS_MAX}"
        )));
    }
    let from_path = parse_path(path);
    let name = opts
        .symbol
        .clone()
        .or_else(|| from_path.as_ref().map(|p| p.0.clone()));
    let hour = opts.hour_utc_ns.or(from_path.as_ref().map(|p| p.1));
    let (Some(name), Some(hour)) = (name, hour) else {
        return Err(ImportError::Options(format!(
            "{}: path is not SYMBOL/YYYY/MM/DD/HHh_ticks.bi5; give --symbol and --hour",
            path.display()
        )));
    };
    let mut cache = SymbolCache::new(&opts.table);
    let (id, digits) = cache
        .resolve(name.as_bytes())
        .map_err(|e| ImportError::Options(format!("{}: {e}", path.display())))?;
    Ok((id, digits, hour))
}

/// `.../EURUSD/2024/00/15/13h_ticks.bi5` → ("EURUSD", 2024-01-15T13:00Z).
pub(crate) fn parse_path(path: &Path) -> Option<(String, u64)> {
    let parts: Vec<&str> = path.iter().filter_map(|c| c.to_str()).collect();
    let [.., symbol, year, month0, day, file] = parts.as_slice() else {
        return None;
    };
    let hour: u32 = file.strip_suffix("h_ticks.bi5")?.parse().ok()?;
    let month0: u32 = month0.parse().ok()?;
    let t = CivilTime {
        year: year.parse().ok()?,
        month: month0 + 1, // Dukascopy months count from 0
        day: day.parse().ok()?,
        hour,
        minute: 0,
        second: 0,
        nanos: 0,
    };
    debug_assert_eq!(NS_PER_HOUR, 3_600_000_000_000);
    Some((symbol.to_string(), t.to_utc_ns(0)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_months_count_from_zero() {
        let (sym, ns) = parse_path(Path::new("data/EURUSD/2024/00/15/13h_ticks.bi5")).unwrap();
        assert_eq!(sym, "EURUSD");
        assert_eq!(
            Some(ns),
            crate::capture::time::parse_iso8601(b"2024-01-15T13:00:00Z")
        );
        let (_, dec) = parse_path(Path::new("EURUSD/2023/11/31/23h_ticks.bi5")).unwrap();
        assert_eq!(
            Some(dec),
            crate::capture::time::parse_iso8601(b"2023-12-31T23:00:00Z")
        );
        assert!(parse_path(Path::new("EURUSD/2023/12/01/00h_ticks.bi5")).is_none());
    }

    #[test]
    fn narrowing_points_refuses_rounding() {
        assert_eq!(points(265_0120, 3, 2), Ok(265_012));
        assert!(points(265_0125, 3, 2).is_err());
        assert_eq!(points(108_123, 5, 5), Ok(108_123));
    }
}
