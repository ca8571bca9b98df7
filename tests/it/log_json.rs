//! `--log-format json` on the real binary: every line of a short run is one
//! JSON object with the documented keys (docs/operations.md § Logs), and
//! text from outside — a FIX counterparty's Text (58) holding a line break
//! and a line that looks like one of ours — stays inside one JSON string.

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use crate::util::fix_hostile;
use crate::util::net;
use crate::util::wait::wait_until;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

/// A Text (58) value with a line break followed by a forged JSON log line.
const HOSTILE: &str =
    "evil\r\n{\"timestamp\":\"2026-01-01T00:00:00Z\",\"level\":\"INFO\",\"message\":\"FORGED\"}";

/// Runs `serve --log-format json` against a hostile FIX counterparty
/// (Text [`HOSTILE`]) until the reject is logged, stops it with SIGTERM
/// and returns its stderr.
fn run_json_serve(dir: &std::path::Path) -> String {
    let fix = TcpListener::bind("127.0.0.1:0").unwrap();
    let toml = format!(
        "[[providers]]\nname = \"lp1\"\nkind = \"synthetic\"\n\
         [[providers]]\nname = \"lp-fix\"\nkind = \"fix\"\n[providers.fix]\n\
         host = \"127.0.0.1\"\nport = {}\nsender_comp_id = \"PRICEWIRE\"\n\
         target_comp_id = \"LPSIM\"\nsymbols = {{ \"EUR/USD\" = \"EURUSD\" }}\n",
        fix.local_addr().unwrap().port()
    );
    let cfg = dir.join("pricewire.toml");
    std::fs::write(&cfg, toml).unwrap();
    let peer = std::thread::spawn(move || fix_hostile::counterparty(fix, WAIT, HOSTILE, None));
    let (listen, ops) = (net::free_addr(), net::free_addr());
    let log = dir.join("stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args(["serve", "--log-format", "json", "--config"])
        .arg(&cfg)
        .args(["--listen", &listen.to_string()])
        .args(["--ops-listen", &ops.to_string()])
        .args(["--report-interval-ms", "200", "--drain-delay-ms", "0"])
        .args(["--synthetic-rate", "200", "--shards", "1"])
        .env("RUST_LOG", "info")
        .env_remove("HOSTNAME")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    peer.join().unwrap();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let logged = wait_until(WAIT, || read().contains("MarketDataRequest rejected"));
    net::signal(child.id(), "-TERM");
    let exited = wait_until(WAIT, || child.try_wait().ok().flatten().is_some());
    if !exited {
        let _ = child.kill();
    }
    assert!(
        logged && exited,
        "logged {logged}, exited {exited}:\n{}",
        read()
    );
    read()
}

#[test]
fn every_line_is_one_json_object_with_the_documented_keys() {
    let dir = tempfile::tempdir().unwrap();
    let text = run_json_serve(dir.path());
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect();
    assert!(lines.len() >= 3, "too few lines:\n{text}");
    for v in &lines {
        for key in ["timestamp", "level", "target", "threadName", "message"] {
            assert!(v[key].is_string(), "no string `{key}` in {v}");
        }
        let level = v["level"].as_str().unwrap();
        assert!(
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level),
            "{v}"
        );
        assert!(
            v["target"].as_str().unwrap().starts_with("pricewire"),
            "{v}"
        );
    }
    // A stage's lines carry the stage span and its field.
    let in_stage = lines.iter().find(|v| v["span"]["name"] == "stage");
    let in_stage = in_stage.unwrap_or_else(|| panic!("no line inside a stage span:\n{text}"));
    assert!(in_stage["span"]["stage"].is_string(), "{in_stage}");
    assert!(in_stage["spans"].is_array(), "{in_stage}");

    // The outside text: in one line's field, escaped, never a line of its own.
    let forged: Vec<&Value> = lines.iter().filter(|v| v["message"] == "FORGED").collect();
    assert!(forged.is_empty(), "a forged line: {forged:?}");
    let rejected: Vec<&Value> = lines
        .iter()
        .filter(|v| v["message"] == "MarketDataRequest rejected")
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    let whole = rejected[0].to_string();
    assert!(
        whole.contains("evil") && whole.contains("FORGED"),
        "{whole}"
    );
    let values: Vec<&str> = rejected[0]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_str)
        .filter(|s| s.contains("FORGED"))
        .collect();
    assert_eq!(values.len(), 1, "{whole}");
    assert!(
        values[0].contains("evil\\r\\n{") && !values[0].contains('\n'),
        "not escaped: {:?}",
        values[0]
    );
}
