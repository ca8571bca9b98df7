//! Accounts: the `[[accounts]]` entries of the configuration file, as
//! written and as resolved, and the built-in demo account.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{invalid, ConfigError};

/// One `[[accounts]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountFile {
    /// Account name the Logon carries (1..=32 bytes, unique).
    pub name: String,
    /// The token's argon2id PHC string (`pricewire token hash`), or the
    /// clear token under `insecure_plain_tokens`.
    pub token: String,
    /// Symbol names, or `["*"]` for all.
    #[serde(default = "all")]
    pub symbols: Vec<String>,
    /// Tier names the account may subscribe to; the first is its default.
    pub tiers: Vec<String>,
    /// Concurrent sessions allowed (≥ 1; default [`ACCOUNT_SESSIONS_DEFAULT`],
    /// 100,000: a 100,000-terminal edge's demo account included).
    #[serde(default = "default_max_sessions")]
    pub max_sessions: u32,
    /// Whether the account may mark requests critical.
    #[serde(default)]
    pub critical: bool,
    /// Maximum update frequency of each of its subscriptions, updates per
    /// second: 0 = unlimited, else 1..=1000; absent = `--max-update-hz`.
    pub max_update_hz: Option<u32>,
}

fn all() -> Vec<String> {
    vec!["*".to_string()]
}
fn default_max_sessions() -> u32 {
    ACCOUNT_SESSIONS_DEFAULT
}

/// Fewest updates per second a `max_update_hz` may ask for (0 aside,
/// which is unlimited).
pub const MAX_UPDATE_HZ_MIN: u32 = 1;
/// Most updates per second a `max_update_hz` may ask for: one per
/// millisecond, about the tick of the gateway's pacer (`gateway::pacer`).
pub const MAX_UPDATE_HZ_MAX: u32 = 1_000;

/// Refuses a maximum update frequency outside 0 (unlimited) or
/// [`MAX_UPDATE_HZ_MIN`]..=[`MAX_UPDATE_HZ_MAX`], saying why (the config
/// file's key, a Redis record's field and `--max-update-hz` alike).
pub fn check_max_update_hz(hz: u32) -> Result<(), UpdateHzError> {
    if hz > MAX_UPDATE_HZ_MAX {
        return Err(UpdateHzError { hz });
    }
    Ok(())
}

/// A maximum update frequency above [`MAX_UPDATE_HZ_MAX`]; the message
/// follows the key, field or flag that gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "{hz}: must be 0 (unlimited) or {MAX_UPDATE_HZ_MIN}..={MAX_UPDATE_HZ_MAX} updates per \
     second (above {MAX_UPDATE_HZ_MAX} the limit is finer than the shard's 1-ms timer)"
)]
pub struct UpdateHzError {
    /// The frequency refused, updates per second.
    pub hz: u32,
}

/// Default concurrent sessions per account.
pub const ACCOUNT_SESSIONS_DEFAULT: u32 = 100_000;

/// An account that may log on to the subscriber gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// The name a Logon carries.
    pub name: String,
    /// The stored credential: an argon2id PHC string, or a clear token
    /// (only under `insecure_plain_tokens`); see [`crate::auth::hash`].
    pub token: String,
    /// Entitled symbol ids; `None` means every symbol.
    pub symbols: Option<Vec<u16>>,
    /// Entitled tier ids, default first.
    pub tiers: Vec<u8>,
    /// Concurrent sessions allowed.
    pub max_sessions: u32,
    /// Whether its requests may be marked critical (shed last).
    pub critical: bool,
    /// Maximum update frequency per subscription (updates/s; 0 =
    /// unlimited); `None` = the serve-wide `--max-update-hz`.
    pub max_update_hz: Option<u32>,
}

impl Account {
    /// Whether the account may see symbol id `symbol` (any path: prices,
    /// snapshots, history, the directory).
    pub fn entitled_symbol(&self, symbol: u16) -> bool {
        self.symbols.as_ref().is_none_or(|s| s.contains(&symbol))
    }
    /// Whether the account may use tier id `tier`.
    pub fn entitled_tier(&self, tier: u8) -> bool {
        self.tiers.contains(&tier)
    }
    /// Whether the account may see no symbol at all (`symbols = []`): its
    /// logon is refused with LogonRejected(not_entitled).
    pub fn entitled_to_nothing(&self) -> bool {
        self.symbols.as_ref().is_some_and(Vec::is_empty)
    }
}

/// The built-in demo account: token `demo` (stored hashed, like any
/// other), every symbol, every tier with `standard` (id 1 when present)
/// as its default.
pub(super) fn demo_account(tiers: usize) -> Account {
    let default = if tiers > 1 { 1 } else { 0 };
    let mut order: Vec<u8> = vec![default];
    order.extend((0..tiers as u8).filter(|&t| t != default));
    Account {
        name: "demo".into(),
        token: crate::auth::hash::demo_hash().to_string(),
        symbols: None,
        tiers: order,
        max_sessions: ACCOUNT_SESSIONS_DEFAULT,
        critical: true,
        max_update_hz: None,
    }
}

pub(super) fn resolve_accounts(
    list: Vec<AccountFile>,
    names: &BTreeMap<String, u16>,
    tiers: &[String],
    plain: bool,
) -> Result<Vec<Account>, ConfigError> {
    let mut out: Vec<Account> = Vec::with_capacity(list.len());
    for (i, f) in list.into_iter().enumerate() {
        let key = |field: &str| format!("accounts[{i}].{field}");
        if f.name.is_empty() || f.name.len() > 32 || out.iter().any(|a| a.name == f.name) {
            return Err(invalid(
                key("name"),
                "empty, longer than 32 bytes, or duplicate",
            ));
        }
        crate::auth::hash::check_stored(&f.token, plain)
            .map_err(|r| invalid(key("token"), r.to_string()))?;
        let symbols =
            if f.symbols.iter().any(|s| s == "*") {
                None
            } else {
                let mut ids = Vec::with_capacity(f.symbols.len());
                for s in &f.symbols {
                    ids.push(*names.get(s).ok_or_else(|| {
                        invalid(key("symbols"), format!("unknown instrument {s}"))
                    })?);
                }
                Some(ids)
            };
        if f.tiers.is_empty() {
            return Err(invalid(key("tiers"), "at least one tier"));
        }
        let mut tier_ids = Vec::with_capacity(f.tiers.len());
        for t in &f.tiers {
            let id = tiers
                .iter()
                .position(|n| n == t)
                .ok_or_else(|| invalid(key("tiers"), format!("unknown tier {t}")))?;
            tier_ids.push(id as u8);
        }
        if f.max_sessions == 0 {
            return Err(invalid(key("max_sessions"), "must be at least 1"));
        }
        if let Some(hz) = f.max_update_hz {
            check_max_update_hz(hz).map_err(|r| invalid(key("max_update_hz"), r.to_string()))?;
        }
        out.push(Account {
            name: f.name,
            token: f.token,
            symbols,
            tiers: tier_ids,
            max_sessions: f.max_sessions,
            critical: f.critical,
            max_update_hz: f.max_update_hz,
        });
    }
    Ok(out)
}
