//! Flags of the subscriber gateway and the provider ingest listener.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::ArgsError;
use crate::feed::ingest::IngestConfig;
use crate::gateway::outbound::{
    HIGH_WATER_BYTES_DEFAULT, LOW_WATER_BYTES_DEFAULT, OUT_CAP_BYTES_DEFAULT,
};
use crate::gateway::tls_refusal::{
    TLS_BUSY_HANDSHAKES_PER_S_DEFAULT, TLS_BUSY_HANDSHAKES_PER_S_MAX,
};
use crate::gateway::{GatewayConfig, DRAIN_DEFAULT, LISTEN_DEFAULT};
use crate::runtime::proxy::{
    AllowList, Cidr, ProxyProtocol, HEADER_TIMEOUT_MS_DEFAULT, PENDING_MAX,
};
use crate::runtime::tls::{TlsAcceptor, TlsFiles, HANDSHAKE_TIMEOUT_MS_DEFAULT};
use crate::runtime::WaitStrategy;

/// The TLS side of each listener, loaded once at start-up (and reloaded
/// on SIGHUP); `None` is plaintext.
#[derive(Debug, Clone, Default)]
pub struct ListenerTls {
    /// The subscriber listener's.
    pub subscriber: Option<Arc<TlsAcceptor>>,
    /// The provider ingest listener's.
    pub feed: Option<Arc<TlsAcceptor>>,
}

impl ListenerTls {
    /// Every acceptor there is (for a reload).
    pub fn all(&self) -> impl Iterator<Item = &Arc<TlsAcceptor>> {
        self.subscriber.iter().chain(self.feed.iter())
    }
}

/// Largest per-second rate accepted by the gateway's rate flags.
pub const RATE_PER_S_MAX: u64 = 10_000_000;

/// Refuses a rate of 0 (a bucket that never refills) or above `max`.
pub(crate) fn check_rate(flag: &str, rate: u64, max: u64) -> Result<(), ArgsError> {
    if rate == 0 || rate > max {
        return Err(ArgsError::value(
            flag,
            rate,
            format!("must be 1..={max} per second (0 would admit the burst and then nothing)"),
        ));
    }
    Ok(())
}

/// Gateway and ingest flags of `pricewire serve`.
#[derive(Debug, Clone, Args)]
pub struct GatewayArgs {
    /// Subscriber listen address.
    #[arg(long, default_value = LISTEN_DEFAULT, value_name = "ADDR")]
    pub listen: SocketAddr,

    /// Run without the subscriber listener (prices go to measuring sinks).
    #[arg(long)]
    pub no_listen: bool,

    /// Provider ingest listen address, where bridges push quotes. Off when
    /// absent.
    #[arg(long, value_name = "ADDR")]
    pub feed_listen: Option<SocketAddr>,

    /// PEM certificate chain, leaf first, for the listeners' TLS. With it the
    /// subscriber listener and the provider ingest listener use TLS (rustls).
    /// Without it both are plaintext (loopback, or TLS ended by a balancer).
    /// Read again on SIGHUP: new handshakes get the new chain, open sessions go
    /// on.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Deadline of a TLS handshake after accept, in ms. A TLS handshake not
    /// finished this long after accept is cut and counted
    /// (pricewire_tls_handshake_failures_total{reason="timeout"}), 100..=60000.
    #[arg(long, default_value_t = HANDSHAKE_TIMEOUT_MS_DEFAULT, value_name = "MS")]
    pub tls_handshake_timeout_ms: u64,

    /// Refused TLS connections per second still told Disconnect(busy). On the
    /// TLS subscriber listener, connections refused for capacity that still get
    /// a handshake and Disconnect(busy) with a retry-after, per second (and at
    /// once); beyond it a refused connection is closed before any TLS work.
    /// 0..=1024; 0 closes every refusal bare.
    #[arg(long, default_value_t = TLS_BUSY_HANDSHAKES_PER_S_DEFAULT, value_name = "N")]
    pub tls_busy_handshakes_per_s: u32,

    /// Expect a PROXY protocol v2 header on every subscriber connection. For
    /// running behind an L4 balancer: every connection must open with a v2
    /// header (before TLS) from a peer in --proxy-from, and the header's source
    /// address is what per-IP limits, lockouts, logs and metrics see. Off by
    /// default.
    #[arg(long, requires = "proxy_from")]
    pub proxy_protocol: bool,

