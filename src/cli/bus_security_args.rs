//! Credentials and TLS flags of the bus (`serve --role core|edge`;
//! docs/security.md, "The price bus"). Secrets come from a file or an
//! environment variable, never the command line (`crate::cli::secret`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::Args;

use crate::bus::security::{
    BusAuth, BusTls, SecretSource, SecretText, NKEY_ENV, PASSWORD_ENV, TOKEN_ENV,
};
use crate::bus::BusConfig;
use crate::cli::secret::{warn_if_loose, SecretError};
use crate::cli::ArgsError;

/// Bus credentials and TLS flags of `pricewire serve`.
#[derive(Debug, Clone, Default, Args)]
pub struct BusSecurityArgs {
    /// NATS user to log on to the bus as. The password comes from
    /// --bus-password-file or PRICEWIRE_BUS_PASSWORD, never the command line.
    #[arg(long, value_name = "NAME")]
    pub bus_user: Option<String>,

    /// File whose first line is the NATS password of --bus-user. It is read
    /// again at every reconnect, so a rotated password is picked up.
    #[arg(long, value_name = "FILE")]
    pub bus_password_file: Option<PathBuf>,

    /// File whose first line is the NATS token (or PRICEWIRE_BUS_TOKEN).
    #[arg(long, value_name = "FILE")]
    pub bus_token_file: Option<PathBuf>,

    /// File whose first line is the NATS user's NKey seed (`SU…`). Or
    /// PRICEWIRE_BUS_NKEY; the server's config names its public key.
    #[arg(long, value_name = "FILE")]
    pub bus_nkey_file: Option<PathBuf>,

    /// NATS credentials file (`.creds` from nsc: user JWT and NKey seed). It is
    /// read again at every reconnect.
    #[arg(long, value_name = "FILE")]
    pub bus_creds_file: Option<PathBuf>,

    /// TLS to every NATS server, as `tls://` URLs ask; needs
    /// --bus-tls-ca. A server that offers no TLS is then refused.
    #[arg(long)]
    pub bus_tls: bool,

    /// PEM CA certificates the NATS servers' chains must verify to. Their name:
    /// the host in --bus. Turns TLS on.
    #[arg(long, value_name = "FILE")]
    pub bus_tls_ca: Option<PathBuf>,

    /// PEM certificate chain presented to NATS servers for mutual TLS. For NATS
    /// servers that require client certificates, with --bus-tls-key.
    #[arg(long, value_name = "FILE")]
    pub bus_tls_cert: Option<PathBuf>,

    /// PEM private key of --bus-tls-cert.
    #[arg(long, value_name = "FILE")]
    pub bus_tls_key: Option<PathBuf>,
}

impl BusSecurityArgs {
    /// Any of these flags given.
    pub(crate) fn any(&self) -> bool {
        self.bus_user.is_some()
            || self.bus_password_file.is_some()
            || self.bus_token_file.is_some()
            || self.bus_nkey_file.is_some()
            || self.bus_creds_file.is_some()
            || self.bus_tls
            || self.bus_tls_ca.is_some()
            || self.bus_tls_cert.is_some()
            || self.bus_tls_key.is_some()
    }

    /// `cfg` with these credentials and TLS (no file is read here:
    /// [`BusConfig::check_access`] does, once, at start).
    pub(crate) fn apply(&self, cfg: BusConfig) -> Result<BusConfig, ArgsError> {
        let auth = self.auth(&|var| std::env::var_os(var))?;
        cfg.with_security(auth, self.tls()?, self.bus_tls)
            .map_err(ArgsError::invalid)
    }

    /// Warns about every secret file group or others may read.
    pub(crate) fn warn_loose_files(&self) {
        let files = [
            ("--bus-password-file", &self.bus_password_file),
            ("--bus-token-file", &self.bus_token_file),
            ("--bus-nkey-file", &self.bus_nkey_file),
            ("--bus-creds-file", &self.bus_creds_file),
            ("--bus-tls-key", &self.bus_tls_key),
        ];
        for (flag, path) in files {
            if let Some(p) = path {
                warn_if_loose(flag, p);
            }
        }
    }

    /// The one authentication method given (by flag or variable).
    fn auth(&self, env: &dyn Fn(&str) -> Option<OsString>) -> Result<BusAuth, ArgsError> {
        let secret = |flag, file, var| secret_source(flag, file, var, env);
        let mut methods: Vec<(&str, BusAuth)> = Vec::new();
        match (&self.bus_user, self.bus_password_file.as_deref()) {
            (Some(user), file) => {
                let password =
                    secret("--bus-password-file", file, PASSWORD_ENV)?.ok_or_else(|| {
                        ArgsError::flag(
                            "--bus-user",
                            format!(
                                "give the password with --bus-password-file FILE or {PASSWORD_ENV}"
                            ),
                        )
                    })?;
                let user = user.clone();
                methods.push(("--bus-user", BusAuth::User { user, password }));
            }
            (None, Some(_)) => {
                return Err(ArgsError::flag("--bus-password-file", "needs --bus-user"))
            }
            (None, None) => {}
        }
        let token = secret(
            "--bus-token-file",
            self.bus_token_file.as_deref(),
            TOKEN_ENV,
        )?;
        if let Some(t) = token {
            methods.push(("--bus-token-file", BusAuth::Token(t)));
        }
        let nkey = secret("--bus-nkey-file", self.bus_nkey_file.as_deref(), NKEY_ENV)?;
        if let Some(k) = nkey {
            methods.push(("--bus-nkey-file", BusAuth::NKey(k)));
        }
        if let Some(path) = &self.bus_creds_file {
            let creds = SecretSource::File {
                flag: "--bus-creds-file",
                path: path.clone(),
            };
            methods.push(("--bus-creds-file", BusAuth::Creds(creds)));
        }
        match methods.len() {
            0 => Ok(BusAuth::None),
            1 => Ok(methods.remove(0).1),
            _ => {
                let named: Vec<String> = methods
                    .iter()
                    .map(|(f, a)| format!("{f} ({})", a.describe()))
                    .collect();
                Err(ArgsError::flag(
                    "bus credentials",
                    format!("give one method, not {}", named.join(" and ")),
                ))
            }
        }
    }

