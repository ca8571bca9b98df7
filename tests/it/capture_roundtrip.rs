//! Recorder → file → reader round trips, segment rolling, and damage:
//! truncated files and flipped bytes.

use crate::util::capture as util;
use crate::util::wait;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pricewire::capture::format::{encode_record, CaptureHeader, RECORD_LEN_MAX};
use pricewire::capture::reader::{read_all, CaptureReader, CorruptPolicy, ReaderOptions};
use pricewire::capture::writer::list_segments;
use pricewire::capture::{CaptureError, RecordError, Recorder, RecorderConfig};
use pricewire::clock::ManualClock;
use pricewire::model::Tick;

use util::{table, ticks, write_capture};

const WAIT: Duration = Duration::from_secs(20);

fn config(clock: Arc<ManualClock>) -> RecorderConfig {
    RecorderConfig {
        ring_capacity: 1 << 14,
        clock,
        ..RecorderConfig::default()
    }
}

/// Byte offsets of every record in a segment (recomputed from the format).
fn record_offsets(path: &PathBuf, ticks: &[Tick]) -> Vec<(usize, usize)> {
    let bytes = std::fs::read(path).unwrap();
    let header = CaptureHeader::decode(&bytes).unwrap();
    let mut pos = header.len;
    let mut buf = [0u8; RECORD_LEN_MAX];
    ticks
        .iter()
        .map(|t| {
            let n = encode_record(t, &header.base, &mut buf);
            pos += n;
            (pos - n, n)
        })
        .collect()
}

/// Ticks are handed to the kernel once they have waited the flush
/// interval on the injected clock, and only then count as recorded; the
/// file then holds every tick counted.
#[test]
fn buffered_ticks_are_handed_to_the_kernel_after_the_flush_interval() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000_000);
    let cfg = RecorderConfig {
        flush_interval_ms: 5,
        ..config(clock.clone())
    };
    let (handle, mut tap) = Recorder::spawn(dir.path(), &table(), cfg).unwrap();
    let input = ticks(1_000);
    for t in &input {
        assert!(tap.push(*t));
    }
    let stats = handle.stats().clone();
    wait::expect(WAIT, "the recorder", || stats.snapshot().buffered == 1_000);
    assert_eq!(stats.snapshot().recorded, 0, "not yet due: 0 ms waited");
    clock.advance_ms(4);
    // 4 ms: not yet due, the buffer stays (the recorder may or may not
    // have looked at the clock yet; it must not have flushed either way).
    let seen = |s: &pricewire::capture::RecorderStats| s.snapshot();
    assert_eq!(seen(&stats).recorded, 0);
    clock.advance_ms(1);
    wait::expect(WAIT, "the recorder", || seen(&stats).recorded == 1_000);
    assert_eq!(seen(&stats).buffered, 0);
    let seg = dir.path().join("seg-000001.pwcap");
    let opts = ReaderOptions {
        policy: CorruptPolicy::Stop,
        table: None,
    };
    let mut reader = CaptureReader::open(&[seg], opts).unwrap();
    let mut n = 0;
    while reader.next_tick().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 1_000, "every tick counted as recorded is in the file");
    drop(tap);
    handle.stop();
}

#[test]
fn recorder_round_trip_reproduces_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1);
    let input = ticks(10_000);
    let (handle, mut tap) = Recorder::spawn(dir.path(), &table(), config(clock)).unwrap();
    for t in &input {
        assert!(tap.push(*t), "ring sized for the whole test");
    }
    wait::expect(WAIT, "the recorder", || {
        // Written: handed to the kernel or waiting in the buffer (the
        // manual clock never makes a flush due).
        let s = handle.stats().snapshot();
        s.recorded + s.buffered == input.len() as u64
    });
    let totals = handle.stop();
    assert_eq!(totals.error, None);
    assert_eq!(totals.stats.recorded, 10_000);
    assert_eq!(totals.stats.lost, 0);
    assert_eq!(totals.stats.segments, 1);
    let on_disk: u64 = totals
        .paths
        .iter()
        .map(|p| p.metadata().unwrap().len())
        .sum();
    assert_eq!(totals.stats.bytes, on_disk);
    let (back, summary) = read_all(&[dir.path().to_path_buf()], ReaderOptions::default()).unwrap();
    assert_eq!(back, input);
    assert!(summary.truncated.is_empty() && summary.corrupt_count == 0);
    // Compact: the average record stays well inside 48 bytes.
    assert!(
        on_disk / 10_000 <= 48,
        "{} bytes per record",
        on_disk / 10_000
    );
}

