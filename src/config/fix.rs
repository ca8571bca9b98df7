//! Settings of FIX providers: the `[providers.fix]` sub-table of a
//! `kind = "fix"` provider in the TOML file, and its resolved form.
//!
//! ```toml
//! [[providers]]
//! name = "lp-a"
//! kind = "fix"
//! [providers.fix]
//! host = "127.0.0.1"
//! port = 9878
//! sender_comp_id = "PRICEWIRE"
//! target_comp_id = "LPA"
//! symbols = { "EUR/USD" = "EURUSD", "USD/JPY" = "USDJPY" }
//! connect_ms = 2000        # TCP connect timeout
//! logon_ms = 5000          # Logon sent -> Logon received
//! heartbeat_s = 5          # HeartBtInt (108) we ask for
//! # read_timeout_ms = 10000  # silence before the session is dead; default heartbeat x 2
//! ```
//!
//! Resolution happens once at start-up; nothing here is on the hot path.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::ConfigError;

pub mod damping;
mod error;
mod secret;
use crate::model::{Instrument, ProviderId, SymbolId};
use crate::resilience::breaker::WindowKind;
use crate::resilience::{Backoff, BreakerConfig};
pub use damping::{FlapDamping, GrayRule};
pub use error::FixConfigError;
use error::{key, rule};
use secret::{credential_ok, password};
pub use secret::{FeedSecrets, Secret};

/// Default TCP connect timeout, in ms.
pub const CONNECT_MS_DEFAULT: u64 = 2_000;
/// Default time from Logon sent to the peer's Logon, in ms.
pub const LOGON_MS_DEFAULT: u64 = 5_000;
/// Default HeartBtInt (108) asked for, in seconds.
pub const HEARTBEAT_S_DEFAULT: u32 = 5;
/// Largest `heartbeat_s` accepted.
pub const HEARTBEAT_S_MAX: u32 = 300;
/// Stagger between providers' first connects; each also adds uniform
/// jitter in `[0, stagger_ms]`, so N providers spread over N+1 slots.
pub const STAGGER_MS_DEFAULT: u64 = 250;
/// Default first reconnect backoff window, in ms.
pub const RECONNECT_BASE_MS_DEFAULT: u64 = 500;
/// Default largest reconnect backoff window, in ms.
pub const RECONNECT_CAP_MS_DEFAULT: u64 = 30_000;
/// A quote older than this (provider SendingTime -> our receive) is slow.
pub const SLOW_QUOTE_MS_DEFAULT: u64 = 250;
/// Sequence gaps (each resubscribed) within `gap_window_ms` after which
/// the session logs out and reconnects instead.
pub const GAPS_BEFORE_LOGOUT_DEFAULT: u32 = 3;
/// Default window of the gap count, in ms: gaps further apart are each
/// recovered by resubscribing, however many there are.
pub const GAP_WINDOW_MS_DEFAULT: u64 = 10_000;
/// Most gaps a window may be set to hold.
pub const GAPS_BEFORE_LOGOUT_MAX: u32 = 1_000;
/// Successful quotes are recorded in the breaker at most once per this
/// period (failures always); see the module docs of `session`.
pub const QUOTE_SAMPLE_MS_DEFAULT: u64 = 100;
/// Default feed breaker time window, in seconds.
pub const BREAKER_WINDOW_S_DEFAULT: u32 = 10;
/// Default calls the feed breaker's window must hold before it may open.
pub const BREAKER_MINIMUM_CALLS_DEFAULT: u32 = 5;
/// Default time the feed breaker stays open, in ms.
pub const BREAKER_OPEN_WAIT_MS_DEFAULT: u64 = 10_000;
/// Garbled messages (bad CheckSum, BodyLength or framing) are ignored and
/// counted; this many within `garbled_window_ms` tear the session down.
pub const GARBLED_MAX_DEFAULT: u32 = 10;
/// Default window of the garbled-message count, in ms.
pub const GARBLED_WINDOW_MS_DEFAULT: u64 = 10_000;
/// Most garbled messages a window may be set to hold.
pub const GARBLED_MAX_LIMIT: u32 = 1_000;
/// Logout sent (shutdown, gap policy) -> the peer's Logout awaited.
pub const LOGOUT_MS_DEFAULT: u64 = 2_000;
/// No quote on any subscribed symbol for this long while logged on: the
/// provider is `silent` (unhealthy) and each such interval is a breaker
/// failure. 0 turns the rule off.
pub const QUOTE_SILENCE_MS_DEFAULT: u64 = 5_000;
/// Flap damping: after a logon the provider rejoins the best price only
/// after this many quotes and this long.
pub const PROBATION_QUOTES_DEFAULT: u32 = 10;
/// See [`PROBATION_QUOTES_DEFAULT`]: the time part, in ms.
pub const PROBATION_MS_DEFAULT: u64 = 1_000;
/// This many failures in a row (no quote between) open the feed breaker,
/// whatever its window says. 0 turns the rule off.
pub const BREAKER_CONSECUTIVE_FAILURES_DEFAULT: u32 = 3;
/// Quote age by provider time: a quote older than this by its own stamp
/// (plus the skew allowance) never enters the price. 0 turns it off.
pub const PROVIDER_AGE_MAX_MS_DEFAULT: u64 = 2_000;
/// Allowed difference between the provider's clock and ours.
pub const CLOCK_SKEW_MS_DEFAULT: u64 = 500;
/// Longest Username (553) or Password (554).
pub const CREDENTIAL_LEN_MAX: usize = 128;
/// Most symbols one session subscribes.
pub const SYMBOLS_MAX: usize = 1_024;
/// Longest provider symbol or CompID accepted.
pub const ID_LEN_MAX: usize = 64;

