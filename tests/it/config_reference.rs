//! `docs/config.md`, the configuration file's reference, is generated from
//! the definitions the binary itself reads, and this test holds the
//! committed file equal to the generation:
//!
//! - `[serve]`: every `serve` flag, from the clap definition (`--help`'s
//!   own text, defaults, value types and headings), since every flag may
//!   live in that table (`cli::config_flags`);
//! - the other tables: every field of the serde structs the file is read
//!   into, from their source (the doc comment, the Rust type, the serde
//!   default), with named default constants resolved to their values.
//!
//! A key added to a struct or a flag added to `serve` changes the
//! generation, so the doc cannot drift. Regenerate with
//! `PRICEWIRE_BLESS=1 cargo test --test it config_reference::`.

use std::any::TypeId;
use std::path::{Path, PathBuf};

use clap::ArgAction;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One documented key.
struct Key {
    key: String,
    ty: String,
    default: String,
    range: String,
    meaning: String,
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn table(keys: &[Key]) -> String {
    let mut out = String::from(
        "| key | type | default | range | meaning |\n| --- | --- | --- | --- | --- |\n",
    );
    for k in keys {
        out += &format!(
            "| `{}` | {} | {} | {} | {} |\n",
            k.key,
            cell(&k.ty),
            cell(&k.default),
            cell(&k.range),
            cell(&k.meaning)
        );
    }
    out
}

/// The first `A..=B` a text states, if any.
fn stated_range(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let at = text.find("..=")?;
    let start = text[..at]
        .rfind(|c: char| !(c.is_ascii_digit() || c == '_' || c == ',' || c == '.' || c == '-'))
        .map_or(0, |i| i + 1);
    let mut end = at + 3;
    while end < b.len() && (b[end].is_ascii_digit() || b[end] == b'_' || b[end] == b',') {
        end += 1;
    }
    let r = text[start..end].trim_end_matches(',');
    (start < at && end > at + 3).then(|| r.to_string())
}

fn int_range(is: impl Fn(TypeId) -> bool) -> Option<&'static str> {
    [
        (TypeId::of::<u8>(), "0..=255"),
        (TypeId::of::<u16>(), "0..=65535"),
        (TypeId::of::<u32>(), "≥ 0"),
        (TypeId::of::<u64>(), "≥ 0"),
        (TypeId::of::<usize>(), "≥ 0"),
        (TypeId::of::<i64>(), "any integer"),
    ]
    .into_iter()
    .find_map(|(t, r)| is(t).then_some(r))
}

// ---- [serve]: the clap definition ----

fn serve_key(arg: &clap::Arg) -> Option<Key> {
    let key = arg.get_long()?.to_string();
    if key == "help" || key == "config" {
        return None;
    }
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let unit = arg
        .get_value_names()
        .and_then(|v| v.first())
        .map(|v| format!(" `{v}`"))
        .unwrap_or_default();
    let id = arg.get_value_parser().type_id();
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    let (ty, range) = if matches!(arg.get_action(), ArgAction::SetTrue) {
        (
            "boolean (a switch)".to_string(),
            "`true`, `false`".to_string(),
        )
    } else if !values.is_empty() {
        ("string".to_string(), values.join(", "))
    } else if let Some(r) = int_range(|t| id == t) {
        let r = stated_range(&help).unwrap_or_else(|| r.to_string());
        (format!("integer{unit}"), r)
    } else if id == TypeId::of::<f64>() {
        (
            format!("number{unit}"),
            stated_range(&help).unwrap_or("—".into()),
        )
    } else if id == TypeId::of::<PathBuf>() {
        (format!("path{unit}"), "—".into())
    } else {
        (
            format!("string{unit}"),
            stated_range(&help).unwrap_or("—".into()),
        )
    };
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let default = match defaults.first().map(String::as_str) {
        _ if matches!(arg.get_action(), ArgAction::SetTrue) => "`false`".to_string(),
        None => "unset (see meaning)".to_string(),
        Some("") => "empty".to_string(),
        Some(_) => format!("`{}`", defaults.join(",")),
    };
    Some(Key {
        key,
        ty,
        default,
        range,
        meaning: help,
    })
}

/// `serve` as the binary parses it, global flags (`--log-format`) included.
fn serve_command() -> clap::Command {
    let mut cli = pricewire::cli::help::command();
    cli.build();
    cli.find_subcommand("serve").expect("serve").clone()
}

