//! The subscriber gateway: a TCP listener speaking the SOFH + SBE protocol
//! (`docs/protocol.md`) to subscriber terminals.
//!
//! An acceptor thread applies admission (accept rate, per-IP limits) and
//! hands accepted sockets to N shards (fewest sessions first). Each shard is one mio
//! event loop on one thread that owns its connections (a fixed-capacity
//! slab; per-connection buffers allocated at accept), consumes its engine
//! ring, encodes each price once and copies the bytes into the outbound
//! buffer of every subscribed connection. Nothing on the fan-out path
//! allocates or locks. Control (stop accepting, disconnect all, stop)
//! arrives over crossbeam channels with a mio waker.
//!
//! Where things are: `session.rs` is the sans-IO protocol state of one
//! connection (framing, logon gate, rate limit, heartbeats, timeouts,
//! rejects and disconnects; bytes and time in, frames and events out).
//! The shard owns the I/O and the shared state around it, divided by the
//! state each part owns (the table in `shard.rs`): `shard.rs` (the loop:
//! poll, control, prices off the ring), `conns.rs` (the connection set:
//! session calls, writes, accepting and closing), `reads.rs` (socket
//! reads dispatched to the handlers, the timer sweep), `slab.rs` (the
//! connections), `fanout.rs` (subscription index and the price path),
//! `subscribe.rs`, `queries.rs` (the request path), `logon.rs`
//! (admission and credentials), `revoke.rs` (revalidation), `lag.rs`
//! (loop lag), `lanes.rs` and `moves.rs` (moving sessions between
//! shards), `spill.rs`, `drain.rs` and `balance.rs` (when to move one).

pub mod acceptor;
mod answer_marks;
mod append;
mod balance;
mod behind;
pub mod conn;
mod conns;
mod drain;
mod fanout;
mod faults;
mod fdlimit;
pub use fdlimit::FD_RESERVE_DEFAULT;

/// Default of `--max-connections-per-shard`: two shards (a 2-core edge's
/// default) hold 100,000 terminals. Each slot costs 608 bytes at start.
pub const MAX_CONNECTIONS_PER_SHARD_DEFAULT: usize = 50_000;
pub mod fresh;
pub mod lag;
mod lanes;
mod logon;
#[cfg(all(test, pricewire_loom))]
mod loom_models;
mod moves;
pub mod outbound;
pub mod pacer;
pub(crate) mod proxy_wait;
mod queries;
mod read_turn;
mod reads;
pub mod revoke;
pub mod sendq;
pub mod session;
mod settings_error;
pub use settings_error::SettingsError;
pub mod shard;
mod slab;
pub mod spill;
pub mod stats;
pub mod subs;
mod subscribe;
mod sweep;
pub mod tls_refusal;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;

pub use stats::{GatewayStats, ShardStats};

use crate::admission::{Admission, AdmissionConfig, RetryWindow};
use crate::clock::{monotonic_ns, wall_ns};
use crate::config::Config;
use crate::engine::PriceTable;
use crate::engine::ShardInput;
use crate::engine::TickHistory;
use crate::overload::stats::OverloadStats;
use crate::refdata::RefData;
use crate::requests::service::{RequestConfig, RequestService, RequestStats, Sources};
use crate::runtime::latency::HistogramExchange;
use crate::runtime::{Supervisor, WaitStrategy};

/// Default subscriber listen address.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:9400";

/// Defaults of the `--shard0-drain-*` flags (see `gateway::drain`).
pub(crate) const DRAIN_DEFAULT: drain::DrainPolicy = drain::DrainPolicy::DEFAULT;

/// Default of `--bad-frame-limit`.
pub const BAD_FRAME_LIMIT_DEFAULT: u32 = 10;
/// Default of `--bad-frame-window-ms`.
pub const BAD_FRAME_WINDOW_MS_DEFAULT: u64 = 10_000;
/// Default of `--flood-disconnect-after`: refusals in a row a client may
/// ignore before it is cut (100 is a second of a 100/s client ignoring
/// every refusal; a client that honours them collects none).
pub const FLOOD_DISCONNECT_AFTER_DEFAULT: u32 = 100;
/// Largest `--flood-disconnect-after`.
pub const FLOOD_DISCONNECT_AFTER_MAX: u32 = 1_000_000;