/// The `[providers.fix]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixProviderFile {
    /// Host name or address of the provider's acceptor.
    pub host: String,
    /// TCP port of the provider's acceptor.
    pub port: u16,
    /// SenderCompID (49) we send.
    pub sender_comp_id: String,
    /// TargetCompID (56) we send (the provider's CompID).
    pub target_comp_id: String,
    /// Provider symbol -> instrument name.
    pub symbols: BTreeMap<String, String>,
    /// TCP connect timeout in ms (default [`CONNECT_MS_DEFAULT`]).
    pub connect_ms: Option<u64>,
    /// Logon sent → Logon received, in ms (default [`LOGON_MS_DEFAULT`]).
    pub logon_ms: Option<u64>,
    /// HeartBtInt (108) asked for, in s (default [`HEARTBEAT_S_DEFAULT`], at most
    /// [`HEARTBEAT_S_MAX`]).
    pub heartbeat_s: Option<u32>,
    /// Silence before the session is dead, in ms (default 2 × heartbeat;
    /// must exceed the heartbeat).
    pub read_timeout_ms: Option<u64>,
    /// Stagger between providers' first connects, in ms (default
    /// [`STAGGER_MS_DEFAULT`]).
    pub stagger_ms: Option<u64>,
    /// First reconnect backoff window, in ms (default [`RECONNECT_BASE_MS_DEFAULT`]).
    pub reconnect_base_ms: Option<u64>,
    /// Largest reconnect backoff window, in ms (default [`RECONNECT_CAP_MS_DEFAULT`]).
    pub reconnect_cap_ms: Option<u64>,
    /// A quote older than this on arrival is slow, in ms (default
    /// [`SLOW_QUOTE_MS_DEFAULT`]).
    pub slow_quote_ms: Option<u64>,
    /// Sequence gaps within `gap_window_ms` before logout and reconnect
    /// (default [`GAPS_BEFORE_LOGOUT_DEFAULT`]).
    pub gaps_before_logout: Option<u32>,
    /// Window of the gap count, in ms (default [`GAP_WINDOW_MS_DEFAULT`]).
    pub gap_window_ms: Option<u64>,
    /// Period of breaker success samples, in ms (default
    /// [`QUOTE_SAMPLE_MS_DEFAULT`]).
    pub quote_sample_ms: Option<u64>,
    /// Feed breaker time window, in s (default [`BREAKER_WINDOW_S_DEFAULT`]).
    pub breaker_window_s: Option<u32>,
    /// Calls the breaker window must hold to decide (default
    /// [`BREAKER_MINIMUM_CALLS_DEFAULT`]).
    pub breaker_minimum_calls: Option<u32>,
    /// Time the breaker stays open, in ms (default [`BREAKER_OPEN_WAIT_MS_DEFAULT`]).
    pub breaker_open_wait_ms: Option<u64>,
    /// Failure rate that opens the breaker, in percent (default 50).
    pub breaker_failure_rate_pct: Option<u32>,
    /// Slow-quote rate that opens the breaker, in percent (default 50).
    pub breaker_slow_rate_pct: Option<u32>,
    /// Garbled messages per window that end the session (default
    /// [`GARBLED_MAX_DEFAULT`], at most [`GARBLED_MAX_LIMIT`]).
    pub garbled_max: Option<u32>,
    /// Window of the garbled count, in ms (default [`GARBLED_WINDOW_MS_DEFAULT`]).
    pub garbled_window_ms: Option<u64>,
    /// Wait for the peer's Logout, in ms (default [`LOGOUT_MS_DEFAULT`]).
    pub logout_ms: Option<u64>,
    /// Quote silence that makes the provider `silent`, in ms (default
    /// [`QUOTE_SILENCE_MS_DEFAULT`]; 0 = off).
    pub quote_silence_ms: Option<u64>,
    /// Quotes before a provider rejoins after logon (default
    /// [`PROBATION_QUOTES_DEFAULT`]).
    pub probation_quotes: Option<u32>,
    /// Time before a provider rejoins after logon, in ms (default
    /// [`PROBATION_MS_DEFAULT`]).
    pub probation_ms: Option<u64>,
    /// Failures in a row that open the breaker (default
    /// [`BREAKER_CONSECUTIVE_FAILURES_DEFAULT`]; 0 = off).
    pub breaker_consecutive_failures: Option<u32>,
    /// Quote age limit by provider time, in ms (default
    /// [`PROVIDER_AGE_MAX_MS_DEFAULT`]; 0 = off).
    pub provider_age_max_ms: Option<u64>,
    /// Allowed provider clock skew, in ms (default [`CLOCK_SKEW_MS_DEFAULT`]).
    pub clock_skew_ms: Option<u64>,
    /// A logged-on session shorter than this is a flap, in ms (default
    /// [`damping::FLAP_STABLE_MS_DEFAULT`]; 0: no damping).
    pub flap_stable_ms: Option<u64>,
    /// Half-life of the flap penalty, in ms (default
    /// [`damping::FLAP_HALF_LIFE_MS_DEFAULT`]).
    pub flap_half_life_ms: Option<u64>,
    /// Penalty that damps the provider (default
    /// [`damping::FLAP_SUPPRESS_DEFAULT`]; one flap is 1000).
    pub flap_suppress: Option<u32>,
    /// Penalty below which damping ends (default
    /// [`damping::FLAP_REUSE_DEFAULT`]).
    pub flap_reuse: Option<u32>,
    /// Longest damping after the last flap, in ms (default
    /// [`damping::FLAP_MAX_SUPPRESS_MS_DEFAULT`]).
    pub flap_max_suppress_ms: Option<u64>,
    /// Quote lapses within `gray_window_ms` that make the provider gray
    /// (default [`damping::GRAY_LAPSES_DEFAULT`]; 0: off).
    pub gray_lapses: Option<u32>,
    /// Window of the lapse count, in ms (default
    /// [`damping::GRAY_WINDOW_MS_DEFAULT`]).
    pub gray_window_ms: Option<u64>,
    /// Fresh quotes for this long end gray, in ms (default
    /// [`damping::GRAY_CLEAR_MS_DEFAULT`]).
    pub gray_clear_ms: Option<u64>,
    /// Logon Username (553).
    pub username: Option<String>,
    /// Name of the environment variable that holds the Logon Password
    /// (554); never the password itself.
    pub password_env: Option<String>,
    /// A file whose content (one trailing newline removed) is the Logon
    /// Password (554).
    pub password_file: Option<std::path::PathBuf>,
}

