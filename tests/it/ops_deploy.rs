//! The deploy manifests and alert rules cannot drift from the code: budgets,
//! probes and ports are checked against the binary's own default constants,
//! and every metric the alerts use must be a documented family.

use pricewire::ops::metrics::catalogue;
use pricewire::ops::{
    OpsArgs, DEFAULT_DRAIN_DELAY_MS, DEFAULT_GRACE_MS, DEFAULT_OPS_LISTEN, DEFAULT_STAGGER_CAP_MS,
    DEFAULT_STAGGER_JITTER_MS, STARTUP_ALLOWANCE_MS,
};
use std::net::SocketAddr;
use std::path::Path;
use yaml_rust2::{Yaml, YamlLoader};

const PRICES_PORT: i64 = 9400;

fn load(file: &str) -> Vec<Yaml> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn workloads() -> Vec<(String, Yaml)> {
    let mut out = Vec::new();
    for file in ["statefulset.yaml", "deployment.yaml"] {
        for doc in load(file) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            if kind == "StatefulSet" || kind == "Deployment" {
                out.push((kind, doc));
            }
        }
    }
    assert_eq!(out.len(), 2, "one StatefulSet and one Deployment");
    out
}

fn container(workload: &Yaml) -> &Yaml {
    let containers = workload["spec"]["template"]["spec"]["containers"]
        .as_vec()
        .expect("containers");
    containers
        .iter()
        .find(|c| c["name"].as_str() == Some("pricewire"))
        .expect("a container named pricewire")
}

fn args(c: &Yaml) -> Vec<String> {
    c["args"]
        .as_vec()
        .expect("args")
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// The ops flags the container runs with, parsed by the real flag parser.
fn effective_ops_args(c: &Yaml) -> OpsArgs {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        ops: OpsArgs,
    }
    use clap::Parser;
    let all = args(c);
    assert_eq!(all.first().map(String::as_str), Some("serve"));
    let mut ops_only = vec!["pricewire".to_string()];
    let mut rest = all[1..].iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().expect("every flag has a value");
        if flag != "--listen" {
            ops_only.extend([flag.clone(), value.clone()]);
        }
    }
    Cli::try_parse_from(ops_only)
        .expect("manifest flags parse")
        .ops
}

fn port_of(c: &Yaml, name: &str) -> i64 {
    let ports = c["ports"].as_vec().expect("ports");
    let port = ports
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .expect(name);
    port["containerPort"].as_i64().unwrap()
}

fn pre_stop_sleep_s(c: &Yaml) -> i64 {
    let pre_stop = &c["lifecycle"]["preStop"];
    if pre_stop.is_badvalue() {
        return 0;
    }
    if let Some(s) = pre_stop["sleep"]["seconds"].as_i64() {
        return s;
    }
    // exec: ["sleep", "N"]
    let cmd = pre_stop["exec"]["command"]
        .as_vec()
        .expect("a preStop sleep or exec");
    cmd.iter()
        .filter_map(|a| a.as_str()?.parse().ok())
        .next()
        .expect("sleep seconds")
}

#[test]
fn workloads_run_the_image_with_the_documented_flags_and_ports() {
    let ops_port = i64::from(DEFAULT_OPS_LISTEN.parse::<SocketAddr>().unwrap().port());
    for (kind, w) in workloads() {
        let c = container(&w);
        let image = format!("pricewire:{}", env!("CARGO_PKG_VERSION"));
        assert_eq!(c["image"].as_str(), Some(image.as_str()), "{kind}");
        let a = args(c);
        let flag = |f: &str| a.iter().position(|x| x == f).map(|i| a[i + 1].clone());
        assert_eq!(flag("--listen").as_deref(), Some("0.0.0.0:9400"), "{kind}");
        assert_eq!(
            flag("--ops-listen").as_deref(),
            Some("0.0.0.0:9401"),
            "{kind}"
        );
        assert_eq!(port_of(c, "prices"), PRICES_PORT, "{kind}");
        assert_eq!(
            port_of(c, "ops"),
            ops_port,
            "{kind}: ops port matches the binary's default"
        );
        effective_ops_args(c)
            .validate_with_env(|_| None)
            .expect("manifest flags are valid");
    }
}