/// Gateway settings (flags of `serve`).
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Address the subscriber listener binds (`--listen`).
    pub listen: SocketAddr,
    /// New sessions go to shard 0 until it holds this many, then to the
    /// shard with the fewest (see [`acceptor::place`]). With shared
    /// threading shard 0 runs the engine: its own sessions get prices
    /// without a cross-thread wake-up.
    pub shard0_fill: u64,
    /// Busy share (per-mille) at or above which the shard that runs the
    /// engine moves sessions to the other shards and takes no new ones
    /// (see [`spill`]); 0 = never.
    pub shard0_spill_permille: u32,
    /// Busy share of shard 0's wall time (per-mille of a 50-ms window) at
    /// or above which it drains a request-heavy session off itself
    /// (`gateway::drain`; `--shard0-drain-busy-pct`, 1..=100 %).
    pub drain_busy_permille: u32,
    /// Share of shard 0's busy time spent on request work (per-mille) at
    /// or above which it drains (`--shard0-drain-request-share-pct`,
    /// 1..=100 %).
    pub drain_request_share_permille: u32,
    /// Requests a session must have sent in one 50-ms window to be drained
    /// (`--shard0-drain-min-requests`, 1..=100000), with two or more in
    /// flight at the window's end or as many in the window before.
    pub drain_min_requests: u32,
    /// Longest a drained session is held waiting for its answers before
    /// the hold is aborted and it is read where it is, in milliseconds
    /// (`--shard0-drain-abort-ms`, 1..=5000).
    pub drain_abort_ms: u64,
    /// Outbound bytes below which a conflating connection writes prices through again.
    pub low_water_bytes: usize,
    /// Outbound bytes above which a connection starts conflating prices.
    pub high_water_bytes: usize,
    /// Hard capacity of a connection's outbound buffer, in bytes.
    pub out_cap_bytes: usize,
    /// Kernel send buffer per connection (`SO_SNDBUF`), bytes; 0 = the
    /// kernel's auto-tuning (see [`sendq`]).
    pub sndbuf_bytes: usize,
    /// Descriptors kept free of subscriber connections (`--fd-reserve`):
    /// the acceptor refuses busy at the descriptor limit less this.
    pub fd_reserve: u64,
    /// Above the high mark for longer than this → slow-consumer disconnect.
    pub slow_consumer_ms: u64,
    /// Heartbeat interval offered when the client asks for 0.
    pub heartbeat_ms: u32,
    /// Shortest heartbeat interval a client may ask for, ms.
    pub heartbeat_min_ms: u32,
    /// Longest heartbeat interval a client may ask for, ms.
    pub heartbeat_max_ms: u32,
    /// A peer silent for this many heartbeat intervals is dead.
    pub dead_after_heartbeats: u32,
    /// A connection must log on within this many ms of its accept.
    pub logon_timeout_ms: u64,
    /// A started frame must complete within this time (slowloris guard).
    pub frame_timeout_ms: u64,
    /// Largest frame a client may send.
    pub max_frame_bytes: usize,
    /// Connections one shard holds at most; more are refused Disconnect(busy).
    pub max_connections_per_shard: usize,
    /// Subscriptions one connection holds at most.
    pub max_subscriptions: usize,
    /// Per-connection inbound message rate limit (messages per second).
    pub msg_rate_per_s: u32,
    /// Messages a connection may send in a burst above `msg_rate_per_s`.
    pub msg_burst: u32,
    /// Refusals in a row (messages the rate limit refused, and messages
    /// refused inside a backoff window: see [`session::backoff`]) after
    /// which the connection is closed with Disconnect(message_flood)
    /// (`--flood-disconnect-after`).
    pub flood_disconnect_after: u32,
    /// More than this many refused frames (bad body, unknown template,
    /// unexpected message) within `bad_frame_window_ms` of the first →
    /// Disconnect(protocol_error).
    pub bad_frame_limit: u32,
    /// The window, ms, in which `bad_frame_limit` refused frames are counted.
    pub bad_frame_window_ms: u64,
    /// Serve-wide maximum update frequency per subscription, updates per
    /// second (`--max-update-hz`, [`pacer`]): the limit of every account
    /// that sets no `max_update_hz` of its own. 0 = unlimited.
    pub max_update_hz: u32,
    /// Loop lag (ms) above which a shard sheds (see [`lag`]); 0 = never.
    pub loop_lag_target_ms: u64,
    /// The oldest a price may be (ms since this process received it) when
    /// it is handed to a connection's socket (see [`fresh`]).
    pub price_age_max_ms: u64,
    /// How long (µs) a connection's price waits unwritten before a newer
    /// one of its key overwrites it in place (see `append.rs`).
    pub merge_after_us: u64,
    /// Longest a closing connection may take to flush its last bytes.
    pub close_linger_ms: u64,
    /// How an idle shard waits for prices and sockets (`--shard-wait`).
    pub shard_wait: WaitStrategy,
    /// Shard pinning (`shard=N` / `shardI=N` entries of `--cpus`).
    pub cpus: crate::runtime::CpuMap,
    /// Accept, logon, first-subscribe and symbol-list admission limits.
    pub admission: AdmissionConfig,
    /// retryAfterMs window for Disconnect(shutdown).
    pub shutdown_retry: RetryWindow,
    /// retryAfterMs window for Disconnect(slow consumer / protocol error /
    /// logon timeout / message flood).
    pub error_retry: RetryWindow,
    /// TLS on the subscriber listener (`--tls-cert`, `--tls-key`); `None`
    /// is plaintext.
    pub tls: Option<Arc<crate::runtime::tls::TlsAcceptor>>,
    /// PROXY protocol v2 on the subscriber listener (`--proxy-protocol`,
    /// `--proxy-from`); `None`: off, the TCP peer is the client.
    pub proxy: Option<Arc<crate::runtime::proxy::ProxyProtocol>>,
    /// Brute-force lockouts and the argon2 verifier's threads and queue
    /// (`--lockout-*`, `--verifier-*`).
    pub auth: crate::auth::AuthLimits,
    /// On a TLS listener, connections refused for capacity that get a
    /// handshake and Disconnect(busy) per second (and at once); more are
    /// closed before any TLS work. 0: every refusal is closed bare. See
    /// [`tls_refusal`].
    pub tls_busy_handshakes_per_s: u32,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            listen: LISTEN_DEFAULT.parse().expect("static address"),
            low_water_bytes: outbound::LOW_WATER_BYTES_DEFAULT,
            high_water_bytes: outbound::HIGH_WATER_BYTES_DEFAULT,
            out_cap_bytes: outbound::OUT_CAP_BYTES_DEFAULT,
            sndbuf_bytes: sendq::SNDBUF_BYTES_DEFAULT,
            fd_reserve: fdlimit::FD_RESERVE_DEFAULT,
            slow_consumer_ms: 5_000,
            shard0_fill: 0,
            shard0_spill_permille: 0,
            drain_busy_permille: drain::DrainPolicy::DEFAULT.busy_permille,
            drain_request_share_permille: drain::DrainPolicy::DEFAULT.request_share_permille,
            drain_min_requests: drain::DrainPolicy::DEFAULT.min_requests,
            drain_abort_ms: drain::DrainPolicy::DEFAULT.wait_ns / 1_000_000,
            heartbeat_ms: 1_000,
            heartbeat_min_ms: 100,
            heartbeat_max_ms: 30_000,
            dead_after_heartbeats: 3,
            logon_timeout_ms: 5_000,
            frame_timeout_ms: 5_000,
            max_frame_bytes: 16 * 1024,
            max_connections_per_shard: MAX_CONNECTIONS_PER_SHARD_DEFAULT,
            max_subscriptions: 1_024,
            msg_rate_per_s: 200,
            msg_burst: 400,
            flood_disconnect_after: FLOOD_DISCONNECT_AFTER_DEFAULT,
            bad_frame_limit: BAD_FRAME_LIMIT_DEFAULT,
            bad_frame_window_ms: BAD_FRAME_WINDOW_MS_DEFAULT,
            loop_lag_target_ms: lag::LOOP_LAG_TARGET_MS_DEFAULT,
            price_age_max_ms: fresh::PRICE_AGE_MAX_MS_DEFAULT,
            merge_after_us: fresh::MERGE_AFTER_US_DEFAULT,
            max_update_hz: 0,
            close_linger_ms: 2_000,
            shard_wait: WaitStrategy::SpinPark,
            cpus: crate::runtime::CpuMap::default(),
            admission: AdmissionConfig::default(),
            shutdown_retry: RetryWindow::new(1_000, 10_000),
            error_retry: RetryWindow::new(1_000, 5_000),
            tls: None,
            proxy: None,
            auth: crate::auth::AuthLimits::default(),
            tls_busy_handshakes_per_s: tls_refusal::TLS_BUSY_HANDSHAKES_PER_S_DEFAULT,
        }
    }
}

