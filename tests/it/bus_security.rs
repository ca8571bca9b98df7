//! I5, only a core's credentials put a price or a heartbeat on the bus,
//! against a real nats-server running the shipped authorization
//! (`deploy/scale-out/nats.yaml`) over TLS: a forged price and a forged
//! heartbeat, published with no credentials and with an edge's, are
//! refused by NATS and reach no edge and no terminal, while the same
//! forgery with a core's credentials would (the control: the forgery is
//! one an edge accepts). Wrong credentials, a wrong CA and a missing TLS
//! are clear errors at start and counted failures later, not a crash
//! loop. Every credential method NATS operators issue logs on: user and
//! password, token, NKey, `.creds` (operator mode), and mutual TLS.

use crate::util::nats;
use crate::util::nats_raw;
use crate::util::net;
use crate::util::nkeys;
use crate::util::pki;
use crate::util::wait;

use std::io::Read;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nats_raw::RawNats;
use nkeys::Nkey;
use pricewire::bus::{codec, heartbeat};
use pricewire::client::{Client, ClientConfig, Event};
use pricewire::config::Config;
use pricewire::wire::TIER_ACCOUNT_DEFAULT;

const WAIT: Duration = Duration::from_secs(30);
/// The forged bid: 1.00000, far from any synthetic EURUSD (~1.08); a
/// terminal sees it less its tier's markup.
const FORGED_BID: i64 = 100_000;
/// Any bid a terminal receives below this is the forgery's.
const FORGED_BELOW: i64 = 101_000;
const FORGED_CORE_ID: u64 = 0xF0F0_F0F0;

/// The `authorization { … }` block of the shipped NATS config, with the
/// cores' and edges' public NKeys filled in.
fn shipped_authorization(core: &Nkey, edge: &Nkey) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/scale-out/nats.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).unwrap();
    let conf = docs
        .iter()
        .find_map(|d| d["data"]["nats.conf"].as_str())
        .expect("nats.conf in nats.yaml")
        .to_string();
    let start = conf
        .find("authorization {")
        .expect("an authorization block");
    let mut depth = 0;
    let mut end = start;
    for (i, c) in conf[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = start + i + 1;
                    break;
                }
            }
            _ => {}
        }
    }
    let block = conf[start..end]
        .replace("$PRICEWIRE_CORE_NKEY", &format!("\"{}\"", core.public()))
        .replace("$PRICEWIRE_EDGE_NKEY", &format!("\"{}\"", edge.public()));
    format!("{block}\n")
}

/// A CA, a server certificate for 127.0.0.1 and files in a temp dir.
struct Pki {
    dir: tempfile::TempDir,
    ca: pki::Ca,
    ca_file: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = pki::Ca::new("pw-bus-test-ca");
        let ca_file = pki::write_ca(dir.path(), "ca", &ca);
        Pki { dir, ca, ca_file }
    }

    /// The server's `tls { … }` block (`verify`: client certificates
    /// required).
    fn server_block(&self, verify: bool) -> String {
        let files = pki::ServerFiles::write(self.dir.path(), &self.ca);
        format!(
            "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: {verify}\n  timeout: 5\n}}\n",
            files.cert.display(),
            files.key.display(),
            self.ca_file.display()
        )
    }

    /// A secret file (mode 600) in the temp dir.
    fn secret(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    }
}

/// A `serve` child; stderr kept in a file for the assertions on it.
struct Serve {
    child: std::process::Child,
    ops: SocketAddr,
    listen: SocketAddr,
    stderr: PathBuf,
}

