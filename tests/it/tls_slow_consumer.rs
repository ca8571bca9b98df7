//! The back-pressure rules hold over TLS: a TLS subscriber that never
//! reads is conflated (rustls takes at most its 32 KiB, the rest stays in
//! the outbound buffer under the water marks), then disconnected as a
//! slow consumer; when it finally reads, the TLS stream ends with
//! Disconnect(slow_consumer) after the backlog.

use crate::util::pki;
use crate::util::server;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use pricewire::gateway::GatewayConfig;
use pricewire::runtime::tls::{TlsAcceptor, TlsFiles};
use pricewire::wire::{self, DisconnectReason, Message};
use server::{wait_until, ServerOpts, TestServer};

const T: Duration = Duration::from_secs(8);

#[test]
fn never_reading_tls_subscriber_is_conflated_then_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki::Ca::new("test CA");
    let files = pki::ServerFiles::write(dir.path(), &ca);
    let tls = TlsFiles {
        cert: files.cert.clone(),
        key: files.key.clone(),
        client_ca: None,
    };
    let server = TestServer::start_with(ServerOpts {
        gateway: GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            slow_consumer_ms: 300,
            low_water_bytes: 4 * 1024,
            high_water_bytes: 8 * 1024,
            out_cap_bytes: 16 * 1024,
            close_linger_ms: 5_000,
            tls: Some(TlsAcceptor::new("subscriber", tls, 5_000).unwrap()),
            ..Default::default()
        },
        shards: 1,
        ..Default::default()
    });
    let mut slow = pki::tls_connect(server.addr, &ca.pem(), None).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let logon = wire::Logon {
        heartbeat_interval_ms: 10_000,
        account: b"demo",
        token: b"demo",
    };
    let n = wire::encode_logon(&mut buf, &logon).unwrap();
    let accepted = pki::round_trip(&mut slow, &buf[..n]).unwrap();
    assert!(matches!(
        wire::decode(&accepted),
        Ok(Message::LogonAccepted(_))
    ));
    // Everything at every tier, then it stops reading.
    let ids: Vec<u16> = (0..server.config.table.len() as u16).collect();
    for tier in 0..3u8 {
        let refs = ids.iter().map(|&id| wire::SymbolRef::by_id(id));
        let n = wire::encode_subscribe(&mut buf, u64::from(tier), tier, refs).unwrap();
        slow.write_all(&buf[..n]).unwrap();
    }
    slow.flush().unwrap();
    assert!(
        wait_until(T, || server.stat(|s| &s.disconnects_slow_consumer) == 1),
        "the never-reading TLS subscriber was not disconnected"
    );
    assert!(
        server.shard_stats()[0].conflated.get() > 0,
        "conflated first"
    );

    // It reads what is left: the backlog, then the Disconnect, then the end.
    let mut got = Vec::new();
    let deadline = Instant::now() + T;
    while Instant::now() < deadline {
        match slow.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let mut last = None;
    let mut off = 0;
    while let Ok(Some(len)) = wire::split(&got[off..]) {
        last = Some(off..off + len);
        off += len;
    }
    let last = last.expect("frames after the backlog");
    match wire::decode(&got[last]) {
        Ok(Message::Disconnect(d)) => {
            assert_eq!(d.reason, DisconnectReason::SLOW_CONSUMER);
            assert!(d.retry_after_ms > 0);
        }
        other => panic!("expected Disconnect(slow_consumer) last, got {other:?}"),
    }
}
