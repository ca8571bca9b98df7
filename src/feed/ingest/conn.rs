//! The listener's event loop: accepting bridges, reading and splitting
//! their frames, writing replies, closing.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Events, Interest, Token};

use super::frames::{
    handle, logon_decided, provider_key, push_disconnect, push_reject, reply, Ctx, Peer, Readable,
    FEED_RETRY_AFTER_MS,
};
use super::keepalive::{Due, Keepalive, CHECK_EVERY_NS};
use super::{Bridge, Ingest, IN_BYTES, LISTENER, OUT_BYTES, READ_ROOM, WAKER};
use crate::auth::verifier::{Claim, Job, Outcome};
use crate::runtime::tls::Link;
use crate::runtime::WaitStrategy;
use crate::wire::{self, DisconnectReason, LogonRejectReason};

/// Readiness events taken per poll.
const EVENTS_CAPACITY: usize = 256;

/// The listener's thinned fault log.
static INGEST_FAULTS: crate::runtime::contain::FaultLog = crate::runtime::contain::FaultLog::new();

impl Ingest {
    pub(super) fn run(&mut self) {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let timeout = match self.cfg.wait {
            WaitStrategy::Spin => Duration::ZERO,
            _ => Duration::from_nanos(CHECK_EVERY_NS),
        };
        let Some(mut poll) = self.poll.take() else {
            return;
        };
        while !self.stop.load(Ordering::Relaxed) {
            if poll.poll(&mut events, Some(timeout)).is_err() {
                continue;
            }
            for e in events.iter() {
                self.on_token(e.token().0, e.is_read_closed() || e.is_error());
            }
            self.drain_verdicts();
            self.check_timers();
            self.mark_progress(crate::clock::monotonic_ns());
        }
    }

    /// When the bridges' timers are next due, if any bridge is connected.
    pub(super) fn next_timer_ns(&self) -> Option<u64> {
        self.bridges
            .iter()
            .any(Option::is_some)
            .then_some(self.next_check_ns)
    }

    /// Every [`CHECK_EVERY_NS`]: heartbeats bridges the listener sent
    /// nothing to for an interval, drops those silent for
    /// [`IDLE_INTERVALS`](super::keepalive::IDLE_INTERVALS). Returns the
    /// bridges acted on.
    pub(super) fn check_timers(&mut self) -> usize {
        let now = self.clock.now_ns();
        if now < self.next_check_ns {
            return 0;
        }
        self.next_check_ns = now + CHECK_EVERY_NS;
        crate::runtime::drill::point("ingest", 0);
        let mut n = 0;
        for i in 0..self.bridges.len() {
            if self.bridges[i].is_some() {
                self.contained(i, |s| n += s.bridge_timers(i, now));
            }
        }
        n
    }

    /// Bridge `i`'s heartbeat, dead-peer and handshake timers; 1 if acted on.
    fn bridge_timers(&mut self, i: usize, now: u64) -> usize {
        let Some(b) = self.bridges[i].as_mut() else {
            return 0;
        };
        if b.closing || b.logon_ticket != 0 {
            // Closing, or its logon is with the verifier (no
            // Heartbeat may come before LogonAccepted).
            return 0;
        }
        if b.stream.handshake_expired(now) {
            // Counted by the link; no TLS session, nothing to say.
            self.close(i);
            return 0;
        }
        match b.keep.due(now) {
            Due::Nothing => return 0,
            Due::Heartbeat => reply(&mut b.out, wire::encode_heartbeat),
            Due::Drop => {
                let text = if b.provider.is_some() {
                    "idle"
                } else {
                    "no ProviderLogon"
                };
                push_disconnect(&mut b.out, DisconnectReason::IDLE_TIMEOUT, text);
                b.closing = true;
                self.stats.idle_disconnects.fetch_add(1, Ordering::Relaxed);
            }
        }
        b.keep.sent(now);
        self.flush(i);
        1
    }

