//! `--scenario tenant-storm`: one account floods SnapshotRequests flat out
//! from `--drill-flood-conns` connections (a writer thread each that never
//! waits for an answer, a reader thread each), its request and message
//! limits raised, while a quiet account sends 50 requests/s with a 50-ms
//! budget on one connection (open loop: on schedule, answers matched by
//! id). `/metrics` is scraped every 250 ms.
//!
//! Checked: the flood formed a standing queue (overloaded seen: the
//! premise, so the verdict holds for any build and host); during the
//! flood the quiet account got an answer (not a Reject) for at least
//! 99.9 % of its requests; it was never cut (idle or otherwise); no
//! answer reached its socket after its budget (the kernel's receive
//! stamp: the time its own thread then waits for a CPU, among the flood's
//! threads on the same cores, is printed but not judged). Printed: the quiet p99 against its
//! unloaded p99 (the baseline phase), the flood's counts, sheds by reason,
//! moves and their pauses, and the server's threads on a CPU and waiting
//! for one in each 100 ms of the flood's first second (`onset`). The
//! flood's threads run at `--drill-flood-nice` (10): on one host they
//! would otherwise take the server's CPU, which remote flooders cannot.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use pricewire::wire::{DisconnectReason, Message, RejectReason};

use super::conn::{self, Logon, Reader};
use super::{quantiles, scrape, series, start_server, Verdict};
use crate::cli::BenchArgs;

const QUIET_PERIOD: Duration = Duration::from_millis(20);
const QUIET_BUDGET_US: u32 = 50_000;
const AFTER: Duration = Duration::from_secs(2);
/// Symbols per flood request (the built-in table has 25).
const FLOOD_SYMBOLS: u16 = 25;
const FLOOD_BATCH: usize = 64;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Before,
    During,
    After,
}

