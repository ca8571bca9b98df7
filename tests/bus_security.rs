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

#[path = "util/nats.rs"]
mod nats;
#[path = "util/nats_raw.rs"]
mod nats_raw;
#[path = "util/net.rs"]
mod net;
#[path = "util/nkeys.rs"]
mod nkeys;
#[path = "util/pki.rs"]
mod pki;
#[path = "util/wait.rs"]
mod wait;

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

#[test]
fn only_a_cores_credentials_put_a_price_or_a_heartbeat_on_the_bus() {
    let pki = Pki::new();
    let (core_key, edge_key) = (Nkey::new(nkeys::USER), Nkey::new(nkeys::USER));
    let conf = format!(
        "{}{}",
        shipped_authorization(&core_key, &edge_key),
        pki.server_block(false)
    );
    let node = nats::NatsServer::start_with(&conf);
    let bus = format!("tls://{}", node.client_addr());
    let ca = pki.ca_file.display().to_string();
    let core_nk = pki
        .secret("core.nk", &core_key.seed())
        .display()
        .to_string();
    let edge_nk = pki
        .secret("edge.nk", &edge_key.seed())
        .display()
        .to_string();
    let _core = Serve::spawn(
        "core",
        &bus,
        &["--bus-tls-ca", &ca, "--bus-nkey-file", &core_nk],
        pki.dir.path(),
    )
    .ready();
    let edge = Serve::spawn(
        "edge",
        &bus,
        &["--bus-tls-ca", &ca, "--bus-nkey-file", &edge_nk],
        pki.dir.path(),
    )
    .ready();
    let bids = terminal(&edge);
    assert!(
        wait::wait_until(WAIT, || bids.lock().unwrap().len() >= 5),
        "no prices at the terminal"
    );

    // An eavesdropper with an edge's rights sees what every edge sees.
    let mut ear = raw_as(&node, &pki.ca_file, Some(&edge_key)).unwrap();
    ear.subscribe("pricewire.price.EURUSD", 1);
    ear.subscribe("pricewire.heartbeat", 2);
    let price = forge_price(&next_on(&mut ear, "pricewire.price.EURUSD"));
    let beat = forge_heartbeat(&next_on(&mut ear, "pricewire.heartbeat"));

    // No credentials: not even a connection.
    let refused = raw_as(&node, &pki.ca_file, None).err().unwrap_or_default();
    assert!(refused.contains("Authorization Violation"), "{refused}");
    // An edge's credentials: connected, but both publishes refused.
    let mut forger = raw_as(&node, &pki.ca_file, Some(&edge_key)).unwrap();
    forger.publish("pricewire.price.EURUSD", &price);
    forger.publish("pricewire.heartbeat", &beat);
    let errors = forger.errors_until_pong();
    let denied = |s: &str| {
        errors
            .iter()
            .any(|e| e.contains("Permissions Violation") && e.contains(s))
    };
    assert!(
        denied("pricewire.price.EURUSD") && denied("pricewire.heartbeat"),
        "{errors:?}"
    );

    // Live prices go on; neither forgery ever shows up.
    let before = bids.lock().unwrap().len();
    let mut heard = 0;
    while heard < 50 {
        let m = ear.next_msg(WAIT).expect("the bus went quiet");
        assert!(!is_forged(&m), "a forgery reached the bus: {m:?}");
        heard += 1;
    }
    assert!(wait::wait_until(WAIT, || bids.lock().unwrap().len() >= before + 20));
    let forged = |b: &Vec<i64>| b.iter().any(|&bid| bid < FORGED_BELOW);
    assert!(
        !forged(&bids.lock().unwrap()),
        "a forged price reached the terminal"
    );

    // The control: the very same bytes with a core's credentials are
    // taken (so the refusals above are what kept them out).
    let mut core_forger = raw_as(&node, &pki.ca_file, Some(&core_key)).unwrap();
    core_forger.publish("pricewire.heartbeat", &beat);
    core_forger.publish("pricewire.price.EURUSD", &price);
    assert!(core_forger.errors_until_pong().is_empty());
    let mut forged_seen = 0;
    let deadline = Instant::now() + WAIT;
    while forged_seen < 2 && Instant::now() < deadline {
        if ear
            .next_msg(Duration::from_secs(5))
            .is_some_and(|m| is_forged(&m))
        {
            forged_seen += 1;
        }
    }
    assert_eq!(forged_seen, 2, "the core's publishes of both forgeries");
    let reached = wait::wait_until(WAIT, || forged(&bids.lock().unwrap()));
    assert!(reached, "the forgery is one an edge would accept");
}

