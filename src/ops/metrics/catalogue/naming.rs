//! The naming conventions every metric family follows, the catalogue's
//! and any family defined at run time: [`check_conventions`] names the
//! family and the rule it breaks.

use super::{FamilyDesc, MetricKind, DEPRECATED};

/// A naming rule of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamingRule {
    /// `pricewire_[a-z0-9_]+`.
    Prefix,
    /// Counters, and only counters, end in `_total`.
    Total,
    /// A value in seconds carries `_seconds`.
    Seconds,
    /// Ratios end in `_ratio`.
    Ratio,
    /// Times are in seconds, not ns, µs or ms.
    TimeUnit,
    /// Label names are `[a-z_]+` and never `le`.
    Labels,
}

impl std::fmt::Display for NamingRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NamingRule::Prefix => "names are pricewire_[a-z0-9_]+",
            NamingRule::Total => "counters, and only counters, end in _total",
            NamingRule::Seconds => "a value in seconds carries _seconds",
            NamingRule::Ratio => "ratios end in _ratio",
            NamingRule::TimeUnit => "times are in seconds",
            NamingRule::Labels => "label names are [a-z_]+ and never `le`",
        })
    }
}

/// A family that breaks a naming rule: `{name}: {rule}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {rule}")]
pub struct NamingError {
    /// The family's name.
    pub name: &'static str,
    /// The rule it breaks.
    pub rule: NamingRule,
}

/// Checks the naming conventions of one family; `Err` names the rule broken.
pub fn check_conventions(f: &FamilyDesc) -> Result<(), NamingError> {
    let broken = |rule| Err(NamingError { name: f.name, rule });
    let valid_chars = f
        .name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !f.name.starts_with("pricewire_") || !valid_chars {
        return broken(NamingRule::Prefix);
    }
    if (f.kind == MetricKind::Counter) != f.name.ends_with("_total") {
        return broken(NamingRule::Total);
    }
    if f.unit == "seconds" && !f.name.contains("_seconds") {
        return broken(NamingRule::Seconds);
    }
    let deprecated = DEPRECATED.iter().any(|r| r.old == f.name);
    if f.unit == "ratio" && !f.name.ends_with("_ratio") && !deprecated {
        return broken(NamingRule::Ratio);
    }
    let base = !["nanoseconds", "microseconds", "milliseconds"].contains(&f.unit);
    if !(base || deprecated) {
        return broken(NamingRule::TimeUnit);
    }
    let label_ok = |l: &&str| {
        !l.is_empty() && *l != "le" && l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
    };
    if !f.labels.iter().all(label_ok) {
        return broken(NamingRule::Labels);
    }
    Ok(())
}