impl GatewayConfig {
    /// Refuses settings the gateway cannot work with, naming the flag.
    pub fn validate(&self) -> Result<(), SettingsError> {
        use SettingsError as E;
        if !(self.low_water_bytes < self.high_water_bytes
            && self.high_water_bytes < self.out_cap_bytes)
        {
            return Err(E::Order(
                "--low-water-bytes < --high-water-bytes < --out-cap-bytes must hold",
            ));
        }
        if self.out_cap_bytes < 4096 {
            return Err(E::range("--out-cap-bytes", "at least 4096"));
        }
        sendq::check_sndbuf_bytes(self.sndbuf_bytes)?;
        fdlimit::check_fd_reserve(self.fd_reserve)?;
        if self.max_frame_bytes < 64 || self.max_frame_bytes > crate::wire::FRAME_LEN_MAX {
            let range = format!("64..={}", crate::wire::FRAME_LEN_MAX);
            return Err(E::range("--max-frame-bytes", range));
        }
        if !(self.heartbeat_min_ms <= self.heartbeat_ms
            && self.heartbeat_ms <= self.heartbeat_max_ms)
            || self.heartbeat_min_ms == 0
        {
            return Err(E::range(
                "heartbeat",
                "0 < min <= --heartbeat-ms <= max must hold",
            ));
        }
        if self.dead_after_heartbeats < 2 {
            return Err(E::range("--dead-after-heartbeats", "at least 2"));
        }
        if self.max_connections_per_shard == 0 || self.max_connections_per_shard > 1 << 20 {
            return Err(E::range("--max-connections-per-shard", "1..=1048576"));
        }
        if self.max_subscriptions == 0 || self.msg_burst == 0 || self.msg_rate_per_s == 0 {
            let flags = "--max-subscriptions, --msg-rate-per-s and --msg-burst";
            return Err(E::range(flags, "at least 1"));
        }
        if !(1..=FLOOD_DISCONNECT_AFTER_MAX).contains(&self.flood_disconnect_after) {
            let range = format!("1..={FLOOD_DISCONNECT_AFTER_MAX}");
            return Err(E::range("--flood-disconnect-after", range));
        }
        if self.shard0_spill_permille > 1000 {
            return Err(E::range("--shard0-spill-pct", "0..=100"));
        }
        drain::DrainPolicy::from_config(self)?;
        if self.loop_lag_target_ms > 60_000 {
            return Err(E::range(
                "--loop-lag-target-ms",
                "0..=60000 (0 = never shed)",
            ));
        }
        fresh::check_price_age_max_ms(self.price_age_max_ms)?;
        fresh::check_merge_after_us(self.merge_after_us)?;
        crate::config::check_max_update_hz(self.max_update_hz).map_err(E::MaxUpdateHz)?;
        if self.slow_consumer_ms == 0 {
            return Err(E::range("--slow-consumer-ms", "at least 1"));
        }
        Ok(self.admission.validate()?)
    }
}

