//! The container image cannot drift from the manifests or from what the
//! binary needs at run time.
//!
//! - The Dockerfile's final stage (user, exposed ports, entrypoint, default
//!   command) agrees with every pricewire container in `deploy/`: the image
//!   tag is this crate's version, the container runs as the image's non-root
//!   user, its ports are ones the image exposes, its args are a pricewire
//!   subcommand (the entrypoint is the binary).
//! - The runtime layout: the binary links only libraries the final stage
//!   (distroless `cc-debian12`) carries, and started the way the image
//!   starts it — in an otherwise empty root holding just those libraries,
//!   an `/etc/passwd`, `/tmp` and `/proc`, as uid 65532, with the image's
//!   default command (addresses moved to free loopback ports) — it answers
//!   `/livez` and streams prices to a subscriber. This part needs root
//!   (`chroot`, `unshare`), which CI has; elsewhere it says so and passes.
//!
//! No container engine runs on the build machines and the base images'
//! registries are not reachable from them, so the image itself is not
//! built here; this test checks everything about it that can be checked
//! without one.

use crate::util::net;
use crate::util::wait;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pricewire::client::{Client, ClientConfig, Event};
use yaml_rust2::{Yaml, YamlLoader};

/// What `gcr.io/distroless/cc-debian12` provides under
/// `/lib/x86_64-linux-gnu` (glibc, libgcc-s1, libstdc++6, libgomp1) and the
/// dynamic loader: the only shared objects the binary may need.
const FINAL_STAGE_LIBS: &[&str] = &[
    "ld-linux-x86-64.so.2",
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "libgomp.so.1",
];
/// The distroless `nonroot` user.
const NONROOT_UID: u32 = 65532;

/// The final stage of the Dockerfile, as the test reads it.
#[derive(Debug, Default)]
struct FinalStage {
    from: String,
    user: String,
    expose: BTreeSet<i64>,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn json_array(text: &str) -> Vec<String> {
    let inner = text.trim().trim_start_matches('[').trim_end_matches(']');
    inner
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Instructions after the last `FROM` (line continuations joined).
fn final_stage() -> FinalStage {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).expect("Dockerfile");
    let joined = text.replace("\\\n", " ");
    let mut stage = FinalStage::default();
    for line in joined.lines().map(str::trim) {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "FROM" => {
                stage = FinalStage {
                    from: rest.trim().to_string(),
                    ..FinalStage::default()
                }
            }
            "USER" => stage.user = rest.trim().to_string(),
            "EXPOSE" => stage
                .expose
                .extend(rest.split_whitespace().map(|p| p.parse::<i64>().unwrap())),
            "ENTRYPOINT" => stage.entrypoint = json_array(rest),
            "CMD" => stage.cmd = json_array(rest),
            _ => {}
        }
    }
    stage
}

/// Every pricewire container in `deploy/` (single box and scale-out) and
/// its file.
fn pricewire_containers() -> Vec<(String, Yaml)> {
    let mut out = Vec::new();
    for file in [
        "deployment.yaml",
        "statefulset.yaml",
        "scale-out/core.yaml",
        "scale-out/edge.yaml",
    ] {
        let text = std::fs::read_to_string(repo().join("deploy").join(file)).unwrap();
        for doc in YamlLoader::load_from_str(&text).unwrap() {
            let spec = &doc["spec"]["template"]["spec"];
            for c in spec["containers"].as_vec().into_iter().flatten() {
                if c["image"]
                    .as_str()
                    .is_some_and(|i| i.starts_with("pricewire"))
                {
                    out.push((file.to_string(), c.clone()));
                }
            }
        }
    }
    assert!(
        out.len() >= 4,
        "the Deployment, the StatefulSet, the cores and the edges"
    );
    out
}

#[test]
fn the_dockerfile_agrees_with_every_manifest() {
    let stage = final_stage();
    assert!(
        stage.from.starts_with("gcr.io/distroless/cc-debian12"),
        "{stage:?}"
    );
    assert_eq!(stage.user, format!("{NONROOT_UID}:{NONROOT_UID}"));
    assert_eq!(stage.entrypoint, ["/usr/local/bin/pricewire"]);
    assert_eq!(stage.cmd.first().map(String::as_str), Some("serve"));
    let tag = format!("pricewire:{}", env!("CARGO_PKG_VERSION"));
    for (file, c) in pricewire_containers() {
        assert_eq!(c["image"].as_str(), Some(tag.as_str()), "{file}: image");
        let sc = &c["securityContext"];
        assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true), "{file}");
        assert_eq!(sc["runAsUser"].as_i64(), Some(NONROOT_UID.into()), "{file}");
        assert_eq!(
            sc["allowPrivilegeEscalation"].as_bool(),
            Some(false),
            "{file}"
        );
        for p in c["ports"].as_vec().into_iter().flatten() {
            let port = p["containerPort"].as_i64().unwrap();
            assert!(stage.expose.contains(&port), "{file}: {port} not exposed");
        }
        let args: Vec<&str> = c["args"]
            .as_vec()
            .unwrap()
            .iter()
            .filter_map(Yaml::as_str)
            .collect();
        assert_eq!(
            args.first(),
            Some(&"serve"),
            "{file}: args run a subcommand"
        );
        assert!(
            c["command"].is_badvalue(),
            "{file}: the entrypoint is the binary"
        );
    }
}

