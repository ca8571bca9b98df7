//! The real servers the tests start (redis-server, nats-server, haproxy)
//! are installed by `tools/test-deps` (which `.ci/run` runs), never as a
//! side effect of `cargo test`. A test whose program is missing fails at
//! once and says how to install it.

#![allow(dead_code)] // each test binary uses a different part

use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Makes sure `program` runs (`program version_arg` exits 0); `once` holds
/// the outcome for the rest of the process. Panics naming `package` and
/// `tools/test-deps` when it does not.
pub fn ensure_installed(
    once: &'static OnceLock<Result<(), String>>,
    program: &str,
    version_arg: &str,
    package: &str,
) {
    let result = once.get_or_init(|| {
        let runs = Command::new(program)
            .arg(version_arg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if runs {
            Ok(())
        } else {
            Err(format!(
                "{program} is not installed: run tools/test-deps (Debian package \
                 {package}; needs root or sudo)"
            ))
        }
    });
    if let Err(msg) = result {
        panic!("{msg}");
    }
}
