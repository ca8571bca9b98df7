//! Disconnect(busy) for connections refused for capacity on a TLS
//! listener, within a handshake budget.
//!
//! A plaintext refusal is one write on a fresh socket. Over TLS the frame
//! can only follow a full handshake (an ECDHE and a signature on our side),
//! and refusals come in herds exactly when the server is full. So the
//! acceptor thread completes at most [`GatewayConfig::tls_busy_handshakes_per_s`]
//! refusal handshakes a second (that many at once, and never more than
//! [`REFUSALS_IN_FLIGHT`] open), each within [`REFUSAL_DEADLINE_MS`], and
//! sends Disconnect(busy) with the jittered retry-after over them; beyond
//! the budget a refused connection is closed before any TLS work. Each
//! outcome is counted (`pricewire_tls_refusals_total{outcome}`: busy,
//! bare, unfinished). The SDK treats a close during the handshake as an
//! I/O failure and retries it under its full-jitter backoff.
//!
//! Refusals decided on a shard (its slots full, a refused move) reach the
//! acceptor through [`RefusalQueue`]; nothing here runs on a shard.
//!
//! [`GatewayConfig::tls_busy_handshakes_per_s`]: super::GatewayConfig::tls_busy_handshakes_per_s

use std::io::{self, Read};
use std::sync::{Arc, OnceLock};

use crossbeam_channel::{Receiver, Sender};
use mio::event::Source;
use mio::{Interest, Registry, Token, Waker};

use crate::resilience::limiter::TokenBucket;
use crate::runtime::tls::{Link, RefusalOutcome, TlsStats};
use crate::wire::{self, DisconnectReason};

/// Default of `tls_busy_handshakes_per_s`: refusal handshakes per second
/// (and their burst).
pub const TLS_BUSY_HANDSHAKES_PER_S_DEFAULT: u32 = 32;
/// Largest `--tls-busy-handshakes-per-s`: each refusal handshake costs the
/// acceptor thread a full TLS handshake while the server is at capacity.
pub const TLS_BUSY_HANDSHAKES_PER_S_MAX: u32 = 1024;
/// Refusal handshakes open at once at most.
pub const REFUSALS_IN_FLIGHT: usize = 32;
/// A refused connection gets this long to finish its handshake, read the
/// Disconnect and close; then it is closed.
pub const REFUSAL_DEADLINE_MS: u64 = 2_000;
/// The first poll token of a refusal: above the acceptor's own (0, 1) and
/// its PROXY header waits (from 2, at most `--proxy-pending-max` ≤ 65,536).
pub(super) const FIRST_TOKEN: usize = 1 << 17;

/// Refused TLS links on their way from a shard to the acceptor thread.
#[derive(Debug)]
pub struct RefusalQueue {
    tx: Sender<(Link, u32)>,
    rx: Receiver<(Link, u32)>,
    waker: OnceLock<Arc<Waker>>,
}

impl Default for RefusalQueue {
    fn default() -> Self {
        let (tx, rx) = crossbeam_channel::bounded(REFUSALS_IN_FLIGHT);
        RefusalQueue {
            tx,
            rx,
            waker: OnceLock::new(),
        }
    }
}

impl RefusalQueue {
    /// Wakes `waker` (the acceptor's poll) on every send.
    pub(super) fn set_waker(&self, waker: Arc<Waker>) {
        let _ = self.waker.set(waker);
    }

    /// Hands a refused link still handshaking to the acceptor; a full queue
    /// closes it bare (counted).
    pub(super) fn send(&self, link: Link, retry_after_ms: u32, stats: &TlsStats) {
        match self.tx.try_send((link, retry_after_ms)) {
            Ok(()) => {
                if let Some(w) = self.waker.get() {
                    let _ = w.wake();
                }
            }
            Err(_) => stats.count_refusal(RefusalOutcome::Bare),
        }
    }

    /// The next refused link, if any.
    pub(super) fn try_take(&self) -> Option<(Link, u32)> {
        self.rx.try_recv().ok()
    }
}

struct Pending {
    link: Link,
    retry_after_ms: u32,
    until_ns: u64,
    sent: bool,
}

/// The acceptor thread's refusals in progress.
pub(super) struct Refuser {
    slots: Vec<Option<Pending>>,
    free: Vec<usize>,
    bucket: TokenBucket,
    stats: Arc<TlsStats>,
    scratch: Box<[u8]>,
    /// The slot being driven: after a fault in its handshake, the one
    /// to discard ([`Refuser::discard_faulted`]).
    driving: Option<usize>,
}

