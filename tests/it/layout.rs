//! The test tree's layout: every integration test is a module of this
//! binary unless it must own its process, and no file is left out.
//!
//! Cargo builds each `tests/*.rs` as a binary of its own and ignores a
//! file under `tests/it/` that `main.rs` does not name, so a test could
//! be added that never runs, or one that links on its own again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// The `.rs` files of `dir`, by stem.
fn rust_files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// The names of `mod name;` / `pub mod name;` lines in `file`.
fn declared_modules(file: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("pub ").unwrap_or(l.trim());
            l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
        })
        .collect()
}

#[test]
fn every_file_under_it_is_a_module_of_this_binary() {
    let dir = tests_dir().join("it");
    let mut files = rust_files(&dir);
    files.remove("main");
    let declared = declared_modules(&dir.join("main.rs"));
    let missing: Vec<_> = files.difference(&declared).collect();
    assert!(
        missing.is_empty(),
        "not named in tests/it/main.rs: {missing:?}"
    );
}

/// What a stand-alone binary's reason to own its process looks like: a
/// counting allocator, or a module doc line saying what it reads.
const OWNS_ITS_PROCESS: &str = "//! Owns its process: ";

#[test]
fn only_tests_that_must_own_their_process_stand_alone() {
    for stem in rust_files(&tests_dir()) {
        let path = tests_dir().join(format!("{stem}.rs"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("#[global_allocator]") || text.contains(OWNS_ITS_PROCESS),
            "tests/{stem}.rs links as a binary of its own: make it a module \
             of tests/it/, or say why it must own its process \
             (`{OWNS_ITS_PROCESS}...`; a counting global allocator needs none)"
        );
    }
}

#[test]
fn every_helper_is_in_the_util_module() {
    let dir = tests_dir().join("util");
    let mut files = rust_files(&dir);
    // The counting allocator is only for the stand-alone binaries; apt is
    // included by the server helpers themselves.
    for own in ["mod", "alloc", "apt"] {
        files.remove(own);
    }
    let declared = declared_modules(&dir.join("mod.rs"));
    let missing: Vec<_> = files.difference(&declared).collect();
    assert!(
        missing.is_empty(),
        "not named in tests/util/mod.rs: {missing:?}"
    );
}
