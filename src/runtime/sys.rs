//! The operating-system boundary: every `libc` call pricewire makes lives
//! here, each behind a safe function that says what it needs and returns
//! the OS error as a value.
//!
//! Contract: none of these runs per tick. Scheduling calls run once per
//! stage thread at placement (and in tests); socket options run when a
//! connection is set up or torn down.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Puts the calling thread in `SCHED_FIFO` at `priority`.
pub fn set_current_fifo(priority: u8) -> Result<(), String> {
    let param = libc::sched_param {
        sched_priority: i32::from(priority),
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param
    // that outlives the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    let hint = match err.raw_os_error() {
        Some(libc::EPERM) => {
            " (needs CAP_SYS_NICE, or an RLIMIT_RTPRIO at least this high: \
             `ulimit -r`, limits.conf `rtprio`, systemd `LimitRTPRIO=`)"
        }
        _ => "",
    };
    Err(format!("sched_setscheduler(SCHED_FIFO): {err}{hint}"))
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
