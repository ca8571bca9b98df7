//! The ops listener over real loopback sockets: probes follow the health
//! state, /metrics parses as Prometheus text, bad requests are refused.

use pricewire::clock::ManualClock;
use pricewire::ops::metrics::{catalogue, HistogramSnapshot, LATENCY_BUCKETS_S};
use pricewire::ops::{Health, OpsHandle, OpsServer, OpsServerConfig, Registry};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

const IO_TIMEOUT: Duration = Duration::from_secs(5);

struct Answer {
    status: u16,
    head: String,
    body: String,
}

fn send(addr: SocketAddr, request: &[u8]) -> Answer {
    let mut s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s.write_all(request).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw)
        .expect("server closes after the answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a complete HTTP message");
    let status = head[9..12].parse().expect("status code");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .parse()
        .unwrap();
    assert_eq!(length, body.len(), "Content-Length matches the body");
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

fn get(addr: SocketAddr, path: &str) -> Answer {
    send(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes(),
    )
}

fn start(config: OpsServerConfig) -> (Arc<ManualClock>, Arc<Health>, Registry, OpsHandle) {
    let clock = ManualClock::new(0);
    let health = Health::new(clock.clone(), 1_000);
    let registry = Registry::new();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let server = OpsServer::spawn_with(addr, health.clone(), registry.clone(), config).unwrap();
    (clock, health, registry, server)
}

#[test]
fn probes_follow_the_lifecycle() {
    let (clock, health, _registry, server) = start(OpsServerConfig::default());
    let addr = server.local_addr();

    assert_eq!(get(addr, "/livez").status, 200);
    assert_eq!(
        get(addr, "/startupz").status,
        503,
        "starting: not started yet"
    );
    assert_eq!(get(addr, "/readyz").status, 503);

    health.set_serving();
    assert_eq!(get(addr, "/startupz").status, 200);
    let ready = get(addr, "/readyz");
    assert_eq!(ready.status, 200);
    assert!(ready.head.contains("Connection: close"));

    health.begin_draining();
    let draining = get(addr, "/readyz");
    assert_eq!(
        draining.status, 503,
        "readiness fails at once when draining"
    );
    assert_eq!(draining.body.trim(), "draining");
    assert_eq!(
        get(addr, "/livez").status,
        200,
        "a draining process is alive"
    );

    clock.advance_ms(1_001);
    assert_eq!(get(addr, "/livez").status, 503, "no heartbeat: not alive");
    health.beat();
    assert_eq!(get(addr, "/livez").status, 200);

    assert_eq!(server.stats().answered("/readyz", 503), 2);
    server.stop();
}

