//! Importers: exact prices and UTC timestamps for every format, bad rows
//! reported with file:line, strict mode stopping at the first.

use crate::util::capture as util;

use std::path::{Path, PathBuf};

use clap::Parser;
use pricewire::capture::cli::ImportArgs;
use pricewire::capture::import::{self, ImportError, ImportFormat, ImportOptions, ImportReport};
use pricewire::capture::reader::{read_all, ReaderOptions};
use pricewire::capture::time::parse_iso8601;
use pricewire::model::Tick;

use util::table;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn utc(text: &str) -> u64 {
    parse_iso8601(text.as_bytes()).unwrap()
}

fn opts(format: ImportFormat, inputs: Vec<PathBuf>, out: &Path) -> ImportOptions {
    ImportOptions::new(format, inputs, out.to_path_buf(), table())
}

fn import_and_read(o: &ImportOptions) -> (ImportReport, Vec<Tick>) {
    let report = import::run(o).unwrap();
    let (ticks, _) = read_all(std::slice::from_ref(&o.out_dir), ReaderOptions::default()).unwrap();
    assert_eq!(ticks.len() as u64, report.ticks);
    (report, ticks)
}

/// (symbol, bid, ask, provider time) of each tick.
fn quotes(ticks: &[Tick]) -> Vec<(u16, i64, i64, u64)> {
    ticks
        .iter()
        .map(|t| (t.symbol, t.bid, t.ask, t.provider_time_ns))
        .collect()
}

const EURUSD: u16 = 0;
const GBPUSD: u16 = 1;
const USDJPY: u16 = 2;
const XAUUSD: u16 = 14;

#[test]
fn histdata_is_fixed_est_in_january_and_july() {
    let out = tempfile::tempdir().unwrap();
    let o = opts(
        ImportFormat::Histdata,
        vec![fixture("DAT_ASCII_EURUSD_T_202401.csv")],
        out.path(),
    );
    let (report, ticks) = import_and_read(&o);
    assert_eq!(report.bad_rows, 0);
    assert_eq!(
        quotes(&ticks),
        vec![
            (EURUSD, 108_123, 108_125, utc("2024-01-15T22:00:00.123Z")),
            (EURUSD, 108_124, 108_127, utc("2024-01-15T22:00:00.456Z")),
            // July: still +5h (EST, no daylight saving), not +4h.
            (EURUSD, 109_001, 109_003, utc("2024-07-15T22:00:00Z")),
        ]
    );
    for (i, t) in ticks.iter().enumerate() {
        assert_eq!(t.receive_time_ns, t.provider_time_ns);
        assert_eq!(t.feed_seq, i as u64 + 1);
    }
}

#[test]
fn histdata_bad_rows_are_reported_with_file_and_line() {
    let out = tempfile::tempdir().unwrap();
    let file = fixture("DAT_ASCII_EURUSD_T_bad.csv");
    let o = opts(ImportFormat::Histdata, vec![file.clone()], out.path());
    let (report, ticks) = import_and_read(&o);
    assert_eq!(report.rows, 5);
    assert_eq!(report.ticks, 3);
    assert_eq!(report.bad_rows, 2);
    let lines: Vec<u64> = report.bad_row_samples.iter().map(|b| b.line).collect();
    assert_eq!(lines, vec![2, 4]);
    let first = report.bad_row_samples[0].to_string();
    assert!(
        first.starts_with(&format!("{}:2: bad bid", file.display())),
        "{first}"
    );
    assert!(report.bad_row_samples[1]
        .to_string()
        .contains(":4: bad timestamp"));
    assert_eq!(ticks[2].bid, 108_125);
}

