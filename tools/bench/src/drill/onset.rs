//! The server's threads at a flood's onset, from the kernel's scheduler
//! statistics: every [`STEP`] for the first second, each server thread's
//! CPU time and run-queue wait (`/proc/PID/task/TID/schedstat`), summed per
//! [`WINDOW`] for the shards and for the request path (dispatcher and
//! workers), beside the host's most runnable threads seen
//! (`/proc/stat`'s `procs_running`).
//!
//! It tells a stall the host's scheduler made (the shards runnable but
//! waiting for a CPU while the flood's own threads fill their sockets on
//! the same cores) from one the server's own work made (the shards on a
//! CPU, busy): the quiet tenant's late answers at the onset are read
//! against it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often the threads are read.
const STEP: Duration = Duration::from_millis(5);
/// One reported window.
pub const WINDOW: Duration = Duration::from_millis(100);
/// How long after the onset it samples.
const SPAN: Duration = Duration::from_secs(1);

/// The groups of server threads reported, by name prefix.
const GROUPS: [(&str, &[&str]); 2] = [
    ("shards", &["pw-shard"]),
    ("requests", &["pw-dispatch", "pw-request"]),
];

/// One window's totals per group: CPU time, run-queue wait, thread count;
/// and the most runnable threads the host had at one read.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct Window {
    pub cpu_ns: [u64; 2],
    pub wait_ns: [u64; 2],
    pub threads: [u32; 2],
    pub runnable_max: u32,
}

impl Window {
    /// "shards on CPU 40 % / waiting 55 %, requests …, runnable ≤ N": the
    /// shares of the window's wall time per thread of the group.
    pub fn describe(&self, span_ns: u64) -> String {
        let mut parts = Vec::new();
        for (g, (name, _)) in GROUPS.iter().enumerate() {
            let per = span_ns.max(1) * u64::from(self.threads[g].max(1));
            parts.push(format!(
                "{name} on CPU {:.0} % / waiting {:.0} %",
                self.cpu_ns[g] as f64 / per as f64 * 100.0,
                self.wait_ns[g] as f64 / per as f64 * 100.0
            ));
        }
        format!("{}, runnable <= {}", parts.join(", "), self.runnable_max)
    }
}

/// Samples server process `pid` for a second from now on a thread of its
/// own; joins to one [`Window`] per [`WINDOW`].
pub fn sample(pid: u32) -> std::thread::JoinHandle<Vec<Window>> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut groups: HashMap<String, Option<usize>> = HashMap::new();
        let mut last = read_threads(pid, &mut groups);
        let mut windows = Vec::new();
        let mut cur = Window::default();
        let mut next_edge = start + WINDOW;
        while start.elapsed() < SPAN {
            std::thread::sleep(STEP); // the sampling pace, not a synchronisation
            let now = read_threads(pid, &mut groups);
            cur.runnable_max = cur.runnable_max.max(procs_running());
            for (tid, (g, cpu, wait)) in &now {
                let (_, cpu0, wait0) = last.get(tid).copied().unwrap_or((*g, *cpu, *wait));
                cur.cpu_ns[*g] += cpu.saturating_sub(cpu0);
                cur.wait_ns[*g] += wait.saturating_sub(wait0);
            }
            last = now;
            if Instant::now() >= next_edge {
                for g in 0..GROUPS.len() {
                    cur.threads[g] = last.values().filter(|(k, _, _)| *k == g).count() as u32;
                }
                windows.push(cur);
                cur = Window::default();
                next_edge += WINDOW;
            }
        }
        windows
    })
}

/// One line per window: the quiet requests sent in it (offset from the
/// onset, socket latency in µs if answered, whether the answer was OK),
/// how many reached the socket after `budget_us` or were refused, beside
/// the threads' shares.
pub fn lines(
    windows: &[Window],
    quiet: &[(Duration, Option<u64>, bool)],
    budget_us: u64,
) -> Vec<String> {
    let span = WINDOW.as_nanos() as u64;
    windows
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let (lo, hi) = (WINDOW * i as u32, WINDOW * (i as u32 + 1));
            let q: Vec<_> = quiet.iter().filter(|(t, _, _)| *t >= lo && *t < hi).collect();
            let late = q.iter().filter(|(_, us, ok)| *ok && us.is_some_and(|u| u > budget_us)).count();
            let refused = q.iter().filter(|(_, _, ok)| !ok).count();
            let max = q.iter().filter_map(|(_, us, _)| *us).max().unwrap_or(0);
            format!(
                "onset {:.1}-{:.1} s: quiet {} sent, {late} late, {refused} not OK, max {:.1} ms; {}",
                lo.as_secs_f64(),
                hi.as_secs_f64(),
                q.len(),
                max as f64 / 1000.0,
                w.describe(span)
            )
        })
        .collect()
}

/// Every thread of `pid` in a reported group: tid → (group, CPU ns, wait ns).
fn read_threads(
    pid: u32,
    groups: &mut HashMap<String, Option<usize>>,
) -> HashMap<String, (usize, u64, u64)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for e in dir.flatten() {
        let tid = e.file_name().to_string_lossy().into_owned();
        let g = *groups.entry(tid.clone()).or_insert_with(|| {
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            group_of(comm.trim())
        });
        let Some(g) = g else { continue };
        let stat = std::fs::read_to_string(e.path().join("schedstat")).unwrap_or_default();
        if let Some((cpu, wait)) = parse_schedstat(&stat) {
            out.insert(tid, (g, cpu, wait));
        }
    }
    out
}

fn group_of(comm: &str) -> Option<usize> {
    GROUPS
        .iter()
        .position(|(_, prefixes)| prefixes.iter().any(|p| comm.starts_with(p)))
}

/// The first two fields of a schedstat line: ns on a CPU, ns waiting for one.
fn parse_schedstat(s: &str) -> Option<(u64, u64)> {
    let mut it = s.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}

/// The host's runnable threads now (`procs_running` in `/proc/stat`).
fn procs_running() -> u32 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    stat.lines()
        .find_map(|l| l.strip_prefix("procs_running "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_are_grouped_by_name_and_schedstat_read() {
        assert_eq!(group_of("pw-shard1"), Some(0));
        assert_eq!(group_of("pw-request0"), Some(1));
        assert_eq!(group_of("pw-dispatch"), Some(1));
        assert_eq!(group_of("pw-engine"), None);
        assert_eq!(parse_schedstat("120 340 7\n"), Some((120, 340)));
        assert_eq!(parse_schedstat(""), None);
    }

    #[test]
    fn a_window_is_described_as_shares_per_thread() {
        let w = Window {
            cpu_ns: [100, 0],
            wait_ns: [50, 0],
            threads: [2, 1],
            runnable_max: 9,
        };
        let d = w.describe(100);
        assert!(d.starts_with("shards on CPU 50 % / waiting 25 %"), "{d}");
        assert!(d.ends_with("runnable <= 9"), "{d}");
    }

    #[test]
    fn this_process_is_sampled_when_named_like_a_shard() {
        let pid = std::process::id();
        let named = std::thread::Builder::new()
            .name("pw-shard9".into())
            .spawn(move || {
                let mut groups = HashMap::new();
                read_threads(pid, &mut groups)
            })
            .unwrap();
        let seen = named.join().unwrap();
        // The named thread read itself: present in group 0 unless the
        // kernel has no schedstat (then nothing is read at all).
        assert!(seen.is_empty() || seen.values().any(|(g, _, _)| *g == 0));
    }
}
