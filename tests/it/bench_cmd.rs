//! `pricewire bench`: a pass-through to the `pricewire-bench` binary. A
//! copy of the service binary in a scratch directory, with a stand-in
//! `pricewire-bench` script beside it or on `PATH` (or none), shows where
//! it looks, that arguments and the exit code pass through, and what it
//! says when the lab is not built.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

/// Held while a test writes executables and runs them: a child forked by
/// another test thread while a file is still open for writing would make
/// its exec fail with "text file busy".
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The service binary copied into `dir` (so its own directory holds no
/// `pricewire-bench`).
fn service_in(dir: &Path) -> PathBuf {
    let bin = dir.join("pricewire");
    std::fs::copy(env!("CARGO_BIN_EXE_pricewire"), &bin).unwrap();
    bin
}

/// A stand-in lab that prints its tag and arguments and exits with `code`.
fn fake_bench(dir: &Path, tag: &str, code: i32) {
    let script = dir.join("pricewire-bench");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"{tag}: $*\"\nexit {code}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn bench(service: &Path, path_var: &Path, args: &[&str]) -> Output {
    Command::new(service)
        .arg("bench")
        .args(args)
        .env("PATH", path_var)
        .output()
        .unwrap()
}

#[test]
fn missing_lab_says_how_to_build_it_and_exits_2() {
    let _serial = serial();
    let (home, empty) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let service = service_in(home.path());
    let out = bench(&service, empty.path(), &["--target", "floor"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cargo build --release -p pricewire-bench"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn lab_beside_the_binary_wins_and_gets_every_argument_and_the_exit_code() {
    let _serial = serial();
    let (home, on_path) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let service = service_in(home.path());
    fake_bench(home.path(), "beside", 7);
    fake_bench(on_path.path(), "on-path", 0);
    let out = bench(
        &service,
        on_path.path(),
        &["--target", "redis", "--help", "-x", "two words"],
    );
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "beside: --target redis --help -x two words\n"
    );
}

#[test]
fn lab_on_path_is_used_when_none_is_beside() {
    let _serial = serial();
    let (home, on_path) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let service = service_in(home.path());
    fake_bench(on_path.path(), "on-path", 3);
    let out = bench(&service, on_path.path(), &[]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "on-path: \n");
}
