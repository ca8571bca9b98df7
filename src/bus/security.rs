//! How a core or an edge proves who it is to NATS, and checks who NATS is
//! (docs/security.md, "The price bus").
//!
//! Credentials are the ones NATS operators issue: a user and password, a
//! token, an NKey seed, or a `.creds` file (a user JWT and its NKey seed,
//! from `nsc`). Each comes from a file or the environment, never from the
//! command line: a URL with credentials in `--bus` is refused (they would
//! show in `ps` and in every log line naming the server). A file is read
//! again at every connect attempt, so a rotated password or a renewed
//! `.creds` file is used at the next reconnect without a restart; an
//! environment variable is read once. TLS verifies the server's chain
//! against `--bus-tls-ca` and its name against the host in `--bus`.

use std::path::PathBuf;

pub use super::nats::auth::CredsError;
pub use super::nats::nkey::SeedError;

/// Environment variable of the bus password (with `--bus-user`).
pub const PASSWORD_ENV: &str = "PRICEWIRE_BUS_PASSWORD";
/// Environment variable of the bus token.
pub const TOKEN_ENV: &str = "PRICEWIRE_BUS_TOKEN";
/// Environment variable of the bus NKey seed (`SU…`).
pub const NKEY_ENV: &str = "PRICEWIRE_BUS_NKEY";
/// Largest secret file read, in bytes (a `.creds` file is about 1 KiB).
pub const SECRET_FILE_MAX: u64 = 16 * 1024;

/// Text that never prints and is wiped on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretText(String);

impl SecretText {
    /// Wraps a secret.
    pub fn new(s: String) -> SecretText {
        SecretText(s)
    }
    /// The secret, for the CONNECT message only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Drop for SecretText {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

/// Where one secret comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// A file (first line), read at every connect attempt.
    File {
        /// The flag that named it, for messages.
        flag: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// An environment variable, read once at start.
    Env {
        /// The variable's name, for messages.
        var: &'static str,
        /// Its value.
        value: SecretText,
    },
}

impl SecretSource {
    /// Where it comes from, for messages (never the secret).
    pub fn describe(&self) -> String {
        match self {
            SecretSource::File { flag, path } => format!("{flag} {}", path.display()),
            SecretSource::Env { var, .. } => var.to_string(),
        }
    }

    /// The secret now: the file's first line, or the variable's value.
    /// Errors name the source, never the content.
    pub fn read(&self) -> Result<SecretText, AccessError> {
        match self {
            SecretSource::Env { value, .. } => Ok(value.clone()),
            SecretSource::File { .. } => {
                let text = self.read_file()?;
                let line = text.0.lines().next().unwrap_or("").trim_end_matches('\r');
                if line.is_empty() {
                    return Err(AccessError::Empty {
                        from: self.describe(),
                    });
                }
                Ok(SecretText(line.to_string()))
            }
        }
    }

    /// The whole file (a `.creds` file), at most [`SECRET_FILE_MAX`].
    pub fn read_file(&self) -> Result<SecretText, AccessError> {
        use std::io::Read;
        let SecretSource::File { path, .. } = self else {
            return self.read();
        };
        let read = |source| AccessError::Read {
            from: self.describe(),
            source,
        };
        let f = std::fs::File::open(path).map_err(read)?;
        let mut text = String::new();
        f.take(SECRET_FILE_MAX + 1)
            .read_to_string(&mut text)
            .map_err(read)?;
        let text = SecretText(text);
        if text.0.len() as u64 > SECRET_FILE_MAX {
            return Err(AccessError::TooLarge {
                from: self.describe(),
            });
        }
        Ok(text)
    }
}

/// How the client authenticates (one method, or none).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum BusAuth {
    /// No credentials (a NATS without authorization).
    #[default]
    None,
    /// `--bus-user` with a password.
    User {
        /// The user name (not a secret: it is on the command line).
        user: String,
        /// The password.
        password: SecretSource,
    },
    /// A token (`authorization { token: … }`).
    Token(SecretSource),
    /// An NKey user seed (`SU…`); the server's config names its public key.
    NKey(SecretSource),
    /// A `.creds` file: a user JWT and its NKey seed (operator mode).
    Creds(SecretSource),
}

impl BusAuth {
    /// The method and where its secret comes from, for messages.
    pub fn describe(&self) -> String {
        match self {
            BusAuth::None => "no credentials".into(),
            BusAuth::User { user, password } => {
                format!(
                    "user {user:?} with the password from {}",
                    password.describe()
                )
            }
            BusAuth::Token(s) => format!("the token from {}", s.describe()),
            BusAuth::NKey(s) => format!("the NKey seed from {}", s.describe()),
            BusAuth::Creds(s) => format!("the credentials file {}", s.describe()),
        }
    }

    /// Reads and checks the secret once (at start, so a missing file or
    /// a malformed seed is refused before anything runs).
    pub fn check(&self) -> Result<(), AccessError> {
        super::nats::auth::Material::load(self).map(|_| ())
    }
}

/// Failed connect attempts by kind (`pricewire_bus_connect_failures_total
/// {reason}`).
#[derive(Debug, Default)]
pub struct ConnectFailures {
    /// Credentials refused by the server (or unreadable here).
    pub auth: crate::runtime::counter::Counter,
    /// TLS handshakes that failed, or TLS required by one side only.
    pub tls: crate::runtime::counter::Counter,
    /// Other refusals by the server during the handshake.
    pub refused: crate::runtime::counter::Counter,
    /// TCP failures: refused, unreachable, reset, timed out, closed.
    pub io: crate::runtime::counter::Counter,
}

