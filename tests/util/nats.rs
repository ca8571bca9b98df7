//! Real `nats-server` processes on free loopback ports: one node with
//! JetStream, or a 3-node JetStream cluster.
//!
//! `util::nats` (a stand-alone binary includes it by `#[path]` beside
//! `apt.rs`). Each node gets its
//! own JetStream store in a temporary directory, binds 127.0.0.1 only, and
//! is killed when its handle is dropped. Start-up is awaited on a
//! condition, bounded by [`START_TIMEOUT`]: the node's monitoring endpoint
//! `/healthz` answers 200, which on a cluster means JetStream has a meta
//! leader. When `nats-server` is missing the helper fails at once,
//! naming `tools/test-deps`, which installs it.

#![allow(dead_code)] // each test binary uses a different part

// A test binary may include two server helpers, each with its own copy.
#[allow(clippy::duplicate_mod)]
#[path = "apt.rs"]
mod apt;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Longest wait for a node (or a whole cluster) to report healthy.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Installs nats-server if missing (once per process).
pub fn ensure_installed() {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    apt::ensure_installed(&INSTALLED, "nats-server", "--version", "nats-server");
}

fn free_port() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port");
    l.local_addr().expect("local addr").port()
}

/// The ports of one node.
#[derive(Debug, Clone, Copy)]
struct Ports {
    client: u16,
    monitor: u16,
    cluster: u16,
}

impl Ports {
    fn free() -> Ports {
        Ports {
            client: free_port(),
            monitor: free_port(),
            cluster: free_port(),
        }
    }
}

/// One running nats-server; killed on drop.
pub struct NatsServer {
    child: Option<Child>,
    ports: Ports,
    name: String,
    args: Vec<String>,
    _store: tempfile::TempDir,
}

impl NatsServer {
    /// A single node with JetStream, healthy.
    pub fn start() -> NatsServer {
        ensure_installed();
        let mut attempt = 0;
        loop {
            let mut node = NatsServer::spawn("pw-single", Ports::free(), None);
            match node.await_healthy(Instant::now() + START_TIMEOUT) {
                Ok(()) => return node,
                Err(e) if port_taken(&e) && attempt < PORT_RETRIES => attempt += 1,
                Err(e) => panic!("nats-server did not start: {e}"),
            }
        }
    }

    /// A single node with JetStream and the configuration `conf` (an
    /// `authorization` or `tls` block, operator mode…; the flags set the
    /// ports and the store), healthy. [`NatsServer::reconfigure`] changes
    /// it and reloads.
    pub fn start_with(conf: &str) -> NatsServer {
        ensure_installed();
        let mut node = NatsServer::unlaunched("pw-conf", Ports::free(), None);
        let path = node._store.path().join("server.conf");
        std::fs::write(&path, NatsServer::with_name(conf)).expect("write the server config");
        node.args.extend(["-c".into(), path.display().to_string()]);
        node.launch();
        let deadline = Instant::now() + START_TIMEOUT;
        if let Err(e) = node.await_healthy(deadline) {
            panic!("nats-server did not start with its config: {e}\n{conf}");
        }
        node
    }

    /// `conf` naming the server as its flag does (a reload refuses a
    /// name that changed).
    fn with_name(conf: &str) -> String {
        format!("server_name: pw-conf\n{conf}")
    }

    /// Rewrites the configuration of a [`NatsServer::start_with`] node
    /// and signals a reload (SIGHUP): the server applies it to new
    /// connections and closes those it no longer authorizes.
    pub fn reconfigure(&mut self, conf: &str) {
        let path = self._store.path().join("server.conf");
        std::fs::write(&path, NatsServer::with_name(conf)).expect("write the server config");
        let pid = self.child.as_ref().expect("running").id();
        let ok = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -HUP nats-server");
    }

    fn spawn(name: &str, ports: Ports, cluster: Option<&[Ports]>) -> NatsServer {
        let mut node = NatsServer::unlaunched(name, ports, cluster);
        node.launch();
        node
    }

    fn unlaunched(name: &str, ports: Ports, cluster: Option<&[Ports]>) -> NatsServer {
        let store = tempfile::tempdir().expect("JetStream store dir");
        let mut args: Vec<String> = vec![
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            ports.client.to_string(),
            "-m".into(),
            ports.monitor.to_string(),
            "-n".into(),
            name.into(),
            "-js".into(),
            "-sd".into(),
            store.path().display().to_string(),
        ];
        if let Some(all) = cluster {
            let routes: Vec<String> = all
                .iter()
                .map(|p| format!("nats://127.0.0.1:{}", p.cluster))
                .collect();
            args.extend([
                "--cluster_name".into(),
                "pw-test".into(),
                "--cluster".into(),
                format!("nats://127.0.0.1:{}", ports.cluster),
                "--routes".into(),
                routes.join(","),
            ]);
        }
        NatsServer {
            child: None,
            ports,
            name: name.into(),
            args,
            _store: store,
        }
    }

