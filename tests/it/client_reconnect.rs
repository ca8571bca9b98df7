//! Client resilience over real loopback TCP: reconnect after a reset
//! (fault proxy) and after a server restart, logon and resubscribe each
//! time; dead-server detection; an unreachable server.

use crate::util::server;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use pricewire::admission::RetryWindow;
use pricewire::client::{Client, ClientConfig, ClientError, DisconnectCause, Event, SeqStatus};
use pricewire::feed::bridge::Bridge;
use pricewire::gateway::GatewayConfig;
use pricewire::model::Tick;
use pricewire::resilience::backoff::Backoff;
use pricewire::resilience::proxy::{FaultProxy, Toxic, ToxicKind};
use pricewire::wire::{
    self, DisconnectReason, LogonAccepted, PriceKind, SubscribeStatus, TIER_ACCOUNT_DEFAULT,
};
use server::{ServerOpts, TestServer};

const T: Duration = Duration::from_secs(5);

fn fast_config(addr: std::net::SocketAddr) -> ClientConfig {
    let mut cfg = ClientConfig::new(addr, "demo", "demo");
    cfg.backoff = Backoff::new(20, 200);
    cfg.rng_seed = Some(1);
    cfg
}

/// Reads events until `pred` matches one (returned); panics after `T`.
fn until(c: &mut Client, what: &str, mut pred: impl FnMut(&Event) -> bool) -> Event {
    let deadline = Instant::now() + T;
    while Instant::now() < deadline {
        if let Some(ev) = c.next_event(Duration::from_millis(100)).unwrap() {
            if pred(&ev) {
                return ev;
            }
        }
    }
    panic!("no {what} within {T:?}");
}

/// After a (re)logon: the resubscription is answered, a snapshot resets
/// the sequence and updates follow in order.
fn expect_resubscribed(c: &mut Client, symbol: u16) {
    expect_resubscribed_as(c, symbol, &[SeqStatus::Reset]);
}

/// [`expect_resubscribed`] with the snapshot's status one of `statuses`.
fn expect_resubscribed_as(c: &mut Client, symbol: u16, statuses: &[SeqStatus]) {
    let ev = until(c, "SubscribeResponse", |e| {
        matches!(e, Event::SubscribeResponse { .. })
    });
    let Event::SubscribeResponse { results, .. } = ev else {
        unreachable!()
    };
    assert!(results.iter().all(|r| r.status == SubscribeStatus::OK));
    let ev = until(c, "snapshot", |e| e.price().is_some());
    let p = ev.price().unwrap();
    assert_eq!((p.kind, p.body.symbol_id), (PriceKind::Snapshot, symbol));
    assert!(statuses.contains(&p.seq), "{:?} not in {statuses:?}", p.seq);
    until(c, "an in-order update", |e| {
        e.price().is_some_and(|p| p.seq == SeqStatus::InOrder)
    });
}

#[test]
fn reset_connection_reconnects_logs_on_and_resubscribes() {
    let server = TestServer::start();
    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), server.addr).unwrap();
    let mut c = Client::connect(fast_config(proxy.local_addr())).unwrap();
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD"])
        .unwrap();
    let eur = server.symbol_id("EURUSD");
    expect_resubscribed(&mut c, eur);

    proxy.set_toxic(Toxic::Reset);
    let ev = until(&mut c, "Disconnected", |e| {
        matches!(e, Event::Disconnected { .. })
    });
    let Event::Disconnected {
        cause,
        reconnect_in_ms,
        ..
    } = ev
    else {
        unreachable!()
    };
    assert!(
        matches!(cause, DisconnectCause::Io(_) | DisconnectCause::PeerClosed),
        "{cause:?}"
    );
    let delay = reconnect_in_ms.expect("a reset is retried");
    assert!(delay <= 20, "first delay inside the base window: {delay}");
    proxy.clear_toxic(ToxicKind::Reset);

    let ev = until(&mut c, "LoggedOn", |e| matches!(e, Event::LoggedOn(_)));
    let Event::LoggedOn(info) = ev else {
        unreachable!()
    };
    assert!(info.reconnects >= 1);
    expect_resubscribed(&mut c, eur);
    let s = c.stats().snapshot();
    assert!(
        s.logons >= 2 && s.resubscribes >= 1 && s.disconnects >= 1,
        "{s:?}"
    );
    assert!(server.stat(|s| &s.logons_accepted) >= 2);
}

