//! One drill's world: a NATS cluster, price cores each fed by its own
//! provider ([`crate::feeder`]), edges each watched by a recorder
//! ([`crate::recorder`]), and the failures the scenario causes, stamped on
//! one clock. Every process is the real `pricewire` (or `nats-server`)
//! binary on free loopback ports, with the shipped defaults for leases,
//! heartbeats and max ages; every wait is a condition with a bound.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use pricewire_bench::procs::{http_status, Proc};

use crate::check::{self, Bounds, Failure, Findings, Terminal};
use crate::feeder::{self, Feeder};
use crate::nats::{fresh_addr, Cluster};
use crate::recorder::Recorder;

/// The drill's symbols and the mids their walks start at.
pub const SYMBOLS: [(&str, i64); 5] = [
    ("EURUSD", 108_000),
    ("GBPUSD", 126_000),
    ("USDJPY", 150_000),
    ("XAUUSD", 200_000),
    ("BTCUSD", 6_000_000),
];
/// Quotes per second each core's provider sends, over all symbols.
pub const FEED_RATE: u64 = 200;
/// The subject prefix of the drill's bus.
pub const PREFIX: &str = "drill";
/// Longest wait for a process to start, a leader to emerge, a condition.
pub const WAIT: Duration = Duration::from_secs(60);

/// What every lab is run with.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// The `pricewire` binary.
    pub pricewire_bin: PathBuf,
    /// The `nats-server` binary.
    pub nats_bin: String,
    /// Where every process's stderr goes.
    pub logs: PathBuf,
    /// The short form: shorter waits, no timed verdicts.
    pub short: bool,
    /// A bus without authorization; by default it runs with the shipped
    /// manifests' per-role permissions ([`crate::access`]).
    pub plain: bool,
}

/// A price core and its provider.
pub struct Core {
    /// `core-0`, `core-1`, …
    pub name: String,
    proc: Option<Proc>,
    /// Its ops listener (/metrics, /readyz).
    pub ops: SocketAddr,
    feed: SocketAddr,
    feeder: Option<Feeder>,
}

/// A standalone server or an edge, and where terminals reach it.
pub struct Server {
    /// `edge-0`, `standalone`, …
    pub name: String,
    proc: Option<Proc>,
    /// Its subscriber listener.
    pub listen: SocketAddr,
    /// Its ops listener.
    pub ops: SocketAddr,
    args: Vec<String>,
    /// The provider of a standalone server.
    feeder: Option<Feeder>,
}

/// See the module doc.
pub struct Lab {
    cfg: LabConfig,
    /// Zero of every timestamp.
    pub epoch: Instant,
    /// The cluster, if the scenario uses the bus.
    pub cluster: Option<Cluster>,
    /// Price cores, in start order.
    pub cores: Vec<Core>,
    /// Edges (or a standalone server), in start order.
    pub servers: Vec<Server>,
    /// One recorder per terminal.
    pub recorders: Vec<Recorder>,
    /// Terminals whose edge was killed, and when.
    gone: Vec<(String, u64)>,
    /// The failures caused, for the checker.
    pub failures: Vec<Failure>,
    /// Checks of the scenario's own, by name.
    pub extra: Vec<(String, check::Verdict)>,
    /// What happened, one line per step.
    pub timeline: Vec<String>,
    config: tempfile::NamedTempFile,
    symbol_ids: Vec<u16>,
}

const CONFIG: &str = r#"
# Clear tokens: a loopback drill (docs/security.md).
insecure_plain_tokens = true
[[providers]]
name = "drill"
kind = "ingest"
token = "drill-feed"
"#;