/// State shared by the acceptor and every shard (cold paths only, apart
/// from the lock-free price table).
pub struct Shared {
    /// The gateway's settings.
    pub cfg: GatewayConfig,
    /// The instrument table and accounts the service started with.
    pub config: Arc<Config>,
    /// Latest price per (symbol, tier), for snapshots and resyncs.
    pub table: Arc<PriceTable>,
    /// Logon, first-subscribe and symbol-list admission; taken on session
    /// set-up only, never on the price path.
    pub admission: Mutex<Admission>,
    /// Listener-wide session counters.
    pub stats: Arc<GatewayStats>,
    /// The request path's overload counters.
    pub overload: Arc<OverloadStats>,
    /// UTC = monotonic + this, fixed at start so wall-clock steps never
    /// reorder prices on the wire.
    pub wall_offset_ns: i64,
    /// The next logon's session id (unique in the process).
    pub next_session_id: AtomicU64,
    /// False once the gateway stops accepting (shutdown).
    pub accepting: AtomicBool,
    /// Accounts, tokens and entitlements: the config file's, or Redis.
    pub refdata: Arc<RefData>,
    /// Brute-force tables, the verification cache and their counters.
    pub auth: Arc<crate::auth::AuthGuard>,
    /// The argon2 worker threads (never a shard thread).
    pub verifier: crate::auth::verifier::Verifier,
    /// TLS links refused on a shard, for the acceptor to refuse with
    /// Disconnect(busy) within its handshake budget.
    pub tls_refusals: tls_refusal::RefusalQueue,
    /// Watches the acceptor, the shards and the request threads.
    pub supervisor: Supervisor,
    /// Open connections at which the acceptor refuses busy: the raised
    /// descriptor limit less `--fd-reserve` (see `fdlimit.rs`).
    pub connections_fd_max: u64,
}

