//! An in-process pricewire server on loopback for integration tests, and a
//! raw protocol connection for tests that must misbehave on purpose.
//!
//! `util::server`. Every wait is a
//! socket timeout or a bounded condition wait; nothing sleeps.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pricewire::client::{Client, ClientConfig, Event, SeqStatus};
use pricewire::config::Config;
use pricewire::feed::ingest::IngestConfig;
use pricewire::feed::synthetic::{SyntheticConfig, SyntheticFeed};
use pricewire::feed::TickSource;
use pricewire::gateway::{Gateway, GatewayConfig, GatewayStats, ShardStats};
use pricewire::overload::stats::OverloadStats;
use pricewire::pipeline::{Pipeline, PipelineConfig};
use pricewire::runtime::WaitStrategy;
use pricewire::service::{Service, ServiceConfig};
use pricewire::wire::{self, OwnedMessage, SERVER_FRAME_LEN_MAX, TIER_ACCOUNT_DEFAULT};

/// What to start.
pub struct ServerOpts {
    pub gateway: GatewayConfig,
    pub config: Config,
    pub shards: usize,
    pub rate_per_s: u64,
}

impl Default for ServerOpts {
    fn default() -> Self {
        ServerOpts {
            gateway: GatewayConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                // See `ingest_service_with`.
                loop_lag_target_ms: 0,
                ..Default::default()
            },
            config: Config::builtin(3),
            shards: 2,
            rate_per_s: 20_000,
        }
    }
}

/// The assembled service with no synthetic feed, the subscriber gateway and
/// the provider ingest listener on loopback ports (`config`: TOML naming
/// the ingest providers). Per-IP limits are lifted: every test client
/// connects from 127.0.0.1.
pub fn ingest_service(config: &str, pipeline: PipelineConfig, shard_wait: WaitStrategy) -> Service {
    ingest_service_with(config, pipeline, |g| g.shard_wait = shard_wait)
}

/// [`ingest_service`], with the gateway's settings adjusted by `gateway`.
pub fn ingest_service_with(
    config: &str,
    pipeline: PipelineConfig,
    gateway: impl FnOnce(&mut GatewayConfig),
) -> Service {
    ingest_service_tuned(config, pipeline, gateway, |_| {})
}

/// [`ingest_service_with`], with the whole service's settings (e.g. the
/// request path's) adjusted last by `service`.
pub fn ingest_service_tuned(
    config: &str,
    pipeline: PipelineConfig,
    gateway: impl FnOnce(&mut GatewayConfig),
    service: impl FnOnce(&mut ServiceConfig),
) -> Service {
    let config = Arc::new(Config::parse(config, 0).unwrap());
    let mut cfg = ServiceConfig::new(config);
    cfg.synthetic = None;
    cfg.pipeline = pipeline;
    let mut gw = GatewayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        // An in-process server shares this process's CPU with the test's
        // clients (and other tests): its loop lag measures the harness.
        // Loop-lag shedding is tested against the real binary
        // (tests/it/loop_lag_shed.rs, tests/it/herd_cpu_hog.rs).
        loop_lag_target_ms: 0,
        ..GatewayConfig::default()
    };
    gw.admission.ip_connect_rate_per_s = 10_000;
    gw.admission.ip_connect_burst = 10_000;
    gateway(&mut gw);
    cfg.gateway = Some(gw);
    cfg.ingest = Some(IngestConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        default_token: "unused".into(),
        wait: WaitStrategy::SpinPark,
        cpus: Default::default(),
        tls: None,
        auth: pricewire::auth::AuthLimits::feed_default(),
    });
    service(&mut cfg);
    Service::start(cfg).unwrap()
}

/// A running pipeline (synthetic feed) plus gateway.
pub struct TestServer {
    pub gateway: Option<Gateway>,
    pipeline: Option<Pipeline>,
    pub addr: SocketAddr,
    pub config: Arc<Config>,
}

impl TestServer {
    pub fn start() -> TestServer {
        Self::start_with(ServerOpts::default())
    }