#[test]
fn server_restart_is_survived_with_the_retry_after_floor() {
    let gateway = GatewayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        shutdown_retry: RetryWindow::new(50, 100),
        ..Default::default()
    };
    let server = TestServer::start_with(ServerOpts {
        gateway: gateway.clone(),
        ..Default::default()
    });
    let addr = server.addr;
    let mut c = Client::connect(fast_config(addr)).unwrap();
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["GBPUSD"])
        .unwrap();
    let gbp = server.symbol_id("GBPUSD");
    expect_resubscribed(&mut c, gbp);

    server.stop();
    let ev = until(&mut c, "Disconnected", |e| {
        matches!(e, Event::Disconnected { .. })
    });
    let Event::Disconnected {
        cause,
        retry_after_ms,
        reconnect_in_ms,
    } = ev
    else {
        unreachable!()
    };
    assert!(
        matches!(
            cause,
            DisconnectCause::Server {
                reason: DisconnectReason::SHUTDOWN,
                ..
            }
        ),
        "{cause:?}"
    );
    assert!(
        (50..=100).contains(&retry_after_ms),
        "jittered shutdown window: {retry_after_ms}"
    );
    assert!(
        reconnect_in_ms.unwrap() >= u64::from(retry_after_ms),
        "the server's floor is honoured"
    );

    let server = TestServer::start_with(ServerOpts {
        gateway: GatewayConfig {
            listen: addr,
            ..gateway
        },
        ..Default::default()
    });
    let ev = until(&mut c, "LoggedOn", |e| matches!(e, Event::LoggedOn(_)));
    assert!(matches!(ev, Event::LoggedOn(info) if info.reconnects == 1));
    // The restarted server is a new stream: a resync, never a resume.
    expect_resubscribed(&mut c, gbp);
    assert_eq!(
        server.stat(|s| &s.logons_accepted),
        1,
        "the new server saw the relogon"
    );
}

const INGEST_CONFIG: &str = r#"
# Clear tokens: a loopback test (docs/security.md).
insecure_plain_tokens = true
[[providers]]
name = "bridge-a"
kind = "ingest"
token = "secret-a"
"#;

/// A standalone server fed by one bridge on its ingest port, on `listen`.
fn ingest_server(listen: std::net::SocketAddr) -> pricewire::service::Service {
    server::ingest_service_with(INGEST_CONFIG, Default::default(), |g| {
        g.listen = listen;
        g.shutdown_retry = RetryWindow::new(50, 100);
    })
}

/// Quotes `bids` for `symbol` into `svc` and waits (bounded) until its
/// price table holds the last one.
fn quote(svc: &pricewire::service::Service, symbol: u16, bids: &[i64]) {
    let ingest = svc.ingest.as_ref().unwrap().local_addr;
    let mut bridge = Bridge::connect(ingest, 0, "secret-a", T).unwrap();
    for &bid in bids {
        let tick = Tick {
            symbol,
            bid,
            ask: bid + 8,
            bid_size: 1_000_000,
            ask_size: 1_000_000,
            provider_time_ns: 1_700_000_000_000_000_000,
            ..Tick::EMPTY
        };
        bridge.send(&[tick]).unwrap();
    }
    let table = svc.pipeline.handles.table.clone();
    let last = *bids.last().unwrap();
    assert!(server::wait_until(T, || table
        .read(symbol, RAW)
        .is_some_and(|p| p.bid == last)));
}

const RAW: u8 = 0;