/// What the gateway's shards use besides their engine rings.
pub struct GatewayDeps {
    /// The instrument table and accounts.
    pub config: Arc<Config>,
    /// Latest price per (symbol, tier).
    pub table: Arc<PriceTable>,
    /// The request path's overload counters.
    pub overload: Arc<OverloadStats>,
    /// One per shard: where the shard sends its latency histogram.
    pub exchanges: Vec<Option<HistogramExchange>>,
    /// Recent ticks per symbol for HistoryRequest (empty history if absent).
    pub history: Option<Arc<TickHistory>>,
    /// The request path's settings (queue, adaptive limit, workers).
    pub requests: RequestConfig,
    /// Accounts from Redis; default: the config file's accounts.
    pub refdata: Option<Arc<RefData>>,
    /// Watches every thread the gateway starts.
    pub supervisor: Supervisor,
}

/// Control messages to a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardControl {
    /// Send every session Disconnect(shutdown) with a jittered
    /// retryAfterMs, flush, close.
    DisconnectAll,
    /// Exit the loop (after DisconnectAll, or at once).
    Stop,
    /// Move this many sessions to the least busy other shards now, as a
    /// busy shard 0 would (only the shard that runs the engine can).
    Spill(u32),
}

/// A running gateway.
pub struct Gateway {
    /// The state the acceptor and shards share.
    pub shared: Arc<Shared>,
    /// The address the listener bound (the port chosen if 0 was asked).
    pub local_addr: SocketAddr,
    acceptor: Option<acceptor::AcceptorHandle>,
    requests: Option<RequestService>,
    shards: Vec<(
        Sender<ShardControl>,
        Arc<mio::Waker>,
        crate::runtime::Supervised<()>,
    )>,
    /// Each shard's counters, by shard index.
    pub shard_stats: Vec<Arc<ShardStats>>,
    peers: Arc<[lanes::Peer]>,
}

