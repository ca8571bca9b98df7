use super::*;

#[test]
fn servers_prefix_and_replicas_are_validated_with_the_flag_named() {
    let ok = BusConfig::parse("nats://127.0.0.1:4222, nats://h2:4223", "pw.eu", 3).unwrap();
    assert_eq!(ok.servers.len(), 2);
    assert_eq!(ok.subject("EURUSD"), "pw.eu.price.EURUSD");
    assert_eq!(ok.wildcard(), "pw.eu.price.>");
    assert_eq!(ok.stream(), "PW_EU_PRICES");
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
