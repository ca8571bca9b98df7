//! The TOML configuration file: instruments, tiers, providers, accounts and
//! engine settings. Every section is optional; what is absent keeps the
//! built-in default, so `pricewire serve` runs with no file at all.
//!
//! Errors name the offending key (`instruments[3].digits`) and the reason.

mod accounts;
pub mod fix;

pub use accounts::{
    check_max_update_hz, Account, AccountFile, UpdateHzError, ACCOUNT_SESSIONS_DEFAULT,
    MAX_UPDATE_HZ_MAX, MAX_UPDATE_HZ_MIN,
};
use accounts::{demo_account, resolve_accounts};

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::model::instruments::{
    default_instruments, default_tiers, INSTRUMENTS_MAX, PROVIDERS_MAX, SYMBOL_NAME_LEN_MAX,
    TIERS_MAX,
};
use crate::model::price::{parse_price, DIGITS_MAX};
use crate::model::{Instrument, InstrumentTable, Mantissa, ProviderDef, ProviderKind, Tier};

/// A configuration problem: the key it concerns and why it was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {reason}")]
    Io {
        /// The file's path.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// The TOML does not parse or has an unknown key (parser message).
    #[error("config syntax error: {0}")]
    Syntax(String),
    /// A value is refused.
    #[error("config key `{key}`: {reason}")]
    Invalid {
        /// The key, with its place (`instruments[3].digits`).
        key: String,
        /// Why the value is refused.
        reason: String,
    },
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}

/// The file as written; turned into [`Config`] by [`ConfigFile::resolve`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    /// The `[engine]` table; every key defaults.
    pub engine: EngineFile,
    /// `[[instruments]]`; absent = the built-in instruments.
    pub instruments: Option<Vec<InstrumentFile>>,
    /// `[[tiers]]`; absent = the built-in tiers.
    pub tiers: Option<Vec<TierFile>>,
    /// `[[providers]]`; absent = as many synthetic providers as asked for.
    pub providers: Option<Vec<ProviderFile>>,
    /// `[[accounts]]`; absent = the built-in demo account.
    pub accounts: Option<Vec<AccountFile>>,
    /// Accept clear tokens in `accounts[].token` and `providers[].token`
    /// (loopback demos only; see docs/security.md). Default false: every
    /// token must be an argon2id hash from `pricewire token hash`.
    #[serde(default)]
    pub insecure_plain_tokens: bool,
    /// `serve` flags (`synthetic-rate = 50000`, `shards = 2`, ...): applied
    /// as if given on the command line, unless the command line gives them.
    /// See the `serve` flags (`cli::config_flags`).
    pub serve: Option<toml::Table>,
    /// Reference-data settings (`[refdata]`), used with `--redis`; read
    /// and checked by `refdata::RefDataFile::from_table`.
    pub refdata: Option<toml::Table>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
