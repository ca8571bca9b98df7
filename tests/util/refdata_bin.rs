//! The real binary with `--redis`, for reference-data drills: start it
//! with a config file, read its metrics, log on (following retry-after).
//!
//! `util::refdata_bin`, beside the `net`, `server` and `wait` helpers.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pricewire::wire::{DisconnectReason, LogonRejectReason, OwnedMessage};

use super::net;
use super::server::{Raw, RawRead};

/// A running `pricewire serve --redis`; killed on drop.
pub struct Binary {
    pub child: Child,
    pub listen: SocketAddr,
    pub ops: SocketAddr,
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `pricewire serve --redis` with `config` (TOML) and stderr to `log`.
pub fn start(dir: &Path, redis: SocketAddr, config: &str, log: &str, rust_log: &str) -> Binary {
    let cfg = dir.join("pricewire.toml");
    std::fs::write(&cfg, config).unwrap();
    let (listen, ops) = (net::free_addr(), net::free_addr());
    let err = std::fs::File::create(dir.join(log)).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .args(["--redis", &format!("redis://{redis}")])
        .args(["--listen", &listen.to_string()])
        .args(["--ops-listen", &ops.to_string()])
        .args(["--report-interval-ms", "600000", "--drain-delay-ms", "0"])
        .args(["--synthetic-rate", "200", "--shards", "1"])
        .env("RUST_LOG", rust_log)
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    Binary { child, listen, ops }
}

impl Binary {
    /// The value of the first metric line starting with `line_start`.
    pub fn metric(&self, line_start: &str) -> Option<f64> {
        let body = net::http_body(self.ops, "/metrics")?;
        body.lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }
}

/// One logon answer.
pub enum Answer {
    Accepted(Raw),
    /// LogonRejected: its reason and retry-after (ms).
    Rejected(LogonRejectReason, u32),
    /// Disconnect before any logon answer (admission): its retry-after.
    Disconnected(DisconnectReason, u32),
    /// Anything else (closed, timed out, another message).
    Other(String),
}

/// One logon with token `t`, from `src` (a loopback address) if given.
pub fn logon(addr: SocketAddr, src: Option<Ipv4Addr>, account: &str) -> Answer {
    let mut r = match src {
        Some(ip) => Raw::from_stream(net::connect_from(ip, addr)),
        None => Raw::connect(addr),
    };
    r.send_logon(account, "t", 30_000);
    match r.next(Duration::from_secs(10)) {
        RawRead::Msg(OwnedMessage::LogonAccepted(_)) => Answer::Accepted(r),
        RawRead::Msg(OwnedMessage::LogonRejected(j)) => {
            Answer::Rejected(j.reason, j.retry_after_ms)
        }
        RawRead::Msg(OwnedMessage::Disconnect {
            reason,
            retry_after_ms,
            ..
        }) => Answer::Disconnected(reason, retry_after_ms),
        other => Answer::Other(format!("{other:?}")),
    }
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Accepted(_) => f.write_str("Accepted"),
            Answer::Rejected(r, ms) => write!(f, "Rejected({r:?}, {ms} ms)"),
            Answer::Disconnected(r, ms) => write!(f, "Disconnected({r:?}, {ms} ms)"),
            Answer::Other(s) => write!(f, "Other({s})"),
        }
    }
}

/// Logs on as a conforming client does: on `busy` or `rate_limited` it
/// comes back when the retry-after says (its own schedule, not a test
/// synchronisation), until accepted or `limit` passes. Panics on any
/// other answer. Returns the session and the answers it was given.
pub fn logon_following_retry_after(
    addr: SocketAddr,
    src: Option<Ipv4Addr>,
    account: &str,
    limit: Duration,
) -> (Raw, Vec<(LogonRejectReason, u32)>) {
    let until = Instant::now() + limit;
    let mut refusals = Vec::new();
    loop {
        match logon(addr, src, account) {
            Answer::Accepted(r) => return (r, refusals),
            // Admission refusing the connection (its rate per address)
            // says when to come back too.
            Answer::Disconnected(DisconnectReason::BUSY, retry_ms) if retry_ms > 0 => {
                assert!(
                    Instant::now() < until,
                    "{account} not served within {limit:?}"
                );
                std::thread::sleep(Duration::from_millis(u64::from(retry_ms)));
            }
            Answer::Rejected(reason, retry_ms)
                if reason == LogonRejectReason::BUSY
                    || reason == LogonRejectReason::RATE_LIMITED =>
            {
                refusals.push((reason, retry_ms));
                assert!(
                    Instant::now() < until,
                    "{account} not served within {limit:?}: {refusals:?}"
                );
                assert!(
                    retry_ms > 0,
                    "{account}: {reason:?} with retry-after 0 (do not come back)"
                );
                std::thread::sleep(Duration::from_millis(u64::from(retry_ms)));
            }
            other => panic!("{account}: {other:?} after {refusals:?}"),
        }
    }
}
