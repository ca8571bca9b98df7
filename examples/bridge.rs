//! A provider bridge: logs on to a server's provider ingest listener and
//! pushes quotes into it with the provider protocol (docs/protocol.md §7),
//! using the frames of `pricewire::wire`.
//!
//! ```text
//! cargo run --release -- serve --no-synthetic --feed-listen 127.0.0.1:9410   # terminal 1
//! cargo run --example bridge -- EURUSD GBPUSD=1.26540                        # terminal 2
//! cargo run --release -- watch --tier raw EURUSD GBPUSD                      # terminal 3
//! ```
//!
//! The bridge logs on as `--provider` (a provider id of the server's table:
//! with no `[[providers]]` in its config, the synthetic ids 0, 1, 2, whose
//! shared token is `serve --ingest-token`, `demo-feed` by default), learns
//! each symbol's id and digits from the ingest listener's SymbolDirectory,
//! then sends one ProviderQuote batch `--rate-per-s` times a second: a
//! random walk of each symbol's mid (from `SYMBOL=MID`, else the built-in
//! instrument table), `--spread-points` wide. Between batches it answers
//! nothing but keeps the session alive (a Heartbeat when it sent nothing
//! for half the server's interval) and reads what the server sends: a
//! `Reject(invalid_quote)` is printed, a Disconnect ends the run with its
//! reason. `replay --to` pushes captures the same way through
//! `pricewire::feed::bridge::Bridge`.
//!
//! Arguments (defaults in brackets): `SYMBOL[=MID]…` [EURUSD GBPUSD];
//! `--feed ADDR` [127.0.0.1:9410]; `--provider ID` [0]; the token from
//! `--token` or `PRICEWIRE_INGEST_TOKEN` [demo-feed]; `--rate-per-s`
//! [10]; `--count N` batches, then Logout [0: never]; `--spread-points`
//! [4]; `--seed` [1].
//!
//! Output: `logon provider=N`, one `quote NAME bid ask` line per quote,
//! `reject …` for refused entries, and a closing `summary batches=N
//! quotes=M rejects=R`. An unreachable listener, a refused logon or an
//! unknown symbol exits 1 with the reason.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use pricewire::model::instruments::default_instruments;
use pricewire::model::price::FixedPrice;
use pricewire::wire::{self, Message, QuoteEntry, FRAME_LEN_MAX};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Flags of the bridge example.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "bridge",
    about = "Pushes quotes into a server's provider ingest"
)]
pub struct Args {
    /// Symbols to quote, each optionally with its starting mid (`GBPUSD=1.26540`).
    #[arg(default_values_t = ["EURUSD".to_string(), "GBPUSD".to_string()])]
    pub symbols: Vec<String>,
    /// The server's provider ingest listener (`serve --feed-listen`).
    #[arg(long, default_value = "127.0.0.1:9410")]
    pub feed: String,
    /// Provider id to log on as.
    #[arg(long, default_value_t = 0)]
    pub provider: u16,
    /// Provider token (default: PRICEWIRE_INGEST_TOKEN, else `demo-feed`).
    #[arg(long)]
    pub token: Option<String>,
    /// Quote batches per second (1..=10000).
    #[arg(long, default_value_t = 10)]
    pub rate_per_s: u32,
    /// Batches to send before logging out (0 = never).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
    /// Spread of every quote, in points (at least 1).
    #[arg(long, default_value_t = 4)]
    pub spread_points: i64,
    /// Seed of the random walk.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// What one run sent.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// ProviderQuote frames sent.
    pub batches: u64,
    /// Quotes sent, as (symbol id, bid, ask) in order.
    pub quotes: Vec<(u16, i64, i64)>,
    /// Rejects the server sent.
    pub rejects: u64,
}