#[test]
fn termination_grace_covers_drain_delay_and_shutdown_budget() {
    for (kind, w) in workloads() {
        let c = container(&w);
        let ops = effective_ops_args(c);
        let tgps_ms = w["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            .as_i64()
            .expect("terminationGracePeriodSeconds") as u64
            * 1000;
        let pre_stop_ms = pre_stop_sleep_s(c) as u64 * 1000;
        // The application's grace already contains its drain delay; the
        // kubelet's clock also runs through any preStop sleep. Require the
        // stricter sum (preStop + drain delay + grace), which leaves the
        // drain delay as margin before SIGKILL.
        let needed_ms = pre_stop_ms + ops.drain_delay_ms + ops.grace_ms;
        assert!(
            tgps_ms >= needed_ms,
            "{kind}: terminationGracePeriodSeconds {tgps_ms} ms < {needed_ms} ms"
        );
        assert_eq!(
            (ops.drain_delay_ms, ops.grace_ms),
            (DEFAULT_DRAIN_DELAY_MS, DEFAULT_GRACE_MS),
            "{kind}"
        );
    }
}

#[test]
fn probes_hit_the_ops_port_and_startup_covers_the_largest_stagger() {
    for (kind, w) in workloads() {
        let c = container(&w);
        let ops = effective_ops_args(c);
        for (probe, path) in [
            ("startupProbe", "/startupz"),
            ("readinessProbe", "/readyz"),
            ("livenessProbe", "/livez"),
        ] {
            let get = &c[probe]["httpGet"];
            assert_eq!(get["path"].as_str(), Some(path), "{kind} {probe}");
            let port = &get["port"];
            let on_ops = port.as_str() == Some("ops") || port.as_i64() == Some(port_of(c, "ops"));
            assert!(on_ops, "{kind} {probe} on the ops port");
        }
        let startup = &c["startupProbe"];
        let period_s = startup["periodSeconds"].as_i64().unwrap_or(10);
        let failures = startup["failureThreshold"].as_i64().unwrap_or(3);
        let initial_s = startup["initialDelaySeconds"].as_i64().unwrap_or(0);
        let covered_ms = ((failures * period_s + initial_s) * 1000) as u64;
        let largest_start_ms = ops.stagger_cap_ms + ops.stagger_jitter_ms + STARTUP_ALLOWANCE_MS;
        assert!(
            covered_ms >= largest_start_ms,
            "{kind}: startupProbe covers {covered_ms} ms < {largest_start_ms} ms"
        );
        assert_eq!(
            (ops.stagger_cap_ms, ops.stagger_jitter_ms),
            (DEFAULT_STAGGER_CAP_MS, DEFAULT_STAGGER_JITTER_MS)
        );
    }
}

#[test]
fn statefulset_starts_pods_in_parallel_so_the_stagger_decides() {
    let (_, sts) = workloads()
        .into_iter()
        .find(|(k, _)| k == "StatefulSet")
        .unwrap();
    assert_eq!(
        sts["spec"]["podManagementPolicy"].as_str(),
        Some("Parallel")
    );
    let service = sts["spec"]["serviceName"].as_str().unwrap();
    let governing = load("statefulset.yaml").into_iter().any(|d| {
        d["kind"].as_str() == Some("Service") && d["metadata"]["name"].as_str() == Some(service)
    });
    assert!(governing, "governing headless service {service} is defined");
}

#[test]
fn service_exposes_prices_and_ops_for_the_workloads() {
    let docs = load("service.yaml");
    let svc = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("Service"))
        .expect("a Service");
    let selector = &svc["spec"]["selector"];
    for (kind, w) in workloads() {
        let labels = &w["spec"]["template"]["metadata"]["labels"];
        for (k, v) in selector.as_hash().unwrap() {
            assert_eq!(
                &labels[k.as_str().unwrap()],
                v,
                "{kind} pods match the Service selector"
            );
        }
    }
    let ports: Vec<i64> = svc["spec"]["ports"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|p| p["port"].as_i64().unwrap())
        .collect();
    assert!(
        ports.contains(&PRICES_PORT) && ports.contains(&9401),
        "{ports:?}"
    );
}

/// Every `pricewire_*` identifier in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("pricewire_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

#[test]
fn alerts_use_only_documented_metrics_and_cover_the_required_cases() {
    let docs = load("alerts.yaml");
    let rules = docs[0]["groups"][0]["rules"]
        .as_vec()
        .expect("groups[0].rules");
    let mut used = Vec::new();
    for rule in rules {
        let name = rule["alert"].as_str().expect("alert name");
        let expr = rule["expr"].as_str().expect("expr");
        assert!(rule["for"].as_str().is_some(), "{name}: for");
        assert!(
            rule["labels"]["severity"].as_str().is_some(),
            "{name}: severity"
        );
        assert!(
            rule["annotations"]["summary"].as_str().is_some(),
            "{name}: summary"
        );
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{name}: uses a pricewire metric");
        for m in names {
            assert!(
                catalogue::is_documented_sample(&m),
                "{name}: {m} is not a documented family"
            );
            used.push((m, rule["for"].as_str().unwrap().to_string()));
        }
    }
    let uses = |m: &str| used.iter().find(|(u, _)| u == m);
    assert_eq!(
        uses(catalogue::BREAKER_STATE).map(|(_, f)| f.as_str()),
        Some("5m"),
        "breaker open > 5 minutes"
    );
    for m in [
        catalogue::SLOW_CONSUMER_DISCONNECTS,
        catalogue::SHEDS,
        catalogue::RECORDER_LOST_TICKS,
        catalogue::PROVIDER_HEALTHY,
        catalogue::PROVIDER_DAMPED,
    ] {
        assert!(uses(m).is_some(), "an alert on {m}");
    }
}

