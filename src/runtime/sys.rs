//! The operating-system boundary: every `libc` call pricewire makes lives
//! here, each behind a safe function that says what it needs and returns
//! the OS error as a value.
//!
//! Contract: none of these runs per tick. Scheduling calls run once per
//! stage thread at placement (and in tests); socket options run when a
//! connection is set up or torn down; the one per-write call,
//! [`send_queue_bytes`], runs only after a write to a socket whose kernel
//! queue held bytes or took a batch (see `gateway::sendq`).

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// The kernel refused `SCHED_FIFO`; the message says which call and,
/// for `EPERM`, which limit or capability would allow it.
#[derive(Debug, thiserror::Error)]
#[error("sched_setscheduler(SCHED_FIFO): {source}{}", eperm_hint(.source))]
pub struct FifoError {
    /// The OS error (`EPERM`, `EINVAL`, ...).
    pub source: io::Error,
}

/// What to change when `err` is `EPERM`; empty otherwise.
fn eperm_hint(err: &io::Error) -> &'static str {
    match err.raw_os_error() {
        Some(libc::EPERM) => {
            " (needs CAP_SYS_NICE, or an RLIMIT_RTPRIO at least this high: \
             `ulimit -r`, limits.conf `rtprio`, systemd `LimitRTPRIO=`)"
        }
        _ => "",
    }
}

/// Puts the calling thread in `SCHED_FIFO` at `priority`.
pub fn set_current_fifo(priority: u8) -> Result<(), FifoError> {
    let param = libc::sched_param {
        sched_priority: i32::from(priority),
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param
    // that outlives the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        return Ok(());
    }
    Err(FifoError {
        source: io::Error::last_os_error(),
    })
}

/// The calling thread's scheduling policy and priority, as the kernel
/// reports them.
pub fn current_policy() -> (i32, i32) {
    // SAFETY: pid 0 is the calling thread; `param` is written by the call.
    unsafe {
        let mut param = libc::sched_param { sched_priority: 0 };
        let policy = libc::sched_getscheduler(0);
        libc::sched_getparam(0, &mut param);
        (policy, param.sched_priority)
    }
}

