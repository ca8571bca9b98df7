//! Secrets for the command line (a logon token, the shared ingest token,
//! the Redis password) without putting them on argv, where `ps` shows them
//! to every user of the host and shell history keeps them.
//!
//! Each secret has three sources, in this order:
//!
//! 1. a file flag (`--token-file PATH`): the file's first line, without
//!    its line ending. A file group- or world-readable draws a warning;
//! 2. the value flag (`--token VALUE`), kept for scripts and demos: given
//!    on the command line with anything but the documented public default
//!    (`demo`, `demo-feed`), it draws a warning naming the safer sources;
//! 3. an environment variable (`PRICEWIRE_TOKEN`), which only the process's
//!    own user (and root) can read in `/proc/<pid>/environ`.
//!
//! The file and value flags together are refused. A missing, unreadable,
//! empty, multi-line or oversized file is refused naming the flag and the
//! path, never the content; so is an empty variable.

use std::ffi::OsString;
use std::path::Path;

/// Largest secret file read, in bytes: a token or a password, not a
/// document (a wrong path is caught instead of read whole).
pub const SECRET_FILE_MAX: u64 = 4096;

/// Environment variable of the provider ingest token: the shared value
/// `serve` accepts on a loopback ingest listener (`--ingest-token`), and
/// the token `replay --to` and `pricewire-bench` log on with (`--token`).
pub const INGEST_TOKEN_ENV: &str = "PRICEWIRE_INGEST_TOKEN";

/// The provider ingest token from `flag` / `file_flag` /
/// [`INGEST_TOKEN_ENV`], else [`INGEST_TOKEN_DEFAULT`](crate::feed::ingest::INGEST_TOKEN_DEFAULT).
///
/// # Errors
/// As [`Sources::resolve`].
pub fn ingest_token(
    (flag, value): (&str, Option<&str>),
    (file_flag, file): (&str, Option<&Path>),
) -> Result<String, SecretError> {
    let default = crate::feed::ingest::INGEST_TOKEN_DEFAULT;
    let sources = Sources {
        flag,
        value,
        file_flag,
        file,
        env: INGEST_TOKEN_ENV,
        env_value: std::env::var_os(INGEST_TOKEN_ENV),
    };
    Ok(sources
        .resolve(Some(default))?
        .map_or_else(|| default.to_string(), |s| s.value))
}

/// Why a secret was refused. The message names the source (flag, file,
/// variable) and never holds the secret.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file flag and the value flag were both given.
    #[error("{file_flag} and {flag}: give one (the file keeps the secret off the command line)")]
    Both {
        /// The file flag (`--token-file`).
        file_flag: String,
        /// The value flag (`--token`).
        flag: String,
    },
    /// The file could not be opened or read.
    #[error("{flag} {path}: {source}")]
    Unreadable {
        /// The file flag.
        flag: String,
        /// The path as given.
        path: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not one non-empty line of at most [`SECRET_FILE_MAX`] bytes.
    #[error("{flag} {path}: {why}")]
    NotOneLine {
        /// The file flag.
        flag: String,
        /// The path as given.
        path: String,
        /// `empty`, `more than one line` or the size limit.
        why: String,
    },
    /// The environment variable is set but empty or not UTF-8.
    #[error("{0}: set but empty or not UTF-8")]
    EmptyVariable(String),
}

impl From<SecretError> for String {
    fn from(e: SecretError) -> String {
        e.to_string()
    }
}

/// Where a secret came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The file flag.
    File,
    /// The value flag.
    Flag,
    /// The environment variable.
    Env,
    /// None of them: the caller's default.
    Default,
}

/// A resolved secret. `Debug` does not show the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    /// The secret itself.
    pub value: String,
    /// Which source gave it.
    pub origin: Origin,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("value", &"<redacted>")
            .field("origin", &self.origin)
            .finish()
    }
}

