//! Capacity refusals on a TLS listener: within the refusal handshake
//! budget a refused client gets Disconnect(busy) with a retry-after over
//! TLS (from a shard at its connection cap, and from admission's per-IP
//! cap); beyond the budget it is closed during the handshake, counted as
//! `bare`, and the SDK treats that close as retryable with jittered
//! backoff.

use crate::util::pki;
use crate::util::server;
use crate::util::wait;

use std::sync::Arc;
use std::time::Duration;

use pricewire::client::reconnect::{DisconnectInfo, ReconnectPolicy};
use pricewire::client::tls::ClientTls;
use pricewire::client::{Client, ClientConfig, ClientError, DisconnectCause};
use pricewire::gateway::GatewayConfig;
use pricewire::resilience::backoff::Backoff;
use pricewire::runtime::tls::{RefusalOutcome, TlsAcceptor, TlsFiles, TlsStats};
use pricewire::wire::DisconnectReason;
use server::{ServerOpts, TestServer};

struct Tls {
    _dir: tempfile::TempDir,
    acceptor: Arc<TlsAcceptor>,
    client: ClientTls,
}

fn tls() -> Tls {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki::Ca::new("refusal CA");
    let files = pki::ServerFiles::write(dir.path(), &ca);
    let ca_file = pki::write_ca(dir.path(), "ca.pem", &ca);
    let acceptor = TlsAcceptor::new(
        "subscriber",
        TlsFiles {
            cert: files.cert.clone(),
            key: files.key.clone(),
            client_ca: None,
        },
        5_000,
    )
    .unwrap();
    let client = ClientTls::from_ca_file(&ca_file, "127.0.0.1").unwrap();
    Tls {
        _dir: dir,
        acceptor,
        client,
    }
}

fn client_config(addr: std::net::SocketAddr, tls: &Tls) -> ClientConfig {
    let mut cfg = ClientConfig::new(addr, "demo", "demo");
    cfg.tls = Some(tls.client.clone());
    cfg.backoff = Backoff::new(20, 200);
    cfg.rng_seed = Some(1);
    cfg
}

fn start(tls: &Tls, edit: impl FnOnce(&mut GatewayConfig)) -> TestServer {
    let mut opts = ServerOpts {
        shards: 1,
        ..Default::default()
    };
    opts.gateway.tls = Some(tls.acceptor.clone());
    edit(&mut opts.gateway);
    TestServer::start_with(opts)
}

fn expect_busy(r: Result<Client, ClientError>, retry_min_ms: u32) {
    match r {
        Err(ClientError::Refused {
            reason,
            retry_after_ms,
            ..
        }) => {
            assert_eq!(reason, DisconnectReason::BUSY);
            assert!(retry_after_ms >= retry_min_ms, "{retry_after_ms}");
        }
        Err(e) => panic!("expected Refused(busy), got {e}"),
        Ok(_) => panic!("the cap let another session in"),
    }
}

fn refusals(s: &TlsStats, o: RefusalOutcome) -> u64 {
    s.refusals(o)
}

#[test]
fn a_tls_listener_at_its_connection_cap_refuses_with_disconnect_busy() {
    let tls = tls();
    let server = start(&tls, |g| g.max_connections_per_shard = 1);
    let retry_min = GatewayConfig::default().admission.retry_after.min_ms;
    let _first = Client::connect(client_config(server.addr, &tls)).unwrap();
    // The shard has no slot: it hands the link to the acceptor, which
    // completes the handshake and sends the Disconnect over TLS.
    expect_busy(Client::connect(client_config(server.addr, &tls)), retry_min);
    expect_busy(Client::connect(client_config(server.addr, &tls)), retry_min);
    let stats = tls.acceptor.stats();
    // Counted once the refusal is written and closed, which may be just
    // after the client read it.
    wait::expect(Duration::from_secs(10), "two busy refusals counted", || {
        refusals(stats, RefusalOutcome::Busy) == 2
    });
    assert_eq!(refusals(stats, RefusalOutcome::Bare), 0);
    // The session that holds the slot is untouched.
    assert_eq!(
        server.gateway.as_ref().unwrap().shard_stats[0]
            .connections
            .get(),
        1
    );
}

#[test]
fn beyond_the_refusal_budget_a_tls_client_is_closed_bare_and_backs_off() {
    let tls = tls();
    let server = start(&tls, |g| {
        g.admission.ip_connections_max = 1;
        g.tls_busy_handshakes_per_s = 1;
    });
    let retry_min = GatewayConfig::default().admission.retry_after.min_ms;
    let _first = Client::connect(client_config(server.addr, &tls)).unwrap();
    // The one refusal handshake of this second.
    expect_busy(Client::connect(client_config(server.addr, &tls)), retry_min);
    // The next is closed before the handshake completes.
    let source = match Client::connect(client_config(server.addr, &tls)) {
        Err(ClientError::Unreachable { source, .. }) => source,
        Err(e) => panic!("expected a close during the handshake, got {e}"),
        Ok(_) => panic!("the cap let another session in"),
    };
    assert!(
        source.to_string().contains("during the TLS handshake"),
        "{source}"
    );
    let stats = tls.acceptor.stats();
    assert_eq!(refusals(stats, RefusalOutcome::Busy), 1);
    assert_eq!(refusals(stats, RefusalOutcome::Bare), 1);
    // What the SDK does with that close when it is reconnecting: retry,
    // after a jittered delay that grows with the attempts.
    let info = DisconnectInfo::new(&DisconnectCause::Io(source.kind()), 0);
    assert!(info.retry, "{source}");
    let backoff = Backoff::new(100, 10_000);
    let mut policy = ReconnectPolicy::new(backoff, 100, 10_000);
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(5);
    let delays: Vec<u64> = (0..8)
        .map(|_| policy.next_delay(0, &info, &mut rng).expect("retried"))
        .collect();
    let distinct: std::collections::BTreeSet<_> = delays.iter().collect();
    assert!(distinct.len() > 4, "jittered: {delays:?}");
    assert!(delays.iter().all(|&d| d <= 10_000), "{delays:?}");
    assert!(
        delays[4..].iter().sum::<u64>() > delays[..4].iter().sum::<u64>(),
        "grows: {delays:?}"
    );
    // A second later the budget has a handshake again (no sleep: the
    // refusal is retried until the bucket refilled, bounded).
    assert!(wait::wait_until(Duration::from_secs(5), || {
        matches!(
            Client::connect(client_config(server.addr, &tls)),
            Err(ClientError::Refused { .. })
        )
    }));
    // Counted once the refusal is written and closed, which may be just
    // after the client read it.
    wait::expect(Duration::from_secs(10), "two busy refusals counted", || {
        refusals(stats, RefusalOutcome::Busy) == 2
    });
}
