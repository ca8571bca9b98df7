//! A provider bridge client: logs on to the provider ingest listener and
//! pushes quote batches. Used by `replay --to`, the bench tool and tests.
//!
//! Blocking std TCP with timeouts; the encode buffer is allocated once per
//! bridge, so sending a batch allocates nothing. The server drops a bridge
//! that sends nothing for 3 heartbeat intervals: a caller that may pause
//! calls [`Bridge::keepalive`] while it waits.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::clock::monotonic_ns;
use crate::model::Tick;
use crate::wire::{self, Message, QuoteEntry};

/// Most quotes per ProviderQuote frame (the frame limit allows more; this
/// keeps one frame well under a socket buffer).
pub(crate) const QUOTES_PER_FRAME_MAX: usize = 512;

/// A logged-on bridge connection for one provider.
pub struct Bridge {
    stream: TcpStream,
    buf: Vec<u8>,
    /// The provider id this bridge logged on as.
    pub provider: u16,
    /// The server's heartbeat interval (LogonAccepted), in nanoseconds.
    heartbeat_ns: u64,
    /// When this bridge last sent a frame ([`monotonic_ns`]).
    last_sent_ns: u64,
}

impl Bridge {
    /// Connects and logs on as `provider` with `token`.
    pub fn connect(
        addr: SocketAddr,
        provider: u16,
        token: &str,
        timeout: Duration,
    ) -> io::Result<Bridge> {
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let mut buf = vec![0u8; wire::FRAME_LEN_MAX];
        let logon = wire::ProviderLogon {
            provider_id: provider,
            token: token.as_bytes(),
        };
        let n = wire::encode_provider_logon(&mut buf, &logon).map_err(io::Error::other)?;
        stream.write_all(&buf[..n])?;
        let reply = read_frame(&mut stream, &mut buf)?;
        match wire::decode(&buf[..reply]) {
            Ok(Message::LogonAccepted(a)) => Ok(Bridge {
                stream,
                buf,
                provider,
                heartbeat_ns: u64::from(a.heartbeat_interval_ms.max(1)) * 1_000_000,
                last_sent_ns: monotonic_ns(),
            }),
            Ok(Message::LogonRejected(r)) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("provider logon rejected: {:?}", r.reason.name()),
            )),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected reply to provider logon: {other:?}"),
            )),
        }
    }

    /// Sends ticks as ProviderQuote frames (their provider id is ignored:
    /// the session's provider applies).
    pub fn send(&mut self, ticks: &[Tick]) -> io::Result<()> {
        for chunk in ticks.chunks(QUOTES_PER_FRAME_MAX) {
            let quotes = chunk.iter().map(|t| QuoteEntry {
                symbol_id: t.symbol,
                flags: (t.flags & 0xff) as u8,
                bid: t.bid,
                ask: t.ask,
                bid_size: t.bid_size,
                ask_size: t.ask_size,
                provider_time_ns: t.provider_time_ns,
            });
            let n = wire::encode_provider_quote(&mut self.buf, quotes).map_err(io::Error::other)?;
            self.stream.write_all(&self.buf[..n])?;
        }
        self.last_sent_ns = monotonic_ns();
        Ok(())
    }

    /// Sends a Heartbeat when nothing was sent for half the server's
    /// interval, and discards what the server sent meanwhile (its own
    /// heartbeats; replies to quotes), so neither side's buffers fill.
    pub fn keepalive(&mut self) -> io::Result<()> {
        if monotonic_ns().saturating_sub(self.last_sent_ns) < self.heartbeat_ns / 2 {
            return Ok(());
        }
        self.discard_input()?;
        let n = wire::encode_heartbeat(&mut self.buf).map_err(io::Error::other)?;
        self.stream.write_all(&self.buf[..n])?;
        self.last_sent_ns = monotonic_ns();
        Ok(())
    }

    fn discard_input(&mut self) -> io::Result<()> {
        self.stream.set_nonblocking(true)?;
        let read = loop {
            match self.stream.read(&mut self.buf) {
                Ok(0) => break Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.stream.set_nonblocking(false)?;
        read
    }

    /// Logs out and closes.
    pub fn close(mut self) -> io::Result<()> {
        let n = wire::encode_logout(&mut self.buf).map_err(io::Error::other)?;
        self.stream.write_all(&self.buf[..n])
    }
}

/// Reads one whole frame into `buf`; returns its length.
pub fn read_frame(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let mut have = 0;
    loop {
        match wire::split_with_max(&buf[..have], buf.len()) {
            Ok(Some(n)) => return Ok(n),
            Ok(None) => {}
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
        }
        let n = stream.read(&mut buf[have..])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        have += n;
    }
}