impl Serve {
    fn spawn(role: &str, bus: &str, flags: &[&str], dir: &Path) -> Serve {
        let (ops, listen) = (net::free_addr(), net::free_addr());
        let stderr = dir.join(format!("{role}-{}.stderr", ops.port()));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pricewire"));
        cmd.args(["serve", "--role", role, "--bus", bus])
            .args(flags)
            .args(["--ops-listen", &ops.to_string()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap());
        if role == "edge" {
            cmd.args(["--listen", &listen.to_string(), "--bus-max-age-ms", "60000"]);
        } else {
            cmd.args(["--threading", "dedicated", "--synthetic-rate", "2000"]);
        }
        Serve {
            child: cmd.spawn().unwrap(),
            ops,
            listen,
            stderr,
        }
    }

    fn ready(self) -> Serve {
        let ok = wait::wait_until(WAIT, || net::ready(self.ops));
        assert!(ok, "not ready:\n{}", self.log());
        self
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn metric(&self, series: &str) -> u64 {
        net::http_body(self.ops, "/metrics")
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix(series))
                    .and_then(|v| v.trim().parse::<f64>().ok())
            })
            .map_or(0, |v| v as u64)
    }

    /// Waits for the exit (a refusal at start); its code and stderr.
    fn exit(mut self) -> (Option<i32>, String, Duration) {
        let t0 = Instant::now();
        let status = self.child.wait().unwrap();
        (status.code(), self.log(), t0.elapsed())
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw client logged on with `key` (an NKey CONNECT signing the nonce).
fn raw_as(node: &nats::NatsServer, ca: &Path, key: Option<&Nkey>) -> Result<RawNats, String> {
    let mut raw = RawNats::open(node.client_addr(), Some(ca));
    let fields = match key {
        None => String::new(),
        Some(k) => format!(
            "\"nkey\":\"{}\",\"sig\":\"{}\"",
            k.public(),
            k.sign(raw.nonce.as_bytes())
        ),
    };
    raw.hello(&fields).map(|()| raw)
}

/// A terminal on the edge, collecting every EURUSD bid it receives.
fn terminal(edge: &Serve) -> Arc<Mutex<Vec<i64>>> {
    let bids = Arc::new(Mutex::new(Vec::new()));
    let mut c = Client::connect(ClientConfig::new(edge.listen, "demo", "demo")).unwrap();
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD"])
        .unwrap();
    let seen = bids.clone();
    std::thread::spawn(move || loop {
        match c.next_event(Duration::from_millis(50)) {
            Ok(Some(Event::Price(p))) => seen.lock().unwrap().push(p.body.bid),
            Ok(_) => {}
            Err(_) => return,
        }
    });
    bids
}

fn forge_price(real: &[u8]) -> Vec<u8> {
    let table = Config::builtin(3).table;
    let mut p = codec::decode(real, "EURUSD", &table, 0, 0).unwrap();
    p.bid = FORGED_BID;
    p.ask = FORGED_BID + 10;
    p.seq += 1_000_000;
    let mut out = [0u8; codec::BUS_MESSAGE_LEN];
    codec::encode(&mut out, &p, codec::epoch(real), 5, 0);
    out.to_vec()
}

fn forge_heartbeat(real: &[u8]) -> Vec<u8> {
    let mut hb = heartbeat::decode(real).unwrap();
    hb.core_id = FORGED_CORE_ID;
    hb.seq += 1_000;
    let mut out = [0u8; heartbeat::HEARTBEAT_LEN];
    heartbeat::encode(&mut out, &hb);
    out.to_vec()
}

/// The next message on `subject` the eavesdropper sees.
fn next_on(raw: &mut RawNats, subject: &str) -> Vec<u8> {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if let Some(m) = raw.next_msg(Duration::from_secs(5)) {
            if m.subject == subject {
                return m.payload;
            }
        }
    }
    panic!("nothing on {subject}");
}

fn is_forged(m: &nats_raw::Msg) -> bool {
    match m.subject.as_str() {
        "pricewire.heartbeat" => {
            heartbeat::decode(&m.payload).is_ok_and(|h| h.core_id == FORGED_CORE_ID)
        }
        _ => {
            let table = Config::builtin(3).table;
            codec::decode(&m.payload, "EURUSD", &table, 0, 0).is_ok_and(|p| p.bid == FORGED_BID)
        }
    }
}

/// A nats-server with the shipped authorization over TLS, the cores'
/// and edges' NKeys, and their seeds in files.
struct Secured {
    pki: Pki,
    node: nats::NatsServer,
    core_key: Nkey,
    edge_key: Nkey,
    bus: String,
    ca: String,
    core_nk: String,
    edge_nk: String,
}

