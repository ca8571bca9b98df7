//! What the bus thread allocates per price, on a core and on an edge,
//! over plain TCP and over TLS.
//!
//! The engine side of a core's ring allocates nothing (the engine's own
//! zero-allocation tests hold), and neither does the bus thread's NATS
//! client in steady state: publishing on a core (lease renewals and
//! heartbeats included) and receiving on an edge (heartbeats included),
//! TLS records sealed and opened included. This counts every allocation
//! in the process with a counting allocator over a steady window and
//! requires exactly 0, printing the figure (`--nocapture`). One test in
//! this binary, so nothing else allocates meanwhile.

#[path = "util/alloc.rs"]
mod alloc;
#[path = "util/nats.rs"]
mod nats;
#[path = "util/net.rs"]
mod net;
#[path = "util/pki.rs"]
mod pki;
#[path = "util/wait.rs"]
mod wait;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use pricewire::bus::security::{BusAuth, BusTls};
use pricewire::bus::{BusConfig, BusRole};
use pricewire::config::Config;
use pricewire::feed::synthetic::SyntheticConfig;
use pricewire::pipeline::PipelineConfig;
use pricewire::service::{Service, ServiceConfig};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// Prices in the measured window (at least).
const WINDOW_PRICES: u64 = 30_000;
/// The window lasts at least this long, so a core's holds a lease renewal
/// (one every third of the default 3-s period).
const WINDOW_MIN: Duration = Duration::from_millis(1_200);
const WAIT: Duration = Duration::from_secs(30);

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Heartbeats (sent by a core, taken by an edge) the window holds at
/// least.
const WINDOW_BEATS: u64 = 2;

/// Allocations in the process over the next `n` steps of `count` (and at
/// least [`WINDOW_MIN`] and [`WINDOW_BEATS`] steps of `beats`), and the
/// steps of each taken.
fn allocations_over(count: impl Fn() -> u64, n: u64, beats: impl Fn() -> u64) -> [u64; 3] {
    let t0 = std::time::Instant::now();
    let (a0, c0, b0) = (alloc::allocations(), count(), beats());
    let done = || count() >= c0 + n && t0.elapsed() >= WINDOW_MIN && beats() >= b0 + WINDOW_BEATS;
    assert!(wait::wait_until(WAIT, done), "stalled");
    let (a1, c1, b1) = (alloc::allocations(), count(), beats());
    [a1 - a0, c1 - c0, b1 - b0]
}

fn core_allocations(bus: &BusConfig) -> [u64; 3] {
    let mut cfg = ServiceConfig::new(Arc::new(Config::builtin(3)));
    cfg.synthetic = Some(SyntheticConfig {
        rate_per_s: 20_000,
        ..SyntheticConfig::default()
    });
    cfg.pipeline = PipelineConfig {
        shards: 1,
        ..PipelineConfig::default()
    };
    cfg.bus = Some(BusRole::Core(bus.clone()));
    let core = Service::start(cfg).unwrap();
    let st = core.bus.as_ref().unwrap().stats().clone();
    let published = || st.published.get();
    assert!(wait::wait_until(WAIT, || published() >= 5_000), "warm-up");
    let beats = || st.heartbeats_sent.get();
    let counted = allocations_over(published, WINDOW_PRICES, beats);
    core.stop();
    counted
}

fn edge_allocations(bus: &BusConfig) -> [u64; 3] {
    // The core in its own process: only the edge allocates here.
    let ca = bus.tls.as_ref().map(|t| t.ca.display().to_string());
    let tls: Vec<&str> = ca
        .iter()
        .flat_map(|ca| ["--bus-tls-ca", ca.as_str()])
        .collect();
    let _core = Kill(
        Command::new(env!("CARGO_BIN_EXE_pricewire"))
            .args(["serve", "--role", "core", "--threading", "dedicated"])
            .args(["--bus", &bus.servers.join(","), "--bus-prefix", &bus.prefix])
            .args(&tls)
            .args(["--synthetic-rate", "20000"])
            .args(["--ops-listen", &net::free_addr().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut cfg = ServiceConfig::new(Arc::new(Config::builtin(3)));
    cfg.synthetic = None;
    cfg.bus = Some(BusRole::Edge(bus.clone()));
    let edge = Service::start(cfg).unwrap();
    let st = edge.bus.as_ref().unwrap().stats().clone();
    let received = || st.received.get();
    assert!(wait::wait_until(WAIT, || received() >= 5_000), "warm-up");
    let beats = || st.heartbeats_received.get();
    let counted = allocations_over(received, WINDOW_PRICES, beats);
    edge.stop();
    counted
}

/// Core and edge allocations over `url`'s server with `tls`; `what` names
/// the run in the figures.
fn measure(what: &str, url: &str, tls: Option<BusTls>) {
    let bus = |prefix: String| {
        BusConfig::parse(url, &prefix, 1)
            .and_then(|b| b.with_security(BusAuth::None, tls.clone(), false))
            .unwrap()
    };
    let [core, published, sent] = core_allocations(&bus(format!("{what}1")));
    let [edge, received, taken] = edge_allocations(&bus(format!("{what}2")));
    eprintln!(
        "bus allocations ({what}): core {core} over {published} prices and {sent} heartbeats \
         published, edge {edge} over {received} prices and {taken} heartbeats received"
    );
    assert_eq!(
        core, 0,
        "{what} core: {core} allocations over {published} prices"
    );
    assert_eq!(
        edge, 0,
        "{what} edge: {edge} allocations over {received} prices"
    );
}

#[test]
fn the_bus_thread_allocates_nothing_per_price_in_steady_state() {
    let node = nats::NatsServer::start();
    measure("plain", &node.url(), None);
    drop(node);
    // TLS required by the server, verified by the client.
    let dir = tempfile::tempdir().unwrap();
    let ca = pki::Ca::new("pw-alloc-ca");
    let ca_file = pki::write_ca(dir.path(), "ca", &ca);
    let files = pki::ServerFiles::write(dir.path(), &ca);
    let conf = format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n}}\n",
        files.cert.display(),
        files.key.display()
    );
    let node = nats::NatsServer::start_with(&conf);
    let tls = BusTls {
        ca: ca_file,
        client: None,
    };
    measure("tls", &format!("tls://{}", node.client_addr()), Some(tls));
}