    pub fn start_with(opts: ServerOpts) -> TestServer {
        let config = Arc::new(opts.config);
        let feed = SyntheticFeed::new(
            &config.table,
            SyntheticConfig {
                rate_per_s: opts.rate_per_s,
                seed: 7,
                // No silences or spikes: the tests look at sequencing.
                spike_ppm: 0,
                silence_ppm: 0,
            },
        );
        let sources: Vec<(String, Box<dyn TickSource>)> =
            vec![("synthetic".into(), Box::new(feed))];
        let pcfg = PipelineConfig {
            shards: opts.shards,
            ..Default::default()
        };
        let parts = Pipeline::start(
            &pcfg,
            &config,
            sources,
            Vec::new(),
            None,
            &Default::default(),
        )
        .expect("pipeline starts");
        let table = parts.pipeline.handles.table.clone();
        let gateway = Gateway::start(
            opts.gateway,
            config.clone(),
            table,
            parts.shards,
            Arc::new(OverloadStats::default()),
        )
        .expect("gateway starts");
        TestServer {
            addr: gateway.local_addr,
            gateway: Some(gateway),
            pipeline: Some(parts.pipeline),
            config,
        }
    }

    pub fn gateway(&self) -> &Gateway {
        self.gateway.as_ref().expect("running")
    }

    pub fn stats(&self) -> &GatewayStats {
        &self.gateway().shared.stats
    }

    pub fn shard_stats(&self) -> &[Arc<ShardStats>] {
        &self.gateway().shard_stats
    }

    /// Reads a gateway counter.
    pub fn stat(&self, f: impl Fn(&GatewayStats) -> &AtomicU64) -> u64 {
        f(self.stats()).load(Ordering::Relaxed)
    }

    pub fn symbol_id(&self, name: &str) -> u16 {
        self.config.table.by_name(name).expect("known symbol").id
    }

    /// Tells every session to come back later, then stops everything.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(g) = self.gateway.as_ref() {
            g.disconnect_all();
        }
        if let Some(mut p) = self.pipeline.take() {
            p.stop();
        }
        if let Some(g) = self.gateway.take() {
            g.stop();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub use super::wait::wait_until;

/// A raw connection speaking (or mis-speaking) the protocol by hand.
pub struct Raw {
    pub stream: TcpStream,
    buf: Vec<u8>,
    len: usize,
}

/// What [`Raw::next`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawRead {
    Msg(OwnedMessage),
    /// Nothing within the timeout.
    Timeout,
    /// The server closed (or reset) the connection.
    Closed,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        Raw::from_stream(TcpStream::connect(addr).expect("connect"))
    }

    /// A raw connection over a stream connected elsewhere (e.g. from a
    /// chosen source address).
    pub fn from_stream(stream: TcpStream) -> Raw {
        stream.set_nodelay(true).unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        Raw {
            stream,
            buf: vec![0u8; SERVER_FRAME_LEN_MAX],
            len: 0,
        }
    }

    /// Connects and logs on; panics unless LogonAccepted comes back.
    pub fn logon(addr: SocketAddr, account: &str, token: &str, heartbeat_ms: u32) -> Raw {
        let mut r = Raw::connect(addr);
        r.send_logon(account, token, heartbeat_ms);
        match r.next(Duration::from_secs(5)) {
            RawRead::Msg(OwnedMessage::LogonAccepted(_)) => r,
            other => panic!("expected LogonAccepted, got {other:?}"),
        }
    }

    pub fn send_logon(&mut self, account: &str, token: &str, heartbeat_ms: u32) {
        let m = wire::Logon {
            heartbeat_interval_ms: heartbeat_ms,
            account: account.as_bytes(),
            token: token.as_bytes(),
        };
        self.send_with(|b| wire::encode_logon(b, &m));
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    pub fn send_with(
        &mut self,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, wire::EncodeError>,
    ) {
        let mut b = [0u8; 4096];
        let n = encode(&mut b).expect("encode");
        self.send(&b[..n]);
    }

    /// The next message, or Timeout/Closed.
    pub fn next(&mut self, timeout: Duration) -> RawRead {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(n)) = wire::split_with_max(&self.buf[..self.len], SERVER_FRAME_LEN_MAX) {
                let msg = wire::decode(&self.buf[..n])
                    .expect("server frames decode")
                    .to_owned_message();
                self.buf.copy_within(n..self.len, 0);
                self.len -= n;
                return RawRead::Msg(msg);
            }
            let Some(left) = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                return RawRead::Timeout;
            };
            self.stream.set_read_timeout(Some(left)).unwrap();
            match self.stream.read(&mut self.buf[self.len..]) {
                Ok(0) => return RawRead::Closed,
                Ok(n) => self.len += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return RawRead::Timeout
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return RawRead::Closed,
            }
        }
    }

    /// Reads until `pred` matches a message (returned) or the connection
    /// closes / the time runs out (None). Every message seen is passed to
    /// `pred`.
    pub fn until(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&OwnedMessage) -> bool,
    ) -> Option<OwnedMessage> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left) {
                RawRead::Msg(m) if pred(&m) => return Some(m),
                RawRead::Msg(_) => {}
                RawRead::Timeout | RawRead::Closed => return None,
            }
        }
    }

    /// Reads to the end: every message until the server closes, or None
    /// if it did not close within `timeout`.
    pub fn read_to_close(&mut self, timeout: Duration) -> Option<Vec<OwnedMessage>> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left) {
                RawRead::Msg(m) => out.push(m),
                RawRead::Closed => return Some(out),
                RawRead::Timeout => return None,
            }
        }
    }
}