impl Gateway {
    /// Binds the listener and starts the acceptor and one thread per shard
    /// input.
    pub fn start(
        cfg: GatewayConfig,
        config: Arc<Config>,
        table: Arc<PriceTable>,
        inputs: Vec<ShardInput>,
        overload: Arc<OverloadStats>,
    ) -> std::io::Result<Gateway> {
        let none = inputs.iter().map(|_| None).collect();
        Self::start_with_latency(cfg, config, table, inputs, overload, none)
    }

    /// [`Gateway::start`], with one latency-histogram exchange per shard
    /// (the service's periodic report collects them).
    pub fn start_with_latency(
        cfg: GatewayConfig,
        config: Arc<Config>,
        table: Arc<PriceTable>,
        inputs: Vec<ShardInput>,
        overload: Arc<OverloadStats>,
        exchanges: Vec<Option<HistogramExchange>>,
    ) -> std::io::Result<Gateway> {
        let deps = GatewayDeps {
            config,
            table,
            overload,
            exchanges,
            history: None,
            requests: RequestConfig::default(),
            refdata: None,
            supervisor: Supervisor::new(),
        };
        Self::start_with(cfg, inputs, deps)
    }

    /// The general form: every optional part of a shard given explicitly.
    pub fn start_with(
        cfg: GatewayConfig,
        inputs: Vec<ShardInput>,
        deps: GatewayDeps,
    ) -> std::io::Result<Gateway> {
        cfg.validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let shared = Self::shared(cfg, &deps, inputs.len())?;
        Self::apply_account_limits(&shared);
        Self::start_shards(shared, inputs, deps)
    }

    /// The state every shard and the acceptor share.
    fn shared(
        cfg: GatewayConfig,
        deps: &GatewayDeps,
        shards: usize,
    ) -> std::io::Result<Arc<Shared>> {
        let overload = deps.overload.clone();
        let admission = Admission::new(
            cfg.admission.clone(),
            rand::SeedableRng::from_entropy(),
            overload.clone(),
            monotonic_ns(),
        )
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let config = deps.config.clone();
        let limits = cfg.auth;
        let capacity = (shards.max(1) * cfg.max_connections_per_shard) as u64;
        let connections_fd_max = fdlimit::at_start(capacity, cfg.fd_reserve);
        let shared = Arc::new(Shared {
            connections_fd_max,
            cfg,
            table: deps.table.clone(),
            admission: Mutex::new(admission),
            stats: Arc::new(GatewayStats::default()),
            overload,
            wall_offset_ns: crate::wire::wall_offset_ns(wall_ns(), monotonic_ns()),
            next_session_id: AtomicU64::new(1),
            accepting: AtomicBool::new(true),
            refdata: deps
                .refdata
                .clone()
                .unwrap_or_else(|| Arc::new(RefData::from_accounts(&config.accounts))),
            config,
            auth: Arc::new(crate::auth::AuthGuard::new(
                crate::auth::Listener::Subscriber,
                &limits,
            )),
            verifier: crate::auth::verifier::Verifier::start(
                "pw-auth",
                limits.verifier_threads,
                limits.verifier_queue,
                &deps.supervisor,
            )?,
            tls_refusals: Default::default(),
            supervisor: deps.supervisor.clone(),
        });
        Ok(shared)
    }

