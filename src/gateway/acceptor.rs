//! The acceptor thread: accepts connections, applies connection-level
//! admission and hands each admitted socket to a shard ([`place`]: shard 0
//! up to `--shard0-fill` sessions, then the shard with the fewest; no fill
//! while shard 0 is busy, see [`super::spill`]).
//!
//! A connection over budget is accepted only to receive an immediate
//! Disconnect(busy) with a jittered retryAfterMs and is closed — it is
//! never held in a queue to time out. On a TLS listener the Disconnect
//! follows a handshake, within a budget ([`super::tls_refusal`]); this
//! thread drives those handshakes.
//!
//! With `--proxy-protocol` a connection from a trusted balancer first
//! waits here for its PROXY v2 header (`gateway::proxy_wait`); admission,
//! TLS and placement then run as above with the header's client address
//! in place of the balancer's. A connection from an untrusted peer, or
//! with a missing, malformed or late header, is closed and counted.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use mio::net::{TcpListener, TcpStream};

use crate::runtime::tls::{Link, RefusalOutcome, TlsAcceptor};
use crate::runtime::{Policy, Supervised};
use mio::{Events, Interest, Poll, Registry, Token, Waker};

use super::proxy_wait::{Ended, Outcome, ProxyWait};
use super::tls_refusal::{Refuser, FIRST_TOKEN};
use super::{GatewayStats, Shared};
use crate::admission::TokenBucket;
use crate::clock::monotonic_ns;
use crate::overload::Stage;
use crate::runtime::proxy::ProxyFailure;
use crate::wire::{self, DisconnectReason};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// The token of the first connection waiting for its PROXY header (the
/// waits take at most `--proxy-pending-max`, ≤ 65,536, tokens from here;
/// the TLS refusals' tokens start above them at [`FIRST_TOKEN`]).
const FIRST_WAITING: Token = Token(2);
const _: () = assert!(FIRST_WAITING.0 + 65_536 <= FIRST_TOKEN);
/// The acceptor's longest sleep (it re-checks the stop flag after it).
const IDLE_POLL: Duration = Duration::from_millis(500);
/// The acceptor's longest sleep while TLS refusals are open.
const REFUSAL_POLL: Duration = Duration::from_millis(50);

/// A shard's inbox for new connections.
#[derive(Clone)]
pub struct Handoff {
    /// Where the acceptor sends an accepted socket (plain or TLS) and its
    /// peer address.
    pub tx: Sender<(Link, SocketAddr)>,
    /// Wakes the shard's poll after a send.
    pub waker: Arc<Waker>,
    /// The shard's counters (its open sessions, for placement).
    pub stats: Arc<super::ShardStats>,
}

/// Which shard takes a new session, given each shard's sessions (open
/// plus handed over and not yet taken): shard 0 while it holds fewer than
/// `shard0_fill`, otherwise the one with the fewest, ties going to the
/// higher index (away from shard 0, which with shared threading also runs
/// the engine and the ingest listener). While shard 0 is busy
/// (`shard0_busy`: it is evening its sessions out with the others, see
/// [`super::spill`]) the fill does not apply.
pub fn place(loads: &[u64], shard0_fill: u64, shard0_busy: bool) -> usize {
    if loads.len() <= 1 || (loads[0] < shard0_fill && !shard0_busy) {
        return 0;
    }
    let mut best = loads.len() - 1;
    for k in (0..loads.len()).rev() {
        if loads[k] < loads[best] {
            best = k;
        }
    }
    best
}

/// Stops the acceptor thread.
pub struct AcceptorHandle {
    waker: Arc<Waker>,
    stop: Sender<()>,
    thread: Supervised<()>,
}

impl AcceptorHandle {
    /// The acceptor is about to be stopped (before `accepting` turns false,
    /// which ends its loop too).
    pub fn request_stop(&self) {
        self.thread.request_stop();
    }

