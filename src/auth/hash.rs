//! Stored credentials: argon2id hashes in the PHC string format, made by
//! `pricewire token hash` and checked by the argon2 crate's verifier
//! (which compares the derived key in constant time).
//!
//! A clear token may stand where a hash belongs only when the config sets
//! `insecure_plain_tokens = true` (loopback demos); it is then compared in
//! constant time. [`verify`] tells the two apart by the `$argon2id$`
//! prefix, which [`check_stored`] made sure of at load.
//!
//! **The cost window.** A PHC string carries its own cost (memory `m`,
//! passes `t`, lanes `p`), and verifying it spends what it asks for. A
//! stored hash asking for more than the [`CostWindow`] (`serve
//! --argon2-max-memory-kib`, `--argon2-max-time`,
//! `--argon2-max-parallelism`; defaults [`CostWindow::DEFAULT`], which
//! admit every hash `pricewire token hash` makes) is refused by
//! [`check_stored`] — the account record is invalid, for that account
//! only — and never reaches argon2: [`verify`] checks the window again
//! before hashing and answers "no match" outside it. Each refusal is
//! counted ([`cost_refusals`]). The window is process-wide, set once by
//! `serve` before anything is loaded ([`set_cost_window`]).

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use rand::RngCore;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Why a stored credential (or a hash's cost) is refused. No variant
/// holds any part of the value; the messages are the ones operators see
/// after the key they are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StoredError {
    /// Not an argon2id PHC string, and clear tokens are not allowed here.
    #[error("must be an argon2id PHC string (pricewire token hash)")]
    NotHash,
    /// Longer than [`STORED_LEN_MAX`].
    #[error("longer than {STORED_LEN_MAX} bytes")]
    TooLong,
    /// Starts like a hash but does not parse as a PHC string.
    #[error("not a valid PHC string: {0}")]
    NotPhc(#[source] argon2::password_hash::Error),
    /// A PHC string with no salt or no hash part.
    #[error("PHC string without salt or hash")]
    NoSaltOrHash,
    /// The PHC string's parameters are not argon2 parameters.
    #[error("argon2 parameters: {0}")]
    Params(#[source] argon2::password_hash::Error),
    /// A cost parameter above the [`CostWindow`].
    #[error("asks for argon2 {param}={asked}, above {flag} {max}")]
    CostAbove {
        /// `m`, `t` or `p`.
        param: &'static str,
        /// What the hash asks for.
        asked: u32,
        /// The window's bound.
        max: u32,
        /// The `serve` flag that sets the bound.
        flag: &'static str,
    },
    /// A clear token where only hashes are allowed.
    #[error(
        "is a clear token; store its hash instead: run `pricewire token hash` \
         and put the printed $argon2id$... string here (or set \
         insecure_plain_tokens = true for a loopback demo)"
    )]
    ClearToken,
    /// An allowed clear token of the wrong length.
    #[error("must be 1..={TOKEN_LEN_MAX} bytes")]
    PlainLength,
}

/// Why [`hash_token`] made no hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    /// The token is empty or longer than [`TOKEN_LEN_MAX`].
    #[error("a token must be 1..={TOKEN_LEN_MAX} bytes")]
    TokenLength,
    /// The salt or the hasher failed.
    #[error("{0}")]
    Argon2(#[source] argon2::password_hash::Error),
}

/// Memory cost of new hashes, KiB (19 MiB: OWASP's argon2id minimum).
pub const M_COST_KIB: u32 = 19 * 1024;
/// Passes over the memory for new hashes.
pub const T_COST: u32 = 2;
/// Lanes of new hashes (one thread per verification).
pub const P_COST: u32 = 1;
/// Salt length of new hashes, bytes.
pub const SALT_BYTES: usize = 16;
/// Longest stored credential accepted (a PHC string is about 100 bytes).
pub const STORED_LEN_MAX: usize = 256;
/// Longest clear token (config with `insecure_plain_tokens`, and the
/// token a client presents).
pub const TOKEN_LEN_MAX: usize = 64;
/// What every stored hash starts with.
pub const PHC_PREFIX: &str = "$argon2id$";

/// The most argon2 cost a stored hash may ask for (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostWindow {
    /// Most memory, KiB (`m`).
    pub memory_kib_max: u32,
    /// Most passes (`t`).
    pub time_max: u32,
    /// Most lanes (`p`).
    pub parallelism_max: u32,
}

impl CostWindow {
    /// The defaults: 64 MiB (RFC 9106's second recommended option), 4
    /// passes, 4 lanes. One verification at the most they allow costs
    /// about 6.7 times one at [`M_COST_KIB`] × [`T_COST`], and holds
    /// 64 MiB while it runs.
    pub const DEFAULT: CostWindow = CostWindow {
        memory_kib_max: 64 * 1024,
        time_max: 4,
        parallelism_max: 4,
    };
    /// Highest `--argon2-max-memory-kib` (1 GiB per verifier thread).
    pub const MEMORY_KIB_CEILING: u32 = 1024 * 1024;
    /// Highest `--argon2-max-time`.
    pub const TIME_CEILING: u32 = 64;
    /// Highest `--argon2-max-parallelism`.
    pub const PARALLELISM_CEILING: u32 = 64;