/// One quiet request: when sent, in which phase, and what came back.
#[derive(Clone, Copy, Debug)]
struct Sent {
    at: Instant,
    /// `at` on the wall clock, which the kernel's receive stamps use.
    at_wall: SystemTime,
    phase: Phase,
    /// Sent to read by the client's thread.
    rtt_us: Option<u64>,
    /// Sent to the answer reaching the client's socket (the kernel's
    /// stamp; see `rxstamp`): what the server delivered, without the
    /// client's own wait for a CPU.
    socket_us: Option<u64>,
    ok: bool,
    /// A refusal's reason.
    reject: Option<(RejectReason, &'static str)>,
}

#[derive(Default)]
struct FloodCounts {
    sent: AtomicU64,
    answers: AtomicU64,
    rejects: AtomicU64,
    cuts: Mutex<Vec<(DisconnectReason, u32)>>,
}

/// Runs the drill.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let server = start_server(
        args,
        &[
            "--shards",
            "2",
            "--request-workers",
            "1",
            "--synthetic-rate",
            "2000",
            "--account-request-rate-per-s",
            "1000000",
            "--account-request-burst",
            "1000000",
            "--msg-rate-per-s",
            "1000000",
            "--msg-burst",
            "1000000",
        ],
    )?;
    let mut v = Verdict::new("tenant-storm");
    let d = &args.drill;
    let (base, flood_for) = (
        Duration::from_secs(d.drill_baseline_s),
        Duration::from_secs(d.drill_seconds),
    );
    let t0 = Instant::now();
    let phase = move |at: Instant| {
        let t = at.duration_since(t0);
        if t < base {
            Phase::Before
        } else if t < base + flood_for {
            Phase::During
        } else {
            Phase::After
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flooding = Arc::new(AtomicBool::new(false));
    let quiet = quiet(server.addr, phase, base + flood_for + AFTER)?;
    let counts = Arc::new(FloodCounts::default());
    let nice = d.drill_flood_nice;
    let floods: Vec<_> = (0..d.drill_flood_conns)
        .map(|_| flood(server.addr, nice, flooding.clone(), counts.clone()))
        .collect();
    let scraper = scraper(server.ops, stop.clone());
    std::thread::sleep(base);
    flooding.store(true, Relaxed);
    let onset_at = Instant::now();
    let onset = super::onset::sample(server.proc.pid());
    std::thread::sleep(flood_for);
    flooding.store(false, Relaxed);
    let (sent, cuts) = quiet.join().expect("quiet thread")?;
    for f in floods {
        let _ = f.join();
    }
    stop.store(true, Relaxed);
    let seen = scraper.join().expect("scraper");
    let text = scrape(server.ops);
    report(&mut v, &sent, &cuts, &counts, seen, &text);
    let quiet_at: Vec<_> = sent
        .iter()
        .filter(|s| s.at >= onset_at)
        .map(|s| (s.at - onset_at, s.socket_us, s.ok))
        .collect();
    let windows = onset.join().expect("onset sampler");
    for line in super::onset::lines(&windows, &quiet_at, u64::from(QUIET_BUDGET_US)) {
        v.fig(line);
    }
    v.finish()
}

fn report(
    v: &mut Verdict,
    sent: &[Sent],
    cuts: &[(DisconnectReason, u32)],
    counts: &FloodCounts,
    seen: Seen,
    text: &str,
) {
    let during: Vec<&Sent> = sent.iter().filter(|s| s.phase == Phase::During).collect();
    let ok = during.iter().filter(|s| s.ok).count();
    let share = ok as f64 / during.len().max(1) as f64;
    let budget = u64::from(QUIET_BUDGET_US);
    let late_read = sent
        .iter()
        .filter(|s| s.ok && s.rtt_us.is_some_and(|r| r > budget))
        .count();
    // Delivered late: the answer reached the client's socket after the
    // budget (the check); read late counts the client's own waits too.
    let late = sent
        .iter()
        .filter(|s| s.ok && s.socket_us.is_some_and(|r| r > budget))
        .count();
    quiet_latency(v, sent, &during);
    let unanswered = during.iter().filter(|s| s.rtt_us.is_none()).count();
    let mut refused: std::collections::BTreeMap<String, usize> = Default::default();
    for (r, text) in during.iter().filter_map(|s| s.reject) {
        *refused.entry(format!("{r:?} {text}")).or_default() += 1;
    }
    v.fig(format!(
        "quiet during: {} sent, unanswered {unanswered}, refused {refused:?}",
        during.len()
    ));
    v.fig(worst_stretch(&during));
    flood_figures(v, counts, &seen);
    shed_figures(v, text);
    v.fig(move_figures(text));
    let (pauses, within) = pauses_within(text, PAUSE_BOUND);
    v.check(
        within == pauses,
        format!("every hand-over pause <= {PAUSE_BOUND} s: {within} of {pauses}"),
    );
    v.fig(hop_figures(text));
    v.fig(seen.shares());
    v.check(
        seen.overloaded,
        "the flood formed a standing queue (overloaded seen)",
    );
    v.check(
        share >= 0.999,
        format!(
            "quiet answered during the flood: {ok} of {} ({:.3} %) >= 99.9 %",
            during.len(),
            share * 100.0
        ),
    );
    v.check(cuts.is_empty(), format!("quiet never cut: {cuts:?}"));
    v.fig(format!(
        "quiet answers read by the client after the 50-ms budget: {late_read} \
         (the client's thread waiting for a CPU included)"
    ));
    v.check(
        late == 0,
        format!("no answer reached the client's socket after its 50-ms budget: {late}"),
    );
}

fn summarize(cuts: &[(DisconnectReason, u32)]) -> Vec<(String, usize)> {
    let mut by: std::collections::BTreeMap<String, usize> = Default::default();
    for (r, _) in cuts {
        *by.entry(format!("{r:?}")).or_default() += 1;
    }
    by.into_iter().collect()
}

/// The quiet account's round trips before, during and after the flood,
/// as its thread read them, and during the flood to its socket.
fn quiet_latency(v: &mut Verdict, sent: &[Sent], during: &[&Sent]) {
    let rtt = |p: Phase| {
        let mut r: Vec<u64> = sent
            .iter()
            .filter(|s| s.phase == p)
            .filter_map(|s| s.rtt_us)
            .collect();
        quantiles(&mut r)
    };
    let (b50, b99, bmax) = rtt(Phase::Before);
    let (d50, d99, dmax) = rtt(Phase::During);
    let (a50, a99, _) = rtt(Phase::After);
    v.fig(format!(
        "quiet before: p50 {b50} us, p99 {b99} us, max {bmax} us"
    ));
    v.fig(format!(
        "quiet during: p50 {d50} us, p99 {d99} us, max {dmax} us; p99 / unloaded p99 {:.1}x",
        d99 as f64 / b99.max(1) as f64
    ));
    v.fig(format!("quiet after: p50 {a50} us, p99 {a99} us"));
    let mut at_socket: Vec<u64> = during.iter().filter_map(|s| s.socket_us).collect();
    let (s50, s99, smax) = quantiles(&mut at_socket);
    v.fig(format!(
        "quiet during, to the client's socket: p50 {s50} us, p99 {s99} us, max {smax} us"
    ));
}

/// The flood's counts and the queue states seen.
fn flood_figures(v: &mut Verdict, counts: &FloodCounts, seen: &Seen) {
    let cut_list = counts.cuts.lock().map(|c| c.clone()).unwrap_or_default();
    v.fig(format!(
        "flood: sent {}, answers {}, rejects {}, cuts {:?}",
        counts.sent.load(Relaxed),
        counts.answers.load(Relaxed),
        counts.rejects.load(Relaxed),
        summarize(&cut_list)
    ));
    v.fig(format!(
        "queue: overloaded seen {}, lifo seen {}, depth max {}",
        seen.overloaded, seen.lifo, seen.depth_max
    ));
}

/// The request path's sheds by reason, from one scrape.
fn shed_figures(v: &mut Verdict, text: &str) {
    for reason in [
        "overloaded",
        "queue_full",
        "request_path_full",
        "loop_lag",
        "expired",
        "expired_at_worker",
        "expired_at_gateway",
    ] {
        let n = series(
            text,
            &format!("pricewire_sheds_total{{reason=\"{reason}\"}}"),
        )
        .unwrap_or(0.0);
        v.fig(format!("sheds {reason}: {n}"));
    }
}

/// The longest run of quiet requests in a row not answered OK within
/// their budget: its length and when it began (since the flood's start).
fn worst_stretch(during: &[&Sent]) -> String {
    let good = |s: &Sent| s.ok && s.rtt_us.is_some_and(|r| r <= u64::from(QUIET_BUDGET_US));
    let (mut best, mut best_at, mut run, mut run_at) = (0, None, 0, None);
    for s in during {
        if good(s) {
            run = 0;
            continue;
        }
        if run == 0 {
            run_at = Some(s.at);
        }
        run += 1;
        if run > best {
            (best, best_at) = (run, run_at);
        }
    }
    let start = during.first().map(|s| s.at);
    let at = match (best_at, start) {
        (Some(a), Some(s)) => format!("{:.2} s", a.duration_since(s).as_secs_f64()),
        _ => "-".into(),
    };
    format!("quiet during: longest run not answered in budget {best} requests, from {at} into the flood")
}

/// A Reject's text if it is one the server sends (no allocation per
/// frame; anything else is "other").
fn known_text(t: &[u8]) -> &'static str {
    const KNOWN: [&str; 7] = [
        "deadline expired",
        "request path full",
        "workers busy",
        "loop lag",
        "queue full",
        "overloaded",
        "expired",
    ];
    KNOWN
        .iter()
        .find(|k| t.starts_with(k.as_bytes()))
        .copied()
        .unwrap_or("other")
}

