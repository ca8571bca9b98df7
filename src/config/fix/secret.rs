//! Logon credentials of a FIX provider: the [`Secret`] that never
//! prints, and where the Logon Password (554) comes from
//! (`password_env` or `password_file`, see docs/fix.md).

use super::{invalid, FixProviderFile, CREDENTIAL_LEN_MAX};
use crate::config::ConfigError;

/// A credential that never prints: `Debug` shows `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a clear-text credential.
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }
    /// The clear text, for the Logon message only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Whether resolving a configuration reads the providers' Logon
/// passwords (`password_env`, `password_file`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FeedSecrets {
    /// Read them (a process that runs the feeds): a missing variable or
    /// unreadable file is refused.
    #[default]
    Read,
    /// Leave them unread (`serve --role edge`, which runs no feed and
    /// must need nothing of them); every other setting is still checked
    /// and `password` stays `None`.
    Skip,
}

pub(super) fn credential_ok(v: &str) -> bool {
    !v.is_empty() && v.len() <= CREDENTIAL_LEN_MAX && v.bytes().all(|b| b.is_ascii_graphic())
}

/// `password_env` and `password_file` are not both set (checked whether
/// or not they are read).
pub(super) fn check_password_source(
    f: &FixProviderFile,
    key: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if f.password_env.is_some() && f.password_file.is_some() {
        return Err(invalid(
            key("password_env"),
            "set password_env or password_file, not both",
        ));
    }
    Ok(())
}

/// The Logon Password when `secrets` says to read it; only the sources
/// checked otherwise.
pub(super) fn password(
    f: &FixProviderFile,
    key: &dyn Fn(&str) -> String,
    secrets: FeedSecrets,
) -> Result<Option<Secret>, ConfigError> {
    match secrets {
        FeedSecrets::Read => read_password(f, key),
        FeedSecrets::Skip => check_password_source(f, key).map(|()| None),
    }
}

/// The Logon Password from `password_env` or `password_file` (at most one);
/// errors name the variable or the file, never a value.
fn read_password(
    f: &FixProviderFile,
    key: &dyn Fn(&str) -> String,
) -> Result<Option<Secret>, ConfigError> {
    check_password_source(f, key)?;
    match (&f.password_env, &f.password_file) {
        (Some(var), _) => match std::env::var(var) {
            Ok(v) => Ok(Some(Secret::new(v))),
            Err(_) => Err(invalid(
                key("password_env"),
                format!("environment variable {var} is not set (or not UTF-8)"),
            )),
        },
        (None, Some(path)) => match std::fs::read_to_string(path) {
            Ok(v) => {
                let v = v.strip_suffix('\n').unwrap_or(&v);
                let v = v.strip_suffix('\r').unwrap_or(v);
                Ok(Some(Secret::new(v)))
            }
            Err(e) => Err(invalid(
                key("password_file"),
                format!("cannot read {}: {}", path.display(), e.kind()),
            )),
        },
        (None, None) => Ok(None),
    }
}
