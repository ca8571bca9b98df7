//! `capture cat` and `capture stats`.

use crate::util::capture as util;

use clap::Parser;
use pricewire::capture::cli::CaptureCmd;
use pricewire::capture::inspect::{self, Gap};
use pricewire::model::{Tick, NO_PRICE};

use util::write_capture;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn tick(recv_ns: u64, symbol: u16, bid: i64, ask: i64) -> Tick {
    Tick {
        bid,
        ask,
        bid_size: 1_000_000,
        ask_size: 1_000_000,
        provider_time_ns: 1_705_323_600 * S + recv_ns,
        receive_time_ns: recv_ns,
        feed_seq: 1,
        symbol,
        provider: 0,
        flags: 0,
    }
}

/// Seconds 0, 1 and 3 hold 3, 1 and 5 ticks; one crossed, one locked,
/// one one-sided quote; the largest gap is 1.8 s (1.2 s .. 3.0 s).
fn sample() -> Vec<Tick> {
    let mut v = vec![
        tick(0, 0, 108_123, 108_125),
        tick(100 * MS, 0, 108_124, 108_125),
        tick(200 * MS, 2, 149_872, 149_870),   // crossed
        tick(1_200 * MS, 0, 108_125, 108_125), // locked
        tick(3 * S, 0, NO_PRICE, 108_125),     // one-sided
    ];
    for i in 1..5 {
        v.push(tick(3 * S + i * 10 * MS, 0, 108_120, 108_126));
    }
    v
}

#[test]
fn stats_counts_rates_gaps_and_crossed_quotes() {
    let dir = tempfile::tempdir().unwrap();
    write_capture(dir.path(), &sample(), 1 << 20);
    let s = inspect::stats(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(s.ticks, 9);
    assert_eq!(
        s.symbols,
        vec![("EURUSD".to_string(), 8), ("USDJPY".to_string(), 1)]
    );
    assert_eq!(s.span_ns, 3 * S + 40 * MS);
    assert_eq!((s.rate_p50_per_s, s.rate_max_per_s), (3, 5));
    assert_eq!((s.crossed, s.locked, s.one_sided), (1, 1, 1));
    assert_eq!(s.gaps.len(), 5);
    assert_eq!(
        s.gaps[0],
        Gap {
            gap_ns: 1_800 * MS,
            at_provider_ns: 1_705_323_600 * S + 3 * S
        }
    );
    assert_eq!(s.gaps[1].gap_ns, 1_000 * MS);
    let text = s.to_string();
    assert!(text.contains("rate per second: p50 3"), "{text}");
    assert!(text.contains("crossed: 1 locked: 1 one-sided: 1"), "{text}");
    assert!(text.contains("2024-01-15T13:00:00.000000000Z"), "{text}");
}

#[test]
fn cat_prints_every_record_with_names_and_prices() {
    let dir = tempfile::tempdir().unwrap();
    write_capture(dir.path(), &sample(), 1 << 20);
    let mut out = Vec::new();
    let n = inspect::cat(&[dir.path().to_path_buf()], &mut out).unwrap();
    assert_eq!(n, 9);
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("# ") && lines[0].contains("segment 1"),
        "{}",
        lines[0]
    );
    assert_eq!(
        lines[2],
        "0 2024-01-15T13:00:00.000000000Z 0 EURUSD lp1 1.08123 1.08125 1000000 1000000 1 0x0"
    );
    assert!(
        lines[4].contains(" USDJPY lp1 149.872 149.870 "),
        "{}",
        lines[4]
    );
    assert!(lines[6].contains(" - 1.08125 "), "{}", lines[6]);
    assert_eq!(lines.len(), 2 + 9);
}

#[test]
fn cat_reports_truncation_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_capture(dir.path(), &sample(), 1 << 20);
    let len = paths[0].metadata().unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[0])
        .unwrap();
    f.set_len(len - 1).unwrap();
    drop(f);
    let mut out = Vec::new();
    assert_eq!(inspect::cat(&paths, &mut out).unwrap(), 8);
    let text = String::from_utf8(out).unwrap();
    let last = text.lines().last().unwrap();
    assert!(
        last.contains("stopped at byte offset") && last.contains("after 8 whole records"),
        "{last}"
    );
}

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: CaptureCmd,
}

#[test]
fn capture_subcommands_parse_and_run() {
    let dir = tempfile::tempdir().unwrap();
    write_capture(dir.path(), &sample(), 1 << 20);
    let d = dir.path().to_str().unwrap();
    for (sub, needle) in [("stats", "ticks: 9"), ("cat", "EURUSD lp1")] {
        let cli = Cli::try_parse_from(["capture", sub, d]).unwrap();
        let mut out = Vec::new();
        cli.cmd.run(&mut out).unwrap();
        assert!(String::from_utf8(out).unwrap().contains(needle));
    }
    assert!(
        Cli::try_parse_from(["capture", "stats"]).is_err(),
        "files are required"
    );
    let missing = Cli::try_parse_from(["capture", "cat", "/nonexistent/seg-000001.pwcap"]).unwrap();
    assert!(missing.cmd.run(&mut Vec::new()).is_err());
}