/// One quoted symbol.
#[derive(Debug, Clone)]
struct Quoted {
    name: String,
    id: u16,
    digits: u8,
    mid: i64,
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

/// Logs on, looks the symbols up and quotes until `--count` or `stop`.
pub fn run(args: &Args, out: &mut dyn Write, stop: &AtomicBool) -> anyhow::Result<Summary> {
    if !(1..=10_000).contains(&args.rate_per_s) || args.spread_points < 1 {
        bail!("--rate-per-s: 1..=10000; --spread-points: at least 1");
    }
    let addr = args
        .feed
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .with_context(|| format!("--feed {:?}: not a host:port", args.feed))?;
    let token = args
        .token
        .clone()
        .or_else(|| std::env::var("PRICEWIRE_INGEST_TOKEN").ok())
        .unwrap_or_else(|| "demo-feed".into());
    let mut conn = Conn::logon(addr, args.provider, &token)?;
    writeln!(out, "logon provider={}", args.provider)?;
    let mut symbols = conn.symbols(&args.symbols)?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let mut sum = Summary::default();
    let period = Duration::from_secs(1) / args.rate_per_s;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) && (args.count == 0 || sum.batches < args.count) {
        let batch = step(&mut symbols, &mut rng, args.spread_points);
        conn.send_quotes(&batch)?;
        sum.batches += 1;
        for (s, q) in symbols.iter().zip(&batch) {
            let (bid, ask) = (FixedPrice(q.bid, s.digits), FixedPrice(q.ask, s.digits));
            writeln!(out, "quote {} {bid} {ask}", s.name)?;
            sum.quotes.push((q.symbol_id, q.bid, q.ask));
        }
        next += period;
        // Pace the batches; read and keep alive while waiting.
        while Instant::now() < next {
            sum.rejects += conn.poll(next.saturating_duration_since(Instant::now()), out)?;
        }
    }
    conn.logout()?;
    let quotes = sum.quotes.len();
    writeln!(
        out,
        "summary batches={} quotes={quotes} rejects={}",
        sum.batches, sum.rejects
    )?;
    Ok(sum)
}

/// Moves every mid by 1..=3 points up or down (never 0, so each quote is
/// a new price) and quotes `spread` points around it.
fn step(symbols: &mut [Quoted], rng: &mut SmallRng, spread: i64) -> Vec<QuoteEntry> {
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    symbols
        .iter_mut()
        .map(|s| {
            let move_points = rng.gen_range(1..=3) * if rng.gen::<bool>() { 1 } else { -1 };
            s.mid = (s.mid + move_points).max(spread + 1);
            let bid = s.mid - spread / 2;
            QuoteEntry {
                symbol_id: s.id,
                flags: 0,
                bid,
                ask: bid + spread,
                bid_size: 1_000_000,
                ask_size: 1_000_000,
                provider_time_ns: now_ns,
            }
        })
        .collect()
}

/// The mid of `NAME=MID` at `digits`, else the built-in instrument's.
fn start_mid(spec: &str, name: &str, digits: u8) -> anyhow::Result<i64> {
    if let Some((_, mid)) = spec.split_once('=') {
        let value: f64 = mid
            .parse()
            .with_context(|| format!("{spec:?}: MID is not a number"))?;
        return Ok((value * 10f64.powi(i32::from(digits))).round() as i64);
    }
    let builtin = default_instruments().into_iter().find(|i| i.name == name);
    match builtin {
        Some(i) if i.digits == digits => Ok(i.base_price),
        _ => bail!("{name}: no built-in mid at {digits} digits; give {name}=MID"),
    }
}

/// One provider session: a blocking socket with timeouts.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    rx: Vec<u8>,
    have: usize,
    heartbeat: Duration,
    last_sent: Instant,
}

