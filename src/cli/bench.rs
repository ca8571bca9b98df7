//! `pricewire bench ARGS`: a thin pass-through to the benchmark lab, the
//! `pricewire-bench` binary of `tools/bench` (its own crate, so no bench
//! code or bench dependency is compiled into the service). Runs the
//! `pricewire-bench` next to this executable, else the one on `PATH`, with
//! the same arguments, and exits with its code; when there is none it says
//! how to build it and exits [`EXIT_USAGE`](super::EXIT_USAGE).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The lab's binary name.
pub(crate) const BENCH_BIN: &str = "pricewire-bench";

/// Arguments of `pricewire bench`: everything after `bench`, untouched
/// (`pricewire bench --help` shows the lab's help).
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct BenchArgs {
    /// Arguments for pricewire-bench (see `pricewire bench --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

/// Replaces this process with `pricewire-bench ARGS`; returns only when
/// that cannot start, with the exit code to use.
pub fn run(args: BenchArgs) -> i32 {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join(BENCH_BIN)))
        .filter(|p| p.is_file());
    let path = beside.or_else(|| on_path(std::env::var_os("PATH").as_deref()));
    let Some(path) = path else {
        eprintln!(
            "error: `pricewire bench` runs the {BENCH_BIN} binary, found neither next to \
             this executable nor on PATH; build it with \
             `cargo build --release -p {BENCH_BIN}` (it lands beside target/release/pricewire)"
        );
        return super::EXIT_USAGE;
    };
    // exec only returns on failure; on success the lab's exit code is ours.
    let e: io::Error = Command::new(&path).args(&args.args).exec();
    eprintln!("error: cannot run {}: {e}", path.display());
    super::EXIT_USAGE
}

/// The first `pricewire-bench` file in the directories of `path_var`.
fn on_path(path_var: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path_var?)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(BENCH_BIN))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_lookup_finds_only_an_executable_file() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join(BENCH_BIN);
        let var = std::env::join_paths(["", dir.path().to_str().unwrap()]).unwrap();
        assert_eq!(on_path(Some(&var)), None, "no file yet");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        assert_eq!(on_path(Some(&var)), None, "not executable");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(on_path(Some(&var)), Some(bin));
        assert_eq!(on_path(None), None);
    }
}