    /// Starts the request path, the shards and the acceptor.
    fn start_shards(
        shared: Arc<Shared>,
        inputs: Vec<ShardInput>,
        deps: GatewayDeps,
    ) -> std::io::Result<Gateway> {
        let mut shards = Vec::new();
        let mut handoffs = Vec::new();
        let mut shard_stats = Vec::new();
        let bells = inputs.iter().map(|i| i.doorbell.clone()).collect();
        let sources = Sources {
            config: shared.config.clone(),
            table: shared.table.clone(),
            history: deps
                .history
                .unwrap_or_else(|| Arc::new(TickHistory::new(shared.config.table.len(), 1))),
            wall_offset_ns: shared.wall_offset_ns,
            refdata: shared.refdata.clone(),
        };
        let (request_service, ports) = RequestService::start(
            deps.requests,
            sources,
            bells,
            shared.overload.clone(),
            &deps.supervisor,
        )
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let mut lanes = lanes::Lanes::new(&inputs, shared.cfg.max_connections_per_shard);
        let parts = inputs.into_iter().zip(deps.exchanges).zip(ports);
        for ((input, exchange), requests) in parts {
            let s = shard::spawn(shared.clone(), input, exchange, requests, &mut lanes)?;
            handoffs.push(s.handoff.clone());
            shard_stats.push(s.stats.clone());
            shards.push((s.control, s.waker, s.thread));
        }
        let peers = lanes.peers.clone();
        let (acceptor, local_addr) = acceptor::spawn(shared.clone(), handoffs)?;
        tracing::info!(%local_addr, shards = shards.len(), "gateway listening");
        if let Some(p) = &shared.cfg.proxy {
            let from: Vec<String> = p.allow.nets().iter().map(|n| n.to_string()).collect();
            tracing::info!(from = %from.join(","), header_timeout_ms = p.header_timeout_ns / 1_000_000,
                "PROXY protocol v2 required on the subscriber listener");
        }
        Ok(Gateway {
            requests: Some(request_service),
            shared,
            local_addr,
            acceptor: Some(acceptor),
            shards,
            shard_stats,
            peers,
        })
    }

    fn apply_account_limits(shared: &Shared) {
        let mut adm = shared.admission.lock().expect("admission lock");
        for (i, a) in shared.config.accounts.iter().enumerate() {
            let _ = adm.set_account_sessions_max(i as u32, a.max_sessions);
        }
    }

    /// Stops accepting: the listener is closed; existing sessions go on.
    pub fn stop_accepting(&mut self) {
        if let Some(a) = &self.acceptor {
            a.request_stop();
        }
        self.shared.accepting.store(false, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            a.stop();
        }
    }

    /// Requests queued or being served right now.
    pub fn requests_in_flight(&self) -> u64 {
        let o = self.shared.overload.snapshot();
        o.queue_depth + o.adaptive_inflight
    }

    /// Counters of the request path.
    pub fn request_stats(&self) -> Option<Arc<RequestStats>> {
        self.requests.as_ref().map(|r| r.stats.clone())
    }

    /// Sends every session Disconnect(shutdown) and closes them.
    pub fn disconnect_all(&self) {
        self.send(ShardControl::DisconnectAll);
    }

    /// Holds on `symbol` in shard `shard`'s interest: its own (one while
    /// any of its sessions subscribes) plus one per subscription of a
    /// session on its way to it. The engine gives the shard the symbol's
    /// prices while this is above zero.
    pub fn symbol_holds(&self, shard: usize, symbol: u16) -> u32 {
        self.peers.get(shard).map_or(0, |p| p.symbol_holds(symbol))
    }

    /// Asks shard 0 to move up to `sessions` logged-on sessions to the
    /// least busy other shards, as it does by itself when busy (`spill`).
    /// Only a shard 0 that runs the engine (`--threading shared`) moves
    /// any.
    pub fn spill(&self, sessions: u32) {
        if let Some((tx, waker, _)) = self.shards.first() {
            let _ = tx.send(ShardControl::Spill(sessions));
            let _ = waker.wake();
        }
    }

    fn send(&self, msg: ShardControl) {
        for (tx, waker, _) in &self.shards {
            let _ = tx.send(msg);
            let _ = waker.wake();
        }
    }

    /// Live sessions across shards.
    pub fn connections(&self) -> u64 {
        self.shared.stats.open.load(Ordering::Relaxed)
    }

    /// Stops everything and joins the threads.
    pub fn stop(mut self) {
        self.stop_accepting();
        for (_, _, t) in &self.shards {
            t.request_stop();
        }
        self.send(ShardControl::Stop);
        for (_, _, t) in self.shards.drain(..) {
            let _ = t.join();
        }
        if let Some(r) = self.requests.take() {
            r.stop();
        }
    }
}