    /// Networks of the balancers trusted to send PROXY headers.
    /// Comma-separated, e.g. 10.0.0.0/8,fd00::/8; a bare address is one host. A
    /// connection from anywhere else is closed (a header would let it pick its
    /// own address). Required by --proxy-protocol.
    #[arg(
        long,
        value_name = "CIDR[,CIDR...]",
        value_delimiter = ',',
        requires = "proxy_protocol"
    )]
    pub proxy_from: Vec<Cidr>,

    /// Deadline of a connection's PROXY header after accept, in ms. A
    /// connection without a complete PROXY header this long after accept is
    /// closed and counted
    /// (pricewire_proxy_header_failures_total{reason="timeout"}), 100..=60000.
    #[arg(long, default_value_t = HEADER_TIMEOUT_MS_DEFAULT, value_name = "MS")]
    pub proxy_header_timeout_ms: u64,

    /// Connections at most waiting for their PROXY header at once (1..=65536).
    /// One more is refused (Disconnect(busy) on plaintext) and counted
    /// (pricewire_proxy_header_failures_total{reason="overflow"}).
    #[arg(long, default_value_t = PENDING_MAX, value_name = "N")]
    pub proxy_pending_max: usize,

    /// PEM CAs that provider bridges' client certificates must chain to. PEM CA
    /// certificates: provider bridges must present a client certificate chain
    /// from one of them (needs --tls-cert).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub feed_tls_client_ca: Option<PathBuf>,

    /// Keep the provider ingest listener plaintext while subscribers use TLS.
    /// For bridges on loopback.
    #[arg(long, conflicts_with = "feed_tls_client_ca")]
    pub feed_plaintext: bool,

    /// Shared ingest token for providers without their own (loopback only).
    /// Token accepted at ProviderLogon for providers without their own, on a
    /// loopback --feed-listen only (a clear, shared value; from the network
    /// each provider needs its own hashed token). On the command line `ps`
    /// shows it (a warning says so unless it is the default `demo-feed`):
    /// prefer --ingest-token-file or PRICEWIRE_INGEST_TOKEN.
    #[arg(long, value_name = "TOKEN", conflicts_with = "ingest_token_file")]
    pub ingest_token: Option<String>,

    /// File whose first line is the shared ingest token (chmod 600).
    /// Without it and --ingest-token: PRICEWIRE_INGEST_TOKEN, else
    /// `demo-feed`.
    #[arg(long, value_name = "PATH")]
    pub ingest_token_file: Option<PathBuf>,

    /// Brute-force lockout and argon2 verifier flags.
    #[command(flatten)]
    pub auth: super::auth_args::AuthArgs,

    /// Outbound low water mark per connection, in bytes.
    #[arg(long, default_value_t = LOW_WATER_BYTES_DEFAULT, value_name = "BYTES")]
    pub low_water_bytes: usize,

    /// Outbound high water mark per connection, in bytes. Above it the
    /// connection is conflated.
    #[arg(long, default_value_t = HIGH_WATER_BYTES_DEFAULT, value_name = "BYTES")]
    pub high_water_bytes: usize,

    /// Hard cap of a connection's outbound buffer, in bytes.
    #[arg(long, default_value_t = OUT_CAP_BYTES_DEFAULT, value_name = "BYTES")]
    pub out_cap_bytes: usize,

    /// Kernel send buffer per connection (`SO_SNDBUF`), in bytes. With 0 the
    /// kernel's auto-tuning is kept (megabytes on loopback), else
    /// 4096..=67108864 (the kernel doubles it for its bookkeeping). The bound
    /// of the queue the water marks cannot empty.
    #[arg(long, default_value_t = crate::gateway::sendq::SNDBUF_BYTES_DEFAULT, value_name = "BYTES")]
    pub sndbuf_bytes: usize,

    /// Descriptors kept free of subscriber connections (32..=65536). The soft
    /// descriptor limit is raised to the hard one at start, and a connection is
    /// refused with Disconnect(busy) once open connections reach the limit less
    /// this reserve, which is left for the ops listener, probes, scrapes, the
    /// bus, feeds and files.
    #[arg(long, default_value_t = crate::gateway::FD_RESERVE_DEFAULT, value_name = "COUNT")]
    pub fd_reserve: u64,

    /// Time above the high water mark before a slow consumer is cut, in ms.
    /// Above the high water mark for longer than this → disconnected as a slow
    /// consumer.
    #[arg(long, default_value_t = 5_000, value_name = "MS")]
    pub slow_consumer_ms: u64,

    /// Most updates per second per subscription (0 = unlimited). A subscription
    /// gets at most one price per 1/N s; a price arriving sooner is held (only
    /// the latest) and sent at the next slot, as a snapshot flagged conflated
    /// if prices were skipped. The limit of every account without its own
    /// `max_update_hz` (config file). 0 = unlimited; else 1..=1000.
    #[arg(long, default_value_t = 0, value_name = "HZ")]
    pub max_update_hz: u32,

    /// Loop lag above which a shard counts as lagging, in ms. While its loop
    /// runs later than this (three 100-ms windows in a row; ends after ten at
    /// or below it) it sends only the latest price per symbol; when the lag is
    /// its own work (not a host that starves it of CPU) it also sheds: new
    /// connections go to another shard, logons beyond a paced 200/s get
    /// LogonRejected(busy), and requests of its heaviest accounts get
    /// Reject(overloaded). 0 = never shed.
    #[arg(long, default_value_t = crate::gateway::lag::LOOP_LAG_TARGET_MS_DEFAULT, value_name = "MS")]
    pub loop_lag_target_ms: u64,

    /// Longest a price may wait in each of the shard's queues, in ms.
    /// On the engine ring, and again in a connection's outbound buffer
    /// (1..=60000): a price older than that at either gate is not sent, so
    /// it reaches the socket at most about twice this after this process
    /// received it; the subscriber's next price for that symbol is the
    /// latest, as a snapshot flagged conflated. Also the longest bytes may
    /// wait in a connection's queues (its outbound buffer and kernel send
    /// queue) before it stops taking updates.
    #[arg(long, default_value_t = crate::gateway::fresh::PRICE_AGE_MAX_MS_DEFAULT, value_name = "MS")]
    pub price_age_max_ms: u64,

    /// How long a price may wait unwritten before newer ones replace it, µs.
    /// While a connection's price for a symbol waits in its outbound buffer
    /// longer than this (a long shard turn, a socket that took no more),
    /// each newer price of that symbol overwrites it in place, so one write
    /// carries each symbol's latest once (a snapshot, flagged conflated when
    /// it replaced a price). 0 merges at once; 0..=60000000.
    #[arg(long, default_value_t = crate::gateway::fresh::MERGE_AFTER_US_DEFAULT, value_name = "US")]
    pub merge_after_us: u64,

    /// Shard 0's busy share at which it drains request-heavy sessions, in %.
    /// Draining moves (`--threading shared`, with the spill on): at the end of
    /// a 50-ms window in which shard 0 was busy at least this share of the time
    /// (1-100) and spent --shard0-drain-request-share-pct of that on request
    /// work, the session that sent the most requests (at least
    /// --shard0-drain-min-requests) is held and moved away.
    #[arg(long, default_value_t = DRAIN_DEFAULT.busy_permille / 10, value_name = "PCT")]
    pub shard0_drain_busy_pct: u32,

    /// Share of shard 0's busy time on requests at which it drains, in %. Share
    /// of shard 0's busy time spent on request work (1-100) at or above which
    /// it drains a request-heavy session.
    #[arg(long, default_value_t = DRAIN_DEFAULT.request_share_permille / 10, value_name = "PCT")]
    pub shard0_drain_request_share_pct: u32,

    /// Requests in one 50-ms window that make a session drainable. Requests a
    /// session must have sent in one 50-ms window to be drained off shard 0
    /// (1..=100000), with two or more in flight at the window's end or as many
    /// in the window before (a one-at-a-time burst is not drained).
    #[arg(long, default_value_t = DRAIN_DEFAULT.min_requests, value_name = "N")]
    pub shard0_drain_min_requests: u32,

    /// Longest a drained session is held waiting for its answers, in ms. Range
    /// 1..=5000; then the hold is aborted and the session is read again where
    /// it is.
    #[arg(long, default_value_t = DRAIN_DEFAULT.wait_ns / 1_000_000, value_name = "MS")]
    pub shard0_drain_abort_ms: u64,

    /// Heartbeat interval offered to clients that ask for 0, in milliseconds.
    #[arg(long, default_value_t = 1_000, value_name = "MS")]
    pub heartbeat_ms: u32,

    /// A peer silent for this many heartbeat intervals is dead.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub dead_after_heartbeats: u32,

    /// A client must log on within this time, in milliseconds.
    #[arg(long, default_value_t = 5_000, value_name = "MS")]
    pub logon_timeout_ms: u64,

    /// A started frame must complete within this time, in milliseconds.
    #[arg(long, default_value_t = 5_000, value_name = "MS")]
    pub frame_timeout_ms: u64,

    /// Largest frame a client may send, in bytes.
    #[arg(long, default_value_t = 16 * 1024, value_name = "BYTES")]
    pub max_frame_bytes: usize,

    /// Connections per shard at most (two shards: a 100,000-terminal edge).
    #[arg(long, default_value_t = crate::gateway::MAX_CONNECTIONS_PER_SHARD_DEFAULT, value_name = "N")]
    pub max_connections_per_shard: usize,

    /// Subscriptions per session at most.
    #[arg(long, default_value_t = 1_024, value_name = "N")]
    pub max_subscriptions: usize,

    /// Inbound messages per second per connection. Range 1..=10000000; 0 is
    /// refused (it would admit the burst and then nothing).
    #[arg(long, default_value_t = 200, value_name = "PER_S")]
    pub msg_rate_per_s: u32,

    /// Burst of inbound messages per connection.
    #[arg(long, default_value_t = 400, value_name = "N")]
    pub msg_burst: u32,

    /// Refusals in a row after which a connection is cut as a flood. The cut is
    /// Disconnect(message_flood); the refusals are messages its message rate
    /// refused, and messages it sent inside a Reject(rate_limited)'s
    /// retry-after. 1..=1000000.
    #[arg(long, default_value_t = crate::gateway::FLOOD_DISCONNECT_AFTER_DEFAULT, value_name = "N")]
    pub flood_disconnect_after: u32,

    /// Refused frames allowed per --bad-frame-window-ms before a disconnect.
    /// Refused frames (bad body, unknown template, unexpected message) a
    /// logged-on connection may send within --bad-frame-window-ms; one more →
    /// Disconnect(protocol_error).
    #[arg(long, default_value_t = crate::gateway::BAD_FRAME_LIMIT_DEFAULT, value_name = "N")]
    pub bad_frame_limit: u32,

    /// Window of --bad-frame-limit, from the first refused frame, in ms.
    #[arg(long, default_value_t = crate::gateway::BAD_FRAME_WINDOW_MS_DEFAULT, value_name = "MS")]
    pub bad_frame_window_ms: u64,

    /// Accepted connections per second (admission token bucket rate). Range
    /// 1..=10000000; 0 is refused (it would admit the burst and then nothing).
    #[arg(long, default_value_t = crate::admission::ACCEPT_RATE_PER_S_DEFAULT, value_name = "PER_S")]
    pub accept_rate_per_s: u32,

    /// Accept burst.
    #[arg(long, default_value_t = crate::admission::ACCEPT_BURST_DEFAULT, value_name = "N")]
    pub accept_burst: u32,

    /// Logons per second. Range 1..=10000000; 0 is refused (it would admit the
    /// burst and then nothing).
    #[arg(long, default_value_t = crate::admission::LOGON_RATE_PER_S_DEFAULT, value_name = "PER_S")]
    pub logon_rate_per_s: u32,

    /// First subscriptions per second. Range 1..=10000000; 0 is refused (it
    /// would admit the burst and then nothing).
    #[arg(long, default_value_t = crate::admission::FIRST_SUBSCRIBE_RATE_PER_S_DEFAULT, value_name = "PER_S")]
    pub first_subscribe_rate_per_s: u32,

    /// Symbol-list requests per second. Range 1..=10000000; 0 is refused (it
    /// would admit the burst and then nothing).
    #[arg(long, default_value_t = crate::admission::SYMBOL_LIST_RATE_PER_S_DEFAULT, value_name = "PER_S")]
    pub symbol_list_rate_per_s: u32,

    /// Concurrent connections per client IP.
    #[arg(long, default_value_t = crate::admission::IP_CONNECTIONS_MAX_DEFAULT, value_name = "N")]
    pub ip_connections_max: u32,

    /// Connection-attempt burst per client IP.
    #[arg(long, default_value_t = crate::admission::IP_CONNECT_BURST_DEFAULT, value_name = "N")]
    pub ip_connect_burst: u32,

    /// Lower end of the retryAfterMs window of busy refusals, in ms. The window
    /// is sent with Disconnect(busy) and admission rejects.
    #[arg(long, default_value_t = crate::admission::ADMISSION_RETRY_WINDOW_DEFAULT.min_ms, value_name = "MS")]
    pub busy_retry_min_ms: u32,

    /// Upper end of the retryAfterMs window of busy refusals, in ms. The window
    /// is sent with Disconnect(busy) and admission rejects.
    #[arg(long, default_value_t = crate::admission::ADMISSION_RETRY_WINDOW_DEFAULT.max_ms, value_name = "MS")]
    pub busy_retry_max_ms: u32,

    /// Connection attempts per second per client IP. Range 1..=10000000; 0 is
    /// refused (it would admit the burst and then nothing).
    #[arg(long, default_value_t = crate::admission::IP_CONNECT_RATE_PER_S_DEFAULT, value_name = "PER_S")]
    pub ip_connect_rate_per_s: u32,
}