/// The `[engine]` table as written.
pub struct EngineFile {
    /// Quote age that excludes a provider, in ms (default [`MAX_QUOTE_AGE_MS_DEFAULT`]).
    pub max_quote_age_ms: Option<u64>,
    /// Spike filter threshold, in basis points (default [`SPIKE_BPS_DEFAULT`]).
    pub spike_bps: Option<u32>,
    /// Spike rejections in a row that accept the move (default
    /// [`SPIKE_CONFIRM_DEFAULT`]).
    pub spike_confirm: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// One `[[instruments]]` entry as written.
pub struct InstrumentFile {
    /// Symbol name (unique).
    pub name: String,
    /// Decimal digits of its prices (at most [`DIGITS_MAX`]).
    pub digits: u8,
    /// Decimal text, e.g. "1.08120".
    pub base_price: Option<String>,
    /// Typical provider spread of the synthetic feed, in points (default 10).
    pub spread_points: Option<Mantissa>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// One `[[tiers]]` entry as written.
pub struct TierFile {
    /// Tier name (unique).
    pub name: String,
    /// Points subtracted from the bid and added to the ask (not negative).
    pub markup_points: Mantissa,
    #[serde(default)]
    /// Markup per symbol name, replacing `markup_points` for that symbol.
    pub overrides: BTreeMap<String, Mantissa>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// One `[[providers]]` entry as written.
pub struct ProviderFile {
    /// Provider name (unique).
    pub name: String,
    /// `synthetic`, `ingest` or `fix`.
    pub kind: ProviderKind,
    #[serde(default)]
    /// Synthetic feed: constant offset of this provider's mid, in points.
    pub skew_points: Mantissa,
    #[serde(default)]
    /// Ingest: the token a bridge must present at ProviderLogon (required there).
    pub token: String,
    /// Connection settings of a `kind = "fix"` provider.
    #[serde(default)]
    pub fix: Option<fix::FixProviderFile>,
}

/// Default maximum provider quote age before it is excluded (ms).
pub const MAX_QUOTE_AGE_MS_DEFAULT: u64 = 2_000;
/// Default spike filter: a quote whose mid moves more than this many basis
/// points from the last accepted mid is rejected.
pub const SPIKE_BPS_DEFAULT: u32 = 100;
/// Default number of consecutive spike rejections after which the move is
/// taken as real and accepted (a genuine gap must not freeze the price).
pub const SPIKE_CONFIRM_DEFAULT: u32 = 3;

/// Engine settings after defaults are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Quote age that excludes a provider, in ms.
    pub max_quote_age_ms: u64,
    /// Spike filter threshold, in basis points of the last accepted mid.
    pub spike_bps: u32,
    /// Spike rejections in a row after which the move is accepted.
    pub spike_confirm: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_quote_age_ms: MAX_QUOTE_AGE_MS_DEFAULT,
            spike_bps: SPIKE_BPS_DEFAULT,
            spike_confirm: SPIKE_CONFIRM_DEFAULT,
        }
    }
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Instruments, tiers and providers.
    pub table: InstrumentTable,
    /// Engine settings.
    pub engine: EngineConfig,
    /// Accounts allowed to log on.
    pub accounts: Vec<Account>,
    /// One resolved session per `kind = "fix"` provider.
    pub fix: Vec<fix::FixSessionConfig>,
    /// The `[refdata]` table as written (empty when absent); `serve`
    /// checks it at start and applies it with `--redis`.
    pub refdata: toml::Table,
    /// The file set `insecure_plain_tokens`: clear tokens were accepted.
    pub insecure_plain_tokens: bool,
}

impl Config {
    /// Built-in defaults with `providers` synthetic providers.
    pub fn builtin(providers: usize) -> Config {
        ConfigFile::default()
            .resolve(providers)
            .expect("built-in configuration is valid")
    }

    /// Reads and resolves a file.
    pub fn load(path: &Path, synthetic_providers: usize) -> Result<Config, ConfigError> {
        Config::load_with(path, synthetic_providers, fix::FeedSecrets::Read)
    }

    /// Reads and resolves a file, reading the providers' Logon passwords
    /// or not (`FeedSecrets::Skip` on a process that runs no feed).
    pub fn load_with(
        path: &Path,
        synthetic_providers: usize,
        secrets: fix::FeedSecrets,
    ) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Io {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Config::parse_with(&text, synthetic_providers, secrets)
    }

    /// Parses and resolves TOML text.
    pub fn parse(text: &str, synthetic_providers: usize) -> Result<Config, ConfigError> {
        Config::parse_with(text, synthetic_providers, fix::FeedSecrets::Read)
    }

    /// Parses and resolves TOML text (see [`Config::load_with`]).
    pub fn parse_with(
        text: &str,
        synthetic_providers: usize,
        secrets: fix::FeedSecrets,
    ) -> Result<Config, ConfigError> {
        let file: ConfigFile =
            toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        file.resolve_with(synthetic_providers, secrets)
    }

    /// The account called `name`, if any.
    pub fn account(&self, name: &str) -> Option<&Account> {
        self.accounts.iter().find(|a| a.name == name)
    }
}

impl ConfigFile {
    /// Applies defaults and validates. `synthetic_providers` is used when
    /// the file names no providers.
    pub fn resolve(self, synthetic_providers: usize) -> Result<Config, ConfigError> {
        self.resolve_with(synthetic_providers, fix::FeedSecrets::Read)
    }

