//! A subscriber that fails over between servers, resumes by sequence
//! after a reconnect and reports every gap — built on the blocking client
//! of `pricewire::client`.
//!
//! ```text
//! cargo run --release -- serve                      # terminal 1
//! cargo run --example subscriber -- EURUSD GBPUSD   # terminal 2
//! ```
//!
//! Stop the server (Ctrl-C) and start it again: the subscriber reports the
//! lost session and the delay the SDK's jittered backoff chose, logs on
//! again, and every symbol's first price reads `resync: new stream` — a
//! restarted server numbers a new stream, so it is never taken for a
//! resume. Against two servers (`--connect A,B`, e.g. edges of one core)
//! the next attempt goes to the next address; an edge of the same stream
//! whose prices continue the ones held reads `resumed`.
//!
//! Arguments (defaults in brackets): `SYMBOL…` [EURUSD GBPUSD];
//! `--connect ADDR[,ADDR…]` [127.0.0.1:9400]; `--account` [demo]; the token
//! from `--token` or `PRICEWIRE_TOKEN` [demo]; `--tier ID` [the account's];
//! `--count N` stop after N prices [0: never]; `--duration-s S` [0: never];
//! `--changes-only` print only prices that are not in-order updates.
//!
//! Output, one line each: `logon …`, `subscribed NAME ok`, `price NAME
//! seq=N stream=HEX bid ask STATUS` (STATUS: `snapshot`, `in-order`,
//! `resumed`, `resync: new stream`, `resync after reconnect`, `resync`,
//! `gap(expected N…)`), `disconnected …`, and a closing `summary …`.
//! An unreachable server or a refused logon exits 1 with the reason.

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use pricewire::client::{Client, ClientConfig, ClientError, Event, PriceEvent, SeqStatus};
use pricewire::model::price::FixedPrice;
use pricewire::wire::{SubscribeStatus, TIER_ACCOUNT_DEFAULT};

/// Flags of the subscriber example.
#[derive(Debug, Clone, Parser)]
#[command(name = "subscriber", about = "Prices with their sequence status")]
pub struct Args {
    /// Symbols to subscribe to.
    #[arg(default_values_t = ["EURUSD".to_string(), "GBPUSD".to_string()])]
    pub symbols: Vec<String>,
    /// Server addresses, tried in turn (failover).
    #[arg(long, default_value = "127.0.0.1:9400", value_name = "ADDR[,ADDR…]")]
    pub connect: String,
    /// Account to log on with.
    #[arg(long, default_value = "demo")]
    pub account: String,
    /// Logon token (default: PRICEWIRE_TOKEN, else `demo`).
    #[arg(long)]
    pub token: Option<String>,
    /// Tier id (default: the account's default tier).
    #[arg(long)]
    pub tier: Option<u8>,
    /// Stop after this many prices (0 = never).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
    /// Stop after this many seconds (0 = never).
    #[arg(long, default_value_t = 0)]
    pub duration_s: u64,
    /// Print only prices that are not in-order updates.
    #[arg(long)]
    pub changes_only: bool,
}

