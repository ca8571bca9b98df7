//! NATS identities made inside a test: NKey pairs (user, account,
//! operator) in their text forms, JWTs signed as `nsc` signs them, and
//! `.creds` files. Written apart from the library's own NKey code, so
//! the two meet only at a real nats-server.
//!
//! `util::nkeys`.

use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair};

pub const USER: u8 = 20 << 3;
pub const ACCOUNT: u8 = 0;
pub const OPERATOR: u8 = 14 << 3;
const SEED: u8 = 18 << 3;

fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |mut crc, &b| {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
        crc
    })
}

fn base32(data: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut bits: Vec<u8> = data
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    while !bits.len().is_multiple_of(5) {
        bits.push(0);
    }
    bits.chunks(5)
        .map(|c| char::from(A[c.iter().fold(0usize, |v, &b| (v << 1) | usize::from(b))]))
        .collect()
}

/// RFC 4648 §5 without padding.
pub fn b64url(data: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bits: Vec<u8> = data
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    while !bits.len().is_multiple_of(6) {
        bits.push(0);
    }
    bits.chunks(6)
        .map(|c| char::from(A[c.iter().fold(0usize, |v, &b| (v << 1) | usize::from(b))]))
        .collect()
}

fn encoded(prefix: &[u8], key: &[u8]) -> String {
    let mut raw = prefix.to_vec();
    raw.extend_from_slice(key);
    let sum = crc16(&raw);
    raw.extend_from_slice(&sum.to_le_bytes());
    base32(&raw)
}

/// One NKey pair of a kind.
pub struct Nkey {
    kind: u8,
    seed: [u8; 32],
    pair: Ed25519KeyPair,
}

impl Nkey {
    pub fn new(kind: u8) -> Nkey {
        let mut seed = [0u8; 32];
        SystemRandom::new().fill(&mut seed).unwrap();
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
        Nkey { kind, seed, pair }
    }

    /// `U…`, `A…` or `O…`.
    pub fn public(&self) -> String {
        encoded(&[self.kind], self.pair.public_key().as_ref())
    }

    /// `SU…`, `SA…` or `SO…`.
    pub fn seed(&self) -> String {
        encoded(
            &[SEED | (self.kind >> 5), (self.kind & 31) << 3],
            &self.seed,
        )
    }

    pub fn sign(&self, msg: &[u8]) -> String {
        b64url(self.pair.sign(msg).as_ref())
    }

    /// A JWT issued by `self` for `subject` with these `nats` claims.
    pub fn issue(&self, subject: &Nkey, name: &str, nats: &str) -> String {
        let header = b64url(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
        let mut jti = [0u8; 16];
        SystemRandom::new().fill(&mut jti).unwrap();
        let claims = format!(
            r#"{{"jti":"{}","iat":{},"iss":"{}","name":"{name}","sub":"{}","nats":{nats}}}"#,
            base32(&jti),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            self.public(),
            subject.public()
        );
        let body = format!("{header}.{}", b64url(claims.as_bytes()));
        let sig = self.sign(body.as_bytes());
        format!("{body}.{sig}")
    }
}

/// An operator, one account with JetStream and users: what `nsc` makes.
pub struct Operator {
    pub account: Nkey,
    pub operator_jwt: String,
    pub account_jwt: String,
    /// The system account JetStream needs in operator mode.
    system: Nkey,
    system_jwt: String,
}

impl Operator {
    pub fn new() -> Operator {
        let operator = Nkey::new(OPERATOR);
        let account = Nkey::new(ACCOUNT);
        let operator_jwt = operator.issue(&operator, "pw-op", r#"{"type":"operator","version":2}"#);
        let limits = r#"{"subs":-1,"data":-1,"payload":-1,"imports":-1,"exports":-1,"wildcards":true,"conn":-1,"leaf":-1,"mem_storage":-1,"disk_storage":-1,"streams":-1,"consumer":-1}"#;
        let account_jwt = operator.issue(
            &account,
            "pw-acc",
            &format!(r#"{{"limits":{limits},"default_permissions":{{"pub":{{}},"sub":{{}}}},"type":"account","version":2}}"#),
        );
        let system = Nkey::new(ACCOUNT);
        let system_jwt = operator.issue(&system, "SYS", r#"{"type":"account","version":2}"#);
        Operator {
            account,
            operator_jwt,
            account_jwt,
            system,
            system_jwt,
        }
    }

    /// The server configuration lines of operator mode (`op_jwt`: where
    /// the operator JWT was written).
    pub fn server_config(&self, op_jwt: &std::path::Path) -> String {
        format!(
            "operator: \"{}\"\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n  {}: \"{}\"\n  {}: \"{}\"\n}}\n",
            op_jwt.display(),
            self.system.public(),
            self.account.public(),
            self.account_jwt,
            self.system.public(),
            self.system_jwt
        )
    }

    /// A `.creds` file of a new user of the account allowed to publish
    /// and subscribe on everything.
    pub fn user_creds(&self, name: &str) -> String {
        let user = Nkey::new(USER);
        let jwt = self.account.issue(
            &user,
            name,
            r#"{"pub":{},"sub":{},"subs":-1,"data":-1,"payload":-1,"type":"user","version":2}"#,
        );
        format!(
            "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n",
            user.seed()
        )
    }
}
