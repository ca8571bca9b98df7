//! One version everywhere: the workspace's `version` (Cargo.toml) is the
//! Python client's `__version__`, and both changelogs have a section for it.

use std::path::Path;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The string value of `name = "..."` on a line of `text`.
fn assigned<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    text.lines().find_map(|l| {
        let rest = l
            .trim()
            .strip_prefix(name)?
            .trim_start()
            .strip_prefix('=')?;
        Some(rest.trim().trim_matches('"'))
    })
}

#[test]
fn the_python_client_has_the_workspace_version() {
    let init = read("clients/python/pricewire_client/__init__.py");
    assert_eq!(assigned(&init, "__version__"), Some(VERSION));
    let pyproject = read("clients/python/pyproject.toml");
    assert!(
        pyproject.contains(r#"version = { attr = "pricewire_client.__version__" }"#),
        "the wheel's version is read from __version__"
    );
}

#[test]
fn both_changelogs_describe_this_version() {
    for rel in ["CHANGELOG.md", "clients/python/CHANGELOG.md"] {
        let text = read(rel);
        let heading = format!("## [{VERSION}] - ");
        assert!(text.contains(&heading), "{rel} has no `{heading}` section");
        assert!(
            text.contains("## [Unreleased]"),
            "{rel}: Keep a Changelog's Unreleased"
        );
    }
}

#[test]
fn assigned_reads_a_quoted_value() {
    assert_eq!(
        assigned("x = 1\n__version__ = \"9.8.7\"\n", "__version__"),
        Some("9.8.7")
    );
    assert_eq!(assigned("__version_info__ = (1,)\n", "__version__"), None);
}