/// What one run saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Prices received.
    pub prices: u64,
    /// Snapshots that resumed a sequence after a reconnect.
    pub resumed: u64,
    /// Snapshots that resynced a key (a new stream, or prices missed).
    pub resyncs: u64,
    /// Of those, the ones on a new stream.
    pub new_streams: u64,
    /// Gaps in updates.
    pub gaps: u64,
    /// Sessions lost.
    pub disconnects: u64,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let stop = AtomicBool::new(false);
    let mut out = std::io::stdout().lock();
    match run(&args, &mut out, &stop) {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let _ = out.flush();
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The addresses of `--connect`, each resolved.
pub fn addresses(list: &str) -> anyhow::Result<Vec<SocketAddr>> {
    let addrs = list
        .split(',')
        .map(str::trim)
        .map(|a| {
            a.to_socket_addrs()
                .ok()
                .and_then(|mut it| it.next())
                .with_context(|| format!("--connect {a:?}: not a host:port"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if addrs.is_empty() {
        bail!("--connect: no address");
    }
    Ok(addrs)
}

/// Connects, subscribes and prints until `--count`, `--duration-s`,
/// `stop`, or the client gives up.
pub fn run(args: &Args, out: &mut dyn Write, stop: &AtomicBool) -> anyhow::Result<Summary> {
    let addrs = addresses(&args.connect)?;
    let token = args
        .token
        .clone()
        .or_else(|| std::env::var("PRICEWIRE_TOKEN").ok())
        .unwrap_or_else(|| "demo".into());
    let mut cfg = ClientConfig::new(addrs[0], &args.account, &token);
    cfg.failover = addrs[1..].to_vec();
    let mut client = Client::connect(cfg)
        .with_context(|| format!("is `pricewire serve` running at {}?", args.connect))?;
    if let Some(info) = client.logon_info() {
        writeln!(
            out,
            "logon session={} stream={:x}",
            info.session_id, info.stream_id
        )?;
    }
    let tier = args.tier.unwrap_or(TIER_ACCOUNT_DEFAULT);
    client.subscribe_names(tier, &args.symbols)?;
    let mut view = View::default();
    let deadline =
        (args.duration_s > 0).then(|| Instant::now() + Duration::from_secs(args.duration_s));
    while !stop.load(Ordering::Relaxed) && (args.count == 0 || view.sum.prices < args.count) {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        match client.next_event(Duration::from_millis(200)) {
            Ok(Some(ev)) => view.on_event(ev, args, out)?,
            Ok(None) => {}
            Err(ClientError::Closed(why)) => {
                writeln!(out, "closed: {why}")?;
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let s = &view.sum;
    writeln!(
        out,
        "summary prices={} resumed={} resyncs={} new_streams={} gaps={} disconnects={}",
        s.prices, s.resumed, s.resyncs, s.new_streams, s.gaps, s.disconnects
    )?;
    Ok(view.sum)
}

/// Names by symbol id and the running counts.
#[derive(Default)]
struct View {
    names: HashMap<u16, String>,
    sum: Summary,
}

impl View {
    fn on_event(&mut self, ev: Event, args: &Args, out: &mut dyn Write) -> anyhow::Result<()> {
        match ev {
            Event::Price(p) => self.on_price(&p, args, out)?,
            Event::SubscribeResponse { results, .. } => {
                for r in results {
                    let name = r.name.as_str().unwrap_or("?").to_string();
                    writeln!(out, "subscribed {name} {}", r.status)?;
                    if r.status == SubscribeStatus::OK {
                        self.names.insert(r.symbol_id, name);
                    }
                }
            }
            Event::LoggedOn(info) => writeln!(
                out,
                "logon session={} stream={:x} reconnects={}",
                info.session_id, info.stream_id, info.reconnects
            )?,
            Event::LogonRejected {
                reason,
                retry_after_ms,
            } => writeln!(
                out,
                "logon rejected: {reason} (retry after {retry_after_ms} ms)"
            )?,
            Event::Disconnected {
                cause,
                reconnect_in_ms,
                ..
            } => {
                self.sum.disconnects += 1;
                match reconnect_in_ms {
                    Some(ms) => writeln!(out, "disconnected ({cause}); reconnecting in {ms} ms")?,
                    None => writeln!(out, "disconnected ({cause}); not reconnecting")?,
                }
            }
            Event::Reject { reason, text, .. } => writeln!(out, "reject: {reason} {text:?}")?,
            // Answers to the client's own gap resyncs: the prices that
            // follow carry the stream on.
            _ => {}
        }
        Ok(())
    }

    fn on_price(&mut self, p: &PriceEvent, args: &Args, out: &mut dyn Write) -> anyhow::Result<()> {
        let s = &mut self.sum;
        s.prices += 1;
        match p.seq {
            SeqStatus::Resumed => s.resumed += 1,
            SeqStatus::Gap { .. } => s.gaps += 1,
            SeqStatus::Reset => match p.reset {
                Some(pricewire::client::ResetCause::NewStream { .. }) => {
                    s.resyncs += 1;
                    s.new_streams += 1;
                }
                Some(pricewire::client::ResetCause::Resync { .. }) => s.resyncs += 1,
                _ => {}
            },
            SeqStatus::InOrder if args.changes_only => return Ok(()),
            _ => {}
        }
        let b = &p.body;
        let name = self.names.get(&b.symbol_id).map_or("?", String::as_str);
        writeln!(
            out,
            "price {name} seq={} stream={:x} {} {} {}",
            b.seq,
            p.stream_id,
            FixedPrice(b.bid, b.digits),
            FixedPrice(b.ask, b.digits),
            p.seq_label()
        )?;
        Ok(())
    }
}