/// The issue's case: a client held seq 2; the server restarted and its
/// new stream reached seq 2 again at another price before the client came
/// back. The same sequence of another stream is a resync, not a resume.
#[test]
fn a_restarted_server_at_the_held_sequence_is_a_resync_not_a_resume() {
    let first = ingest_server("127.0.0.1:0".parse().unwrap());
    let addr = first.gateway.as_ref().unwrap().local_addr;
    let eur = first.config.table.by_name("EURUSD").unwrap().id;
    let mut c = Client::connect(fast_config(addr)).unwrap();
    let before = c.logon_info().expect("logged on");
    c.subscribe_ids(RAW, &[eur]).unwrap();
    until(&mut c, "SubscribeResponse", |e| {
        matches!(e, Event::SubscribeResponse { .. })
    });
    quote(&first, eur, &[108_000, 108_001]);
    let held = until(&mut c, "seq 2", |e| {
        e.price().is_some_and(|p| p.body.seq == 2)
    });
    let held = *held.price().unwrap();
    assert_eq!((held.body.bid, held.stream_id), (108_001, before.stream_id));
    assert_ne!(before.stream_id, 0, "a standalone server names its stream");

    // Restarted while the client is not driven: the new server's stream
    // reaches seq 2 (at 1.10001) before the client logs on again.
    first.stop();
    let second = ingest_server(addr);
    quote(&second, eur, &[110_000, 110_001]);
    let Event::LoggedOn(after) = until(&mut c, "LoggedOn", |e| matches!(e, Event::LoggedOn(_)))
    else {
        unreachable!()
    };
    assert_ne!(
        after.stream_id, before.stream_id,
        "a restarted server is a new stream"
    );
    let ev = until(&mut c, "snapshot", |e| {
        e.price().is_some_and(|p| p.body.symbol_id == eur)
    });
    let p = ev.price().unwrap();
    assert_eq!(
        (p.kind, p.body.seq, p.body.bid),
        (PriceKind::Snapshot, 2, 110_001)
    );
    assert_eq!((p.seq, p.stream_id), (SeqStatus::Reset, after.stream_id));
    let s = c.stats().snapshot();
    assert_eq!((s.resumed, s.resume_resyncs), (0, 1), "{s:?}");
    second.stop();
}

#[test]
fn silent_server_is_declared_dead_after_three_heartbeats() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // A server that accepts the logon with a 100 ms heartbeat, then says
    // nothing more (its sockets stay open until the test ends).
    let fake = std::thread::spawn(move || {
        let mut held = Vec::new();
        for _ in 0..2 {
            let Ok((mut s, _)) = listener.accept() else {
                break;
            };
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf);
            let m = LogonAccepted {
                session_id: 1,
                heartbeat_interval_ms: 100,
                server_time_ns: 0,
                default_tier: 1,
                stream_id: 1,
            };
            let n = wire::encode_logon_accepted(&mut buf, &m).unwrap();
            let _ = s.write_all(&buf[..n]);
            held.push(s);
        }
        held
    });
    let mut c = Client::connect(fast_config(addr)).unwrap();
    let started = Instant::now();
    let ev = until(&mut c, "Disconnected", |e| {
        matches!(e, Event::Disconnected { .. })
    });
    let Event::Disconnected {
        cause: DisconnectCause::DeadPeer { silent_ms },
        reconnect_in_ms,
        ..
    } = ev
    else {
        panic!("expected DeadPeer, got {ev:?}");
    };
    assert!(
        silent_ms >= 300 && started.elapsed() >= Duration::from_millis(300),
        "{silent_ms}"
    );
    assert!(reconnect_in_ms.is_some());
    assert!(
        c.stats().snapshot().heartbeats_sent >= 2,
        "the client heartbeated while idle"
    );
    assert_eq!(c.stats().snapshot().dead_peers, 1);
    // It reconnects to the (still silent) server.
    until(&mut c, "LoggedOn", |e| matches!(e, Event::LoggedOn(_)));
    drop(c);
    drop(fake.join().unwrap());
}