/// One subscribed symbol: what the provider calls it and what we do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolMapping {
    /// The provider's name for the symbol (Symbol, 55).
    pub provider_symbol: String,
    /// Our instrument id.
    pub symbol: SymbolId,
    /// Decimal digits of the instrument's prices.
    pub digits: u8,
}

/// A resolved FIX session.
#[derive(Debug, Clone, PartialEq)]
pub struct FixSessionConfig {
    /// The provider's id (its index in the configuration).
    pub provider: ProviderId,
    /// The provider's configured name.
    pub name: String,
    /// Host name or address of the provider's acceptor.
    pub host: String,
    /// TCP port of the provider's acceptor.
    pub port: u16,
    /// SenderCompID (49) we send.
    pub sender_comp_id: String,
    /// TargetCompID (56) we send.
    pub target_comp_id: String,
    /// Symbols to subscribe, at most [`SYMBOLS_MAX`].
    pub symbols: Vec<SymbolMapping>,
    /// TCP connect timeout, in ms.
    pub connect_timeout_ms: u64,
    /// Logon sent → Logon received, in ms.
    pub logon_timeout_ms: u64,
    /// HeartBtInt (108) asked for, in s.
    pub heartbeat_s: u32,
    /// Silence before the session is dead, in ms.
    pub read_timeout_ms: u64,
    /// Stagger between providers' first connects, in ms (plus jitter up to as
    /// much).
    pub stagger_ms: u64,
    /// Reconnect backoff (full jitter).
    pub reconnect: Backoff,
    /// A quote older than this on arrival is slow, in ms.
    pub slow_quote_ms: u64,
    /// Sequence gaps within `gap_window_ms` before logout and reconnect.
    pub gaps_before_logout: u32,
    /// Window of the gap count, in ms.
    pub gap_window_ms: u64,
    /// Period of breaker success samples, in ms.
    pub quote_sample_ms: u64,
    /// The feed breaker: a call is a quote, its timeout the read timeout.
    pub breaker: BreakerConfig,
    /// Garbled messages per window that end the session.
    pub garbled_max: u32,
    /// Window of the garbled count, in ms.
    pub garbled_window_ms: u64,
    /// Wait for the peer's Logout, in ms.
    pub logout_timeout_ms: u64,
    /// Logon Username (553), if any.
    pub username: Option<String>,
    /// Logon Password (554), if any; never printed.
    pub password: Option<Secret>,
    /// Quote silence that makes the provider `silent`, in ms (0 = off).
    pub quote_silence_ms: u64,
    /// Quotes before a provider rejoins after logon.
    pub probation_quotes: u32,
    /// Time before a provider rejoins after logon, in ms.
    pub probation_ms: u64,
    /// Failures in a row that open the breaker (0: off).
    pub breaker_consecutive_failures: u32,
    /// Quote age limit by provider time (0: off) and the skew allowance.
    pub provider_age_max_ms: u64,
    /// Allowed provider clock skew, in ms.
    pub clock_skew_ms: u64,
    /// Flap damping (docs/fix.md "Flap damping").
    pub flap: FlapDamping,
    /// The gray rule (docs/fix.md "Gray providers").
    pub gray: GrayRule,
}

