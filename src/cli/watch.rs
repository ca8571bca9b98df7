//! `pricewire watch EURUSD GBPUSD ...`: a live terminal view of prices,
//! built on the client SDK.
//!
//! One row per symbol — bid, ask, spread in points, age of the last update,
//! updates per second and the price flags (`stale`, `single_provider`,
//! `indicative` of the last update; `conflated` if any update since the
//! last redraw was) — redrawn a few times a second with plain ANSI escapes
//! (no TUI library). The rate is shown once a whole second was measured,
//! `-` before. `--once` prints one plain table as soon as every symbol has
//! a price, for scripts and tests. The SDK reconnects on
//! its own; the status line says so. An unreachable server or a refused
//! logon ends the command with a clear message and exit code 1.
//!
//! The logon token comes from `--token-file`, `--token` (visible in `ps`:
//! warned about unless it is `demo`) or `PRICEWIRE_TOKEN`, else `demo`
//! ([`crate::cli::secret`]); a refused source exits 2.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use clap::Args;

use crate::client::{Client, ClientConfig, ClientError, Event};
use crate::model::price::{FixedPrice, NO_PRICE};
use crate::model::price_flags;
use crate::wire::codes::PRICE_FLAG_NAMES;
use crate::wire::{SubscribeStatus, TIER_ACCOUNT_DEFAULT};

/// Exit code when the server is unreachable, refuses us or a symbol.
pub(crate) const EXIT_FAILED: i32 = 1;

/// Flags of `pricewire watch`.
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Symbols to show, e.g. `EURUSD GBPUSD`.
    #[arg(required = true, value_name = "SYMBOL")]
    pub symbols: Vec<String>,

    /// Server address (host:port), or several separated by commas (edges
    /// of one core): the first is tried first, and after a lost connection
    /// the client reconnects to the next one.
    #[arg(long, default_value = crate::gateway::LISTEN_DEFAULT, value_name = "ADDR[,ADDR…]")]
    pub connect: String,

    /// Account to log on with.
    #[arg(long, default_value = "demo")]
    pub account: String,

    /// The account's logon token on the command line, where `ps` and shell
    /// history show it (a warning says so unless it is the demo token
    /// `demo`). Prefer --token-file or PRICEWIRE_TOKEN. Default: `demo`.
    #[arg(long, value_name = "TOKEN", conflicts_with = "token_file")]
    pub token: Option<String>,

    /// File whose first line is the logon token (chmod 600). Without it
    /// and --token, the token comes from the PRICEWIRE_TOKEN environment
    /// variable, else `demo`.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<std::path::PathBuf>,

    /// Tier id or name (raw, standard, retail); default: the account's.
    #[arg(long, value_name = "TIER")]
    pub tier: Option<String>,

    /// Print one table once every symbol has a price, then exit.
    #[arg(long)]
    pub once: bool,

    /// Redraw interval, in milliseconds.
    #[arg(long, default_value_t = 250, value_name = "MS")]
    pub refresh_ms: u64,

    /// With --once: longest wait for every symbol's first price, in ms.
    #[arg(long, default_value_t = 5_000, value_name = "MS")]
    pub once_timeout_ms: u64,

    /// Connect over TLS, verifying the server's chain against --ca.
    #[arg(long, requires = "ca")]
    pub tls: bool,

    /// PEM CA certificates to trust for --tls (the only trust store used).
    #[arg(long, value_name = "FILE", requires = "tls")]
    pub ca: Option<std::path::PathBuf>,

    /// Name the server's certificate must carry; default: the host part
    /// of the first --connect address.
    #[arg(long, value_name = "NAME", requires = "tls")]
    pub tls_name: Option<String>,
}

/// Environment variable `watch` reads the logon token from.
pub const TOKEN_ENV: &str = "PRICEWIRE_TOKEN";
/// The token without --token, --token-file or PRICEWIRE_TOKEN: the
/// built-in demo account's.
pub const TOKEN_DEFAULT: &str = "demo";

impl WatchArgs {
    /// The logon token: --token-file, --token, PRICEWIRE_TOKEN, else `demo`
    /// (see [`crate::cli::secret`]).
    ///
    /// # Errors
    /// [`WatchError::Token`]: both flags, or an unreadable, empty or
    /// multi-line file, or an empty variable.
    pub fn logon_token(&self) -> Result<String, WatchError> {
        let sources = super::secret::Sources {
            flag: "--token",
            value: self.token.as_deref(),
            file_flag: "--token-file",
            file: self.token_file.as_deref(),
            env: TOKEN_ENV,
            env_value: std::env::var_os(TOKEN_ENV),
        };
        let s = sources
            .resolve(Some(TOKEN_DEFAULT))
            .map_err(WatchError::Token)?;
        Ok(s.map(|s| s.value).unwrap_or_default())
    }
}

