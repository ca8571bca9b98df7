//! No stage dies unseen, on the real binary: for every stage kind a
//! planted panic (`PRICEWIRE_FAULT_PANIC=<stage>:<after_ms>`, the drill
//! switch) must (1) be logged naming the stage that died, (2) fail
//! `/livez` with 503 naming it — observed before the exit wherever the ops
//! listener still answers — and (3) end the process with code 70, after
//! the documented grace (`--stage-exit-grace-ms`, default 1000 ms) and
//! within it plus an allowance for a loaded host. Each case is one short
//! `serve`; stages whose threading differs run in both modes.

use crate::util::nats;
use crate::util::net;
use crate::util::pki;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shipped default of `--stage-exit-grace-ms`.
const GRACE_MS: u64 = pricewire::runtime::supervise::STAGE_EXIT_GRACE_MS_DEFAULT;
/// What a loaded test host may add to the grace before the exit is seen
/// (scheduling, the test's own polling): not a speed bound, a bound on
/// "the process does exit".
const ALLOWANCE: Duration = Duration::from_secs(10);
/// The longest one case may take from spawn to exit.
const CASE_TIMEOUT: Duration = Duration::from_secs(60);
/// When the drill fires after start-up: usually after `/readyz`, so the
/// stage dies while serving. A case the test triggers (a signal, sent
/// once ready) arms at once instead, so the trigger always finds it due.
const AFTER_MS: u64 = 500;

/// What makes the planted stage reach its drill point.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Trigger {
    /// Its own loop does (a timer, an idle turn).
    None,
    /// SIGTERM once ready (the signal thread).
    Sigterm,
    /// SIGHUP once ready (the TLS reload thread).
    Sighup,
}

struct Case {
    /// `PRICEWIRE_FAULT_PANIC` target.
    drill: &'static str,
    /// The thread that must be reported dead.
    stage: &'static str,
    /// Extra flags.
    args: Vec<String>,
    trigger: Trigger,
    /// `/livez` can answer after the death (not when the ops accept
    /// thread itself died).
    livez: bool,
}

impl Case {
    fn new(drill: &'static str, stage: &'static str, threading: &str) -> Case {
        Case {
            drill,
            stage,
            args: vec!["--threading".into(), threading.into()],
            trigger: Trigger::None,
            livez: true,
        }
    }