    /// Closes the listener and joins the thread.
    pub fn stop(self) {
        self.thread.request_stop();
        let _ = self.stop.send(());
        let _ = self.waker.wake();
        let _ = self.thread.join();
    }
}

/// Binds and starts the acceptor.
pub fn spawn(
    shared: Arc<Shared>,
    shards: Vec<Handoff>,
) -> std::io::Result<(AcceptorHandle, SocketAddr)> {
    let mut listener = TcpListener::from_std(crate::runtime::listen::bind(shared.cfg.listen)?);
    let local = listener.local_addr()?;
    let poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    shared.tls_refusals.set_waker(waker.clone());
    let (stop_tx, stop_rx) = crossbeam_channel::bounded(1);
    let supervisor = shared.supervisor.clone();
    let thread = supervisor.spawn("pw-acceptor", Policy::Permanent, move || {
        let waiting = shared
            .cfg
            .proxy
            .as_ref()
            .map(|p| ProxyWait::new(p.pending_max, p.header_timeout_ns, FIRST_WAITING));
        let refuser = shared.cfg.tls.as_ref().map(|tls| {
            let per_s = shared.cfg.tls_busy_handshakes_per_s;
            Refuser::new(per_s, tls.stats().clone(), monotonic_ns())
        });
        let per_s = super::lag::LAG_ADMIT_PER_S.saturating_mul(shards.len().max(1) as u32);
        let lag_admit = TokenBucket::new(per_s, (per_s / 10).max(1), monotonic_ns());
        let mut a = Acceptor {
            shared,
            shards,
            lag_admit,
            loads: Vec::new(),
            rng: rand::SeedableRng::from_entropy(),
            waiting,
            ended: Vec::new(),
            refuser,
            admitting: None,
        };
        a.run(poll, listener, stop_rx);
    })?;
    Ok((
        AcceptorHandle {
            waker,
            stop: stop_tx,
            thread,
        },
        local,
    ))
}

struct Acceptor {
    shared: Arc<Shared>,
    shards: Vec<Handoff>,
    /// Connections admitted while every shard sheds for lag
    /// (`lag::LAG_ADMIT_PER_S` per shard): a herd comes in paced.
    lag_admit: TokenBucket,
    /// Scratch for [`place`] (sized once).
    loads: Vec<u64>,
    rng: rand::rngs::SmallRng,
    /// Connections waiting for their PROXY header (`--proxy-protocol`).
    waiting: Option<ProxyWait>,
    /// Scratch for the waits that expired in one sweep.
    ended: Vec<Ended>,
    /// Refusals over TLS in progress (a TLS listener only).
    refuser: Option<Refuser>,
    /// A connection admitted (its per-IP slot taken) and not yet handed
    /// to a shard or refused: a fault gives the slot back.
    admitting: Option<SocketAddr>,
}

impl Acceptor {
    fn run(
        &mut self,
        mut poll: Poll,
        listener: TcpListener,
        stop: crossbeam_channel::Receiver<()>,
    ) {
        let mut events = Events::with_capacity(64);
        loop {
            if poll.poll(&mut events, Some(self.poll_timeout())).is_err() {
                continue;
            }
            if stop.try_recv().is_ok() || !self.shared.accepting.load(Ordering::SeqCst) {
                break;
            }
            // At most every IDLE_POLL, and per readiness: a cold path.
            crate::runtime::drill::point("acceptor", 0);
            let r = poll.registry();
            for e in events.iter() {
                match e.token().0 {
                    t if t >= FIRST_TOKEN => self.on_refusal(r, e.token()),
                    t if t >= FIRST_WAITING.0 => self.on_waiting(r, e.token()),
                    _ => {}
                }
            }
            self.accept_all(&listener, r);
            self.expire_waiting(r);
            self.drain_refusals(r);
        }
        drop(listener);
        tracing::info!("listener closed: no longer accepting");
    }