/// Why `watch` stopped.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// `--connect` does not resolve to an address (the value as given).
    #[error("--connect {0}: not a reachable host:port")]
    Address(String),
    /// `--refresh-ms` or `--once-timeout-ms` is 0.
    #[error("--refresh-ms and --once-timeout-ms: at least 1")]
    Interval,
    /// The token's file or environment variable was refused (the reason,
    /// never the token).
    #[error("{0}")]
    Token(#[from] super::secret::SecretError),
    /// The client could not connect, log on or send.
    #[error("{0}")]
    Client(#[from] ClientError),
    /// The TLS trust file or server name was refused (the reason).
    #[error("--ca/--tls-name: {0}")]
    Tls(String),
    /// `--tier` names no tier of this account (the value as given).
    #[error("--tier {0}: no such tier for this account")]
    UnknownTier(String),
    /// The server did not answer the symbol directory request.
    #[error("no answer to the directory request")]
    NoDirectory,
    /// With `--once`: symbols that had no price within the timeout.
    #[error("not every symbol got a price: {0}")]
    Incomplete(String),
    /// Writing the table to the terminal failed.
    #[error("cannot write the table: {0}")]
    Output(#[from] std::io::Error),
}

/// Runs the command; returns the exit code.
pub fn run(args: WatchArgs) -> i32 {
    let mut stdout = std::io::stdout().lock();
    match watch(&args, &mut stdout) {
        Ok(()) => 0,
        Err(e) => {
            let _ = stdout.flush();
            eprintln!("error: {e}");
            match e {
                WatchError::Address(_)
                | WatchError::Interval
                | WatchError::Token(_)
                | WatchError::UnknownTier(_)
                | WatchError::Tls(_) => super::EXIT_USAGE,
                _ => EXIT_FAILED,
            }
        }
    }
}

/// One symbol's row.
#[derive(Debug, Clone)]
struct Row {
    name: String,
    status: Option<SubscribeStatus>,
    symbol_id: Option<u16>,
    digits: u8,
    bid: i64,
    ask: i64,
    last_update: Option<Instant>,
    /// PriceFlags of the last update, with `conflated` kept until the next
    /// redraw if any update since the last one carried it.
    flags: u8,
    /// Updates since `window_start`, and the rate of the last whole window
    /// (None until one second was measured).
    window_count: u32,
    window_start: Instant,
    rate_per_s: Option<f64>,
}

impl Row {
    fn new(name: &str, now: Instant) -> Row {
        Row {
            name: name.to_string(),
            status: None,
            symbol_id: None,
            digits: 0,
            bid: NO_PRICE,
            ask: NO_PRICE,
            last_update: None,
            flags: 0,
            window_count: 0,
            window_start: now,
            rate_per_s: None,
        }
    }

    fn done(&self) -> bool {
        self.last_update.is_some() || self.status.is_some_and(|s| s != SubscribeStatus::OK)
    }

    /// Closes the rate window once it spans a second.
    fn roll_rate(&mut self, now: Instant) {
        let elapsed = now.duration_since(self.window_start);
        if elapsed >= Duration::from_secs(1) {
            self.rate_per_s = Some(f64::from(self.window_count) / elapsed.as_secs_f64());
            self.window_count = 0;
            self.window_start = now;
        }
    }

    /// The last whole window's rate; `-` before one second was measured
    /// (a rate over the first microseconds says nothing).
    fn rate_text(&self) -> String {
        self.rate_per_s
            .map_or_else(|| "-".into(), |r| format!("{r:.0}"))
    }

    /// Takes one update.
    fn update(&mut self, bid: i64, ask: i64, digits: u8, flags: u8, now: Instant) {
        self.bid = bid;
        self.ask = ask;
        self.digits = digits;
        self.flags = flags | (self.flags & price_flags::CONFLATED);
        self.last_update = Some(now);
        self.window_count += 1;
    }

    /// The flags' names, comma-separated; `-` for none.
    fn flags_text(&self) -> String {
        let names: Vec<&str> = PRICE_FLAG_NAMES
            .iter()
            .filter(|(bit, _)| self.flags & bit != 0)
            .map(|(_, name)| *name)
            .collect();
        if names.is_empty() {
            "-".into()
        } else {
            names.join(",")
        }
    }
}

/// The TLS settings of `--tls`, `--ca` and `--tls-name` (default: the
/// host of the first `--connect` address).
fn client_tls(args: &WatchArgs) -> Result<Option<crate::client::tls::ClientTls>, WatchError> {
    let (true, Some(ca)) = (args.tls, &args.ca) else {
        return Ok(None);
    };
    // The name every address of the list must prove (edges behind one
    // name share a certificate): the first address's host by default.
    let first = args.connect.split(',').next().unwrap_or_default().trim();
    let host = match first.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => first,
    };
    let name = args.tls_name.as_deref().unwrap_or(host);
    crate::client::tls::ClientTls::from_ca_file(ca, name)
        .map(Some)
        .map_err(|e| WatchError::Tls(e.to_string()))
}

/// The view: connect, subscribe, draw until interrupted (or once).
pub fn watch(args: &WatchArgs, out: &mut dyn Write) -> Result<(), WatchError> {
    if args.refresh_ms == 0 || args.once_timeout_ms == 0 {
        return Err(WatchError::Interval);
    }
    let mut addrs = args.connect.split(',').map(str::trim).map(resolve);
    let addr = addrs.next().unwrap_or_else(|| resolve(""))?;
    let token = args.logon_token()?;
    let mut cfg = ClientConfig::new(addr, &args.account, &token);
    cfg.failover = addrs.collect::<Result<_, _>>()?;
    cfg.tls = client_tls(args)?;
    let mut client = Client::connect(cfg)?;
    let tier = resolve_tier(&mut client, args.tier.as_deref())?;
    client.subscribe_names(tier, &args.symbols)?;
    let started = Instant::now();
    let mut rows: Vec<Row> = args.symbols.iter().map(|s| Row::new(s, started)).collect();
    let mut status = String::from("connected");
    let refresh = Duration::from_millis(args.refresh_ms);
    let mut next_draw = started + refresh;
    loop {
        let now = Instant::now();
        if args.once && rows.iter().all(Row::done) {
            draw(out, &mut rows, now, None)?;
            return incomplete(&rows);
        }
        if args.once && now >= started + Duration::from_millis(args.once_timeout_ms) {
            draw(out, &mut rows, now, None)?;
            return incomplete(&rows).and(Err(WatchError::Incomplete("timed out".into())));
        }
        if !args.once && now >= next_draw {
            draw(out, &mut rows, now, Some(&status))?;
            next_draw = now + refresh;
        }
        let wait = next_draw
            .saturating_duration_since(now)
            .max(Duration::from_millis(1));
        if let Some(ev) = client.next_event(wait)? {
            apply(&mut rows, ev, &mut status);
        }
    }
}

fn resolve(connect: &str) -> Result<SocketAddr, WatchError> {
    connect
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| WatchError::Address(connect.to_string()))
}

