//! TLS on a listener: rustls with the `ring` provider (no OpenSSL), the
//! certificate chain and key read from PEM files, and a per-connection
//! [`Link`] that sits between a non-blocking socket and the plaintext
//! buffers of whatever protocol runs over it.
//!
//! Contract: a [`TlsAcceptor`] holds the current `ServerConfig` behind a
//! lock taken once per accepted connection (never per message); each
//! connection keeps the config it was accepted with, so [`TlsAcceptor::reload`]
//! changes what *new* handshakes present and leaves open sessions alone. A
//! reload whose files do not load keeps the old config and says why. A
//! handshake that fails or does not finish within the acceptor's deadline
//! is counted by [`HandshakeFailure`] reason and logged without key
//! material. Plaintext connections are a [`Link::Plain`] and pay one enum
//! match per socket call.

mod buf;
mod handshake;
pub mod link;
#[cfg(test)]
mod link_tests;
mod record;
mod traffic;
#[cfg(test)]
mod traffic_tests;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use mio::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::UnbufferedServerConnection;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

pub use link::{Link, TlsLink};

/// Default of `--tls-handshake-timeout-ms`: a handshake not finished this
/// long after accept is cut and counted as [`HandshakeFailure::Timeout`].
pub const HANDSHAKE_TIMEOUT_MS_DEFAULT: u64 = 5_000;

/// Size of a TLS connection's send buffer of encrypted bytes, beyond its
/// own outbound buffer: the water marks and the slow-consumer limit keep
/// deciding on the outbound buffer, and TLS adds at most this much.
pub const TLS_SEND_BUFFER_BYTES: usize = 32 * 1024;

/// The files a TLS listener is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM CA certificates; when set, every client must present a chain
    /// that verifies to one of them.
    pub client_ca: Option<PathBuf>,
}

/// Why TLS could not be set up from the files.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("{path}: {why}")]
    File {
        /// The file named by the flag.
        path: String,
        /// What was wrong with it.
        why: String,
    },
    /// rustls refused the chain, the key or the CA set.
    #[error("{0}")]
    Config(String),
}

fn file_err(path: &Path, why: impl fmt::Display) -> TlsError {
    TlsError::File {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

/// Reads a PEM certificate chain (at least one certificate).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(path, e))?
        .collect();
    let certs = certs.map_err(|e| file_err(path, e))?;
    if certs.is_empty() {
        return Err(file_err(path, "no CERTIFICATE in the file"));
    }
    Ok(certs)
}

/// Reads the first PEM private key of a file.
fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    // The error text of a key file names the file and the PEM problem,
    // never the key bytes.
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_err(path, e))
}

/// Reads PEM CA certificates into a root store.
pub fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in load_certs(path)? {
        roots.add(c).map_err(|e| file_err(path, e))?;
    }
    Ok(roots)
}

/// The process-wide crypto provider: ring.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds a server config from the files (TLS 1.2 and 1.3).
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = load_certs(&files.cert)?;
    let key = load_key(&files.key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = Arc::new(load_roots(ca)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| file_err(ca, e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(format!("certificate and key: {e}")))?;
    // rustls hands the traffic keys of a finished handshake over to
    // `traffic.rs`, which seals records in the connection's own buffers.
    cfg.enable_secret_extraction = true;
    Ok(Arc::new(cfg))
}

/// Why a handshake failed: the `reason` label of
/// `pricewire_tls_handshake_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// Not finished within the handshake deadline.
    Timeout,
    /// The peer closed the connection mid-handshake.
    PeerClosed,
    /// The peer sent a fatal alert (e.g. it does not trust our chain).
    PeerAlert,
    /// Not TLS, or malformed TLS (e.g. plaintext protocol on a TLS port).
    BadMessage,
    /// The client's certificate did not verify.
    BadCertificate,
    /// Client certificates are required and none was presented.
    NoClientCertificate,
    /// No protocol version or cipher suite in common.
    Incompatible,
    /// Anything else rustls refused.
    Other,
}