impl Conn {
    /// Connects and sends ProviderLogon; the answer must be LogonAccepted.
    fn logon(addr: SocketAddr, provider: u16, token: &str) -> anyhow::Result<Conn> {
        let stream =
            TcpStream::connect_timeout(&addr, Duration::from_secs(3)).with_context(|| {
                format!(
                    "cannot connect to {addr}: is `pricewire serve --feed-listen {addr}` running?"
                )
            })?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(Duration::from_secs(3)))?;
        let mut c = Conn {
            stream,
            buf: vec![0; FRAME_LEN_MAX],
            rx: vec![0; FRAME_LEN_MAX],
            have: 0,
            heartbeat: Duration::from_secs(1),
            last_sent: Instant::now(),
        };
        let logon = wire::ProviderLogon {
            provider_id: provider,
            token: token.as_bytes(),
        };
        let n = wire::encode_provider_logon(&mut c.buf, &logon)?;
        c.send(n)?;
        let frame = c.answer(Duration::from_secs(5))?;
        match wire::decode(&frame)? {
            Message::LogonAccepted(a) => {
                c.heartbeat = Duration::from_millis(u64::from(a.heartbeat_interval_ms.max(100)));
                Ok(c)
            }
            Message::LogonRejected(r) => bail!(
                "provider logon refused: {} (retry after {} ms)",
                r.reason,
                r.retry_after_ms
            ),
            Message::Disconnect(d) => bail!(
                "provider logon refused: {} {:?}",
                d.reason,
                String::from_utf8_lossy(d.text)
            ),
            other => bail!("unexpected answer to ProviderLogon: {other:?}"),
        }
    }

    /// Resolves `NAME[=MID]` specs through the listener's directory.
    fn symbols(&mut self, specs: &[String]) -> anyhow::Result<Vec<Quoted>> {
        let req = wire::SymbolListRequest {
            request_id: 1,
            budget_us: 2_000_000,
            critical: true,
        };
        let n = wire::encode_symbol_list_request(&mut self.buf, &req)?;
        self.send(n)?;
        let frame = loop {
            let f = self.answer(Duration::from_secs(5))?;
            if !matches!(wire::decode(&f)?, Message::Heartbeat) {
                break f;
            }
        };
        let Message::SymbolDirectory(d) = wire::decode(&frame)? else {
            bail!("no SymbolDirectory from the ingest listener");
        };
        let known: Vec<wire::SymbolInfo> = d.symbols.collect();
        let mut out = Vec::with_capacity(specs.len());
        for spec in specs {
            let name = spec.split_once('=').map_or(spec.as_str(), |(n, _)| n);
            let Some(info) = known.iter().find(|s| s.name.as_str() == Some(name)) else {
                bail!("{name}: not an instrument of this server");
            };
            let mid = start_mid(spec, name, info.digits)?;
            out.push(Quoted {
                name: name.to_string(),
                id: info.symbol_id,
                digits: info.digits,
                mid,
            });
        }
        Ok(out)
    }

    fn send_quotes(&mut self, quotes: &[QuoteEntry]) -> anyhow::Result<()> {
        let n = wire::encode_provider_quote(&mut self.buf, quotes.iter().copied())?;
        self.send(n).context("sending quotes")
    }

    fn send(&mut self, n: usize) -> io::Result<()> {
        self.stream.write_all(&self.buf[..n])?;
        self.last_sent = Instant::now();
        Ok(())
    }

    /// Waits up to `wait` for server frames; returns the Rejects seen. A
    /// Heartbeat goes out when nothing was sent for half the interval.
    fn poll(&mut self, wait: Duration, out: &mut dyn Write) -> anyhow::Result<u64> {
        if self.last_sent.elapsed() >= self.heartbeat / 2 {
            let n = wire::encode_heartbeat(&mut self.buf)?;
            self.send(n)?;
        }
        let wait = wait.min(self.heartbeat / 2).max(Duration::from_millis(1));
        let mut rejects = 0;
        if let Some(frame) = self.read_frame(wait)? {
            match wire::decode(&frame)? {
                Message::Reject(r) => {
                    rejects += 1;
                    let text = String::from_utf8_lossy(r.text);
                    writeln!(out, "reject {} {text:?}", r.reason)?;
                }
                Message::Disconnect(d) => {
                    let text = String::from_utf8_lossy(d.text);
                    bail!("the server ended the session: {} {text:?}", d.reason);
                }
                _ => {}
            }
        }
        Ok(rejects)
    }

    /// The next frame within `wait`, else an error.
    fn answer(&mut self, wait: Duration) -> anyhow::Result<Vec<u8>> {
        self.read_frame(wait)?
            .ok_or_else(|| anyhow!("no answer within {} ms", wait.as_millis()))
    }

    /// One whole frame if it arrives within `wait`.
    fn read_frame(&mut self, wait: Duration) -> anyhow::Result<Option<Vec<u8>>> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(len) = wire::split_with_max(&self.rx[..self.have], FRAME_LEN_MAX)? {
                let frame = self.rx[..len].to_vec();
                self.rx.copy_within(len..self.have, 0);
                self.have -= len;
                return Ok(Some(frame));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(&mut self.rx[self.have..]) {
                Ok(0) => bail!("the server closed the connection"),
                Ok(n) => self.have += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("reading from the server"),
            }
        }
    }

    /// Sends Logout and waits (bounded) for the server's Disconnect.
    fn logout(mut self) -> anyhow::Result<()> {
        let n = wire::encode_logout(&mut self.buf)?;
        self.send(n)?;
        // The server answers Disconnect(logout) and closes; a close seen
        // first ends the session just as well.
        let deadline = Instant::now() + Duration::from_secs(2);
        while let Ok(Some(frame)) =
            self.read_frame(deadline.saturating_duration_since(Instant::now()))
        {
            if matches!(wire::decode(&frame), Ok(Message::Disconnect(_))) {
                break;
            }
        }
        Ok(())
    }
}
