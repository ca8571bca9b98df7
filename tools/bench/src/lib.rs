//! pricewire-bench: the benchmark lab. An open-loop load generator that
//! acts as price providers and subscribers at once, against pricewire and
//! its peers (Redis pub/sub, NATS core, and a bare relay that marks the
//! floor), plus the round summaries and plots the write-ups cite.
//!
//! # Why a crate of its own
//!
//! The lab is a client of the service, not part of it: it depends on the
//! `pricewire` library (wire codec, clock, instrument table) and carries
//! its own dependencies (serde_json for result rows, plotters for the
//! percentile plots), so none of them is compiled into the service binary.
//! It builds two binaries: `pricewire-bench` (the generator, flags in
//! [`cli::BenchArgs`]) and `relay` (the floor).
//!
//! `pricewire bench ARGS` stays as a thin subcommand of the service
//! binary: it runs the `pricewire-bench` found next to the running
//! `pricewire` (else on `PATH`) with the same arguments and exits with its
//! code, or says how to build it (`cargo build --release -p
//! pricewire-bench`) and exits 2. The command people and scripts already
//! type keeps working, and the service carries no bench code or bench
//! dependency; a pass-through costs one `exec`.
//!
//! # Contract
//!
//! - **Open loop.** Ticks leave on a fixed schedule ([`hist::Schedule`]);
//!   the sender never waits for a response. When it falls behind it sends
//!   the overdue ticks at once, each stamped with its *scheduled* time, so
//!   latency is scheduled-send → receive and stalls land in the tail
//!   (coordinated omission is corrected by construction).
//! - **Bounded.** Every run has a deadline; histograms have explicit
//!   bounds and record with `saturating_record`; buffers are allocated at
//!   connect; connection counts and batch sizes are capped by flags.
//! - **Loopback only.** Targets are addresses on 127.0.0.1 given by the
//!   caller; nothing here starts or stops a server process, except the
//!   scale-out scenarios ([`scale`]), which start `nats-server` and
//!   `pricewire serve` on free 127.0.0.1 ports and stop them after their
//!   runs ([`procs`]).
//! - The generator's own cost is reported: the lag between a tick's
//!   scheduled and actual send time ([`send::SendResult::lag`]).

pub mod cli;
pub mod drill;
pub mod handoff;
pub mod herd;
pub mod hist;
#[cfg(feature = "plot")]
pub mod plot;
pub mod procs;
pub mod recv;
pub mod relay;
pub mod report;
pub mod rounds;
pub mod run;
pub mod rxstamp;
pub mod scale;
pub mod scale_cli;
pub mod send;
pub mod target;

pub use target::Target;

use pricewire::clock::{monotonic_ns, wall_ns};

/// Monotonic time mapped onto UTC once at start-up, so scheduled send
/// times travel as UTC ns (the protocol's `provider_time_ns`) while every
/// difference is taken on the monotonic clock of this one process.
#[derive(Debug, Clone, Copy)]
pub struct BenchClock {
    mono0_ns: u64,
    wall0_ns: u64,
}

impl BenchClock {
    pub fn new() -> BenchClock {
        BenchClock {
            mono0_ns: monotonic_ns(),
            wall0_ns: wall_ns(),
        }
    }

    /// A monotonic reading as UTC ns.
    #[inline]
    pub fn to_wall(&self, mono_ns: u64) -> u64 {
        self.wall0_ns + mono_ns.saturating_sub(self.mono0_ns)
    }

    /// Now, as UTC ns on the monotonic clock.
    #[inline]
    pub fn now_wall(&self) -> u64 {
        self.to_wall(monotonic_ns())
    }
}

impl Default for BenchClock {
    fn default() -> Self {
        BenchClock::new()
    }
}

/// CPU time (user + system) of a process in seconds, from
/// `/proc/PID/stat`; `None` when the process is gone or the file is odd.
pub fn process_cpu_s(pid: u32) -> Option<f64> {
    stat_cpu_s(&format!("/proc/{pid}/stat"))
}

/// CPU time (user + system) in seconds from a `stat` file of `/proc`
/// (a process's or one of its tasks').
pub fn stat_cpu_s(path: &str) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) may hold spaces; fields after its ')' are plain.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    Some((utime + stime) / hz)
}

/// CPU time (user + system) the calling thread has used, in seconds; 0
/// if the clock cannot be read.
pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, owned
    // `ts`; CLOCK_THREAD_CPUTIME_ID is supported on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Spreads `symbols_per_subscriber` of `symbols_total` symbols over
/// subscribers so each symbol has about the same number of subscribers:
/// subscriber `j` takes `j*K .. j*K+K` modulo the total.
pub fn symbols_of(
    subscriber: usize,
    symbols_per_subscriber: usize,
    symbols_total: u16,
) -> Vec<u16> {
    let n = usize::from(symbols_total.max(1));
    let k = symbols_per_subscriber.min(n);
    (0..k).map(|m| ((subscriber * k + m) % n) as u16).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_cpu_time_is_readable() {
        let cpu = process_cpu_s(std::process::id()).unwrap();
        assert!(cpu >= 0.0);
        assert!(process_cpu_s(u32::MAX).is_none());
    }

    #[test]
    fn symbols_are_spread_evenly() {
        let mut per_symbol = [0u32; 25];
        for j in 0..100 {
            let s = symbols_of(j, 5, 25);
            assert_eq!(s.len(), 5);
            s.iter().for_each(|&x| per_symbol[x as usize] += 1);
        }
        assert!(per_symbol.iter().all(|&c| c == 20), "{per_symbol:?}");
    }
}
