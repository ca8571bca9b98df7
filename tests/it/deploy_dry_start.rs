//! The shipped scale-out manifests (`deploy/scale-out/*.yaml`) start, as
//! written, on one host: every pod of the NATS StatefulSet, the core
//! StatefulSet and the edge Deployment runs its container's own command,
//! arguments, environment and mounted files (ConfigMaps as written,
//! Secrets as the manifests' comments tell the platform team to make
//! them, each key a file), and the test asserts that NATS forms its
//! cluster with authorization and TLS on, that the cores and the edges
//! turn ready on the probes their manifests name, that every declared
//! port is listened on, and that a terminal on every edge gets prices a
//! core aggregated from an LP.
//!
//! What is mapped, and nothing else: each pod gets a loopback address of
//! its own (127.0.0.0/8 is all local on Linux) standing for its pod IP,
//! so `0.0.0.0` in a flag or a config becomes that address and every
//! pod keeps its manifest's ports; cluster host names (`nats-0.nats`,
//! `redis`) become the address of the process standing for them; a
//! mount path becomes a directory of this test. The image `pricewire:*`
//! is this build's binary and `nats:*` the local nats-server. The LP
//! `lp-a` is a FIX simulator; `lp-b`'s name is made one that never
//! resolves (RFC 6761 `.invalid`): a core must come up regardless.
//!
//! The pods of a tier start together (`podManagementPolicy: Parallel`),
//! and, as the kubelet does, a container that exits is started again
//! (at most three times here, each restart printed): a core that found
//! no JetStream answer within its start-up wait on a freshly formed
//! cluster exits and is restarted, as it would be in the cluster.

use crate::util::nats;
use crate::util::net;
use crate::util::nkeys;
use crate::util::pki;
use crate::util::redis;
use crate::util::wait;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use pricewire::client::{Client, ClientConfig, Event};
use pricewire::feed::fix::sim::{FixSim, SimConfig, SimSymbol};
use pricewire::wire::TIER_ACCOUNT_DEFAULT;
use yaml_rust2::{Yaml, YamlLoader};

const WAIT: Duration = Duration::from_secs(90);
/// The LP simulator stands for `lp-a.fix.example.net` here.
const LP_A: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 30);

fn manifest(file: &str) -> Vec<Yaml> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/scale-out")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    YamlLoader::load_from_str(&text).unwrap()
}

