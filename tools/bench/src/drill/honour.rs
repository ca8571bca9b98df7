//! `--scenario retry-honour`: two accounts each send 150 SnapshotRequests
//! a second (on schedule, open loop) against the shipped 100/s account
//! rate for `--drill-seconds`. One honours every refusal: after a Reject
//! with a retry-after it sends nothing until that time has passed (the
//! requests due meanwhile are skipped), and it waits out a Disconnect's
//! retry-after before it logs on again. The other ignores them all: it
//! keeps its schedule, and logs on again at once when cut.
//!
//! Checked: the honouring client gets at least as many answers as the
//! ignoring one (ignoring a retry-after never pays).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pricewire::wire::Message;

use super::conn::{self, Logon, Reader};
use super::{scrape, series, start_server, Verdict};
use crate::cli::BenchArgs;

const PERIOD: Duration = Duration::from_nanos(1_000_000_000 / 150);

#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    answers: AtomicU64,
    rejects: AtomicU64,
    cuts: AtomicU64,
    logons: AtomicU64,
    /// Sends skipped while honouring a retry-after.
    skipped: AtomicU64,
}

/// Runs the drill.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let server = start_server(args, &["--shards", "2", "--synthetic-rate", "2000"])?;
    let mut v = Verdict::new("retry-honour");
    let dur = Duration::from_secs(args.drill.drill_seconds);
    let (h, i) = (Arc::new(Tally::default()), Arc::new(Tally::default()));
    let addr = server.addr;
    let (hc, ic) = (h.clone(), i.clone());
    let honour = std::thread::spawn(move || race(addr, "honour", true, dur, &hc));
    let ignore = std::thread::spawn(move || race(addr, "ignore", false, dur, &ic));
    let _ = honour.join();
    let _ = ignore.join();
    let text = scrape(server.ops);
    for (name, t) in [("honouring", &h), ("ignoring", &i)] {
        v.fig(format!(
            "{name}: sent {}, answers {}, rejects {}, cuts {}, logons {}, skipped while waiting {}",
            t.sent.load(Relaxed),
            t.answers.load(Relaxed),
            t.rejects.load(Relaxed),
            t.cuts.load(Relaxed),
            t.logons.load(Relaxed),
            t.skipped.load(Relaxed)
        ));
    }
    for reason in ["rate_limited", "conn_backoff"] {
        let n = series(
            &text,
            &format!("pricewire_sheds_total{{reason=\"{reason}\"}}"),
        );
        v.fig(format!("server: sheds {reason} {}", n.unwrap_or(0.0)));
    }
    let flood = series(
        &text,
        "pricewire_session_disconnects_total{reason=\"message_flood\"}",
    );
    v.fig(format!(
        "server: message_flood cuts {}",
        flood.unwrap_or(0.0)
    ));
    let (ha, ia) = (h.answers.load(Relaxed), i.answers.load(Relaxed));
    v.check(
        ha >= ia,
        format!("honouring answers {ha} >= ignoring answers {ia}"),
    );
    v.finish()
}

/// One client's race until `dur` has passed.
fn race(addr: SocketAddr, account: &str, honour: bool, dur: Duration, t: &Arc<Tally>) {
    let end = Instant::now() + dur;
    let mut next_logon = Instant::now();
    while Instant::now() < end {
        std::thread::sleep(next_logon.saturating_duration_since(Instant::now()));
        let wait_ms = session(addr, account, honour, end, t);
        next_logon = Instant::now() + Duration::from_millis(if honour { wait_ms } else { 0 });
    }
}

/// One session: sends on schedule until `end` or a cut; returns the cut's
/// retry-after (ms).
fn session(addr: SocketAddr, account: &str, honour: bool, end: Instant, t: &Arc<Tally>) -> u64 {
    let Ok(stream) = conn::connect(addr, None) else {
        return 100;
    };
    let mut r = Reader::new(stream);
    match conn::logon(&mut r, account, account, Duration::from_secs(10)) {
        Logon::Accepted => t.logons.fetch_add(1, Relaxed),
        Logon::Refused { retry_after_ms } => return u64::from(retry_after_ms),
        Logon::Lost => return 100,
    };
    let Ok(mut writer) = r.stream.try_clone() else {
        return 100;
    };
    let t0 = Instant::now();
    // Monotonic ns since t0 before which the honouring client sends nothing.
    let pause = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (pw, sw, tw) = (pause.clone(), stop.clone(), t.clone());
    let write = std::thread::spawn(move || {
        let mut buf = [0u8; 128];
        let mut id = 0u64;
        while !sw.load(Relaxed) && Instant::now() < end {
            let due = t0 + PERIOD * id as u32;
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            id += 1;
            if (t0.elapsed().as_nanos() as u64) < pw.load(Relaxed) {
                tw.skipped.fetch_add(1, Relaxed);
                continue;
            }
            let k = conn::snapshot_frame(&mut buf, id, 0, &[0]);
            if std::io::Write::write_all(&mut writer, &buf[..k]).is_err() {
                return;
            }
            tw.sent.fetch_add(1, Relaxed);
        }
    });
    let mut cut = None;
    while cut.is_none() && !write.is_finished() {
        let open = r.poll(Duration::from_millis(20), |m| match m {
            Message::SnapshotResponse(_) => {
                t.answers.fetch_add(1, Relaxed);
            }
            Message::Reject(j) => {
                t.rejects.fetch_add(1, Relaxed);
                if honour && j.retry_after_ms > 0 {
                    let until =
                        t0.elapsed().as_nanos() as u64 + u64::from(j.retry_after_ms) * 1_000_000;
                    pause.fetch_max(until, Relaxed);
                }
            }
            Message::Disconnect(x) => {
                t.cuts.fetch_add(1, Relaxed);
                cut = Some(u64::from(x.retry_after_ms));
            }
            _ => {}
        });
        if !open {
            cut = cut.or(Some(100));
        }
    }
    stop.store(true, Relaxed);
    let _ = r.stream.shutdown(std::net::Shutdown::Both);
    let _ = write.join();
    cut.unwrap_or(0)
}
