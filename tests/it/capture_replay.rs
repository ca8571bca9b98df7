//! Replay pacing with an injected `now_ns`: 1x keeps the recorded gaps,
//! Nx compresses them, max ignores them.

use crate::util::capture as util;

use pricewire::capture::reader::ReaderOptions;
use pricewire::capture::{ReplaySource, ReplaySpeed};
use pricewire::feed::{SourcePoll, TickSource};
use pricewire::model::Tick;

use util::{ticks, write_capture};

const MS: u64 = 1_000_000;
/// Recorded receive-time offsets of the four ticks (ms after the first).
const GAPS_MS: [u64; 4] = [0, 1, 3, 10];
const START: u64 = 5_000_000_000;

fn capture() -> (tempfile::TempDir, Vec<Tick>) {
    let dir = tempfile::tempdir().unwrap();
    let mut input = ticks(4);
    for (t, gap) in input.iter_mut().zip(GAPS_MS) {
        t.receive_time_ns = 77_000_000_000 + gap * MS;
    }
    write_capture(dir.path(), &input, 1 << 20);
    (dir, input)
}

fn open(dir: &tempfile::TempDir, speed: ReplaySpeed) -> ReplaySource {
    ReplaySource::open(&[dir.path().to_path_buf()], speed, ReaderOptions::default()).unwrap()
}

/// Polls at `now` and returns how many ticks came out.
fn poll(src: &mut ReplaySource, now: u64, buf: &mut [Tick]) -> usize {
    match src.poll(now, buf) {
        SourcePoll::Ready(n) => n,
        SourcePoll::Idle | SourcePoll::Done => 0,
    }
}

/// Replay time at which each tick is first released, polling every 100 µs.
fn release_times(speed: ReplaySpeed) -> Vec<u64> {
    let (dir, _) = capture();
    let mut src = open(&dir, speed);
    let mut buf = [Tick::EMPTY; 8];
    let mut out = Vec::new();
    let mut now = START;
    while out.len() < 4 {
        let n = poll(&mut src, now, &mut buf);
        for t in &buf[..n] {
            assert_eq!(t.receive_time_ns, now, "re-stamped at release");
            out.push(now - START);
        }
        now += MS / 10;
        assert!(now < START + 1_000 * MS, "replay stalled");
    }
    assert_eq!(src.poll(now, &mut buf), SourcePoll::Done);
    out
}

#[test]
fn realtime_keeps_the_recorded_gaps() {
    let expected: Vec<u64> = GAPS_MS.iter().map(|g| g * MS).collect();
    assert_eq!(release_times(ReplaySpeed::REALTIME), expected);
}

#[test]
fn ten_x_divides_the_gaps_by_ten() {
    // 0, 0.1, 0.3, 1.0 ms.
    assert_eq!(
        release_times("10x".parse().unwrap()),
        vec![0, MS / 10, 3 * MS / 10, MS]
    );
}

#[test]
fn max_ignores_the_gaps() {
    let (dir, _) = capture();
    let mut src = open(&dir, ReplaySpeed::Max);
    let mut buf = [Tick::EMPTY; 8];
    assert_eq!(src.poll(START, &mut buf), SourcePoll::Ready(4));
    assert_eq!(src.poll(START, &mut buf), SourcePoll::Done);
}

#[test]
fn a_tick_is_not_released_a_nanosecond_early() {
    let (dir, _) = capture();
    let mut src = open(&dir, ReplaySpeed::REALTIME);
    let mut buf = [Tick::EMPTY; 8];
    assert_eq!(poll(&mut src, START, &mut buf), 1);
    assert_eq!(src.poll(START + MS - 1, &mut buf), SourcePoll::Idle);
    assert_eq!(poll(&mut src, START + MS, &mut buf), 1);
}

#[test]
fn small_buffers_get_the_rest_on_the_next_poll() {
    let (dir, _) = capture();
    let mut src = open(&dir, ReplaySpeed::Max);
    let mut buf = [Tick::EMPTY; 3];
    assert_eq!(poll(&mut src, START, &mut buf), 3);
    assert_eq!(poll(&mut src, START, &mut buf), 1);
}

#[test]
fn provider_time_and_fields_are_kept_receive_time_is_not() {
    let (dir, input) = capture();
    let mut src = open(&dir, ReplaySpeed::Max);
    assert!(!src.keeps_receive_time());
    let mut buf = [Tick::EMPTY; 8];
    assert_eq!(src.poll(START, &mut buf), SourcePoll::Ready(4));
    for (got, want) in buf[..4].iter().zip(&input) {
        let mut want = *want;
        want.receive_time_ns = START;
        assert_eq!(*got, want);
    }
    let s = src.summary();
    assert_eq!(s.ticks, 4);
    assert_eq!(s.span_ns, 10 * MS);
    assert_eq!(s.stopped_at, None);
}

