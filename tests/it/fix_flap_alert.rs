//! The flapping-LP alert on the real binary: `pricewire serve` on its
//! shipped FIX defaults against QuickFIX as an LP that logs every session
//! out 1.5 s after its Logon (`tools/quickfix-lp --flap 1500`). Its
//! `/metrics` must make the expression of `PricewireProviderFlapping` in
//! `deploy/alerts.yaml` true, for longer than the rule's `for:` (the
//! damping's remaining time says so), with the provider out of the price.
//! Every wait is bounded by a condition; nothing depends on the host's
//! speed (the LP's sessions end early however slowly we run).

use crate::util::net;
use crate::util::quickfix;
use crate::util::wait;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use quickfix::QuickFixLp;
use yaml_rust2::YamlLoader;

const LIMIT: Duration = Duration::from_secs(40);

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `(expr, for)` of the alert rule `name` in deploy/alerts.yaml.
fn alert(name: &str) -> (String, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/alerts.yaml");
    let docs = YamlLoader::load_from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let rules = docs[0]["groups"][0]["rules"].as_vec().unwrap();
    let rule = rules
        .iter()
        .find(|r| r["alert"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no alert {name}"));
    let field = |k: &str| rule[k].as_str().unwrap().to_string();
    (field("expr"), field("for"))
}

/// The value of `family{provider="lp-a"}` in a scrape.
fn sample(body: &str, family: &str) -> Option<f64> {
    let key = format!("{family}{{provider=\"lp-a\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
}

fn seconds(duration: &str) -> f64 {
    let (n, unit) = duration.split_at(duration.len() - 1);
    let n: f64 = n.parse().unwrap();
    match unit {
        "s" => n,
        "m" => n * 60.0,
        other => panic!("unit {other}"),
    }
}

fn serve(lp: &QuickFixLp, dir: &Path, ops: std::net::SocketAddr) -> Killed {
    let config = dir.join("pricewire.toml");
    let toml = format!(
        "[[instruments]]\nname = \"EURUSD\"\ndigits = 5\n\
         [[providers]]\nname = \"lp-a\"\nkind = \"fix\"\n[providers.fix]\n\
         host = \"127.0.0.1\"\nport = {}\nsender_comp_id = \"{}\"\n\
         target_comp_id = \"{}\"\nsymbols = {{ \"EURUSD\" = \"EURUSD\" }}\n",
        lp.addr().port(),
        quickfix::OUR_COMP_ID,
        quickfix::LP_COMP_ID,
    );
    std::fs::write(&config, toml).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .args(["--no-synthetic", "--report-interval-ms", "60000"])
        .args(["--listen", &net::free_addr().to_string()])
        .args(["--ops-listen", &ops.to_string()])
        .args(["--drain-delay-ms", "0", "--grace-ms", "2000"])
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Killed(child)
}

#[test]
fn a_flapping_lp_makes_the_flapping_alert_fire_on_shipped_defaults() {
    let (expr, hold) = alert("PricewireProviderFlapping");
    let (family, value) = expr.split_once(" == ").expect("METRIC == VALUE");
    let value: f64 = value.trim().parse().unwrap();

    let lp = QuickFixLp::start(&[
        "--symbol",
        "EURUSD=1.08120:5",
        "--rate",
        "50",
        "--flap",
        "1500",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let ops = net::free_addr();
    let _server = serve(&lp, dir.path(), ops);

    let mut body = String::new();
    let held = wait::wait_until(LIMIT, || {
        body = net::http_body(ops, "/metrics").unwrap_or_default();
        sample(&body, family) == Some(value)
    });
    assert!(held, "{expr} never held:\n{body}");
    // It will hold for longer than the rule's `for:`, unless the LP stops.
    let left = sample(&body, "pricewire_provider_damped_seconds").unwrap();
    assert!(
        left > seconds(&hold),
        "damped {left} s left, alert needs {hold}"
    );
    assert_eq!(sample(&body, "pricewire_provider_healthy"), Some(0.0));
    let flaps = sample(&body, "pricewire_provider_flaps_total").unwrap();
    assert!(flaps >= 2.0, "two early ends damp: {flaps}");
    assert!(sample(&body, "pricewire_provider_damping_penalty").unwrap() >= 1_500.0);
    assert!(lp.count(|l| l.contains("flap logout")) >= 2);
}
