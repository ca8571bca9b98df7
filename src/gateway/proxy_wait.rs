//! Connections waiting for their PROXY v2 header (`--proxy-protocol`), on
//! the acceptor thread: each is registered with the acceptor's poll,
//! read only as far as its header goes (what follows — the logon, or a
//! TLS ClientHello — stays in the socket for the shard) and cut when its
//! deadline passes.
//!
//! Bounded: at most `pending_max` connections wait at once; the deadline
//! queue is in accept order (one timeout for all), so expiring is a pop
//! from the front. Time comes in as `now_ns` on every call.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::SocketAddr;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::runtime::proxy::{parse, Header, Parse, ProxyFailure};

/// What reading a waiting connection's bytes came to.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The header is not complete yet.
    Wait,
    /// The header is complete (and no byte past it was read).
    Done(Header),
    /// Refused.
    Failed(ProxyFailure),
}

/// Reads from `r` into `buf` no further than the header needs, until the
/// header is decided or `r` would block.
pub(super) fn read_header<R: Read>(r: &mut R, buf: &mut Vec<u8>) -> Outcome {
    loop {
        let need = match parse(buf) {
            Parse::Incomplete { need } => need,
            Parse::Header(h) => return Outcome::Done(h),
            Parse::Error(why) => return Outcome::Failed(why),
        };
        let have = buf.len();
        buf.resize(need, 0);
        let got = r.read(&mut buf[have..]);
        buf.truncate(have + *got.as_ref().unwrap_or(&0));
        match got {
            Ok(0) => return Outcome::Failed(ProxyFailure::PeerClosed),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Outcome::Wait,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Outcome::Failed(ProxyFailure::PeerClosed),
        }
    }
}

struct Waiting {
    stream: TcpStream,
    peer: SocketAddr,
    buf: Vec<u8>,
    generation: u32,
}

/// A connection whose wait ended: its socket (no longer registered), the
/// balancer's address and how it ended.
pub(super) type Ended = (TcpStream, SocketAddr, Outcome);

/// The waiting connections of one listener.
pub(super) struct ProxyWait {
    slots: Vec<Option<Waiting>>,
    free: Vec<usize>,
    /// (deadline, slot, generation), oldest first.
    deadlines: VecDeque<(u64, usize, u32)>,
    generation: u32,
    timeout_ns: u64,
    cap: usize,
    /// Token of slot 0; slot `k` is `first + k`.
    first: usize,
}

impl ProxyWait {
    /// Room for `cap` waiting connections, each given `timeout_ns`; their
    /// poll tokens start at `first`.
    pub(super) fn new(cap: usize, timeout_ns: u64, first: Token) -> ProxyWait {
        ProxyWait {
            slots: Vec::new(),
            free: Vec::new(),
            deadlines: VecDeque::new(),
            generation: 0,
            timeout_ns,
            cap,
            first: first.0,
        }
    }

    /// Connections waiting now.
    pub(super) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Starts waiting for `stream`'s header. Full, or not registrable: the
    /// stream comes back with the reason.
    pub(super) fn insert(
        &mut self,
        registry: &Registry,
        mut stream: TcpStream,
        peer: SocketAddr,
        now_ns: u64,
    ) -> Result<(), (TcpStream, ProxyFailure)> {
        if self.len() >= self.cap {
            return Err((stream, ProxyFailure::Overflow));
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        if registry
            .register(&mut stream, Token(self.first + slot), Interest::READABLE)
            .is_err()
        {
            self.free.push(slot);
            return Err((stream, ProxyFailure::PeerClosed));
        }
        self.generation = self.generation.wrapping_add(1);
        let deadline = now_ns.saturating_add(self.timeout_ns);
        self.deadlines.push_back((deadline, slot, self.generation));
        self.slots[slot] = Some(Waiting {
            stream,
            peer,
            buf: Vec::new(),
            generation: self.generation,
        });
        Ok(())
    }

    /// Reads the connection of `token` (a readiness event); `None` while
    /// it still waits or when the token is not one of ours.
    pub(super) fn on_ready(&mut self, registry: &Registry, token: Token) -> Option<Ended> {
        let slot = token.0.checked_sub(self.first)?;
        let w = self.slots.get_mut(slot)?.as_mut()?;
        match read_header(&mut w.stream, &mut w.buf) {
            Outcome::Wait => None,
            ended => self.remove(registry, slot).map(|(s, p)| (s, p, ended)),
        }
    }

    /// Ends every wait whose deadline is at or before `now_ns`, handing
    /// each to `f` (as [`ProxyFailure::Timeout`]).
    pub(super) fn expire(&mut self, registry: &Registry, now_ns: u64, mut f: impl FnMut(Ended)) {
        while let Some(&(deadline, slot, generation)) = self.deadlines.front() {
            let live = self.slots[slot]
                .as_ref()
                .is_some_and(|w| w.generation == generation);
            if live && deadline > now_ns {
                return;
            }
            self.deadlines.pop_front();
            if live {
                if let Some((s, p)) = self.remove(registry, slot) {
                    f((s, p, Outcome::Failed(ProxyFailure::Timeout)));
                }
            }
        }
    }

    /// Nanoseconds from `now_ns` to the next deadline, if any connection
    /// waits (0 when one is already due).
    pub(super) fn next_due_in(&self, now_ns: u64) -> Option<u64> {
        let live = self
            .deadlines
            .iter()
            .find(|&&(_, slot, g)| self.slots[slot].as_ref().is_some_and(|w| w.generation == g))?;
        Some(live.0.saturating_sub(now_ns))
    }

    /// The balancer's address of the connection polled as `token`.
    pub(super) fn peer(&self, token: Token) -> Option<SocketAddr> {
        let slot = token.0.checked_sub(self.first)?;
        self.slots.get(slot)?.as_ref().map(|w| w.peer)
    }

    /// Ends `token`'s wait after a fault in its processing: its socket is
    /// deregistered and dropped (closed). Sound whatever the fault
    /// interrupted: a wait's bytes are its own (`buf`), the slot list and
    /// free list change only in `insert` and `remove`, each whole, and a
    /// deadline left behind is skipped by its generation.
    pub(super) fn discard(&mut self, registry: &Registry, token: Token) {
        if let Some(slot) = token.0.checked_sub(self.first) {
            drop(self.remove(registry, slot));
        }
    }

    fn remove(&mut self, registry: &Registry, slot: usize) -> Option<(TcpStream, SocketAddr)> {
        let mut w = self.slots.get_mut(slot)?.take()?;
        self.free.push(slot);
        let _ = registry.deregister(&mut w.stream);
        Some((w.stream, w.peer))
    }
}

#[cfg(test)]
#[path = "proxy_wait_tests.rs"]
mod tests;
