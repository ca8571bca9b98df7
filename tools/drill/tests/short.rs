//! The short form of the failure matrix, in `cargo test`: the scenarios
//! marked short, on the real `pricewire` binary (built by this workspace)
//! and a real 3-node nats-server cluster (installed from Debian's
//! packages if missing), with untimed verdicts. Fails naming every
//! invariant or check that broke.

use pricewire_drill::lab::LabConfig;
use pricewire_drill::report;
use pricewire_drill::scenarios::SCENARIOS;

/// The workspace's debug `pricewire`, brought up to date first (a binary
/// of another package is not built for this test by cargo itself).
fn pricewire_bin() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "-p", "pricewire", "--bin", "pricewire"])
        .current_dir(&root)
        .status()
        .expect("cargo build");
    assert!(status.success(), "building pricewire failed");
    root.join("target/debug/pricewire")
}

fn ensure_nats_server() {
    let have = std::process::Command::new("nats-server")
        .arg("--version")
        .output();
    if have.is_ok_and(|o| o.status.success()) {
        return;
    }
    let ok = std::process::Command::new("apt-get")
        .args(["install", "-y", "nats-server"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "nats-server is missing and could not be installed");
}

#[test]
fn the_short_failure_matrix_holds_every_invariant() {
    ensure_nats_server();
    let dir = tempfile::tempdir().unwrap();
    let cfg = LabConfig {
        pricewire_bin: pricewire_bin(),
        nats_bin: "nats-server".into(),
        logs: dir.path().join("logs"),
        short: true,
        plain: false,
    };
    let rows: Vec<_> = SCENARIOS
        .iter()
        .filter(|s| s.short)
        .map(|s| report::run(s, &cfg))
        .collect();
    let table = report::table(&rows);
    println!("{table}");
    assert!(
        rows.iter().all(|r| r.ok),
        "{table}\nlogs: {}",
        dir.keep().display()
    );
}
