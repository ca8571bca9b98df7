//! `--scenario flood-pushback`: `--drill-flood-conns` connections flood
//! SnapshotRequests flat out on the shipped per-connection message limit
//! (the account's request limit raised, so what the server reads goes to
//! the request path), each with a reader that keeps up; a cut connection
//! logs on again at once (a flood does not wait). The writers block when
//! TCP pushes back (counted: writes that took over 5 ms).
//!
//! Checked: the premise (some writes blocked by TCP push-back); no
//! session was cut as idle (its bytes wait in its socket: the
//! server has not read them, the peer is not silent); every cut is
//! `message_flood`, its retry-after inside the error window (1–5 s) and
//! jittered (not one value for all).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pricewire::wire::{DisconnectReason, Message};

use super::conn::{self, Logon, Reader};
use super::{scrape, series, start_server, Verdict};
use crate::cli::BenchArgs;

const BATCH: usize = 64;

#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    blocked_writes: AtomicU64,
    logons: AtomicU64,
    refused_logons: AtomicU64,
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
            "--synthetic-rate",
            "2000",
            "--account-request-rate-per-s",
            "1000000",
            "--account-request-burst",
            "1000000",
        ],
    )?;
    let mut v = Verdict::new("flood-pushback");
    let counts = Arc::new(Counts::default());
    let on = Arc::new(AtomicBool::new(true));
    let conns: Vec<_> = (0..args.drill.drill_flood_conns)
        .map(|_| {
            let (on, c) = (on.clone(), counts.clone());
            let addr = server.addr;
            std::thread::spawn(move || {
                while on.load(Relaxed) {
                    if session(addr, &on, &c).is_none() {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(args.drill.drill_seconds));
    on.store(false, Relaxed);
    for c in conns {
        let _ = c.join();
    }
    let text = scrape(server.ops);
    report(&mut v, &counts, &text);
    v.finish()
}

fn report(v: &mut Verdict, c: &Counts, text: &str) {
    let cuts = c.cuts.lock().map(|x| x.clone()).unwrap_or_default();
    let idle = cuts
        .iter()
        .filter(|x| x.0 == DisconnectReason::IDLE_TIMEOUT)
        .count();
    let flood: Vec<u32> = cuts
        .iter()
        .filter(|x| x.0 == DisconnectReason::MESSAGE_FLOOD)
        .map(|x| x.1)
        .collect();
    let other: Vec<_> = cuts
        .iter()
        .filter(|x| x.0 != DisconnectReason::MESSAGE_FLOOD)
        .collect();
    let distinct: std::collections::BTreeSet<u32> = flood.iter().copied().collect();
    v.fig(format!(
        "flood: sent {}, blocked writes (> 5 ms) {}, logons {} (refused {}), rejects {}",
        c.sent.load(Relaxed),
        c.blocked_writes.load(Relaxed),
        c.logons.load(Relaxed),
        c.refused_logons.load(Relaxed),
        c.rejects.load(Relaxed)
    ));
    v.fig(format!(
        "cuts: {} (message_flood {}, other {:?}); retry-after {}..{} ms, {} distinct",
        cuts.len(),
        flood.len(),
        other,
        flood.iter().min().copied().unwrap_or(0),
        flood.iter().max().copied().unwrap_or(0),
        distinct.len()
    ));
    for reason in ["idle_timeout", "logon_timeout", "message_flood"] {
        let n = series(
            text,
            &format!("pricewire_session_disconnects_total{{reason=\"{reason}\"}}"),
        );
        v.fig(format!(
            "server: session_disconnects {reason} {}",
            n.unwrap_or(0.0)
        ));
    }
    let blocked = c.blocked_writes.load(Relaxed);
    v.check(
        blocked > 0,
        format!("TCP pushed the flood back: {blocked} writes blocked > 5 ms"),
    );
    v.check(!cuts.is_empty(), "the flood was cut at least once");
    v.check(idle == 0, format!("no idle_timeout cut: {idle}"));
    v.check(
        other.is_empty(),
        format!("every cut is message_flood: others {other:?}"),
    );
    v.check(
        flood.iter().all(|r| (1_000..=5_000).contains(r)),
        "message_flood retry-after within 1,000-5,000 ms",
    );
    v.check(
        flood.len() < 2 || distinct.len() > 1,
        "message_flood retry-after jittered",
    );
}

fn session(addr: SocketAddr, on: &Arc<AtomicBool>, c: &Arc<Counts>) -> Option<()> {
    let mut r = Reader::new(conn::connect(addr, None).ok()?);
    match conn::logon(&mut r, "flood", "flood", Duration::from_secs(10)) {
        Logon::Accepted => c.logons.fetch_add(1, Relaxed),
        _ => {
            c.refused_logons.fetch_add(1, Relaxed);
            return None;
        }
    };
    let mut writer = r.stream.try_clone().ok()?;
    let (on_w, c_w) = (on.clone(), c.clone());
    let write = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * BATCH];
        let mut id = 0u64;
        while on_w.load(Relaxed) {
            let mut n = 0;
            for _ in 0..BATCH {
                n += conn::snapshot_frame(&mut buf[n..], id, 0, &[0]);
                id += 1;
            }
            let t = Instant::now();
            if std::io::Write::write_all(&mut writer, &buf[..n]).is_err() {
                return;
            }
            if t.elapsed() > Duration::from_millis(5) {
                c_w.blocked_writes.fetch_add(1, Relaxed);
            }
            c_w.sent.fetch_add(BATCH as u64, Relaxed);
        }
    });
    let mut done = false;
    while !done && on.load(Relaxed) {
        let open = r.poll(Duration::from_millis(50), |m| match m {
            Message::Reject(_) => {
                c.rejects.fetch_add(1, Relaxed);
            }
            Message::Disconnect(x) => {
                c.cuts.lock().unwrap().push((x.reason, x.retry_after_ms));
                done = true;
            }
            _ => {}
        });
        done |= !open;
    }
    let _ = r.stream.shutdown(std::net::Shutdown::Both);
    let _ = write.join();
    Some(())
}
