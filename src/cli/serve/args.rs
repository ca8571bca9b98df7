//! The flags of `pricewire serve` and the settings derived from them.

use std::path::PathBuf;

use clap::Args;

use super::super::gateway_args::GatewayArgs;
use super::super::ArgsError;
use crate::admission::RetryWindow;
use crate::clock::NS_PER_MS;
use crate::config::Config;
use crate::ops::OpsArgs;
use crate::pipeline::{
    PipelineConfig, FEED_FULL_WAIT_US_DEFAULT, FEED_RING_DEFAULT, SHARD_RING_DEFAULT,
};
use crate::requests::service::RequestConfig;
use crate::requests::QueueConfig;
use crate::runtime::{CpuMap, RtPriority, Threading, WaitStrategy};

/// Flags of `pricewire serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TOML configuration file of instruments, tiers, providers and accounts.
    /// It also sets the engine. Absent sections keep the built-in defaults. FIX
    /// provider keys ([providers.fix]: timeouts, breaker, gap window, flap
    /// damping flap_*, gray rule gray_*) with their defaults and units:
    /// docs/fix.md.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Synthetic providers when the config names none.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub providers: usize,

    /// Synthetic feed rate, in ticks per second across all symbols. At most
    /// 50000000; 0 = as fast as the pipeline takes them.
    #[arg(long, default_value_t = 100_000, value_name = "TICKS_PER_S")]
    pub synthetic_rate: u64,

    /// Run without the synthetic feed (prices only from ingest or replay).
    #[arg(long)]
    pub no_synthetic: bool,

    /// Seed of the synthetic feed; the same seed gives the same quotes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Gateway shards (one engine ring and one thread each). Default: with
    /// `--threading shared` one per available core (at most 8), so every
    /// core runs one thread; with `dedicated`, 1.
    #[arg(long, value_name = "N")]
    pub shards: Option<usize>,

    /// New subscriber sessions go to shard 0 until it holds this many. Then
    /// they go to the shard with the fewest. Default: 16 with `--threading
    /// shared` (shard 0 runs the engine: its sessions get prices without a
    /// cross-thread wake-up), 0 with `dedicated`.
    #[arg(long, value_name = "N")]
    pub shard0_fill: Option<u64>,

    /// Shard 0's busy share at which it spills sessions to other shards, in %.
    /// While shard 0 runs the engine (`--threading shared`) and its loop is
    /// busy at least this share of the time (0-100, per 50-ms window), it moves
    /// one session per window to the least busy other shard, and new sessions
    /// go elsewhere; 0 turns it off. Default: 50 with shared threading, 0 with
    /// dedicated (no shard runs the engine).
    #[arg(long, value_name = "PCT")]
    pub shard0_spill_pct: Option<u32>,

    /// Feed → engine ring capacity in ticks (power of two).
    #[arg(long, default_value_t = FEED_RING_DEFAULT, value_name = "TICKS")]
    pub feed_ring: usize,

    /// Engine → shard ring capacity in prices (power of two).
    #[arg(long, default_value_t = SHARD_RING_DEFAULT, value_name = "PRICES")]
    pub shard_ring: usize,

    /// How the feed thread waits when idle. Default: `spin-park`; `park`
    /// with `--rt-priority`.
    #[arg(long, value_enum)]
    pub feed_wait: Option<WaitStrategy>,

    /// How the engine thread waits when idle (dedicated threading only).
    /// Default: `spin-park`; `park` with `--rt-priority`.
    #[arg(long, value_enum)]
    pub engine_wait: Option<WaitStrategy>,

    /// How stages map onto threads. `dedicated`: one thread per stage.
    /// `shared`: the engine and the provider ingest listener run inside
    /// shard 0's thread (same rings, one thread): a quote reaches the
    /// subscribers' sockets with one wake-up instead of three. Best where
    /// cores are fewer than stages (docs/design.md, BENCHMARKS.md).
    #[arg(long, value_enum, default_value_t = Threading::Shared)]
    pub threading: Threading,

    /// How shard threads (and the request workers) wait when idle.
    /// Default: `park` with `--threading shared` (nothing inside the
    /// process hands work to a shard that spinning would catch sooner: its
    /// sockets and the feeds' doorbells wake it), `spin-park` with
    /// `dedicated`; `park` at real-time priority (`--rt-priority`).
    #[arg(long, value_enum)]
    pub shard_wait: Option<WaitStrategy>,

    /// Stage-to-core pinning, e.g. `shard0=0,shard1=1`. With `--threading
    /// dedicated` also `feed=0,engine=1`. Unpinned by default; a mapped stage
    /// that cannot be pinned fails start-up.
    #[arg(long, default_value = "", value_name = "MAP")]
    pub cpus: CpuMap,

    /// `SCHED_FIFO` priority of the stages that carry prices, 1..=99. Those are
    /// the feeds, engine and gateway shards (which host the engine and the
    /// provider ingest with `--threading shared`): a woken stage preempts
    /// normal-priority threads at once instead of waiting up to a scheduler
    /// tick. Needs CAP_SYS_NICE or a high enough RLIMIT_RTPRIO (start-up fails
    /// otherwise). Every real-time stage then waits with `park` (the default);
    /// `spin`, `spin-yield` and `spin-park` are refused, since a real-time
    /// thread that spins or yields starves every normal thread on its core. The
    /// request path, acceptor, recorder and ops endpoints stay at normal
    /// priority. Off by default.
    #[arg(long, value_name = "N")]
    pub rt_priority: Option<RtPriority>,

    /// Longest a feed waits for room in a full ring before dropping, in µs.
    #[arg(long, default_value_t = FEED_FULL_WAIT_US_DEFAULT, value_name = "US")]
    pub feed_full_wait_us: u64,

    /// Age past which a provider quote is left out of aggregation, in ms.
    /// Overrides the config file; default 2000. A FIX provider whose last quote
    /// keeps aging past it turns gray (gray_lapses within gray_window_ms,
    /// docs/fix.md).
    #[arg(long, value_name = "MS")]
    pub max_quote_age_ms: Option<u64>,

    /// Spike filter band in basis points of the last mid. Overrides the config
    /// file; default 100.
    #[arg(long, value_name = "BPS")]
    pub spike_bps: Option<u32>,

    /// Ticks of history kept per symbol for HistoryRequest.
    #[arg(long, default_value_t = crate::engine::history::HISTORY_DEPTH_DEFAULT, value_name = "TICKS")]
    pub history_depth: usize,

    /// Interval of the one-line status report, in milliseconds.
    #[arg(long, default_value_t = 2_000, value_name = "MS")]
    pub report_interval_ms: u64,

    /// Stop after this many seconds (0 = run until signalled). The stop follows
    /// the same graceful shutdown as SIGTERM.
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub duration_s: u64,

    /// Record every inbound tick into capture segments in this directory.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,

    /// Recorder ring capacity in ticks (64 bytes each). It sets how long a
    /// stall of the recorder thread is absorbed before ticks are lost
    /// (counted).
    #[arg(long, default_value_t = 1 << 20, value_name = "TICKS")]
    pub record_ring: usize,

    /// Longest a recorded tick waits in the write buffer, in ms (1..=10000).
    /// Then it is handed to the kernel: what a kill of the process can lose at
    /// most, plus one batch.
    #[arg(long, default_value_t = crate::capture::recorder::FLUSH_INTERVAL_MS_DEFAULT, value_name = "MS")]
    pub record_flush_ms: u64,

    /// Wait for the disk (fdatasync) at every flush of the capture. A power
    /// loss then loses no more than a kill. Costs a disk write per flush.
    #[arg(long)]
    pub record_fsync: bool,

    /// Capture segment size before rolling, in MiB.
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    pub record_segment_mib: u64,

    /// Request worker threads (snapshot, symbol list, history).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub request_workers: usize,

    /// Request queue capacity, in requests. The queue is bounded; the busiest
    /// account is evicted first when it is full.
    #[arg(long, default_value_t = crate::requests::queue::QUEUE_CAPACITY_DEFAULT, value_name = "N")]
    pub queue_capacity: usize,

    /// CoDel target queueing delay, in ms. The queue is overloaded while the
    /// minimum queueing delay over an interval exceeds this.
    #[arg(long, default_value_t = 5, value_name = "MS")]
    pub queue_target_ms: u64,

    /// CoDel interval, in milliseconds.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    pub queue_interval_ms: u64,

    /// Lower end of the retryAfterMs window of shed requests, in ms.
    #[arg(long, default_value_t = 2_000, value_name = "MS")]
    pub shed_retry_min_ms: u32,

    /// Upper end of the retryAfterMs window of shed requests, in ms.
    #[arg(long, default_value_t = 5_000, value_name = "MS")]
    pub shed_retry_max_ms: u32,

    /// Requests per second per account (fairness). Range 1..=1000000; 0 is
    /// refused (the account could never send a request).
    #[arg(long, default_value_t = crate::requests::queue::ACCOUNT_RATE_PER_S_DEFAULT, value_name = "PER_S")]
    pub account_request_rate_per_s: u32,

    /// Request burst per account.
    #[arg(long, default_value_t = crate::requests::queue::ACCOUNT_BURST_DEFAULT, value_name = "N")]
    pub account_request_burst: u32,

    /// Read accounts, tokens and entitlements from Redis at this URL. The URL
    /// is redis://HOST:PORT[/DB]; the config file stays the fallback. A
    /// password in the URL (`redis://:PASSWORD@host`) is on the command line,
    /// where `ps` shows it (a warning says so): prefer --redis-password-file or
    /// PRICEWIRE_REDIS_PASSWORD.
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,

    /// File whose first line is the Redis `AUTH` password (chmod 600). Used for
    /// a --redis URL without a password. Without it: PRICEWIRE_REDIS_PASSWORD,
    /// if set.
    #[arg(long, value_name = "PATH", requires = "redis")]
    pub redis_password_file: Option<PathBuf>,

    /// Accept-queue length of every listening socket. The sockets are the
    /// subscriber, provider ingest and ops listeners; 1..=1048576. The kernel
    /// caps it at `net.core.somaxconn`; start-up logs when it does.
    #[arg(long, default_value_t = crate::runtime::listen::BACKLOG_DEFAULT, value_name = "N")]
    pub listen_backlog: u32,

    /// Subscriber gateway and provider ingest flags.
    #[command(flatten)]
    pub gateway: GatewayArgs,

    /// NATS bus flags (`--role`, `--bus`, ...).
    #[command(flatten)]
    pub bus: crate::cli::bus_args::BusArgs,

    /// Ops listener, shutdown and stagger flags.
    #[command(flatten)]
    pub ops: OpsArgs,
}