/// One secret's sources (see the module docs). Not `Debug`: it holds the
/// secret.
#[derive(Clone)]
pub struct Sources<'a> {
    /// The value flag, e.g. `--token`.
    pub flag: &'a str,
    /// Its value, if given.
    pub value: Option<&'a str>,
    /// The file flag, e.g. `--token-file`.
    pub file_flag: &'a str,
    /// Its path, if given.
    pub file: Option<&'a Path>,
    /// The environment variable's name, e.g. `PRICEWIRE_TOKEN`.
    pub env: &'a str,
    /// Its value, read by the caller (`std::env::var_os`), so that tests
    /// need not change the process environment.
    pub env_value: Option<OsString>,
}

impl Sources<'_> {
    /// Resolves the secret, falling back to `default` (`None`: no secret).
    /// Warnings go to stderr (see the module docs).
    ///
    /// # Errors
    /// Both flags given; the file cannot be read or holds no single line;
    /// the variable is empty or not UTF-8. The message names the source and
    /// never contains the secret.
    pub fn resolve(&self, default: Option<&str>) -> Result<Option<Secret>, SecretError> {
        let found = self.pick(default)?;
        if let Some(s) = &found {
            for w in self.warnings(s, default, on_argv(self.flag)) {
                eprintln!("warning: {w}");
            }
        }
        Ok(found)
    }

    fn pick(&self, default: Option<&str>) -> Result<Option<Secret>, SecretError> {
        let secret = |value: String, origin| Some(Secret { value, origin });
        match (self.file, self.value) {
            (Some(_), Some(_)) => Err(SecretError::Both {
                file_flag: self.file_flag.to_string(),
                flag: self.flag.to_string(),
            }),
            (Some(path), None) => Ok(secret(read_file(self.file_flag, path)?, Origin::File)),
            (None, Some(v)) => Ok(secret(v.to_string(), Origin::Flag)),
            (None, None) => match &self.env_value {
                Some(v) => {
                    let v = v
                        .to_str()
                        .filter(|v| !v.is_empty())
                        .ok_or_else(|| SecretError::EmptyVariable(self.env.to_string()))?;
                    Ok(secret(v.to_string(), Origin::Env))
                }
                None => Ok(default.and_then(|d| secret(d.to_string(), Origin::Default))),
            },
        }
    }

    /// What to warn about `s` (`typed`: the value flag is on this process's
    /// real command line, not merged in from a config file).
    fn warnings(&self, s: &Secret, default: Option<&str>, typed: bool) -> Vec<String> {
        let mut out = Vec::new();
        if s.origin == Origin::Flag && typed && Some(s.value.as_str()) != default {
            out.push(format!(
                "{} puts the secret in the process list (ps) and shell history, visible \
                 to other users of this host; use {} PATH or {} instead",
                self.flag, self.file_flag, self.env
            ));
        }
        if let (Origin::File, Some(path)) = (s.origin, self.file) {
            out.extend(loose_file_warning(self.file_flag, path));
        }
        out
    }
}

/// The warning a secret file named by `flag` draws when group or others
/// may read it (a token file, a TLS private key), `None` otherwise.
pub fn loose_file_warning(flag: &str, path: &Path) -> Option<String> {
    let mode = loose_mode(path)?;
    Some(format!(
        "{flag} {}: readable by other users (mode {mode:o}); chmod 600 it",
        path.display()
    ))
}

