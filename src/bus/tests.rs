use super::*;

#[test]
fn servers_prefix_and_replicas_are_validated_with_the_flag_named() {
    let ok = BusConfig::parse("nats://127.0.0.1:4222, nats://h2:4223", "pw.eu", 3).unwrap();
    assert_eq!(ok.servers.len(), 2);
    assert_eq!(ok.subject("EURUSD"), "pw.eu.price.EURUSD");
    assert_eq!(ok.wildcard(), "pw.eu.price.>");
    assert_eq!(ok.stream(), "PW_EU_PRICES");
    assert_eq!(ok.heartbeat_subject(), "pw.eu.heartbeat");
    assert!(
        !ok.heartbeat_subject().starts_with("pw.eu.price."),
        "heartbeats stay out of the last-value stream"
    );
    assert_eq!(ok.heartbeat_ms, heartbeat::HEARTBEAT_MS_DEFAULT);
    assert_eq!(ok.clone().with_heartbeat_ms(10).unwrap().heartbeat_ms, 10);
    for refused in [9, 150_001] {
        let e = ok.clone().with_heartbeat_ms(refused).unwrap_err();
        assert!(e.to_string().contains("`--bus-heartbeat-ms`"), "{e}");
    }
    let refused = |bus: &str, prefix: &str, r: usize| {
        BusConfig::parse(bus, prefix, r).unwrap_err().to_string()
    };
    assert!(refused("", "pw", 1).contains("`--bus`"));
    assert!(refused("127.0.0.1:4222", "pw", 1).contains("nats://"));
    assert!(refused("nats://h:0", "pw", 1).contains("port"));
    assert!(refused("nats://h", "pw", 1).contains("host:port"));
    assert!(refused("nats://h:1", "pw..x", 1).contains("`--bus-prefix`"));
    assert!(refused("nats://h:1", "p w", 1).contains("`--bus-prefix`"));
    assert!(refused("nats://h:1", "pw.>", 1).contains("`--bus-prefix`"));
    assert!(refused("nats://h:1", "pw", 0).contains("`--bus-replicas`"));
}

#[test]
fn symbol_tokens_exclude_subject_wildcards_and_separators() {
    assert!(symbol_token_ok("EURUSD"));
    assert!(symbol_token_ok("XAU/USD"));
    assert!(!symbol_token_ok("EUR.USD"));
    assert!(!symbol_token_ok("*"));
    assert!(!symbol_token_ok(">"));
    assert!(!symbol_token_ok("EUR USD"));
}

#[test]
fn reconnect_delays_grow_are_capped_and_jittered() {
    let mut rng = rand::rngs::mock::StepRng::new(0, 1);
    for attempt in 0..40 {
        let d = reconnect_delay(attempt, &mut rng).as_millis() as u64;
        assert!(d <= 2_000, "attempt {attempt}: {d} ms");
        assert!(d >= 25, "attempt {attempt}: {d} ms");
    }
    let mut rng = rand::thread_rng();
    let first: Vec<u128> = (0..32)
        .map(|_| reconnect_delay(10, &mut rng).as_millis())
        .collect();
    assert!(first.iter().all(|&d| (1_000..=2_000).contains(&d)));
    assert!(first.iter().any(|&d| d != first[0]), "no jitter: {first:?}");
}

#[test]
fn a_bus_message_is_the_price_frame_and_the_epoch_and_decodes_back() {
    use crate::model::{InstrumentTable, Price};
    let table = crate::config::Config::builtin(3).table;
    let inst = table.by_name("EURUSD").unwrap().clone();
    let price = Price {
        symbol: inst.id,
        seq: 41,
        bid: 108_123,
        ask: 108_126,
        engine_time_ns: 5_000,
        ..Price::EMPTY
    };
    let mut out = [0u8; codec::BUS_MESSAGE_LEN];
    let n = codec::encode(&mut out, &price, 7, inst.digits, 1_000);
    assert_eq!(n, 84);
    assert_eq!(codec::epoch(&out), 7);
    let back = codec::decode(&out, "EURUSD", &table, 1_000, 9).unwrap();
    assert_eq!((back.seq, back.bid, back.ask), (41, 108_123, 108_126));
    assert_eq!((back.engine_time_ns, back.receive_time_ns), (5_000, 9));
    let refused = |bytes: &[u8], sym: &str, t: &InstrumentTable| {
        codec::decode(bytes, sym, t, 0, 0).unwrap_err()
    };
    assert_eq!(
        refused(&out[..76], "EURUSD", &table),
        codec::CodecError::Length(76)
    );
    assert!(matches!(
        refused(&out, "NOPE", &table),
        codec::CodecError::UnknownSymbol(_)
    ));
    let mut other = out;
    other[4] ^= 0xff; // the SBE block length
    assert!(matches!(
        refused(&other, "EURUSD", &table),
        codec::CodecError::Frame(_)
    ));
    assert_eq!(codec::epoch(&out[..80]), 0, "too short to carry an epoch");
}

#[test]
fn credentials_in_a_url_are_refused_without_echoing_them_and_tls_needs_a_ca() {
    let e = BusConfig::parse("nats://edge:s3cret@h:4222", "pw", 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nats://***@h:4222"), "{e}");
    assert!(
        e.contains("--bus-password-file") && e.contains("--bus-creds-file"),
        "{e}"
    );
    assert!(!e.contains("s3cret"), "{e}");
    let e = BusConfig::parse("tls://t0ken@h:4222", "pw", 1)
        .unwrap_err()
        .to_string();
    assert!(!e.contains("t0ken"), "{e}");
    let tls = BusConfig::parse("tls://h:4222,nats://h2:4222", "pw", 1).unwrap();
    let e = tls
        .clone()
        .with_security(security::BusAuth::None, None, false)
        .unwrap_err();
    assert!(e.to_string().contains("--bus-tls-ca"), "{e}");
    let plain = BusConfig::parse("nats://h:4222", "pw", 1).unwrap();
    let e = plain
        .clone()
        .with_security(security::BusAuth::None, None, true)
        .unwrap_err();
    assert!(e.to_string().contains("`--bus-tls`"), "{e}");
    let ca = security::BusTls {
        ca: "/nonexistent/ca.pem".into(),
        client: None,
    };
    // Nothing is read until `check_access`, which names the file.
    let secured = plain
        .with_security(security::BusAuth::None, Some(ca), false)
        .unwrap();
    let e = secured.check_access().unwrap_err().to_string();
    assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    assert_eq!(security::host_of("tls://[::1]:4222"), "[::1]");
    assert_eq!(security::host_of("10.0.0.5:4222"), "10.0.0.5");
}