impl ServeArgs {
    /// `--role` and the bus flags, checked against the other flags.
    pub fn bus_role(&self) -> Result<Option<crate::bus::BusRole>, ArgsError> {
        self.bus.bus_role(&crate::cli::bus_args::RoleFacts {
            listens: !self.gateway.no_listen,
            feed_listen: self.gateway.feed_listen.is_some(),
        })
    }

    /// The request path's settings, validated.
    pub fn request_config(&self) -> Result<RequestConfig, ArgsError> {
        let queue = QueueConfig {
            capacity: self.queue_capacity,
            target_ns: self.queue_target_ms * NS_PER_MS,
            interval_ns: self.queue_interval_ms * NS_PER_MS,
            retry_after: RetryWindow::new(self.shed_retry_min_ms, self.shed_retry_max_ms),
            account_rate_per_s: self.account_request_rate_per_s,
            account_burst: self.account_request_burst,
            ..QueueConfig::default()
        };
        queue.validate().map_err(ArgsError::invalid)?;
        if self.request_workers == 0 || self.request_workers > 64 {
            return Err(ArgsError::flag("--request-workers", "1..=64"));
        }
        Ok(RequestConfig {
            workers: self.request_workers,
            queue,
            wait: self.shard_wait(),
            ..RequestConfig::default()
        })
    }