/// The first line of `path`, without its line ending.
fn read_file(flag: &str, path: &Path) -> Result<String, SecretError> {
    use std::io::Read;
    let (flag, shown) = (flag.to_string(), path.display().to_string());
    let unreadable = |source| SecretError::Unreadable {
        flag: flag.clone(),
        path: shown.clone(),
        source,
    };
    let refused = |why: &str| SecretError::NotOneLine {
        flag: flag.clone(),
        path: shown.clone(),
        why: why.to_string(),
    };
    let f = std::fs::File::open(path).map_err(unreadable)?;
    let mut text = String::new();
    f.take(SECRET_FILE_MAX + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    if text.len() as u64 > SECRET_FILE_MAX {
        let why = format!("larger than {SECRET_FILE_MAX} bytes; expected one line");
        return Err(refused(&why));
    }
    let line = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if line.is_empty() {
        return Err(refused("empty"));
    }
    if line.contains(['\n', '\r']) {
        return Err(refused("more than one line"));
    }
    Ok(line.to_string())
}

/// Warns on stderr when a secret file (a key, a `.creds` file) is
/// readable by group or others.
pub(crate) fn warn_if_loose(flag: &str, path: &Path) {
    if let Some(mode) = loose_mode(path) {
        eprintln!(
            "warning: {flag} {}: readable by other users (mode {mode:o}); chmod 600 it",
            path.display()
        );
    }
}

/// The file's permission bits when group or others may read it. A file
/// readable by its group only, that group being this process's own (a
/// Kubernetes Secret mounted with `fsGroup` set to the pod's group), is
/// not loose: nobody outside the process's own group can read it.
fn loose_mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(path).ok()?;
    let mode = meta.permissions().mode() & 0o777;
    let own_group = own_gid() == Some(meta.gid());
    let loose = mode & 0o004 != 0 || (mode & 0o040 != 0 && !own_group);
    loose.then_some(mode)
}