fn serve_section() -> String {
    let serve = serve_command();
    let mut groups: Vec<(String, Vec<Key>)> = Vec::new();
    for arg in serve.get_arguments() {
        let heading = arg.get_help_heading().unwrap_or("Options").to_string();
        let Some(key) = serve_key(arg) else { continue };
        match groups.iter_mut().find(|(h, _)| *h == heading) {
            Some((_, keys)) => keys.push(key),
            None => groups.push((heading, vec![key])),
        }
    }
    let mut out = String::new();
    for (heading, keys) in groups {
        out += &format!("### {heading}\n\n{}\n", table(&keys));
    }
    out
}

// ---- the other tables: the serde structs, from their source ----

/// The fields of `pub struct NAME` in `file`: (name, type, serde attribute,
/// doc text).
fn fields(file: &str, name: &str) -> Vec<(String, String, String, String)> {
    let src = std::fs::read_to_string(root().join(file)).expect(file);
    let open = format!("pub struct {name} {{");
    let body = src
        .split(&open)
        .nth(1)
        .unwrap_or_else(|| panic!("{name} in {file}"));
    let (mut out, mut doc, mut attr) = (Vec::new(), Vec::<String>::new(), String::new());
    for line in body.lines().map(str::trim) {
        if line == "}" {
            break;
        } else if let Some(d) = line.strip_prefix("///") {
            doc.push(d.trim().to_string());
        } else if line.starts_with("#[serde(") {
            attr = line.to_string();
        } else if let Some(f) = line.strip_prefix("pub ") {
            let (n, t) = f.split_once(':').expect("field: type");
            let t = t.trim().trim_end_matches(',').to_string();
            out.push((n.to_string(), t, std::mem::take(&mut attr), doc.join(" ")));
            doc.clear();
        }
    }
    out
}

/// The value of `pub const NAME` anywhere under src/.
fn const_value(name: &str) -> Option<String> {
    let want = format!("pub const {name}:");
    let mut stack = vec![root().join("src")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).ok()?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let src = std::fs::read_to_string(&p).ok()?;
                if let Some(rest) = src.split(&want).nth(1) {
                    let v = rest.split_once('=')?.1.split(';').next()?.trim();
                    return Some(v.replace('_', ""));
                }
            }
        }
    }
    None
}

/// `[`NAME`]` links in doc text replaced by the constant's value.
fn resolve(text: &str) -> String {
    let mut out = text.to_string();
    while let Some(i) = out.find("[`") {
        let Some(j) = out[i..].find("`]").map(|j| i + j) else {
            break;
        };
        // `damping::FLAP_REUSE_DEFAULT`: the constant is the last segment.
        let path = out[i + 2..j].to_string();
        let name = path.rsplit("::").next().unwrap_or(&path).to_string();
        let v = if name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            const_value(&name).unwrap_or_else(|| panic!("no const {name}"))
        } else {
            format!("`{path}`")
        };
        out.replace_range(i..j + 2, &v);
    }
    out
}

/// The default a doc states: `(default X)` or `default X;`.
fn stated_default(doc: &str) -> Option<String> {
    let i = doc.find("default ")?;
    let rest = &doc[i + 8..];
    let end = rest.find([')', ';']).unwrap_or(rest.len());
    // "default 5, at most 300": the default is 5 (but "10,000" is one number).
    let d = rest[..end].split(", ").next().unwrap_or("");
    let d = d.trim().trim_end_matches('.');
    (!d.is_empty() && !d.starts_with("is ")).then(|| d.to_string())
}

fn toml_type(rust: &str) -> (String, Option<&'static str>) {
    let ints = [
        ("u8", "0..=255"),
        ("u16", "0..=65535"),
        ("u32", "≥ 0"),
        ("u64", "≥ 0"),
        ("usize", "≥ 0"),
        ("Mantissa", "any integer"),
    ];
    if let Some((_, r)) = ints.iter().find(|(t, _)| *t == rust) {
        return ("integer".into(), Some(r));
    }
    let ty = match rust {
        "bool" => "boolean",
        "String" => "string",
        "std::path::PathBuf" => "string (a path)",
        "ProviderKind" => "string: `synthetic`, `ingest` or `fix`",
        "Vec<String>" => "array of strings",
        "BTreeMap<String, String>" => "table of strings",
        "BTreeMap<String, Mantissa>" => "table of integers",
        "toml::Table" | "EngineFile" => "table",
        "fix::FixProviderFile" => "table (`[providers.fix]`)",
        t if t.starts_with("Vec<") => "array of tables",
        t => panic!("no TOML type for {t}"),
    };
    (ty.into(), None)
}

