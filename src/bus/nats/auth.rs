//! The credentials one connect attempt sends: read from their source
//! (`bus::security`), checked, and put into CONNECT — a user and
//! password, a token, or an NKey public key (or a user JWT) with the
//! Ed25519 signature of the server's nonce.
//!
//! A `.creds` file as `nsc` writes it holds two armoured blocks, the user
//! JWT and then the user's NKey seed:
//!
//! ```text
//! -----BEGIN NATS USER JWT-----
//! eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.…
//! ------END NATS USER JWT------
//! …
//! -----BEGIN USER NKEY SEED-----
//! SUA…
//! ------END USER NKEY SEED------
//! ```

use super::json::Writer;
use super::nkey::Seed;
use super::nkey::SeedError;
use crate::bus::security::{AccessError, BusAuth, SecretText};

/// What CONNECT carries for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Material {
    None,
    User { user: String, pass: SecretText },
    Token(SecretText),
    NKey(Seed),
    Jwt { jwt: String, seed: Seed },
}

impl Material {
    /// Reads `auth`'s secret now; errors name the source, never a secret.
    pub(crate) fn load(auth: &BusAuth) -> Result<Material, AccessError> {
        Ok(match auth {
            BusAuth::None => Material::None,
            BusAuth::User { user, password } => Material::User {
                user: user.clone(),
                pass: password.read()?,
            },
            BusAuth::Token(s) => Material::Token(s.read()?),
            BusAuth::NKey(s) => {
                let seed = Seed::parse(s.read()?.expose()).map_err(|source| AccessError::Seed {
                    from: s.describe(),
                    source,
                })?;
                Material::NKey(seed)
            }
            BusAuth::Creds(s) => {
                let text = s.read_file()?;
                let (jwt, seed) =
                    parse_creds(text.expose()).map_err(|source| AccessError::Creds {
                        from: s.describe(),
                        source,
                    })?;
                Material::Jwt { jwt, seed }
            }
        })
    }

    /// Adds the credentials to CONNECT; NKeys and JWTs sign `nonce`,
    /// which a server set up for them always sends.
    pub(crate) fn connect_fields(
        &self,
        w: Writer,
        nonce: Option<&str>,
    ) -> Result<Writer, AccessError> {
        let need_nonce = || nonce.ok_or(AccessError::NoNonce);
        Ok(match self {
            Material::None => w,
            Material::User { user, pass } => w.str("user", user).str("pass", pass.expose()),
            Material::Token(t) => w.str("auth_token", t.expose()),
            Material::NKey(seed) => {
                let sig = seed.sign(need_nonce()?.as_bytes());
                w.str("nkey", &seed.public_key()).str("sig", &sig)
            }
            Material::Jwt { jwt, seed } => {
                let sig = seed.sign(need_nonce()?.as_bytes());
                w.str("jwt", jwt).str("sig", &sig)
            }
        })
    }
}

/// The user JWT and seed of a `.creds` file (see the module doc).
pub(crate) fn parse_creds(text: &str) -> Result<(String, Seed), CredsError> {
    let mut blocks = armoured(text);
    let jwt = blocks.next().ok_or(CredsError::NoJwt)?;
    if jwt.split('.').count() != 3
        || !jwt
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(CredsError::NotAJwt);
    }
    let seed = blocks.next().ok_or(CredsError::NoSeed)?;
    let seed = Seed::parse(seed).map_err(CredsError::Seed)?;
    Ok((jwt.to_string(), seed))
}

/// Why a `.creds` file was refused (never any of its content).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CredsError {
    /// No armoured block at all.
    #[error("no -----BEGIN NATS USER JWT----- block: not a .creds file")]
    NoJwt,
    /// The first block is not three base64url parts.
    #[error("the JWT block is not a JWT (three base64url parts)")]
    NotAJwt,
    /// No block after the JWT.
    #[error("no -----BEGIN USER NKEY SEED----- block after the JWT")]
    NoSeed,
    /// The seed block is not a user's NKey seed.
    #[error(transparent)]
    Seed(#[from] SeedError),
}

/// The one-line bodies between armour lines (`---…---`), in order.
fn armoured(text: &str) -> impl Iterator<Item = &str> {
    let is_armour = |l: &str| {
        let l = l.trim();
        l.len() >= 6 && l.starts_with("---") && l.ends_with("---")
    };
    let mut lines = text.lines().peekable();
    std::iter::from_fn(move || {
        while let Some(l) = lines.next() {
            if !is_armour(l) {
                continue;
            }
            let body = lines.next()?.trim();
            if lines.peek().is_some_and(|l| is_armour(l)) {
                lines.next();
                return Some(body);
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::security::SecretSource;

    const SEED: &str = "SUAACAQDAQCQMBYIBEFAWDANBYHRAEISCMKBKFQXDAMRUGY4DUPB6IC5CQ";

    fn creds(jwt: &str, seed: &str) -> String {
        format!(
            "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n"
        )
    }

    #[test]
    fn a_creds_file_gives_its_jwt_and_seed() {
        let (jwt, seed) = parse_creds(&creds("aGVh.Ym9k-eQ.c2ln_", SEED)).unwrap();
        assert_eq!(jwt, "aGVh.Ym9k-eQ.c2ln_");
        assert_eq!(seed, Seed::parse(SEED).unwrap());
        let crlf = creds("a.b.c", SEED).replace('\n', "\r\n");
        assert!(parse_creds(&crlf).is_ok());
    }

    #[test]
    fn broken_creds_files_are_refused_without_the_seed() {
        let jwt_only = "-----BEGIN NATS USER JWT-----\na.b.c\n------END NATS USER JWT------\n";
        for (text, why) in [
            (String::new(), "not a .creds file"),
            (creds("not a jwt", SEED), "not a JWT"),
            (creds("a.b.c", "SUAACAQ"), "not an NKey seed"),
            (jwt_only.to_string(), "no -----BEGIN USER NKEY SEED"),
        ] {
            let e = parse_creds(&text).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
            assert!(!e.contains("SUAAC"), "{e}");
        }
    }

    #[test]
    fn connect_carries_each_method_and_signs_the_nonce() {
        let env = |v: &str| SecretSource::Env {
            var: "V",
            value: SecretText::new(v.into()),
        };
        let fields = |auth: BusAuth, nonce| {
            let m = Material::load(&auth).unwrap();
            m.connect_fields(Writer::object(), nonce).map(Writer::end)
        };
        let user = BusAuth::User {
            user: "core".into(),
            password: env("p\"w"),
        };
        assert_eq!(
            fields(user, None).unwrap(),
            r#"{"user":"core","pass":"p\"w"}"#
        );
        assert_eq!(
            fields(BusAuth::Token(env("t0k")), None).unwrap(),
            r#"{"auth_token":"t0k"}"#
        );
        let nkey = fields(BusAuth::NKey(env(SEED)), Some("nonce-Xy12")).unwrap();
        assert!(
            nkey.contains(r#""nkey":"UB43KVROR7TFJ6KAPCYRF2FJROTZAH4FHLTJLPWX4DRZCC5NASLGJBFE""#)
        );
        assert!(
            nkey.contains(r#""sig":"cZ2xJINevHLrneM7E3QqOHem8Wztw8Au"#),
            "{nkey}"
        );
        let e = fields(BusAuth::NKey(env(SEED)), None).unwrap_err();
        assert!(matches!(e, AccessError::NoNonce), "{e:?}");
        assert!(e.to_string().contains("no nonce"), "{e}");
        assert_eq!(fields(BusAuth::None, Some("n")).unwrap(), "{}");
    }
}