impl HandshakeFailure {
    /// Every reason, in label order.
    pub const ALL: [HandshakeFailure; 8] = [
        Self::Timeout,
        Self::PeerClosed,
        Self::PeerAlert,
        Self::BadMessage,
        Self::BadCertificate,
        Self::NoClientCertificate,
        Self::Incompatible,
        Self::Other,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::PeerClosed => "peer_closed",
            Self::PeerAlert => "peer_alert",
            Self::BadMessage => "bad_message",
            Self::BadCertificate => "bad_certificate",
            Self::NoClientCertificate => "no_client_certificate",
            Self::Incompatible => "incompatible",
            Self::Other => "other",
        }
    }

    /// The reason of a rustls error seen while handshaking.
    pub fn of(e: &rustls::Error) -> Self {
        use rustls::Error as E;
        match e {
            E::AlertReceived(_) => Self::PeerAlert,
            E::InvalidMessage(_)
            | E::InappropriateMessage { .. }
            | E::InappropriateHandshakeMessage { .. } => Self::BadMessage,
            E::InvalidCertificate(_) => Self::BadCertificate,
            E::NoCertificatesPresented => Self::NoClientCertificate,
            E::PeerIncompatible(_) => Self::Incompatible,
            _ => Self::Other,
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|&r| r == self).unwrap_or(7)
    }
}

/// What became of a connection refused for capacity on a TLS listener:
/// the `outcome` label of `pricewire_tls_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalOutcome {
    /// Handshake completed within the refusal budget and Disconnect(busy)
    /// with a retry-after was sent over TLS.
    Busy,
    /// Over the refusal budget: closed before any TLS work.
    Bare,
    /// Within the budget, but the handshake did not finish (peer gone,
    /// failed, or not within the refusal deadline).
    Unfinished,
}

impl RefusalOutcome {
    /// Every outcome, in label order.
    pub const ALL: [RefusalOutcome; 3] = [Self::Busy, Self::Bare, Self::Unfinished];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Busy => "busy",
            Self::Bare => "bare",
            Self::Unfinished => "unfinished",
        }
    }
}

/// Counters of one TLS listener (atomics, read at scrape time).
#[derive(Debug, Default)]
pub struct TlsStats {
    failures: [AtomicU64; 8],
    refusals: [AtomicU64; 3],
    /// Handshakes completed.
    pub handshakes: AtomicU64,
    /// Certificate reloads that took effect.
    pub reloads_ok: AtomicU64,
    /// Certificate reloads refused (the old chain stayed).
    pub reloads_failed: AtomicU64,
}

impl TlsStats {
    /// Failed handshakes for `why`.
    pub fn failures(&self, why: HandshakeFailure) -> u64 {
        self.failures[why.index()].load(Ordering::Relaxed)
    }

    /// Connections refused for capacity, by what became of them.
    pub fn refusals(&self, outcome: RefusalOutcome) -> u64 {
        self.refusals[outcome as usize].load(Ordering::Relaxed)
    }

