//! Why a command line was refused: one type for every `serve` flag check.
//!
//! Each variant keeps the flag (or the flags) it is about and, where a
//! component refused a value, that component's error as `source()`. The
//! `Display` text is the message `pricewire serve` prints after `error: `;
//! tests and docs match it, so a variant renders exactly what the check
//! said before it was typed.

use std::error::Error as StdError;

/// An error from a component, kept whole so `source()` can return it.
pub type Cause = Box<dyn StdError + Send + Sync + 'static>;

/// Why a flag (or a combination of flags) was refused.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    /// A flag (or flags, or the setting they make) refused without its
    /// value: `--request-workers: 1..=64`.
    #[error("{flag}: {why}")]
    Flag {
        /// The flag or flags, as the message names them.
        flag: String,
        /// The range, or what the flag needs.
        why: String,
    },
    /// A flag refused with the value given: `--listen-backlog 0: must be 1..=N`.
    #[error("{flag} {value}: {why}")]
    Value {
        /// The flag.
        flag: String,
        /// The value as given (with any flag it was combined with).
        value: String,
        /// The range, or why the value cannot work.
        why: String,
    },
    /// A component refused what the flags built; the message names where
    /// (`--redis URL`, `[refdata]`, `--tls-cert/--tls-key`).
    #[error("{context}: {source}")]
    Refused {
        /// The flag, path or config section the error is about.
        context: String,
        /// The component's error.
        source: Cause,
    },
    /// A component refused what the flags built; its message says where.
    #[error("{0}")]
    Invalid(#[source] Cause),
    /// A secret (token, password) could not be read.
    #[error(transparent)]
    Secret(#[from] crate::cli::secret::SecretError),
}

impl ArgsError {
    /// `{flag}: {why}`.
    pub fn flag(flag: impl Into<String>, why: impl Into<String>) -> Self {
        Self::Flag {
            flag: flag.into(),
            why: why.into(),
        }
    }

    /// `{flag} {value}: {why}`.
    pub fn value(flag: impl Into<String>, value: impl ToString, why: impl Into<String>) -> Self {
        Self::Value {
            flag: flag.into(),
            value: value.to_string(),
            why: why.into(),
        }
    }

    /// `{context}: {source}`.
    pub fn refused(context: impl Into<String>, source: impl Into<Cause>) -> Self {
        Self::Refused {
            context: context.into(),
            source: source.into(),
        }
    }

    /// The component's own message.
    pub fn invalid(source: impl Into<Cause>) -> Self {
        Self::Invalid(source.into())
    }
}

/// At the edge where a caller keeps a `String` error.
impl From<ArgsError> for String {
    fn from(e: ArgsError) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_messages_the_checks_printed() {
        assert_eq!(
            ArgsError::flag("--request-workers", "1..=64").to_string(),
            "--request-workers: 1..=64"
        );
        assert_eq!(
            ArgsError::value("--listen-backlog", 0, "must be 1..=4096").to_string(),
            "--listen-backlog 0: must be 1..=4096"
        );
        let io = std::io::Error::other("denied");
        let e = ArgsError::refused("--record /x", io);
        assert_eq!(e.to_string(), "--record /x: denied");
        assert_eq!(e.source().unwrap().to_string(), "denied");
        let e = ArgsError::invalid("bad [engine]".to_string());
        assert_eq!(e.to_string(), "bad [engine]");
        assert!(e.source().is_some());
        assert!(ArgsError::flag("a", "b").source().is_none());
    }
}
