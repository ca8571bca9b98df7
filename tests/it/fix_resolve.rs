//! One LP whose host name does not resolve never stops a server: the real
//! binary starts, turns ready and serves the prices of the LP that does
//! answer, while the unresolvable one is retried under its session's
//! backoff, counted (`result="unresolved"`) and logged once; and a
//! process that runs no feed (`--role edge`) reads none of the LPs'
//! secrets and resolves none of their names.

use crate::util::nats;
use crate::util::net;
use crate::util::wait;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use pricewire::client::{Client, ClientConfig, Event};
use pricewire::feed::fix::sim::{FixSim, SimConfig, SimSymbol};
use pricewire::wire::TIER_ACCOUNT_DEFAULT;

const WAIT: Duration = Duration::from_secs(30);

/// Two FIX providers: `lp-a` at `a_host:a_port`, `lp-b` at `b_host`, each
/// with its Logon password in a variable of its own.
fn config(a_host: &str, a_port: u16, b_host: &str) -> String {
    let provider = |name: &str, host: &str, port: u16| {
        format!(
            "[[providers]]\nname = \"{name}\"\nkind = \"fix\"\n[providers.fix]\n\
             host = \"{host}\"\nport = {port}\nsender_comp_id = \"PRICEWIRE\"\n\
             target_comp_id = \"{name}\"\nsymbols = {{ \"EUR/USD\" = \"EURUSD\" }}\n\
             reconnect_base_ms = 20\nreconnect_cap_ms = 200\nstagger_ms = 0\n\
             password_env = \"PW_TEST_{}_PASSWORD\"\n",
            name.replace('-', "_").to_uppercase()
        )
    };
    format!(
        "[[instruments]]\nname = \"EURUSD\"\ndigits = 5\n{}{}",
        provider("lp-a", a_host, a_port),
        provider("lp-b", b_host, 9878)
    )
}

fn metric(ops: std::net::SocketAddr, line: &str) -> u64 {
    net::http_body(ops, "/metrics")
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix(line))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn an_lp_name_that_does_not_resolve_never_stops_a_standalone_server() {
    let lp = FixSim::start(SimConfig::new(vec![SimSymbol::new(
        "EUR/USD", "1.08120", 5, 8,
    )]))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pricewire.toml");
    // RFC 6761: `.invalid` never resolves.
    std::fs::write(
        &path,
        config("127.0.0.1", lp.addr().port(), "lp-b.pricewire.invalid"),
    )
    .unwrap();
    let (listen, ops) = (net::free_addr(), net::free_addr());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.args(["serve", "--no-synthetic", "--config"])
        .arg(&path)
        .args([
            "--listen",
            &listen.to_string(),
            "--ops-listen",
            &ops.to_string(),
        ])
        .env("PW_TEST_LP_A_PASSWORD", "a-secret")
        .env("PW_TEST_LP_B_PASSWORD", "b-secret")
        .stderr(Stdio::piped());
    let mut server = net::start_ready(&mut cmd, ops);
    let mut c = Client::connect(ClientConfig::new(listen, "demo", "demo")).unwrap();
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD"])
        .unwrap();
    let priced = wait::wait_until(WAIT, || {
        matches!(
            c.next_event(Duration::from_millis(50)),
            Ok(Some(Event::Price(_)))
        )
    });
    assert!(priced, "no EURUSD price from lp-a");
    let unresolved = "pricewire_fix_connects_total{provider=\"lp-b\",result=\"unresolved\"} ";
    let retried = wait::wait_until(WAIT, || metric(ops, unresolved) >= 3);
    assert!(retried, "lp-b's lookups are not retried and counted");
    let failed = "pricewire_fix_connects_total{provider=\"lp-b\",result=\"failed\"} ";
    assert!(
        metric(ops, failed) >= 3,
        "an unresolved name is a failed connect"
    );
    assert_eq!(
        metric(
            ops,
            "pricewire_fix_connects_total{provider=\"lp-a\",result=\"unresolved\"} "
        ),
        0
    );
    net::signal(server.0.id(), "-TERM");
    let mut err = String::new();
    server
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = server.0.wait().unwrap();
    assert!(status.success(), "{status:?}\n{err}");
    let warned = err.matches("does not resolve").count();
    assert_eq!(warned, 1, "logged once, not at every retry:\n{err}");
    assert!(err.contains("lp-b.pricewire.invalid"), "{err}");
}

#[test]
fn an_edge_reads_no_lp_secret_and_resolves_no_lp_name() {
    let node = nats::NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pricewire.toml");
    // Neither variable is set and neither name resolves: an edge needs
    // nothing of the feeds.
    std::fs::write(
        &path,
        config("lp-a.pricewire.invalid", 9878, "lp-b.pricewire.invalid"),
    )
    .unwrap();
    let (listen, ops) = (net::free_addr(), net::free_addr());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.args(["serve", "--role", "edge", "--bus", &node.url(), "--config"])
        .arg(&path)
        .args([
            "--listen",
            &listen.to_string(),
            "--ops-listen",
            &ops.to_string(),
        ])
        .env_remove("PW_TEST_LP_A_PASSWORD")
        .env_remove("PW_TEST_LP_B_PASSWORD");
    let _edge = net::start_ready(&mut cmd, ops);
    assert_eq!(
        metric(
            ops,
            "pricewire_fix_connects_total{provider=\"lp-a\",result=\"attempted\"} "
        ),
        0
    );
    // The same file is still refused where the feeds run.
    let out = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["serve", "--role", "core", "--bus", &node.url(), "--config"])
        .arg(&path)
        .args(["--ops-listen", &net::free_addr().to_string()])
        .env_remove("PW_TEST_LP_A_PASSWORD")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PW_TEST_LP_A_PASSWORD"), "{err}");
}
