//! Shared helpers of the bus tests (`tests/bus_*.rs`): in-process cores
//! and edges over real nats-server processes, SDK subscribers, and
//! `pricewire serve` child processes.
//!
//! `util::bus`. Every wait is a bounded condition; nothing sleeps.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use pricewire::bus::{BusConfig, BusRole};
use pricewire::client::{Client, ClientConfig, Event, SeqStatus};
use pricewire::config::Config;
use pricewire::feed::synthetic::SyntheticConfig;
use pricewire::gateway::GatewayConfig;
use pricewire::model::price_flags;
use pricewire::pipeline::PipelineConfig;
use pricewire::runtime::WaitStrategy;
use pricewire::service::{Service, ServiceConfig};
use pricewire::wire::TIER_ACCOUNT_DEFAULT;

use super::wait::wait_until;

pub const SYMBOLS: [&str; 2] = ["EURUSD", "GBPUSD"];
pub const WAIT: Duration = Duration::from_secs(15);

pub fn config() -> Arc<Config> {
    Arc::new(Config::builtin(3))
}

pub fn bus(urls: &str, prefix: &str, replicas: usize) -> BusConfig {
    BusConfig::parse(urls, prefix, replicas).unwrap()
}

pub fn core(bus: BusConfig, rate_per_s: u64) -> Service {
    let mut cfg = ServiceConfig::new(config());
    cfg.synthetic = Some(SyntheticConfig {
        rate_per_s,
        ..SyntheticConfig::default()
    });
    cfg.pipeline = PipelineConfig {
        shards: 1,
        ..PipelineConfig::default()
    };
    cfg.bus = Some(BusRole::Core(bus));
    Service::start(cfg).expect("core starts")
}

pub fn edge(bus: BusConfig) -> Service {
    let mut cfg = ServiceConfig::new(config());
    cfg.synthetic = None;
    cfg.pipeline = PipelineConfig {
        shards: 2,
        ..PipelineConfig::default()
    };
    let mut gw = GatewayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        shard_wait: WaitStrategy::SpinPark,
        ..GatewayConfig::default()
    };
    gw.admission.ip_connect_rate_per_s = 10_000;
    gw.admission.ip_connect_burst = 10_000;
    cfg.gateway = Some(gw);
    cfg.bus = Some(BusRole::Edge(bus));
    Service::start(cfg).expect("edge starts")
}

pub fn published(core: &Service) -> u64 {
    core.bus.as_ref().unwrap().stats().published.get()
}

/// One subscriber's view: (symbol, seq) → (bid, ask, flags), in order.
#[derive(Default)]
pub struct Seen {
    pub prices: Vec<(u16, u64, i64, i64, u8, SeqStatus)>,
}

impl Seen {
    pub fn by_key(&self) -> BTreeMap<(u16, u64), (i64, i64)> {
        self.prices
            .iter()
            .map(|&(s, q, b, a, _, _)| ((s, q), (b, a)))
            .collect()
    }

    pub fn updates(&self) -> usize {
        self.prices.len()
    }

    /// Per symbol, sequence numbers only go up (an edge that lost its bus
    /// may repeat the last one as a stale snapshot, and once more without
    /// the flag when it hears the bus again; a client that reconnected
    /// gets the one it holds again, resumed); every skip in an update is
    /// flagged.
    pub fn assert_ordered_and_gaps_flagged(&self, who: &str) {
        let mut last: BTreeMap<u16, u64> = BTreeMap::new();
        let mut was_stale: BTreeMap<u16, bool> = BTreeMap::new();
        for &(s, q, _, _, flags, st) in &self.prices {
            let stale = flags & price_flags::STALE != 0;
            let stale_before = was_stale.insert(s, stale).unwrap_or(false);
            if let Some(&l) = last.get(&s) {
                let restated = q == l && st == SeqStatus::Reset && (stale || stale_before);
                let resumed = q == l && st == SeqStatus::Resumed;
                assert!(
                    q > l || restated || resumed,
                    "{who}: symbol {s} went from {l} to {q} (flags {flags:#x}, {st:?}, \
                     stale before: {stale_before}): {:?}",
                    self.prices.iter().filter(|p| p.0 == s).collect::<Vec<_>>()
                );
                // A snapshot (Reset) is an explicit resync, not a gap.
                if q > l + 1 && st != SeqStatus::Reset {
                    assert_ne!(
                        flags & price_flags::CONFLATED,
                        0,
                        "{who}: symbol {s} skipped {l} -> {q} unflagged ({st:?})"
                    );
                }
            }
            last.insert(s, q);
        }
    }
}