    /// Drains the accept queue until `WouldBlock` (mio's contract).
    fn accept_all(&mut self, listener: &TcpListener, registry: &Registry) {
        loop {
            match listener.accept() {
                Ok((stream, peer)) if self.waiting.is_some() => {
                    self.contained(peer, |a| a.await_header(registry, stream, peer));
                }
                Ok((stream, peer)) => {
                    self.contained(peer, |a| a.admit(stream, peer, registry));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    // EMFILE and friends: log and leave the rest in the
                    // kernel queue for the next readiness.
                    tracing::warn!(error = %e, "accept failed");
                    return;
                }
            }
        }
    }

    fn admit(&mut self, stream: TcpStream, peer: SocketAddr, r: &Registry) {
        let stats = &self.shared.stats;
        GatewayStats::add(&stats.accepted, 1);
        let _ = stream.set_nodelay(true);
        if GatewayStats::get(&stats.open) >= self.shared.connections_fd_max {
            // At the descriptor limit less the reserve (`fdlimit.rs`).
            GatewayStats::add(&stats.refused_fd, 1);
            let retry = self
                .shared
                .cfg
                .admission
                .retry_after
                .draw(&mut rand::thread_rng());
            return match &self.shared.cfg.tls {
                None => refuse_busy(Link::Plain(stream), retry, &self.shared),
                Some(tls) => self.refuse_tls(tls.clone(), stream, retry, r),
            };
        }
        if self.shared.cfg.sndbuf_bytes > 0 {
            let _ = crate::runtime::sys::set_send_buffer(&stream, self.shared.cfg.sndbuf_bytes);
        }
        let decision = self
            .shared
            .admission
            .lock()
            .expect("admission lock")
            .on_accept(peer.ip(), monotonic_ns());
        if let Err(reject) = decision {
            return match &self.shared.cfg.tls {
                None => refuse_busy(Link::Plain(stream), reject.retry_after_ms, &self.shared),
                Some(tls) => self.refuse_tls(tls.clone(), stream, reject.retry_after_ms, r),
            };
        }
        // Until the hand-over (or its release) a fault must give the slot back.
        self.admitting = Some(peer);
        let link = match &self.shared.cfg.tls {
            None => Link::Plain(stream),
            Some(tls) => match tls.link(stream, monotonic_ns()) {
                Ok(mut l) => {
                    l.set_client(peer);
                    l
                }
                Err(e) => {
                    tracing::warn!(error = %e, "TLS session could not be set up");
                    self.admitting = None;
                    self.release(peer);
                    return;
                }
            },
        };
        self.hand_over(link, peer, r);
    }

    /// Places an admitted connection on a shard (or refuses it there).
    fn hand_over(&mut self, link: Link, peer: SocketAddr, r: &Registry) {
        self.loads.clear();
        for h in &self.shards {
            // A shard that sheds for lag takes no new session while
            // another does not (see `lag.rs`); one that lags because the
            // host starves it refuses nobody.
            let shedding = h.stats.lag.is_shedding();
            let load = h.stats.connections.get() + h.tx.len() as u64;
            self.loads.push(if shedding { u64::MAX } else { load });
        }
        let spill = super::spill::SpillPolicy {
            threshold_permille: self.shared.cfg.shard0_spill_permille,
        };
        let busy = spill.is_busy(self.shards[0].stats.busy_permille.get() as u32);
        let shard = &self.shards[place(&self.loads, self.shared.cfg.shard0_fill, busy)];
        if shard.stats.lag.is_shedding() && !self.lag_admit.try_take(monotonic_ns()) {
            // Every shard sheds, and this second's paced admissions are
            // spent: Disconnect(busy), counted at `loop_lag`.
            shard
                .stats
                .lag
                .refused_connections
                .fetch_add(1, Ordering::Relaxed);
            self.shared.overload.record_reject(Stage::LoopLag);
            return self.refuse_jittered(link, peer, r);
        }
        match shard.tx.try_send((link, peer)) {
            Ok(()) => {
                // The shard owns the slot now.
                self.admitting = None;
                let _ = shard.waker.wake();
            }
            Err(e) => {
                // The shard's inbox is full: it is not keeping up with
                // accepts. Refuse rather than queue.
                let (stream, peer) = e.into_inner();
                self.refuse_jittered(stream, peer, r);
            }
        }
    }