#[test]
fn strict_mode_fails_on_the_first_bad_row() {
    let out = tempfile::tempdir().unwrap();
    let mut o = opts(
        ImportFormat::Histdata,
        vec![fixture("DAT_ASCII_EURUSD_T_bad.csv")],
        out.path(),
    );
    o.strict = true;
    match import::run(&o) {
        Err(ImportError::BadRow(bad)) => {
            assert_eq!(bad.line, 2);
            assert!(
                bad.reason.contains("invalid character 'x'"),
                "{}",
                bad.reason
            );
        }
        other => panic!("expected a bad row, got {other:?}"),
    }
}

#[test]
fn truefx_is_utc_and_names_the_pair_per_row() {
    let out = tempfile::tempdir().unwrap();
    let file = fixture("truefx_sample.csv");
    let o = opts(ImportFormat::Truefx, vec![file.clone()], out.path());
    let (report, ticks) = import_and_read(&o);
    assert_eq!(
        quotes(&ticks),
        vec![
            (EURUSD, 108_123, 108_125, utc("2024-01-15T13:00:00.123Z")),
            (USDJPY, 149_872, 149_875, utc("2024-01-15T13:00:00.124Z")),
            (EURUSD, 108_120, 108_123, utc("2024-01-15T13:00:01Z")),
        ]
    );
    assert_eq!(report.bad_rows, 1);
    let bad = report.bad_row_samples[0].to_string();
    assert!(bad.contains(":3: unknown symbol \"XYZ/ABC\""), "{bad}");
}

#[test]
fn mt5_converts_server_time_and_carries_one_sided_rows() {
    let out = tempfile::tempdir().unwrap();
    let file = fixture("EURUSD_202401150000_202401152359.csv");
    let mut o = opts(ImportFormat::Mt5, vec![file], out.path());
    o.tz_offset_ns = 2 * 3_600_000_000_000; // server at +02:00
    let (report, ticks) = import_and_read(&o);
    assert_eq!(
        quotes(&ticks),
        vec![
            (EURUSD, 108_123, 108_125, utc("2024-01-15T13:00:00.200Z")),
            // Bid-only row: ask carried from the row before.
            (EURUSD, 108_124, 108_125, utc("2024-01-15T13:00:00.300Z")),
            // Ask-only row: bid carried.
            (EURUSD, 108_124, 108_130, utc("2024-01-15T13:00:00.400Z")),
        ]
    );
    // The ask-only row before any full quote is reported, not invented.
    assert_eq!(report.bad_rows, 1);
    assert_eq!(report.bad_row_samples[0].line, 2);
    assert!(report.bad_row_samples[0].reason.contains("ask only"));
    // The trade-only row (LAST, no bid/ask) carries no quote.
    assert_eq!(report.rows_without_quote, 1);
}

#[test]
fn mt5_utf16_export_is_decoded() {
    let out = tempfile::tempdir().unwrap();
    let text = std::fs::read(fixture("EURUSD_202401150000_202401152359.csv")).unwrap();
    let mut utf16 = vec![0xFF, 0xFE];
    for b in text {
        utf16.extend_from_slice(&[b, 0]);
    }
    let src = out.path().join("EURUSD_utf16.csv");
    std::fs::write(&src, utf16).unwrap();
    let mut o = opts(ImportFormat::Mt5, vec![src], &out.path().join("cap"));
    o.tz_offset_ns = 2 * 3_600_000_000_000;
    let (_, ticks) = import_and_read(&o);
    assert_eq!(ticks.len(), 3);
    assert_eq!(ticks[0].provider_time_ns, utc("2024-01-15T13:00:00.200Z"));
}

fn bi5_record(ms: u32, ask: u32, bid: u32, ask_vol: f32, bid_vol: f32) -> Vec<u8> {
    let mut r = Vec::new();
    for v in [ms, ask, bid, ask_vol.to_bits(), bid_vol.to_bits()] {
        r.extend_from_slice(&v.to_be_bytes());
    }
    r
}

fn write_bi5(path: &Path, raw: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut packed = Vec::new();
    lzma_rs::lzma_compress(&mut std::io::Cursor::new(raw), &mut packed).unwrap();
    std::fs::write(path, packed).unwrap();
}