    /// `Err(why)` if `h` asks for more than the window allows.
    ///
    /// # Errors
    /// The parameter over its bound, with the flag that sets it.
    pub fn check(&self, h: &PasswordHash<'_>) -> Result<(), StoredError> {
        let p = Params::try_from(h).map_err(StoredError::Params)?;
        let over = [
            (
                "m",
                p.m_cost(),
                self.memory_kib_max,
                "--argon2-max-memory-kib",
            ),
            ("t", p.t_cost(), self.time_max, "--argon2-max-time"),
            (
                "p",
                p.p_cost(),
                self.parallelism_max,
                "--argon2-max-parallelism",
            ),
        ];
        for (param, asked, max, flag) in over {
            if asked > max {
                return Err(StoredError::CostAbove {
                    param,
                    asked,
                    max,
                    flag,
                });
            }
        }
        Ok(())
    }
}

static WINDOW: [AtomicU32; 3] = [
    AtomicU32::new(CostWindow::DEFAULT.memory_kib_max),
    AtomicU32::new(CostWindow::DEFAULT.time_max),
    AtomicU32::new(CostWindow::DEFAULT.parallelism_max),
];
static COST_REFUSED: AtomicU64 = AtomicU64::new(0);

/// Sets the process's cost window (`serve`, at start, before the config
/// file and reference data are read).
pub fn set_cost_window(w: CostWindow) {
    WINDOW[0].store(w.memory_kib_max, Relaxed);
    WINDOW[1].store(w.time_max, Relaxed);
    WINDOW[2].store(w.parallelism_max, Relaxed);
}

/// The process's cost window.
pub fn cost_window() -> CostWindow {
    CostWindow {
        memory_kib_max: WINDOW[0].load(Relaxed),
        time_max: WINDOW[1].load(Relaxed),
        parallelism_max: WINDOW[2].load(Relaxed),
    }
}

/// Stored hashes refused for asking more than the window, since start
/// (`pricewire_argon2_cost_refused_total`).
pub fn cost_refusals() -> u64 {
    COST_REFUSED.load(Relaxed)
}

/// `h` checked against the process's window, a refusal counted.
fn within_window(h: &PasswordHash<'_>) -> Result<(), StoredError> {
    cost_window().check(h).inspect_err(|_| {
        COST_REFUSED.fetch_add(1, Relaxed);
    })
}

/// The hasher with the parameters above.
fn hasher() -> Argon2<'static> {
    let params = Params::new(M_COST_KIB, T_COST, P_COST, None).expect("argon2 parameters");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Hashes `token` with a fresh random salt; the PHC string
/// (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`).
///
/// # Errors
/// The token is empty or longer than [`TOKEN_LEN_MAX`].
pub fn hash_token(token: &[u8]) -> Result<String, HashError> {
    if token.is_empty() || token.len() > TOKEN_LEN_MAX {
        return Err(HashError::TokenLength);
    }
    let mut salt = [0u8; SALT_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(HashError::Argon2)?;
    let hash = hasher()
        .hash_password(token, &salt)
        .map_err(HashError::Argon2)?;
    Ok(hash.to_string())
}

/// Whether `stored` is an argon2id PHC string (rather than a clear token).
pub fn is_hash(stored: &str) -> bool {
    stored.starts_with(PHC_PREFIX)
}

/// Checks a stored hash (a Redis account record's `token`, a config
/// file's hashed token): an argon2id PHC string of at most
/// [`STORED_LEN_MAX`] bytes that parses, with salt and hash, asking for
/// no more than the cost window (a refusal for the window is counted in
/// [`cost_refusals`]).
///
/// # Errors
/// Why it is refused (no part of the value is repeated).
pub fn check_hash(stored: &str) -> Result<(), StoredError> {
    if !is_hash(stored) {
        return Err(StoredError::NotHash);
    }
    if stored.len() > STORED_LEN_MAX {
        return Err(StoredError::TooLong);
    }
    let h = PasswordHash::new(stored).map_err(StoredError::NotPhc)?;
    if h.hash.is_none() || h.salt.is_none() {
        return Err(StoredError::NoSaltOrHash);
    }
    within_window(&h)
}

/// Checks a stored credential at load: an argon2id PHC string that
/// parses and asks for no more than the cost window, or (only when
/// `allow_plain`) a clear token of 1..=64 bytes.
///
/// # Errors
/// Why it is refused, for a message that names the key.
pub fn check_stored(stored: &str, allow_plain: bool) -> Result<(), StoredError> {
    if is_hash(stored) {
        return check_hash(stored);
    }
    if !allow_plain {
        return Err(StoredError::ClearToken);
    }
    if stored.is_empty() || stored.len() > TOKEN_LEN_MAX {
        return Err(StoredError::PlainLength);
    }
    Ok(())
}

/// Whether `presented` matches the stored credential: the argon2
/// verifier for a hash (milliseconds of CPU, see docs/security.md), a
/// constant-time comparison for a clear token. A malformed stored value,
/// or a hash asking for more than the cost window, never matches (and is
/// never hashed).
pub fn verify(stored: &str, presented: &[u8]) -> bool {
    if presented.is_empty() || presented.len() > TOKEN_LEN_MAX {
        return false;
    }
    if is_hash(stored) {
        return match PasswordHash::new(stored) {
            Ok(h) if within_window(&h).is_ok() => {
                Argon2::default().verify_password(presented, &h).is_ok()
            }
            _ => false,
        };
    }
    constant_time_eq(stored.as_bytes(), presented)
}

/// Compares secrets in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A hash of a token no one knows, verified for unknown accounts so that
/// they cost the same as a wrong token (no account enumeration by time).
pub fn decoy_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| {
        let mut t = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut t);
        let t: Vec<u8> = t.iter().map(|b| b'a' + b % 26).collect();
        hash_token(&t).expect("decoy token length")
    })
}

