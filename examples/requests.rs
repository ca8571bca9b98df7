//! A request client: snapshots, history and the symbol list asked while
//! subscribed prices keep streaming, none of them lost — built on the
//! blocking client of `pricewire::client`.
//!
//! ```text
//! cargo run --release -- serve                       # terminal 1
//! cargo run --example requests -- EURUSD GBPUSD      # terminal 2
//! ```
//!
//! Every `--every` prices it sends one round: a SnapshotRequest for every
//! symbol, a HistoryRequest for one (in turn) and a SymbolListRequest, each
//! with a relative time budget. Answers are matched by request id in the
//! same event loop that takes the prices, so waiting for an answer never
//! stops prices from reaching the caller. A Reject with a retry-after
//! (`rate_limited`, `overloaded`, `shutting_down`, `internal`) is sent
//! again after `max(retryAfterMs, jittered backoff)`, with the budget that
//! is left of its deadline; on `rate_limited` nothing else is sent before
//! that time either (docs/protocol.md §9). Requests lost with a session
//! are sent again after the next logon. Try `serve --symbol-list-rate-per-s
//! 1` to see the symbol list refused and retried.
//!
//! Arguments (defaults in brackets): `SYMBOL…` [EURUSD GBPUSD USDJPY];
//! `--connect ADDR[,ADDR…]` [127.0.0.1:9400]; `--account` [demo]; the token
//! from `--token` or `PRICEWIRE_TOKEN` [demo]; `--every N` prices between
//! rounds [50]; `--rounds N` stop once N rounds are answered [0: never];
//! `--budget-ms` [500]; `--deadline-ms` a request's whole life, retries
//! included [5000]; `--history-count` [20]; `--duration-s` [0: never].
//!
//! Output: `answer …`, `reject …` / `retry …`, `expired …`, a `round …`
//! line per answered round, and a closing `summary …` with the prices
//! received and the gaps among them. The history needs a tier without
//! markup (the demo account has `raw`); others get `reject
//! not_entitled`, which is final.

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use pricewire::client::{Client, ClientConfig, ClientError, Event, SeqStatus};
use pricewire::resilience::backoff::Backoff;
use pricewire::wire::{RejectReason, SubscribeStatus, TIER_ACCOUNT_DEFAULT};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// Flags of the request example.
#[derive(Debug, Clone, Parser)]
#[command(name = "requests", about = "Requests while prices stream")]
pub struct Args {
    /// Symbols to subscribe to and ask about.
    #[arg(default_values_t = ["EURUSD".to_string(), "GBPUSD".to_string(), "USDJPY".to_string()])]
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
    /// Prices between two rounds of requests.
    #[arg(long, default_value_t = 50)]
    pub every: u64,
    /// Stop once this many rounds were answered (0 = never).
    #[arg(long, default_value_t = 0)]
    pub rounds: u64,
    /// Time budget each request is sent with, in ms.
    #[arg(long, default_value_t = 500)]
    pub budget_ms: u64,
    /// A request's whole life, retries included, in ms.
    #[arg(long, default_value_t = 5_000)]
    pub deadline_ms: u64,
    /// Ticks asked for by each HistoryRequest (the server sends at most 190).
    #[arg(long, default_value_t = 20)]
    pub history_count: u16,
    /// Stop after this many seconds (0 = never).
    #[arg(long, default_value_t = 0)]
    pub duration_s: u64,
}

/// What one run saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Prices received.
    pub prices: u64,
    /// Gaps among them.
    pub gaps: u64,
    /// Rounds whose every request was answered (or refused for good).
    pub rounds: u64,
    /// Answers by kind: snapshot, history, symbol list.
    pub answers: [u64; 3],
    /// Rejects received.
    pub rejects: u64,
    /// Requests sent again after a Reject or a lost session.
    pub retries: u64,
    /// Requests given up at their deadline.
    pub expired: u64,
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    Snapshot,
    History(u16),
    Symbols,
}