    /// Reads the bridges held back by a full ring, once it has room.
    /// Returns how many were resumed.
    pub(super) fn resume_held(&mut self) -> usize {
        let mut n = 0;
        while self.port.room() >= READ_ROOM {
            let Some(i) = self.held.pop_front() else {
                break;
            };
            self.on_ready(i, false);
            n += 1;
        }
        n
    }

    /// Handles one readiness event (token relative to `token_base`);
    /// `closed`: the peer closed or the socket has an error.
    pub(super) fn on_token(&mut self, token: usize, closed: bool) {
        match Token(token) {
            LISTENER => self.accept_all(),
            WAKER => {}
            Token(t) => self.on_ready(t - 2, !closed),
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    let faulted = crate::runtime::contain::contain(|| self.add(stream));
                    if let Err(fault) = faulted {
                        self.stats.faults.fetch_add(1, Ordering::Relaxed);
                        INGEST_FAULTS.report("ingest", &peer, &fault);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!(error = %e, "ingest accept failed");
                    return;
                }
            }
        }
    }

    fn add(&mut self, stream: TcpStream) {
        let Some(i) = self.bridges.iter().position(Option::is_none) else {
            return; // at capacity: dropping the stream closes it
        };
        let _ = stream.set_nodelay(true);
        let mut stream = match &self.cfg.tls {
            None => Link::Plain(stream),
            Some(tls) => match tls.link(stream, self.clock.now_ns()) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "ingest TLS session could not be set up");
                    return;
                }
            },
        };
        let token = Token(self.token_base + i + 2);
        if self
            .registry
            .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
            .is_err()
        {
            return;
        }
        self.stats.connections.fetch_add(1, Ordering::Relaxed);
        let ip = stream
            .socket()
            .peer_addr()
            .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |a| a.ip());
        self.bridges[i] = Some(Bridge {
            ip,
            logon_ticket: 0,
            stream,
            provider: None,
            inbuf: vec![0u8; IN_BYTES].into_boxed_slice(),
            in_len: 0,
            out: Vec::with_capacity(OUT_BYTES),
            closing: false,
            keep: Keepalive::new(self.clock.now_ns()),
            active: false,
        });
    }

    /// Reads bridge `i` (see `read_bridge`) inside its connection's
    /// boundary.
    pub(super) fn on_ready(&mut self, i: usize, short_drains: bool) {
        self.contained(i, |s| s.read_bridge(i, short_drains));
    }

    /// Reads bridge `i` until the socket is drained. With `short_drains`, a
    /// read that returns less than asked means drained (a later arrival
    /// raises a new edge), which saves the `EAGAIN` read — one syscall per
    /// quote batch at low rates (nginx's `ngx_unix_recv` does the same).
    /// Without it (the peer closed, or resuming a held bridge) it reads
    /// until `WouldBlock` or the end.
    fn read_bridge(&mut self, i: usize, short_drains: bool) {
        if i >= self.bridges.len() {
            return;
        }
        loop {
            if self.hold_when_full && self.port.room() < READ_ROOM {
                if !self.held.contains(&i) {
                    self.held.push_back(i);
                }
                break;
            }
            let Some(b) = self.bridges[i].as_mut() else {
                return;
            };
            if b.logon_ticket != 0 {
                break; // read on once the verdict is in
            }
            let asked = b.inbuf.len() - b.in_len;
            let drains = short_drains && b.stream.short_read_drains();
            let r = b.stream.read(&mut b.inbuf[b.in_len..]);
            let short = match r {
                Ok(0) => return self.close(i),
                Ok(n) => {
                    b.in_len += n;
                    b.active = true;
                    b.keep.received(self.clock.now_ns());
                    n < asked
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    b.active = b.keep.streaming(self.clock.now_ns());
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return self.close(i),
            };
            self.frames(i);
            if short && drains {
                break;
            }
        }
        self.flush(i);
    }

    fn frames(&mut self, i: usize) {
        let mut off = 0;
        let mut verify = None;
        loop {
            let Some(b) = self.bridges[i].as_mut() else {
                return;
            };
            if b.closing {
                b.in_len = 0;
                return;
            }
            if b.logon_ticket != 0 || verify.is_some() {
                break; // later frames wait for the logon's verdict
            }
            match wire::split(&b.inbuf[off..b.in_len]) {
                Ok(None) => break,
                Ok(Some(len)) => {
                    let frame = &b.inbuf[off..off + len];
                    off += len;
                    let peer = Peer {
                        provider: &mut b.provider,
                        keep: &mut b.keep,
                        out: &mut b.out,
                        ip: b.ip,
                    };
                    let mut cx = Ctx {
                        auth: &self.auth,
                        verify: &mut verify,
                        table: &self.table,
                        cfg: &self.cfg,
                        port: &mut self.port,
                        batch: &mut self.batch,
                        stats: &self.stats,
                        held: &mut self.held_providers,
                        now_ns: self.clock.now_ns(),
                    };
                    let close = handle(frame, peer, &mut cx);
                    // A bridge that never reads its replies (or an
                    // unauthenticated flood) cannot grow our buffer.
                    if close || b.out.len() > OUT_BYTES {
                        b.closing = true;
                    }
                }
                Err(e) => {
                    // The framing is lost: nothing more of the frame is readable.
                    push_reject(&mut b.out, Readable::default(), e.reason(), "bad framing");
                    let text = "bad framing";
                    push_disconnect(&mut b.out, DisconnectReason::PROTOCOL_ERROR, text);
                    self.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
                    b.closing = true;
                    b.in_len = 0;
                    return;
                }
            }
        }
        if let Some(b) = self.bridges[i].as_mut() {
            b.inbuf.copy_within(off..b.in_len, 0);
            b.in_len -= off;
        }
        if let Some((provider, token)) = verify {
            self.submit_verify(i, provider, token);
        }
        self.port.notify();
    }

    /// Hands a ProviderLogon's token to the verifier thread; a full queue
    /// is LogonRejected(busy).
    fn submit_verify(&mut self, i: usize, provider: u16, token: Vec<u8>) {
        let Some(b) = self.bridges[i].as_mut() else {
            return;
        };
        let id = usize::from(provider);
        let stored = self.table.providers()[id].token.clone();
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        let (auth, tx, ip) = (self.auth.clone(), self.verdicts.0.clone(), b.ip);
        let key = stored.clone();
        let claim = Claim {
            guard: auth.clone(),
            ip,
            account: provider.to_le_bytes().to_vec(),
        };
        let done = move |o: Outcome, token: &[u8]| {
            let verdict = match o {
                Outcome::Cached => Ok(()),
                Outcome::Verified {
                    matched,
                    reservation,
                    now_ns,
                } => {
                    match reservation {
                        Some(r) if matched => r.matched(&provider_key(id), &key, token, now_ns),
                        Some(r) => r.failed(true, now_ns),
                        None => {}
                    }
                    if matched {
                        Ok(())
                    } else {
                        Err((LogonRejectReason::AUTH, FEED_RETRY_AFTER_MS))
                    }
                }
                Outcome::Refused { retry_after_ms } => {
                    Err((LogonRejectReason::RATE_LIMITED, retry_after_ms))
                }
                Outcome::Busy => {
                    auth.stats.failed(crate::auth::FailReason::VerifierBusy);
                    Err((LogonRejectReason::BUSY, FEED_RETRY_AFTER_MS))
                }
            };
            let _ = tx.send((i, ticket, provider, verdict));
        };
        let job = Job {
            stored,
            token,
            cached: None,
            deadline_ns: 0,
            key: u64::from(provider),
            claim: Some(claim),
            done: Box::new(done),
        };
        if self.verifier.submit(job).is_err() {
            self.stats.logons_rejected.fetch_add(1, Ordering::Relaxed);
            self.auth
                .stats
                .failed(crate::auth::FailReason::VerifierBusy);
            let m = wire::LogonRejected {
                reason: wire::LogonRejectReason::BUSY,
                retry_after_ms: FEED_RETRY_AFTER_MS,
            };
            reply(&mut b.out, |buf| wire::encode_logon_rejected(buf, &m));
            b.closing = true;
        } else {
            b.logon_ticket = ticket;
        }
    }

    /// Finishes the ProviderLogons the verifier has judged, then reads on
    /// the frames their bridges sent meanwhile. Returns how many.
    pub(super) fn drain_verdicts(&mut self) -> usize {
        let mut n = 0;
        while let Ok((i, ticket, provider, verdict)) = self.verdicts.1.try_recv() {
            let Some(b) = self.bridges.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            if b.logon_ticket != ticket || b.closing {
                continue; // closed (and the slot maybe reused) meanwhile
            }
            b.logon_ticket = 0;
            n += 1;
            self.contained(i, |s| s.logon_verdict(i, provider, verdict));
        }
        n
    }

    /// Bridge `i`'s ProviderLogon verdict, then the frames it sent meanwhile.
    fn logon_verdict(&mut self, i: usize, provider: u16, verdict: super::frames::TokenVerdict) {
        let Some(b) = self.bridges.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        {
            let mut verify = None;
            let peer = Peer {
                provider: &mut b.provider,
                keep: &mut b.keep,
                out: &mut b.out,
                ip: b.ip,
            };
            let mut cx = Ctx {
                auth: &self.auth,
                verify: &mut verify,
                table: &self.table,
                cfg: &self.cfg,
                port: &mut self.port,
                batch: &mut self.batch,
                stats: &self.stats,
                held: &mut self.held_providers,
                now_ns: self.clock.now_ns(),
            };
            if logon_decided(provider, verdict, peer, &mut cx) {
                b.closing = true;
            }
        }
        self.frames(i);
        self.read_bridge(i, false);
    }

    fn flush(&mut self, i: usize) {
        let Some(b) = self.bridges[i].as_mut() else {
            return;
        };
        // Encrypted bytes the socket did not take last time go first.
        if b.stream.flush_pending().is_err() {
            return self.close(i);
        }
        while !b.out.is_empty() {
            match b.stream.write(&b.out) {
                Ok(0) => break,
                Ok(n) => {
                    b.out.drain(..n);
                    b.keep.sent(self.clock.now_ns());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return self.close(i),
            }
        }
        let close = b.closing && b.out.is_empty() && !b.stream.has_pending();
        // A bridge that never reads its acks cannot grow our buffer.
        let overflow = b.out.len() > OUT_BYTES;
        if close || overflow {
            self.close(i);
        }
    }

    /// Runs `f`, bridge `i`'s work, inside that connection's unwind
    /// boundary (docs/design.md, "Fault isolation"). After a fault the
    /// bridge is closed and its state dropped: its buffers, its provider
    /// id (released: the logon sets the bridge's id before it marks the
    /// id held, so no fault leaves one held by nobody), a read held for
    /// ring room, a logon at the verifier (whose verdict, by ticket, then
    /// matches nothing). The quotes it had pushed are whole ticks in the
    /// engine's ring (a push is whole or not made) and the scratch batch
    /// is cleared. The lockout tables are the one shared structure behind
    /// a lock: a fault that poisoned one is not contained.
    fn contained(&mut self, i: usize, f: impl FnOnce(&mut Self)) {
        let Err(fault) = crate::runtime::contain::contain(|| f(self)) else {
            return;
        };
        if self.auth.is_poisoned() {
            panic!("a bridge's fault left the provider lockout tables poisoned: {fault}");
        }
        let peer = self.bridges.get(i).and_then(Option::as_ref).map(|b| b.ip);
        // Counted before the close: a peer that sees its connection end
        // finds the fault on /metrics.
        self.stats.faults.fetch_add(1, Ordering::Relaxed);
        self.batch.clear();
        self.held.retain(|&h| h != i);
        self.close(i);
        self.port.notify();
        let shown = peer.map_or_else(|| "unknown".to_string(), |ip| ip.to_string());
        INGEST_FAULTS.report("ingest", &shown, &fault);
    }

    fn close(&mut self, i: usize) {
        if let Some(mut b) = self.bridges[i].take() {
            let _ = self.registry.deregister(&mut b.stream);
            if let Some(held) = b
                .provider
                .and_then(|p| self.held_providers.get_mut(usize::from(p)))
            {
                *held = false;
            }
            self.stats.connections.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
