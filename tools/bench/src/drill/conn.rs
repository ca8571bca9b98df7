//! Raw protocol connections for the drills (docs/protocol.md): blocking
//! loopback sockets, bound to a chosen 127.0.0.x source address when a
//! herd must come from many addresses, a logon, and a frame reader that
//! hands each decoded server frame over without allocating per frame.

use std::io::{self, ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use pricewire::wire::{self, Message, SERVER_FRAME_LEN_MAX};

/// A TCP connection to `dst` from `src` (bound before connect), or from
/// the kernel's choice when `src` is `None`.
pub fn connect(dst: SocketAddr, src: Option<Ipv4Addr>) -> io::Result<TcpStream> {
    let (Some(src), SocketAddr::V4(dst)) = (src, dst) else {
        return TcpStream::connect(dst);
    };
    connect_from(src, dst)
}

fn connect_from(src: Ipv4Addr, dst: SocketAddrV4) -> io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let sa = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let (local, remote) = (sa(src, 0), sa(*dst.ip(), dst.port()));
    // SAFETY: a fresh socket owned by the TcpStream at once (closed on
    // every error path by its drop); bind and connect get pointers to
    // sockaddr_in values that live on this frame, with their exact size.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let p = |a: &libc::sockaddr_in| a as *const libc::sockaddr_in as *const libc::sockaddr;
        if libc::bind(fd, p(&local), len) != 0 || libc::connect(fd, p(&remote), len) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// How a logon ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logon {
    /// LogonAccepted.
    Accepted,
    /// LogonRejected or Disconnect before logon, with its retry-after.
    Refused { retry_after_ms: u32 },
    /// Closed or no answer in time.
    Lost,
}

/// Encodes a Logon frame.
pub fn logon_frame(account: &str, token: &str, heartbeat_ms: u32) -> Vec<u8> {
    let mut b = vec![0u8; 512];
    let m = wire::Logon {
        heartbeat_interval_ms: heartbeat_ms,
        account: account.as_bytes(),
        token: token.as_bytes(),
    };
    let n = wire::encode_logon(&mut b, &m).expect("logon fits");
    b.truncate(n);
    b
}

/// Sends a Logon and reads until its outcome (bounded by `within`).
pub fn logon(r: &mut Reader, account: &str, token: &str, within: Duration) -> Logon {
    if r.stream
        .write_all(&logon_frame(account, token, 1_000))
        .is_err()
    {
        return Logon::Lost;
    }
    let deadline = Instant::now() + within;
    let mut out = None;
    while out.is_none() && Instant::now() < deadline {
        let open = r.poll(Duration::from_millis(50), |m| match m {
            Message::LogonAccepted(_) => out = Some(Logon::Accepted),
            Message::LogonRejected(x) => {
                out = Some(Logon::Refused {
                    retry_after_ms: x.retry_after_ms,
                })
            }
            Message::Disconnect(d) => {
                out = Some(Logon::Refused {
                    retry_after_ms: d.retry_after_ms,
                })
            }
            _ => {}
        });
        if !open && out.is_none() {
            return Logon::Lost;
        }
    }
    out.unwrap_or(Logon::Lost)
}

/// Reads server frames from one connection.
pub struct Reader {
    /// The socket (clone it for a writer thread).
    pub stream: TcpStream,
    buf: Vec<u8>,
    end: usize,
}

impl Reader {
    /// A reader over `stream` with room for the largest server frame.
    pub fn new(stream: TcpStream) -> Reader {
        Reader {
            stream,
            buf: vec![0u8; SERVER_FRAME_LEN_MAX * 2],
            end: 0,
        }
    }

    /// One read (waiting up to `timeout`), then every complete frame to
    /// `f`. Returns false once the server closed the connection.
    pub fn poll(&mut self, timeout: Duration, mut f: impl FnMut(Message<'_>)) -> bool {
        self.poll_stamped(timeout, |m, _| f(m))
    }

    /// [`Reader::poll`], each frame with the kernel's stamp of when the
    /// read's data reached the socket (`None` unless
    /// the drill turned on the kernel's receive stamps for the stream).
    pub fn poll_stamped(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(Message<'_>, Option<std::time::SystemTime>),
    ) -> bool {
        let _ = self
            .stream
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))));
        let mut at = None;
        match crate::rxstamp::recv(&self.stream, &mut self.buf[self.end..]) {
            Ok((0, _)) => return false,
            Ok((n, stamp)) => {
                self.end += n;
                at = stamp;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return false,
        }
        let mut start = 0;
        while let Ok(Some(n)) =
            wire::split_with_max(&self.buf[start..self.end], SERVER_FRAME_LEN_MAX)
        {
            if let Ok(m) = wire::decode(&self.buf[start..start + n]) {
                f(m, at);
            }
            start += n;
        }
        self.buf.copy_within(start..self.end, 0);
        self.end -= start;
        true
    }
}

/// A SnapshotRequest frame for `symbols` with `budget_us` (0: the
/// server's default).
pub fn snapshot_frame(out: &mut [u8], id: u64, budget_us: u32, symbols: &[u16]) -> usize {
    let tier = wire::TIER_ACCOUNT_DEFAULT;
    wire::encode_snapshot_request(out, id, budget_us, false, tier, symbols).expect("request fits")
}