    fn launch(&mut self) {
        // The server's log, kept for the message of a failed start.
        let log = std::fs::File::create(self._store.path().join("server.log")).expect("log file");
        let child = Command::new("nats-server")
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn nats-server");
        self.child = Some(child);
    }

    /// Polls `/healthz` until it answers 200 or `deadline` passes.
    fn await_healthy(&mut self, deadline: Instant) -> Result<(), String> {
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    let log = std::fs::read_to_string(self._store.path().join("server.log"));
                    let log = log.unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(3).collect();
                    return Err(format!("{} exited: {status}: {tail:?}", self.name));
                }
            }
            if self.healthy() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} not healthy within {START_TIMEOUT:?}",
                    self.name
                ));
            }
            // A bounded wait on the probe's own socket timeout paces the
            // loop; the condition is the server's answer, not elapsed time.
            let _ = TcpStream::connect_timeout(&self.client_addr(), PROBE_TIMEOUT);
            std::thread::yield_now();
        }
    }

    /// True if the monitoring endpoint reports the node healthy.
    pub fn healthy(&self) -> bool {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.ports.monitor));
        let Ok(mut s) = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(PROBE_TIMEOUT));
        let req = b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if s.write_all(req).is_err() {
            return false;
        }
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
    }

    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.ports.client))
    }

    /// `nats://127.0.0.1:PORT`, as `--bus` takes it.
    pub fn url(&self) -> String {
        format!("nats://{}", self.client_addr())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Kills the node now (SIGKILL, as in a crash) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the node again after [`NatsServer::kill`]: same ports, same
    /// JetStream store (a node coming back after a crash); healthy.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
        let deadline = Instant::now() + START_TIMEOUT;
        if let Err(e) = self.await_healthy(deadline) {
            panic!("nats-server did not restart: {e}");
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._store.path().join("server.log")).unwrap_or_default()
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Fresh ports a start may try after a port it was given was taken.
const PORT_RETRIES: u32 = 3;

/// Whether a node's start failed because a port it was given was taken
/// between [`Ports::free`] finding it free and the node binding it
/// (another test's server; seen once in a fresh-clone CI).
fn port_taken(err: &str) -> bool {
    err.contains("address already in use")
}

/// Three routed nodes with JetStream; every node healthy.
pub struct NatsCluster {
    pub nodes: Vec<NatsServer>,
}

impl NatsCluster {
    pub fn start() -> NatsCluster {
        ensure_installed();
        let mut attempt = 0;
        loop {
            match NatsCluster::try_start() {
                Ok(c) => return c,
                Err(e) if port_taken(&e) && attempt < PORT_RETRIES => attempt += 1,
                Err(e) => panic!("nats cluster did not start: {e}"),
            }
        }
    }

    /// Three nodes on fresh ports; the first node's error if one fails.
    fn try_start() -> Result<NatsCluster, String> {
        let ports: Vec<Ports> = (0..3).map(|_| Ports::free()).collect();
        let mut nodes: Vec<NatsServer> = ports
            .iter()
            .enumerate()
            .map(|(i, p)| NatsServer::spawn(&format!("pw-n{i}"), *p, Some(&ports)))
            .collect();
        let deadline = Instant::now() + START_TIMEOUT;
        for n in nodes.iter_mut() {
            n.await_healthy(deadline)?;
        }
        Ok(NatsCluster { nodes })
    }

    /// Every node's URL, comma-separated, as `--bus` takes it.
    pub fn urls(&self) -> String {
        let urls: Vec<String> = self.nodes.iter().map(|n| n.url()).collect();
        urls.join(",")
    }
}

/// One JetStream API request to the server at `addr` over a fresh
/// connection (a test's own client, not pricewire's): the reply payload.
/// Bounded by 5 s.
pub fn request(addr: SocketAddr, subject: &str, payload: &[u8]) -> Vec<u8> {
    use std::io::BufRead;
    let timeout = Duration::from_secs(5);
    let sock = TcpStream::connect_timeout(&addr, timeout).expect("connect to nats");
    sock.set_read_timeout(Some(timeout)).unwrap();
    let mut w = sock.try_clone().unwrap();
    let mut r = std::io::BufReader::new(sock);
    let mut line = String::new();
    r.read_line(&mut line).unwrap(); // INFO
    let inbox = "_INBOX.pwtest";
    let msg = format!(
        "CONNECT {{\"verbose\":false}}\r\nSUB {inbox} 1\r\nPUB {subject} {inbox} {}\r\n",
        payload.len()
    );
    w.write_all(msg.as_bytes()).unwrap();
    w.write_all(payload).unwrap();
    w.write_all(b"\r\n").unwrap();
    loop {
        line.clear();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "closed before the reply"
        );
        if line.starts_with("PING") {
            w.write_all(b"PONG\r\n").unwrap();
        }
        let Some(rest) = line.strip_prefix("MSG ") else {
            continue;
        };
        let len: usize = rest.split_whitespace().last().unwrap().parse().unwrap();
        let mut body = vec![0u8; len + 2];
        r.read_exact(&mut body).unwrap();
        body.truncate(len);
        return body;
    }
}