/// CPU time the calling thread has used (user and kernel), in ns; 0 if
/// the clock cannot be read. For benchmarks on a shared machine: time the
/// thread was not running does not count.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Bounds a socket's kernel send buffer (`SO_SNDBUF`; the kernel doubles
/// the value for its bookkeeping and stops auto-tuning it).
pub fn set_send_buffer(fd: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the fd is an open socket for the whole call, and the option
    // pointer/length describe a live c_int.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&v as *const libc::c_int).cast::<libc::c_void>(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Bytes a TCP socket's kernel send queue holds: `(held, unsent)`, held
/// being those not yet acknowledged by the peer (`SIOCOUTQ`, which is
/// `TIOCOUTQ`), unsent those not yet sent at all (`SIOCOUTQNSD`).
#[inline]
pub fn send_queue_bytes(fd: &impl AsRawFd) -> io::Result<(u64, u64)> {
    Ok((
        socket_ioctl_int(fd, libc::TIOCOUTQ)?,
        socket_ioctl_int(fd, SIOCOUTQNSD)?,
    ))
}

/// `SIOCOUTQNSD` (linux/sockios.h; not in the libc crate).
const SIOCOUTQNSD: libc::c_ulong = 0x894B;

fn socket_ioctl_int(fd: &impl AsRawFd, request: libc::c_ulong) -> io::Result<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: the fd is open for the whole call; both requests write one
    // c_int through the pointer, which points at a live local.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, &mut n as *mut libc::c_int) };
    if rc == 0 {
        Ok(u64::try_from(n).unwrap_or(0))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Raises the soft descriptor limit (`RLIMIT_NOFILE`) to the hard one
/// (capped at 1 << 20 when the hard one is unlimited) and returns it.
pub fn raise_fd_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a live rlimit the call writes.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let want = if lim.rlim_max == libc::RLIM_INFINITY {
        1 << 20
    } else {
        lim.rlim_max
    };
    if lim.rlim_cur < want {
        let raised = libc::rlimit {
            rlim_cur: want,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a live rlimit the call reads.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = want;
        }
    }
    Ok(lim.rlim_cur)
}

/// `SO_LINGER {on, 0}`: close() discards unsent data and sends RST.
pub fn set_linger_zero(stream: &TcpStream) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the fd is an open socket owned by `stream` for the whole call,
    // and the option pointer/length describe a live, initialised `linger`.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast::<libc::c_void>(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A TCP socket bound to `addr` (with `SO_REUSEADDR`, as std binds) but
/// not yet listening: a connect to it is refused until [`listen_on`].
pub fn bind_tcp(addr: std::net::SocketAddr) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: socket() takes no pointers; a non-negative result is a new fd
    // that nothing else owns, so OwnedFd may take it.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: see above.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: `fd` is open; the pointer and length describe a live c_int.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast::<libc::c_void>(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a sockaddr of `len` bytes for the family.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&storage as *const libc::sockaddr_storage).cast::<libc::sockaddr>(),
            len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

fn sockaddr(addr: std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and suitably aligned.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// `listen(fd, backlog)`: starts (or, on a listening socket, resizes) the
/// accept queue; the kernel caps it at `net.core.somaxconn`.
pub fn listen_on(fd: &impl AsRawFd, backlog: u32) -> io::Result<()> {
    let backlog = i32::try_from(backlog).unwrap_or(i32::MAX);
    // SAFETY: the fd is an open, bound socket owned by the caller for the
    // whole call; listen() takes no pointers.
    let rc = unsafe { libc::listen(fd.as_raw_fd(), backlog) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Allocations of this many bytes or more get their own anonymous mapping
/// (glibc's `M_MMAP_THRESHOLD`), returned to the kernel when freed. Every
/// connection's output buffer (`--out-cap-bytes`, 128 KiB by default) and
/// input buffer (`--max-frame-bytes`, 16 KiB) is at least this large.
pub const MMAP_THRESHOLD_BYTES: usize = 16 * 1024;

/// Process-wide allocator settings for a server whose connections come and
/// go in herds; call once at start-up, before other threads exist.
///
/// glibc serves a large allocation from its own mapping, but after the
/// first such block is freed it raises the threshold to that block's size
/// ("dynamic threshold"), so from then on every connection's buffers come
/// from the thread's heap arena: zero-filled there (every page touched),
/// and kept by the arena after the connection closes. Herd after herd
/// this held hundreds of MB. Setting the threshold fixes it at
/// [`MMAP_THRESHOLD_BYTES`]: connection buffers are fresh zero pages
/// (resident only once written) and go back to the kernel on close.
/// Returns false where the setting does not exist (not glibc) or failed.
pub fn tune_allocator() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let threshold = MMAP_THRESHOLD_BYTES as libc::c_int;
        // SAFETY: mallopt takes two integers and no pointers; M_MMAP_THRESHOLD
        // accepts any value up to HEAP_MAX_SIZE / 2 (32 MiB on 64-bit).
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, threshold) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Gives the allocator's free memory back to the kernel (glibc
/// `malloc_trim(0)`: every arena, including free pages inside the heap).
/// Takes each arena's lock in turn for up to a few milliseconds: run it
/// from the ops loop, never on a stage thread. Returns true if memory was
/// released.
pub fn return_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes a size and no pointers; it only walks
        // the allocator's own state under its locks.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// This process's resident set size in bytes (`/proc/self/statm`), or
/// `None` where that file does not exist.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf takes an integer and no pointers.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// Turns terminal echo on `fd` off (`on = false`) or back on; `Ok(false)`
/// when `fd` is not a terminal (nothing changed). Used by
/// `pricewire token hash` so a typed token is not shown.
pub fn set_echo(fd: &impl AsRawFd, on: bool) -> io::Result<bool> {
    let fd = fd.as_raw_fd();
    // SAFETY: isatty only reads the descriptor number.
    if unsafe { libc::isatty(fd) } != 1 {
        return Ok(false);
    }
    // SAFETY: zeroed termios is a valid out-value; tcgetattr fills it.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is a valid termios that outlives the call.
    if unsafe { libc::tcgetattr(fd, &mut t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if on {
        t.c_lflag |= libc::ECHO;
    } else {
        t.c_lflag &= !libc::ECHO;
    }
    // SAFETY: `t` is a valid termios read from this descriptor.
    if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}

/// Bytes received on socket `fd` that nobody has read yet (`FIONREAD`).
/// The timer sweep asks before it judges a peer silent: input waiting in
/// the socket is input the peer sent.
pub fn unread_bytes(fd: &impl AsRawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which points
    // at `n` on this frame for the whole call; the fd is borrowed open.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(n).unwrap_or(0))
}

/// The kernel's smoothed round-trip time of TCP socket `fd`, in µs
/// (`TCP_INFO`'s `tcpi_rtt`); read once per session at logon.
pub fn tcp_rtt_us(fd: &impl AsRawFd) -> io::Result<u32> {
    // SAFETY: a zeroed tcp_info is a valid out-value (plain integers).
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `info`, live and writable
    // on this frame; the kernel writes at most `len` bytes; fd is open.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info.tcpi_rtt)
}

/// The calling thread's scheduler statistics (`/proc/thread-self/schedstat`:
/// time on the CPU and time spent runnable but waiting for a CPU, both in
/// ns). Opened once on the thread that reads it; each [`SchedStat::read`]
/// re-reads the file from its start (one `pread`, no allocation).
pub struct SchedStat {
    file: Option<std::fs::File>,
    buf: [u8; 96],
}

impl SchedStat {
    /// The calling thread's statistics; reads give `None` where the file
    /// does not exist (a kernel without schedstats).
    pub fn for_current_thread() -> SchedStat {
        SchedStat {
            file: std::fs::File::open("/proc/thread-self/schedstat").ok(),
            buf: [0; 96],
        }
    }

    /// (ns on the CPU, ns runnable and waiting for a CPU), cumulative.
    pub fn read(&mut self) -> Option<(u64, u64)> {
        use std::os::unix::fs::FileExt;
        let n = self.file.as_ref()?.read_at(&mut self.buf, 0).ok()?;
        parse_schedstat(&self.buf[..n])
    }
}

/// The first two fields of a schedstat line.
fn parse_schedstat(line: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(line).ok()?;
    let mut f = text.split_ascii_whitespace().map(|v| v.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}

#[cfg(test)]
mod sched_tests {
    use super::*;

    #[test]
    fn schedstat_of_this_thread_reads_and_grows_with_cpu_time() {
        assert_eq!(parse_schedstat(b"123 456 7\n"), Some((123, 456)));
        assert_eq!(parse_schedstat(b"x"), None);
        let mut s = SchedStat::for_current_thread();
        let Some((cpu0, _)) = s.read() else {
            return; // no schedstats on this kernel
        };
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let (cpu1, _) = s.read().expect("read again");
        assert!(cpu1 > cpu0, "{cpu0} -> {cpu1}");
    }

    #[test]
    fn unread_bytes_counts_what_waits_in_a_socket() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        assert_eq!(unread_bytes(&s).unwrap(), 0);
        c.write_all(b"hello").unwrap();
        // Loopback delivers on write; wait for it on a bounded condition.
        let t0 = std::time::Instant::now();
        while unread_bytes(&s).unwrap() < 5 && t0.elapsed().as_secs() < 5 {
            std::thread::yield_now();
        }
        assert_eq!(unread_bytes(&s).unwrap(), 5);
        assert!(tcp_rtt_us(&s).is_ok());
    }
}
