//! Provider ingest: a TCP listener (`--feed-listen`) where bridges push
//! quotes into the pipeline over the same SOFH + SBE framing as the
//! subscriber protocol: ProviderLogon(provider id, token) →
//! LogonAccepted / LogonRejected, then batched ProviderQuote messages.
//!
//! One thread runs a mio loop over every bridge connection and pushes the
//! decoded ticks into its own engine ring ([`FeedPort`]): the engine sees
//! the ingest listener as one more feed. With `--threading shared` the
//! same loop is a task of gateway shard 0's thread ([`hosted`]). Buffers are allocated per
//! connection at accept; decoding a quote batch allocates nothing. A bad
//! frame gets a Reject with its reason; broken framing also closes the
//! connection; other bridges are unaffected.

mod conn;
mod frames;
mod hosted;
pub mod keepalive;
pub mod quotes;

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use mio::net::TcpListener;
use mio::{Interest, Poll, Registry, Token, Waker};

use crate::clock::{Clock, MonotonicClock};
use crate::model::{InstrumentTable, Tick};
use crate::runtime::hosting::{drop_signal, Dropped, HOSTED_STOP_TIMEOUT};
use crate::runtime::{
    Doorbell, FeedPort, HostedTask, Policy, Supervised, Supervisor, WaitStrategy,
};
use crate::wire;
use hosted::HostedIngest;

/// Default token accepted from bridges for providers that have none of
/// their own in the config (the built-in synthetic providers).
pub const INGEST_TOKEN_DEFAULT: &str = "demo-feed";
/// Most bridge connections at once.
pub(crate) const BRIDGES_MAX: usize = 64;
/// Per-connection inbound buffer (also the largest accepted frame).
const IN_BYTES: usize = wire::FRAME_LEN_MAX;
/// Per-connection outbound buffer (acks and rejects only).
const OUT_BYTES: usize = 16 * 1024;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

/// Counters of the ingest listener.
#[derive(Debug, Default)]
pub struct IngestStats {
    /// Bridge connections open now.
    pub connections: AtomicU64,
    /// ProviderLogons accepted.
    pub logons_accepted: AtomicU64,
    /// ProviderLogons refused (bad token, unknown provider, or the id is
    /// already held).
    pub logons_rejected: AtomicU64,
    /// Quote entries accepted and pushed to the engine ring.
    pub quotes: AtomicU64,
    /// Frames refused: undecodable, bad framing, or the wrong message.
    pub frames_rejected: AtomicU64,
    /// ProviderLogons refused because another session holds the provider id.
    pub logons_duplicate: AtomicU64,
    /// Quote entries refused as [`quotes::Refusal::OneSided`].
    pub quotes_one_sided: AtomicU64,
    /// Quote entries refused as [`quotes::Refusal::Crossed`].
    pub quotes_crossed: AtomicU64,
    /// Quote entries refused as [`quotes::Refusal::OutOfRange`].
    pub quotes_out_of_range: AtomicU64,
    /// Batches with refused entries not answered (the per-second Reject limit).
    pub quote_rejects_unsent: AtomicU64,
    /// Bridges dropped with `Disconnect(idle_timeout)`.
    pub idle_disconnects: AtomicU64,
    /// Bridges closed because their processing panicked (contained).
    pub faults: AtomicU64,
}

impl IngestStats {
    /// The counter of one kind of refused quote entry.
    pub fn refused(&self, why: quotes::Refusal) -> &AtomicU64 {
        match why {
            quotes::Refusal::OneSided => &self.quotes_one_sided,
            quotes::Refusal::Crossed => &self.quotes_crossed,
            quotes::Refusal::OutOfRange => &self.quotes_out_of_range,
        }
    }
}

/// Settings of the ingest listener.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Address the provider listener binds.
    pub listen: SocketAddr,
    /// Token for providers without their own (see [`INGEST_TOKEN_DEFAULT`]).
    pub default_token: String,
    /// How the listener's thread waits when idle.
    pub wait: WaitStrategy,
    /// Placement of the listener's own thread (a feed stage: `--cpus
    /// feed=N`, `--rt-priority`). Unused when hosted by shard 0, which is
    /// placed as a shard.
    pub cpus: crate::runtime::CpuMap,
    /// TLS on the listener (`--tls-cert`, `--tls-key`, and with
    /// `--feed-tls-client-ca` a client certificate required); `None` is
    /// plaintext.
    pub tls: Option<Arc<crate::runtime::tls::TlsAcceptor>>,
    /// The provider logon's address lockout and verifier queue
    /// (`--lockout-*`, `--feed-verifier-queue`); one verifier thread.
    pub auth: crate::auth::AuthLimits,
}