/// The PHC string of the built-in demo account's token `demo`, made once.
pub fn demo_hash() -> &'static str {
    static DEMO: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DEMO.get_or_init(|| hash_token(b"demo").expect("demo token length"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_verifies_its_token_only() {
        let h = hash_token(b"s3cret").unwrap();
        assert!(h.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{h}");
        assert!(check_stored(&h, false).is_ok());
        assert!(verify(&h, b"s3cret"));
        assert!(!verify(&h, b"s3cres"));
        assert!(!verify(&h, b""));
        // A second hash of the same token has its own salt.
        assert_ne!(h, hash_token(b"s3cret").unwrap());
    }

    #[test]
    fn clear_tokens_only_with_the_switch() {
        let e = check_stored("s3cret", false).unwrap_err();
        assert!(matches!(e, StoredError::ClearToken), "{e:?}");
        assert!(e.to_string().contains("pricewire token hash"), "{e}");
        assert!(check_stored("s3cret", true).is_ok());
        assert!(verify("s3cret", b"s3cret") && !verify("s3cret", b"s3cres"));
        assert!(check_stored("$argon2id$garbage", true).is_err());
        assert!(!verify("$argon2id$garbage", b"x"));
        for bad in [&b""[..], &[b'a'; 65]] {
            let e = hash_token(bad).unwrap_err();
            assert!(matches!(e, HashError::TokenLength), "{e:?}");
        }
    }

    /// A PHC string of `token` made with m, t, p (a real hash: the window
    /// must refuse it before argon2, not because it is malformed).
    fn with_cost(m: u32, t: u32, p: u32) -> String {
        let params = Params::new(m, t, p, None).unwrap();
        let salt = SaltString::encode_b64(&[7u8; SALT_BYTES]).unwrap();
        Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
            .hash_password(b"tok", &salt)
            .unwrap()
            .to_string()
    }

    #[test]
    fn the_window_admits_what_token_hash_makes_and_refuses_each_parameter_over_it() {
        let w = CostWindow::DEFAULT;
        let made = hash_token(b"tok").unwrap();
        assert!(w.check(&PasswordHash::new(&made).unwrap()).is_ok());
        let at_max = with_cost(w.memory_kib_max / 16, w.time_max, w.parallelism_max);
        assert!(w.check(&PasswordHash::new(&at_max).unwrap()).is_ok());
        // Over by one unit in each parameter alone: refused, naming it. The
        // PHC text is edited, not hashed, so nothing big is ever run.
        let base = with_cost(1024, 1, 1);
        for (from, to, flag) in [
            (
                "m=1024",
                format!("m={}", w.memory_kib_max + 1),
                "--argon2-max-memory-kib",
            ),
            ("t=1", format!("t={}", w.time_max + 1), "--argon2-max-time"),
            (
                "p=1",
                format!("p={}", w.parallelism_max + 1),
                "--argon2-max-parallelism",
            ),
        ] {
            let s = base.replacen(from, &to, 1);
            let e = w.check(&PasswordHash::new(&s).unwrap()).unwrap_err();
            assert!(
                matches!(e, StoredError::CostAbove { flag: f, .. } if f == flag),
                "{e:?}"
            );
            assert!(e.to_string().contains(flag), "{e}");
        }
    }

    /// #26: a hash asking for 256 MiB and t=3 is refused at load and by
    /// the verifier without running argon2 (edited PHC text: if argon2
    /// ran it, this test would take 256 MiB and seconds).
    #[test]
    fn a_hash_asking_for_256_mib_is_refused_and_never_run() {
        let h = with_cost(1024, 1, 1).replacen("m=1024,t=1", "m=262144,t=3", 1);
        let before = cost_refusals();
        let e = check_stored(&h, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "asks for argon2 m=262144, above --argon2-max-memory-kib 65536"
        );
        assert!(!verify(&h, b"tok"));
        assert!(cost_refusals() >= before + 2);
    }
}