#[test]
fn stop_drains_the_ring_before_closing() {
    let dir = tempfile::tempdir().unwrap();
    let input = ticks(3_000);
    let (handle, mut tap) =
        Recorder::spawn(dir.path(), &table(), config(ManualClock::new(1))).unwrap();
    assert_eq!(tap.push_slice(&input), input.len());
    let totals = handle.stop(); // no wait: stop itself must drain
    assert_eq!(totals.stats.recorded, 3_000);
    let (back, _) = read_all(&[dir.path().to_path_buf()], ReaderOptions::default()).unwrap();
    assert_eq!(back, input);
}

#[test]
fn full_ring_counts_lost_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = RecorderConfig {
        ring_capacity: 8,
        ..config(ManualClock::new(1))
    };
    let (handle, mut tap) = Recorder::spawn(dir.path(), &table(), cfg).unwrap();
    let input = ticks(100_000);
    let queued = tap.push_slice(&input) as u64;
    let totals = handle.stop();
    assert_eq!(totals.stats.lost, 100_000 - queued);
    assert_eq!(totals.stats.recorded, queued);
    assert!(
        totals.stats.lost > 0,
        "an 8-slot ring cannot take 100k ticks at once"
    );
}

#[test]
fn segments_roll_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = RecorderConfig {
        segment_bytes_max: 4096,
        ..config(ManualClock::new(1))
    };
    let input = ticks(5_000);
    let (handle, mut tap) = Recorder::spawn(dir.path(), &table(), cfg).unwrap();
    assert_eq!(tap.push_slice(&input), input.len());
    let totals = handle.stop();
    let segs = list_segments(dir.path()).unwrap();
    assert!(segs.len() > 10, "{} segments", segs.len());
    assert_eq!(totals.stats.segments, segs.len() as u64);
    for (i, p) in segs.iter().enumerate() {
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(name, format!("seg-{:06}.pwcap", i + 1));
        assert!(p.metadata().unwrap().len() <= 4096);
    }
    let (back, _) = read_all(&segs, ReaderOptions::default()).unwrap();
    assert_eq!(back, input);
}

#[test]
fn segments_roll_by_time_on_the_injected_clock() {
    // Written: handed to the kernel or waiting in the write buffer.
    let written = |s: &pricewire::capture::RecorderStats| {
        let s = s.snapshot();
        s.recorded + s.buffered
    };
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let cfg = RecorderConfig {
        segment_duration_ms: 60_000,
        ..config(clock.clone())
    };
    let input = ticks(300);
    let (handle, mut tap) = Recorder::spawn(dir.path(), &table(), cfg).unwrap();
    let stats = handle.stats().clone();
    tap.push_slice(&input[..100]);
    wait::expect(WAIT, "the recorder", || written(&stats) == 100);
    clock.advance_ms(59_999); // not yet a minute: same segment
    tap.push_slice(&input[100..200]);
    wait::expect(WAIT, "the recorder", || written(&stats) == 200);
    clock.advance_ms(1); // a minute old now: the next tick opens segment 2
    tap.push_slice(&input[200..]);
    wait::expect(WAIT, "the recorder", || written(&stats) == 300);
    let totals = handle.stop();
    assert_eq!(totals.stats.segments, 2);
    let segs = list_segments(dir.path()).unwrap();
    let (first, _) = read_all(&segs[..1], ReaderOptions::default()).unwrap();
    let (second, _) = read_all(&segs[1..], ReaderOptions::default()).unwrap();
    assert_eq!(first, input[..200]);
    assert_eq!(second, input[200..]);
}

