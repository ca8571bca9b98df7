//! Why [`GatewayConfig::validate`](super::GatewayConfig::validate) refused
//! the gateway's settings: the flag (or flags) at fault and the range it
//! must be in. The `Display` text is what `pricewire serve` prints after
//! `error: `; tests match it, so each variant renders what the check said
//! before it was typed.

/// A gateway setting refused, naming the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// A flag outside its range, without its value:
    /// `--out-cap-bytes: at least 4096`.
    #[error("{flag}: {range}")]
    Range {
        /// The flag (or the flags named together).
        flag: &'static str,
        /// What the flag must be.
        range: String,
    },
    /// A flag outside its range, with the value given:
    /// `--fd-reserve 8: 32..=65536 (descriptors)`.
    #[error("{flag} {value}: {range}")]
    Value {
        /// The flag.
        flag: &'static str,
        /// The value given.
        value: u64,
        /// What the flag must be.
        range: String,
    },
    /// Settings that must hold together and do not:
    /// `--low-water-bytes < --high-water-bytes < --out-cap-bytes must hold`.
    #[error("{0}")]
    Order(&'static str),
    /// `--max-update-hz` refused by the accounts' rule.
    #[error("--max-update-hz {0}")]
    MaxUpdateHz(#[source] crate::config::UpdateHzError),
    /// The admission settings refused.
    #[error(transparent)]
    Admission(#[from] crate::admission::AdmissionError),
}

impl SettingsError {
    /// `{flag}: {range}`.
    pub(super) fn range(flag: &'static str, range: impl Into<String>) -> SettingsError {
        SettingsError::Range {
            flag,
            range: range.into(),
        }
    }

    /// `{flag} {value}: {range}`.
    pub(super) fn value(flag: &'static str, value: u64, range: impl Into<String>) -> SettingsError {
        SettingsError::Value {
            flag,
            value,
            range: range.into(),
        }
    }

    /// The flag at fault (the first, where several are named together).
    pub fn flag(&self) -> &'static str {
        match self {
            SettingsError::Range { flag, .. } | SettingsError::Value { flag, .. } => flag,
            SettingsError::Order(what) => what.split_whitespace().next().unwrap_or(what),
            SettingsError::MaxUpdateHz(_) => "--max-update-hz",
            SettingsError::Admission(_) => "admission",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_messages_the_checks_printed() {
        let e = SettingsError::range("--out-cap-bytes", "at least 4096");
        assert_eq!(e.to_string(), "--out-cap-bytes: at least 4096");
        let e = SettingsError::value("--fd-reserve", 8, "32..=65536 (descriptors)");
        assert_eq!(e.to_string(), "--fd-reserve 8: 32..=65536 (descriptors)");
        assert_eq!(e.flag(), "--fd-reserve");
        let e = SettingsError::MaxUpdateHz(crate::config::UpdateHzError { hz: 2_000 });
        assert!(
            e.to_string().starts_with("--max-update-hz 2000: must be 0"),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
    }
}