impl GatewayArgs {
    /// The gateway config, or `None` when `--no-listen`.
    pub fn gateway_config(
        &self,
        shard_wait: WaitStrategy,
        cpus: &crate::runtime::CpuMap,
    ) -> Result<Option<GatewayConfig>, ArgsError> {
        if self.no_listen {
            return Ok(None);
        }
        self.check_rates()?;
        let mut c = GatewayConfig {
            listen: self.listen,
            low_water_bytes: self.low_water_bytes,
            high_water_bytes: self.high_water_bytes,
            out_cap_bytes: self.out_cap_bytes,
            sndbuf_bytes: self.sndbuf_bytes,
            fd_reserve: self.fd_reserve,
            slow_consumer_ms: self.slow_consumer_ms,
            loop_lag_target_ms: self.loop_lag_target_ms,
            price_age_max_ms: self.price_age_max_ms,
            merge_after_us: self.merge_after_us,
            max_update_hz: self.max_update_hz,
            drain_busy_permille: self.shard0_drain_busy_pct.saturating_mul(10),
            drain_request_share_permille: self.shard0_drain_request_share_pct.saturating_mul(10),
            drain_min_requests: self.shard0_drain_min_requests,
            drain_abort_ms: self.shard0_drain_abort_ms,
            heartbeat_ms: self.heartbeat_ms,
            dead_after_heartbeats: self.dead_after_heartbeats,
            logon_timeout_ms: self.logon_timeout_ms,
            frame_timeout_ms: self.frame_timeout_ms,
            max_frame_bytes: self.max_frame_bytes,
            max_connections_per_shard: self.max_connections_per_shard,
            max_subscriptions: self.max_subscriptions,
            msg_rate_per_s: self.msg_rate_per_s,
            msg_burst: self.msg_burst,
            flood_disconnect_after: self.flood_disconnect_after,
            bad_frame_limit: self.bad_frame_limit,
            bad_frame_window_ms: self.bad_frame_window_ms,
            shard_wait,
            cpus: cpus.clone(),
            auth: self.auth.limits()?,
            ..GatewayConfig::default()
        };
        let a = &mut c.admission;
        a.accept_rate_per_s = self.accept_rate_per_s;
        a.accept_burst = self.accept_burst;
        a.logon_rate_per_s = self.logon_rate_per_s;
        a.first_subscribe_rate_per_s = self.first_subscribe_rate_per_s;
        a.symbol_list_rate_per_s = self.symbol_list_rate_per_s;
        a.ip_connections_max = self.ip_connections_max;
        a.ip_connect_rate_per_s = self.ip_connect_rate_per_s;
        a.ip_connect_burst = self.ip_connect_burst;
        a.retry_after =
            crate::admission::RetryWindow::new(self.busy_retry_min_ms, self.busy_retry_max_ms);
        c.heartbeat_min_ms = c.heartbeat_min_ms.min(self.heartbeat_ms);
        c.proxy = self.proxy_protocol()?;
        let per_s = self.tls_busy_handshakes_per_s;
        if per_s > TLS_BUSY_HANDSHAKES_PER_S_MAX {
            return Err(ArgsError::value(
                "--tls-busy-handshakes-per-s",
                per_s,
                format!("must be 0..={TLS_BUSY_HANDSHAKES_PER_S_MAX}"),
            ));
        }
        c.tls_busy_handshakes_per_s = per_s;
        c.validate().map_err(ArgsError::invalid)?;
        Ok(Some(c))
    }