impl Lab {
    /// A lab, with a 3-node cluster if `bus`.
    pub fn new(cfg: LabConfig, bus: bool) -> anyhow::Result<Lab> {
        use std::io::Write;
        let _ = (feeder::PROVIDER, feeder::TOKEN);
        let mut config = tempfile::NamedTempFile::new().context("config file")?;
        config.write_all(CONFIG.as_bytes())?;
        let table = pricewire::config::Config::builtin(3).table;
        let symbol_ids = SYMBOLS
            .iter()
            .map(|(s, _)| table.by_name(s).map(|i| i.id).context("a drill symbol"))
            .collect::<anyhow::Result<_>>()?;
        std::fs::create_dir_all(&cfg.logs)?;
        let cluster = match bus {
            true => {
                let secured = (!cfg.plain).then_some(PREFIX);
                Some(Cluster::start(&cfg.nats_bin, &cfg.logs, secured)?)
            }
            false => None,
        };
        Ok(Lab {
            cfg,
            epoch: Instant::now(),
            cluster,
            cores: Vec::new(),
            servers: Vec::new(),
            recorders: Vec::new(),
            gone: Vec::new(),
            failures: Vec::new(),
            extra: Vec::new(),
            timeline: Vec::new(),
            config,
            symbol_ids,
        })
    }

    /// The short form.
    pub fn short(&self) -> bool {
        self.cfg.short
    }

    /// Nanoseconds since the lab started.
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Notes a step in the timeline.
    pub fn note(&mut self, what: impl Into<String>) {
        let line = format!("{:>8.1} s  {}", self.now_ns() as f64 / 1e9, what.into());
        self.timeline.push(line);
    }

    /// Records a failure caused now.
    pub fn failure(&mut self, what: &str, source_lost: bool, recovers: bool, takeover: bool) {
        self.note(what);
        self.failures.push(Failure {
            at_ns: self.now_ns(),
            what: what.into(),
            source_lost,
            recovers,
            takeover,
        });
    }

    /// Records a scenario check.
    pub fn expect(&mut self, what: &str, held: bool, detail: String) {
        let v = match held {
            true => check::Verdict::Held,
            false => check::Verdict::Broken {
                first: detail,
                count: 1,
            },
        };
        self.extra.push((what.to_string(), v));
    }

    fn urls(&self, k: usize) -> anyhow::Result<String> {
        Ok(self.cluster.as_ref().context("no cluster")?.urls(k))
    }

    fn serve(&self, name: &str, args: &[String], ops: SocketAddr) -> anyhow::Result<Proc> {
        let mut cmd = Command::new(&self.cfg.pricewire_bin);
        cmd.arg("serve")
            .args(args)
            .args(["--ops-listen", &ops.to_string()])
            .env(
                "RUST_LOG",
                std::env::var("DRILL_SERVE_LOG").unwrap_or_else(|_| "info".into()),
            );
        let mut p = Proc::spawn(name, cmd, &self.cfg.logs)?;
        p.await_ready(|| http_status(ops, "/readyz") == Some(200))?;
        Ok(p)
    }

    fn access(&self) -> Option<&crate::access::Access> {
        self.cluster.as_ref().and_then(|c| c.access())
    }

    fn feed_symbols(&self) -> Vec<(u16, i64)> {
        self.symbol_ids
            .iter()
            .zip(SYMBOLS)
            .map(|(&id, (_, mid))| (id, mid))
            .collect()
    }

