//! Issue #21's review leftovers against the real binary over loopback:
//!
//! - a provider brute force on the shipped defaults locks the address and
//!   shows on /metrics under `listener="feed"`, apart from subscribers';
//! - the lockout flags change what the subscriber listener does, and
//!   out-of-range values stop start-up naming the flag;
//! - the shared ingest token comes from `--ingest-token-file` or
//!   `PRICEWIRE_INGEST_TOKEN`, and one typed on argv draws a warning;
//! - `replay --to` logs on with `--token-file` or `PRICEWIRE_INGEST_TOKEN`;
//! - the Redis password comes from `--redis-password-file` or
//!   `PRICEWIRE_REDIS_PASSWORD`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pricewire::auth::hash::hash_token;
use pricewire::client::{Client, ClientConfig, ClientError};
use pricewire::feed::bridge::Bridge;
use pricewire::wire::LogonRejectReason;

use crate::util::capture;
use crate::util::net;
use crate::util::redis;
use crate::util::wait;

/// Bound of each wait for an answer.
const WAIT: Duration = Duration::from_secs(10);
const PROVIDER: &str = "Prov-real-token-41c9";
const BOB: &str = "Bob-real-token-8d02";

struct Running {
    _server: net::Server,
    addr: SocketAddr,
    ops: SocketAddr,
    feed: SocketAddr,
}

