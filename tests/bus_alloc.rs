//! What the bus thread allocates per price, on a core and on an edge.
//!
//! The engine side of a core's ring allocates nothing (the engine's own
//! zero-allocation tests hold); the NATS client does, on the bus thread.
//! This measures it with a counting allocator over a steady window and
//! holds it to a small bound, printing the figure (`--nocapture`). One
//! test in this binary, so nothing else allocates meanwhile.

#[path = "util/alloc.rs"]
mod alloc;
#[path = "util/nats.rs"]
mod nats;
#[path = "util/net.rs"]
mod net;
#[path = "util/wait.rs"]
mod wait;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use pricewire::bus::{BusConfig, BusRole};
use pricewire::config::Config;
use pricewire::feed::synthetic::SyntheticConfig;
use pricewire::pipeline::PipelineConfig;
use pricewire::service::{Service, ServiceConfig};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// Allocations per price the bus thread may make (measured: see the
/// printed figure and docs/scale-out.md).
const ALLOCS_PER_PRICE_MAX: f64 = 4.0;
const WINDOW_PRICES: u64 = 10_000;
const WAIT: Duration = Duration::from_secs(30);

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Allocations per step of `count` over the next `n` steps.
fn per_step(count: impl Fn() -> u64, n: u64) -> f64 {
    let (a0, c0) = (alloc::allocations(), count());
    assert!(wait::wait_until(WAIT, || count() >= c0 + n), "stalled");
    let (a1, c1) = (alloc::allocations(), count());
    (a1 - a0) as f64 / (c1 - c0) as f64
}

fn core_per_price(bus: &BusConfig) -> f64 {
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
    let per = per_step(published, WINDOW_PRICES);
    core.stop();
    per
}

fn edge_per_price(node: &nats::NatsServer, bus: &BusConfig) -> f64 {
    // The core in its own process: only the edge allocates here.
    let _core = Kill(
        Command::new(env!("CARGO_BIN_EXE_pricewire"))
            .args(["serve", "--role", "core", "--threading", "dedicated"])
            .args(["--bus", &node.url(), "--bus-prefix", &bus.prefix])
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
    let per = per_step(received, WINDOW_PRICES);
    edge.stop();
    per
}

#[test]
fn the_bus_thread_allocates_a_bounded_few_times_per_price() {
    let node = nats::NatsServer::start();
    let core = core_per_price(&BusConfig::parse(&node.url(), "alloc1", 1).unwrap());
    let edge = edge_per_price(&node, &BusConfig::parse(&node.url(), "alloc2", 1).unwrap());
    eprintln!("bus allocations per price: core {core:.2}, edge {edge:.2}");
    assert!(core <= ALLOCS_PER_PRICE_MAX, "core: {core:.2} per price");
    assert!(edge <= ALLOCS_PER_PRICE_MAX, "edge: {edge:.2} per price");
}
