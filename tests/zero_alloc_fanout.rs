//! Proof that the gateway's fan-out path allocates nothing per price update
//! in the steady state: 120 subscribers on real loopback sockets, each
//! subscribed to every symbol, read by one in-process thread; after warm-up
//! a window of at least 500,000 price frames copied into connection
//! buffers and written to sockets must see zero allocations on any thread.
//! A third of the subscribers log on to an account limited to 10 updates/s
//! (`max_update_hz`): their prices are held in the shard's pace groups and
//! sent to every member at the group's slot within the same window, with
//! the same zero.

#[path = "util/alloc.rs"]
mod alloc;
#[path = "util/wait.rs"]
mod wait;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pricewire::config::Config;
use pricewire::feed::synthetic::SyntheticConfig;
use pricewire::gateway::GatewayConfig;
use pricewire::pipeline::PipelineConfig;
use pricewire::runtime::WaitStrategy;
use pricewire::service::{Service, ServiceConfig};
use pricewire::wire;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

const SUBSCRIBERS: usize = 120;
/// Subscribers of the rate-limited account (the first ones).
const PACED: usize = 40;

/// Two accounts on every symbol: `demo` unlimited, `paced` at 10 Hz.
const CONFIG: &str = r#"
# Clear tokens: a loopback test (docs/security.md).
insecure_plain_tokens = true
[[accounts]]
name = "demo"
token = "demo"
tiers = ["standard"]
[[accounts]]
name = "paced"
token = "paced"
tiers = ["standard"]
max_update_hz = 10
"#;
const WINDOW_FRAMES: u64 = 500_000;

fn subscriber(addr: std::net::SocketAddr, names: &[String], account: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let mut buf = [0u8; 4096];
    let logon = wire::Logon {
        heartbeat_interval_ms: 30_000,
        account: account.as_bytes(),
        token: account.as_bytes(),
    };
    let n = wire::encode_logon(&mut buf, &logon).unwrap();
    s.write_all(&buf[..n]).unwrap();
    let n = wire::encode_subscribe_names(
        &mut buf,
        1,
        wire::TIER_ACCOUNT_DEFAULT,
        names.iter().map(String::as_str),
    )
    .unwrap();
    s.write_all(&buf[..n]).unwrap();
    s.set_nonblocking(true).unwrap();
    s
}

/// Every subscriber connects from 127.0.0.1: lift the per-IP limits.
fn gateway_config() -> GatewayConfig {
    let mut c = GatewayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..GatewayConfig::default()
    };
    c.admission.ip_connect_rate_per_s = 10_000;
    c.admission.ip_connect_burst = 10_000;
    c.admission.ip_connections_max = 10_000;
    c
}

/// The service with one shard, the synthetic feed at 20,000 ticks/s and
/// the gateway.
fn start_service(config: Arc<Config>) -> Service {
    Service::start(ServiceConfig {
        config,
        pipeline: PipelineConfig {
            shards: 1,
            feed_wait: WaitStrategy::SpinPark,
            engine_wait: WaitStrategy::SpinPark,
            ..PipelineConfig::default()
        },
        synthetic: Some(SyntheticConfig {
            rate_per_s: 20_000,
            ..SyntheticConfig::default()
        }),
        sources: Vec::new(),
        gateway: Some(gateway_config()),
        ingest: None,
        shard_wait: WaitStrategy::SpinPark,
        recorder: None,
        requests: Default::default(),
        refdata: None,
        bus: None,
        supervisor: Default::default(),
    })
    .unwrap()
}

/// One reader drains every socket into a fixed buffer (no allocation)
/// until told to stop; it returns the number of sockets it read.
fn spawn_reader(
    mut socks: Vec<TcpStream>,
) -> (
    Arc<AtomicBool>,
    Arc<AtomicU64>,
    std::thread::JoinHandle<usize>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let read_bytes = Arc::new(AtomicU64::new(0));
    let (stop2, bytes2) = (stop.clone(), read_bytes.clone());
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while !stop2.load(Ordering::Relaxed) {
            for s in socks.iter_mut() {
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    bytes2.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            std::thread::yield_now();
        }
        socks.len()
    });
    (stop, read_bytes, reader)
}

#[test]
fn fan_out_to_many_subscribers_allocates_nothing() {
    let config = Arc::new(Config::parse(CONFIG, 3).unwrap());
    let names: Vec<String> = config
        .table
        .instruments()
        .iter()
        .map(|i| i.name.clone())
        .collect();
    let service = start_service(config.clone());
    let gw = service.gateway.as_ref().unwrap();
    assert!(gw.local_addr.ip().is_loopback());
    let addr = gw.local_addr;
    let shard = gw.shard_stats[0].clone();
    let account = |k: usize| if k < PACED { "paced" } else { "demo" };
    let socks: Vec<TcpStream> = (0..SUBSCRIBERS)
        .map(|k| subscriber(addr, &names, account(k)))
        .collect();

    let (stop, read_bytes, reader) = spawn_reader(socks);

    assert!(
        wait::wait_until(Duration::from_secs(60), || {
            shard.connections.get() == SUBSCRIBERS as u64
                && shard.prices_out.get() > 200_000
                && shard.paced_released.get() > 1_000
        }),
        "warm-up: {} connections, {} frames",
        shard.connections.get(),
        shard.prices_out.get()
    );
    let before_allocs = alloc::allocations();
    let before = shard.prices_out.get();
    let (held_before, released_before) = (shard.paced_held.get(), shard.paced_released.get());
    let reached = wait::wait_until(Duration::from_secs(120), || {
        shard.prices_out.get() >= before + WINDOW_FRAMES
    });
    let allocs = alloc::allocations() - before_allocs;
    let frames = shard.prices_out.get() - before;
    let held = shard.paced_held.get() - held_before;
    let released = shard.paced_released.get() - released_before;

    stop.store(true, Ordering::Relaxed);
    assert_eq!(reader.join().unwrap(), SUBSCRIBERS);
    let conflated = shard.conflated.get();
    service.stop();
    assert!(reached, "only {frames} frames in the window");
    assert!(read_bytes.load(Ordering::Relaxed) > 0);
    eprintln!("window: {frames} frames, {allocs} allocations, {held} held, {released} released");
    // The rate-limited path ran in the window: prices held (once per pace
    // group: one per symbol of the 40 paced subscribers) and released (to
    // each member).
    assert!(
        held > 1_000 && released > 100,
        "{held} held, {released} released in the window"
    );
    assert_eq!(
        allocs, 0,
        "{allocs} allocations while {frames} price frames were fanned out ({conflated} conflated, \
         {held} held and {released} released by the 10-Hz limit)"
    );
}
