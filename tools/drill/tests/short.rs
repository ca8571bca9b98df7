//! The short form of the failure matrix, in `cargo test`: the scenarios
//! marked short, on the real `pricewire` binary (built by this workspace)
//! and a real 3-node nats-server cluster (`tools/test-deps` installs
//! it), with untimed verdicts. Fails naming every
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

/// nats-server is installed by `tools/test-deps`, never by this test.
fn ensure_nats_server() {
    let runs = std::process::Command::new("nats-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        runs,
        "nats-server is not installed: run tools/test-deps (Debian package nats-server; needs root or sudo)"
    );
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