impl FixSessionConfig {
    /// A session with every default, for tests and tools.
    pub fn new(provider: ProviderId, name: &str, host: &str, port: u16) -> Self {
        let heartbeat_s = HEARTBEAT_S_DEFAULT;
        let read_timeout_ms = u64::from(heartbeat_s) * 2_000;
        FixSessionConfig {
            provider,
            name: name.to_string(),
            host: host.to_string(),
            port,
            sender_comp_id: "PRICEWIRE".into(),
            target_comp_id: name.to_uppercase(),
            symbols: Vec::new(),
            connect_timeout_ms: CONNECT_MS_DEFAULT,
            logon_timeout_ms: LOGON_MS_DEFAULT,
            heartbeat_s,
            read_timeout_ms,
            stagger_ms: STAGGER_MS_DEFAULT,
            reconnect: Backoff::new(RECONNECT_BASE_MS_DEFAULT, RECONNECT_CAP_MS_DEFAULT),
            slow_quote_ms: SLOW_QUOTE_MS_DEFAULT,
            gaps_before_logout: GAPS_BEFORE_LOGOUT_DEFAULT,
            gap_window_ms: GAP_WINDOW_MS_DEFAULT,
            quote_sample_ms: QUOTE_SAMPLE_MS_DEFAULT,
            breaker: breaker_config(
                SLOW_QUOTE_MS_DEFAULT,
                read_timeout_ms,
                BREAKER_WINDOW_S_DEFAULT,
                BREAKER_MINIMUM_CALLS_DEFAULT,
                BREAKER_OPEN_WAIT_MS_DEFAULT,
            ),
            garbled_max: GARBLED_MAX_DEFAULT,
            garbled_window_ms: GARBLED_WINDOW_MS_DEFAULT,
            logout_timeout_ms: LOGOUT_MS_DEFAULT,
            username: None,
            password: None,
            quote_silence_ms: QUOTE_SILENCE_MS_DEFAULT,
            probation_quotes: PROBATION_QUOTES_DEFAULT,
            probation_ms: PROBATION_MS_DEFAULT,
            breaker_consecutive_failures: BREAKER_CONSECUTIVE_FAILURES_DEFAULT,
            provider_age_max_ms: PROVIDER_AGE_MAX_MS_DEFAULT,
            clock_skew_ms: CLOCK_SKEW_MS_DEFAULT,
            flap: FlapDamping::default(),
            gray: GrayRule::default(),
        }
    }