/// A well-behaved subscriber polled on its own thread.
pub struct Healthy {
    stop: Arc<AtomicBool>,
    updates: Arc<AtomicU64>,
    thread: JoinHandle<Vec<String>>,
}

impl Healthy {
    pub fn start(server: &TestServer) -> Healthy {
        Self::start_on(server, &["EURUSD", "GBPUSD"])
    }

    /// Subscribes to `symbols` at the account's default tier.
    pub fn start_on(server: &TestServer, symbols: &[&str]) -> Healthy {
        let mut c = Client::connect(ClientConfig::new(server.addr, "demo", "demo")).unwrap();
        c.subscribe_names(TIER_ACCOUNT_DEFAULT, symbols).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let updates = Arc::new(AtomicU64::new(0));
        let (s, u) = (stop.clone(), updates.clone());
        let thread = std::thread::spawn(move || {
            let mut problems = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match c.next_event(Duration::from_millis(50)) {
                    Ok(Some(Event::Price(p))) => match p.seq {
                        SeqStatus::InOrder => {
                            u.fetch_add(1, Ordering::Relaxed);
                        }
                        SeqStatus::Reset => {}
                        other => problems.push(format!("{other:?}")),
                    },
                    Ok(Some(Event::SubscribeResponse { .. }) | None) => {}
                    Ok(Some(other)) => problems.push(format!("{other:?}")),
                    Err(e) => problems.push(e.to_string()),
                }
            }
            problems
        });
        let h = Healthy {
            stop,
            updates,
            thread,
        };
        h.wait_for_updates(20);
        h
    }

    pub fn wait_for_updates(&self, more: u64) {
        let target = self.updates.load(Ordering::Relaxed) + more;
        assert!(
            wait_until(Duration::from_secs(5), || self
                .updates
                .load(Ordering::Relaxed)
                >= target),
            "the healthy session stopped receiving"
        );
    }

    /// After the bad peer is gone: still receiving, never disturbed.
    pub fn finish(self) {
        self.wait_for_updates(20);
        self.stop.store(true, Ordering::Relaxed);
        let problems = self.thread.join().unwrap();
        assert!(
            problems.is_empty(),
            "healthy session disturbed: {problems:?}"
        );
    }
}

/// `n` Subscribes to symbol 0 on the account's default tier, request ids
/// 0.., back to back in one buffer (a message flood in one write).
pub fn subscribe_burst(n: u64) -> Vec<u8> {
    let mut burst = Vec::new();
    for rid in 0..n {
        let mut f = [0u8; 64];
        let one = [wire::SymbolRef::by_id(0)];
        let k = wire::encode_subscribe(&mut f, rid, wire::TIER_ACCOUNT_DEFAULT, one).unwrap();
        burst.extend_from_slice(&f[..k]);
    }
    burst
}