fn file_keys(file: &str, name: &str, defaults: &[(&str, String)]) -> Vec<Key> {
    let mut keys = Vec::new();
    for (key, rust, attr, doc) in fields(file, name) {
        let doc = resolve(&doc);
        let (inner, optional) = match rust.strip_prefix("Option<") {
            Some(t) => (t.strip_suffix('>').unwrap().to_string(), true),
            None => (rust.clone(), false),
        };
        let (ty, type_range) = toml_type(&inner);
        let from_table = defaults
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone());
        let default = match (
            from_table.or_else(|| stated_default(&doc)),
            optional,
            attr.contains("default"),
        ) {
            (Some(d), _, _) => d,
            (None, true, _) => "absent".into(),
            (None, false, true) if ty == "boolean" => "`false`".into(),
            (None, false, true) => "empty / 0".into(),
            (None, false, false) => "required".into(),
        };
        let range = stated_range(&doc)
            .or(type_range.map(str::to_string))
            .unwrap_or("—".into());
        keys.push(Key {
            key,
            ty,
            default,
            range,
            meaning: doc,
        });
    }
    keys
}

/// `[refdata]` defaults: the keys carry none in their docs; they are the
/// defaults of the settings `RefDataFile::apply` writes over.
fn refdata_defaults() -> Vec<(&'static str, String)> {
    use pricewire::refdata::{CacheConfig, RedisConfig};
    let c = CacheConfig::default();
    let r = RedisConfig::new(std::net::SocketAddr::from(([127, 0, 0, 1], 6379)));
    let window = match r.breaker.window {
        pricewire::resilience::breaker::WindowKind::Time { window_s } => window_s.to_string(),
        other => format!("{other:?}"),
    };
    let b = &r.breaker;
    [
        ("ttl_ms", c.ttl_ms.to_string()),
        ("negative_ttl_ms", c.negative_ttl_ms.to_string()),
        ("ttl_jitter_pct", c.ttl_jitter_pct.to_string()),
        ("max_stale_ms", c.max_stale_ms.to_string()),
        ("entries_max", c.entries_max.to_string()),
        ("request_queue_max", c.request_queue_max.to_string()),
        ("miss_retry_after_ms", c.miss_retry_after_ms.to_string()),
        ("backoff_base_ms", c.backoff.base_ms.to_string()),
        ("backoff_cap_ms", c.backoff.cap_ms.to_string()),
        ("probe_interval_ms", c.probe_interval_ms.to_string()),
        ("recovery_rate_per_s", c.recovery_rate_per_s.to_string()),
        ("prefetch_max", c.prefetch_max.to_string()),
        ("connect_timeout_ms", r.connect_timeout_ms.to_string()),
        ("io_timeout_ms", r.io_timeout_ms.to_string()),
        ("checkout_timeout_ms", r.checkout_timeout_ms.to_string()),
        ("pool_size", r.pool_size_max.to_string()),
        ("key_prefix", format!("`{}`", r.key_prefix)),
        ("slow_call_ms", r.slow_call_ms.to_string()),
        ("breaker_window_s", window),
        ("breaker_minimum_calls", b.minimum_calls.to_string()),
        (
            "breaker_failure_rate_pct",
            b.failure_rate_threshold_pct.to_string(),
        ),
        (
            "breaker_slow_call_rate_pct",
            b.slow_call_rate_threshold_pct.to_string(),
        ),
        ("breaker_open_wait_ms", b.open_wait_ms.to_string()),
        (
            "breaker_half_open_calls",
            b.half_open_permitted_calls.to_string(),
        ),
        (
            "breaker_consecutive_failures",
            r.breaker_consecutive_failures.to_string(),
        ),
    ]
    .into()
}