impl Refuser {
    /// A refuser completing at most `per_s` refusal handshakes a second (0:
    /// every refusal is closed bare).
    pub(super) fn new(per_s: u32, stats: Arc<TlsStats>, now_ns: u64) -> Refuser {
        Refuser {
            slots: (0..REFUSALS_IN_FLIGHT).map(|_| None).collect(),
            free: (0..REFUSALS_IN_FLIGHT).rev().collect(),
            bucket: TokenBucket::new(per_s, per_s.max(1), now_ns),
            stats,
            scratch: vec![0; 4096].into_boxed_slice(),
            driving: None,
        }
    }

    /// Whether refusals are open (the acceptor polls more often then).
    pub(super) fn is_busy(&self) -> bool {
        self.free.len() < self.slots.len()
    }

    /// The client address of the refusal polled as `token`.
    pub(super) fn peer(&self, token: Token) -> Option<std::net::SocketAddr> {
        let p = self
            .slots
            .get(token.0.wrapping_sub(FIRST_TOKEN))?
            .as_ref()?;
        p.link.socket().peer_addr().ok()
    }

    /// After a fault while a refusal was driven: closes that refusal (its
    /// link dropped, its slot free again); the others are untouched (each
    /// slot is its own connection's, and `free` changes only in `take` and
    /// `close`, whole).
    pub(super) fn discard_faulted(&mut self, r: &Registry) {
        if let Some(i) = self.driving.take() {
            self.close(r, i);
        }
    }

    /// Refuses `link` with Disconnect(busy, `retry_after_ms`): at once if
    /// its handshake is done, after it within the budget, else bare.
    pub(super) fn take(&mut self, r: &Registry, mut link: Link, retry_after_ms: u32, now: u64) {
        if !link.is_handshaking() {
            send_busy(&mut link, retry_after_ms);
            return self.stats.count_refusal(RefusalOutcome::Busy);
        }
        let budget = self.bucket.rate_per_s() > 0 && !self.free.is_empty();
        if !budget || !self.bucket.try_take(now) {
            return self.stats.count_refusal(RefusalOutcome::Bare);
        }
        let Some(i) = self.free.pop() else {
            return self.stats.count_refusal(RefusalOutcome::Bare);
        };
        let interest = Interest::READABLE | Interest::WRITABLE;
        if link.register(r, Token(FIRST_TOKEN + i), interest).is_err() {
            self.free.push(i);
            return self.stats.count_refusal(RefusalOutcome::Unfinished);
        }
        self.slots[i] = Some(Pending {
            link,
            retry_after_ms,
            until_ns: now.saturating_add(REFUSAL_DEADLINE_MS * 1_000_000),
            sent: false,
        });
        self.drive(r, i);
    }

    /// A readiness event for `token`.
    pub(super) fn on_event(&mut self, r: &Registry, token: Token) {
        let i = token.0.wrapping_sub(FIRST_TOKEN);
        if i < self.slots.len() {
            self.drive(r, i);
        }
    }

    /// Closes refusals past their deadline.
    pub(super) fn expire(&mut self, r: &Registry, now_ns: u64) {
        for i in 0..self.slots.len() {
            if self.slots[i].as_ref().is_some_and(|p| now_ns >= p.until_ns) {
                self.close(r, i);
            }
        }
    }

    /// Moves the handshake on; once it is done, sends the Disconnect and
    /// half-closes, then waits for the peer's close (closing first with
    /// its bytes unread would reset the connection and lose the frame).
    fn drive(&mut self, r: &Registry, i: usize) {
        self.driving = Some(i);
        self.drive_slot(r, i);
        self.driving = None;
    }

    fn drive_slot(&mut self, r: &Registry, i: usize) {
        let Some(p) = self.slots[i].as_mut() else {
            return;
        };
        // Bounded: a peer that keeps sending cannot hold the acceptor.
        for _ in 0..16 {
            match p.link.read(&mut self.scratch) {
                Ok(0) => return self.close(r, i),
                // The client's Logon and anything after it: not read.
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.close(r, i),
            }
        }
        if !p.link.is_handshaking() && !p.sent {
            p.sent = true;
            send_busy(&mut p.link, p.retry_after_ms);
            self.stats.count_refusal(RefusalOutcome::Busy);
        } else if p.link.flush_pending().is_err() {
            self.close(r, i);
        }
    }

    fn close(&mut self, r: &Registry, i: usize) {
        if let Some(mut p) = self.slots[i].take() {
            let _ = p.link.deregister(r);
            if !p.sent {
                self.stats.count_refusal(RefusalOutcome::Unfinished);
            }
            self.free.push(i);
        }
    }
}

/// Disconnect(busy, retry-after), close_notify and our FIN.
fn send_busy(link: &mut Link, retry_after_ms: u32) {
    let mut buf = [0u8; 64];
    if let Ok(n) =
        wire::encode_disconnect_reason(&mut buf, DisconnectReason::BUSY, retry_after_ms, "busy")
    {
        link.write_last(&buf[..n]);
    }
    link.shutdown_write();
}