    fn with(mut self, args: &[&str]) -> Case {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    fn on(mut self, trigger: Trigger) -> Case {
        self.trigger = trigger;
        self
    }
}

struct Run {
    child: Child,
    ops: SocketAddr,
    log: tempfile::NamedTempFile,
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(case: &Case) -> Run {
    let (ops, listen) = (net::free_addr(), net::free_addr());
    let log = tempfile::NamedTempFile::new().unwrap();
    let after = if case.trigger == Trigger::None {
        AFTER_MS
    } else {
        0
    };
    let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .arg("serve")
        .args(["--ops-listen", &ops.to_string()])
        .args(["--listen", &listen.to_string()])
        .args(["--synthetic-rate", "2000", "--report-interval-ms", "600000"])
        .args(&case.args)
        .env("PRICEWIRE_FAULT_PANIC", format!("{}:{after}", case.drill))
        .env("RUST_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    Run { child, ops, log }
}

fn trigger(run: &Run, t: Trigger) {
    let pid = run.child.id();
    match t {
        Trigger::None => {}
        Trigger::Sigterm => net::signal(pid, "-TERM"),
        Trigger::Sighup => net::signal(pid, "-HUP"),
    }
}

/// What one case saw.
struct Seen {
    code: Option<i32>,
    /// When `/livez` first answered 503 naming the stage.
    livez_503: Option<Instant>,
    /// `/readyz` right after that first 503.
    readyz: Option<u16>,
    exited: Instant,
    log: String,
}

fn observe(case: &Case) -> Seen {
    let mut run = spawn(case);
    let start = Instant::now();
    let (mut triggered, mut livez_503) = (case.trigger == Trigger::None, None);
    let mut readyz = None;
    let status = loop {
        if let Some(status) = run.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < CASE_TIMEOUT,
            "{}: still running",
            case.drill
        );
        if !triggered && net::ready(run.ops) {
            trigger(&run, case.trigger);
            triggered = true;
        }
        if livez_503.is_none() {
            if let Some((503, body)) = net::http_answer(run.ops, "/livez") {
                assert!(
                    body.contains(case.stage),
                    "{}: /livez said {body:?}",
                    case.drill
                );
                livez_503 = Some(Instant::now());
                readyz = net::http_status(run.ops, "/readyz");
            }
        }
        // Polling pace of the probes, not a synchronisation.
        std::thread::sleep(Duration::from_millis(10));
    };
    let exited = Instant::now();
    let raw = std::fs::read_to_string(run.log.path()).unwrap();
    Seen {
        code: status.code(),
        livez_503,
        readyz,
        exited,
        log: strip_ansi(&raw),
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The milliseconds the process reported between the death and its exit.
fn reported_after_ms(log: &str) -> Option<u64> {
    let line = log.lines().find(|l| l.contains("exiting: a stage died"))?;
    let v = line.split("after_ms=").nth(1)?;
    v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

fn check(case: &Case) {
    let seen = observe(case);
    let what = format!("{} ({:?})", case.drill, case.args);
    let tail: String = seen
        .log
        .lines()
        .rev()
        .take(12)
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(seen.code, Some(70), "{what}: exit code; log tail:\n{tail}");
    let died = format!("stage died stage={}", case.stage);
    assert!(
        seen.log.contains(&died),
        "{what}: no `{died}` in the log:\n{tail}"
    );
    let kind = case.drill.trim_end_matches(|c: char| c.is_ascii_digit());
    let cause = format!("planted panic in stage {kind}");
    assert!(
        seen.log.contains(&cause),
        "{what}: the cause is not logged:\n{tail}"
    );
    let after = reported_after_ms(&seen.log).unwrap_or_else(|| panic!("{what}: no exit line"));
    assert!(
        after >= GRACE_MS,
        "{what}: exited {after} ms after the death, before the grace"
    );
    if case.livez {
        let at = seen
            .livez_503
            .unwrap_or_else(|| panic!("{what}: /livez never answered 503 before the exit"));
        // Unanswered is fine: the process may have gone by then.
        assert_ne!(
            seen.readyz,
            Some(200),
            "{what}: /readyz still 200 after the death"
        );
        let grace = Duration::from_millis(GRACE_MS);
        assert!(
            seen.exited.duration_since(at) <= grace + ALLOWANCE,
            "{what}: exit came too long after /livez failed"
        );
    }
}

fn both(
    drill: &'static str,
    stage_shared: &'static str,
    stage_dedicated: &'static str,
) -> [Case; 2] {
    [
        Case::new(drill, stage_shared, "shared"),
        Case::new(drill, stage_dedicated, "dedicated"),
    ]
}

#[test]
fn a_planted_panic_in_each_price_stage_fails_livez_and_exits_70() {
    let feed = ["--feed-listen", "127.0.0.1:0"];
    let mut cases = Vec::new();
    cases.extend(both("shard0", "pw-shard0", "pw-shard0"));
    // Shared: the engine and the ingest listener are shard 0's tasks.
    cases.extend(both("engine", "pw-shard0", "pw-engine"));
    let [a, b] = both("ingest", "pw-shard0", "pw-ingest");
    cases.extend([a.with(&feed), b.with(&feed)]);
    cases.extend(both("feed", "pw-feed0-synthetic", "pw-feed0-synthetic"));
    cases.push(Case::new("acceptor", "pw-acceptor", "shared"));
    cases.push(Case::new("sink0", "pw-shard0", "shared").with(&["--no-listen"]));
    cases.push(Case::new("sink0", "pw-shard0", "dedicated").with(&["--no-listen"]));
    for case in &cases {
        check(case);
    }
}

#[test]
fn a_planted_panic_in_each_side_stage_fails_livez_and_exits_70() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("capture");
    let record = record.to_str().unwrap();
    let ca = pki::Ca::new("pricewire-test-ca");
    let files = pki::ServerFiles::write(dir.path(), &ca);
    let (cert, key) = (files.cert.to_str().unwrap(), files.key.to_str().unwrap());
    let cases = [
        Case::new("dispatch", "pw-dispatch", "shared"),
        Case::new("request0", "pw-request0", "shared"),
        Case::new("auth0", "pw-auth0", "shared"),
        Case::new("provauth0", "pw-provauth0", "shared").with(&["--feed-listen", "127.0.0.1:0"]),
        Case::new("refdata", "refdata-refresh", "shared").with(&["--redis", "redis://127.0.0.1:1"]),
        Case::new("recorder", "recorder", "shared").with(&["--record", record]),
        Case::new("ops-http0", "ops-http-0", "shared"),
        Case {
            livez: false, // the ops listener's own accept thread
            ..Case::new("ops-accept", "ops-accept", "shared")
        },
        Case::new("signals", "ops-signals", "shared").on(Trigger::Sigterm),
        Case::new("reload", "ops-reload", "shared")
            .with(&["--tls-cert", cert, "--tls-key", key])
            .on(Trigger::Sighup),
    ];
    for case in &cases {
        check(case);
    }
}

#[test]
fn a_planted_panic_in_a_core_bus_thread_fails_livez_and_exits_70() {
    let nats = nats::NatsServer::start();
    let url = nats.url();
    let case = Case::new("bus", "pw-bus", "dedicated").with(&[
        "--role",
        "core",
        "--bus",
        &url,
        "--bus-prefix",
        "pw-supervision",
    ]);
    check(&case);
}

#[test]
fn an_unset_or_bad_drill_switch_is_refused_or_inert() {
    let out = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["serve", "--duration-s", "1"])
        .env("PRICEWIRE_FAULT_PANIC", "shrad0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PRICEWIRE_FAULT_PANIC") && err.contains("unknown target"),
        "{err}"
    );
}

/// The recorder keeps its own thread: when the engine dies, what reached
/// the recorder ring is drained, flushed and fsynced within the grace.
#[test]
fn a_dead_engine_still_leaves_a_flushed_capture() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("capture");
    let case =
        Case::new("engine", "pw-engine", "dedicated").with(&["--record", record.to_str().unwrap()]);
    let seen = observe(&case);
    assert_eq!(seen.code, Some(70));
    assert!(
        seen.log.contains("capture flushed after a stage died"),
        "{}",
        seen.log
    );
    let bytes: u64 = std::fs::read_dir(&record)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(bytes > 0, "no capture written");
}