/// A config with a synthetic provider (id 0), an ingest provider with its
/// own hashed token (id 1, "bridge") and one account, bob.
fn config(dir: &Path) -> PathBuf {
    let text = format!(
        r#"
[[providers]]
name = "lp1"
kind = "synthetic"
[[providers]]
name = "bridge"
kind = "ingest"
token = "{p}"
[[accounts]]
name = "bob"
token = "{b}"
tiers = ["standard"]
"#,
        p = hash_token(PROVIDER.as_bytes()).unwrap(),
        b = hash_token(BOB.as_bytes()).unwrap(),
    );
    let path = dir.join("auth.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `pricewire serve` with `extra` flags and `env`; stderr to `stderr`.
fn serve(config: &Path, extra: &[&str], env: &[(&str, &str)], stderr: Option<&Path>) -> Running {
    let (addr, ops, feed) = (net::free_addr(), net::free_addr(), net::free_addr());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--synthetic-rate", "200", "--report-interval-ms", "60000"])
        .args(["--drain-delay-ms", "0", "--shards", "1"])
        .args(["--listen", &addr.to_string()])
        .args(["--ops-listen", &ops.to_string()])
        .args(["--feed-listen", &feed.to_string()])
        .args(extra)
        .env_remove("HOSTNAME")
        .env_remove("PRICEWIRE_INGEST_TOKEN")
        .envs(env.iter().copied());
    if let Some(p) = stderr {
        cmd.stderr(std::fs::File::create(p).unwrap());
    }
    let server = net::start_ready(&mut cmd, ops);
    Running {
        _server: server,
        addr,
        ops,
        feed,
    }
}

/// One sample of /metrics (`name{labels}`), if present.
fn metric(ops: SocketAddr, series: &str) -> Option<f64> {
    let body = net::http_get(ops, "/metrics")?;
    body.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A subscriber logon's refusal (reason, retry-after), or `None` if it
/// logged on.
fn subscriber_logon(
    addr: SocketAddr,
    account: &str,
    token: &str,
) -> Option<(LogonRejectReason, u32)> {
    match Client::connect(ClientConfig::new(addr, account, token)) {
        Ok(_) => None,
        Err(ClientError::LogonRejected {
            reason,
            retry_after_ms,
        }) => Some((reason, retry_after_ms)),
        Err(e) => panic!("logon of {account}: {e}"),
    }
}

/// A provider logon's refusal reason as the bridge reports it ("auth",
/// "rate_limited", ...), or "accepted".
fn provider_logon(feed: SocketAddr, id: u16, token: &str) -> String {
    match Bridge::connect(feed, id, token, WAIT) {
        Ok(_) => "accepted".into(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_provider_brute_force_on_the_defaults_locks_and_shows_in_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(&config(dir.path()), &[], &[], None);
    // Default: 5 failures lock the address (1 s, +0-25 %).
    let mut answers = Vec::new();
    for i in 0..20 {
        let a = provider_logon(s.feed, 1, &format!("guess-{i}"));
        let locked = a.contains("rate_limited");
        answers.push(a);
        if locked {
            break;
        }
    }
    let auth = answers.iter().filter(|a| a.contains("\"auth\"")).count();
    assert!(
        answers.iter().take(5).all(|a| a.contains("\"auth\"")),
        "{answers:?}"
    );
    assert!(
        answers.last().unwrap().contains("rate_limited"),
        "{answers:?}"
    );
    let feed = |name: &str, label: &str| {
        metric(s.ops, &format!("{name}{{listener=\"feed\",{label}}}")).unwrap_or(-1.0)
    };
    let lockouts = feed("pricewire_lockouts_total", "scope=\"address\"");
    let bad = feed("pricewire_logon_failures_total", "reason=\"bad_token\"");
    let locked = feed("pricewire_logon_failures_total", "reason=\"locked\"");
    let argon = feed("pricewire_logon_verifications_total", "path=\"verifier\"");
    println!(
        "provider brute force: {auth} refused (auth) before the lock; metrics: lockouts \
         {lockouts}, bad_token {bad}, locked {locked}, argon2 verifications {argon}"
    );
    assert!(lockouts >= 1.0, "{lockouts}");
    assert_eq!(bad, auth as f64);
    assert!(locked >= 1.0, "{locked}");
    assert!(argon >= 5.0, "{argon}");
    // The subscriber listener's tables are its own.
    let sub = "pricewire_lockouts_total{listener=\"subscriber\",scope=\"address\"}";
    assert_eq!(metric(s.ops, sub), Some(0.0));
    // Provider ids are not locked, so there is no account series for feed.
    let body = net::http_get(s.ops, "/metrics").unwrap();
    assert!(!body.contains("listener=\"feed\",scope=\"account\""));
    // The right token from the same (locked) address is refused too, and
    // costs no argon2 run.
    assert!(provider_logon(s.feed, 1, PROVIDER).contains("rate_limited"));
    let after = feed("pricewire_logon_verifications_total", "path=\"verifier\"");
    assert_eq!(after, argon);
}

#[test]
fn the_lockout_flags_set_the_threshold_and_the_first_lock() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--lockout-failures=2",
        "--lockout-first-ms=4000",
        "--lockout-max-ms=8000",
        "--lockout-forget-ms=10000",
    ];
    let s = serve(&config(dir.path()), &flags, &[], None);
    let auth = Some((LogonRejectReason::AUTH, 0));
    assert_eq!(subscriber_logon(s.addr, "bob", "wrong-1"), auth);
    assert_eq!(subscriber_logon(s.addr, "bob", "wrong-2"), auth);
    // The default (5 failures, 1-1.25 s) would verify this one.
    let (reason, retry) = subscriber_logon(s.addr, "bob", "wrong-3").unwrap();
    assert_eq!(reason, LogonRejectReason::RATE_LIMITED);
    assert!((2_500..=5_000).contains(&retry), "retry-after {retry} ms");
    let lockouts = "pricewire_lockouts_total{listener=\"subscriber\",scope=\"address\"}";
    assert_eq!(metric(s.ops, lockouts), Some(1.0));
}

#[test]
fn out_of_range_limits_stop_start_up_naming_the_flag() {
    for (flag, want) in [
        (
            "--lockout-forget-ms=1000",
            "--lockout-forget-ms 1000: must be 375000..=",
        ),
        (
            "--verifier-threads=0",
            "--verifier-threads 0: must be 1..=32",
        ),
        (
            "--lockout-addresses=4",
            "--lockout-addresses 4: must be 8..=1048576",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_pricewire"))
            .args(["serve", flag, "--ops-listen", "127.0.0.1:0"])
            .args(["--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        assert!(err.contains(want), "{flag}: {err}");
    }
}

#[test]
fn the_shared_ingest_token_comes_from_a_file_or_the_environment() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let file = dir.path().join("ingest-token");
    std::fs::write(&file, "File-feed-token-6b1\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let from_file = ["--ingest-token-file", file.to_str().unwrap()];
    let s = serve(&cfg, &from_file, &[], None);
    // Provider 0 (synthetic) has no token of its own: the shared one applies.
    assert_eq!(provider_logon(s.feed, 0, "File-feed-token-6b1"), "accepted");
    assert!(provider_logon(s.feed, 0, "demo-feed").contains("\"auth\""));
    drop(s);

    let env = [("PRICEWIRE_INGEST_TOKEN", "Env-feed-token-0c4")];
    let s = serve(&cfg, &[], &env, None);
    assert_eq!(provider_logon(s.feed, 0, "Env-feed-token-0c4"), "accepted");
    drop(s);

    // Typed on the command line: it works, with a warning that does not
    // repeat it.
    let log = dir.path().join("stderr.log");
    let typed = ["--ingest-token", "Typed-feed-token-93a"];
    let s = serve(&cfg, &typed, &[], Some(&log));
    assert_eq!(
        provider_logon(s.feed, 0, "Typed-feed-token-93a"),
        "accepted"
    );
    drop(s);
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(
        err.contains("warning: --ingest-token puts the secret in the process list"),
        "{err}"
    );
    assert!(err.contains("--ingest-token-file PATH or PRICEWIRE_INGEST_TOKEN"));
    assert!(!err.contains("Typed-feed-token"), "{err}");

    // Both flags, or a missing file: refused before anything starts.
    for extra in [
        vec![
            "--ingest-token",
            "x",
            "--ingest-token-file",
            file.to_str().unwrap(),
        ],
        vec!["--ingest-token-file", "/nonexistent/pricewire-ingest-token"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_pricewire"))
            .args(["serve", "--feed-listen", "127.0.0.1:0"])
            .args(["--listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0"])
            .args(&extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains("--ingest-token-file"), "{err}");
    }
}

#[test]
fn the_redis_password_comes_from_a_file_or_the_environment() {
    use std::os::unix::fs::PermissionsExt;
    let redis = redis::RedisServer::start();
    redis.put_account(
        "carol",
        &[("token", redis::token_t_hash()), ("tiers", "raw")],
    );
    let password = "Redis-pass-word-2f8";
    redis.command(&[b"CONFIG", b"SET", b"requirepass", password.as_bytes()]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let file = dir.path().join("redis-password");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = format!("redis://{}", redis.addr());
    let from_file = [
        "--redis",
        &url,
        "--redis-password-file",
        file.to_str().unwrap(),
    ];
    let from_env = ["--redis", &url];
    let env = [("PRICEWIRE_REDIS_PASSWORD", password)];
    for (flags, env) in [(&from_file[..], &[][..]), (&from_env[..], &env[..])] {
        let s = serve(&cfg, flags, env, None);
        // carol is only in Redis: her logon needs an authenticated read
        // (busy until the first read is in).
        let logged_on = wait::wait_until(WAIT, || match subscriber_logon(s.addr, "carol", "t") {
            None => true,
            Some((LogonRejectReason::BUSY, _)) => false,
            Some(other) => panic!("carol refused: {other:?}"),
        });
        assert!(logged_on, "carol never logged on ({flags:?})");
    }
    // A password in the URL and a file: refused, the password not shown.
    let both = format!("redis://:{password}@{}", redis.addr());
    let out = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["serve", "--redis", &both, "--redis-password-file"])
        .arg(&file)
        .args(["--listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--redis-password-file and --redis: give one"),
        "{err}"
    );
    assert!(!err.contains(password), "{err}");
}

/// `pricewire replay DIR --speed max --to FEED` with `extra` flags and
/// `env`: exit code and stderr.
fn replay_to(
    dir: &Path,
    feed: SocketAddr,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["replay", dir.to_str().unwrap(), "--speed", "max"])
        .args(["--to", &feed.to_string()])
        .args(extra)
        .env_remove("PRICEWIRE_INGEST_TOKEN")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn replay_logs_on_with_a_token_file_or_the_environment() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let captures = dir.path().join("captures");
    std::fs::create_dir(&captures).unwrap();
    capture::write_capture(&captures, &capture::ticks(300), 1 << 30);
    let file = dir.path().join("ingest-token");
    std::fs::write(&file, "Replay-feed-token-5d2\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token_file = ["--token-file", file.to_str().unwrap()];

    // The built-in table (3 synthetic providers), as the capture's.
    let (ops, feed) = (net::free_addr(), net::free_addr());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.args(["serve", "--no-listen", "--ops-listen", &ops.to_string()])
        .args(["--feed-listen", &feed.to_string(), "--drain-delay-ms", "0"])
        .args(["--ingest-token-file", file.to_str().unwrap()])
        .env_remove("PRICEWIRE_INGEST_TOKEN")
        .env_remove("HOSTNAME");
    let server = net::start_ready(&mut cmd, ops);
    // The default token is not the server's: refused before any tick.
    let (code, err) = replay_to(&captures, feed, &[], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("\"auth\""), "{err}");
    let (code, err) = replay_to(&captures, feed, &token_file, &[]);
    assert_eq!(code, Some(0), "{err}");
    drop(server);

    let env = [("PRICEWIRE_INGEST_TOKEN", "Replay-env-token-8e1")];
    let (ops, feed) = (net::free_addr(), net::free_addr());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
    cmd.args(["serve", "--no-listen", "--ops-listen", &ops.to_string()])
        .args(["--feed-listen", &feed.to_string(), "--drain-delay-ms", "0"])
        .envs(env)
        .env_remove("HOSTNAME");
    let _server = net::start_ready(&mut cmd, ops);
    let (code, err) = replay_to(&captures, feed, &[], &env);
    assert_eq!(code, Some(0), "{err}");
    // Both flags: refused by the parser (exit 2).
    let both = ["--token", "x", "--token-file", file.to_str().unwrap()];
    let (code, err) = replay_to(&captures, feed, &both, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--token-file"), "{err}");
}
