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

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Registry, Token, Waker};

use crate::clock::{monotonic_ns, wall_ns};
use crate::model::{InstrumentTable, ProviderKind, Tick};
use crate::runtime::hosting::{drop_signal, DropSignal, Dropped, Readiness, HOSTED_STOP_TIMEOUT};
use crate::runtime::{Doorbell, FeedPort, HostedTask, WaitStrategy};
use crate::wire::{self, LogonAccepted, LogonRejectReason, LogonRejected, Message, Name16};

/// Default token accepted from bridges for providers that have none of
/// their own in the config (the built-in synthetic providers).
pub const INGEST_TOKEN_DEFAULT: &str = "demo-feed";
/// Most bridge connections at once.
pub const BRIDGES_MAX: usize = 64;
/// Per-connection inbound buffer (also the largest accepted frame).
const IN_BYTES: usize = wire::FRAME_LEN_MAX;
/// Per-connection outbound buffer (acks and rejects only).
const OUT_BYTES: usize = 16 * 1024;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

/// Counters of the ingest listener.
#[derive(Debug, Default)]
pub struct IngestStats {
    pub connections: AtomicU64,
    pub logons_accepted: AtomicU64,
    pub logons_rejected: AtomicU64,
    pub quotes: AtomicU64,
    pub frames_rejected: AtomicU64,
}

/// Settings of the ingest listener.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    pub listen: SocketAddr,
    /// Token for providers without their own (see [`INGEST_TOKEN_DEFAULT`]).
    pub default_token: String,
    pub wait: WaitStrategy,
    /// Placement of the listener's own thread (a feed stage: `--cpus
    /// feed=N`, `--rt-priority`). Unused when hosted by shard 0, which is
    /// placed as a shard.
    pub cpus: crate::runtime::CpuMap,
}

struct Bridge {
    stream: TcpStream,
    provider: Option<u16>,
    inbuf: Box<[u8]>,
    in_len: usize,
    out: Vec<u8>,
    closing: bool,
    /// The last read returned data: [`HostedTask::between`] reads this
    /// bridge again without waiting for the poller (idle bridges cost
    /// nothing there).
    active: bool,
}