#[test]
fn wrong_credentials_are_a_clear_error_at_start_and_a_counted_failure_later() {
    let pki = Pki::new();
    let (core_key, edge_key) = (Nkey::new(nkeys::USER), Nkey::new(nkeys::USER));
    let auth = |edge: &Nkey| shipped_authorization(&core_key, edge);
    let tls = pki.server_block(false);
    let mut node = nats::NatsServer::start_with(&format!("{}{tls}", auth(&edge_key)));
    let bus = format!("tls://{}", node.client_addr());
    let ca = pki.ca_file.display().to_string();
    let dir = pki.dir.path();
    let stranger = Nkey::new(nkeys::USER);
    let stranger_seed = stranger.seed();
    let stranger_nk = pki
        .secret("stranger.nk", &stranger_seed)
        .display()
        .to_string();
    let other_ca = pki::write_ca(dir, "other", &pki::Ca::new("other"))
        .display()
        .to_string();
    let refusals: [(&str, Vec<&str>, &str, &str); 4] = [
        (
            "unknown NKey",
            vec!["--bus-tls-ca", &ca, "--bus-nkey-file", &stranger_nk],
            "Authorization Violation",
            "the NKey seed from --bus-nkey-file",
        ),
        (
            "no credentials",
            vec!["--bus-tls-ca", &ca],
            "Authorization Violation",
            "no credentials",
        ),
        (
            "wrong CA",
            vec!["--bus-tls-ca", &other_ca, "--bus-nkey-file", &stranger_nk],
            "TLS handshake",
            "UnknownIssuer",
        ),
        (
            "no TLS",
            vec!["--bus-nkey-file", &stranger_nk],
            "requires TLS",
            "--bus-tls-ca",
        ),
    ];
    for (case, flags, why, hint) in &refusals {
        let url = if *case == "no TLS" {
            bus.replace("tls://", "nats://")
        } else {
            bus.clone()
        };
        let flags: Vec<&str> = flags.iter().map(|s| s.as_ref()).collect();
        let (code, err, took) = Serve::spawn("edge", &url, &flags, dir).exit();
        assert_eq!(code, Some(1), "{case}: {err}");
        assert!(err.contains(why) && err.contains(hint), "{case}: {err}");
        assert!(!err.contains(&stranger_seed), "{case}: the seed is printed");
        assert!(
            took < Duration::from_secs(9),
            "{case}: waited {took:?} for what waiting cannot mend"
        );
    }

    // Running, then refused: counted and logged, never a crash.
    let core_nk = pki
        .secret("core.nk", &core_key.seed())
        .display()
        .to_string();
    let edge_nk = pki
        .secret("edge.nk", &edge_key.seed())
        .display()
        .to_string();
    // An edge before any core: it may not create the last-value stream,
    // and says so at once rather than at the end of a timeout.
    let edge_flags = [
        "--bus-tls-ca",
        ca.as_str(),
        "--bus-nkey-file",
        edge_nk.as_str(),
    ];
    let (code, err, took) = Serve::spawn("edge", &bus, &edge_flags, dir).exit();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("start a core first"), "{err}");
    assert!(took < Duration::from_secs(9), "waited {took:?}");
    let _core = Serve::spawn(
        "core",
        &bus,
        &["--bus-tls-ca", &ca, "--bus-nkey-file", &core_nk],
        dir,
    )
    .ready();
    let edge = Serve::spawn(
        "edge",
        &bus,
        &["--bus-tls-ca", &ca, "--bus-nkey-file", &edge_nk],
        dir,
    )
    .ready();
    node.reconfigure(&format!("{}{tls}", auth(&stranger)));
    let auth_failures = "pricewire_bus_connect_failures_total{reason=\"auth\"} ";
    let counted = wait::wait_until(WAIT, || edge.metric(auth_failures) >= 3);
    assert!(
        counted,
        "refused reconnects not counted:\n{}\n{}",
        edge.log(),
        node.log()
    );
    assert_eq!(
        net::http_status(edge.ops, "/livez"),
        Some(200),
        "{}",
        edge.log()
    );
    let warned = edge.log().matches("NATS refused the connection").count();
    assert_eq!(warned, 1, "one warning per reason:\n{}", edge.log());
    node.reconfigure(&format!("{}{tls}", auth(&edge_key)));
    let back = wait::wait_until(WAIT, || edge.metric("pricewire_bus_connected ") == 1);
    assert!(
        back,
        "not back after the credentials were restored:\n{}\n{}",
        edge.log(),
        node.log()
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