    /// The same, reading the providers' Logon passwords or not (see
    /// [`fix::FeedSecrets`]).
    pub fn resolve_with(
        self,
        synthetic_providers: usize,
        secrets: fix::FeedSecrets,
    ) -> Result<Config, ConfigError> {
        let instruments = match self.instruments {
            None => default_instruments(),
            Some(list) => resolve_instruments(list)?,
        };
        let names: BTreeMap<String, u16> = instruments
            .iter()
            .enumerate()
            .map(|(i, inst)| (inst.name.clone(), i as u16))
            .collect();
        let tiers = match self.tiers {
            None => default_tiers(),
            Some(list) => resolve_tiers(list, &names)?,
        };
        let plain = self.insecure_plain_tokens;
        let mut fix = Vec::new();
        let providers = match self.providers {
            None => {
                if synthetic_providers == 0 || synthetic_providers > PROVIDERS_MAX {
                    return Err(invalid(
                        "providers",
                        format!("synthetic provider count must be 1..={PROVIDERS_MAX}"),
                    ));
                }
                crate::model::instruments::synthetic_providers(synthetic_providers)
            }
            Some(list) => {
                fix = fix::resolve_all(&list, &instruments, secrets)?;
                resolve_providers(list, plain)?
            }
        };
        let engine = resolve_engine(&self.engine)?;
        // The gray rule judges quotes by the engine's own max age.
        for session in &mut fix {
            session.gray.max_quote_age_ms = engine.max_quote_age_ms;
        }
        let tier_names: Vec<String> = tiers.iter().map(|t| t.name.clone()).collect();
        let accounts = match self.accounts {
            None => vec![demo_account(tiers.len())],
            Some(list) => resolve_accounts(list, &names, &tier_names, plain)?,
        };
        let refdata = self.refdata.unwrap_or_default();
        Ok(Config {
            insecure_plain_tokens: plain,
            table: InstrumentTable::new(instruments, tiers, providers),
            engine,
            accounts,
            fix,
            refdata,
        })
    }
}

fn resolve_engine(e: &EngineFile) -> Result<EngineConfig, ConfigError> {
    let d = EngineConfig::default();
    let cfg = EngineConfig {
        max_quote_age_ms: e.max_quote_age_ms.unwrap_or(d.max_quote_age_ms),
        spike_bps: e.spike_bps.unwrap_or(d.spike_bps),
        spike_confirm: e.spike_confirm.unwrap_or(d.spike_confirm),
    };
    if cfg.max_quote_age_ms == 0 {
        return Err(invalid("engine.max_quote_age_ms", "must be at least 1"));
    }
    if cfg.spike_bps == 0 || cfg.spike_bps > 10_000 {
        return Err(invalid(
            "engine.spike_bps",
            "must be 1..=10000 basis points",
        ));
    }
    if cfg.spike_confirm == 0 {
        return Err(invalid("engine.spike_confirm", "must be at least 1"));
    }
    Ok(cfg)
}

fn resolve_instruments(list: Vec<InstrumentFile>) -> Result<Vec<Instrument>, ConfigError> {
    if list.is_empty() || list.len() > INSTRUMENTS_MAX {
        return Err(invalid(
            "instruments",
            format!("need 1..={INSTRUMENTS_MAX} instruments"),
        ));
    }
    let mut seen = BTreeMap::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, f) in list.into_iter().enumerate() {
        let key = |field: &str| format!("instruments[{i}].{field}");
        if f.name.is_empty()
            || f.name.len() > SYMBOL_NAME_LEN_MAX
            || !f.name.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(invalid(
                key("name"),
                format!("must be 1..={SYMBOL_NAME_LEN_MAX} printable ASCII characters"),
            ));
        }
        if seen.insert(f.name.clone(), i).is_some() {
            return Err(invalid(
                key("name"),
                format!("duplicate instrument {}", f.name),
            ));
        }
        if f.digits > DIGITS_MAX {
            return Err(invalid(key("digits"), format!("must be 0..={DIGITS_MAX}")));
        }
        let base_price = match &f.base_price {
            None => crate::model::price::POW10[f.digits as usize],
            Some(text) => parse_price(text, f.digits)
                .map_err(|e| invalid(key("base_price"), e.to_string()))?,
        };
        if base_price <= 0 {
            return Err(invalid(key("base_price"), "must be positive"));
        }
        let spread_points = f.spread_points.unwrap_or(10);
        if spread_points <= 0 {
            return Err(invalid(key("spread_points"), "must be positive"));
        }
        out.push(Instrument {
            id: i as u16,
            name: f.name,
            digits: f.digits,
            base_price,
            spread_points,
        });
    }
    Ok(out)
}