#[test]
fn recording_continues_numbering_after_existing_segments() {
    let dir = tempfile::tempdir().unwrap();
    let input = ticks(50);
    write_capture(dir.path(), &input[..25], 1 << 20);
    let (handle, mut tap) =
        Recorder::spawn(dir.path(), &table(), config(ManualClock::new(1))).unwrap();
    tap.push_slice(&input[25..]);
    let totals = handle.stop();
    assert!(totals.paths[0].ends_with("seg-000002.pwcap"));
    let (back, _) = read_all(&[dir.path().to_path_buf()], ReaderOptions::default()).unwrap();
    assert_eq!(back, input);
}

#[test]
fn truncated_file_replays_to_last_whole_record_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let input = ticks(500);
    let paths = write_capture(dir.path(), &input, 1 << 20);
    let offsets = record_offsets(&paths[0], &input);
    let (last_off, last_len) = offsets[499];
    // Cut inside the last record, as a crash mid-write would.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[0])
        .unwrap();
    f.set_len((last_off + last_len - 3) as u64).unwrap();
    drop(f);
    let (back, summary) = read_all(&paths, ReaderOptions::default()).unwrap();
    assert_eq!(back, input[..499]);
    assert_eq!(summary.truncated.len(), 1);
    let stop = &summary.truncated[0];
    assert_eq!(stop.offset, last_off as u64);
    assert_eq!(stop.record_index, 499);
    let msg = stop.to_string();
    assert!(
        msg.contains(&format!(
            "stopped at byte offset {last_off} after 499 whole records"
        )),
        "{msg}"
    );
}

#[test]
fn file_cut_inside_the_header_reads_as_empty_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_capture(dir.path(), &ticks(10), 1 << 20);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[0])
        .unwrap();
    f.set_len(30).unwrap();
    drop(f);
    let (back, summary) = read_all(&paths, ReaderOptions::default()).unwrap();
    assert!(back.is_empty());
    assert_eq!(summary.truncated[0].offset, 0);
}

#[test]
fn flipped_byte_mid_file_is_skipped_with_a_clear_report() {
    let dir = tempfile::tempdir().unwrap();
    let input = ticks(1_000);
    let paths = write_capture(dir.path(), &input, 1 << 20);
    let offsets = record_offsets(&paths[0], &input);
    let (off, len) = offsets[500];
    let mut bytes = std::fs::read(&paths[0]).unwrap();
    bytes[off + len / 2] ^= 0x40;
    std::fs::write(&paths[0], &bytes).unwrap();

    let (back, summary) = read_all(&paths, ReaderOptions::default()).unwrap();
    let mut expected = input.clone();
    expected.remove(500);
    assert_eq!(back, expected, "every other record decodes exactly");
    assert_eq!(summary.corrupt_count, 1);
    let bad = &summary.corrupt[0];
    assert_eq!((bad.offset, bad.record_index), (off as u64, 500));
    assert_eq!(bad.reason, RecordError::Crc);
    assert_eq!(bad.resumed_at, offsets[501].0 as u64);
    let msg = bad.to_string();
    assert!(
        msg.contains(&format!("damaged record #500 at byte offset {off}")),
        "{msg}"
    );
}