    /// Releases `peer`'s admission slot and sends Disconnect(busy) with a
    /// retry-after drawn from the busy window.
    fn refuse_jittered(&mut self, stream: Link, peer: SocketAddr, r: &Registry) {
        self.admitting = None;
        self.release(peer);
        // Jittered, or every refused client would return together.
        let w = self.shared.cfg.admission.retry_after;
        let retry = rand::Rng::gen_range(&mut self.rng, w.min_ms..=w.max_ms);
        match self.refuser.as_mut() {
            Some(refuser) if stream.is_handshaking() => {
                GatewayStats::add(&self.shared.stats.refused, 1);
                refuser.take(r, stream, retry, monotonic_ns());
            }
            _ => refuse_busy(stream, retry, &self.shared),
        }
    }

    /// A connection refused at admission on a TLS listener: a TLS session
    /// for it only within the refusal budget (see [`super::tls_refusal`]).
    fn refuse_tls(&mut self, tls: Arc<TlsAcceptor>, s: TcpStream, retry: u32, r: &Registry) {
        GatewayStats::add(&self.shared.stats.refused, 1);
        let Some(refuser) = self.refuser.as_mut() else {
            return;
        };
        match tls.link(s, monotonic_ns()) {
            Ok(link) => refuser.take(r, link, retry, monotonic_ns()),
            Err(_) => tls.stats().count_refusal(RefusalOutcome::Bare),
        }
    }
}

/// The PROXY header stage (`--proxy-protocol`).
impl Acceptor {
    /// Until the next header deadline, at most [`IDLE_POLL`]; at most
    /// [`REFUSAL_POLL`] while TLS refusals are open, so they expire on time.
    fn poll_timeout(&self) -> Duration {
        let due = self
            .waiting
            .as_ref()
            .and_then(|w| w.next_due_in(monotonic_ns()));
        let refusing = self.refuser.as_ref().is_some_and(Refuser::is_busy);
        let idle = if refusing { REFUSAL_POLL } else { IDLE_POLL };
        due.map_or(idle, |ns| idle.min(Duration::from_nanos(ns)))
    }

    /// A trusted balancer's connection starts waiting for its header;
    /// anyone else's is refused.
    fn await_header(&mut self, registry: &Registry, stream: TcpStream, peer: SocketAddr) {
        let (Some(proxy), Some(waiting)) = (&self.shared.cfg.proxy, self.waiting.as_mut()) else {
            return self.admit(stream, peer, registry);
        };
        if !proxy.allow.allows(peer.ip()) {
            return self.proxy_failed(stream, peer, ProxyFailure::Untrusted);
        }
        if let Err((stream, why)) = waiting.insert(registry, stream, peer, monotonic_ns()) {
            self.proxy_failed(stream, peer, why);
        }
    }

    /// Reads a waiting connection's header; a fault discards its wait.
    fn on_waiting(&mut self, registry: &Registry, token: Token) {
        let Some(peer) = self.waiting.as_ref().and_then(|w| w.peer(token)) else {
            return;
        };
        let faulted = self.contained(peer, |a| {
            let w = a.waiting.as_mut();
            if let Some(ended) = w.and_then(|w| w.on_ready(registry, token)) {
                a.header_ended(registry, ended);
            }
        });
        if let (true, Some(w)) = (faulted, self.waiting.as_mut()) {
            w.discard(registry, token);
        }
    }

    fn expire_waiting(&mut self, registry: &Registry) {
        let Some(w) = self.waiting.as_mut() else {
            return;
        };
        let mut ended = std::mem::take(&mut self.ended);
        w.expire(registry, monotonic_ns(), |e| ended.push(e));
        for e in ended.drain(..) {
            let peer = e.1;
            let _ = self.contained(peer, |a| a.header_ended(registry, e));
        }
        self.ended = ended;
    }