fn resolve_tiers(
    list: Vec<TierFile>,
    names: &BTreeMap<String, u16>,
) -> Result<Vec<Tier>, ConfigError> {
    if list.is_empty() || list.len() > TIERS_MAX {
        return Err(invalid("tiers", format!("need 1..={TIERS_MAX} tiers")));
    }
    let mut out: Vec<Tier> = Vec::with_capacity(list.len());
    for (i, f) in list.into_iter().enumerate() {
        if f.name.is_empty() || out.iter().any(|t| t.name == f.name) {
            return Err(invalid(format!("tiers[{i}].name"), "empty or duplicate"));
        }
        if f.markup_points < 0 {
            return Err(invalid(
                format!("tiers[{i}].markup_points"),
                "must not be negative (a tier widens the spread)",
            ));
        }
        let mut overrides = Vec::with_capacity(f.overrides.len());
        for (sym, m) in f.overrides {
            let key = format!("tiers[{i}].overrides.{sym}");
            let id = *names
                .get(&sym)
                .ok_or_else(|| invalid(&key, "unknown instrument"))?;
            if m < 0 {
                return Err(invalid(&key, "must not be negative"));
            }
            overrides.push((id, m));
        }
        out.push(Tier {
            id: i as u8,
            name: f.name,
            markup_points: f.markup_points,
            overrides,
        });
    }
    Ok(out)
}