/// Mean time per request-path hop (every account), from one scrape.
fn hop_figures(text: &str) -> String {
    let mut out = String::from("request hops (mean, all accounts):");
    for hop in ["queue_wait", "service", "answer_ring", "gateway_write"] {
        let count = series(
            text,
            &format!("pricewire_request_hop_seconds_count{{hop=\"{hop}\"}}"),
        );
        let sum = series(
            text,
            &format!("pricewire_request_hop_seconds_sum{{hop=\"{hop}\"}}"),
        );
        let mean_us = match (count, sum) {
            (Some(c), Some(s)) if c > 0.0 => s / c * 1e6,
            _ => 0.0,
        };
        out.push_str(&format!(
            " {hop} {mean_us:.0} us ({} requests)",
            count.unwrap_or(0.0)
        ));
    }
    out
}

/// The longest a session's hand-over between shards may pause its shard
/// (a histogram bucket bound, s): 500 times the mean measured (about
/// 20 us), so that only a move that stalls the shard's other sessions
/// fails it.
const PAUSE_BOUND: &str = "0.01";

/// Hand-over pauses on both shards, and how many of them took at most
/// `le` seconds (a bucket bound of the histogram).
fn pauses_within(text: &str, le: &str) -> (f64, f64) {
    let (mut count, mut within) = (0.0, 0.0);
    for shard in ["0", "1"] {
        let l = format!("shard=\"{shard}\"");
        let c = series(
            text,
            &format!("pricewire_session_move_pause_seconds_count{{{l}}}"),
        );
        let b = format!("pricewire_session_move_pause_seconds_bucket{{{l},le=\"{le}\"}}");
        count += c.unwrap_or(0.0);
        within += series(text, &b).unwrap_or(0.0);
    }
    (count, within)
}

