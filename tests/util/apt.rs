//! Installs the Debian package of a server a test starts (redis-server,
//! nats-server, haproxy) when its program is missing: once per test
//! process, and a clear failure when that is impossible (no root, no
//! package mirror).
//!
//! Included by the server helpers next to it (`#[path = "apt.rs"] mod
//! apt;`), not by tests directly.

#![allow(dead_code)] // each test binary uses a different part

use std::process::{Command, Stdio};
use std::sync::OnceLock;

fn run(cmd: &mut Command) -> bool {
    cmd.env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Makes sure `program` runs (`program version_arg` exits 0), installing
/// `package` with apt-get if not; `once` holds the outcome for the rest of
/// the process. Panics with the reason when the program cannot be had.
pub fn ensure_installed(
    once: &'static OnceLock<Result<(), String>>,
    program: &str,
    version_arg: &str,
    package: &str,
) {
    let present = || run(Command::new(program).arg(version_arg));
    let result = once.get_or_init(|| {
        if present() {
            return Ok(());
        }
        let install = || run(Command::new("apt-get").args(["install", "-y", "-q", package]));
        if !install() {
            // A fresh machine may have no package lists yet.
            run(Command::new("apt-get").args(["update", "-q"]));
            install();
        }
        if present() {
            Ok(())
        } else {
            Err(format!(
                "{program} is not installed and `apt-get install -y {package}` failed \
                 (needs root and Debian's package mirror); install it by hand"
            ))
        }
    });
    if let Err(msg) = result {
        panic!("{msg}");
    }
}