fn s(y: &Yaml) -> String {
    match y {
        Yaml::String(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Boolean(b) => b.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

/// ConfigMaps and Secrets by (kind, name): key -> bytes.
type Objects = BTreeMap<(String, String), BTreeMap<String, Vec<u8>>>;

/// One pod: its name, its address, its workload's pod template.
struct Pod {
    name: String,
    ip: Ipv4Addr,
    spec: Yaml,
    claims: Vec<String>,
}

impl Pod {
    fn container(&self) -> &Yaml {
        let c = self.spec["containers"].as_vec().unwrap();
        assert_eq!(c.len(), 1, "{}: one container", self.name);
        &c[0]
    }

    /// The container port named `name` (or a number).
    fn port(&self, port: &Yaml) -> u16 {
        if let Some(n) = port.as_i64() {
            return n as u16;
        }
        let name = s(port);
        let ports = self.container()["ports"].as_vec().unwrap();
        let p = ports.iter().find(|p| s(&p["name"]) == name);
        p.and_then(|p| p["containerPort"].as_i64())
            .unwrap_or_else(|| panic!("{}: no port {name}", self.name)) as u16
    }
}

/// Every pod of the workloads in `file`, numbered from `first_ip`.
fn pods(file: &str, first_ip: u8) -> Vec<Pod> {
    let mut out = Vec::new();
    for doc in manifest(file) {
        let kind = doc["kind"].as_str().unwrap_or_default();
        if kind != "StatefulSet" && kind != "Deployment" {
            continue;
        }
        let name = s(&doc["metadata"]["name"]);
        let claims: Vec<String> = doc["spec"]["volumeClaimTemplates"]
            .as_vec()
            .map(|v| v.iter().map(|c| s(&c["metadata"]["name"])).collect())
            .unwrap_or_default();
        for i in 0..doc["spec"]["replicas"].as_i64().unwrap() {
            out.push(Pod {
                name: format!("{name}-{i}"),
                ip: Ipv4Addr::new(127, 0, 0, first_ip + out.len() as u8),
                spec: doc["spec"]["template"]["spec"].clone(),
                claims: claims.clone(),
            });
        }
    }
    out
}

/// String replacements applied to arguments, variables and ConfigMap
/// files (the module doc says which).
struct Rewrites(Vec<(String, String)>);

impl Rewrites {
    /// One pass over `text`: at each place the longest `from` that
    /// matches is replaced, so a replacement is never rewritten again.
    fn apply(&self, text: &str) -> String {
        let mut rules: Vec<&(String, String)> = self.0.iter().collect();
        rules.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        let (mut out, mut at) = (String::new(), 0);
        while at < text.len() {
            let rest = &text[at..];
            match rules
                .iter()
                .find(|(from, _)| rest.starts_with(from.as_str()))
            {
                Some((from, to)) => {
                    out.push_str(to);
                    at += from.len();
                }
                None => {
                    let c = rest.chars().next().unwrap();
                    out.push(c);
                    at += c.len_utf8();
                }
            }
        }
        out
    }
}

/// What the platform team makes by the manifests' comments: the NATS
/// certificate, the tiers' NKeys and the LP passwords. Every object a
/// workload names must be here or in the manifests.
fn objects(ca: &pki::Ca, nats: &[Pod]) -> Objects {
    let mut o = Objects::new();
    for doc in ["config.yaml", "nats.yaml"]
        .iter()
        .flat_map(|f| manifest(f))
    {
        if doc["kind"].as_str() == Some("ConfigMap") {
            let data = doc["data"].as_hash().unwrap().iter();
            let data = data.map(|(k, v)| (s(k), s(v).into_bytes())).collect();
            o.insert(("configMap".into(), s(&doc["metadata"]["name"])), data);
        }
    }
    // The certificate names every node, as the pods reach them and as
    // this test maps them.
    let mut names: Vec<String> = nats.iter().map(|p| format!("{}.nats", p.name)).collect();
    names.extend(nats.iter().map(|p| p.ip.to_string()));
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (chain, key) = ca.leaf_both(&names);
    let tls = [("ca.crt", ca.pem()), ("tls.crt", chain), ("tls.key", key)];
    o.insert(
        secret("nats-tls"),
        tls.iter()
            .map(|(k, v)| (k.to_string(), v.clone().into_bytes()))
            .collect(),
    );
    let (core, edge) = (nkeys::Nkey::new(nkeys::USER), nkeys::Nkey::new(nkeys::USER));
    // `nk -gen user -pubout`: the seed, then the public key.
    let nk = |k: &nkeys::Nkey| format!("{}\n{}\n", k.seed(), k.public()).into_bytes();
    o.insert(
        secret("pricewire-bus-core"),
        [("core.nk".to_string(), nk(&core))].into(),
    );
    o.insert(
        secret("pricewire-bus-edge"),
        [("edge.nk".to_string(), nk(&edge))].into(),
    );
    let users = [
        (
            "PRICEWIRE_CORE_NKEY".to_string(),
            core.public().into_bytes(),
        ),
        (
            "PRICEWIRE_EDGE_NKEY".to_string(),
            edge.public().into_bytes(),
        ),
    ];
    o.insert(
        ("configMap".into(), "pricewire-bus-users".into()),
        users.into(),
    );
    let lp = [
        ("LPA_FIX_PASSWORD".to_string(), b"lp-a-secret".to_vec()),
        ("LPB_FIX_PASSWORD".to_string(), b"lp-b-secret".to_vec()),
    ];
    o.insert(secret("pricewire-lp-credentials"), lp.into());
    o
}

fn secret(name: &str) -> (String, String) {
    ("secret".into(), name.into())
}

fn object<'a>(o: &'a Objects, kind: &str, name: &str) -> &'a BTreeMap<String, Vec<u8>> {
    o.get(&(kind.to_string(), name.to_string()))
        .unwrap_or_else(|| panic!("the manifests name {kind} {name}, which nobody makes"))
}

/// A Secret volume's `defaultMode` (Kubernetes reads `0440` as octal; a
/// YAML 1.2 parser hands its digits over as decimal), 0644 by default.
fn default_mode(secret: &Yaml) -> u32 {
    match secret["defaultMode"].as_i64() {
        None => 0o644,
        Some(v) => u32::from_str_radix(&v.to_string(), 8).expect("an octal mode"),
    }
}

/// What one volume holds (key -> bytes) and, for a Secret, its files'
/// mode.
fn volume(pod: &Pod, o: &Objects, name: &str) -> (BTreeMap<String, Vec<u8>>, Option<u32>) {
    let volumes = pod.spec["volumes"].as_vec().cloned().unwrap_or_default();
    let Some(v) = volumes.iter().find(|v| s(&v["name"]) == name) else {
        assert!(
            pod.claims.iter().any(|c| c == name),
            "{}: volume {name}",
            pod.name
        );
        return (BTreeMap::new(), None);
    };
    if !v["configMap"].is_badvalue() {
        return (
            object(o, "configMap", &s(&v["configMap"]["name"])).clone(),
            None,
        );
    }
    let data = object(o, "secret", &s(&v["secret"]["secretName"]));
    let files = match v["secret"]["items"].as_vec() {
        Some(items) => items
            .iter()
            .map(|i| (s(&i["path"]), data[&s(&i["key"])].clone()))
            .collect(),
        None => data.clone(),
    };
    (files, Some(default_mode(&v["secret"])))
}

/// Writes one file of a mount with its mode (a ConfigMap's: 0644).
fn write_file(path: &Path, bytes: &[u8], mode: Option<u32>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    let mode = mode.unwrap_or(0o644);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Writes the pod's volumes under `root` (ConfigMap text rewritten: it
/// names hosts, addresses and paths) and returns the mount paths'
/// rewrites.
fn mount(pod: &Pod, o: &Objects, root: &Path, base: &Rewrites) -> Vec<(String, String)> {
    let mounts = pod.container()["volumeMounts"]
        .as_vec()
        .cloned()
        .unwrap_or_default();
    let here = |m: &Yaml| root.join(s(&m["mountPath"]).trim_start_matches('/'));
    let paths: Vec<(String, String)> = mounts
        .iter()
        .map(|m| (s(&m["mountPath"]), here(m).display().to_string()))
        .collect();
    let all = Rewrites(
        base.0
            .iter()
            .cloned()
            .chain(paths.iter().cloned())
            .collect(),
    );
    for m in &mounts {
        let (files, secret) = volume(pod, o, &s(&m["name"]));
        let text = |b: &Vec<u8>| match secret {
            Some(_) => b.clone(),
            None => all.apply(std::str::from_utf8(b).unwrap()).into_bytes(),
        };
        match m["subPath"].as_str() {
            Some(key) => write_file(&here(m), &text(&files[key]), secret),
            None => {
                std::fs::create_dir_all(here(m)).unwrap();
                for (k, v) in &files {
                    write_file(&here(m).join(k), &text(v), secret);
                }
            }
        }
    }
    paths
}

/// The container's variables: `env` (values, the pod name) and `envFrom`.
fn env(pod: &Pod, o: &Objects, r: &Rewrites) -> Vec<(String, String)> {
    let c = pod.container();
    let mut out = Vec::new();
    for e in c["env"].as_vec().cloned().unwrap_or_default() {
        let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some("metadata.name") => pod.name.clone(),
            Some(other) => panic!("{}: fieldRef {other}", pod.name),
            None => r.apply(&s(&e["value"])),
        };
        out.push((s(&e["name"]), value));
    }
    for from in c["envFrom"].as_vec().cloned().unwrap_or_default() {
        let (kind, name) = if !from["configMapRef"].is_badvalue() {
            ("configMap", s(&from["configMapRef"]["name"]))
        } else {
            ("secret", s(&from["secretRef"]["name"]))
        };
        for (k, v) in object(o, kind, &name) {
            out.push((k.clone(), String::from_utf8(v.clone()).unwrap()));
        }
    }
    out
}

/// A started pod; killed on drop, its output kept in a file.
struct Running {
    pod: Pod,
    child: Child,
    log: PathBuf,
    /// The program, its arguments and its environment, to start again.
    cmd: (String, Vec<String>, Vec<(String, String)>),
    restarts: u32,
}

/// Restarts of one container the test allows (the kubelet restarts an
/// exited container forever, with backoff; one that needs more than
/// this to come up is a failure).
const RESTARTS_MAX: u32 = 3;

fn spawn(cmd: &(String, Vec<String>, Vec<(String, String)>), log: &Path) -> Child {
    let out = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Command::new(&cmd.0)
        .args(&cmd.1)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .envs(cmd.2.iter().cloned())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap()
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn get(&self, port: u16, path: &str) -> Option<(u16, String)> {
        net::http_answer(SocketAddr::from((self.pod.ip, port)), path)
    }

    /// As the kubelet (`restartPolicy: Always`): a container that exited
    /// is started again, at most [`RESTARTS_MAX`] times.
    fn restart_if_exited(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            self.restarts += 1;
            let n = self.restarts;
            assert!(
                n <= RESTARTS_MAX,
                "{} exited {n} times ({status}):\n{}",
                self.pod.name,
                self.log()
            );
            eprintln!(
                "{} exited ({status}); started again (restart {n})",
                self.pod.name
            );
            self.child = spawn(&self.cmd, &self.log);
        }
    }

    /// Every probe the manifest gives answers 200.
    fn probes_pass(&mut self) {
        for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
            let p = &self.pod.container()[probe]["httpGet"];
            if p.is_badvalue() {
                continue;
            }
            let (port, path) = (self.pod.port(&p["port"]), s(&p["path"]));
            let ok = wait::wait_until(WAIT, || {
                self.restart_if_exited();
                self.get(port, &path).is_some_and(|(st, _)| st == 200)
            });
            assert!(
                ok,
                "{} {probe} {path} on {port}:\n{}",
                self.pod.name,
                self.log()
            );
        }
    }

    /// Every declared port is listened on at the pod's address.
    fn ports_listen(&self) {
        for p in self.pod.container()["ports"]
            .as_vec()
            .cloned()
            .unwrap_or_default()
        {
            let addr = SocketAddr::from((self.pod.ip, p["containerPort"].as_i64().unwrap() as u16));
            let up = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok();
            assert!(
                up,
                "{}: port {} ({addr}) not listened on",
                self.pod.name,
                s(&p["name"])
            );
        }
    }

    fn metric(&self, series: &str) -> f64 {
        let ops = self.pod.port(&Yaml::String("ops".into()));
        self.get(ops, "/metrics")
            .and_then(|(_, m)| {
                m.lines()
                    .find_map(|l| l.strip_prefix(series))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0.0)
    }
}

