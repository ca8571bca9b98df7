//! PROXY protocol v2 on a listener behind an L4 balancer: the balancer
//! opens each connection with a binary header naming the client's
//! address, and that address, not the balancer's, is what per-address
//! admission limits, logon lockouts, logs and metrics see.
//!
//! Contract: off unless configured ([`ProxyProtocol`] present). When on,
//! only peers in the [`AllowList`] may connect (anyone else could name any
//! address in a header); each connection must deliver a complete v2
//! header within the header timeout, before any other byte (before the
//! TLS handshake on a TLS listener). A missing, malformed, late or
//! untrusted header closes that connection and is counted by
//! [`ProxyFailure`] reason; no input panics ([`header::parse`] is sans-IO
//! and property-tested). A LOCAL header (a balancer health check) keeps
//! the balancer's own address. v1 (text) headers are refused with their
//! own reason.

pub mod allow;
pub mod header;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};

pub use allow::{AllowList, Cidr, CidrError};
pub use header::{parse, Command, Header, Parse, ProxyFailure};

/// Default of `--proxy-header-timeout-ms`, the same as the TLS handshake's:
/// a connection without a complete header this long after accept is
/// closed and counted as [`ProxyFailure::Timeout`].
pub const HEADER_TIMEOUT_MS_DEFAULT: u64 = super::tls::HANDSHAKE_TIMEOUT_MS_DEFAULT;

/// Default of `--proxy-pending-max`: connections at most waiting for
/// their header at once; one more is refused as [`ProxyFailure::Overflow`].
pub const PENDING_MAX: usize = 4096;

/// A listener's PROXY protocol settings and counters.
#[derive(Debug)]
pub struct ProxyProtocol {
    /// Networks a header is accepted from.
    pub allow: AllowList,
    /// A header not complete this long after accept fails, in ns.
    pub header_timeout_ns: u64,
    /// Connections waiting for their header at most (see [`PENDING_MAX`]).
    pub pending_max: usize,
    /// The counters.
    pub stats: ProxyStats,
}

impl ProxyProtocol {
    /// Settings with `allow` and a header timeout of `timeout_ms`
    /// milliseconds.
    pub fn new(allow: AllowList, timeout_ms: u64) -> ProxyProtocol {
        ProxyProtocol {
            allow,
            header_timeout_ns: timeout_ms.saturating_mul(1_000_000),
            pending_max: PENDING_MAX,
            stats: ProxyStats::default(),
        }
    }
}

/// Counters of one PROXY listener (atomics, read at scrape time).
#[derive(Debug, Default)]
pub struct ProxyStats {
    failures: [AtomicU64; ProxyFailure::ALL.len()],
    local: AtomicU64,
    proxy: AtomicU64,
}

impl ProxyStats {
    /// Connections refused for `why`.
    pub fn failures(&self, why: ProxyFailure) -> u64 {
        self.failures[why.index()].load(Ordering::Relaxed)
    }

    /// Counts a refusal; returns the count of that reason so far.
    pub fn count_failure(&self, why: ProxyFailure) -> u64 {
        self.failures[why.index()].fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Headers accepted with `command`.
    pub fn headers(&self, command: Command) -> u64 {
        match command {
            Command::Local => self.local.load(Ordering::Relaxed),
            Command::Proxy => self.proxy.load(Ordering::Relaxed),
        }
    }

    /// Counts an accepted header.
    pub fn count_header(&self, command: Command) {
        match command {
            Command::Local => self.local.fetch_add(1, Ordering::Relaxed),
            Command::Proxy => self.proxy.fetch_add(1, Ordering::Relaxed),
        };
    }
}