    /// The PROXY protocol settings, `None` when off.
    fn proxy_protocol(&self) -> Result<Option<Arc<ProxyProtocol>>, ArgsError> {
        if !self.proxy_protocol {
            return Ok(None);
        }
        let ms = self.proxy_header_timeout_ms;
        if !(100..=60_000).contains(&ms) {
            return Err(ArgsError::value(
                "--proxy-header-timeout-ms",
                ms,
                "must be 100..=60000",
            ));
        }
        if self.proxy_from.is_empty() {
            return Err(ArgsError::flag(
                "--proxy-protocol needs --proxy-from CIDR[,CIDR...]",
                "the balancers trusted to send PROXY headers",
            ));
        }
        let pending = self.proxy_pending_max;
        if !(1..=65_536).contains(&pending) {
            return Err(ArgsError::value(
                "--proxy-pending-max",
                pending,
                "must be 1..=65536",
            ));
        }
        let mut proxy = ProxyProtocol::new(AllowList::new(self.proxy_from.clone()), ms);
        proxy.pending_max = pending;
        Ok(Some(Arc::new(proxy)))
    }

    /// Every per-second rate: 0 would let the burst through and then
    /// nothing ever again, so it is refused, as is a rate above
    /// [`RATE_PER_S_MAX`] (no limit in effect; a typo).
    pub(crate) fn check_rates(&self) -> Result<(), ArgsError> {
        let rates = [
            ("--msg-rate-per-s", self.msg_rate_per_s),
            ("--accept-rate-per-s", self.accept_rate_per_s),
            ("--logon-rate-per-s", self.logon_rate_per_s),
            (
                "--first-subscribe-rate-per-s",
                self.first_subscribe_rate_per_s,
            ),
            ("--symbol-list-rate-per-s", self.symbol_list_rate_per_s),
            ("--ip-connect-rate-per-s", self.ip_connect_rate_per_s),
        ];
        for (flag, rate) in rates {
            check_rate(flag, u64::from(rate), RATE_PER_S_MAX)?;
        }
        Ok(())
    }

