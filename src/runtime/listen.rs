//! Listening sockets: bound before any stage starts, with a set backlog.
//!
//! `serve` binds every listener first ([`prebind`]) so that a port in use
//! stops start-up before anything else runs; the stage that later serves
//! the address takes the bound socket with [`bind`] (which binds afresh
//! when nothing was pre-bound, as in tests that start a stage alone).
//! Every listener gets the accept-queue length set by [`set_backlog`]
//! (default [`BACKLOG_DEFAULT`]); the kernel caps it at
//! `net.core.somaxconn`, and [`set_backlog`] says so when it does.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Default accept-queue length: a herd of thousands of reconnecting
/// terminals must not hit SYN retransmits (1 s, 3 s) behind a short queue.
pub const BACKLOG_DEFAULT: u32 = 4_096;
/// Largest backlog accepted by `--listen-backlog`.
pub const BACKLOG_MAX: u32 = 1 << 20;

static BACKLOG: AtomicU32 = AtomicU32::new(BACKLOG_DEFAULT);
static PREBOUND: Mutex<Vec<(SocketAddr, OwnedFd)>> = Mutex::new(Vec::new());

/// The kernel's cap on any backlog (`/proc/sys/net/core/somaxconn`).
pub fn somaxconn() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Sets the backlog of listeners bound from now on; returns the length the
/// kernel will grant (logged when `somaxconn` caps it).
pub fn set_backlog(backlog: u32) -> u32 {
    BACKLOG.store(backlog, Ordering::Relaxed);
    effective_backlog(backlog, somaxconn())
}

/// `backlog` capped by `somaxconn`, logged when the cap applies.
pub fn effective_backlog(backlog: u32, somaxconn: Option<u32>) -> u32 {
    match somaxconn {
        Some(max) if max < backlog => {
            tracing::warn!(
                requested = backlog,
                somaxconn = max,
                "listen backlog clamped by net.core.somaxconn"
            );
            max
        }
        _ => backlog,
    }
}

/// Binds every address of `addrs` (each named by its flag) without
/// listening, then, once all are bound, starts listening on each: when one
/// port is in use no socket has listened yet, and the error names its flag.
/// The sockets wait for the stages that serve them ([`bind`]).
pub fn prebind(addrs: &[(&str, SocketAddr)]) -> Result<Vec<SocketAddr>, PrebindError> {
    let mut bound = Vec::with_capacity(addrs.len());
    for (flag, addr) in addrs {
        let fd = super::sys::bind_tcp(*addr).map_err(PrebindError::at(flag, Some(*addr)))?;
        bound.push((*flag, *addr, fd));
    }
    let backlog = BACKLOG.load(Ordering::Relaxed);
    let mut locals = Vec::with_capacity(bound.len());
    let mut pre = PREBOUND.lock().unwrap_or_else(|e| e.into_inner());
    for (flag, addr, fd) in bound {
        super::sys::listen_on(&fd.as_fd(), backlog).map_err(PrebindError::at(flag, Some(addr)))?;
        let l = TcpListener::from(fd.try_clone().map_err(PrebindError::at(flag, None))?);
        locals.push(l.local_addr().map_err(PrebindError::at(flag, None))?);
        pre.push((addr, fd));
    }
    Ok(locals)
}

/// A listener [`prebind`] could not set up: the flag that named it, the
/// address where the bind or listen failed, and the OS error.
#[derive(Debug, thiserror::Error)]
#[error("{flag}{}: {source}", addr.map(|a| format!(" {a}")).unwrap_or_default())]
pub struct PrebindError {
    /// The flag (`--listen`, `--ops-listen`, ...).
    pub flag: String,
    /// The address, when binding or listening on it failed.
    pub addr: Option<SocketAddr>,
    /// The OS error (`AddrInUse`, `PermissionDenied`, ...).
    pub source: io::Error,
}

impl PrebindError {
    fn at(flag: &str, addr: Option<SocketAddr>) -> impl FnOnce(io::Error) -> PrebindError + '_ {
        move |source| PrebindError {
            flag: flag.to_string(),
            addr,
            source,
        }
    }
}

/// Drops every pre-bound listener no stage took (a start-up that failed).
pub fn release_prebound() {
    PREBOUND.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The listener for `addr`: the pre-bound one if [`prebind`] made it,
/// else a new one. Non-blocking, with the backlog set.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let taken = {
        let mut pre = PREBOUND.lock().unwrap_or_else(|e| e.into_inner());
        pre.iter()
            .position(|(a, _)| *a == addr)
            .map(|i| pre.swap_remove(i).1)
    };
    let l = match taken {
        Some(fd) => TcpListener::from(fd),
        None => {
            let l = TcpListener::bind(addr)?;
            super::sys::listen_on(&l, BACKLOG.load(Ordering::Relaxed))?;
            l
        }
    };
    l.set_nonblocking(true)?;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn somaxconn_caps_the_backlog() {
        assert_eq!(effective_backlog(4096, Some(128)), 128);
        assert_eq!(effective_backlog(4096, Some(4096)), 4096);
        assert_eq!(effective_backlog(8192, None), 8192);
    }

    #[test]
    fn a_port_in_use_is_named_by_its_flag_and_nothing_listens() {
        let busy = TcpListener::bind("127.0.0.1:0").unwrap();
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        let free = probe.local_addr().unwrap();
        drop(probe);
        let err = prebind(&[
            ("--listen", free),
            ("--ops-listen", busy.local_addr().unwrap()),
        ])
        .unwrap_err();
        assert_eq!(err.flag, "--ops-listen");
        assert_eq!(err.source.kind(), io::ErrorKind::AddrInUse);
        let err = err.to_string();
        assert!(err.starts_with("--ops-listen"), "{err}");
        // The free address was bound but never listened, and is released.
        assert!(std::net::TcpStream::connect(free).is_err());
        assert!(TcpListener::bind(free).is_ok());
    }

    #[test]
    fn a_prebound_listener_is_handed_to_its_stage() {
        // An address of its own (port 0 is shared by other tests).
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let local = prebind(&[("--listen", addr)]).unwrap();
        assert_eq!(local, vec![addr]);
        // Taken, not bound twice (a second bind of the port would fail).
        let l = bind(addr).unwrap();
        assert_eq!(l.local_addr().unwrap(), addr);
        assert!(TcpListener::bind(addr).is_err(), "still held by `l`");
    }
}