impl Secured {
    fn new() -> Secured {
        let pki = Pki::new();
        let (core_key, edge_key) = (Nkey::new(nkeys::USER), Nkey::new(nkeys::USER));
        let node = nats::NatsServer::start_with(&Secured::conf(&pki, &core_key, &edge_key));
        let file = |name: &str, k: &Nkey| pki.secret(name, &k.seed()).display().to_string();
        let (core_nk, edge_nk) = (file("core.nk", &core_key), file("edge.nk", &edge_key));
        Secured {
            bus: format!("tls://{}", node.client_addr()),
            ca: pki.ca_file.display().to_string(),
            core_nk,
            edge_nk,
            node,
            core_key,
            edge_key,
            pki,
        }
    }

    fn conf(pki: &Pki, core: &Nkey, edge: &Nkey) -> String {
        format!(
            "{}{}",
            shipped_authorization(core, edge),
            pki.server_block(false)
        )
    }

    /// A `role` process with its tier's NKey.
    fn spawn(&self, role: &str) -> Serve {
        let nk = if role == "core" {
            &self.core_nk
        } else {
            &self.edge_nk
        };
        let flags = [
            "--bus-tls-ca",
            self.ca.as_str(),
            "--bus-nkey-file",
            nk.as_str(),
        ];
        Serve::spawn(role, &self.bus, &flags, self.pki.dir.path())
    }

    /// A raw client with `key`'s rights.
    fn raw(&self, key: Option<&Nkey>) -> Result<RawNats, String> {
        raw_as(&self.node, &self.pki.ca_file, key)
    }
}

/// Any bid under [`FORGED_BELOW`].
fn forged(bids: &Mutex<Vec<i64>>) -> bool {
    bids.lock().unwrap().iter().any(|&bid| bid < FORGED_BELOW)
}

/// With no credentials and with an edge's, NATS refuses both forgeries;
/// live prices go on and neither ever shows up on the bus or at the
/// terminal.
fn forgeries_are_refused(
    sec: &Secured,
    ear: &mut RawNats,
    bids: &Mutex<Vec<i64>>,
    forgeries: &[(&str, &[u8])],
) {
    let refused = sec.raw(None).err().unwrap_or_default();
    assert!(refused.contains("Authorization Violation"), "{refused}");
    let mut forger = sec.raw(Some(&sec.edge_key)).unwrap();
    for (subject, bytes) in forgeries {
        forger.publish(subject, bytes);
    }
    let errors = forger.errors_until_pong();
    for (subject, _) in forgeries {
        let denied = errors
            .iter()
            .any(|e| e.contains("Permissions Violation") && e.contains(subject));
        assert!(denied, "{subject}: {errors:?}");
    }
    let before = bids.lock().unwrap().len();
    for _ in 0..50 {
        let m = ear.next_msg(WAIT).expect("the bus went quiet");
        assert!(!is_forged(&m), "a forgery reached the bus: {m:?}");
    }
    assert!(wait::wait_until(WAIT, || bids.lock().unwrap().len() >= before + 20));
    assert!(!forged(bids), "a forged price reached the terminal");
}

/// The control: the very same bytes with a core's credentials are taken,
/// so the refusals are what kept them out.
fn a_core_would_have_been_taken(
    sec: &Secured,
    ear: &mut RawNats,
    bids: &Mutex<Vec<i64>>,
    forgeries: &[(&str, &[u8])],
) {
    let mut core = sec.raw(Some(&sec.core_key)).unwrap();
    for (subject, bytes) in forgeries {
        core.publish(subject, bytes);
    }
    assert!(core.errors_until_pong().is_empty());
    let mut seen = 0;
    let deadline = Instant::now() + WAIT;
    while seen < forgeries.len() && Instant::now() < deadline {
        if ear
            .next_msg(Duration::from_secs(5))
            .is_some_and(|m| is_forged(&m))
        {
            seen += 1;
        }
    }
    assert_eq!(
        seen,
        forgeries.len(),
        "the core's publishes of the forgeries"
    );
    assert!(
        wait::wait_until(WAIT, || forged(bids)),
        "the forgery is one an edge would accept"
    );
}

