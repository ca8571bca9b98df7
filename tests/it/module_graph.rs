//! The top-level modules form a layered graph: no module reaches, directly
//! or through others, back to itself. This test reads every `crate::<top>`
//! path in `src/` (imports, paths in code and doc links alike — a doc link
//! is a dependency of the reader) and fails naming the cycle and the lines
//! that make it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// `from -> to -> [file:line, ...]` for every top-level edge.
type Edges = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`lib` and `main`
/// are the crate roots, not modules).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib" && name != "main").then(|| name.to_string())
}

/// Every `crate::name` on a line.
fn crate_paths(line: &str) -> impl Iterator<Item = &str> + '_ {
    line.match_indices("crate::").filter_map(move |(i, _)| {
        let before = line[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return None; // `pricewire_crate::` or similar: not ours
        }
        let rest = &line[i + "crate::".len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    })
}

fn edges(src: &Path) -> Edges {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out = Edges::new();
    for file in files {
        let Some(from) = top_module(src, &file) else {
            continue;
        };
        let text = fs::read_to_string(&file).expect("source is UTF-8");
        for (n, line) in text.lines().enumerate() {
            for to in crate_paths(line) {
                let is_module = src.join(format!("{to}.rs")).exists() || src.join(to).is_dir();
                if to != from && is_module {
                    out.entry(from.clone())
                        .or_default()
                        .entry(to.to_string())
                        .or_default()
                        .push(format!("{}:{}", file.display(), n + 1));
                }
            }
        }
    }
    out
}

/// A cycle through `start`, as the list of modules, if there is one.
fn cycle_from(edges: &Edges, start: &str) -> Option<Vec<String>> {
    fn walk(
        edges: &Edges,
        start: &str,
        at: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in edges.get(at).into_iter().flat_map(|m| m.keys()) {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(edges, start, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    walk(edges, start, start, &mut path, &mut seen).then_some(path)
}

#[test]
fn no_cycle_between_top_level_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = edges(&src);
    assert!(
        edges.len() > 10,
        "the reader found too few modules: {edges:?}"
    );
    for start in edges.keys() {
        if let Some(cycle) = cycle_from(&edges, start) {
            let mut report = format!("import cycle: {} -> {start}\n", cycle.join(" -> "));
            for pair in cycle
                .windows(2)
                .chain([[cycle[cycle.len() - 1].clone(), start.clone()].as_slice()])
            {
                let lines = &edges[&pair[0]][&pair[1]];
                report += &format!("  {} -> {}: {}\n", pair[0], pair[1], lines.join(", "));
            }
            panic!("{report}");
        }
    }
}

/// The reader itself: it must see a dependency that is really there, and
/// must find a cycle when one exists.
#[test]
fn the_reader_sees_edges_and_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = edges(&src);
    assert!(
        edges
            .get("gateway")
            .is_some_and(|m| m.contains_key("engine")),
        "gateway uses engine"
    );
    let mut planted = Edges::new();
    planted
        .entry("a".into())
        .or_default()
        .insert("b".into(), vec![]);
    planted
        .entry("b".into())
        .or_default()
        .insert("a".into(), vec![]);
    assert_eq!(
        cycle_from(&planted, "a"),
        Some(vec!["a".into(), "b".into()])
    );
    assert_eq!(
        crate_paths("use crate::engine::{X}; // crate::wire").collect::<Vec<_>>(),
        ["engine", "wire"]
    );
}