    /// `--shards`, or its default for the threading.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.unwrap_or_else(|| match self.threading {
            Threading::Shared => crate::runtime::affinity::available_cores()
                .len()
                .clamp(1, 8),
            Threading::Dedicated => 1,
        })
    }

    /// The gateway's settings, or `None` with `--no-listen`.
    pub fn gateway_config(&self) -> Result<Option<crate::gateway::GatewayConfig>, ArgsError> {
        let mut g = self
            .gateway
            .gateway_config(self.shard_wait(), &self.placement())?;
        if let Some(g) = g.as_mut() {
            g.shard0_fill = self.shard0_fill.unwrap_or(match self.threading {
                Threading::Shared => SHARD0_FILL_SHARED,
                Threading::Dedicated => 0,
            });
            let pct = self.shard0_spill_pct.unwrap_or(match self.threading {
                Threading::Shared => SHARD0_SPILL_PCT_SHARED,
                Threading::Dedicated => 0,
            });
            if pct > 100 {
                return Err(ArgsError::flag("--shard0-spill-pct", "0..=100"));
            }
            g.shard0_spill_permille = pct * 10;
        }
        Ok(g)
    }

    /// `--shard-wait`, or its default for the threading (`park` at
    /// real-time priority).
    pub fn shard_wait(&self) -> WaitStrategy {
        self.shard_wait.unwrap_or(match self.threading {
            Threading::Dedicated if self.rt_priority.is_none() => WaitStrategy::SpinPark,
            _ => WaitStrategy::Park,
        })
    }

    /// `--feed-wait`, or its default (`park` at real-time priority).
    pub fn feed_wait(&self) -> WaitStrategy {
        self.feed_wait.unwrap_or_else(|| self.stage_wait_default())
    }

    /// `--engine-wait`, or its default (`park` at real-time priority).
    pub fn engine_wait(&self) -> WaitStrategy {
        self.engine_wait
            .unwrap_or_else(|| self.stage_wait_default())
    }

    fn stage_wait_default(&self) -> WaitStrategy {
        if self.rt_priority.is_some() {
            WaitStrategy::Park
        } else {
            WaitStrategy::SpinPark
        }
    }

    /// `--cpus` and `--rt-priority`: where and how the stage threads run.
    pub(super) fn placement(&self) -> CpuMap {
        self.cpus.clone().with_rt_priority(self.rt_priority)
    }

    /// Refuses a real-time priority with a wait strategy that spins: a
    /// `SCHED_FIFO` thread that spins keeps every normal thread off its
    /// core (the kernel's real-time throttling leaves them 5 %), and a
    /// yield at real-time priority gives the core to no normal thread. That
    /// includes `spin-park`, whose spin and yield phases never end while
    /// input arrives faster than they last (a 100k ticks/s synthetic feed
    /// kept a core 98 % busy at real-time priority). Real-time stages park.
    pub(super) fn check_rt_waits(&self) -> Result<(), ArgsError> {
        let Some(p) = self.rt_priority else {
            return Ok(());
        };
        let mut waits = vec![
            ("--feed-wait", self.feed_wait()),
            ("--shard-wait", self.shard_wait()),
        ];
        if self.threading == Threading::Dedicated {
            waits.push(("--engine-wait", self.engine_wait()));
        }
        for (flag, w) in waits {
            if w != WaitStrategy::Park {
                let w = clap::ValueEnum::to_possible_value(&w)
                    .map(|v| v.get_name().to_owned())
                    .unwrap_or_default();
                return Err(ArgsError::value(
                    "--rt-priority",
                    format!("{p} with {flag} {w}"),
                    "a real-time thread that spins or yields starves every normal thread on \
                     its core; use park (the default at real-time priority)",
                ));
            }
        }
        Ok(())
    }

    pub(super) fn pipeline_config(&self) -> PipelineConfig {
        PipelineConfig {
            feed_ring: self.feed_ring,
            shard_ring: self.shard_ring,
            shards: self.shard_count(),
            feed_wait: self.feed_wait(),
            engine_wait: self.engine_wait(),
            cpus: self.placement(),
            feed_full_wait_us: self.feed_full_wait_us,
            history_depth: self.history_depth,
            threading: self.threading,
        }
    }

    /// Ranges clap's types do not express: rates (what 0 means, or its
    /// refusal) and absurd sizes.
    pub(super) fn check_numbers(&self) -> Result<(), ArgsError> {
        use super::super::gateway_args::check_rate;
        if self.synthetic_rate > SYNTHETIC_RATE_MAX {
            return Err(ArgsError::value(
                "--synthetic-rate",
                self.synthetic_rate,
                format!(
                    "at most {SYNTHETIC_RATE_MAX} ticks per second \
                     (0 = as fast as the pipeline takes them)"
                ),
            ));
        }
        check_rate(
            "--account-request-rate-per-s",
            u64::from(self.account_request_rate_per_s),
            1_000_000,
        )?;
        let max = crate::runtime::listen::BACKLOG_MAX;
        if self.listen_backlog == 0 || self.listen_backlog > max {
            return Err(ArgsError::value(
                "--listen-backlog",
                self.listen_backlog,
                format!("must be 1..={max}"),
            ));
        }
        Ok(())
    }

    /// Loads the config file (or the built-in default) and applies the
    /// flags that override it.
    pub fn load_config(&self) -> Result<Config, ArgsError> {
        // Stored hashes are checked against the cost window as they load.
        crate::auth::hash::set_cost_window(self.gateway.auth.cost_window()?);
        // An edge runs no feed: it reads none of the providers' secrets
        // (and resolves none of their host names, `start_service`).
        let secrets = match self.bus.role {
            crate::bus::Role::Edge => crate::config::fix::FeedSecrets::Skip,
            _ => crate::config::fix::FeedSecrets::Read,
        };
        let mut config = match &self.config {
            Some(p) => Config::load_with(p, self.providers, secrets),
            None => crate::config::ConfigFile::default().resolve(self.providers),
        }
        .map_err(ArgsError::invalid)?;
        if let Some(ms) = self.max_quote_age_ms {
            if ms == 0 {
                return Err(ArgsError::flag("--max-quote-age-ms", "must be at least 1"));
            }
            config.engine.max_quote_age_ms = ms;
            for session in &mut config.fix {
                session.gray.max_quote_age_ms = ms;
            }
        }
        if let Some(bps) = self.spike_bps {
            if bps == 0 || bps > 10_000 {
                return Err(ArgsError::flag("--spike-bps", "must be 1..=10000"));
            }
            config.engine.spike_bps = bps;
        }
        self.check_numbers()?;
        if self.report_interval_ms == 0 {
            return Err(ArgsError::flag(
                "--report-interval-ms",
                "must be at least 1",
            ));
        }
        self.check_exposure(&config)?;
        Ok(config)
    }

    /// Clear tokens (`insecure_plain_tokens`) are for loopback demos: a
    /// subscriber or ingest listener on any other address is refused. The
    /// demo account with the token `demo` (built in when there are no
    /// `[[accounts]]`) on such an address is allowed for trials but logged
    /// as a warning.
    fn check_exposure(&self, config: &Config) -> Result<(), ArgsError> {
        let listeners = [
            (
                "--listen",
                (!self.gateway.no_listen).then_some(self.gateway.listen),
            ),
            ("--feed-listen", self.gateway.feed_listen),
        ];
        for (flag, addr) in listeners {
            let Some(addr) = addr.filter(|a| !a.ip().is_loopback()) else {
                continue;
            };
            if config.insecure_plain_tokens {
                return Err(ArgsError::value(
                    flag,
                    addr,
                    "insecure_plain_tokens (clear tokens in the config) is for loopback \
                     listeners only; store hashes (pricewire token hash) instead",
                ));
            }
            // One argon2 verification at start, only for a non-loopback listener.
            let demo = |a: &crate::config::Account| {
                a.name == "demo" && crate::auth::hash::verify(&a.token, b"demo")
            };
            if flag == "--listen" && config.accounts.iter().any(demo) {
                tracing::warn!(
                    %addr,
                    "the demo account (token demo) can log on from the network: configure \
                     [[accounts]] with hashed tokens (docs/security.md)"
                );
            }
        }
        Ok(())
    }
}