    /// Adds a symbol mapping (tests and tools).
    pub fn map_symbol(mut self, provider_symbol: &str, inst: &Instrument) -> Self {
        self.symbols.push(SymbolMapping {
            provider_symbol: provider_symbol.to_string(),
            symbol: inst.id,
            digits: inst.digits,
        });
        self
    }

    /// Sets the read timeout and keeps the breaker's call timeout in step.
    pub fn with_read_timeout_ms(mut self, read_timeout_ms: u64) -> Self {
        self.read_timeout_ms = read_timeout_ms;
        self.breaker.call_timeout_ms = read_timeout_ms;
        self.breaker.half_open_max_wait_ms =
            self.breaker.half_open_max_wait_ms.max(read_timeout_ms);
        self
    }

    /// Checks the cross-field rules (slow threshold below the read
    /// timeout, and the breaker's own).
    pub fn validate(&self) -> Result<(), FixConfigError> {
        if self.symbols.is_empty() || self.symbols.len() > SYMBOLS_MAX {
            return Err(key("symbols", format!("need 1..={SYMBOLS_MAX} mappings")));
        }
        if self.heartbeat_s == 0 || self.heartbeat_s > HEARTBEAT_S_MAX {
            return Err(key("heartbeat_s", format!("must be 1..={HEARTBEAT_S_MAX}")));
        }
        if self.connect_timeout_ms == 0 || self.logon_timeout_ms == 0 {
            return Err(rule("connect_ms and logon_ms must be at least 1"));
        }
        if self.read_timeout_ms <= u64::from(self.heartbeat_s) * 1_000 {
            let why = "must exceed heartbeat_s (the peer's heartbeat must fit)";
            return Err(key("read_timeout_ms", why));
        }
        if self.reconnect.base_ms == 0 || self.reconnect.cap_ms < self.reconnect.base_ms {
            let why = "need 1 <= reconnect_base_ms <= reconnect_cap_ms";
            return Err(key("reconnect", why));
        }
        if self.gaps_before_logout == 0 || self.gaps_before_logout > GAPS_BEFORE_LOGOUT_MAX {
            let why = format!("must be 1..={GAPS_BEFORE_LOGOUT_MAX}");
            return Err(key("gaps_before_logout", why));
        }
        if self.garbled_max == 0 || self.garbled_max > GARBLED_MAX_LIMIT {
            return Err(key(
                "garbled_max",
                format!("must be 1..={GARBLED_MAX_LIMIT}"),
            ));
        }
        // Times are turned into ns (and some added): keep them far from
        // overflow. A day is longer than any sane setting.
        let ms_max = 86_400_000;
        let times = [
            ("provider_age_max_ms", self.provider_age_max_ms),
            ("clock_skew_ms", self.clock_skew_ms),
            ("garbled_window_ms", self.garbled_window_ms),
            ("gap_window_ms", self.gap_window_ms),
            ("logout_ms", self.logout_timeout_ms),
            ("quote_silence_ms", self.quote_silence_ms),
            ("probation_ms", self.probation_ms),
        ];
        if let Some(&(k, _)) = times.iter().find(|(_, v)| *v > ms_max) {
            return Err(key(k, format!("at most {ms_max} (a day)")));
        }
        if self.garbled_window_ms == 0 || self.gap_window_ms == 0 || self.logout_timeout_ms == 0 {
            return Err(rule(
                "garbled_window_ms, gap_window_ms and logout_ms must be at least 1",
            ));
        }
        let user = self.username.as_deref();
        let pass = self.password.as_ref().map(Secret::expose);
        for (what, v) in [("username", user), ("password", pass)] {
            if v.is_some_and(|v| !credential_ok(v)) {
                let why = format!("must be 1..={CREDENTIAL_LEN_MAX} printable ASCII");
                return Err(key(what, why));
            }
        }
        for id in [&self.sender_comp_id, &self.target_comp_id] {
            if id.is_empty() || id.len() > ID_LEN_MAX || !id.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(rule(format!(
                    "comp ids must be 1..={ID_LEN_MAX} printable ASCII"
                )));
            }
        }
        self.breaker.validate().map_err(FixConfigError::Breaker)?;
        self.flap.validate()?;
        self.gray.validate()?;
        self.check_breaker_can_open()
    }

    /// Longest wait for the first failure of a hung provider that was
    /// streaming: the quote silence, or the read timeout when the silence
    /// rule is off or longer.
    fn first_failure_ms(&self) -> u64 {
        match self.quote_silence_ms {
            0 => self.read_timeout_ms,
            q => q.min(self.read_timeout_ms),
        }
    }

    /// Longest time from one failure of a hung provider to the next, when
    /// the reconnect before it waited `backoff_ms`: a connect or logon
    /// timeout, or the silence / read timeout of a session that logs on
    /// and then says nothing.
    fn next_failure_ms(&self, backoff_ms: u64) -> u64 {
        let attempt = self.connect_timeout_ms + self.logon_timeout_ms;
        backoff_ms + attempt.max(self.first_failure_ms())
    }

    /// The worst case, from the moment a streaming provider hangs, until
    /// the consecutive-failures rule opens the breaker (every failure at
    /// its latest, every backoff at its longest); `None` when the rule is
    /// off. docs/fix.md: "Hung provider".
    pub fn hung_open_bound_ms(&self) -> Option<u64> {
        let k = self.breaker_consecutive_failures;
        if k == 0 {
            return None;
        }
        let mut t = self.first_failure_ms();
        for attempt in 0..k.saturating_sub(1) {
            let backoff = self
                .reconnect
                .base_ms
                .saturating_mul(1u64 << attempt.min(32));
            t += self.next_failure_ms(backoff.min(self.reconnect.cap_ms));
        }
        Some(t)
    }

    /// Refuses a breaker that a hung provider could never open: without the
    /// consecutive-failures rule, `minimum_calls` failures, one per cycle
    /// at the slowest (backoff cap plus the longest timeout), must fit the
    /// time window; older successes only make it harder.
    fn check_breaker_can_open(&self) -> Result<(), FixConfigError> {
        if self.breaker_consecutive_failures > 0 {
            return Ok(());
        }
        // The check every breaker owner runs (the Redis reference data
        // too): `BreakerConfig::check_can_open`.
        let cycle_ms = self.next_failure_ms(self.reconnect.cap_ms);
        self.breaker
            .check_can_open(cycle_ms)
            .map_err(|source| FixConfigError::BreakerCannotOpen { cycle_ms, source })
    }
}

