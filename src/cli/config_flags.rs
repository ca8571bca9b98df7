//! Flags from the config file: the `[serve]` table of the file named by
//! `--config` supplies flags the command line does not give, so every knob
//! can live in the file and the command line still wins. Values go through
//! the same parser as typed flags, so an invalid value is refused with the
//! same message and exit code.
//!
//! ```toml
//! [serve]
//! synthetic-rate = 50000
//! shards = 2
//! feed-listen = "127.0.0.1:9410"
//! no-synthetic = true        # a switch: true adds it, false leaves it out
//! ```

use std::ffi::OsString;

/// Why the config file's `[serve]` table was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFlagsError {
    /// The file is not TOML.
    #[error("config file {path}: {source}")]
    Toml {
        /// The path as given to `--config`.
        path: String,
        /// The parser's message.
        source: toml::de::Error,
    },
    /// `serve` is not a table.
    #[error("config key `serve`: must be a table of flags")]
    NotATable,
    /// A key's value is negative (every numeric flag is unsigned).
    #[error(
        "config key `serve.{key}`: {value} is negative; every numeric flag is a count, \
         a size, a rate or a time"
    )]
    Negative {
        /// The key (the flag without `--`).
        key: String,
        /// The value written.
        value: i64,
    },
    /// A key's value is an array, a table or a date.
    #[error("config key `serve.{0}`: must be a string, number or boolean")]
    WrongType(String),
}

impl From<ConfigFlagsError> for String {
    fn from(e: ConfigFlagsError) -> String {
        e.to_string()
    }
}

/// Returns `args` with the `[serve]` flags of the `--config` file appended
/// where the command line does not already give them. Only for `serve`;
/// other commands and a missing or unreadable file leave `args` unchanged
/// (the `serve` command reports file errors itself).
pub fn merge(args: Vec<OsString>) -> Result<Vec<OsString>, ConfigFlagsError> {
    let strs: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if strs.get(1).map(String::as_str) != Some("serve") {
        return Ok(args);
    }
    let Some(path) = config_path(&strs) else {
        return Ok(args);
    };
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(args);
    };
    let table: toml::Table = text
        .parse()
        .map_err(|source| ConfigFlagsError::Toml { path, source })?;
    let Some(serve) = table.get("serve") else {
        return Ok(args);
    };
    let serve = serve.as_table().ok_or(ConfigFlagsError::NotATable)?;
    let mut out = args;
    for (key, value) in serve {
        let flag = format!("--{key}");
        if strs
            .iter()
            .any(|a| a == &flag || a.starts_with(&format!("{flag}=")))
        {
            continue;
        }
        append(&mut out, &flag, key, value)?;
    }
    Ok(out)
}

fn config_path(args: &[String]) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == "--config" {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix("--config=").map(str::to_string)
        }
    })
}

fn append(
    out: &mut Vec<OsString>,
    flag: &str,
    key: &str,
    value: &toml::Value,
) -> Result<(), ConfigFlagsError> {
    let text = match value {
        toml::Value::Boolean(true) => {
            out.push(flag.into());
            return Ok(());
        }
        toml::Value::Boolean(false) => return Ok(()),
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) if *i < 0 => {
            let (key, value) = (key.to_string(), *i);
            return Err(ConfigFlagsError::Negative { key, value });
        }
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        _ => return Err(ConfigFlagsError::WrongType(key.to_string())),
    };
    out.push(flag.into());
    out.push(text.into());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn file_flags_fill_in_and_the_command_line_wins() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[serve]\nsynthetic-rate = 500\nshards = 2\nno-synthetic = true\nno-listen = false\nlisten = \"127.0.0.1:1\"\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let merged = merge(args(&[
            "pricewire",
            "serve",
            "--config",
            p,
            "--shards",
            "4",
        ]))
        .unwrap();
        let merged: Vec<String> = merged
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = merged.join(" ");
        assert!(joined.contains("--synthetic-rate 500"), "{joined}");
        assert!(joined.contains("--no-synthetic"), "{joined}");
        assert!(!joined.contains("--no-listen"), "{joined}");
        assert!(joined.contains("--listen 127.0.0.1:1"), "{joined}");
        assert_eq!(
            merged.iter().filter(|a| *a == "--shards").count(),
            1,
            "command line wins"
        );
    }

    #[test]
    fn other_commands_and_no_config_are_untouched() {
        let a = args(&["pricewire", "watch", "EURUSD"]);
        assert_eq!(merge(a.clone()).unwrap(), a);
        let b = args(&["pricewire", "serve"]);
        assert_eq!(merge(b.clone()).unwrap(), b);
    }

    #[test]
    fn a_table_value_is_refused_with_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[serve]\nshards = [1, 2]\n").unwrap();
        let err = merge(args(&[
            "pricewire",
            "serve",
            "--config",
            path.to_str().unwrap(),
        ]))
        .unwrap_err();
        assert!(
            matches!(&err, ConfigFlagsError::WrongType(k) if k == "shards"),
            "{err:?}"
        );
        let err = err.to_string();
        assert!(err.contains("serve.shards"), "{err}");
    }

    #[test]
    fn a_negative_number_is_refused_with_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[serve]\nsynthetic-rate = -10\n").unwrap();
        let err = merge(args(&[
            "pricewire",
            "serve",
            "--config",
            path.to_str().unwrap(),
        ]))
        .unwrap_err();
        assert!(
            matches!(&err, ConfigFlagsError::Negative { value: -10, .. }),
            "{err:?}"
        );
        let err = err.to_string();
        assert!(
            err.contains("serve.synthetic-rate") && err.contains("-10"),
            "{err}"
        );
    }
}