/// The shared objects `binary` loads, by file name and path.
fn linked_libraries(binary: &Path) -> Vec<(String, PathBuf)> {
    let out = Command::new("ldd").arg(binary).output().expect("ldd");
    assert!(out.status.success(), "ldd failed");
    let mut libs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or
        // "/lib64/ld-linux-x86-64.so.2 (0x…)"; the vDSO has no file.
        let path = match line.split_once("=>") {
            Some((_, right)) => right.trim(),
            None => line.trim(),
        };
        let path = path.split_whitespace().next().unwrap_or_default();
        if path.starts_with('/') {
            let name = Path::new(path)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            libs.push((name, PathBuf::from(path)));
        }
    }
    libs
}

#[test]
fn the_binary_links_only_what_the_final_stage_carries() {
    let libs = linked_libraries(Path::new(env!("CARGO_BIN_EXE_pricewire")));
    assert!(libs.iter().any(|(n, _)| n == "libc.so.6"), "{libs:?}");
    for (name, path) in &libs {
        assert!(
            FINAL_STAGE_LIBS.contains(&name.as_str()),
            "{} is not in the final stage",
            path.display()
        );
    }
}

/// An otherwise empty root: the binary where the image puts it, its
/// libraries where the loader looks, the nonroot user, `/tmp`, `/proc`.
fn image_root(dir: &Path) {
    let bin = dir.join("usr/local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_pricewire"), bin.join("pricewire")).unwrap();
    for (_, path) in linked_libraries(Path::new(env!("CARGO_BIN_EXE_pricewire"))) {
        let to = dir.join(path.strip_prefix("/").unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&path, &to).unwrap();
    }
    std::fs::create_dir_all(dir.join("etc")).unwrap();
    let passwd =
        format!("nonroot:x:{NONROOT_UID}:{NONROOT_UID}:nonroot:/home/nonroot:/sbin/nologin\n");
    std::fs::write(dir.join("etc/passwd"), passwd).unwrap();
    std::fs::write(dir.join("etc/group"), format!("nonroot:x:{NONROOT_UID}:\n")).unwrap();
    for d in ["tmp", "proc", "home/nonroot"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
}

/// The image's default command with its listen addresses moved to free
/// loopback ports.
fn default_command(listen: &str, ops: &str) -> Vec<String> {
    final_stage()
        .cmd
        .into_iter()
        .map(|a| match a.as_str() {
            "0.0.0.0:9400" => listen.to_string(),
            "0.0.0.0:9401" => ops.to_string(),
            _ => a,
        })
        .collect()
}

#[test]
fn the_image_layout_runs_as_nonroot_in_an_empty_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: chroot and unshare need root (CI runs as root)");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    image_root(root.path());
    let (listen, ops) = (net::free_addr(), net::free_addr());
    // unshare and chroot each exec the next program in the same process,
    // so the child is the server itself and dropping it kills the server
    // (a forked child would outlive it: chroot's change of user clears the
    // parent-death signal).
    let mut cmd = Command::new("unshare");
    cmd.arg("--mount")
        .arg(format!(
            "--mount-proc={}",
            root.path().join("proc").display()
        ))
        .args(["chroot", &format!("--userspec={NONROOT_UID}:{NONROOT_UID}")])
        .arg(root.path())
        .arg("/usr/local/bin/pricewire")
        .args(default_command(&listen.to_string(), &ops.to_string()));
    let _server = net::start_ready(&mut cmd, ops);
    assert_eq!(net::http_status(ops, "/livez"), Some(200));
    let mut client = Client::connect(ClientConfig::new(listen, "demo", "demo")).expect("logon");
    client.subscribe_names(0xFF, &["EURUSD"]).unwrap();
    let got = wait::wait_until(Duration::from_secs(20), || {
        matches!(
            client.next_event(Duration::from_millis(50)),
            Ok(Some(Event::Price(_)))
        )
    });
    assert!(got, "no price from the server in the image's layout");
}