/// The feed breaker's settings: a call is a quote (slow above
/// `slow_quote_ms`), its timeout is the read timeout; in HalfOpen the
/// first failed trial re-opens it (`half_open_fail_fast`).
pub fn breaker_config(
    slow_quote_ms: u64,
    read_timeout_ms: u64,
    window_s: u32,
    minimum_calls: u32,
    open_wait_ms: u64,
) -> BreakerConfig {
    BreakerConfig {
        window: WindowKind::Time { window_s },
        minimum_calls,
        slow_call_duration_ms: slow_quote_ms,
        call_timeout_ms: read_timeout_ms,
        open_wait_ms,
        half_open_max_wait_ms: read_timeout_ms.max(BreakerConfig::default().half_open_max_wait_ms),
        // Half-open is one probe connection: its first failure (refused,
        // logon rejected or timed out, Logout) re-opens the breaker at
        // once, so an LP gets one connect per open wait, not a burst.
        half_open_fail_fast: true,
        ..BreakerConfig::default()
    }
}

fn invalid(key: String, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        reason: reason.into(),
    }
}

/// The `symbols` table: provider symbol -> a known instrument.
fn resolve_symbols(
    f: &FixProviderFile,
    instruments: &[Instrument],
    key: &dyn Fn(&str) -> String,
) -> Result<Vec<SymbolMapping>, ConfigError> {
    let mut symbols = Vec::with_capacity(f.symbols.len());
    for (theirs, ours) in &f.symbols {
        let inst = instruments
            .iter()
            .find(|i| &i.name == ours)
            .ok_or_else(|| invalid(key("symbols"), format!("unknown instrument {ours}")))?;
        if theirs.is_empty() || theirs.len() > ID_LEN_MAX || theirs.bytes().any(|b| b < 0x20) {
            return Err(invalid(
                key("symbols"),
                format!("bad provider symbol {theirs:?}"),
            ));
        }
        symbols.push(SymbolMapping {
            provider_symbol: theirs.clone(),
            symbol: inst.id,
            digits: inst.digits,
        });
    }
    Ok(symbols)
}

