//! QuickFIX as the test LP: `tools/quickfix-lp` (a FIX 4.4 acceptor on the
//! C++ QuickFIX library with FIX44.xml validation on) on a free loopback
//! port for one test.
//!
//! `util::quickfix`. The program
//! is built once per test process into `target/quickfix-lp/` when missing
//! or older than its source (`tools/quickfix-lp/build.sh`, which needs
//! `libquickfix-dev`); the helper fails with a clear message when it
//! cannot be built. Start-up is awaited on the `READY` line, bounded by
//! [`START_TIMEOUT`]; the process is killed when the [`QuickFixLp`] is
//! dropped. Every stdout line is kept, so a test can assert what the LP
//! received and that it sent no session Reject.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Longest wait for the `READY` line.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts with a fresh port if another process takes ours meanwhile.
const PORT_ATTEMPTS: usize = 3;

/// What the LP's CompIDs are (pricewire's target and sender).
pub const LP_COMP_ID: &str = "LP";
pub const OUR_COMP_ID: &str = "PRICEWIRE";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The built program, built on first use in this process.
pub fn binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let src = root().join("tools/quickfix-lp/lp.cpp");
        let out = root().join("target/quickfix-lp/quickfix-lp");
        let stale = match (modified(&src), modified(&out)) {
            (Some(s), Some(o)) => s > o,
            _ => true,
        };
        if stale {
            let status = Command::new("sh")
                .arg(root().join("tools/quickfix-lp/build.sh"))
                .arg(&out)
                .status()
                .expect("run tools/quickfix-lp/build.sh");
            assert!(
                status.success(),
                "building quickfix-lp failed: is libquickfix-dev installed \
                 (tools/test-deps installs it)?"
            );
        }
        out
    })
}

fn modified(p: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

#[derive(Default)]
struct Lines {
    lines: Mutex<Vec<String>>,
    changed: Condvar,
}

/// A running quickfix-lp; killed on drop.
pub struct QuickFixLp {
    child: Child,
    stdin: ChildStdin,
    addr: SocketAddr,
    out: Arc<Lines>,
}

impl QuickFixLp {
    /// Starts the LP with `args` (flags of `tools/quickfix-lp/lp.cpp`,
    /// e.g. `--symbol EURUSD=1.0812 --rate 50`).
    pub fn start(args: &[&str]) -> QuickFixLp {
        let bin = binary();
        for _ in 0..PORT_ATTEMPTS {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("free port")
                .port();
            if let Some(lp) = Self::try_start(bin, port, args) {
                return lp;
            }
        }
        panic!("quickfix-lp did not start in {PORT_ATTEMPTS} attempts");
    }

    fn try_start(bin: &Path, port: u16, args: &[&str]) -> Option<QuickFixLp> {
        let dict = root().join("tools/quickfix-lp/FIX44.xml");
        let mut child = Command::new(bin)
            .args(["--port", &port.to_string(), "--dict"])
            .arg(dict)
            .args(["--sender", LP_COMP_ID, "--target", OUR_COMP_ID])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn quickfix-lp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let out = Arc::new(Lines::default());
        let sink = Arc::clone(&out);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lines.lock().unwrap().push(line);
                sink.changed.notify_all();
            }
            sink.lines.lock().unwrap().push("EXIT".into());
            sink.changed.notify_all();
        });
        let lp = QuickFixLp {
            child,
            stdin,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            out,
        };
        let ready = lp.wait_line(START_TIMEOUT, |l| {
            l.starts_with("READY") || l.starts_with("ERR") || l == "EXIT"
        });
        match ready {
            Some(l) if l.starts_with("READY") => Some(lp),
            _ => None, // dropped: killed
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends one stdin command and waits for its `OK` (panics on `ERR`).
    pub fn cmd(&mut self, command: &str) {
        let from = self.out.lines.lock().unwrap().len();
        writeln!(self.stdin, "{command}").expect("write to quickfix-lp");
        self.stdin.flush().expect("flush");
        let ok = format!("OK {command}");
        let got = self.wait_from(from, START_TIMEOUT, |l| {
            l == ok || l.starts_with("ERR") || l == "EXIT"
        });
        assert_eq!(got.as_deref(), Some(ok.as_str()), "quickfix-lp: {command}");
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.out.lines.lock().unwrap().clone()
    }

    /// How many lines so far satisfy `pred`.
    pub fn count(&self, pred: impl Fn(&str) -> bool) -> usize {
        self.out
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| pred(l))
            .count()
    }

    /// The first line (from the start) satisfying `pred`, waiting up to
    /// `timeout` for it.
    pub fn wait_line(&self, timeout: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
        self.wait_from(0, timeout, pred)
    }

    /// Waits until at least `n` lines satisfy `pred`.
    pub fn wait_count(&self, n: usize, timeout: Duration, pred: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut lines = self.out.lines.lock().unwrap();
        loop {
            if lines.iter().filter(|l| pred(l)).count() >= n {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            lines = self.out.changed.wait_timeout(lines, left).unwrap().0;
        }
    }

    fn wait_from(
        &self,
        from: usize,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let mut lines = self.out.lines.lock().unwrap();
        loop {
            if let Some(l) = lines.iter().skip(from).find(|l| pred(l)) {
                return Some(l.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            lines = self.out.changed.wait_timeout(lines, left).unwrap().0;
        }
    }

    /// Session Rejects and BusinessMessageRejects the LP sent, and the
    /// validation failures QuickFIX reported: what a strict LP would hold
    /// against us.
    pub fn complaints(&self) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| {
                l.starts_with("REJECT-SENT")
                    || (l.starts_with("EVENT")
                        && (l.contains("Rejected")
                            || l.contains("Invalid")
                            || l.contains("invalid")
                            || l.contains("Garbled")
                            || l.contains("too low")))
            })
            .collect()
    }
}

impl Drop for QuickFixLp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