#[test]
fn unreachable_server_is_a_clear_error() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    match Client::connect(fast_config(addr)) {
        Err(ClientError::Unreachable { addr: a, source }) => {
            assert_eq!(a, addr);
            assert_eq!(source.kind(), std::io::ErrorKind::ConnectionRefused);
        }
        Err(e) => panic!("expected Unreachable, got {e}"),
        Ok(_) => panic!("connected to a closed port"),
    }
}

#[test]
fn busy_server_refusal_is_reported_with_its_retry_after() {
    let mut gateway = GatewayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    };
    gateway.admission.ip_connections_max = 1;
    let server = TestServer::start_with(ServerOpts {
        gateway,
        ..Default::default()
    });
    let _first = Client::connect(fast_config(server.addr)).unwrap();
    match Client::connect(fast_config(server.addr)) {
        Err(ClientError::Refused {
            reason,
            retry_after_ms,
            ..
        }) => {
            assert_eq!(reason, DisconnectReason::BUSY);
            assert!(retry_after_ms > 0, "come back later");
        }
        Err(e) => panic!("expected Refused(busy), got {e}"),
        Ok(_) => panic!("the per-IP cap let a second session in"),
    }
}

#[test]
fn dropped_crowd_reconnects_spread_out_not_in_lockstep() {
    let server = TestServer::start();
    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), server.addr).unwrap();
    let mut crowd: Vec<Client> = (0..12)
        .map(|i| {
            let mut cfg = fast_config(proxy.local_addr());
            cfg.backoff = Backoff::new(1_000, 5_000);
            cfg.rng_seed = Some(100 + i);
            Client::connect(cfg).unwrap()
        })
        .collect();
    proxy.set_toxic(Toxic::Reset);
    let delays: Vec<u64> = crowd
        .iter_mut()
        .map(|c| {
            match until(c, "Disconnected", |e| {
                matches!(e, Event::Disconnected { .. })
            }) {
                Event::Disconnected {
                    reconnect_in_ms, ..
                } => reconnect_in_ms.unwrap(),
                _ => unreachable!(),
            }
        })
        .collect();
    let mut distinct = delays.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() >= 10, "delays bunched: {delays:?}");
    assert!(
        delays.iter().all(|&d| d <= 1_000),
        "inside the first window: {delays:?}"
    );
    let spread = distinct.last().unwrap() - distinct.first().unwrap();
    assert!(spread >= 300, "spread over the window: {delays:?}");
}

#[test]
fn large_subscription_set_is_resubscribed_in_frames_the_server_accepts() {
    let server = TestServer::start();
    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), server.addr).unwrap();
    let mut cfg = fast_config(proxy.local_addr());
    cfg.max_subscriptions = 2_000;
    let mut c = Client::connect(cfg).unwrap();
    let too_many: Vec<u16> = (0..501).collect();
    assert!(matches!(
        c.subscribe_ids(1, &too_many),
        Err(ClientError::TooManyEntries(500))
    ));
    for block in 0..3u16 {
        let ids: Vec<u16> = (block * 400..block * 400 + 400).collect();
        c.subscribe_ids(1, &ids).unwrap();
    }
    assert_eq!(c.subscriptions(), 1_200);
    proxy.set_toxic(Toxic::Reset);
    until(&mut c, "Disconnected", |e| {
        matches!(e, Event::Disconnected { .. })
    });
    proxy.clear_toxic(ToxicKind::Reset);
    until(&mut c, "LoggedOn", |e| matches!(e, Event::LoggedOn(_)));
    // 1200 entries go out as 500 + 500 + 200, each answered in full.
    let mut answered = Vec::new();
    while answered.len() < 3 {
        let ev = until(&mut c, "SubscribeResponse", |e| {
            matches!(
                e,
                Event::SubscribeResponse { .. } | Event::Disconnected { .. }
            )
        });
        match ev {
            Event::SubscribeResponse { results, .. } => answered.push(results.len()),
            other => panic!("resubscribe refused: {other:?}"),
        }
    }
    assert_eq!(answered, vec![500, 500, 200]);
    assert_eq!(server.stat(|s| &s.disconnects_protocol_error), 0);
}