#[test]
fn only_a_cores_credentials_put_a_price_or_a_heartbeat_on_the_bus() {
    let sec = Secured::new();
    let _core = sec.spawn("core").ready();
    let edge = sec.spawn("edge").ready();
    let bids = terminal(&edge);
    let priced = wait::wait_until(WAIT, || bids.lock().unwrap().len() >= 5);
    assert!(priced, "no prices at the terminal");
    // An eavesdropper with an edge's rights sees what every edge sees.
    let mut ear = sec.raw(Some(&sec.edge_key)).unwrap();
    ear.subscribe("pricewire.price.EURUSD", 1);
    ear.subscribe("pricewire.heartbeat", 2);
    let price = forge_price(&next_on(&mut ear, "pricewire.price.EURUSD"));
    let beat = forge_heartbeat(&next_on(&mut ear, "pricewire.heartbeat"));
    let forgeries: [(&str, &[u8]); 2] = [
        ("pricewire.price.EURUSD", &price),
        ("pricewire.heartbeat", &beat),
    ];
    forgeries_are_refused(&sec, &mut ear, &bids, &forgeries);
    a_core_would_have_been_taken(&sec, &mut ear, &bids, &forgeries);
}

/// Each refusal at start: exit 1 within the attempt, the reason and the
/// credentials' source named, the seed never printed.
fn refused_at_start(sec: &Secured) {
    let dir = sec.pki.dir.path();
    let stranger = Nkey::new(nkeys::USER);
    let seed = stranger.seed();
    let nk = sec.pki.secret("stranger.nk", &seed).display().to_string();
    let other = pki::write_ca(dir, "other", &pki::Ca::new("other"))
        .display()
        .to_string();
    let (ca, plain) = (sec.ca.as_str(), sec.bus.replace("tls://", "nats://"));
    let cases: [(&str, &str, Vec<&str>, [&str; 2]); 5] = [
        (
            "unknown NKey",
            &sec.bus,
            vec!["--bus-tls-ca", ca, "--bus-nkey-file", &nk],
            [
                "Authorization Violation",
                "the NKey seed from --bus-nkey-file",
            ],
        ),
        (
            "no credentials",
            &sec.bus,
            vec!["--bus-tls-ca", ca],
            ["Authorization Violation", "no credentials"],
        ),
        (
            "wrong CA",
            &sec.bus,
            vec!["--bus-tls-ca", &other, "--bus-nkey-file", &nk],
            ["TLS handshake", "UnknownIssuer"],
        ),
        (
            "no TLS",
            &plain,
            vec!["--bus-nkey-file", &nk],
            ["requires TLS", "--bus-tls-ca"],
        ),
        // An edge before any core may not create the last-value stream.
        (
            "no core yet",
            &sec.bus,
            vec!["--bus-tls-ca", ca, "--bus-nkey-file", &sec.edge_nk],
            ["refused by the server's permissions", "start a core first"],
        ),
    ];
    for (case, url, flags, [why, hint]) in &cases {
        let (code, err, took) = Serve::spawn("edge", url, flags, dir).exit();
        assert_eq!(code, Some(1), "{case}: {err}");
        assert!(err.contains(why) && err.contains(hint), "{case}: {err}");
        assert!(!err.contains(&seed), "{case}: the seed is printed");
        assert!(
            took < Duration::from_secs(9),
            "{case}: waited {took:?} for what waiting cannot mend"
        );
    }
}