impl ConnectFailures {
    /// The `reason` label values, in order.
    pub const REASONS: [&'static str; 4] = ["auth", "tls", "refused", "io"];

    /// Counts one failure of kind `reason` (a [`Self::REASONS`] value).
    pub fn count(&self, reason: &str) {
        match reason {
            "auth" => self.auth.inc(),
            "tls" => self.tls.inc(),
            "refused" => self.refused.inc(),
            _ => self.io.inc(),
        }
    }

    /// The count of kind `reason`.
    pub fn get(&self, reason: &str) -> u64 {
        match reason {
            "auth" => self.auth.get(),
            "tls" => self.tls.get(),
            "refused" => self.refused.get(),
            _ => self.io.get(),
        }
    }
}

/// TLS to the servers: the CAs that verify them and, for mutual TLS, this
/// client's certificate and key (PEM files, read at every connect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusTls {
    /// `--bus-tls-ca`: the CA certificates the server's chain must verify to.
    pub ca: PathBuf,
    /// `--bus-tls-cert` and `--bus-tls-key`, if the server asks for one.
    pub client: Option<(PathBuf, PathBuf)>,
}

impl BusTls {
    /// Loads the files once (at start): errors name the flag and file.
    pub fn check(&self) -> Result<(), AccessError> {
        super::nats::tls::client_config(self).map(|_| ())
    }
}

/// Checks one `--bus` URL: `nats://host:port` or `tls://host:port`, no
/// credentials in it.
pub(crate) fn check_server(s: &str) -> Result<(), ServerUrlError> {
    let Some(rest) = s
        .strip_prefix("nats://")
        .or_else(|| s.strip_prefix("tls://"))
    else {
        return Err(ServerUrlError::Scheme);
    };
    if rest.contains('@') {
        return Err(ServerUrlError::Credentials);
    }
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err(ServerUrlError::NoPort);
    };
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(ServerUrlError::HostPort);
    }
    Ok(())
}

/// Why a `--bus` URL was refused (the message follows the redacted URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ServerUrlError {
    /// Neither `nats://` nor `tls://`.
    #[error("must start with nats:// or tls://")]
    Scheme,
    /// A user or password in the URL.
    #[error(
        "credentials in a URL are refused: ps and every log line naming the server \
         would show them; give --bus-user with --bus-password-file (or {PASSWORD_ENV}), \
         --bus-token-file ({TOKEN_ENV}), --bus-nkey-file ({NKEY_ENV}) or --bus-creds-file"
    )]
    Credentials,
    /// No `:port`.
    #[error("must be nats://host:port")]
    NoPort,
    /// An empty host, or a port outside 1..=65535.
    #[error("must be nats://host:port with a port 1..=65535")]
    HostPort,
}

/// Why the bus credentials or TLS files could not be used. Each variant
/// names the flag, variable or file (`from`), never a secret; the TLS
/// ones name the flag and keep the file's error as `source()`.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// A secret file whose first line is empty.
    #[error("{from}: empty")]
    Empty {
        /// The flag and file ([`SecretSource::describe`]).
        from: String,
    },
    /// A secret file that could not be opened or read.
    #[error("{from}: {source}")]
    Read {
        /// The flag and file.
        from: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A secret file larger than [`SECRET_FILE_MAX`].
    #[error("{from}: larger than {SECRET_FILE_MAX} bytes")]
    TooLarge {
        /// The flag and file.
        from: String,
    },
    /// An NKey seed that does not parse.
    #[error("{from}: {source}")]
    Seed {
        /// Where the seed came from.
        from: String,
        /// Why it is not a user's seed.
        source: SeedError,
    },
    /// A `.creds` file that does not parse.
    #[error("{from}: {source}")]
    Creds {
        /// The flag and file.
        from: String,
        /// What is wrong with it.
        source: CredsError,
    },
    /// An NKey or JWT user, but the server sent no nonce to sign.
    #[error("the server sent no nonce in INFO: it has no NKey or JWT users")]
    NoNonce,
    /// `--bus-tls-ca` or `--bus-tls-cert` could not be loaded.
    #[error("{flag} {source}")]
    TlsFile {
        /// The flag that named the file.
        flag: &'static str,
        /// The file and what is wrong with it.
        source: crate::runtime::tls::TlsError,
    },
    /// `--bus-tls-key` holds no usable PEM private key.
    #[error("--bus-tls-key {}: {source}", path.display())]
    TlsKey {
        /// The key file.
        path: PathBuf,
        /// The PEM error (never key bytes).
        source: rustls::pki_types::pem::Error,
    },
    /// rustls refused the protocol versions of the provider.
    #[error("{0}")]
    TlsVersions(#[source] rustls::Error),
    /// rustls refused the client certificate and key as a pair.
    #[error("--bus-tls-cert/--bus-tls-key: {0}")]
    TlsClientAuth(#[source] rustls::Error),
}

/// `url` with any credentials in it replaced by `***` (for messages).
pub(crate) fn redact(url: &str) -> String {
    match url
        .split_once("://")
        .and_then(|(scheme, rest)| Some((scheme, rest.rsplit_once('@')?.1)))
    {
        Some((scheme, host)) => format!("{scheme}://***@{host}"),
        None => url.to_string(),
    }
}

/// True if any server is given as `tls://`.
pub(crate) fn tls_scheme(servers: &[String]) -> bool {
    servers.iter().any(|s| s.starts_with("tls://"))
}

/// The host of a `--bus` URL (or a learned `host:port`).
pub(crate) fn host_of(server: &str) -> &str {
    let rest = server
        .strip_prefix("nats://")
        .or_else(|| server.strip_prefix("tls://"))
        .unwrap_or(server);
    rest.rsplit_once(':').map_or(rest, |(h, _)| h)
}
