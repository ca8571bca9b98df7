//! A real 3-node `nats-server` cluster with JetStream on loopback, whose
//! nodes a drill kills and restores (same ports, same store), and a
//! minimal NATS request client for the JetStream API calls a drill makes
//! itself: which node leads a stream, and deleting a stream (the lease
//! bucket). The drill does not use pricewire's own NATS client: the
//! system under test is not its own witness.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use pricewire_bench::procs::{free_addr, http_status, Proc};

/// A free loopback port this drill has not handed out before: the kernel
/// may give a port just released by `free_addr` again, and two nodes (or
/// processes) given one port lose one of them at start.
pub fn fresh_addr() -> anyhow::Result<SocketAddr> {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1_000 {
        let addr = free_addr()?;
        if !given.contains(&addr.port()) {
            given.push(addr.port());
            return Ok(addr);
        }
    }
    bail!("no loopback port not handed out before")
}

use crate::access::{connect_options, Access};

/// Nodes in the cluster.
pub const NODES: usize = 3;
/// Longest wait for the cluster (or a restored node) to report healthy.
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(60);

/// One node's ports and store.
struct Node {
    client: SocketAddr,
    monitor: SocketAddr,
    cluster: SocketAddr,
    store: PathBuf,
    proc: Option<Proc>,
}

/// A running cluster; nodes are stopped when it drops.
pub struct Cluster {
    bin: String,
    nodes: Vec<Node>,
    logs: PathBuf,
    access: Option<Access>,
    _stores: tempfile::TempDir,
}

impl Cluster {
    /// Starts three routed nodes with JetStream and waits until every one
    /// answers `/healthz` (a JetStream meta leader exists). With
    /// `secured`, the subject prefix, they run with the shipped
    /// authorization ([`Access`]).
    pub fn start(bin: &str, logs: &Path, secured: Option<&str>) -> anyhow::Result<Cluster> {
        let stores = tempfile::tempdir().context("JetStream store folders")?;
        let access = secured
            .map(|prefix| Access::write(stores.path(), prefix))
            .transpose()?;
        let mut nodes = Vec::with_capacity(NODES);
        for i in 0..NODES {
            nodes.push(Node {
                client: fresh_addr()?,
                monitor: fresh_addr()?,
                cluster: fresh_addr()?,
                store: stores.path().join(format!("n{i}")),
                proc: None,
            });
        }
        let mut c = Cluster {
            bin: bin.to_string(),
            nodes,
            logs: logs.to_path_buf(),
            access,
            _stores: stores,
        };
        for i in 0..NODES {
            c.launch(i)?;
        }
        for i in 0..NODES {
            c.await_healthy(i)?;
        }
        Ok(c)
    }