/// Starts `pod` from its container spec with `base` rewrites.
fn start(pod: Pod, o: &Objects, root: &Path, base: &Rewrites) -> Running {
    let dir = root.join(&pod.name);
    let mounts = mount(&pod, o, &dir, base);
    let r = Rewrites(base.0.iter().cloned().chain(mounts).collect());
    let c = pod.container();
    let image = s(&c["image"]);
    let program = if image.starts_with("pricewire:") {
        // The image the Dockerfile builds is tagged with this version.
        let tag = format!("pricewire:{}", env!("CARGO_PKG_VERSION"));
        assert_eq!(image, tag, "{}: the image", pod.name);
        env!("CARGO_BIN_EXE_pricewire").to_string()
    } else if image.starts_with("nats:") {
        "nats-server".to_string()
    } else {
        panic!("{}: unknown image {image}", pod.name)
    };
    let args: Vec<String> = c["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| r.apply(&s(a)))
        .collect();
    let log = dir.join("output.log");
    let cmd = (program, args, env(&pod, o, &r));
    let child = spawn(&cmd, &log);
    Running {
        pod,
        child,
        log,
        cmd,
        restarts: 0,
    }
}

/// Starts every pod of `pods` and waits until each passes its probes and
/// listens on its ports.
fn start_all(pods: Vec<Pod>, o: &Objects, root: &Path, names: &[(String, String)]) -> Vec<Running> {
    let mut running: Vec<Running> = pods
        .into_iter()
        .map(|p| {
            let mut r = names.to_vec();
            r.push(("0.0.0.0".into(), p.ip.to_string()));
            start(p, o, root, &Rewrites(r))
        })
        .collect();
    for r in &mut running {
        r.probes_pass();
        r.ports_listen();
    }
    running
}

/// The LP `lp-a` on the address standing for its name, at its port.
fn lp_a() -> FixSim {
    let mut sim = SimConfig::new(vec![
        SimSymbol::new("EUR/USD", "1.08120", 5, 8),
        SimSymbol::new("GBP/USD", "1.26310", 5, 10),
        SimSymbol::new("USD/JPY", "149.870", 3, 12),
    ]);
    sim.listen = SocketAddr::from((LP_A, 9878));
    FixSim::start(sim).expect("the LP simulator on 127.0.0.30:9878")
}

/// A terminal on `edge` gets EURUSD priced from lp-a (the simulator's
/// mid, at least one provider).
fn serves_lp_prices(edge: &Running) {
    let prices = SocketAddr::from((edge.pod.ip, edge.pod.port(&Yaml::String("prices".into()))));
    let mut c = Client::connect(ClientConfig::new(prices, "desk", "t")).unwrap();
    c.subscribe_names(TIER_ACCOUNT_DEFAULT, &["EURUSD"])
        .unwrap();
    let mut got = None;
    let priced = wait::wait_until(WAIT, || {
        if let Ok(Some(Event::Price(p))) = c.next_event(Duration::from_millis(50)) {
            got = Some(p.body);
        }
        got.is_some_and(|b| b.providers >= 1 && b.bid > 107_000 && b.bid < 109_500)
    });
    assert!(
        priced,
        "{}: no EURUSD from lp-a ({got:?}):\n{}",
        edge.pod.name,
        edge.log()
    );
}

#[test]
fn the_shipped_manifests_start_with_their_own_config_env_and_secrets() {
    nats::ensure_installed();
    let root = tempfile::tempdir().unwrap();
    let redis = redis::RedisServer::start();
    redis.put_account(
        "desk",
        &[("token", redis::token_t_hash()), ("tiers", "raw")],
    );
    let _lp_a = lp_a();
    let nats_pods = pods("nats.yaml", 11);
    let o = objects(&pki::Ca::new("pw-dry-start-ca"), &nats_pods);
    // Cluster names to the addresses standing for them; lp-b never resolves.
    let mut names: Vec<(String, String)> = nats_pods
        .iter()
        .map(|p| (format!("{}.nats", p.name), p.ip.to_string()))
        .collect();
    names.push(("redis:6379".into(), redis.addr().to_string()));
    names.push(("lp-a.fix.example.net".into(), LP_A.to_string()));
    names.push((
        "lp-b.fix.example.net".into(),
        "lp-b.pricewire.invalid".into(),
    ));

    let nats = start_all(nats_pods, &o, root.path(), &names);
    for n in &nats {
        // Healthy on a cluster: JetStream has its meta leader, so the
        // cores' streams with three replicas can be made.
        let monitor = n.pod.port(&Yaml::String("monitor".into()));
        let up = wait::wait_until(WAIT, || {
            n.get(monitor, "/healthz").is_some_and(|(st, _)| st == 200)
        });
        assert!(up, "{}:\n{}", n.pod.name, n.log());
        assert!(
            n.log().contains("TLS required for client connections"),
            "{}",
            n.log()
        );
    }
    let cores = start_all(pods("core.yaml", 41), &o, root.path(), &names);
    let published = "pricewire_bus_messages_total{event=\"published\"} ";
    let leading = wait::wait_until(WAIT, || cores.iter().any(|c| c.metric(published) > 0.0));
    assert!(leading, "no core publishes:\n{}", cores[0].log());
    let unresolved = "pricewire_fix_connects_total{provider=\"lp-b\",result=\"unresolved\"} ";
    for c in &cores {
        let counted = wait::wait_until(WAIT, || c.metric(unresolved) >= 1.0);
        assert!(
            counted,
            "{}: lp-b's name is not retried:\n{}",
            c.pod.name,
            c.log()
        );
    }
    let edges = start_all(pods("edge.yaml", 51), &o, root.path(), &names);
    for e in &edges {
        serves_lp_prices(e);
    }
    // The shipped file modes draw no warning about who may read them.
    for p in cores.iter().chain(&edges) {
        let log = p.log();
        assert!(
            !log.contains("readable by other users"),
            "{}:\n{log}",
            p.pod.name
        );
    }
}