/// This process's effective group id (Linux: `/proc/self/status`).
fn own_gid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Gid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Whether `flag` is on this process's own command line (as `--flag V`
/// or `--flag=V`), where `ps` shows it.
fn on_argv(flag: &str) -> bool {
    let with_eq = format!("{flag}=");
    std::env::args_os().any(|a| {
        let a = a.to_string_lossy();
        a == flag || a.starts_with(&with_eq)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    fn sources<'a>(
        value: Option<&'a str>,
        file: Option<&'a Path>,
        env: Option<&str>,
    ) -> Sources<'a> {
        Sources {
            flag: "--token",
            value,
            file_flag: "--token-file",
            file,
            env: "PRICEWIRE_TOKEN",
            env_value: env.map(OsString::from),
        }
    }

    fn file(content: &[u8], mode: u32) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content).unwrap();
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        f
    }

    fn value(s: &Sources<'_>) -> Result<(String, Origin), String> {
        s.pick(Some("demo"))
            .map(|s| s.map(|s| (s.value, s.origin)).unwrap())
            .map_err(String::from)
    }

    #[test]
    fn file_then_flag_then_env_then_default() {
        let f = file(b"t0k-file\n", 0o600);
        let from_file = sources(None, Some(f.path()), Some("t0k-env"));
        assert_eq!(
            value(&from_file).unwrap(),
            ("t0k-file".into(), Origin::File)
        );
        let from_flag = sources(Some("t0k-flag"), None, Some("t0k-env"));
        assert_eq!(
            value(&from_flag).unwrap(),
            ("t0k-flag".into(), Origin::Flag)
        );
        let from_env = sources(None, None, Some("t0k-env"));
        assert_eq!(value(&from_env).unwrap(), ("t0k-env".into(), Origin::Env));
        assert_eq!(
            value(&sources(None, None, None)).unwrap(),
            ("demo".into(), Origin::Default)
        );
        assert_eq!(sources(None, None, None).pick(None).unwrap(), None);
    }

    #[test]
    fn file_and_flag_together_are_refused() {
        let f = file(b"x", 0o600);
        let err = value(&sources(Some("y"), Some(f.path()), None)).unwrap_err();
        assert!(err.contains("--token-file and --token"), "{err}");
    }

    #[test]
    fn refusals_are_typed_by_cause() {
        let f = file(b"x", 0o600);
        let both = sources(Some("y"), Some(f.path()), None).pick(None);
        assert!(matches!(both, Err(SecretError::Both { .. })), "{both:?}");
        let missing = sources(None, Some(Path::new("/nonexistent/pw")), None).pick(None);
        assert!(
            matches!(missing, Err(SecretError::Unreadable { .. })),
            "{missing:?}"
        );
        let empty = file(b"\n", 0o600);
        let empty = sources(None, Some(empty.path()), None).pick(None);
        assert!(matches!(&empty, Err(SecretError::NotOneLine { why, .. }) if why == "empty"));
        let env = sources(None, None, Some("")).pick(None);
        assert!(matches!(env, Err(SecretError::EmptyVariable(v)) if v == "PRICEWIRE_TOKEN"));
    }

    #[test]
    fn a_file_gives_its_one_line_without_the_ending() {
        for (content, want) in [
            (&b"abc"[..], "abc"),
            (b"abc\n", "abc"),
            (b"abc\r\n", "abc"),
            (b"a b\tc\n", "a b\tc"),
        ] {
            let f = file(content, 0o600);
            assert_eq!(value(&sources(None, Some(f.path()), None)).unwrap().0, want);
        }
    }

    #[test]
    fn bad_files_and_an_empty_variable_are_refused_without_the_secret() {
        let cases: [(&[u8], &str); 4] = [
            (b"", "empty"),
            (b"\n", "empty"),
            (b"s3cret\nmore\n", "more than one line"),
            (&[b'x'; 5000], "larger than 4096 bytes"),
        ];
        for (content, why) in cases {
            let f = file(content, 0o600);
            let err = value(&sources(None, Some(f.path()), None)).unwrap_err();
            assert!(err.starts_with("--token-file "), "{err}");
            assert!(err.contains(why), "{err}");
            assert!(!err.contains("s3cret"), "{err}");
        }
        let missing = Path::new("/nonexistent/pricewire-token");
        let err = value(&sources(None, Some(missing), None)).unwrap_err();
        assert!(
            err.contains("--token-file /nonexistent/pricewire-token"),
            "{err}"
        );
        let err = value(&sources(None, None, Some(""))).unwrap_err();
        assert!(err.contains("PRICEWIRE_TOKEN: set but empty"), "{err}");
    }

    #[test]
    fn warns_for_a_typed_secret_and_a_loose_file_only() {
        let s = sources(Some("t0k"), None, None);
        let typed = s.pick(Some("demo")).unwrap().unwrap();
        let w = s.warnings(&typed, Some("demo"), true);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("--token puts the secret in the process list"),
            "{w:?}"
        );
        assert!(
            w[0].contains("--token-file PATH or PRICEWIRE_TOKEN"),
            "{w:?}"
        );
        assert!(!w[0].contains("t0k"), "{w:?}");
        // From a config file's [serve] table, not argv: no warning.
        assert!(s.warnings(&typed, Some("demo"), false).is_empty());
        // The public default is no secret.
        let demo = sources(Some("demo"), None, None);
        let d = demo.pick(Some("demo")).unwrap().unwrap();
        assert!(demo.warnings(&d, Some("demo"), true).is_empty());
        let loose = file(b"t0k", 0o644);
        let s = sources(None, Some(loose.path()), None);
        let got = s.pick(None).unwrap().unwrap();
        let w = s.warnings(&got, None, false);
        assert!(w.len() == 1 && w[0].contains("mode 644"), "{w:?}");
        // Readable by its group, that group being ours (a Secret mounted
        // with the pod's fsGroup): not loose. By others: loose.
        let group = file(b"t0k", 0o640);
        assert_eq!(loose_mode(group.path()), None);
        let world = file(b"t0k", 0o604);
        assert_eq!(loose_mode(world.path()), Some(0o604));
        let tight = file(b"t0k", 0o600);
        let s = sources(None, Some(tight.path()), None);
        let got = s.pick(None).unwrap().unwrap();
        assert!(s.warnings(&got, None, false).is_empty());
    }
}