/// A tier id, or a name looked up in the account's directory.
fn resolve_tier(client: &mut Client, tier: Option<&str>) -> Result<u8, WatchError> {
    let Some(tier) = tier else {
        return Ok(TIER_ACCOUNT_DEFAULT);
    };
    if let Ok(id) = tier.parse::<u8>() {
        return Ok(id);
    }
    let rid = client.request_symbols(2_000_000, false)?;
    match client.await_response(rid, Duration::from_secs(3))? {
        Some(Event::SymbolDirectory { tiers, .. }) => tiers
            .iter()
            .find(|t| t.name.as_str() == Some(tier))
            .map(|t| t.tier_id)
            .ok_or_else(|| WatchError::UnknownTier(tier.to_string())),
        Some(Event::Reject { reason, .. }) => Err(WatchError::Incomplete(format!(
            "directory request rejected: {reason}"
        ))),
        _ => Err(WatchError::NoDirectory),
    }
}

fn incomplete(rows: &[Row]) -> Result<(), WatchError> {
    let missing: Vec<String> = rows
        .iter()
        .filter(|r| r.last_update.is_none())
        .map(|r| format!("{} ({})", r.name, status_text(r)))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(WatchError::Incomplete(missing.join(", ")))
    }
}

fn status_text(r: &Row) -> String {
    match r.status {
        Some(s) if s != SubscribeStatus::OK => s.to_string(),
        _ => "no price yet".into(),
    }
}