fn resolve_providers(
    list: Vec<ProviderFile>,
    plain: bool,
) -> Result<Vec<ProviderDef>, ConfigError> {
    if list.is_empty() || list.len() > PROVIDERS_MAX {
        return Err(invalid(
            "providers",
            format!("need 1..={PROVIDERS_MAX} providers"),
        ));
    }
    let mut out: Vec<ProviderDef> = Vec::with_capacity(list.len());
    for (i, f) in list.into_iter().enumerate() {
        if f.name.is_empty() || out.iter().any(|p| p.name == f.name) {
            return Err(invalid(
                format!("providers[{i}].name"),
                "empty or duplicate",
            ));
        }
        if f.kind == ProviderKind::Ingest && f.token.is_empty() {
            return Err(invalid(
                format!("providers[{i}].token"),
                "an ingest provider needs a token",
            ));
        }
        if !f.token.is_empty() {
            crate::auth::hash::check_stored(&f.token, plain)
                .map_err(|r| invalid(format!("providers[{i}].token"), r.to_string()))?;
        }
        out.push(ProviderDef {
            id: i as u16,
            name: f.name,
            kind: f.kind,
            skew_points: f.skew_points,
            token: f.token,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> ConfigError {
        Config::parse(text, 3).unwrap_err()
    }

    fn key_of(e: ConfigError) -> String {
        match e {
            ConfigError::Invalid { key, .. } => key,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn empty_file_is_the_builtin_default() {
        let c = Config::parse("", 3).unwrap();
        assert!(c.table.len() >= 20);
        assert_eq!(c.table.providers().len(), 3);
        assert_eq!(c.accounts[0].name, "demo");
        assert_eq!(c.engine, EngineConfig::default());
    }

    #[test]
    fn instruments_override_the_default_set() {
        let c = Config::parse(
            r#"
            [[instruments]]
            name = "EURUSD"
            digits = 5
            base_price = "1.1"
            [[instruments]]
            name = "XAUUSD"
            digits = 2
            base_price = "2650.5"
            [[tiers]]
            name = "vip"
            markup_points = 0
            [[tiers]]
            name = "std"
            markup_points = 4
            overrides = { XAUUSD = 20 }
            "#,
            2,
        )
        .unwrap();
        assert_eq!(c.table.len(), 2);
        assert_eq!(c.table.by_name("EURUSD").unwrap().base_price, 110_000);
        assert_eq!(c.table.by_name("XAUUSD").unwrap().base_price, 265_050);
        assert_eq!(c.table.tiers()[1].markup_for(1), 20);
        assert_eq!(c.table.tiers()[1].markup_for(0), 4);
    }

    #[test]
    fn errors_name_the_key() {
        let two = "[[instruments]]\nname = \"A\"\ndigits = 2\n[[instruments]]\nname = \"B\"\ndigits = 12\n";
        assert_eq!(key_of(err(two)), "instruments[1].digits");
        let dup = "[[instruments]]\nname = \"A\"\ndigits = 2\n[[instruments]]\nname = \"A\"\ndigits = 2\n";
        assert_eq!(key_of(err(dup)), "instruments[1].name");
        let price = "[[instruments]]\nname = \"A\"\ndigits = 2\nbase_price = \"1.234\"\n";
        assert_eq!(key_of(err(price)), "instruments[0].base_price");
        assert_eq!(key_of(err("[engine]\nspike_bps = 0\n")), "engine.spike_bps");
        assert_eq!(
            key_of(err("[[tiers]]\nname = \"t\"\nmarkup_points = -1\n")),
            "tiers[0].markup_points"
        );
        assert_eq!(
            key_of(err(
                "[[tiers]]\nname = \"t\"\nmarkup_points = 1\noverrides = { NOPE = 2 }\n"
            )),
            "tiers[0].overrides.NOPE"
        );
        assert_eq!(
            key_of(err(
                "insecure_plain_tokens = true\n[[accounts]]\nname = \"a\"\ntoken = \"t\"\ntiers = [\"gold\"]\n"
            )),
            "accounts[0].tiers"
        );
        assert_eq!(
            key_of(err("[[providers]]\nname = \"b\"\nkind = \"ingest\"\n")),
            "providers[0].token"
        );
    }

    #[test]
    fn unknown_keys_and_bad_syntax_are_refused() {
        assert!(
            matches!(err("[engine]\nspike = 3\n"), ConfigError::Syntax(m) if m.contains("spike"))
        );
        assert!(matches!(err("[engine"), ConfigError::Syntax(_)));
    }

    #[test]
    fn clear_tokens_are_refused_naming_the_key_and_the_command() {
        let e = err("[[accounts]]\nname = \"a\"\ntoken = \"t\"\ntiers = [\"raw\"]\n");
        let text = e.to_string();
        assert_eq!(key_of(e), "accounts[0].token");
        assert!(text.contains("pricewire token hash"), "{text}");
        let p = "[[providers]]\nname = \"lp\"\nkind = \"ingest\"\ntoken = \"t\"\n";
        assert_eq!(key_of(err(p)), "providers[0].token");
        let h = crate::auth::hash::hash_token(b"t").unwrap();
        let ok = format!("[[accounts]]\nname = \"a\"\ntoken = \"{h}\"\ntiers = [\"raw\"]\n");
        let c = Config::parse(&ok, 3).unwrap();
        assert!(!c.insecure_plain_tokens);
        assert!(crate::auth::hash::verify(
            &c.account("a").unwrap().token,
            b"t"
        ));
        // The built-in demo account is stored hashed too.
        let demo = Config::builtin(3);
        assert!(crate::auth::hash::verify(
            &demo.account("demo").unwrap().token,
            b"demo"
        ));
    }

    /// A config token asking for more argon2 cost than the window (256
    /// MiB, t=3) stops the load naming the key and the flag.
    #[test]
    fn a_token_hash_over_the_cost_window_is_refused_naming_the_flag() {
        let h = crate::auth::hash::hash_token(b"t").unwrap();
        let costly = h.replacen("m=19456,t=2", "m=262144,t=3", 1);
        let toml = format!("[[accounts]]\nname = \"a\"\ntoken = \"{costly}\"\ntiers = [\"raw\"]\n");
        let e = err(&toml);
        let text = e.to_string();
        assert_eq!(key_of(e), "accounts[0].token");
        assert!(text.contains("--argon2-max-memory-kib"), "{text}");
    }

    #[test]
    fn accounts_resolve_entitlements() {
        let c = Config::parse(
            "insecure_plain_tokens = true\n[[accounts]]\nname = \"a\"\ntoken = \"t\"\nsymbols = [\"EURUSD\"]\ntiers = [\"retail\", \"raw\"]\n",
            3,
        )
        .unwrap();
        let a = c.account("a").unwrap();
        let eur = c.table.by_name("EURUSD").unwrap().id;
        let jpy = c.table.by_name("USDJPY").unwrap().id;
        assert!(a.entitled_symbol(eur) && !a.entitled_symbol(jpy));
        assert_eq!(a.tiers, vec![2, 0]);
        assert!(a.entitled_tier(0) && !a.entitled_tier(1));
    }

    #[test]
    fn max_update_hz_is_per_account_and_range_checked() {
        let acct = |hz: &str| {
            format!(
                "insecure_plain_tokens = true\n[[accounts]]\nname = \"a\"\ntoken = \"t\"\ntiers = [\"raw\"]\n{hz}"
            )
        };
        let c = Config::parse(&acct("max_update_hz = 10\n"), 3).unwrap();
        assert_eq!(c.account("a").unwrap().max_update_hz, Some(10));
        let c = Config::parse(&acct("max_update_hz = 0\n"), 3).unwrap();
        assert_eq!(c.account("a").unwrap().max_update_hz, Some(0));
        let c = Config::parse(&acct(""), 3).unwrap();
        assert_eq!(c.account("a").unwrap().max_update_hz, None);
        let e = err(&acct("max_update_hz = 1001\n"));
        assert!(e.to_string().contains("1..=1000"), "{e}");
        assert_eq!(key_of(e), "accounts[0].max_update_hz");
        assert!(matches!(
            err(&acct("max_update_hz = -1\n")),
            ConfigError::Syntax(_)
        ));
    }
}