/// One request until it is answered, refused for good or expired.
#[derive(Debug, Clone, Copy)]
struct Pending {
    ask: Ask,
    round: u64,
    deadline: Instant,
    attempt: u32,
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
fn addresses(list: &str) -> anyhow::Result<Vec<SocketAddr>> {
    let mut addrs = Vec::new();
    for a in list.split(',').map(str::trim) {
        let addr = a.to_socket_addrs().ok().and_then(|mut it| it.next());
        addrs.push(addr.with_context(|| format!("--connect {a:?}: not a host:port"))?);
    }
    if addrs.is_empty() {
        bail!("--connect: no address");
    }
    Ok(addrs)
}

/// Connects, subscribes and runs rounds until `--rounds`, `--duration-s`,
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
    let client = Client::connect(cfg)
        .with_context(|| format!("is `pricewire serve` running at {}?", args.connect))?;
    let mut r = Requester::new(client, args);
    r.client
        .subscribe_names(TIER_ACCOUNT_DEFAULT, &args.symbols)?;
    let deadline =
        (args.duration_s > 0).then(|| Instant::now() + Duration::from_secs(args.duration_s));
    while !stop.load(Ordering::Relaxed) && (args.rounds == 0 || r.sum.rounds < args.rounds) {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        r.send_due(out)?;
        match r.client.next_event(Duration::from_millis(50)) {
            Ok(Some(ev)) => r.on_event(ev, out)?,
            Ok(None) => {}
            Err(ClientError::Closed(why)) => {
                writeln!(out, "closed: {why}")?;
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let s = &r.sum;
    writeln!(
        out,
        "summary prices={} gaps={} rounds={} snapshots={} histories={} symbol_lists={} \
         rejects={} retries={} expired={}",
        s.prices,
        s.gaps,
        s.rounds,
        s.answers[0],
        s.answers[1],
        s.answers[2],
        s.rejects,
        s.retries,
        s.expired
    )?;
    Ok(r.sum.clone())
}

/// The client, the requests in flight and the counts.
struct Requester<'a> {
    client: Client,
    args: &'a Args,
    ids: Vec<u16>,
    names: HashMap<u16, String>,
    /// Requests in flight, by request id.
    pending: HashMap<u64, Pending>,
    /// Requests to send again at a time (a retry-after, a new session).
    later: Vec<(Instant, Pending)>,
    /// Open requests per round; a round is done when it reaches 0.
    open: HashMap<u64, usize>,
    /// After `Reject(rate_limited)`: nothing is sent before this.
    hold_until: Option<Instant>,
    since_round: u64,
    next_round: u64,
    backoff: Backoff,
    rng: SmallRng,
    sum: Summary,
}

impl<'a> Requester<'a> {
    fn new(client: Client, args: &'a Args) -> Self {
        Requester {
            client,
            args,
            ids: Vec::new(),
            names: HashMap::new(),
            pending: HashMap::new(),
            later: Vec::new(),
            open: HashMap::new(),
            hold_until: None,
            since_round: 0,
            next_round: 1,
            backoff: Backoff::new(50, 2_000),
            rng: SmallRng::from_entropy(),
            sum: Summary::default(),
        }
    }

    fn on_event(&mut self, ev: Event, out: &mut dyn Write) -> anyhow::Result<()> {
        if let Some(rid) = ev.request_id() {
            if let Some(p) = self.pending.remove(&rid) {
                return self.on_answer(rid, p, ev, out);
            }
        }
        match ev {
            Event::Price(p) => {
                self.sum.prices += 1;
                self.since_round += 1;
                if let SeqStatus::Gap { expected, .. } = p.seq {
                    self.sum.gaps += 1;
                    let name = self.name(p.body.symbol_id);
                    writeln!(out, "gap {name} expected={expected} got={}", p.body.seq)?;
                }
            }
            Event::SubscribeResponse { results, .. } => {
                for r in results.iter().filter(|r| r.status == SubscribeStatus::OK) {
                    let name = r.name.as_str().unwrap_or("?").to_string();
                    self.names.insert(r.symbol_id, name);
                    if !self.ids.contains(&r.symbol_id) {
                        self.ids.push(r.symbol_id);
                    }
                }
            }
            Event::LoggedOn(_) => self.resend_lost(),
            Event::Disconnected { cause, .. } => writeln!(out, "disconnected ({cause})")?,
            _ => {}
        }
        Ok(())
    }

    fn name(&self, id: u16) -> &str {
        self.names.get(&id).map_or("?", String::as_str)
    }

    /// Starts a round when due, and sends every retry whose time came.
    fn send_due(&mut self, out: &mut dyn Write) -> anyhow::Result<()> {
        let now = Instant::now();
        if self.hold_until.is_some_and(|t| now < t) || !self.client.is_connected() {
            return Ok(());
        }
        self.hold_until = None;
        if self.since_round >= self.args.every && !self.ids.is_empty() {
            self.since_round = 0;
            self.start_round(now, out)?;
        }
        let (due, wait): (Vec<_>, Vec<_>) = self.later.drain(..).partition(|(at, _)| now >= *at);
        self.later = wait;
        for (_, p) in due {
            self.sum.retries += 1;
            writeln!(out, "retry {:?} attempt={}", p.ask, p.attempt)?;
            self.send(p, now, out)?;
        }
        Ok(())
    }

    fn start_round(&mut self, now: Instant, out: &mut dyn Write) -> anyhow::Result<()> {
        let round = self.next_round;
        self.next_round += 1;
        let history = self.ids[(round as usize) % self.ids.len()];
        let deadline = now + Duration::from_millis(self.args.deadline_ms);
        let asks = [Ask::Snapshot, Ask::History(history), Ask::Symbols];
        self.open.insert(round, asks.len());
        for ask in asks {
            let p = Pending {
                ask,
                round,
                deadline,
                attempt: 0,
            };
            self.send(p, now, out)?;
        }
        Ok(())
    }

    /// Sends `p` with what is left of its deadline as the budget.
    fn send(&mut self, p: Pending, now: Instant, out: &mut dyn Write) -> anyhow::Result<()> {
        let left = p.deadline.saturating_duration_since(now);
        if left.is_zero() {
            self.sum.expired += 1;
            writeln!(out, "expired {:?} after {} attempts", p.ask, p.attempt + 1)?;
            return self.close(p.round, out);
        }
        let budget = left.min(Duration::from_millis(self.args.budget_ms));
        let budget_us = u32::try_from(budget.as_micros()).unwrap_or(u32::MAX);
        let sent = match p.ask {
            Ask::Snapshot => {
                let tier = TIER_ACCOUNT_DEFAULT;
                self.client
                    .request_snapshot(tier, &self.ids, budget_us, false)
            }
            Ask::History(id) => {
                let count = self.args.history_count;
                self.client.request_history(id, count, budget_us, false)
            }
            Ask::Symbols => self.client.request_symbols(budget_us, false),
        };
        match sent {
            Ok(rid) => {
                self.pending.insert(rid, p);
                Ok(())
            }
            // The session is gone: sent again after the next logon.
            Err(ClientError::NotConnected) => {
                self.later.push((now, p));
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Requests in flight on a lost session are never answered: ask again.
    fn resend_lost(&mut self) {
        let now = Instant::now();
        self.later
            .extend(self.pending.drain().map(|(_, p)| (now, p)));
    }

    fn on_answer(
        &mut self,
        rid: u64,
        mut p: Pending,
        ev: Event,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        match ev {
            Event::SnapshotResponse { prices, .. } => {
                self.sum.answers[0] += 1;
                let seqs: Vec<String> = prices
                    .iter()
                    .map(|b| format!("{}@{}", self.name(b.symbol_id), b.seq))
                    .collect();
                writeln!(out, "answer snapshot rid={rid} {}", seqs.join(" "))?;
            }
            Event::HistoryResponse {
                symbol_id, ticks, ..
            } => {
                self.sum.answers[1] += 1;
                let name = self.name(symbol_id);
                writeln!(out, "answer history rid={rid} {name} ticks={}", ticks.len())?;
            }
            Event::SymbolDirectory { symbols, tiers, .. } => {
                self.sum.answers[2] += 1;
                writeln!(
                    out,
                    "answer symbols rid={rid} symbols={} tiers={}",
                    symbols.len(),
                    tiers.len()
                )?;
            }
            Event::Reject {
                reason,
                retry_after_ms,
                text,
                ..
            } => {
                self.sum.rejects += 1;
                writeln!(
                    out,
                    "reject {:?} rid={rid} {reason} retry_after={retry_after_ms}ms {text:?}",
                    p.ask
                )?;
                if retryable(reason) {
                    let floor = u64::from(retry_after_ms);
                    let wait = self.backoff.delay_ms(p.attempt, floor, &mut self.rng);
                    let at = Instant::now() + Duration::from_millis(wait);
                    if reason == RejectReason::RATE_LIMITED {
                        self.hold_until = Some(at);
                    }
                    p.attempt += 1;
                    self.later.push((at, p));
                    return Ok(());
                }
            }
            other => writeln!(out, "unexpected answer rid={rid}: {other:?}")?,
        }
        self.close(p.round, out)
    }

    /// One request of `round` is done.
    fn close(&mut self, round: u64, out: &mut dyn Write) -> anyhow::Result<()> {
        let Some(open) = self.open.get_mut(&round) else {
            return Ok(());
        };
        *open -= 1;
        if *open == 0 {
            self.open.remove(&round);
            self.sum.rounds += 1;
            let s = &self.sum;
            writeln!(
                out,
                "round {round} done: prices={} gaps={}",
                s.prices, s.gaps
            )?;
        }
        Ok(())
    }
}

/// Rejects worth sending again after their retry-after.
fn retryable(reason: RejectReason) -> bool {
    [
        RejectReason::RATE_LIMITED,
        RejectReason::OVERLOADED,
        RejectReason::SHUTTING_DOWN,
        RejectReason::INTERNAL,
    ]
    .contains(&reason)
}