/// A running ingest listener.
pub struct IngestHandle {
    pub local_addr: SocketAddr,
    pub stats: Arc<IngestStats>,
    stop: Arc<AtomicBool>,
    /// Wakes the listener's own poller (its own thread).
    waker: Arc<Waker>,
    /// Wakes the hosting shard (`--threading shared`).
    host_bell: Option<Arc<Doorbell>>,
    thread: Option<JoinHandle<()>>,
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
) -> io::Result<IngestHandle> {
    let cpus = cfg.cpus.clone();
    let (mut handle, mut ingest) = bind(cfg, table, port)?;
    // Placed like every feed; a refusal fails start-up here rather than
    // leaving prices' first stage at a placement the operator did not ask
    // for.
    let (placed_tx, placed_rx) = std::sync::mpsc::sync_channel(1);
    let thread = std::thread::Builder::new()
        .name("pw-ingest".into())
        .spawn(move || {
            let placed =
                crate::runtime::affinity::place_current(crate::runtime::Stage::Feed, &cpus);
            let ok = placed.is_ok();
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
) -> io::Result<(IngestHandle, Box<dyn HostedTask>)> {
    let (mut handle, mut ingest) = bind(cfg, table, port)?;
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
        hold_when_full: false,
        held: VecDeque::with_capacity(BRIDGES_MAX),
    };
    let handle = IngestHandle {
        local_addr,
        stats,
        stop,
        waker,
        host_bell: None,
        thread: None,
        hosted_done: None,
    };
    Ok((handle, ingest))
}

/// Readiness events taken per poll.
const EVENTS_CAPACITY: usize = 256;

/// The ingest listener as a task of a host thread.
struct HostedIngest {
    ingest: Ingest,
    /// Dropped with the task: ends [`IngestHandle::stop`]'s wait.
    _dropped: DropSignal,
}

impl HostedTask for HostedIngest {
    fn name(&self) -> &'static str {
        "ingest"
    }

    fn register(&mut self, registry: &Registry, token_base: usize) -> io::Result<()> {
        let i = &mut self.ingest;
        // Move the listener from the poller made at bind to the host's.
        i.registry.deregister(&mut i.listener)?;
        i.poll = None;
        i.registry = registry.try_clone()?;
        i.token_base = token_base;
        i.registry.register(
            &mut i.listener,
            Token(token_base + LISTENER.0),
            Interest::READABLE,
        )
    }

    fn on_event(&mut self, token: usize, ready: Readiness) {
        if !self.finished() {
            self.ingest.on_token(token, ready.closed);
        }
    }

    fn turn(&mut self, _now_ns: u64) -> usize {
        if self.finished() || self.ingest.held.is_empty() {
            return 0;
        }
        self.ingest.resume_held()
    }

    fn between(&mut self, _now_ns: u64) -> usize {
        if self.finished() {
            return 0;
        }
        // Read what streaming bridges sent since this turn's poll; a bridge
        // found empty costs one EAGAIN read and is left to the poller.
        let mut n = 0;
        for i in 0..self.ingest.bridges.len() {
            if self.ingest.bridges[i].as_ref().is_some_and(|b| b.active) {
                self.ingest.on_ready(i, true);
                n += 1;
            }
        }
        n
    }

    fn has_work(&self) -> bool {
        !self.ingest.held.is_empty() || self.finished()
    }

    fn finished(&self) -> bool {
        self.ingest.stop.load(Ordering::Relaxed)
    }
}

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
    /// Hosted on the engine's thread: instead of waiting for ring room
    /// (which only this thread can make), stop reading a bridge while the
    /// ring could not take a full read buffer of quotes. The bridge's
    /// socket buffer fills and TCP pushes back on the provider; nothing is
    /// dropped.
    hold_when_full: bool,
    /// Bridges with input left unread because the ring was full.
    /// First in, first out, so every held bridge gets its turn.
    held: VecDeque<usize>,
}

/// Room a read needs: the most quotes one inbound buffer can hold.
const READ_ROOM: usize = IN_BYTES / 43 + 1;
const _: () = assert!(READ_ROOM <= crate::runtime::hosting::SHARED_FEED_RING_MIN / 2);

impl Ingest {
    fn run(&mut self) {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let timeout = match self.cfg.wait {
            WaitStrategy::Spin => Duration::ZERO,
            _ => Duration::from_millis(100),
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
        }
    }

    /// Reads the bridges held back by a full ring, once it has room.
    /// Returns how many were resumed.
    fn resume_held(&mut self) -> usize {
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
    fn on_token(&mut self, token: usize, closed: bool) {
        match Token(token) {
            LISTENER => self.accept_all(),
            WAKER => {}
            Token(t) => self.on_ready(t - 2, !closed),
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.add(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!(error = %e, "ingest accept failed");
                    return;
                }
            }
        }
    }

    fn add(&mut self, mut stream: TcpStream) {
        let Some(i) = self.bridges.iter().position(Option::is_none) else {
            return; // at capacity: dropping the stream closes it
        };
        let _ = stream.set_nodelay(true);
        let token = Token(self.token_base + i + 2);
        if self
            .registry
            .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
            .is_err()
        {
            return;
        }
        self.stats.connections.fetch_add(1, Ordering::Relaxed);
        self.bridges[i] = Some(Bridge {
            stream,
            provider: None,
            inbuf: vec![0u8; IN_BYTES].into_boxed_slice(),
            in_len: 0,
            out: Vec::with_capacity(OUT_BYTES),
            closing: false,
            active: false,
        });
    }

