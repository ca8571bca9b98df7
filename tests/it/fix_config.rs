//! `kind = "fix"` providers in the TOML file: the `[providers.fix]` table,
//! its defaults, and the errors that name the key.

use pricewire::config::{Config, ConfigError};
use pricewire::resilience::BreakerState;

const FIX: &str = r#"
[[providers]]
name = "lp-a"
kind = "fix"
[providers.fix]
host = "127.0.0.1"
port = 9878
sender_comp_id = "PRICEWIRE"
target_comp_id = "LPA"
symbols = { "EUR/USD" = "EURUSD", "USD/JPY" = "USDJPY" }
connect_ms = 1500
logon_ms = 3000
heartbeat_s = 10

[[providers]]
name = "synth"
kind = "synthetic"
"#;

fn key_of(e: ConfigError) -> String {
    match e {
        ConfigError::Invalid { key, .. } => key,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn a_fix_provider_resolves_with_defaults() {
    let c = Config::parse(FIX, 1).unwrap();
    assert_eq!(c.fix.len(), 1);
    let f = &c.fix[0];
    assert_eq!((f.provider, f.name.as_str()), (0, "lp-a"));
    assert_eq!((f.host.as_str(), f.port), ("127.0.0.1", 9878));
    assert_eq!(
        (f.connect_timeout_ms, f.logon_timeout_ms, f.heartbeat_s),
        (1_500, 3_000, 10)
    );
    assert_eq!(f.read_timeout_ms, 20_000, "heartbeat x 2 by default");
    assert_eq!(f.breaker.call_timeout_ms, 20_000);
    let eur = c.table.by_name("EURUSD").unwrap();
    let m = f
        .symbols
        .iter()
        .find(|m| m.provider_symbol == "EUR/USD")
        .unwrap();
    assert_eq!((m.symbol, m.digits), (eur.id, 5));
    assert_eq!(c.table.providers()[1].name, "synth");
    assert_eq!(BreakerState::Closed as u8, 0);
}

#[test]
fn fix_settings_errors_name_the_key() {
    let no_table = "[[providers]]\nname = \"x\"\nkind = \"fix\"\n";
    assert_eq!(
        key_of(Config::parse(no_table, 1).unwrap_err()),
        "providers[0].fix"
    );
    let unknown = FIX.replace("\"USDJPY\"", "\"NOPE\"");
    assert_eq!(
        key_of(Config::parse(&unknown, 1).unwrap_err()),
        "providers[0].fix.symbols"
    );
    let short_read = FIX.replace(
        "heartbeat_s = 10",
        "heartbeat_s = 10\nread_timeout_ms = 5000",
    );
    assert_eq!(
        key_of(Config::parse(&short_read, 1).unwrap_err()),
        "providers[0].fix"
    );
    let stray = "[[providers]]\nname = \"s\"\nkind = \"synthetic\"\n[providers.fix]\nhost = \"h\"\nport = 1\nsender_comp_id = \"a\"\ntarget_comp_id = \"b\"\nsymbols = {}\n";
    assert_eq!(
        key_of(Config::parse(stray, 1).unwrap_err()),
        "providers[0].fix"
    );
    let typo = FIX.replace("logon_ms", "logon_mss");
    assert!(matches!(
        Config::parse(&typo, 1).unwrap_err(),
        ConfigError::Syntax(_)
    ));
}

#[test]
fn files_without_fix_providers_are_unchanged() {
    let c = Config::parse("", 3).unwrap();
    assert!(c.fix.is_empty());
    assert_eq!(c.table.providers().len(), 3);
}

#[test]
fn logon_credentials_come_from_a_file_or_the_environment_never_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lp-a.password");
    std::fs::write(&path, "s3cret\n").unwrap();
    let with_file = FIX.replace(
        "heartbeat_s = 10",
        &format!(
            "heartbeat_s = 10\nusername = \"pw-user\"\npassword_file = {:?}",
            path.display().to_string()
        ),
    );
    let c = Config::parse(&with_file, 1).unwrap();
    let f = &c.fix[0];
    assert_eq!(f.username.as_deref(), Some("pw-user"));
    assert_eq!(f.password.as_ref().map(|p| p.expose()), Some("s3cret"));
    assert!(!format!("{c:?}").contains("s3cret"), "Debug never shows it");
    // Cargo sets CARGO_PKG_NAME for the test process.
    let with_env = FIX.replace(
        "heartbeat_s = 10",
        "heartbeat_s = 10\npassword_env = \"CARGO_PKG_NAME\"",
    );
    let c = Config::parse(&with_env, 1).unwrap();
    assert_eq!(
        c.fix[0].password.as_ref().map(|p| p.expose().to_string()),
        Some("pricewire".to_string())
    );
    let unset = FIX.replace(
        "heartbeat_s = 10",
        "heartbeat_s = 10\npassword_env = \"PRICEWIRE_TEST_NO_SUCH_VARIABLE\"",
    );
    // A process that runs no feed (an edge) reads none of it.
    let skipped = Config::parse_with(&unset, 1, pricewire::config::fix::FeedSecrets::Skip).unwrap();
    assert_eq!(skipped.fix[0].password, None);
    let e = Config::parse(&unset, 1).unwrap_err();
    assert!(
        e.to_string().contains("PRICEWIRE_TEST_NO_SUCH_VARIABLE"),
        "{e}"
    );
    assert_eq!(key_of(e), "providers[0].fix.password_env");
    let both = with_file.replace("username", "password_env = \"PATH\"\nusername");
    assert_eq!(
        key_of(Config::parse(&both, 1).unwrap_err()),
        "providers[0].fix.password_env"
    );
    let clear = FIX.replace("heartbeat_s = 10", "heartbeat_s = 10\npassword = \"x\"");
    assert!(
        matches!(
            Config::parse(&clear, 1).unwrap_err(),
            ConfigError::Syntax(_)
        ),
        "a password in clear in the file is refused"
    );
}

#[test]
fn garbled_and_logout_settings_resolve_and_are_checked() {
    let c = Config::parse(FIX, 1).unwrap();
    let f = &c.fix[0];
    assert_eq!(
        (f.garbled_max, f.garbled_window_ms, f.logout_timeout_ms),
        (10, 10_000, 2_000)
    );
    let zero = FIX.replace("heartbeat_s = 10", "heartbeat_s = 10\ngarbled_max = 0");
    assert_eq!(
        key_of(Config::parse(&zero, 1).unwrap_err()),
        "providers[0].fix"
    );
}

#[test]
fn a_breaker_that_a_hung_provider_could_never_open_is_refused() {
    // Without the consecutive rule, 5 failures at one per up to 35 s
    // (backoff cap 30 s + the 5-s quote silence, longer than connect 1.5 s
    // + logon 3 s) cannot fit the 10-s window.
    let off = FIX.replace(
        "heartbeat_s = 10",
        "heartbeat_s = 10\nbreaker_consecutive_failures = 0",
    );
    let e = Config::parse(&off, 1).unwrap_err();
    assert!(e.to_string().contains("can never open"), "{e}");
    assert_eq!(key_of(e), "providers[0].fix");
    // A window that holds them is accepted.
    let wide = off.replace(
        "breaker_consecutive_failures = 0",
        "breaker_consecutive_failures = 0\nbreaker_window_s = 300",
    );
    assert!(Config::parse(&wide, 1).is_ok());
    let c = Config::parse(FIX, 1).unwrap();
    assert_eq!(c.fix[0].breaker_consecutive_failures, 3);
    assert!(c.fix[0].hung_open_bound_ms().unwrap() <= 30_000);
}