fn apply(rows: &mut [Row], ev: Event, status: &mut String) {
    match ev {
        Event::SubscribeResponse { results, .. } => {
            for (row, res) in rows.iter_mut().zip(results.iter()) {
                row.status = Some(res.status);
                if res.status == SubscribeStatus::OK {
                    row.symbol_id = Some(res.symbol_id);
                }
            }
        }
        Event::Price(p) => {
            let now = Instant::now();
            if let Some(row) = rows
                .iter_mut()
                .find(|r| r.symbol_id == Some(p.body.symbol_id))
            {
                let b = &p.body;
                row.update(b.bid, b.ask, b.digits, b.flags, now);
            }
        }
        Event::LoggedOn(info) => {
            *status = format!(
                "connected (reconnect {}, stream {:016x})",
                info.reconnects, info.stream_id
            )
        }
        Event::Disconnected {
            cause,
            reconnect_in_ms,
            ..
        } => {
            *status = match reconnect_in_ms {
                Some(ms) => format!("disconnected ({cause:?}); reconnecting in {ms} ms"),
                None => format!("disconnected ({cause:?})"),
            };
        }
        _ => {}
    }
}

/// Draws the table; `status` = Some for the live view (ANSI clear + home).
fn draw(
    out: &mut dyn Write,
    rows: &mut [Row],
    now: Instant,
    status: Option<&str>,
) -> std::io::Result<()> {
    if status.is_some() {
        write!(out, "\x1b[H\x1b[2J")?;
    }
    writeln!(
        out,
        "{:<12} {:>14} {:>14} {:>8} {:>9} {:>9}  FLAGS",
        "SYMBOL", "BID", "ASK", "SPREAD", "AGE_MS", "UPD/S"
    )?;
    for row in rows.iter_mut() {
        row.roll_rate(now);
        write_row(out, row, now)?;
        // `conflated` is shown for the updates since the last redraw.
        row.flags &= !price_flags::CONFLATED;
    }
    if let Some(s) = status {
        writeln!(out, "\n{s}")?;
    }
    out.flush()
}

fn write_row(out: &mut dyn Write, r: &Row, now: Instant) -> std::io::Result<()> {
    let Some(at) = r.last_update else {
        return writeln!(out, "{:<12} {:>14}", r.name, status_text(r));
    };
    let spread = if r.bid == NO_PRICE || r.ask == NO_PRICE {
        "-".to_string()
    } else {
        (r.ask - r.bid).to_string()
    };
    writeln!(
        out,
        "{:<12} {:>14} {:>14} {:>8} {:>9} {:>9}  {}",
        r.name,
        FixedPrice(r.bid, r.digits).to_string(),
        FixedPrice(r.ask, r.digits).to_string(),
        spread,
        now.duration_since(at).as_millis(),
        r.rate_text(),
        r.flags_text()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: &mut [Row], now: Instant) -> String {
        let mut out = Vec::new();
        draw(&mut out, rows, now, None).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_rate_is_shown_once_a_whole_second_was_measured() {
        let t0 = Instant::now();
        let mut rows = [Row::new("EURUSD", t0)];
        rows[0].update(108_121, 108_127, 5, 0, t0 + Duration::from_micros(3));
        // --once draws right after the first update: no rate yet, not 1/3µs.
        let first = table(&mut rows, t0 + Duration::from_micros(4));
        assert!(first.lines().nth(1).unwrap().contains(" - "), "{first}");
        for i in 0..49 {
            rows[0].update(108_121, 108_127, 5, 0, t0 + Duration::from_millis(20 * i));
        }
        let later = table(&mut rows, t0 + Duration::from_secs(1));
        let cols: Vec<&str> = later.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(cols[5], "50", "{later}");
    }

    #[test]
    fn flags_are_named_and_conflated_lasts_until_the_next_redraw() {
        let t0 = Instant::now();
        let mut rows = [Row::new("EURUSD", t0)];
        let f = price_flags::STALE | price_flags::SINGLE_PROVIDER | price_flags::INDICATIVE;
        rows[0].update(1, 2, 5, price_flags::CONFLATED, t0);
        rows[0].update(1, 2, 5, f, t0);
        let first = table(&mut rows, t0);
        let want = "conflated,stale,single_provider,indicative";
        assert!(first.lines().nth(1).unwrap().ends_with(want), "{first}");
        rows[0].update(1, 2, 5, 0, t0);
        let next = table(&mut rows, t0);
        assert!(next.lines().nth(1).unwrap().ends_with("  -"), "{next}");
        assert!(next.lines().next().unwrap().ends_with("FLAGS"));
    }
}