#[test]
fn dukascopy_bi5_hour_file() {
    let tmp = tempfile::tempdir().unwrap();
    // Month directory 00 is January.
    let file = tmp.path().join("EURUSD/2024/00/15/13h_ticks.bi5");
    let mut raw = bi5_record(123, 108_125, 108_123, 1.5, 0.75);
    raw.extend(bi5_record(3_599_999, 108_130, 108_126, 2.0, 2.0));
    raw.extend(bi5_record(3_600_000, 108_130, 108_126, 2.0, 2.0)); // past the hour
    write_bi5(&file, &raw);
    let o = opts(
        ImportFormat::Dukascopy,
        vec![file.clone()],
        &tmp.path().join("cap"),
    );
    let (report, ticks) = import_and_read(&o);
    assert_eq!(
        quotes(&ticks),
        vec![
            (EURUSD, 108_123, 108_125, utc("2024-01-15T13:00:00.123Z")),
            (EURUSD, 108_126, 108_130, utc("2024-01-15T13:59:59.999Z")),
        ]
    );
    assert_eq!((ticks[0].ask_size, ticks[0].bid_size), (1_500_000, 750_000));
    assert_eq!(report.bad_rows, 1);
    assert_eq!(report.bad_row_samples[0].line, 3);
}

#[test]
fn dukascopy_empty_hour_and_broken_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("EURUSD/2024/00/15/14h_ticks.bi5");
    std::fs::create_dir_all(empty.parent().unwrap()).unwrap();
    std::fs::write(&empty, b"").unwrap();
    let o = opts(
        ImportFormat::Dukascopy,
        vec![empty],
        &tmp.path().join("cap"),
    );
    assert_eq!(import::run(&o).unwrap().ticks, 0);
    let broken = tmp.path().join("EURUSD/2024/00/15/15h_ticks.bi5");
    std::fs::write(&broken, b"not lzma at all").unwrap();
    let o = opts(
        ImportFormat::Dukascopy,
        vec![broken],
        &tmp.path().join("cap2"),
    );
    let err = import::run(&o).unwrap_err().to_string();
    assert!(err.contains("LZMA"), "{err}");
}

#[test]
fn dukascopy_point_digits_and_flags_override_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("gold.bi5");
    write_bi5(&file, &bi5_record(0, 2_650_370, 2_650_120, 0.01, 0.01));
    let mut o = opts(ImportFormat::Dukascopy, vec![file], &tmp.path().join("cap"));
    o.symbol = Some("XAUUSD".into());
    o.hour_utc_ns = Some(utc("2024-07-01T00:00:00Z"));
    o.point_digits = Some(3); // the file counts gold in 0.001, the table in 0.01
    let (_, ticks) = import_and_read(&o);
    assert_eq!(
        quotes(&ticks),
        vec![(XAUUSD, 265_012, 265_037, utc("2024-07-01T00:00:00Z"))]
    );
    assert_eq!(ticks[0].bid_size, 10_000);
}

#[test]
fn generic_csv_with_column_mapping_and_unix_ms() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ticks.csv");
    std::fs::write(
        &file,
        "1705323600123,1.08123,1.08125,EURUSD\n1705323600124,149.872,149.875,USDJPY\n\n1705323600125,1.08123\n",
    )
    .unwrap();
    let mut o = opts(
        ImportFormat::Csv,
        vec![file.clone()],
        &tmp.path().join("cap"),
    );
    o.columns = Some("time=0,bid=1,ask=2,symbol=3".parse().unwrap());
    let (report, ticks) = import_and_read(&o);
    assert_eq!(
        quotes(&ticks),
        vec![
            (EURUSD, 108_123, 108_125, utc("2024-01-15T13:00:00.123Z")),
            (USDJPY, 149_872, 149_875, utc("2024-01-15T13:00:00.124Z")),
        ]
    );
    assert_eq!(report.bad_rows, 1);
    assert_eq!(report.bad_row_samples[0].line, 4, "blank lines still count");
}