/// Sessions moved and the hand-over pauses, from one scrape.
pub fn move_figures(text: &str) -> String {
    let mut moved = 0.0;
    let (mut count, mut sum) = (0.0, 0.0);
    for shard in ["0", "1"] {
        moved += series(
            text,
            &format!("pricewire_sessions_moved_total{{shard=\"{shard}\",direction=\"out\"}}"),
        )
        .unwrap_or(0.0);
        count += series(
            text,
            &format!("pricewire_session_move_pause_seconds_count{{shard=\"{shard}\"}}"),
        )
        .unwrap_or(0.0);
        sum += series(
            text,
            &format!("pricewire_session_move_pause_seconds_sum{{shard=\"{shard}\"}}"),
        )
        .unwrap_or(0.0);
    }
    let le = |b: &str| {
        series(
            text,
            &format!("pricewire_session_move_pause_seconds_bucket{{shard=\"0\",le=\"{b}\"}}"),
        )
        .unwrap_or(0.0)
    };
    format!(
        "moves: {moved} sessions, pauses {count} (mean {:.0} us; <= 1 ms: {}, <= 10 ms: {})",
        if count > 0.0 { sum / count * 1e6 } else { 0.0 },
        le("0.001"),
        le("0.01")
    )
}

#[derive(Default, Clone, Copy)]
struct Seen {
    overloaded: bool,
    lifo: bool,
    depth_max: f64,
    /// Sums over scrapes while the queue was overloaded, both shards:
    /// CPU share, run-queue wait share, busy share; and their count.
    cpu: f64,
    wait: f64,
    busy: f64,
    samples: f64,
}

impl Seen {
    fn sample(&mut self, t: &str) {
        let over = series(t, "pricewire_request_queue_overloaded") == Some(1.0);
        self.overloaded |= over;
        self.lifo |= series(t, "pricewire_request_queue_lifo") == Some(1.0);
        let depth = series(t, "pricewire_request_queue_depth").unwrap_or(0.0);
        self.depth_max = self.depth_max.max(depth);
        if !over {
            return;
        }
        for k in ["0", "1"] {
            let l = format!("{{shard=\"{k}\"}}");
            self.cpu += series(t, &format!("pricewire_shard_cpu_ratio{l}")).unwrap_or(0.0);
            self.wait += series(t, &format!("pricewire_shard_run_wait_ratio{l}")).unwrap_or(0.0);
            self.busy += series(t, &format!("pricewire_shard_busy_ratio{l}")).unwrap_or(0.0);
            self.samples += 1.0;
        }
    }

    /// The shards' mean CPU, run-queue wait and busy shares while
    /// overloaded: a shard that waits for a CPU is starved by the host,
    /// not by the flood.
    fn shares(&self) -> String {
        let n = self.samples.max(1.0);
        format!(
            "shards while overloaded (mean of {} samples): on CPU {:.0} %, waiting for a CPU {:.0} %, busy {:.0} %",
            self.samples,
            self.cpu / n * 100.0,
            self.wait / n * 100.0,
            self.busy / n * 100.0
        )
    }
}

fn scraper(ops: SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Seen> {
    std::thread::spawn(move || {
        let mut seen = Seen::default();
        while !stop.load(Relaxed) {
            seen.sample(&scrape(ops));
            std::thread::sleep(Duration::from_millis(250));
        }
        seen
    })
}

type QuietOut = anyhow::Result<(Vec<Sent>, Vec<(DisconnectReason, u32)>)>;

/// The quiet account: a request every 20 ms on schedule until `until`,
/// answers matched by id on a reader thread.
fn quiet(
    addr: SocketAddr,
    phase: impl Fn(Instant) -> Phase + Send + 'static,
    until: Duration,
) -> anyhow::Result<std::thread::JoinHandle<QuietOut>> {
    let mut r = Reader::new(conn::connect(addr, None)?);
    crate::rxstamp::enable(&r.stream)?;
    if conn::logon(&mut r, "quiet", "quiet", Duration::from_secs(10)) != Logon::Accepted {
        anyhow::bail!("the quiet account could not log on");
    }
    let n = (until.as_millis() / QUIET_PERIOD.as_millis()) as usize + 1;
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let mut writer = r.stream.try_clone()?;
    let (sent_w, start) = (sent.clone(), Instant::now());
    let write = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        for id in 0..n as u64 {
            let due = start + QUIET_PERIOD * id as u32;
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            let k = conn::snapshot_frame(&mut buf, id, QUIET_BUDGET_US, &[0]);
            let (at, at_wall) = (Instant::now(), SystemTime::now());
            sent_w.lock().unwrap().push(Sent {
                at,
                at_wall,
                phase: phase(at),
                rtt_us: None,
                socket_us: None,
                ok: false,
                reject: None,
            });
            if std::io::Write::write_all(&mut writer, &buf[..k]).is_err() {
                break;
            }
        }
    });
    Ok(std::thread::spawn(move || {
        let mut cuts = Vec::new();
        let end = start + until + Duration::from_secs(2);
        while Instant::now() < end && cuts.is_empty() {
            let open = r.poll_stamped(Duration::from_millis(50), |m, stamp| {
                let (id, ok, reject) = match m {
                    Message::SnapshotResponse(a) => (a.request_id, true, None),
                    Message::Reject(j) => {
                        (j.request_id, false, Some((j.reason, known_text(j.text))))
                    }
                    Message::Disconnect(x) => return cuts.push((x.reason, x.retry_after_ms)),
                    _ => return,
                };
                let mut s = sent.lock().unwrap();
                if let Some(e) = s.get_mut(id as usize) {
                    e.rtt_us = Some(e.at.elapsed().as_micros() as u64);
                    let arrived = stamp.unwrap_or_else(SystemTime::now);
                    let d = arrived.duration_since(e.at_wall).unwrap_or_default();
                    e.socket_us = Some(d.as_micros() as u64);
                    e.ok = ok;
                    e.reject = reject;
                }
            });
            if !open {
                break;
            }
        }
        let _ = write.join();
        let s = sent.lock().unwrap().clone();
        Ok((s, cuts))
    }))
}