#[test]
fn summary_says_where_a_truncated_capture_stopped() {
    let (dir, _) = capture();
    let seg = dir.path().join("seg-000001.pwcap");
    let len = seg.metadata().unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(len - 2).unwrap();
    drop(f);
    let mut src = open(&dir, ReplaySpeed::Max);
    let mut buf = [Tick::EMPTY; 8];
    assert_eq!(src.poll(START, &mut buf), SourcePoll::Ready(3));
    assert_eq!(src.poll(START, &mut buf), SourcePoll::Done);
    let s = src.summary();
    let stop = s.stopped_at.clone().expect("truncation reported");
    assert_eq!(stop.record_index, 3);
    assert!(s.to_string().contains("stopped at byte offset"), "{s}");
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    replay: pricewire::capture::cli::ReplayArgs,
}

#[test]
fn replay_args_parse_speed_files_and_destination() {
    use clap::Parser;
    let (dir, _) = capture();
    let d = dir.path().to_str().unwrap();
    let cli =
        Cli::try_parse_from(["replay", "--speed", "10x", "--to", "127.0.0.1:7001", d]).unwrap();
    assert_eq!(cli.replay.speed, ReplaySpeed::Scaled { milli: 10_000 });
    assert_eq!(cli.replay.to.as_deref(), Some("127.0.0.1:7001"));
    let mut src = cli.replay.open(Some(&util::table())).unwrap();
    let mut buf = [Tick::EMPTY; 8];
    assert_eq!(poll(&mut src, START, &mut buf), 1);
    let cli = Cli::try_parse_from(["replay", d]).unwrap();
    assert_eq!(cli.replay.speed, ReplaySpeed::REALTIME);
    assert!(Cli::try_parse_from(["replay", "--speed", "fast", d]).is_err());
}

#[test]
fn a_later_session_starting_inside_the_previous_ones_range_is_paced_anew() {
    // A restarted recorder whose receive times start 1 s after the first
    // session's start, but 4 s before its end.
    let dir = tempfile::tempdir().unwrap();
    let mut input = ticks(4);
    for (t, recv) in input
        .iter_mut()
        .zip([10_000 * MS, 15_000 * MS, 11_000 * MS, 12_000 * MS])
    {
        t.receive_time_ns = recv;
    }
    write_capture(dir.path(), &input, 1 << 20);
    let mut src = open(&dir, ReplaySpeed::REALTIME);
    let mut buf = [Tick::EMPTY; 8];
    assert_eq!(poll(&mut src, START, &mut buf), 1);
    assert_eq!(src.poll(START + 5_000 * MS - 1, &mut buf), SourcePoll::Idle);
    // The second is due; the third starts a new session, anchored here ...
    assert_eq!(poll(&mut src, START + 5_000 * MS, &mut buf), 2);
    // ... so the fourth keeps its 1 s gap to it instead of bursting out.
    assert_eq!(src.poll(START + 6_000 * MS - 1, &mut buf), SourcePoll::Idle);
    assert_eq!(poll(&mut src, START + 6_000 * MS, &mut buf), 1);
}

#[test]
fn a_later_recording_session_is_paced_from_where_it_starts() {
    // Two sessions: receive times restart near zero after a process restart.
    let dir = tempfile::tempdir().unwrap();
    let mut input = ticks(4);
    for (t, recv) in input
        .iter_mut()
        .zip([50 * 1_000 * MS, 50_001 * MS, 7 * MS, 9 * MS])
    {
        t.receive_time_ns = recv;
    }
    write_capture(dir.path(), &input, 1 << 20);
    let mut src = open(&dir, ReplaySpeed::REALTIME);
    let mut buf = [Tick::EMPTY; 8];
    assert_eq!(poll(&mut src, START, &mut buf), 1);
    // The second tick is due; the third jumps back 50 s, starts a new
    // anchor and goes at once (the gap between sessions is unknown) ...
    assert_eq!(poll(&mut src, START + MS, &mut buf), 2);
    // ... and the fourth keeps its 2 ms gap to the third.
    assert_eq!(src.poll(START + 3 * MS - 1, &mut buf), SourcePoll::Idle);
    assert_eq!(poll(&mut src, START + 3 * MS, &mut buf), 1);
}