struct Bridge {
    stream: crate::runtime::tls::Link,
    /// The peer's address, for the logon's brute-force limits.
    ip: std::net::IpAddr,
    /// Non-zero while its ProviderLogon is with the verifier: the ticket
    /// the verdict must carry. Its later frames wait unread meanwhile.
    logon_ticket: u64,
    provider: Option<u16>,
    inbuf: Box<[u8]>,
    in_len: usize,
    out: Vec<u8>,
    closing: bool,
    /// Heartbeat, dead-peer and Reject-limit timers.
    keep: keepalive::Keepalive,
    /// The last read returned data, or the bridge is streaming (a quote
    /// batch arrived within the last heartbeat interval,
    /// `Keepalive::streaming`): [`HostedTask::between`] reads it again
    /// without waiting for the poller; other bridges cost nothing there.
    /// Not only "the last read returned data": a feed that sends in
    /// bursts is often empty at one `between` and full at the next, and
    /// left to the poller it waited for the host's whole loop turn (with
    /// 5,000 subscribers per shard, 120–280 ms; issue #28).
    active: bool,
}

/// A running ingest listener.
pub struct IngestHandle {
    /// The address actually bound (port 0 resolved).
    pub local_addr: SocketAddr,
    /// The listener's counters.
    pub stats: Arc<IngestStats>,
    /// The listener's TLS, if on (for its metrics).
    pub tls: Option<Arc<crate::runtime::tls::TlsAcceptor>>,
    /// The provider logon's lockout table and counters (for its metrics).
    pub auth: Arc<crate::auth::AuthGuard>,
    stop: Arc<AtomicBool>,
    /// Wakes the listener's own poller (its own thread).
    waker: Arc<Waker>,
    /// Wakes the hosting shard (`--threading shared`).
    host_bell: Option<Arc<Doorbell>>,
    thread: Option<Supervised<()>>,
    /// Hosted by a shard: disconnected once the host dropped the listener.
    hosted_done: Option<Dropped>,
}

impl IngestHandle {
    /// Stops accepting and closes every bridge; the feed port is dropped,
    /// which tells the engine this feed has ended.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(t) = &self.thread {
            t.request_stop();
        }
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
        if let Some(bell) = &self.host_bell {
            bell.ring();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(done) = self.hosted_done.take() {
            if !done.wait(HOSTED_STOP_TIMEOUT) {
                tracing::error!(
                    "the hosted ingest listener did not stop within {HOSTED_STOP_TIMEOUT:?}"
                );
            }
        }
    }
}