#[test]
fn operations_doc_lists_every_metric_family() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md");
    let doc = std::fs::read_to_string(path).expect("docs/operations.md");
    for f in catalogue::FAMILIES {
        assert!(
            doc.contains(&format!("`{}`", f.name)),
            "{} is not in docs/operations.md",
            f.name
        );
    }
}

// ---- deploy/scale-out: NATS cluster, cores, edges (docs/scale-out.md) ----

/// Every document of one scale-out manifest.
fn scale_out(file: &str) -> Vec<Yaml> {
    load(&format!("scale-out/{file}"))
}

fn find<'a>(docs: &'a [Yaml], kind: &str, name: &str) -> &'a Yaml {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("{kind} {name}"))
}

/// The container's `serve` flags through the binary's own parser.
fn serve_args(c: &Yaml) -> pricewire::cli::serve::ServeArgs {
    use clap::Parser;
    let argv = std::iter::once("pricewire".to_string()).chain(args(c));
    match pricewire::cli::Cli::try_parse_from(argv)
        .expect("manifest flags parse")
        .command
    {
        pricewire::cli::Command::Serve(a) => *a,
        other => panic!("not serve: {other:?}"),
    }
}

/// The client URL of every NATS node, in ordinal order, from the cluster's
/// StatefulSet and its governing Service.
fn nats_nodes() -> Vec<String> {
    let docs = scale_out("nats.yaml");
    let sts = find(&docs, "StatefulSet", "nats");
    let service = sts["spec"]["serviceName"].as_str().unwrap();
    let replicas = sts["spec"]["replicas"].as_i64().unwrap();
    (0..replicas)
        .map(|i| format!("tls://nats-{i}.{service}:4222"))
        .collect()
}

#[test]
fn the_nats_cluster_has_three_jetstream_nodes_routed_to_each_other() {
    let docs = scale_out("nats.yaml");
    let sts = find(&docs, "StatefulSet", "nats");
    assert_eq!(sts["spec"]["replicas"].as_i64(), Some(3));
    let governing = find(
        &docs,
        "Service",
        sts["spec"]["serviceName"].as_str().unwrap(),
    );
    assert_eq!(governing["spec"]["clusterIP"].as_str(), Some("None"));
    let conf = find(&docs, "ConfigMap", "nats-config")["data"]["nats.conf"]
        .as_str()
        .unwrap();
    assert!(conf.contains("jetstream {"), "JetStream on");
    for node in nats_nodes() {
        let route = node.replace("tls://", "nats://").replace(":4222", ":6222");
        assert!(conf.contains(&route), "route {route}");
    }
}

#[test]
fn cores_are_two_publishing_to_every_nats_node_with_three_copies() {
    let docs = scale_out("core.yaml");
    let sts = find(&docs, "StatefulSet", "pricewire-core");
    assert_eq!(
        sts["spec"]["replicas"].as_i64(),
        Some(2),
        "active + standby"
    );
    let c = container(sts);
    let a = serve_args(c);
    let Ok(Some(pricewire::bus::BusRole::Core(bus))) = a.bus_role() else {
        panic!("a core: {:?}", a.bus_role().err());
    };
    assert_eq!(bus.servers, nats_nodes(), "every NATS node, in order");
    assert_eq!(bus.replicas, 3, "the stream survives a node");
    assert!(a.no_synthetic, "a core prices from its LPs only");
    let has_prices = c["ports"]
        .as_vec()
        .unwrap()
        .iter()
        .any(|p| p["name"].as_str() == Some("prices"));
    assert!(!has_prices, "a core has no subscriber port");
}