    /// A complete header admits the connection as its client; a failed
    /// one closes it.
    fn header_ended(
        &mut self,
        registry: &Registry,
        (stream, peer, outcome): (TcpStream, SocketAddr, Outcome),
    ) {
        let Some(proxy) = self.shared.cfg.proxy.clone() else {
            return;
        };
        match outcome {
            Outcome::Done(h) => {
                proxy.stats.count_header(h.command);
                let client = h.client(peer);
                if crate::runtime::drill::connection_armed()
                    && client.port() == crate::runtime::drill::DRILL_PROXY_PORT
                {
                    panic!("drill: planted panic in a connection's PROXY header");
                }
                tracing::debug!(balancer = %peer, %client, command = h.command.label(),
                    "PROXY header");
                self.admit(stream, client, registry);
            }
            Outcome::Failed(why) => self.proxy_failed(stream, peer, why),
            Outcome::Wait => {}
        }
    }

    /// Counts and logs a refused header (the log thinned to the first 16
    /// of each reason, then every power of two) and closes the socket; a
    /// plaintext listener tells a connection refused for
    /// [`ProxyFailure::Overflow`] to come back (Disconnect(busy)).
    fn proxy_failed(&mut self, stream: TcpStream, peer: SocketAddr, why: ProxyFailure) {
        let Some(proxy) = &self.shared.cfg.proxy else {
            return;
        };
        let n = proxy.stats.count_failure(why);
        if n <= 16 || n.is_power_of_two() {
            tracing::warn!(%peer, reason = why.label(), count = n, "connection refused: {}",
                why.describe());
        }
        if why == ProxyFailure::Overflow && self.shared.cfg.tls.is_none() {
            let w = self.shared.cfg.admission.retry_after;
            let retry = rand::Rng::gen_range(&mut self.rng, w.min_ms..=w.max_ms);
            refuse_busy(Link::Plain(stream), retry, &self.shared);
        }
    }
}

/// The unwind boundary of the acceptor's work on one connection
/// (docs/design.md, "Fault isolation"). What a fault leaves behind:
/// that connection's socket, dropped while unwinding (closed); its PROXY
/// wait or refusal slot, discarded by the caller ([`ProxyWait::discard`],
/// [`Refuser`]); the per-IP admission slot it took, given back
/// (`admitting`). Nothing shared is half-updated by it: the shard inbox
/// and the refusal queue are channels (a send is whole or not made), and
/// admission is one `Mutex` whose every update happens under the lock — a
/// panic inside it poisons the lock, and then the fault is not contained:
/// the acceptor dies and the supervisor takes the process down.
impl Acceptor {
    /// Runs `f` for `peer`'s connection; true when it faulted (counted,
    /// logged thinned, the admission slot given back).
    fn contained(&mut self, peer: SocketAddr, f: impl FnOnce(&mut Self)) -> bool {
        let Err(fault) = crate::runtime::contain::contain(|| f(self)) else {
            return false;
        };
        if self.shared.admission.is_poisoned() {
            panic!("a connection's fault left the admission table poisoned: {fault}");
        }
        // Counted before the connection is let go (see `discard_faulted`).
        GatewayStats::add(&self.shared.stats.faults_acceptor, 1);
        if let Some(p) = self.admitting.take() {
            self.release(p);
        }
        ACCEPTOR_FAULTS.report("acceptor", &peer, &fault);
        true
    }

    /// A refusal's readiness, contained like every connection's work.
    fn on_refusal(&mut self, r: &Registry, token: Token) {
        let Some(peer) = self.refuser.as_ref().and_then(|f| f.peer(token)) else {
            return;
        };
        let faulted = self.contained(peer, |a| {
            if let Some(refuser) = a.refuser.as_mut() {
                refuser.on_event(r, token);
            }
        });
        if let (true, Some(refuser)) = (faulted, self.refuser.as_mut()) {
            refuser.discard_faulted(r);
        }
    }