const TABLES: &[(&str, &str, &str, &str)] = &[
    (
        "Top-level keys",
        "src/config/mod.rs",
        "ConfigFile",
        "The file's own keys and tables.",
    ),
    (
        "`[engine]`",
        "src/config/mod.rs",
        "EngineFile",
        "Aggregation settings; `serve`'s `--max-quote-age-ms` and `--spike-bps` override them.",
    ),
    (
        "`[[instruments]]`",
        "src/config/mod.rs",
        "InstrumentFile",
        "One entry per symbol; absent: the built-in instruments.",
    ),
    (
        "`[[tiers]]`",
        "src/config/mod.rs",
        "TierFile",
        "One entry per price tier; absent: the built-in tiers.",
    ),
    (
        "`[[providers]]`",
        "src/config/mod.rs",
        "ProviderFile",
        "One entry per liquidity provider; absent: `--providers` synthetic ones.",
    ),
    (
        "`[providers.fix]`",
        "src/config/fix.rs",
        "FixProviderFile",
        "The FIX 4.4 session of a `kind = \"fix\"` provider (docs/fix.md).",
    ),
    (
        "`[[accounts]]`",
        "src/config/accounts.rs",
        "AccountFile",
        "One entry per subscriber account; absent: the built-in demo account.",
    ),
    (
        "`[refdata]`",
        "src/refdata/file.rs",
        "RefDataFile",
        "Reference data from Redis, used with `--redis` (docs/refdata.md).",
    ),
];

fn render() -> String {
    let mut out = String::from(
        "# Configuration reference\n\n\
         Generated from the definitions the binary reads — the `serve` flags and the\n\
         structs the file is read into — by `tests/it/config_reference.rs`; do not edit by\n\
         hand: `PRICEWIRE_BLESS=1 cargo test --test it config_reference::` regenerates it.\n\n\
         The file is TOML, named by `pricewire serve --config FILE`; every table is\n\
         optional and what is absent keeps its default. A value out of range is refused\n\
         at start-up with a message naming the key, and exit code 2.\n\n\
         Ranges are the ones a key's meaning states, else the range of its type; a\n\
         default of \"unset (see meaning)\" is one the meaning describes (it depends on\n\
         other settings).\n\n\
         ## `[serve]`\n\n\
         Every `serve` flag may be a key of the `[serve]` table, without its `--`:\n\
         `synthetic-rate = 50000`, `no-synthetic = true`. A switch is `true` (given) or\n\
         `false` (left out); a flag given on the command line wins over the file.\n\
         The groups are those of `serve --help`.\n\n",
    );
    out += &serve_section();
    for (title, file, name, intro) in TABLES {
        let defaults = if *name == "RefDataFile" {
            refdata_defaults()
        } else {
            Vec::new()
        };
        out += &format!(
            "## {title}\n\n{intro} (`{name}`, {file})\n\n{}\n",
            table(&file_keys(file, name, &defaults))
        );
    }
    out.trim_end().to_string() + "\n"
}

#[test]
fn config_doc_equals_the_generated_reference() {
    let path = root().join("docs/config.md");
    let want = render();
    if std::env::var_os("PRICEWIRE_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/config.md differs from the generated reference; \
         run PRICEWIRE_BLESS=1 cargo test --test it config_reference::"
    );
}

#[test]
fn every_config_struct_field_and_serve_flag_is_in_the_reference() {
    let doc = render();
    for (_, file, name, _) in TABLES {
        for (key, ..) in fields(file, name) {
            assert!(doc.contains(&format!("| `{key}` |")), "{name}.{key}");
        }
    }
    let serve = serve_command();
    for arg in serve.get_arguments().filter_map(|a| a.get_long()) {
        if arg != "help" && arg != "config" {
            assert!(doc.contains(&format!("| `{arg}` |")), "--{arg}");
        }
    }
}

#[test]
fn ranges_and_defaults_are_read_from_the_text() {
    assert_eq!(
        stated_range("workers, 1..=64 of them").as_deref(),
        Some("1..=64")
    );
    assert_eq!(
        stated_range("0..=1_000_000 per second").as_deref(),
        Some("0..=1_000_000")
    );
    assert_eq!(stated_range("no range"), None);
    assert_eq!(
        stated_default("in ms (default 2000).").as_deref(),
        Some("2000")
    );
    assert_eq!(
        stated_default("(≥ 1; default 10,000)").as_deref(),
        Some("10,000")
    );
    assert!(Path::new(&root().join("src/config/mod.rs")).exists());
}
