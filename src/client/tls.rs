//! TLS for the client: a rustls client session (ring provider) that
//! verifies the server's chain against the CA certificates it is given and
//! the server name, over the blocking socket.
//!
//! The handshake runs inside [`ClientStream::connect`] within the connect
//! timeout, so a chain that does not verify fails the connect (and counts
//! as a connect failure) rather than the first read.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use crate::runtime::tls::{load_roots, provider, TlsError};

/// What a client needs to speak TLS: the config (trusted CAs) and the
/// name the server's certificate must carry.
#[derive(Debug, Clone)]
pub struct ClientTls {
    /// rustls client settings: roots from `--ca`, no client certificate.
    pub config: Arc<ClientConfig>,
    /// Checked against the certificate's subject alternative names.
    pub server_name: ServerName<'static>,
}

impl ClientTls {
    /// Trusts the CA certificates in the PEM file `ca` and expects the
    /// server to be `name` (a DNS name or an IP address).
    pub fn from_ca_file(ca: &Path, name: &str) -> Result<ClientTls, TlsError> {
        let roots = load_roots(ca)?;
        let server_name = ServerName::try_from(name.to_string())
            .map_err(|e| TlsError::Config(format!("server name {name:?}: {e}")))?;
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(ClientTls {
            config: Arc::new(config),
            server_name,
        })
    }
}

/// The client's transport: plain TCP or TLS over it.
#[derive(Debug)]
pub enum ClientStream {
    /// Plaintext.
    Plain(TcpStream),
    /// TLS (boxed: the session state is large).
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl ClientStream {
    /// Wraps a connected socket; with `tls`, runs the handshake within
    /// `timeout` and fails if the server's chain or name do not verify.
    pub fn connect(
        sock: TcpStream,
        tls: Option<&ClientTls>,
        timeout: Duration,
    ) -> io::Result<ClientStream> {
        let Some(tls) = tls else {
            return Ok(ClientStream::Plain(sock));
        };
        let mut conn = ClientConnection::new(tls.config.clone(), tls.server_name.clone())
            .map_err(io::Error::other)?;
        let mut sock = sock;
        let (r, w) = (sock.read_timeout()?, sock.write_timeout()?);
        sock.set_read_timeout(Some(timeout))?;
        sock.set_write_timeout(Some(timeout))?;
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).map_err(closed_in_handshake)?;
        }
        sock.set_read_timeout(r)?;
        sock.set_write_timeout(w)?;
        Ok(ClientStream::Tls(Box::new(StreamOwned::new(conn, sock))))
    }

    /// The socket under the stream.
    pub fn socket(&self) -> &TcpStream {
        match self {
            ClientStream::Plain(s) => s,
            ClientStream::Tls(t) => &t.sock,
        }
    }

    /// Sets the socket's read timeout.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(t)
    }
}

/// Names a close during the handshake: a TLS server at capacity closes
/// refused connections so once its refusal handshake budget is spent
/// (docs/tls.md). The kind is kept: the reconnect policy retries it under
/// its jittered backoff like any I/O failure.
fn closed_in_handshake(e: io::Error) -> io::Error {
    use io::ErrorKind as K;
    match e.kind() {
        K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted => io::Error::new(
            e.kind(),
            format!("closed by the server during the TLS handshake ({e}): busy or broken, retried with backoff"),
        ),
        _ => e,
    }
}

impl Read for ClientStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ClientStream::Plain(s) => s.read(buf),
            ClientStream::Tls(t) => t.read(buf),
        }
    }
}

impl Write for ClientStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ClientStream::Plain(s) => s.write(buf),
            // StreamOwned::write only buffers into rustls; push the record
            // out now (the protocol's frames are small and urgent).
            ClientStream::Tls(t) => {
                let n = t.write(buf)?;
                t.flush()?;
                Ok(n)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            ClientStream::Plain(s) => s.flush(),
            ClientStream::Tls(t) => t.flush(),
        }
    }
}