/// Resolves one `[providers.fix]` table of provider `index` against the
/// instrument list.
pub fn resolve(
    index: usize,
    name: &str,
    f: &FixProviderFile,
    instruments: &[Instrument],
    secrets: FeedSecrets,
) -> Result<FixSessionConfig, ConfigError> {
    let key = |field: &str| format!("providers[{index}].fix.{field}");
    let heartbeat_s = f.heartbeat_s.unwrap_or(HEARTBEAT_S_DEFAULT);
    let read_timeout_ms = f
        .read_timeout_ms
        .unwrap_or(u64::from(heartbeat_s).saturating_mul(2_000));
    let slow_quote_ms = f.slow_quote_ms.unwrap_or(SLOW_QUOTE_MS_DEFAULT);
    let mut breaker = breaker_config(
        slow_quote_ms,
        read_timeout_ms,
        f.breaker_window_s.unwrap_or(BREAKER_WINDOW_S_DEFAULT),
        f.breaker_minimum_calls
            .unwrap_or(BREAKER_MINIMUM_CALLS_DEFAULT),
        f.breaker_open_wait_ms
            .unwrap_or(BREAKER_OPEN_WAIT_MS_DEFAULT),
    );
    if let Some(p) = f.breaker_failure_rate_pct {
        breaker.failure_rate_threshold_pct = p;
    }
    if let Some(p) = f.breaker_slow_rate_pct {
        breaker.slow_call_rate_threshold_pct = p;
    }
    let symbols = resolve_symbols(f, instruments, &key)?;
    if f.host.is_empty() {
        return Err(invalid(key("host"), "must not be empty"));
    }
    let cfg = FixSessionConfig {
        provider: index as ProviderId,
        name: name.to_string(),
        host: f.host.clone(),
        port: f.port,
        sender_comp_id: f.sender_comp_id.clone(),
        target_comp_id: f.target_comp_id.clone(),
        symbols,
        connect_timeout_ms: f.connect_ms.unwrap_or(CONNECT_MS_DEFAULT),
        logon_timeout_ms: f.logon_ms.unwrap_or(LOGON_MS_DEFAULT),
        heartbeat_s,
        read_timeout_ms,
        stagger_ms: f.stagger_ms.unwrap_or(STAGGER_MS_DEFAULT),
        reconnect: Backoff::new(
            f.reconnect_base_ms.unwrap_or(RECONNECT_BASE_MS_DEFAULT),
            f.reconnect_cap_ms.unwrap_or(RECONNECT_CAP_MS_DEFAULT),
        ),
        slow_quote_ms,
        gaps_before_logout: f.gaps_before_logout.unwrap_or(GAPS_BEFORE_LOGOUT_DEFAULT),
        gap_window_ms: f.gap_window_ms.unwrap_or(GAP_WINDOW_MS_DEFAULT),
        quote_sample_ms: f.quote_sample_ms.unwrap_or(QUOTE_SAMPLE_MS_DEFAULT),
        breaker,
        garbled_max: f.garbled_max.unwrap_or(GARBLED_MAX_DEFAULT),
        garbled_window_ms: f.garbled_window_ms.unwrap_or(GARBLED_WINDOW_MS_DEFAULT),
        logout_timeout_ms: f.logout_ms.unwrap_or(LOGOUT_MS_DEFAULT),
        username: f.username.clone(),
        password: password(f, &key, secrets)?,
        quote_silence_ms: f.quote_silence_ms.unwrap_or(QUOTE_SILENCE_MS_DEFAULT),
        probation_quotes: f.probation_quotes.unwrap_or(PROBATION_QUOTES_DEFAULT),
        probation_ms: f.probation_ms.unwrap_or(PROBATION_MS_DEFAULT),
        breaker_consecutive_failures: f
            .breaker_consecutive_failures
            .unwrap_or(BREAKER_CONSECUTIVE_FAILURES_DEFAULT),
        provider_age_max_ms: f.provider_age_max_ms.unwrap_or(PROVIDER_AGE_MAX_MS_DEFAULT),
        clock_skew_ms: f.clock_skew_ms.unwrap_or(CLOCK_SKEW_MS_DEFAULT),
        flap: FlapDamping::from_file(f),
        gray: GrayRule::from_file(f),
    };
    cfg.validate()
        .map_err(|reason| invalid(format!("providers[{index}].fix"), reason.to_string()))?;
    Ok(cfg)
}

/// Resolves the FIX tables of every provider: a `kind = "fix"` provider
/// must have one, any other kind must not.
pub fn resolve_all(
    providers: &[super::ProviderFile],
    instruments: &[Instrument],
    secrets: FeedSecrets,
) -> Result<Vec<FixSessionConfig>, ConfigError> {
    let mut out = Vec::new();
    for (i, p) in providers.iter().enumerate() {
        let is_fix = p.kind == crate::model::ProviderKind::Fix;
        match (&p.fix, is_fix) {
            (Some(f), true) => out.push(resolve(i, &p.name, f, instruments, secrets)?),
            (None, true) => {
                return Err(invalid(
                    format!("providers[{i}].fix"),
                    "a fix provider needs a [providers.fix] table",
                ))
            }
            (Some(_), false) => {
                return Err(invalid(
                    format!("providers[{i}].fix"),
                    "only a kind = \"fix\" provider takes a fix table",
                ))
            }
            (None, false) => {}
        }
    }
    Ok(out)
}
