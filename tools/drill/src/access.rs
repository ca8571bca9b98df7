//! The drill's secured bus: the cluster runs with the authorization the
//! shipped `deploy/scale-out/nats.yaml` gives it — cores publish prices
//! and heartbeats, call the JetStream API and write the lease bucket;
//! edges only subscribe to prices and heartbeats and read last values —
//! with one user per role (a password, from a file given by
//! `--bus-password-file`) in place of the manifests' NKeys, and a third,
//! unrestricted user for the drill's own JetStream calls (which node leads
//! a stream, deleting the lease bucket). TLS is left out: it changes how
//! a connection starts, not what is published where, and
//! `tests/it/bus_security.rs` runs both against a real nats-server.
//!
//! Off with `pricewire-drill --plain` (no authorization at all).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Context;

/// The drill's own user, unrestricted, and its password once
/// [`Access::write`] made it: every request of `nats::request` logs on
/// with it (a server without authorization ignores it).
static ADMIN: OnceLock<String> = OnceLock::new();

/// The drill's own user name.
pub const ADMIN_USER: &str = "drill";

/// The secured cluster's files: the server's authorization, one password
/// file per role.
#[derive(Debug, Clone)]
pub struct Access {
    /// The nats-server configuration file (`-c`).
    pub server_conf: PathBuf,
    core_password: PathBuf,
    edge_password: PathBuf,
}

/// A fresh random password: 16 bytes of the OS's randomness, in hex.
fn password() -> anyhow::Result<String> {
    use std::io::Read;
    let mut raw = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .context("reading /dev/urandom")?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}

impl Access {
    /// Writes the authorization for subjects under `prefix` and the
    /// password files into `dir`.
    pub fn write(dir: &Path, prefix: &str) -> anyhow::Result<Access> {
        let (core, edge) = (password()?, password()?);
        let admin = ADMIN.get_or_init(|| password().unwrap_or_else(|_| "drill-admin".into()));
        let upper = prefix.to_uppercase();
        let conf = format!(
            r#"authorization {{
  CORE = {{
    publish: ["{prefix}.price.>", "{prefix}.heartbeat", "$JS.API.>", "$KV.{upper}_LEASE.>"]
    subscribe: ["{prefix}.>", "_INBOX.>"]
  }}
  EDGE = {{
    publish: [
      "$JS.API.STREAM.INFO.{upper}_PRICES"
      "$JS.API.DIRECT.GET.{upper}_PRICES"
      "$JS.API.DIRECT.GET.{upper}_PRICES.>"
    ]
    subscribe: ["{prefix}.price.>", "{prefix}.heartbeat", "_INBOX.>"]
  }}
  users: [
    {{ user: core, password: "{core}", permissions: $CORE }}
    {{ user: edge, password: "{edge}", permissions: $EDGE }}
    {{ user: {ADMIN_USER}, password: "{admin}" }}
  ]
}}
"#
        );
        let access = Access {
            server_conf: dir.join("nats-auth.conf"),
            core_password: dir.join("core.password"),
            edge_password: dir.join("edge.password"),
        };
        std::fs::write(&access.server_conf, conf)?;
        std::fs::write(&access.core_password, core)?;
        std::fs::write(&access.edge_password, edge)?;
        Ok(access)
    }

    /// `serve` flags that log a core on.
    pub fn core_args(&self) -> Vec<String> {
        args("core", &self.core_password)
    }

    /// `serve` flags that log an edge on.
    pub fn edge_args(&self) -> Vec<String> {
        args("edge", &self.edge_password)
    }
}

fn args(user: &str, password: &Path) -> Vec<String> {
    vec![
        "--bus-user".into(),
        user.into(),
        "--bus-password-file".into(),
        password.display().to_string(),
    ]
}

/// The CONNECT options of the drill's own requests: its user once a
/// secured cluster was set up, else none.
pub fn connect_options() -> String {
    match ADMIN.get() {
        Some(pass) => {
            format!(r#"{{"verbose":false,"pedantic":false,"user":"{ADMIN_USER}","pass":"{pass}"}}"#)
        }
        None => r#"{"verbose":false,"pedantic":false}"#.into(),
    }
}