#[test]
fn generic_csv_iso8601_with_sizes_header_and_delimiter() {
    let out = tempfile::tempdir().unwrap();
    let mut o = opts(
        ImportFormat::Csv,
        vec![fixture("generic_iso.csv")],
        out.path(),
    );
    o.columns = Some(
        "time=0,symbol=1,bid=2,ask=3,bid_size=4,ask_size=5"
            .parse()
            .unwrap(),
    );
    o.time_format = import::TimeFormat::Iso8601;
    o.delimiter = b';';
    o.has_header = true;
    let (report, ticks) = import_and_read(&o);
    assert_eq!(
        quotes(&ticks),
        vec![
            (
                GBPUSD,
                126_540,
                126_552,
                utc("2024-01-15T13:00:00.123456789Z")
            ),
            (XAUUSD, 265_012, 265_037, utc("2024-01-15T13:00:00.5Z")),
        ]
    );
    assert_eq!(
        (ticks[0].bid_size, ticks[0].ask_size),
        (1_000_000, 2_000_000)
    );
    assert_eq!(report.bad_rows, 1);
    assert_eq!(report.bad_row_samples[0].line, 4);
    assert!(report.bad_row_samples[0].reason.contains("ask_size"));
}

#[test]
fn csv_without_columns_or_symbol_is_refused_up_front() {
    let out = tempfile::tempdir().unwrap();
    let o = opts(
        ImportFormat::Csv,
        vec![fixture("generic_iso.csv")],
        out.path(),
    );
    assert!(matches!(import::run(&o), Err(ImportError::Options(_))));
    let tmp = out.path().join("noname.csv");
    std::fs::write(&tmp, "20240115 170000123,1.08123,1.08125,0\n").unwrap();
    let o = opts(ImportFormat::Histdata, vec![tmp], out.path());
    let err = import::run(&o).unwrap_err().to_string();
    assert!(err.contains("give --symbol"), "{err}");
}

#[test]
fn too_many_decimals_are_refused_not_rounded() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("DAT_ASCII_EURUSD_T_x.csv");
    std::fs::write(&file, "20240115 170000123,1.081234,1.08125,0\n").unwrap();
    let o = opts(ImportFormat::Histdata, vec![file], &tmp.path().join("cap"));
    let report = import::run(&o).unwrap();
    assert_eq!(report.ticks, 0);
    assert!(report.bad_row_samples[0].reason.contains("decimals"));
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    import: ImportArgs,
}

#[test]
fn cli_args_parse_and_run() {
    let out = tempfile::tempdir().unwrap();
    let file = fixture("EURUSD_202401150000_202401152359.csv");
    let cli = Cli::try_parse_from([
        "import",
        "--format",
        "mt5",
        "--tz",
        "+02:00",
        "--provider",
        "lp2",
        "-o",
        out.path().to_str().unwrap(),
        file.to_str().unwrap(),
    ])
    .unwrap();
    let mut text = Vec::new();
    let report = cli.import.run(&table(), &mut text).unwrap();
    assert_eq!(report.ticks, 3);
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("imported 3 ticks"), "{text}");
    let (ticks, _) = read_all(&[out.path().to_path_buf()], ReaderOptions::default()).unwrap();
    assert!(ticks.iter().all(|t| t.provider == 1));
    assert_eq!(ticks[0].provider_time_ns, utc("2024-01-15T13:00:00.200Z"));
    assert!(
        Cli::try_parse_from(["import", "--format", "mt5", "--tz", "2", "-o", "x", "f"]).is_err()
    );
    assert!(Cli::try_parse_from(["import", "--format", "bogus", "-o", "x", "f"]).is_err());
}