#[test]
fn wrong_credentials_are_a_clear_error_at_start_and_a_counted_failure_later() {
    let mut sec = Secured::new();
    refused_at_start(&sec);
    // Running, then refused: counted and logged, never a crash.
    let _core = sec.spawn("core").ready();
    let edge = sec.spawn("edge").ready();
    let revoked = Secured::conf(&sec.pki, &sec.core_key, &Nkey::new(nkeys::USER));
    sec.node.reconfigure(&revoked);
    let auth_failures = "pricewire_bus_connect_failures_total{reason=\"auth\"} ";
    let counted = wait::wait_until(WAIT, || edge.metric(auth_failures) >= 3);
    assert!(
        counted,
        "refused reconnects not counted:\n{}\n{}",
        edge.log(),
        sec.node.log()
    );
    assert_eq!(
        net::http_status(edge.ops, "/livez"),
        Some(200),
        "{}",
        edge.log()
    );
    let warned = edge.log().matches("NATS refused the connection").count();
    assert_eq!(warned, 1, "one warning per reason:\n{}", edge.log());
    let restored = Secured::conf(&sec.pki, &sec.core_key, &sec.edge_key);
    sec.node.reconfigure(&restored);
    let back = wait::wait_until(WAIT, || edge.metric("pricewire_bus_connected ") == 1);
    assert!(
        back,
        "not back once the credentials were restored:\n{}",
        edge.log()
    );
}

/// A core logged on with `flags` publishes prices.
fn core_publishes(node: &nats::NatsServer, scheme: &str, flags: &[&str], dir: &Path) {
    let bus = format!("{scheme}://{}", node.client_addr());
    let core = Serve::spawn("core", &bus, flags, dir);
    let published = "pricewire_bus_messages_total{event=\"published\"} ";
    let ok = wait::wait_until(WAIT, || core.metric(published) > 0);
    assert!(ok, "{flags:?}:\n{}", core.log());
}

#[test]
fn every_credential_method_nats_operators_issue_logs_on() {
    let pki = Pki::new();
    let dir = pki.dir.path();
    let users = "authorization {\n  users: [ { user: core, password: \"p4ss word\" } ]\n}\n";
    let node = nats::NatsServer::start_with(users);
    let pw = pki.secret("pw", "p4ss word\n").display().to_string();
    core_publishes(
        &node,
        "nats",
        &["--bus-user", "core", "--bus-password-file", &pw],
        dir,
    );
    drop(node);

    let node = nats::NatsServer::start_with("authorization {\n  token: \"t0ken\"\n}\n");
    let token = pki.secret("token", "t0ken").display().to_string();
    core_publishes(&node, "nats", &["--bus-token-file", &token], dir);
    drop(node);

    let op = nkeys::Operator::new();
    let op_jwt = pki.secret("op.jwt", &op.operator_jwt);
    let node = nats::NatsServer::start_with(&op.server_config(&op_jwt));
    let creds = pki
        .secret("core.creds", &op.user_creds("core"))
        .display()
        .to_string();
    core_publishes(&node, "nats", &["--bus-creds-file", &creds], dir);
    drop(node);

    // Mutual TLS: the server requires a client certificate from the CA.
    let node = nats::NatsServer::start_with(&pki.server_block(true));
    let (chain, key) = pki.ca.leaf(&["pricewire-core"], true);
    let cert = pki.secret("client.crt", &chain).display().to_string();
    let key = pki.secret("client.key", &key).display().to_string();
    let ca = pki.ca_file.display().to_string();
    core_publishes(
        &node,
        "tls",
        &[
            "--bus-tls-ca",
            &ca,
            "--bus-tls-cert",
            &cert,
            "--bus-tls-key",
            &key,
        ],
        dir,
    );
    let bus = format!("tls://{}", node.client_addr());
    let (code, err, _) = Serve::spawn("core", &bus, &["--bus-tls-ca", &ca], dir).exit();
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("TLS") && err.contains("--bus-tls-cert"),
        "{err}"
    );
}

#[test]
fn credentials_in_a_url_are_refused_pointing_at_the_file_flags() {
    let mut out = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args([
            "serve",
            "--role",
            "edge",
            "--bus",
            "nats://edge:s3cret@127.0.0.1:4222",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    out.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(out.wait().unwrap().code(), Some(2), "{err}");
    assert!(
        err.contains("--bus-password-file") && err.contains("--bus-creds-file"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "the password is echoed: {err}");
}