#[test]
fn edges_sit_behind_a_service_that_keeps_terminal_addresses() {
    let docs = scale_out("edge.yaml");
    let edge = find(&docs, "Deployment", "pricewire-edge");
    let c = container(edge);
    let a = serve_args(c);
    let Ok(Some(pricewire::bus::BusRole::Edge(bus))) = a.bus_role() else {
        panic!("an edge: {:?}", a.bus_role().err());
    };
    assert_eq!(bus.servers, nats_nodes());
    assert_eq!(port_of(c, "prices"), PRICES_PORT);
    let svc = find(&docs, "Service", "pricewire-edge");
    assert_eq!(
        svc["spec"]["externalTrafficPolicy"].as_str(),
        Some("Local"),
        "per-IP limits see the terminal's address"
    );
    let labels = &edge["spec"]["template"]["metadata"]["labels"];
    for (k, v) in svc["spec"]["selector"].as_hash().unwrap() {
        assert_eq!(&labels[k.as_str().unwrap()], v, "edges match the Service");
    }
}

#[test]
fn the_edges_proxy_protocol_note_names_flags_the_binary_takes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/scale-out/edge.yaml");
    let text = std::fs::read_to_string(path).expect("edge.yaml");
    let note = text
        .lines()
        .find_map(|l| l.strip_prefix("#   --proxy-protocol"))
        .expect("edge.yaml notes the PROXY protocol flags");
    let docs = scale_out("edge.yaml");
    let c = container(find(&docs, "Deployment", "pricewire-edge"));
    let mut argv = vec!["pricewire".to_string()];
    argv.extend(args(c));
    argv.push("--proxy-protocol".into());
    argv.extend(note.split_whitespace().map(String::from));
    use clap::Parser;
    let cli = pricewire::cli::Cli::try_parse_from(argv).expect("the noted flags parse");
    let pricewire::cli::Command::Serve(a) = cli.command else {
        panic!("not serve");
    };
    let cfg = a
        .gateway
        .gateway_config(
            pricewire::runtime::WaitStrategy::SpinPark,
            &Default::default(),
        )
        .expect("a gateway config")
        .expect("edges listen");
    let proxy = cfg.proxy.expect("PROXY v2 on");
    assert!(proxy.allow.allows("10.20.30.40".parse().unwrap()));
    assert!(!proxy.allow.allows("192.0.2.1".parse().unwrap()));
    let svc = find(&docs, "Service", "pricewire-edge");
    assert_eq!(svc["spec"]["externalTrafficPolicy"].as_str(), Some("Local"));
}

#[test]
fn cores_and_edges_run_the_shipped_budgets_and_probes() {
    let core = scale_out("core.yaml");
    let edge = scale_out("edge.yaml");
    for w in [
        find(&core, "StatefulSet", "pricewire-core"),
        find(&edge, "Deployment", "pricewire-edge"),
    ] {
        let c = container(w);
        let ops = serve_args(c).ops;
        ops.validate_with_env(|_| None).expect("ops flags valid");
        let tgps_ms = w["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            .as_i64()
            .unwrap() as u64
            * 1000;
        assert!(tgps_ms >= ops.drain_delay_ms + ops.grace_ms);
        for (probe, path) in [
            ("startupProbe", "/startupz"),
            ("readinessProbe", "/readyz"),
            ("livenessProbe", "/livez"),
        ] {
            assert_eq!(c[probe]["httpGet"]["path"].as_str(), Some(path));
            assert_eq!(c[probe]["httpGet"]["port"].as_str(), Some("ops"));
        }
        let startup = &c["startupProbe"];
        let covered_ms = (startup["periodSeconds"].as_i64().unwrap()
            * startup["failureThreshold"].as_i64().unwrap()
            * 1000) as u64;
        assert!(covered_ms >= ops.stagger_cap_ms + ops.stagger_jitter_ms + STARTUP_ALLOWANCE_MS);
    }
}

#[test]
fn the_shared_config_is_valid_and_its_lp_passwords_come_from_the_secret() {
    let docs = scale_out("config.yaml");
    let text = find(&docs, "ConfigMap", "pricewire-config")["data"]["pricewire.toml"]
        .as_str()
        .unwrap();
    // No password in the file: each LP names a variable, which core.yaml
    // fills from a Secret.
    assert!(!text.contains("password ="), "no password in the ConfigMap");
    let core = scale_out("core.yaml");
    let c = container(find(&core, "StatefulSet", "pricewire-core"));
    assert!(c["envFrom"][0]["secretRef"]["name"].as_str().is_some());
    let vars: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("password_env = "))
        .map(|v| v.trim_matches('"'))
        .collect();
    assert_eq!(vars.len(), 2);
    for v in &vars {
        // The only test in this binary that reads these variables.
        std::env::set_var(v, "from-the-secret");
    }
    let config = pricewire::config::Config::parse(text, 0).expect("config parses");
    assert_eq!(config.fix.len(), 2, "two FIX LPs");
    assert_eq!(config.table.by_name("USDJPY").map(|i| i.digits), Some(3));
}