/// Largest `--synthetic-rate`: well above what one feed thread produces.
pub(crate) const SYNTHETIC_RATE_MAX: u64 = 50_000_000;

/// `--shard0-fill` with shared threading: a shard-0 turn that writes to 16
/// sessions costs tens of µs; past that, spreading over cores pays more
/// than the cross-thread wake-up (~7 µs here; docs/design.md).
const SHARD0_FILL_SHARED: u64 = 16;

/// `--shard0-spill-pct` with shared threading: see `gateway::spill` and
/// BENCHMARKS.md (run 27).
const SHARD0_SPILL_PCT_SHARED: u32 = 50;

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn args(flags: &[&str]) -> ServeArgs {
        let argv = std::iter::once("serve").chain(flags.iter().copied());
        Cli::try_parse_from(argv).unwrap().serve
    }

    /// A value out of range is refused as `Value`, carrying the flag and
    /// the value as given, and printed as `{flag} {value}: {why}`.
    #[test]
    fn out_of_range_values_carry_their_flag_and_value() {
        let too_fast = (SYNTHETIC_RATE_MAX + 1).to_string();
        let cases: [(&str, &str); 5] = [
            ("--listen-backlog", "0"),
            ("--synthetic-rate", &too_fast),
            ("--account-request-rate-per-s", "0"),
            ("--msg-rate-per-s", "0"),
            ("--tls-busy-handshakes-per-s", "1025"),
        ];
        for (flag, bad) in cases {
            let a = args(&[flag, bad]);
            let err = a
                .check_numbers()
                .and_then(|()| a.gateway_config().map(drop))
                .unwrap_err();
            let text = err.to_string();
            let ArgsError::Value { flag: f, value, .. } = err else {
                panic!("{flag} {bad}: {text}")
            };
            assert_eq!((f.as_str(), value.as_str()), (flag, bad));
            assert!(text.starts_with(&format!("{flag} {bad}: ")), "{text}");
        }
    }

    #[test]
    fn a_busy_shard0_spills_by_default_only_when_it_runs_the_engine() {
        let g = |flags: &[&str]| args(flags).gateway_config().map(|g| g.unwrap());
        let shared = g(&[]).unwrap();
        assert_eq!(
            (shared.shard0_fill, shared.shard0_spill_permille),
            (16, 500)
        );
        let dedicated = g(&["--threading", "dedicated"]).unwrap();
        assert_eq!(
            (dedicated.shard0_fill, dedicated.shard0_spill_permille),
            (0, 0)
        );
        let off = g(&["--shard0-spill-pct", "0"]).unwrap();
        assert_eq!(off.shard0_spill_permille, 0);
        let err = g(&["--shard0-spill-pct", "101"]).unwrap_err().to_string();
        assert!(err.contains("--shard0-spill-pct"), "{err}");
    }

    #[test]
    fn the_drain_marks_are_flags_with_the_documented_defaults() {
        let g = |flags: &[&str]| args(flags).gateway_config().map(|g| g.unwrap());
        let d = g(&[]).unwrap();
        let marks = |g: &crate::gateway::GatewayConfig| {
            (
                g.drain_busy_permille,
                g.drain_request_share_permille,
                g.drain_min_requests,
                g.drain_abort_ms,
            )
        };
        assert_eq!(marks(&d), (200, 250, 32, 500));
        let set = g(&[
            "--shard0-drain-busy-pct",
            "35",
            "--shard0-drain-request-share-pct",
            "60",
            "--shard0-drain-min-requests",
            "100",
            "--shard0-drain-abort-ms",
            "250",
        ])
        .unwrap();
        assert_eq!(marks(&set), (350, 600, 100, 250));
        for (flag, bad) in [
            ("--shard0-drain-busy-pct", "0"),
            ("--shard0-drain-busy-pct", "101"),
            ("--shard0-drain-request-share-pct", "0"),
            ("--shard0-drain-request-share-pct", "4294967295"),
            ("--shard0-drain-min-requests", "0"),
            ("--shard0-drain-min-requests", "100001"),
            ("--shard0-drain-abort-ms", "0"),
            ("--shard0-drain-abort-ms", "5001"),
        ] {
            let err = g(&[flag, bad]).unwrap_err().to_string();
            assert!(err.contains(flag), "{flag} {bad}: {err}");
        }
    }

    #[test]
    fn the_tls_refusal_budget_is_a_flag_with_its_default() {
        let g = |flags: &[&str]| args(flags).gateway_config().map(|g| g.unwrap());
        let budget = |flags: &[&str]| g(flags).unwrap().tls_busy_handshakes_per_s;
        assert_eq!(budget(&[]), 32);
        assert_eq!(budget(&["--tls-busy-handshakes-per-s", "0"]), 0);
        assert_eq!(budget(&["--tls-busy-handshakes-per-s", "1024"]), 1024);
        let err = g(&["--tls-busy-handshakes-per-s", "1025"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--tls-busy-handshakes-per-s"), "{err}");
    }

    #[test]
    fn real_time_stages_park_by_default() {
        let normal = args(&["--threading", "dedicated"]);
        assert_eq!(normal.feed_wait(), WaitStrategy::SpinPark);
        assert_eq!(normal.engine_wait(), WaitStrategy::SpinPark);
        assert_eq!(normal.shard_wait(), WaitStrategy::SpinPark);
        assert!(normal.check_rt_waits().is_ok());
        let rt = args(&["--threading", "dedicated", "--rt-priority", "10"]);
        assert_eq!(rt.feed_wait(), WaitStrategy::Park);
        assert_eq!(rt.engine_wait(), WaitStrategy::Park);
        assert_eq!(rt.shard_wait(), WaitStrategy::Park);
        assert!(rt.check_rt_waits().is_ok());
        assert_eq!(rt.placement().rt_priority(), Some(10));
        // An explicit wait still wins, and is refused unless it parks.
        let spin_park = args(&[
            "--rt-priority",
            "10",
            "--threading",
            "dedicated",
            "--engine-wait",
            "spin-park",
        ]);
        let err = spin_park.check_rt_waits().unwrap_err().to_string();
        assert!(err.contains("--engine-wait spin-park"), "{err}");
        let parked = args(&["--rt-priority", "10", "--feed-wait", "park"]);
        assert!(parked.check_rt_waits().is_ok());
    }
}
