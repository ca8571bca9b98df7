//! A bare NATS client for tests that must act as someone else: a forger
//! with no credentials or an edge's, or an eavesdropper on the price
//! subjects. Blocking, over TLS (rustls) or plain TCP, line by line.
//!
//! `util::nats_raw`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// A stream of either kind.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(b),
            Stream::Tls(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(b),
            Stream::Tls(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// One message delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub subject: String,
    pub payload: Vec<u8>,
}

pub struct RawNats {
    r: BufReader<Stream>,
    /// The server's nonce from INFO (for an NKey CONNECT).
    pub nonce: String,
}

fn tls_config(ca: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(cfg)
}

impl RawNats {
    /// Connects (TLS when `ca` is given, the server named 127.0.0.1) and
    /// reads INFO; `CONNECT` is the caller's ([`RawNats::hello`]).
    pub fn open(addr: SocketAddr, ca: Option<&Path>) -> RawNats {
        let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut info = String::new();
        let mut plain = BufReader::new(sock.try_clone().unwrap());
        plain.read_line(&mut info).unwrap();
        assert!(info.starts_with("INFO "), "{info}");
        let nonce = info
            .split("\"nonce\":\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("")
            .to_string();
        let stream = match ca {
            None => Stream::Plain(sock),
            Some(ca) => {
                let name = ServerName::try_from("127.0.0.1").unwrap();
                let conn = rustls::ClientConnection::new(tls_config(ca), name).unwrap();
                Stream::Tls(Box::new(rustls::StreamOwned::new(conn, sock)))
            }
        };
        RawNats {
            r: BufReader::new(stream),
            nonce,
        }
    }

    /// Sends CONNECT with `fields` (JSON members, may be empty) and a
    /// PING: `Ok` on the PONG, `Err(the -ERR line)` on a refusal.
    pub fn hello(&mut self, fields: &str) -> Result<(), String> {
        let sep = if fields.is_empty() { "" } else { "," };
        let connect = format!(
            "CONNECT {{\"verbose\":false,\"pedantic\":false,\"headers\":true{sep}{fields}}}\r\nPING\r\n"
        );
        self.send(connect.as_bytes());
        self.until_pong()
    }

    pub fn send(&mut self, bytes: &[u8]) {
        let s = self.r.get_mut();
        let _ = s.write_all(bytes);
        let _ = s.flush();
    }

    pub fn publish(&mut self, subject: &str, payload: &[u8]) {
        let mut m = format!("PUB {subject} {}\r\n", payload.len()).into_bytes();
        m.extend_from_slice(payload);
        m.extend_from_slice(b"\r\n");
        self.send(&m);
    }

    pub fn subscribe(&mut self, subject: &str, sid: u32) {
        self.send(format!("SUB {subject} {sid}\r\n").as_bytes());
    }

    /// PING, then reads to its PONG: the `-ERR` lines meanwhile (`Ok`
    /// with none), messages dropped.
    pub fn errors_until_pong(&mut self) -> Vec<String> {
        self.send(b"PING\r\n");
        let mut errors = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.line().as_deref() {
                Some("PONG") => return errors,
                Some(l) if l.starts_with("-ERR") => errors.push(l.to_string()),
                Some(l) if l.starts_with("MSG ") => {
                    let n: usize = l.rsplit(' ').next().unwrap().parse().unwrap();
                    let mut body = vec![0u8; n + 2];
                    let _ = self.r.read_exact(&mut body);
                }
                Some(_) => {}
                None => {
                    errors.push("closed".into());
                    return errors;
                }
            }
        }
        errors.push("no PONG".into());
        errors
    }

    fn until_pong(&mut self) -> Result<(), String> {
        loop {
            match self.line() {
                Some(l) if l == "PONG" => return Ok(()),
                Some(l) if l.starts_with("-ERR") => return Err(l),
                Some(_) => {}
                None => return Err("closed".into()),
            }
        }
    }

    fn line(&mut self) -> Option<String> {
        let mut l = String::new();
        match self.r.read_line(&mut l) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(l.trim_end().to_string()),
        }
    }

    /// The next message within `timeout` (PINGs answered, other lines
    /// skipped); `None` at the timeout or a close.
    pub fn next_msg(&mut self, timeout: Duration) -> Option<Msg> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let l = self.line()?;
            if l == "PING" {
                self.send(b"PONG\r\n");
            } else if let Some(rest) = l.strip_prefix("MSG ") {
                let parts: Vec<&str> = rest.split(' ').collect();
                let n: usize = parts.last()?.parse().ok()?;
                let mut body = vec![0u8; n + 2];
                self.r.read_exact(&mut body).ok()?;
                body.truncate(n);
                return Some(Msg {
                    subject: parts[0].to_string(),
                    payload: body,
                });
            }
        }
        None
    }
}