    /// Takes the links shards refused and closes refusals past their
    /// deadline; a fault in one refusal's handshake discards it alone.
    fn drain_refusals(&mut self, r: &Registry) {
        let Some(refuser) = self.refuser.as_mut() else {
            return;
        };
        let now = monotonic_ns();
        while let Some((link, retry)) = self.shared.tls_refusals.try_take() {
            let peer = link.socket().peer_addr().unwrap_or(UNKNOWN_PEER);
            let taken = crate::runtime::contain::contain(|| refuser.take(r, link, retry, now));
            if let Err(fault) = taken {
                GatewayStats::add(&self.shared.stats.faults_acceptor, 1);
                refuser.discard_faulted(r);
                ACCEPTOR_FAULTS.report("acceptor", &peer, &fault);
            }
        }
        refuser.expire(r, now);
    }
}

/// Shown for a peer whose address the socket no longer knows.
const UNKNOWN_PEER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// The acceptor's thinned fault log.
static ACCEPTOR_FAULTS: crate::runtime::contain::FaultLog =
    crate::runtime::contain::FaultLog::new();

impl Acceptor {
    /// Gives back the per-IP slot admission took for `peer`.
    fn release(&self, peer: SocketAddr) {
        self.shared
            .admission
            .lock()
            .expect("admission lock")
            .on_close(peer.ip());
    }
}

/// Writes Disconnect(busy, retryAfterMs) on a fresh socket and closes it;
/// a TLS link still handshaking goes to the acceptor, which refuses it
/// within its handshake budget ([`super::tls_refusal`]).
pub fn refuse_busy(mut stream: Link, retry_after_ms: u32, shared: &Shared) {
    GatewayStats::add(&shared.stats.refused, 1);
    if let (Link::Tls(_), Some(tls)) = (&stream, &shared.cfg.tls) {
        if stream.is_handshaking() {
            return shared
                .tls_refusals
                .send(stream, retry_after_ms, tls.stats());
        }
    }
    let mut buf = [0u8; 64];
    if let Ok(n) =
        wire::encode_disconnect_reason(&mut buf, DisconnectReason::BUSY, retry_after_ms, "busy")
    {
        // A fresh socket's send buffer is empty: this write completes.
        stream.write_last(&buf[..n]);
    }
}

#[cfg(test)]
mod place_tests {
    use super::place;

    #[test]
    fn shard_zero_fills_first_then_the_least_loaded_takes_the_session() {
        assert_eq!(place(&[0], 16, false), 0);
        assert_eq!(place(&[500], 16, false), 0, "one shard takes everything");
        assert_eq!(place(&[0, 0], 16, false), 0);
        assert_eq!(place(&[15, 0], 16, false), 0);
        assert_eq!(place(&[16, 0], 16, false), 1, "full: spill");
        assert_eq!(place(&[16, 9, 3], 16, false), 2);
        assert_eq!(place(&[16, 16], 16, false), 1, "ties go away from shard 0");
        assert_eq!(place(&[16, 17], 16, false), 0, "shard 0 is least loaded");
    }

    #[test]
    fn a_busy_shard_zero_gets_sessions_only_as_the_least_loaded() {
        assert_eq!(place(&[0, 0], 16, true), 1, "the fill does not apply");
        assert_eq!(place(&[5, 9, 3], 16, true), 2);
        assert_eq!(place(&[2, 9, 9], 16, true), 0, "the fewest");
        assert_eq!(place(&[7], 16, true), 0, "a lone shard takes everything");
    }

    #[test]
    fn without_a_fill_sessions_spread_evenly() {
        let mut loads = [0u64; 3];
        for _ in 0..300 {
            let k = place(&loads, 0, false);
            loads[k] += 1;
        }
        assert_eq!(loads, [100, 100, 100]);
        // A shard that lost sessions is refilled first.
        loads[1] -= 40;
        for _ in 0..40 {
            let k = place(&loads, 0, false);
            assert_eq!(k, 1);
            loads[k] += 1;
        }
    }
}