impl Drop for IngestHandle {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Binds the listener and starts the ingest thread feeding `port`.
pub fn spawn(
    cfg: IngestConfig,
    table: Arc<InstrumentTable>,
    port: FeedPort,
    supervisor: &Supervisor,
) -> io::Result<IngestHandle> {
    let cpus = cfg.cpus.clone();
    let (mut handle, mut ingest) = bind(cfg, table, port, supervisor)?;
    // Placed like every feed; a refusal fails start-up here rather than
    // leaving prices' first stage at a placement the operator did not ask
    // for.
    let (placed_tx, placed_rx) = std::sync::mpsc::sync_channel(1);
    let thread = supervisor.spawn("pw-ingest", Policy::Permanent, move || {
        let placed = crate::runtime::affinity::place_current(crate::runtime::Stage::Feed, &cpus);
        let ok = placed.is_ok();
        if !ok {
            // Start-up fails with the reason: not a death.
            crate::runtime::supervise::end_expected();
        }
        let _ = placed_tx.send(placed);
        if ok {
            ingest.run();
        }
    })?;
    handle.thread = Some(thread);
    match placed_rx.recv() {
        Ok(Ok(_)) => {}
        Ok(Err(reason)) => return Err(io::Error::other(format!("provider ingest: {reason}"))),
        Err(_) => return Err(io::Error::other("provider ingest thread ended at start")),
    }
    tracing::info!(local_addr = %handle.local_addr, "provider ingest listening");
    Ok(handle)
}

/// Binds the listener and returns it as a task for a host thread
/// (`--threading shared`: gateway shard 0), which registers the
/// listener's sockets in its own poller and routes their events here.
pub fn hosted(
    cfg: IngestConfig,
    table: Arc<InstrumentTable>,
    port: FeedPort,
    supervisor: &Supervisor,
) -> io::Result<(IngestHandle, Box<dyn HostedTask>)> {
    let (mut handle, mut ingest) = bind(cfg, table, port, supervisor)?;
    ingest.hold_when_full = true;
    ingest.port.never_wait();
    let (signal, dropped) = drop_signal();
    handle.hosted_done = Some(dropped);
    handle.host_bell = Some(ingest.port.doorbell());
    let task = HostedIngest {
        ingest,
        _dropped: signal,
    };
    tracing::info!(local_addr = %handle.local_addr, "provider ingest listening (hosted by shard 0)");
    Ok((handle, Box::new(task)))
}

fn bind(
    cfg: IngestConfig,
    table: Arc<InstrumentTable>,
    port: FeedPort,
    supervisor: &Supervisor,
) -> io::Result<(IngestHandle, Ingest)> {
    let mut listener = TcpListener::from_std(crate::runtime::listen::bind(cfg.listen)?);
    let local_addr = listener.local_addr()?;
    let poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let registry = poll.registry().try_clone()?;
    let stats = Arc::new(IngestStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let held_providers = vec![false; table.providers().len()];
    let tls = cfg.tls.clone();
    let auth = Arc::new(crate::auth::AuthGuard::new(
        crate::auth::Listener::Feed,
        &cfg.auth,
    ));
    let verifier = crate::auth::verifier::Verifier::start(
        "pw-provauth",
        cfg.auth.verifier_threads,
        cfg.auth.verifier_queue,
        supervisor,
    )?;
    let ingest = Ingest {
        cfg,
        table,
        port,
        poll: Some(poll),
        registry,
        token_base: 0,
        listener,
        bridges: (0..BRIDGES_MAX).map(|_| None).collect(),
        stats: stats.clone(),
        stop: stop.clone(),
        batch: Vec::with_capacity(IN_BYTES / 43 + 1),
        held_providers,
        auth: auth.clone(),
        verifier,
        verdicts: crossbeam_channel::unbounded(),
        next_ticket: 0,
        clock: Arc::new(MonotonicClock),
        next_check_ns: 0,
        hold_when_full: false,
        held: VecDeque::with_capacity(BRIDGES_MAX),
        current_ns: 0,
    };
    let handle = IngestHandle {
        local_addr,
        stats,
        auth,
        tls,
        stop,
        waker,
        host_bell: None,
        thread: None,
        hosted_done: None,
    };
    Ok((handle, ingest))
}

/// A provider token's verdict: bridge slot, logon ticket, provider id,
/// and `Ok` if the token matched, else the refusal and its retry-after.
type FeedVerdict = (usize, u64, u16, frames::TokenVerdict);

struct Ingest {
    cfg: IngestConfig,
    table: Arc<InstrumentTable>,
    port: FeedPort,
    /// Its own poller (own thread); `None` when hosted.
    poll: Option<Poll>,
    /// Where bridges are registered: its own poller's, or the host's.
    registry: Registry,
    /// Added to every token (the host's range for this task; 0 when own).
    token_base: usize,
    listener: TcpListener,
    bridges: Vec<Option<Bridge>>,
    stats: Arc<IngestStats>,
    stop: Arc<AtomicBool>,
    batch: Vec<Tick>,
    /// Provider ids held by a logged-on bridge, indexed by id.
    held_providers: Vec<bool>,
    /// Provider-logon lockouts per address and the verification cache.
    auth: Arc<crate::auth::AuthGuard>,
    /// argon2 for provider tokens, off this thread (which may be a
    /// gateway shard's): `pw-provauth0`, `--feed-verifier-queue` waiting.
    verifier: crate::auth::verifier::Verifier,
    /// Verdicts (bridge, ticket, provider id, token matched), read every
    /// loop turn and timer check.
    verdicts: (
        crossbeam_channel::Sender<FeedVerdict>,
        crossbeam_channel::Receiver<FeedVerdict>,
    ),
    /// The last logon ticket handed out.
    next_ticket: u64,
    /// Time of every timer decision.
    clock: Arc<dyn Clock>,
    /// When the bridges' timers are next checked.
    next_check_ns: u64,
    /// Hosted on the engine's thread: instead of waiting for ring room
    /// (which only this thread can make), stop reading a bridge while the
    /// ring could not take a full read buffer of quotes. The bridge's
    /// socket buffer fills and TCP pushes back on the provider; nothing is
    /// dropped.
    hold_when_full: bool,
    /// Bridges with input left unread because the ring was full.
    /// First in, first out, so every held bridge gets its turn.
    held: VecDeque<usize>,
    /// When a pass last left nothing held unread (the progress mark's
    /// time while bridges are held).
    current_ns: u64,
}

impl Ingest {
    /// Publishes the listener's progress mark on its feed port
    /// (`runtime::progress`, folded into the engine's) after a pass at
    /// `now` (the engine's and the shards' monotonic clock, which read
    /// it) that read every bridge that had input: idle while nothing is
    /// held unread — what the sockets had is in the ring, and a socket
    /// that gets more wakes this thread — else as of the last pass that
    /// held nothing; untracked without a bridge (nothing to fall behind).
    fn mark_progress(&mut self, now: u64) {
        let progress = &self.port.progress;
        if self.bridges.iter().all(Option::is_none) {
            progress.finished();
        } else if self.held.is_empty() {
            self.current_ns = now;
            progress.idle(now);
        } else {
            progress.caught_up(self.current_ns);
        }
    }
}

/// Room a read needs: the most quotes one inbound buffer can hold.
const READ_ROOM: usize = IN_BYTES / 43 + 1;
const _: () = assert!(READ_ROOM <= crate::runtime::hosting::SHARED_FEED_RING_MIN / 2);
