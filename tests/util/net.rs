//! Loopback helpers for tests that start the real binary.

#![allow(dead_code)] // each test binary uses a different part

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

/// A free loopback address (the port is released before use; the window
/// for another process to take it is tiny on a test machine).
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Raises this process's open-files limit to its hard limit (at most
/// 65,536) and checks that `needed` descriptors fit.
pub fn raise_open_files_limit(needed: usize) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to a
    // properly initialised rlimit owned by this frame.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max.min(65_536);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    assert!(
        lim.rlim_cur >= needed as u64,
        "open-files limit {} too low",
        lim.rlim_cur
    );
}

/// Resident set size of process `pid` in KiB (0 if it cannot be read).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// `GET /readyz` on the ops listener answers 200.
pub fn ready(ops: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&ops, Duration::from_millis(300)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200")
}

/// A child server process, killed and reaped when dropped.
pub struct Server(pub std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How long [`start_ready`] waits for `/readyz`: a debug build starting
/// among the suite's other servers beside two CPU hogs took more than 30 s
/// once (a fresh-clone `.ci/run`).
const READY_WITHIN: Duration = Duration::from_secs(90);

/// Starts the server `cmd` describes (stdout discarded, `RUST_LOG=warn`)
/// and waits up to [`READY_WITHIN`] for `/readyz` on its ops listener
/// `ops`; fails at once, with its exit status, if the server exits first.
pub fn start_ready(cmd: &mut std::process::Command, ops: SocketAddr) -> Server {
    match try_start_ready(cmd, ops) {
        Ok(server) => server,
        Err(status) => panic!("server exited before it was ready ({status}; ops {ops})"),
    }
}

/// [`start_ready`], but a server that exits before it is ready is an
/// `Err` with its exit status (a caller that picked its ports with
/// [`free_addr`] may try again with others: another test can take a
/// port between its pick and the server's bind).
pub fn try_start_ready(
    cmd: &mut std::process::Command,
    ops: SocketAddr,
) -> Result<Server, std::process::ExitStatus> {
    let child = cmd
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server(child);
    let start = std::time::Instant::now();
    while !ready(ops) {
        if let Ok(Some(status)) = server.0.try_wait() {
            return Err(status);
        }
        assert!(
            start.elapsed() < READY_WITHIN,
            "server never became ready in {READY_WITHIN:?} (ops {ops})"
        );
        // The polling interval of a bounded wait: a spinning poll took
        // the CPU from the server starting on the same 2 cores.
        std::thread::park_timeout(Duration::from_millis(10));
    }
    Ok(server)
}

/// `GET path` on the ops listener `ops`: the whole response (status line,
/// headers and body), or `None` if it could not be had in time.
pub fn http_get(ops: SocketAddr, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&ops, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut buf = String::new();
    // A reset after the answer (the server closing at once) keeps what
    // was read.
    let _ = s.read_to_string(&mut buf);
    (!buf.is_empty()).then_some(buf)
}

/// Sum of a metric family's samples (the lines starting `name`, which may
/// include labels) in the ops endpoint's /metrics; 0 if it does not answer.
pub fn metric_sum(ops: SocketAddr, name: &str) -> f64 {
    let body = http_get(ops, "/metrics").unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `GET path`: the status code and the body.
pub fn http_answer(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let text = http_get(addr, path)?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// `GET path`: the status code.
pub fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    http_answer(addr, path).map(|(status, _)| status)
}

/// `GET path`: the body.
pub fn http_body(addr: SocketAddr, path: &str) -> Option<String> {
    http_answer(addr, path).map(|(_, body)| body)
}

/// Sends signal `sig` (`-STOP`, `-CONT`, `-HUP`, …) to process `pid`
/// with kill(1).
pub fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

/// A TCP connection to `dst` from the loopback address `src` (any of
/// 127.0.0.0/8 is local on Linux), so one test can be several clients.
pub fn connect_from(src: std::net::Ipv4Addr, dst: SocketAddr) -> std::net::TcpStream {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(dst) = dst else {
        panic!("connect_from: IPv4 only, got {dst}");
    };
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let (from, to) = (sockaddr(src, 0), sockaddr(*dst.ip(), dst.port()));
    // SAFETY: a fresh socket descriptor, owned by the TcpStream made from
    // it right away (closed on drop); bind and connect get pointers to
    // sockaddr_in values on this frame with their true length.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = std::net::TcpStream::from_raw_fd(fd);
        let rc = libc::bind(fd, (&from as *const libc::sockaddr_in).cast(), len);
        assert_eq!(rc, 0, "bind {src}: {}", std::io::Error::last_os_error());
        let rc = libc::connect(fd, (&to as *const libc::sockaddr_in).cast(), len);
        assert_eq!(rc, 0, "connect {dst}: {}", std::io::Error::last_os_error());
        stream
    }
}