    /// TLS settings when TLS is asked for by a CA.
    fn tls(&self) -> Result<Option<BusTls>, ArgsError> {
        let client = match (&self.bus_tls_cert, &self.bus_tls_key) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            _ => {
                return Err(ArgsError::flag(
                    "--bus-tls-cert and --bus-tls-key",
                    "give both or neither",
                ))
            }
        };
        match (&self.bus_tls_ca, client) {
            (Some(ca), client) => Ok(Some(BusTls {
                ca: ca.clone(),
                client,
            })),
            (None, Some(_)) => Err(ArgsError::flag(
                "--bus-tls-cert",
                "needs --bus-tls-ca (TLS to the bus)",
            )),
            (None, None) => Ok(None),
        }
    }
}

/// The file flag's path, else the variable's value, else `None`.
fn secret_source(
    flag: &'static str,
    file: Option<&Path>,
    var: &'static str,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Option<SecretSource>, SecretError> {
    if let Some(path) = file {
        let path = path.to_path_buf();
        return Ok(Some(SecretSource::File { flag, path }));
    }
    let Some(value) = env(var) else {
        return Ok(None);
    };
    let value = value
        .into_string()
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| SecretError::EmptyVariable(var.to_string()))?;
    let value = SecretText::new(value);
    Ok(Some(SecretSource::Env { var, value }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::os::unix::fs::PermissionsExt;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sec: BusSecurityArgs,
    }

    fn args(flags: &[&str]) -> BusSecurityArgs {
        Cli::try_parse_from(std::iter::once("serve").chain(flags.iter().copied()))
            .unwrap()
            .sec
    }

    fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p.display().to_string()
    }

    const SEED: &str = "SUAACAQDAQCQMBYIBEFAWDANBYHRAEISCMKBKFQXDAMRUGY4DUPB6IC5CQ";

    #[test]
    fn each_method_comes_from_its_file_or_variable() {
        let dir = tempfile::tempdir().unwrap();
        let pw = file(&dir, "pw", "s3cret\n");
        let none = |_: &str| None;
        let got = args(&["--bus-user", "core", "--bus-password-file", &pw]).auth(&none);
        let Ok(BusAuth::User { user, password }) = got else {
            panic!("{got:?}")
        };
        assert_eq!(user, "core");
        assert_eq!(password.read().unwrap().expose(), "s3cret");
        let e = args(&["--bus-user", "core"])
            .auth(&|_| Some(OsString::new()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("PRICEWIRE_BUS_PASSWORD: set but empty"), "{e}");
        let env = |v: &str| (v == PASSWORD_ENV).then(|| OsString::from("from-env"));
        let Ok(BusAuth::User { password, .. }) = args(&["--bus-user", "core"]).auth(&env) else {
            panic!()
        };
        assert_eq!(password.describe(), PASSWORD_ENV);
        let env = |v: &str| (v == NKEY_ENV).then(|| OsString::from(SEED));
        assert!(matches!(args(&[]).auth(&env), Ok(BusAuth::NKey(_))));
        let token = file(&dir, "tok", "t0k");
        let got = args(&["--bus-token-file", &token]).auth(&none);
        assert!(matches!(got, Ok(BusAuth::Token(_))), "{got:?}");
        assert!(matches!(args(&[]).auth(&none), Ok(BusAuth::None)));
    }

    #[test]
    fn missing_or_conflicting_credentials_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let none = |_: &str| None;
        let e = args(&["--bus-user", "core"])
            .auth(&none)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--bus-password-file FILE or PRICEWIRE_BUS_PASSWORD"),
            "{e}"
        );
        let pw = file(&dir, "pw", "x");
        let e = args(&["--bus-password-file", &pw])
            .auth(&none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs --bus-user"), "{e}");
        let env = |v: &str| (v == TOKEN_ENV).then(|| OsString::from("t"));
        let nk = file(&dir, "nk", SEED);
        let e = args(&["--bus-nkey-file", &nk])
            .auth(&env)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("give one method") && e.contains("PRICEWIRE_BUS_TOKEN"),
            "{e}"
        );
        assert!(!e.contains(SEED), "{e}");
        let e = args(&["--bus-tls-cert", &pw])
            .tls()
            .unwrap_err()
            .to_string();
        assert!(e.contains("give both"), "{e}");
    }
}
