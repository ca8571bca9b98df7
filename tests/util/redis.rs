//! A real `redis-server` on a free loopback port for one test.
//!
//! `util::redis`. The server runs
//! without persistence (`--save '' --appendonly no`), bound to 127.0.0.1,
//! and is killed when the [`RedisServer`] is dropped. Start-up is awaited on
//! a condition (the server's "Ready to accept connections" line, then a
//! `PING`), bounded by [`START_TIMEOUT`]. When `redis-server` is missing the
//! helper fails at once, naming `tools/test-deps`, which installs it.

// A test binary may include two server helpers, each with its own copy.
#[allow(clippy::duplicate_mod)]
#[path = "apt.rs"]
mod apt;

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use pricewire::refdata::{RespConn, Value};

/// Longest wait for a server to answer PING.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Attempts with a fresh port if another process takes ours meanwhile.
const PORT_ATTEMPTS: usize = 3;

/// A running redis-server; killed on drop.
pub struct RedisServer {
    child: Child,
    addr: SocketAddr,
}

/// Installs redis-server if missing (once per process).
pub fn ensure_installed() {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    apt::ensure_installed(&INSTALLED, "redis-server", "--version", "redis-server");
}

fn free_port() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port");
    l.local_addr().expect("local addr").port()
}

impl RedisServer {
    /// Starts a server and waits until it answers PING.
    pub fn start() -> RedisServer {
        ensure_installed();
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            match Self::try_start(free_port()) {
                Ok(server) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("redis-server did not start: {last_error}");
    }

    fn try_start(port: u16) -> Result<RedisServer, String> {
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = crossbeam_channel::bounded::<String>(1);
        // Drains the log to its end (so the server never blocks on a full
        // pipe) and reports the readiness line once.
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("Ready to accept connections") {
                    let _ = tx.try_send(line);
                }
            }
        });
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let server = RedisServer { child, addr };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(_) => {}
            Err(_) => {
                return Err(format!(
                    "no readiness line on port {port} within {START_TIMEOUT:?}"
                ))
            }
        }
        let pong = server.command(&[b"PING"]);
        if pong != Value::Simple("PONG".into()) {
            return Err(format!("PING answered {pong:?}"));
        }
        Ok(server)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's process id (its main thread's too).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// One command on a fresh connection; panics on error (test setup).
    pub fn command(&self, args: &[&[u8]]) -> Value {
        let mut c = RespConn::connect(self.addr, IO_TIMEOUT, None, 0).expect("connect to redis");
        c.command(args, IO_TIMEOUT).expect("redis command")
    }

    /// Writes an account hash `pricewire:account:<name>` and adds the name
    /// to the index set `pricewire:accounts`.
    pub fn put_account(&self, name: &str, fields: &[(&str, &str)]) {
        let key = format!("pricewire:account:{name}");
        let mut args: Vec<&[u8]> = vec![b"HSET", key.as_bytes()];
        for (f, v) in fields {
            args.push(f.as_bytes());
            args.push(v.as_bytes());
        }
        self.command(&args);
        self.command(&[b"SADD", b"pricewire:accounts", name.as_bytes()]);
    }

    /// Writes many accounts over one connection (each as
    /// [`RedisServer::put_account`]).
    pub fn put_accounts(&self, names: &[String], fields: &[(&str, &str)]) {
        let mut c = RespConn::connect(self.addr, IO_TIMEOUT, None, 0).expect("connect to redis");
        for name in names {
            let key = format!("pricewire:account:{name}");
            let mut args: Vec<&[u8]> = vec![b"HSET", key.as_bytes()];
            for (f, v) in fields {
                args.push(f.as_bytes());
                args.push(v.as_bytes());
            }
            c.command(&args, IO_TIMEOUT).expect("HSET");
            let sadd: [&[u8]; 3] = [b"SADD", b"pricewire:accounts", name.as_bytes()];
            c.command(&sadd, IO_TIMEOUT).expect("SADD");
        }
    }

    /// Sets the data-set generation marker `pricewire:generation`.
    pub fn set_generation(&self, generation: u64) {
        let g = generation.to_string();
        self.command(&[b"SET", b"pricewire:generation", g.as_bytes()]);
    }

    /// Kills the server (as in a crash) and starts a new one on the same
    /// port without persistence: Redis back, its data gone.
    pub fn restart_empty(&mut self) {
        self.kill();
        let port = self.addr.port();
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            match Self::try_start(port) {
                Ok(mut server) => {
                    std::mem::swap(self, &mut server);
                    // `server` now holds the killed child; dropping it is a no-op kill.
                    return;
                }
                Err(e) => last_error = e,
            }
        }
        panic!("redis-server did not restart on port {port}: {last_error}");
    }

    /// Kills the server now (as in a crash) and waits for it to exit.
    pub fn kill(&mut self) {
        // SIGKILL cannot be caught, so the wait returns at once.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stored form (argon2id, as `pricewire token hash` makes it) of the
/// token `t` the refdata drills log on with: Redis records hold hashes,
/// never clear tokens. Computed once per test binary.
pub fn token_t_hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| pricewire::auth::hash::hash_token(b"t").expect("argon2id hash"))
}