    /// Counts a refused connection's outcome.
    pub fn count_refusal(&self, outcome: RefusalOutcome) {
        self.refusals[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failure; returns the count of that reason so far.
    pub(crate) fn count_failure(&self, why: HandshakeFailure) -> u64 {
        self.failures[why.index()].fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// A TLS listener's server side: the current config, its files (for
/// [`TlsAcceptor::reload`]), the handshake deadline and the counters.
pub struct TlsAcceptor {
    listener: &'static str,
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    handshake_timeout_ns: u64,
    stats: Arc<TlsStats>,
}

impl fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsAcceptor")
            .field("listener", &self.listener)
            .field("files", &self.files)
            .field("handshake_timeout_ns", &self.handshake_timeout_ns)
            .finish_non_exhaustive()
    }
}

impl TlsAcceptor {
    /// Loads the files for the listener named `listener` (the metric
    /// label: `subscriber` or `feed`).
    pub fn new(
        listener: &'static str,
        files: TlsFiles,
        handshake_timeout_ms: u64,
    ) -> Result<Arc<TlsAcceptor>, TlsError> {
        let cfg = server_config(&files)?;
        Ok(Arc::new(TlsAcceptor {
            listener,
            files,
            current: RwLock::new(cfg),
            handshake_timeout_ns: handshake_timeout_ms.saturating_mul(1_000_000),
            stats: Arc::new(TlsStats::default()),
        }))
    }

    /// The listener label.
    pub fn listener(&self) -> &'static str {
        self.listener
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<TlsStats> {
        &self.stats
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_cert(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// Wraps a freshly accepted socket (monotonic `now_ns`: the handshake
    /// deadline counts from here). Allocates the rustls connection state
    /// and the connection's receive and send buffers.
    pub fn link(&self, stream: TcpStream, now_ns: u64) -> io::Result<Link> {
        let cfg = self.current.read().map(|c| c.clone()).unwrap_or_else(|p| {
            // A panic while swapping left the old Arc in place: use it.
            p.into_inner().clone()
        });
        let conn = UnbufferedServerConnection::new(cfg).map_err(io::Error::other)?;
        Ok(Link::Tls(Box::new(TlsLink::new(
            stream,
            conn,
            now_ns.saturating_add(self.handshake_timeout_ns),
            self.listener,
            self.stats.clone(),
        ))))
    }

    /// Reads the files again; on success new handshakes present the new
    /// chain (open sessions keep theirs). On failure the old config stays,
    /// the reason is logged and returned.
    pub fn reload(&self) -> Result<(), TlsError> {
        match server_config(&self.files) {
            Ok(cfg) => {
                match self.current.write() {
                    Ok(mut g) => *g = cfg,
                    Err(p) => *p.into_inner() = cfg,
                }
                self.stats.reloads_ok.fetch_add(1, Ordering::Relaxed);
                tracing::info!(listener = self.listener, cert = %self.files.cert.display(),
                    "TLS certificate reloaded: new handshakes use it");
                Ok(())
            }
            Err(e) => {
                self.stats.reloads_failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(listener = self.listener, error = %e,
                    "TLS certificate reload refused: the previous certificate stays");
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_slot_and_label() {
        let s = TlsStats::default();
        for (k, why) in HandshakeFailure::ALL.iter().enumerate() {
            assert_eq!(why.index(), k);
            for _ in 0..=k {
                s.count_failure(*why);
            }
        }
        for (k, why) in HandshakeFailure::ALL.iter().enumerate() {
            assert_eq!(s.failures(*why), k as u64 + 1, "{}", why.label());
        }
        let labels: std::collections::BTreeSet<_> =
            HandshakeFailure::ALL.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), HandshakeFailure::ALL.len());
    }

    #[test]
    fn rustls_errors_map_to_reasons() {
        use rustls::{AlertDescription, CertificateError, Error};
        let of = HandshakeFailure::of;
        assert_eq!(
            of(&Error::AlertReceived(AlertDescription::UnknownCA)),
            HandshakeFailure::PeerAlert
        );
        assert_eq!(
            of(&Error::InvalidCertificate(CertificateError::UnknownIssuer)),
            HandshakeFailure::BadCertificate
        );
        assert_eq!(
            of(&Error::NoCertificatesPresented),
            HandshakeFailure::NoClientCertificate
        );
        assert_eq!(of(&Error::DecryptError), HandshakeFailure::Other);
    }

    #[test]
    fn missing_and_empty_files_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not pem\n").unwrap();
        let files = TlsFiles {
            cert: empty.clone(),
            key: dir.path().join("absent.pem"),
            client_ca: None,
        };
        let e = server_config(&files).unwrap_err().to_string();
        assert!(e.contains("empty.pem"), "{e}");
        let files = TlsFiles {
            cert: dir.path().join("absent.pem"),
            ..files
        };
        let e = server_config(&files).unwrap_err().to_string();
        assert!(e.contains("absent.pem"), "{e}");
    }
}