#[test]
fn metrics_parse_and_contain_registered_series() {
    let (_clock, health, registry, server) = start(OpsServerConfig::default());
    health.set_serving();
    let ticks = Arc::new(AtomicU64::new(1234));
    registry
        .register_counter(catalogue::TICKS_RECEIVED, &[("provider", "lp1")], ticks)
        .unwrap();
    let occupancy = Arc::new(AtomicU64::new(17));
    registry
        .register_gauge(
            catalogue::RING_OCCUPANCY,
            &[("ring", "feed_engine")],
            occupancy,
        )
        .unwrap();
    let snap = HistogramSnapshot {
        buckets: LATENCY_BUCKETS_S
            .iter()
            .map(|&b| (b, if b >= 1e-5 { 3 } else { 0 }))
            .collect(),
        count: 4,
        sum: 0.25,
    };
    registry
        .register_histogram_fn(catalogue::TICK_TO_PUBLISH_LATENCY, &[], move || {
            snap.clone()
        })
        .unwrap();

    let answer = get(server.local_addr(), "/metrics");
    assert_eq!(answer.status, 200);
    assert!(answer
        .head
        .contains("Content-Type: text/plain; version=0.0.4"));
    let lines = answer.body.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid exposition");

    let find = |name: &str| scrape.samples.iter().find(|s| s.metric == name);
    let ticks = find("pricewire_ticks_received_total").expect("ticks series");
    assert_eq!(ticks.labels.get("provider"), Some("lp1"));
    assert_eq!(ticks.value, prometheus_parse::Value::Counter(1234.0));
    assert_eq!(
        find("pricewire_ring_occupancy").unwrap().value,
        prometheus_parse::Value::Gauge(17.0)
    );
    let hist = find("pricewire_tick_to_publish_latency_seconds").expect("histogram");
    let prometheus_parse::Value::Histogram(buckets) = &hist.value else {
        panic!("not parsed as a histogram: {:?}", hist.value);
    };
    assert_eq!(
        buckets.len(),
        LATENCY_BUCKETS_S.len() + 1,
        "bounds plus +Inf"
    );
    assert_eq!(buckets.last().unwrap().count, 4.0);
    let state = scrape
        .samples
        .iter()
        .find(|s| s.metric == "pricewire_health_state" && s.labels.get("state") == Some("serving"))
        .expect("health state registered by the server");
    assert_eq!(state.value, prometheus_parse::Value::Gauge(1.0));
    // An answer is counted after its body is built, so the next scrape
    // shows the first one.
    let again = get(server.local_addr(), "/metrics").body;
    assert!(again.contains("pricewire_ops_http_requests_total{path=\"/metrics\",code=\"200\"} 1"));
    server.stop();
}

#[test]
fn bad_requests_are_refused_and_others_still_served() {
    let config = OpsServerConfig {
        read_timeout_ms: 300,
        request_head_max_bytes: 512,
        ..OpsServerConfig::default()
    };
    let (_clock, _health, _registry, server) = start(config);
    let addr = server.local_addr();

    let post = send(addr, b"POST /readyz HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(post.status, 405);
    assert!(post.head.contains("Allow: GET"));
    assert_eq!(get(addr, "/nope").status, 404);
    assert_eq!(send(addr, b"GARBAGE\r\n\r\n").status, 400);
    let huge = format!("GET /livez HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(1024));
    assert_eq!(send(addr, huge.as_bytes()).status, 431);

    // A client that connects and sends nothing is dropped after the read
    // timeout; it does not hold the listener.
    let mut silent = TcpStream::connect_timeout(&addr, IO_TIMEOUT).unwrap();
    silent.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    assert_eq!(
        get(addr, "/livez").status,
        200,
        "served while another client idles"
    );
    let mut buf = [0u8; 16];
    assert_eq!(
        silent.read(&mut buf).unwrap_or(0),
        0,
        "idle client closed without an answer"
    );
    server.stop();
}

#[test]
fn stop_closes_the_listener() {
    let (_clock, _health, _registry, server) = start(OpsServerConfig::default());
    let addr = server.local_addr();
    assert_eq!(get(addr, "/livez").status, 200);
    server.stop();
    assert!(
        TcpStream::connect_timeout(&addr, IO_TIMEOUT).is_err(),
        "port closed after stop"
    );
}

#[test]
fn full_worker_queue_is_answered_503_at_once() {
    // One worker and a queue of one: of four idle clients at most two are
    // held (one read by the worker, one queued); the rest get 503 at once.
    let config = OpsServerConfig {
        workers: 1,
        queue_max: 1,
        read_timeout_ms: 2_000,
        ..OpsServerConfig::default()
    };
    let (_clock, _health, _registry, server) = start(config);
    let addr = server.local_addr();
    let clients: Vec<TcpStream> = (0..4)
        .map(|_| {
            let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).unwrap();
            s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
            s
        })
        .collect();
    let busy = clients
        .into_iter()
        .filter(|mut s| {
            let mut raw = String::new();
            let _ = s.read_to_string(&mut raw);
            raw.starts_with("HTTP/1.1 503")
        })
        .count();
    assert!(busy >= 2, "{busy} of 4 refused");
    assert_eq!(server.stats().rejected() as usize, busy);
    server.stop();
}