    /// Reads bridge `i` until the socket is drained. With `short_drains`, a
    /// read that returns less than asked means drained (a later arrival
    /// raises a new edge), which saves the `EAGAIN` read — one syscall per
    /// quote batch at low rates (nginx's `ngx_unix_recv` does the same).
    /// Without it (the peer closed, or resuming a held bridge) it reads
    /// until `WouldBlock` or the end.
    fn on_ready(&mut self, i: usize, short_drains: bool) {
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
            let asked = b.inbuf.len() - b.in_len;
            let r = b.stream.read(&mut b.inbuf[b.in_len..]);
            let short = match r {
                Ok(0) => return self.close(i),
                Ok(n) => {
                    b.in_len += n;
                    b.active = true;
                    n < asked
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    b.active = false;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return self.close(i),
            };
            self.frames(i);
            if short && short_drains {
                break;
            }
        }
        self.flush(i);
    }

    fn frames(&mut self, i: usize) {
        let mut off = 0;
        loop {
            let Some(b) = self.bridges[i].as_mut() else {
                return;
            };
            if b.closing {
                b.in_len = 0;
                return;
            }
            match wire::split(&b.inbuf[off..b.in_len]) {
                Ok(None) => break,
                Ok(Some(len)) => {
                    let frame = &b.inbuf[off..off + len];
                    off += len;
                    let close = handle(
                        frame,
                        &mut b.provider,
                        &self.table,
                        &self.cfg,
                        &mut self.port,
                        &mut self.batch,
                        &self.stats,
                        &mut b.out,
                    );
                    // A bridge that never reads its replies (or an
                    // unauthenticated flood) cannot grow our buffer.
                    if close || b.out.len() > OUT_BYTES {
                        b.closing = true;
                    }
                }
                Err(e) => {
                    let mut buf = [0u8; 128];
                    if let Ok(n) = encode_reject(&mut buf, e.reason(), "bad framing") {
                        b.out.extend_from_slice(&buf[..n]);
                    }
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
        self.port.notify();
    }

    fn flush(&mut self, i: usize) {
        let Some(b) = self.bridges[i].as_mut() else {
            return;
        };
        while !b.out.is_empty() {
            match b.stream.write(&b.out) {
                Ok(0) => break,
                Ok(n) => {
                    b.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return self.close(i),
            }
        }
        let close = b.closing && b.out.is_empty();
        // A bridge that never reads its acks cannot grow our buffer.
        let overflow = b.out.len() > OUT_BYTES;
        if close || overflow {
            self.close(i);
        }
    }

    fn close(&mut self, i: usize) {
        if let Some(mut b) = self.bridges[i].take() {
            let _ = self.registry.deregister(&mut b.stream);
            self.stats.connections.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Largest reply frame to a bridge.
const REPLY_MAX: usize = 8192;

/// Encodes one reply frame on the stack and appends it to the bridge's
/// output. Only replies pay for the stack buffer: the quote path, which
/// answers nothing, never builds one (returning an 8 KiB reply by value
/// from every frame's handler had cost one 8 KiB copy per quote frame,
/// 5 % of the shard's CPU at 200k ticks/s).
fn reply(out: &mut Vec<u8>, f: impl FnOnce(&mut [u8]) -> Result<usize, wire::EncodeError>) {
    let mut buf = [0u8; REPLY_MAX];
    if let Ok(n) = f(&mut buf) {
        out.extend_from_slice(&buf[..n]);
    }
}

fn encode_reject(
    buf: &mut [u8],
    reason: wire::RejectReason,
    text: &str,
) -> Result<usize, wire::EncodeError> {
    wire::encode_reject(
        buf,
        &wire::Reject {
            request_id: 0,
            ref_template_id: 0,
            reason,
            retry_after_ms: 0,
            text: text.as_bytes(),
        },
    )
}

/// Handles one frame, appending any reply to `out` (quotes, the hot path,
/// have none); returns whether to close afterwards.
#[allow(clippy::too_many_arguments)]
fn handle(
    frame: &[u8],
    provider: &mut Option<u16>,
    table: &InstrumentTable,
    cfg: &IngestConfig,
    port: &mut FeedPort,
    batch: &mut Vec<Tick>,
    stats: &IngestStats,
    out: &mut Vec<u8>,
) -> bool {
    let msg = match wire::decode(frame) {
        Ok(m) => m,
        Err(e) => {
            stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            reply(out, |b| encode_reject(b, e.reason(), "bad message"));
            // Before logon nothing is owed to the peer: one bad frame ends it.
            return provider.is_none();
        }
    };
    match (msg, *provider) {
        (Message::ProviderLogon(l), None) => logon(&l, provider, table, cfg, stats, out),
        (Message::ProviderQuote(q), Some(p)) => {
            quotes(&q, p, port, batch, stats);
            false
        }
        (Message::Heartbeat, Some(_)) => {
            reply(out, wire::encode_heartbeat);
            false
        }
        (Message::SymbolListRequest(r), Some(_)) => {
            directory(r.request_id, table, out);
            false
        }
        (Message::Logout, _) => {
            reply(out, |b| {
                wire::encode_disconnect_reason(b, wire::DisconnectReason::LOGOUT, 0, "logout")
            });
            true
        }
        (_, None) => {
            stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            reply(out, |b| {
                encode_reject(b, wire::RejectReason::NOT_LOGGED_ON, "logon first")
            });
            true
        }
        (_, Some(_)) => {
            stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            reply(out, |b| {
                encode_reject(b, wire::RejectReason::UNEXPECTED_MESSAGE, "")
            });
            false
        }
    }
}

fn logon(
    l: &wire::ProviderLogon<'_>,
    provider: &mut Option<u16>,
    table: &InstrumentTable,
    cfg: &IngestConfig,
    stats: &IngestStats,
    out: &mut Vec<u8>,
) -> bool {
    let ok = table
        .providers()
        .get(l.provider_id as usize)
        .is_some_and(|p| {
            let expected = if p.kind == ProviderKind::Ingest && !p.token.is_empty() {
                p.token.as_bytes()
            } else {
                cfg.default_token.as_bytes()
            };
            expected == l.token
        });
    if !ok {
        stats.logons_rejected.fetch_add(1, Ordering::Relaxed);
        let m = LogonRejected {
            reason: LogonRejectReason::AUTH,
            retry_after_ms: 1_000,
        };
        reply(out, |b| wire::encode_logon_rejected(b, &m));
        return true;
    }
    *provider = Some(l.provider_id);
    stats.logons_accepted.fetch_add(1, Ordering::Relaxed);
    let m = LogonAccepted {
        session_id: u64::from(l.provider_id),
        heartbeat_interval_ms: 1_000,
        server_time_ns: wall_ns(),
        default_tier: 0,
    };
    reply(out, |b| wire::encode_logon_accepted(b, &m));
    false
}

fn quotes(
    q: &wire::ProviderQuote<'_>,
    provider: u16,
    port: &mut FeedPort,
    batch: &mut Vec<Tick>,
    stats: &IngestStats,
) {
    let now = monotonic_ns();
    batch.clear();
    for e in q.quotes.clone() {
        if batch.len() == batch.capacity() {
            break;
        }
        batch.push(Tick {
            bid: e.bid,
            ask: e.ask,
            bid_size: e.bid_size,
            ask_size: e.ask_size,
            provider_time_ns: e.provider_time_ns,
            receive_time_ns: now,
            feed_seq: 0,
            symbol: e.symbol_id,
            provider,
            flags: u32::from(e.flags),
        });
    }
    stats
        .quotes
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    for t in batch.iter() {
        port.push(*t);
    }
}

fn directory(request_id: u64, table: &InstrumentTable, out: &mut Vec<u8>) {
    // A directory of every instrument may exceed the stack reply; bridges
    // that need more use the subscriber listener's SymbolListRequest.
    let symbols = table.instruments().iter().map(|s| wire::SymbolInfo {
        symbol_id: s.id,
        digits: s.digits,
        name: Name16::new(&s.name).unwrap_or_default(),
    });
    let tiers = std::iter::empty::<wire::TierInfo>();
    reply(out, |b| {
        wire::encode_symbol_directory(b, request_id, symbols, tiers)
    });
}
