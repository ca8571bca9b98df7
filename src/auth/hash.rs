//! Stored credentials: argon2id hashes in the PHC string format, made by
//! `pricewire token hash` and checked by the argon2 crate's verifier
//! (which compares the derived key in constant time).
//!
//! A clear token may stand where a hash belongs only when the config sets
//! `insecure_plain_tokens = true` (loopback demos); it is then compared in
//! constant time. [`verify`] tells the two apart by the `$argon2id$`
//! prefix, which [`check_stored`] made sure of at load.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use rand::RngCore;

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
pub fn hash_token(token: &[u8]) -> Result<String, String> {
    if token.is_empty() || token.len() > TOKEN_LEN_MAX {
        return Err(format!("a token must be 1..={TOKEN_LEN_MAX} bytes"));
    }
    let mut salt = [0u8; SALT_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| e.to_string())?;
    let hash = hasher()
        .hash_password(token, &salt)
        .map_err(|e| e.to_string())?;
    Ok(hash.to_string())
}

/// Whether `stored` is an argon2id PHC string (rather than a clear token).
pub fn is_hash(stored: &str) -> bool {
    stored.starts_with(PHC_PREFIX)
}

/// Checks a stored credential at load: an argon2id PHC string that
/// parses, or (only when `allow_plain`) a clear token of 1..=64 bytes.
///
/// # Errors
/// Why it is refused, for a message that names the key.
pub fn check_stored(stored: &str, allow_plain: bool) -> Result<(), String> {
    if is_hash(stored) {
        if stored.len() > STORED_LEN_MAX {
            return Err(format!("longer than {STORED_LEN_MAX} bytes"));
        }
        let h = PasswordHash::new(stored).map_err(|e| format!("not a valid PHC string: {e}"))?;
        if h.hash.is_none() || h.salt.is_none() {
            return Err("PHC string without salt or hash".into());
        }
        return Ok(());
    }
    if !allow_plain {
        return Err(
            "is a clear token; store its hash instead: run `pricewire token hash` \
             and put the printed $argon2id$... string here (or set \
             insecure_plain_tokens = true for a loopback demo)"
                .into(),
        );
    }
    if stored.is_empty() || stored.len() > TOKEN_LEN_MAX {
        return Err(format!("must be 1..={TOKEN_LEN_MAX} bytes"));
    }
    Ok(())
}

/// Whether `presented` matches the stored credential: the argon2
/// verifier for a hash (milliseconds of CPU, see docs/security.md), a
/// constant-time comparison for a clear token. A malformed stored value
/// never matches.
pub fn verify(stored: &str, presented: &[u8]) -> bool {
    if presented.is_empty() || presented.len() > TOKEN_LEN_MAX {
        return false;
    }
    if is_hash(stored) {
        return match PasswordHash::new(stored) {
            Ok(h) => Argon2::default().verify_password(presented, &h).is_ok(),
            Err(_) => false,
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
        assert!(e.contains("pricewire token hash"), "{e}");
        assert!(check_stored("s3cret", true).is_ok());
        assert!(verify("s3cret", b"s3cret") && !verify("s3cret", b"s3cres"));
        assert!(check_stored("$argon2id$garbage", true).is_err());
        assert!(!verify("$argon2id$garbage", b"x"));
        assert!(hash_token(b"").is_err() && hash_token(&[b'a'; 65]).is_err());
    }
}