    /// Starts a core (its provider quoting at once); returns its index.
    pub fn start_core(&mut self) -> anyhow::Result<usize> {
        let k = self.cores.len();
        let (ops, feed) = (fresh_addr()?, fresh_addr()?);
        let name = format!("core-{k}");
        let path = self.config.path().display().to_string();
        let mut args: Vec<String> = [
            "--role",
            "core",
            "--threading",
            "dedicated",
            "--bus",
            &self.urls(k)?,
            "--bus-prefix",
            PREFIX,
            "--bus-replicas",
            "3",
            "--no-synthetic",
            "--feed-listen",
            &feed.to_string(),
            "--config",
            &path,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(self.access().map(|a| a.core_args()).unwrap_or_default());
        let proc = self.serve(&name, &args, ops)?;
        let feeder = Feeder::start(feed, self.feed_symbols(), FEED_RATE, k as u64 + 1);
        self.note(format!("{name} started"));
        self.cores.push(Core {
            name,
            proc: Some(proc),
            ops,
            feed,
            feeder: Some(feeder),
        });
        Ok(k)
    }

    /// Starts an edge and a recorder on it; returns the edge's index.
    pub fn start_edge(&mut self) -> anyhow::Result<usize> {
        let k = self.servers.len();
        let (ops, listen) = (fresh_addr()?, fresh_addr()?);
        let name = format!("edge-{k}");
        let path = self.config.path().display().to_string();
        let mut args: Vec<String> = [
            "--role",
            "edge",
            "--bus",
            &self.urls(k + 1)?,
            "--bus-prefix",
            PREFIX,
            "--bus-replicas",
            "3",
            "--listen",
            &listen.to_string(),
            "--config",
            &path,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(self.access().map(|a| a.edge_args()).unwrap_or_default());
        self.start_server(name, args, ops, listen, None)
    }

    /// Starts a standalone server fed by a provider, and a recorder.
    pub fn start_standalone(&mut self) -> anyhow::Result<usize> {
        let (ops, listen, feed) = (fresh_addr()?, fresh_addr()?, fresh_addr()?);
        let path = self.config.path().display().to_string();
        let args: Vec<String> = [
            "--listen",
            &listen.to_string(),
            "--no-synthetic",
            "--feed-listen",
            &feed.to_string(),
            "--config",
            &path,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let feeder = Feeder::start(feed, self.feed_symbols(), FEED_RATE, 99);
        self.start_server("standalone".into(), args, ops, listen, Some(feeder))
    }

    fn start_server(
        &mut self,
        name: String,
        args: Vec<String>,
        ops: SocketAddr,
        listen: SocketAddr,
        feeder: Option<Feeder>,
    ) -> anyhow::Result<usize> {
        let proc = self.serve(&name, &args, ops)?;
        self.note(format!("{name} started"));
        let rec = Recorder::start(&name, &[listen], &self.symbol_ids, self.epoch);
        self.recorders.push(rec);
        self.servers.push(Server {
            name,
            proc: Some(proc),
            listen,
            ops,
            args,
            feeder,
        });
        Ok(self.servers.len() - 1)
    }

    /// Kills server `k` (SIGKILL) and starts it again on the same ports.
    pub fn restart_server(&mut self, k: usize) -> anyhow::Result<()> {
        self.kill_server(k, false);
        let (name, args, ops) = {
            let s = &self.servers[k];
            (s.name.clone(), s.args.clone(), s.ops)
        };
        let proc = self.serve(&name, &args, ops)?;
        self.servers[k].proc = Some(proc);
        self.note(format!("{name} started again"));
        Ok(())
    }

    /// A terminal that fails over between servers `ks` (in that order).
    pub fn start_terminal(&mut self, name: &str, ks: &[usize]) {
        let addrs: Vec<SocketAddr> = ks.iter().map(|&k| self.servers[k].listen).collect();
        let rec = Recorder::start(name, &addrs, &self.symbol_ids, self.epoch);
        self.recorders.push(rec);
    }

    /// SIGKILL of server `k`; with `gone`, its own recorder counts as gone.
    pub fn kill_server(&mut self, k: usize, gone: bool) {
        if let Some(mut p) = self.servers[k].proc.take() {
            p.signal(libc::SIGKILL);
        }
        if gone {
            let name = self.servers[k].name.clone();
            self.gone.push((name, self.now_ns()));
        }
    }

    /// SIGKILL of core `i` (its provider stops too).
    pub fn kill_core(&mut self, i: usize) {
        if let Some(mut p) = self.cores[i].proc.take() {
            p.signal(libc::SIGKILL);
        }
        self.cores[i].feeder = None;
    }

    /// Sends `signal` to core `i` (SIGSTOP, SIGCONT).
    pub fn signal_core(&mut self, i: usize, signal: libc::c_int) {
        if let Some(p) = self.cores[i].proc.as_mut() {
            p.signal(signal);
        }
    }

    /// Cuts core `i`'s provider: its engine's prices go stale.
    pub fn cut_feed(&mut self, i: usize) {
        if let Some(mut f) = self.cores[i].feeder.take() {
            f.cut();
        }
    }

    /// A counter or gauge of core `i` (`family{labels}` as text), 0 if
    /// missing or the core does not answer.
    pub fn core_metric(&self, i: usize, series: &str) -> f64 {
        metric(self.cores[i].ops, series)
    }

    /// The core that leads now, if exactly one does.
    pub fn leader(&self) -> Option<usize> {
        let leaders: Vec<usize> = (0..self.cores.len())
            .filter(|&i| self.cores[i].proc.is_some())
            .filter(|&i| self.core_metric(i, "pricewire_bus_leader") == 1.0)
            .collect();
        (leaders.len() == 1).then(|| leaders[0])
    }

    /// Waits until `cond` holds (bounded by [`WAIT`]); fails naming `what`.
    pub fn wait_for(
        &mut self,
        what: &str,
        mut cond: impl FnMut(&Lab) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + WAIT;
        while !cond(self) {
            if Instant::now() > deadline {
                bail!("{what}: not within {WAIT:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.note(what);
        Ok(())
    }

    /// Waits for a leader; returns the one the wait saw (scraping again
    /// could miss it: a core's scrape that times out on a loaded host
    /// reads as no leader).
    pub fn await_leader(&mut self, what: &str) -> anyhow::Result<usize> {
        let mut seen = None;
        self.wait_for(what, |l| {
            seen = l.leader();
            seen.is_some()
        })?;
        seen.context("no leader")
    }

    /// Watches for `secs` seconds (halved in the short form): the time a
    /// scenario lets the bus settle or a failure last.
    pub fn watch(&mut self, secs: u64) {
        let secs = if self.cfg.short {
            secs.div_ceil(2)
        } else {
            secs
        };
        std::thread::sleep(Duration::from_secs(secs));
    }

    /// Every recorder has prices of every symbol.
    pub fn terminals_priced(&self) -> bool {
        self.recorders.iter().all(|r| {
            let (records, _) = r.snapshot();
            self.symbol_ids
                .iter()
                .all(|s| records.iter().any(|x| x.symbol == *s))
        })
    }

    /// The tapes so far.
    pub fn terminals(&self) -> Vec<Terminal> {
        self.recorders
            .iter()
            .map(|r| {
                let (records, sessions) = r.snapshot();
                let gone_ns = self.gone.iter().find(|(n, _)| *n == r.name).map(|g| g.1);
                Terminal {
                    name: r.name.clone(),
                    records,
                    sessions,
                    gone_ns,
                }
            })
            .collect()
    }

    /// Every live process's bus and engine counters, into the log folder
    /// (`<name>.metrics`), for reading a broken verdict.
    fn dump_metrics(&self) {
        let ops = self
            .cores
            .iter()
            .filter(|c| c.proc.is_some())
            .map(|c| (&c.name, c.ops));
        let servers = self
            .servers
            .iter()
            .filter(|s| s.proc.is_some())
            .map(|s| (&s.name, s.ops));
        for (name, ops) in ops.chain(servers) {
            let text = metrics_text(ops);
            let keep: String = text
                .lines()
                .filter(|l| l.starts_with("pricewire_bus") || l.starts_with("pricewire_engine"))
                .map(|l| format!("{l}\n"))
                .collect();
            let _ = std::fs::write(self.cfg.logs.join(format!("{name}.metrics")), keep);
        }
    }

    /// Stops the terminals and checks the invariants over their tapes.
    pub fn finish(&mut self, bounds: Bounds) -> Findings {
        self.dump_metrics();
        for r in &mut self.recorders {
            r.stop();
        }
        let end = self.now_ns();
        let bounds = if self.cfg.short {
            Bounds::default()
        } else {
            bounds
        };
        check::check(&self.terminals(), &self.failures, bounds, end)
    }

    /// The feed address of core `i` (for a drill that feeds it itself).
    pub fn core_feed(&self, i: usize) -> SocketAddr {
        self.cores[i].feed
    }

    /// The symbol ids of the drill.
    pub fn symbol_ids(&self) -> &[u16] {
        &self.symbol_ids
    }

    /// The name of server `k`.
    pub fn server_name(&self, k: usize) -> &str {
        &self.servers[k].name
    }

    /// Stops server `k`'s provider, if it has one.
    pub fn cut_server_feed(&mut self, k: usize) {
        self.servers[k].feeder = None;
    }
}

/// The `/metrics` text at `ops` (empty if it does not answer).
pub fn metrics_text(ops: SocketAddr) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&ops, Duration::from_secs(1)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

/// One series of `/metrics` at `ops` (`pricewire_bus_leader`, or
/// `pricewire_bus_messages_total{event="published"}`), 0 if missing.
pub fn metric(ops: SocketAddr, series: &str) -> f64 {
    let text = metrics_text(ops);
    let want = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&want))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}
