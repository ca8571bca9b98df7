//! Certificate chains made inside a test (rcgen), written as PEM files,
//! and a small blocking TLS client for raw frames.

#![allow(dead_code)] // each test binary uses a different part

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// A certificate authority made for one test.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// A leaf for `names` (DNS names or IP addresses), for a server or a
    /// client: (chain PEM, leaf first; key PEM).
    pub fn leaf(&self, names: &[&str], client: bool) -> (String, String) {
        let usage = if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        };
        self.leaf_for(names, vec![usage])
    }

    /// A leaf that is both a server's and a client's (a NATS node: its
    /// routes authenticate each other with it).
    pub fn leaf_both(&self, names: &[&str]) -> (String, String) {
        let usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.leaf_for(names, usages)
    }

    fn leaf_for(&self, names: &[&str], usages: Vec<ExtendedKeyUsagePurpose>) -> (String, String) {
        let sans: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut p = CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(DnType::CommonName, names[0]);
        p.is_ca = IsCa::NoCa;
        p.extended_key_usages = usages;
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        (
            format!("{}{}", cert.pem(), self.cert.pem()),
            key.serialize_pem(),
        )
    }
}

/// Writes `text` to `path` atomically (a rename), as an operator's
/// rotation would: the server never reads a half-written file.
pub fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The files of one server identity in `dir`.
pub struct ServerFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ServerFiles {
    /// A leaf for 127.0.0.1 and localhost signed by `ca`, written to
    /// `dir/server.{crt,key}`.
    pub fn write(dir: &Path, ca: &Ca) -> ServerFiles {
        let f = ServerFiles {
            cert: dir.join("server.crt"),
            key: dir.join("server.key"),
        };
        f.replace(ca);
        f
    }

    /// Replaces the files with a new leaf signed by `ca`.
    pub fn replace(&self, ca: &Ca) {
        use std::os::unix::fs::PermissionsExt;
        let (chain, key) = ca.leaf(&["127.0.0.1", "localhost"], false);
        write_atomic(&self.key, &key);
        // A private key readable by others draws a start-up warning.
        std::fs::set_permissions(&self.key, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_atomic(&self.cert, &chain);
    }
}

/// Writes a CA certificate to `dir/name`.
pub fn write_ca(dir: &Path, name: &str, ca: &Ca) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, ca.pem()).unwrap();
    p
}

/// A blocking rustls client over loopback TCP, trusting `ca_pem`, with an
/// optional client (chain, key) PEM pair.
pub fn tls_connect(
    addr: SocketAddr,
    ca_pem: &str,
    client: Option<(&str, &str)>,
) -> std::io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let cfg = match client {
        None => b.with_no_client_auth(),
        Some((chain, key)) => {
            let chain: Vec<_> = CertificateDer::pem_slice_iter(chain.as_bytes())
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            b.with_client_auth_cert(chain, key).unwrap()
        }
    };
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
    let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    sock.set_read_timeout(Some(Duration::from_secs(3)))?;
    sock.set_write_timeout(Some(Duration::from_secs(3)))?;
    let mut s = rustls::StreamOwned::new(conn, sock);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// Writes `frame` and reads one whole frame back (bounded by the
/// socket's read timeout).
pub fn round_trip<S: Read + Write>(s: &mut S, frame: &[u8]) -> std::io::Result<Vec<u8>> {
    s.write_all(frame)?;
    s.flush()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Ok(Some(n)) = pricewire::wire::split(&got) {
            got.truncate(n);
            return Ok(got);
        }
        match s.read(&mut buf)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => got.extend_from_slice(&buf[..n]),
        }
    }
}