    fn launch(&mut self, i: usize) -> anyhow::Result<()> {
        let routes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("nats://{}", n.cluster))
            .collect();
        let n = &self.nodes[i];
        let mut cmd = Command::new(&self.bin);
        cmd.args(["-a", "127.0.0.1", "-p", &n.client.port().to_string()])
            .args(["-m", &n.monitor.port().to_string()])
            .args(["-n", &node_name(i), "-js", "-sd"])
            .arg(&n.store)
            .args(["--cluster_name", "pw-drill"])
            .args(["--cluster", &format!("nats://{}", n.cluster)])
            .args(["--routes", &routes.join(",")]);
        if let Some(a) = &self.access {
            cmd.arg("-c").arg(&a.server_conf);
        }
        let proc = Proc::spawn(&format!("nats-{}", node_name(i)), cmd, &self.logs)?;
        self.nodes[i].proc = Some(proc);
        Ok(())
    }

    fn await_healthy(&mut self, i: usize) -> anyhow::Result<()> {
        let monitor = self.nodes[i].monitor;
        let deadline = Instant::now() + HEALTHY_TIMEOUT;
        while http_status(monitor, "/healthz") != Some(200) {
            if self.nodes[i].proc.as_mut().is_none_or(|p| p.exited()) {
                bail!("nats node {} exited at start (see its log)", node_name(i));
            }
            if Instant::now() > deadline {
                bail!(
                    "nats node {} not healthy within {HEALTHY_TIMEOUT:?}",
                    node_name(i)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// The cluster's authorization, if it runs secured.
    pub fn access(&self) -> Option<&Access> {
        self.access.as_ref()
    }

    /// `--bus` for pricewire: every node, `nats://127.0.0.1:PORT,…`,
    /// starting with node `first` (a process's preferred node).
    pub fn urls(&self, first: usize) -> String {
        let mut urls: Vec<String> = (0..NODES)
            .map(|k| format!("nats://{}", self.nodes[(first + k) % NODES].client))
            .collect();
        urls.dedup();
        urls.join(",")
    }

    /// Kills node `i` (SIGKILL: a crash).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.nodes[i].proc.take() {
            p.signal(libc::SIGKILL);
        }
    }

    /// Starts node `i` again on its ports and store, and waits for it.
    pub fn restore(&mut self, i: usize) -> anyhow::Result<()> {
        if self.nodes[i].proc.is_none() {
            self.launch(i)?;
        }
        self.await_healthy(i)
    }

    /// The node index of `name` (`n0`, `n1`, `n2`).
    pub fn index_of(name: &str) -> Option<usize> {
        (0..NODES).find(|&i| node_name(i) == name)
    }

    /// A node that is up, to make API calls through.
    fn any_up(&self) -> Option<SocketAddr> {
        self.nodes
            .iter()
            .find(|n| n.proc.is_some())
            .map(|n| n.client)
    }

    /// The node leading `stream` (its JetStream RAFT group), if one does.
    pub fn stream_leader(&self, stream: &str) -> anyhow::Result<Option<usize>> {
        let addr = self.any_up().context("no node up")?;
        let reply = request(addr, &format!("$JS.API.STREAM.INFO.{stream}"), b"")?;
        let v: serde_json::Value = serde_json::from_slice(&reply).context("stream info JSON")?;
        Ok(v["cluster"]["leader"].as_str().and_then(Cluster::index_of))
    }

    /// Creates a stream of `subjects` with `replicas` copies, one message
    /// per subject, entries expiring after `max_age_s` (the lease
    /// bucket's shape), through any node up.
    pub fn create_stream(&self, name: &str, subject: &str, max_age_s: u64) -> anyhow::Result<()> {
        let addr = self.any_up().context("no node up")?;
        let config = serde_json::json!({
            "name": name, "subjects": [subject], "retention": "limits",
            "max_consumers": -1, "max_msgs": -1, "max_bytes": -1,
            "max_age": max_age_s * 1_000_000_000, "max_msgs_per_subject": 1,
            "max_msg_size": -1, "discard": "new", "storage": "file",
            "num_replicas": NODES, "duplicate_window": max_age_s * 1_000_000_000,
            "allow_direct": true,
        });
        let body = serde_json::to_vec(&config)?;
        let deadline = Instant::now() + HEALTHY_TIMEOUT;
        loop {
            let reply = request(addr, &format!("$JS.API.STREAM.CREATE.{name}"), &body);
            let v: serde_json::Value = reply
                .ok()
                .and_then(|r| serde_json::from_slice(&r).ok())
                .unwrap_or_default();
            if v.get("error").is_none() && v.get("config").is_some() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("creating {name}: {v}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// One write to `subject` (a stream's), through the first node up that
    /// answers within `timeout`: true if the stream acknowledged it.
    pub fn write(&self, subject: &str, timeout: Duration) -> bool {
        self.nodes.iter().filter(|n| n.proc.is_some()).any(|n| {
            request_within(n.client, subject, b"x", timeout)
                .ok()
                .and_then(|r| serde_json::from_slice::<serde_json::Value>(&r).ok())
                .is_some_and(|v| v.get("seq").is_some())
        })
    }

    /// Deletes `stream` (every message and its configuration).
    pub fn delete_stream(&self, stream: &str) -> anyhow::Result<()> {
        let addr = self.any_up().context("no node up")?;
        let reply = request(addr, &format!("$JS.API.STREAM.DELETE.{stream}"), b"")?;
        let v: serde_json::Value = serde_json::from_slice(&reply).context("delete JSON")?;
        if v["success"].as_bool() != Some(true) {
            bail!("deleting {stream}: {v}");
        }
        Ok(())
    }
}

/// The name of node `i`.
pub fn node_name(i: usize) -> String {
    format!("n{i}")
}

/// One request over a fresh connection to `addr`: the reply's payload.
/// Bounded by 5 s in all.
pub fn request(addr: SocketAddr, subject: &str, payload: &[u8]) -> anyhow::Result<Vec<u8>> {
    request_within(addr, subject, payload, Duration::from_secs(5))
}

/// [`request`] bounded by `timeout` in all.
pub fn request_within(
    addr: SocketAddr,
    subject: &str,
    payload: &[u8],
    timeout: Duration,
) -> anyhow::Result<Vec<u8>> {
    let sock = TcpStream::connect_timeout(&addr, timeout)?;
    sock.set_read_timeout(Some(timeout))?;
    let mut w = sock.try_clone()?;
    let mut r = BufReader::new(sock);
    let mut line = String::new();
    r.read_line(&mut line)?; // INFO
    let inbox = "_INBOX.pwdrill";
    let mut out = Vec::new();
    out.extend_from_slice(format!("CONNECT {}\r\n", connect_options()).as_bytes());
    out.extend_from_slice(format!("SUB {inbox} 1\r\n").as_bytes());
    out.extend_from_slice(format!("PUB {subject} {inbox} {}\r\n", payload.len()).as_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
    w.write_all(&out)?;
    let deadline = Instant::now() + timeout;
    loop {
        if Instant::now() > deadline {
            bail!("no reply to {subject}");
        }
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("connection closed before the reply to {subject}");
        }
        if line.starts_with("PING") {
            w.write_all(b"PONG\r\n")?;
            continue;
        }
        let Some(rest) = line.strip_prefix("MSG ") else {
            continue;
        };
        let len: usize = rest
            .split_whitespace()
            .last()
            .and_then(|n| n.parse().ok())
            .context("MSG length")?;
        let mut body = vec![0u8; len + 2];
        r.read_exact(&mut body)?;
        body.truncate(len);
        return Ok(body);
    }
}