pub fn subscriber(edge: &Service) -> Client {
    let addr = edge.gateway.as_ref().unwrap().local_addr;
    let mut c = Client::connect(ClientConfig::new(addr, "demo", "demo")).unwrap();
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &SYMBOLS).unwrap();
    c
}

/// Reads prices until `done` holds (bounded by [`WAIT`]).
pub fn read_until(c: &mut Client, seen: &mut Seen, mut done: impl FnMut(&Seen) -> bool) -> bool {
    wait_until(WAIT, || {
        if let Ok(Some(Event::Price(p))) = c.next_event(Duration::from_millis(20)) {
            let b = p.body;
            seen.prices
                .push((b.symbol_id, b.seq, b.bid, b.ask, b.flags, p.seq));
        }
        done(seen)
    })
}

pub fn table_view(e: &Service) -> Vec<(u64, i64, i64)> {
    let t = &e.pipeline.handles.table;
    (0..e.config.table.len() as u16)
        .map(|s| t.read(s, 0).map_or((0, 0, 0), |p| (p.seq, p.bid, p.ask)))
        .collect()
}

/// A `pricewire serve` in its own process (so it can be killed as in a
/// crash, and probed over its ops listener).
pub struct ServeProcess {
    pub child: std::process::Child,
    pub ops: std::net::SocketAddr,
}

impl ServeProcess {
    pub fn start(urls: &str, prefix: &str, lease_ms: u64) -> ServeProcess {
        let lease = lease_ms.to_string();
        let flags = ["--bus-lease-ms", &lease, "--synthetic-rate", "2000"];
        ServeProcess::core(urls, prefix, &flags)
    }

    /// A core process (dedicated threading) with `flags` added.
    pub fn core(urls: &str, prefix: &str, flags: &[&str]) -> ServeProcess {
        let ops = free_addr();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_pricewire"))
            .args(["serve", "--role", "core", "--threading", "dedicated"])
            .args(["--bus", urls, "--bus-prefix", prefix])
            .args(flags)
            .args(["--ops-listen", &ops.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        ServeProcess { child, ops }
    }

    /// An edge process serving subscribers on `listen`, with a max age of
    /// a minute (no stale flags while a test holds its core still).
    pub fn edge(urls: &str, prefix: &str, listen: std::net::SocketAddr) -> ServeProcess {
        let ops = free_addr();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_pricewire"))
            .args([
                "serve",
                "--role",
                "edge",
                "--bus",
                urls,
                "--bus-prefix",
                prefix,
            ])
            .args(["--bus-max-age-ms", "60000"])
            .args(["--listen", &listen.to_string()])
            .args(["--ops-listen", &ops.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        ServeProcess { child, ops }
    }

    /// `pricewire_bus_messages_total{event=...}` from /metrics (0 if the
    /// ops listener is not up yet).
    pub fn bus_count(&self, event: &str) -> u64 {
        self.metric("pricewire_bus_messages_total", event)
    }

    /// `family{event=...}` from /metrics (0 if the ops listener is not up
    /// yet or the series is missing).
    pub fn metric(&self, family: &str, event: &str) -> u64 {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect_timeout(&self.ops, Duration::from_secs(1))
        else {
            return 0;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        let line = format!("{family}{{event=\"{event}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&line))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn free_addr() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}