#[test]
fn flipped_byte_under_stop_policy_ends_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let input = ticks(1_000);
    let paths = write_capture(dir.path(), &input, 1 << 20);
    let (off, _) = record_offsets(&paths[0], &input)[700];
    let mut bytes = std::fs::read(&paths[0]).unwrap();
    bytes[off] ^= 0x01; // the length byte itself
    std::fs::write(&paths[0], &bytes).unwrap();

    let opts = ReaderOptions {
        policy: CorruptPolicy::Stop,
        ..ReaderOptions::default()
    };
    let mut r = CaptureReader::open(&paths, opts).unwrap();
    let mut got = Vec::new();
    let err = loop {
        match r.next_tick() {
            Ok(Some(t)) => got.push(t),
            Ok(None) => panic!("damage not detected"),
            Err(e) => break e,
        }
    };
    assert_eq!(got, input[..700]);
    match &err {
        CaptureError::Corrupt {
            offset,
            record_index,
            ..
        } => {
            assert_eq!((*offset, *record_index), (off as u64, 700));
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(err
        .to_string()
        .contains(&format!("damaged record #700 at byte offset {off}")));
    assert!(
        matches!(r.next_tick(), Ok(None)),
        "a stopped reader stays stopped"
    );
}

#[test]
fn any_single_flipped_byte_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let input = ticks(40);
    let paths = write_capture(dir.path(), &input, 1 << 20);
    let clean = std::fs::read(&paths[0]).unwrap();
    for pos in 0..clean.len() {
        let mut bytes = clean.clone();
        bytes[pos] ^= 0xA5;
        std::fs::write(&paths[0], &bytes).unwrap();
        for policy in [CorruptPolicy::Skip, CorruptPolicy::Stop] {
            let opts = ReaderOptions {
                policy,
                ..ReaderOptions::default()
            };
            if let Ok((back, _)) = read_all(&paths, opts) {
                // Whatever survives is a subset of what was written.
                assert!(back.len() <= input.len());
                assert!(
                    back.iter().all(|t| input.contains(t)),
                    "invented a tick at flip {pos}"
                );
            }
        }
    }
}

#[test]
fn header_damage_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_capture(dir.path(), &ticks(10), 1 << 20);
    let mut bytes = std::fs::read(&paths[0]).unwrap();
    bytes[20] ^= 0xff;
    std::fs::write(&paths[0], &bytes).unwrap();
    let err = CaptureReader::open(&paths, ReaderOptions::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("header CRC mismatch"), "{err}");
    std::fs::write(&paths[0], b"date,bid,ask\n").unwrap();
    let err = CaptureReader::open(&paths, ReaderOptions::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("not a pricewire capture"), "{err}");
}

#[test]
fn reader_checks_the_instrument_table_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_capture(dir.path(), &ticks(10), 1 << 20);
    let ok = ReaderOptions {
        table: Some(table()),
        ..ReaderOptions::default()
    };
    assert!(CaptureReader::open(&paths, ok).is_ok());
    let mut instruments = pricewire::model::instruments::default_instruments();
    instruments.swap(0, 1);
    let other = pricewire::model::InstrumentTable::new(
        instruments,
        pricewire::model::instruments::default_tiers(),
        pricewire::model::instruments::synthetic_providers(3),
    );
    let bad = ReaderOptions {
        table: Some(other),
        ..ReaderOptions::default()
    };
    let err = CaptureReader::open(&paths, bad).err().unwrap();
    assert!(matches!(err, CaptureError::Table { .. }), "{err}");
}

#[test]
fn write_failure_is_counted_and_never_backs_up_into_the_feed() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("gone");
    let (handle, mut tap) = Recorder::spawn(&dir, &table(), config(ManualClock::new(1))).unwrap();
    std::fs::remove_dir(&dir).unwrap(); // the first segment cannot be created
    let input = ticks(50_000);
    let mut queued = 0u64;
    for t in &input {
        queued += u64::from(tap.push(*t));
    }
    let stats = handle.stats().clone();
    wait::expect(WAIT, "the recorder", || {
        let s = stats.snapshot();
        s.dropped_io + s.recorded == queued
    });
    let totals = handle.stop();
    assert_eq!(totals.stats.write_errors, 1);
    assert_eq!(totals.stats.recorded, 0);
    assert_eq!(totals.stats.dropped_io + totals.stats.lost, 50_000);
    let err = totals.error.expect("the failure is reported");
    assert!(err.contains("gone"), "{err}");
}
