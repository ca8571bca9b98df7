//! Server processes the scale-out scenarios start for themselves
//! ([`super::scale`]): `nats-server` with JetStream and `pricewire serve`
//! in any role, each on free 127.0.0.1 ports, each waited for on a
//! condition (`/healthz`, `/readyz`) with a bounded timeout, each stopped
//! (SIGTERM, then SIGKILL after [`STOP_TIMEOUT`]) when its handle is
//! dropped. A process's stderr goes to a file in a log folder, and a
//! process that exits before it is ready fails the start with the end of
//! that file.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Longest wait for a started process to report healthy or ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for a process to exit after SIGTERM before SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Pause between two readiness probes.
const PROBE_EVERY: Duration = Duration::from_millis(20);

/// A free loopback address (the port is released before the server binds
/// it; another process could take it in between, which fails the start).
pub fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Raises this process's open-files limit to its hard limit and fails
/// unless `needed` descriptors fit. Child processes inherit the raised
/// limit. Returns the new soft limit.
pub fn raise_open_files_limit(needed: usize) -> anyhow::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to
    // an initialised rlimit owned by this frame.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            bail!("getrlimit(NOFILE): {}", std::io::Error::last_os_error());
        }
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            bail!("setrlimit(NOFILE): {}", std::io::Error::last_os_error());
        }
    }
    if lim.rlim_cur < needed as u64 {
        bail!(
            "open-files limit {} (hard) is below the {needed} this run needs",
            lim.rlim_cur
        );
    }
    Ok(lim.rlim_cur)
}

/// Resident set size of process `pid` in KiB, from `/proc/PID/status`.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU seconds (user + system) of this process's threads named `name`
/// (`/proc/self/task/*/comm`), e.g. the generator's `bench-recv` threads.
pub fn threads_cpu_s(name: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    dir.flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .filter_map(|t| crate::stat_cpu_s(t.path().join("stat").to_str()?))
        .sum()
}

/// `GET path` on `addr`: the status code, if one came back in time.
pub fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).ok()?;
    s.set_read_timeout(Some(PROBE_TIMEOUT)).ok()?;
    let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut head = [0u8; 32];
    let mut have = 0;
    while have < head.len() {
        match s.read(&mut head[have..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => have += n,
        }
    }
    // "HTTP/1.x 200 ..."
    std::str::from_utf8(head.get(9..12)?).ok()?.parse().ok()
}

/// One child process, stopped when dropped.
pub struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` with stdout discarded and stderr to `<logs>/<name>.log`.
    /// The child is killed if this process dies first (`PR_SET_PDEATHSIG`),
    /// so an interrupted run leaves no server behind.
    pub fn spawn(name: &str, mut cmd: Command, logs: &Path) -> anyhow::Result<Proc> {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only prctl(2), which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let log = logs.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).with_context(|| log.display().to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", cmd.get_program()))?;
        Ok(Proc {
            name: name.to_string(),
            child,
            log,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process's name in this run (`core`, `edge`, `nats`, …).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits until `ready()` holds; fails if the process exits first or
    /// [`START_TIMEOUT`] passes, quoting the end of its stderr.
    pub fn await_ready(&mut self, mut ready: impl FnMut() -> bool) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!("{} exited ({status}): {}", self.name, self.log_tail());
            }
            if ready() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} not ready within {START_TIMEOUT:?}: {}",
                    self.name,
                    self.log_tail()
                );
            }
            std::thread::sleep(PROBE_EVERY);
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(600);
        let start = (start..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        format!("{} … {}", self.log.display(), text[start..].trim())
    }

    /// Sends `signal` (SIGKILL, SIGSTOP, SIGCONT, …) to the process if it
    /// has not exited; with SIGKILL, waits for it. The failure drills
    /// (`tools/drill`) crash and freeze servers this way.
    pub fn signal(&mut self, signal: libc::c_int) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on our own child's pid; it has not been
            // reaped (try_wait above), so the pid is still ours.
            unsafe { libc::kill(pid, signal) };
        }
        if signal == libc::SIGKILL {
            let _ = self.child.wait();
        }
    }

    /// True once the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// SIGTERM, then SIGKILL if it has not exited within [`STOP_TIMEOUT`].
    pub fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on our own child's pid; it has not been
            // reaped (try_wait above), so the pid is still ours.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(PROBE_EVERY);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A `nats-server` with JetStream, its store in a temporary folder.
pub struct NatsNode {
    proc: Proc,
    client: SocketAddr,
    _store: tempfile::TempDir,
}

impl NatsNode {
    /// Starts one node on free loopback ports (client and monitoring) and
    /// waits for `/healthz` to answer 200 (JetStream up).
    /// Its stderr goes to `<logs>/<name>.log`.
    pub fn start(bin: &str, name: &str, logs: &Path) -> anyhow::Result<NatsNode> {
        let store = tempfile::tempdir().context("JetStream store folder")?;
        let (client, monitor) = (free_addr()?, free_addr()?);
        let mut cmd = Command::new(bin);
        cmd.args(["-a", "127.0.0.1", "-p", &client.port().to_string()])
            .args(["-m", &monitor.port().to_string(), "-n", "pw-bench", "-js"])
            .arg("-sd")
            .arg(store.path());
        let mut proc = Proc::spawn(name, cmd, logs)?;
        proc.await_ready(|| http_status(monitor, "/healthz") == Some(200))?;
        Ok(NatsNode {
            proc,
            client,
            _store: store,
        })
    }

    /// `nats://127.0.0.1:PORT`, as `serve --bus` takes it.
    pub fn url(&self) -> String {
        format!("nats://{}", self.client)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }
}

/// Starts `pricewire serve ARGS` (`RUST_LOG=warn`) as `name` and waits
/// for `/readyz` on `ops` to answer 200.
pub fn start_serve(
    bin: &Path,
    name: &str,
    args: &[String],
    ops: SocketAddr,
    logs: &Path,
) -> anyhow::Result<Proc> {
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .args(args)
        .args(["--ops-listen", &ops.to_string()])
        .env("RUST_LOG", "warn");
    let mut proc = Proc::spawn(name, cmd, logs)?;
    proc.await_ready(|| http_status(ops, "/readyz") == Some(200))?;
    Ok(proc)
}

/// The `pricewire` binary beside this executable, else `pricewire` on
/// `PATH`.
pub fn default_pricewire_bin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name("pricewire"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("pricewire"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_threads_and_rss_are_readable() {
        assert!(rss_kib(std::process::id()).is_some_and(|k| k > 0));
        assert!(rss_kib(u32::MAX).is_none());
        let name = "pw-cpu-probe";
        let cpu = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // Spin until this thread has used 50 ms of CPU (bounded
                // by a wall-clock deadline on a starved host).
                let deadline = Instant::now() + Duration::from_secs(10);
                let mut x = 0u64;
                while crate::thread_cpu_s() < 0.05 && Instant::now() < deadline {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                threads_cpu_s(name)
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(cpu > 0.0, "{cpu}");
        assert_eq!(threads_cpu_s("no-such-thread"), 0.0);
    }

    #[test]
    fn status_of_a_closed_port_is_none() {
        let addr = free_addr().unwrap();
        assert_eq!(http_status(addr, "/readyz"), None);
    }
}