    /// Loads the TLS files of each listener that gets TLS; an unreadable
    /// or invalid file is refused naming its flag.
    pub fn listener_tls(&self) -> Result<ListenerTls, ArgsError> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(ListenerTls::default());
        };
        // The private key is a secret file like a token file: the same
        // warning when group or others may read it.
        if let Some(w) = super::secret::loose_file_warning("--tls-key", key) {
            eprintln!("warning: {w}");
        }
        let ms = self.tls_handshake_timeout_ms;
        if !(100..=60_000).contains(&ms) {
            return Err(ArgsError::value(
                "--tls-handshake-timeout-ms",
                ms,
                "must be 100..=60000",
            ));
        }
        let files = TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: None,
        };
        let subscriber = (!self.no_listen)
            .then(|| TlsAcceptor::new("subscriber", files.clone(), ms))
            .transpose()
            .map_err(|e| ArgsError::refused("--tls-cert/--tls-key", e))?;
        let feed_files = TlsFiles {
            client_ca: self.feed_tls_client_ca.clone(),
            ..files
        };
        let feed = (self.feed_listen.is_some() && !self.feed_plaintext)
            .then(|| TlsAcceptor::new("feed", feed_files, ms))
            .transpose()
            .map_err(|e| ArgsError::refused("--tls-cert/--tls-key/--feed-tls-client-ca", e))?;
        Ok(ListenerTls { subscriber, feed })
    }

    /// The ingest listener's settings, or `None` without --feed-listen;
    /// reads the shared token (see [`super::secret::ingest_token`]).
    pub(crate) fn ingest_config(
        &self,
        wait: WaitStrategy,
        cpus: &crate::runtime::CpuMap,
    ) -> Result<Option<IngestConfig>, ArgsError> {
        let Some(listen) = self.feed_listen else {
            return Ok(None);
        };
        let default_token = super::secret::ingest_token(
            ("--ingest-token", self.ingest_token.as_deref()),
            ("--ingest-token-file", self.ingest_token_file.as_deref()),
        )?;
        Ok(Some(IngestConfig {
            listen,
            default_token,
            wait,
            cpus: cpus.clone(),
            tls: None,
            auth: self.auth.feed_limits()?,
        }))
    }
}