/// One flood connection: logs on, writes batches flat out while
/// `flooding`, reads and counts; a cut session logs on again.
fn flood(
    addr: SocketAddr,
    nice: i32,
    flooding: Arc<AtomicBool>,
    counts: Arc<FloodCounts>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        // Threads inherit it: the session's writer runs at it too.
        renice_this_thread(nice);
        while !flooding.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
        }
        while flooding.load(Relaxed) {
            if flood_session(addr, &flooding, &counts).is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    })
}

/// Lowers the calling thread's priority to `nice` (best effort: a failure
/// leaves it at 0, which the drill's figures then show as starvation).
fn renice_this_thread(nice: i32) {
    if nice == 0 {
        return;
    }
    // SAFETY: gettid has no preconditions; setpriority on our own thread id.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice);
    }
}

fn flood_session(
    addr: SocketAddr,
    flooding: &Arc<AtomicBool>,
    counts: &Arc<FloodCounts>,
) -> Option<()> {
    let mut r = Reader::new(conn::connect(addr, None).ok()?);
    if conn::logon(&mut r, "flood", "flood", Duration::from_secs(10)) != Logon::Accepted {
        return None;
    }
    let mut writer = r.stream.try_clone().ok()?;
    let (fl, c) = (flooding.clone(), counts.clone());
    let symbols: Vec<u16> = (0..FLOOD_SYMBOLS).collect();
    let write = std::thread::spawn(move || {
        let mut buf = vec![0u8; 256 * FLOOD_BATCH];
        let mut id = 0u64;
        while fl.load(Relaxed) {
            let mut n = 0;
            for _ in 0..FLOOD_BATCH {
                n += conn::snapshot_frame(&mut buf[n..], id, 0, &symbols);
                id += 1;
            }
            if std::io::Write::write_all(&mut writer, &buf[..n]).is_err() {
                return;
            }
            c.sent.fetch_add(FLOOD_BATCH as u64, Relaxed);
        }
    });
    let mut cut = false;
    // The writer may be blocked by TCP push-back when the flood ends: the
    // shutdown below frees it.
    while !cut && !write.is_finished() && flooding.load(Relaxed) {
        let open = r.poll(Duration::from_millis(50), |m| match m {
            Message::SnapshotResponse(_) => {
                counts.answers.fetch_add(1, Relaxed);
            }
            Message::Reject(_) => {
                counts.rejects.fetch_add(1, Relaxed);
            }
            Message::Disconnect(x) => {
                counts
                    .cuts
                    .lock()
                    .unwrap()
                    .push((x.reason, x.retry_after_ms));
                cut = true;
            }
            _ => {}
        });
        cut |= !open;
    }
    let _ = r.stream.shutdown(std::net::Shutdown::Both);
    let _ = write.join();
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_are_counted_on_both_shards_against_one_bucket() {
        let text = "\
pricewire_session_move_pause_seconds_bucket{shard=\"0\",le=\"0.01\"} 3
pricewire_session_move_pause_seconds_count{shard=\"0\"} 4
pricewire_session_move_pause_seconds_bucket{shard=\"1\",le=\"0.01\"} 2
pricewire_session_move_pause_seconds_count{shard=\"1\"} 2
";
        assert_eq!(pauses_within(text, PAUSE_BOUND), (6.0, 5.0));
        assert_eq!(pauses_within("", PAUSE_BOUND), (0.0, 0.0));
    }
}
