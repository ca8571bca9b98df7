//! The PROXY protocol v2 header (HAProxy's `proxy-protocol.txt`, section
//! 2.2), parsed sans-IO: bytes in, [`Parse`] out, nothing read, nothing
//! allocated, no panic on any input.
//!
//! Layout: a 12-byte signature, one byte of version (high nibble, must be
//! 2) and command (low nibble: 0 LOCAL, 1 PROXY), one byte of address
//! family (high nibble: 0 UNSPEC, 1 INET, 2 INET6, 3 UNIX) and transport
//! (low nibble: 0 UNSPEC, 1 STREAM, 2 DGRAM), a big-endian `u16` length of
//! what follows, then the addresses (source address, destination address,
//! source port, destination port) and optional TLVs, which are skipped.
//!
//! The decision depends only on the bytes, never on how they were split:
//! a prefix that already shows a fault is refused at once, and a prefix
//! that is too short says how many bytes the header needs in total
//! ([`Parse::Incomplete`]), so a reader can take exactly the header off a
//! socket and leave what follows (a logon, a TLS ClientHello) unread.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The v2 signature: the first 12 bytes of every v2 header.
pub const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// Bytes before the address block: signature, version/command, family,
/// length.
pub const FIXED_LEN: usize = 16;

/// Largest address block (addresses and TLVs) accepted, in bytes. The
/// spec's largest address block is 216 bytes (UNIX); the rest is room
/// for TLVs a balancer adds (unique id, authority, TLS details). A header
/// declaring more is refused as [`ProxyFailure::TooLong`].
pub const MAX_BLOCK_LEN: usize = 2048;

/// Largest whole header accepted, in bytes.
pub const MAX_HEADER_LEN: usize = FIXED_LEN + MAX_BLOCK_LEN;

/// The start of a v1 (text) header, which pricewire does not accept.
const V1_PREFIX: &[u8] = b"PROXY ";

/// What the header's command says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// The balancer's own connection (a health check): the connection's
    /// real endpoints stand; the address block is ignored.
    Local,
    /// A relayed connection: the header carries the client's address
    /// (or, for an UNSPEC or UNIX family, no usable one).
    Proxy,
}

impl Command {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Command::Local => "local",
            Command::Proxy => "proxy",
        }
    }
}

/// A complete, valid header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes the header takes on the wire (fixed part, addresses, TLVs).
    pub len: usize,
    /// LOCAL or PROXY.
    pub command: Command,
    /// The client's address and port: `Some` for a PROXY command over
    /// TCP on IPv4 or IPv6, `None` otherwise (the connection's own peer
    /// address stands).
    pub src: Option<SocketAddr>,
    /// The address the client connected to (the balancer's front end),
    /// when `src` is `Some`.
    pub dst: Option<SocketAddr>,
}

impl Header {
    /// The address to account the connection to: the header's source, or
    /// the connection's peer (`peer`, the balancer) when the header names
    /// none (LOCAL, UNSPEC, UNIX).
    pub fn client(&self, peer: SocketAddr) -> SocketAddr {
        self.src.unwrap_or(peer)
    }
}

/// Why a connection's header was refused: the `reason` label of
/// `pricewire_proxy_header_failures_total`. The first six are decided by
/// [`parse`]; the rest by the listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyFailure {
    /// The bytes are not a PROXY header (e.g. a client speaking the
    /// protocol straight to a listener that expects a balancer).
    BadSignature,
    /// A v1 (text) header: only v2 is accepted.
    V1Unsupported,
    /// The version nibble is not 2.
    BadVersion,
    /// The command nibble is neither LOCAL nor PROXY.
    BadCommand,
    /// An unknown family or transport, or an address block shorter than
    /// its family needs.
    BadAddress,
    /// The declared length is above [`MAX_BLOCK_LEN`].
    TooLong,
    /// No complete header within the header timeout.
    Timeout,
    /// The peer closed (or reset) before its header was complete.
    PeerClosed,
    /// The peer is not in the trusted balancer networks (`--proxy-from`).
    Untrusted,
    /// Too many connections were already waiting for their header.
    Overflow,
}

impl ProxyFailure {
    /// Every reason, in label order.
    pub const ALL: [ProxyFailure; 10] = [
        Self::BadSignature,
        Self::V1Unsupported,
        Self::BadVersion,
        Self::BadCommand,
        Self::BadAddress,
        Self::TooLong,
        Self::Timeout,
        Self::PeerClosed,
        Self::Untrusted,
        Self::Overflow,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::BadSignature => "bad_signature",
            Self::V1Unsupported => "v1_unsupported",
            Self::BadVersion => "bad_version",
            Self::BadCommand => "bad_command",
            Self::BadAddress => "bad_address",
            Self::TooLong => "too_long",
            Self::Timeout => "timeout",
            Self::PeerClosed => "peer_closed",
            Self::Untrusted => "untrusted",
            Self::Overflow => "overflow",
        }
    }

    /// A sentence for the log.
    pub fn describe(self) -> &'static str {
        match self {
            Self::BadSignature => "not a PROXY protocol v2 header",
            Self::V1Unsupported => "PROXY protocol v1 (text) is not accepted; send v2",
            Self::BadVersion => "PROXY header version is not 2",
            Self::BadCommand => "PROXY header command is neither LOCAL nor PROXY",
            Self::BadAddress => "PROXY header family, transport or address length is invalid",
            Self::TooLong => "PROXY header longer than accepted",
            Self::Timeout => "no complete PROXY header within the header timeout",
            Self::PeerClosed => "peer closed before its PROXY header was complete",
            Self::Untrusted => "peer is not a trusted balancer (--proxy-from)",
            Self::Overflow => "too many connections waiting for their PROXY header",
        }
    }

    pub(crate) fn index(self) -> usize {
        Self::ALL.iter().position(|&r| r == self).unwrap_or(0)
    }
}

/// What the bytes so far amount to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parse {
    /// Not enough bytes yet: the header needs `need` bytes in total
    /// (always more than given, at most [`MAX_HEADER_LEN`]). Reading no
    /// more than that leaves whatever follows the header unread.
    Incomplete {
        /// Total header bytes needed before the next decision.
        need: usize,
    },
    /// A complete header: its first [`Header::len`] bytes; bytes after it
    /// are not the header's.
    Header(Header),
    /// Refused; the connection must be closed.
    Error(ProxyFailure),
}

/// Parses the start of a connection's bytes as a PROXY v2 header.
pub fn parse(buf: &[u8]) -> Parse {
    let sig = buf.len().min(SIGNATURE.len());
    if buf[..sig] != SIGNATURE[..sig] {
        let v1 = buf.len().min(V1_PREFIX.len());
        return match buf[..v1] == V1_PREFIX[..v1] {
            true if v1 == V1_PREFIX.len() => Parse::Error(ProxyFailure::V1Unsupported),
            true => Parse::Incomplete {
                need: V1_PREFIX.len(),
            },
            false => Parse::Error(ProxyFailure::BadSignature),
        };
    }
    if let Some(&vc) = buf.get(12) {
        if vc >> 4 != 2 {
            return Parse::Error(ProxyFailure::BadVersion);
        }
        if vc & 0x0f > 1 {
            return Parse::Error(ProxyFailure::BadCommand);
        }
    }
    if buf.len() < FIXED_LEN {
        return Parse::Incomplete { need: FIXED_LEN };
    }
    let command = match buf[12] & 0x0f {
        0 => Command::Local,
        _ => Command::Proxy,
    };
    let block = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if block > MAX_BLOCK_LEN {
        return Parse::Error(ProxyFailure::TooLong);
    }
    let len = FIXED_LEN + block;
    let Some(body) = buf.get(FIXED_LEN..len) else {
        return Parse::Incomplete { need: len };
    };
    if command == Command::Local {
        return Parse::Header(Header {
            len,
            command,
            src: None,
            dst: None,
        });
    }
    match addresses(buf[13], body) {
        Ok(a) => Parse::Header(Header {
            len,
            command,
            src: a.map(|a| a.0),
            dst: a.map(|a| a.1),
        }),
        Err(why) => Parse::Error(why),
    }
}

type Pair = (SocketAddr, SocketAddr);

/// The source and destination of a PROXY command's address block, by its
/// family/transport byte `ft`; `None` for UNSPEC and UNIX (no IP).
fn addresses(ft: u8, body: &[u8]) -> Result<Option<Pair>, ProxyFailure> {
    let (family, transport) = (ft >> 4, ft & 0x0f);
    match (family, transport) {
        // UNSPEC: the spec lets the receiver use the real endpoints.
        (0, _) => Ok(None),
        (1, 1) => {
            let b: &[u8; 12] = block(body)?;
            let ip = |o: usize| IpAddr::V4(Ipv4Addr::new(b[o], b[o + 1], b[o + 2], b[o + 3]));
            let port = |o: usize| u16::from_be_bytes([b[o], b[o + 1]]);
            Ok(Some((
                SocketAddr::new(ip(0), port(8)),
                SocketAddr::new(ip(4), port(10)),
            )))
        }
        (2, 1) => {
            let b: &[u8; 36] = block(body)?;
            let ip = |o: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&b[o..o + 16]);
                IpAddr::V6(Ipv6Addr::from(a))
            };
            let port = |o: usize| u16::from_be_bytes([b[o], b[o + 1]]);
            Ok(Some((
                SocketAddr::new(ip(0), port(32)),
                SocketAddr::new(ip(16), port(34)),
            )))
        }
        // UNIX stream: paths, not addresses to account to.
        (3, 1) => block::<216>(body).map(|_| None),
        _ => Err(ProxyFailure::BadAddress),
    }
}

/// The first `N` bytes of the address block, or [`ProxyFailure::BadAddress`]
/// when the block is shorter than its family needs.
fn block<const N: usize>(body: &[u8]) -> Result<&[u8; N], ProxyFailure> {
    body.get(..N)
        .and_then(|b| b.try_into().ok())
        .ok_or(ProxyFailure::BadAddress)
}

/// Encodes a PROXY v2 header for a TCP connection from `src` to `dst`
/// (both of one family), or a LOCAL header when `addrs` is `None`; `tlv`
/// bytes are appended after the addresses. For tests, fuzz seeds and
/// tools; returns `None` when the families differ or the block is longer
/// than [`MAX_BLOCK_LEN`].
pub fn encode(addrs: Option<(SocketAddr, SocketAddr)>, tlv: &[u8]) -> Option<Vec<u8>> {
    let mut out = SIGNATURE.to_vec();
    let mut block = Vec::new();
    let (vc, ft) = match addrs {
        None => (0x20, 0x00),
        Some((SocketAddr::V4(s), SocketAddr::V4(d))) => {
            block.extend_from_slice(&s.ip().octets());
            block.extend_from_slice(&d.ip().octets());
            block.extend_from_slice(&s.port().to_be_bytes());
            block.extend_from_slice(&d.port().to_be_bytes());
            (0x21, 0x11)
        }
        Some((SocketAddr::V6(s), SocketAddr::V6(d))) => {
            block.extend_from_slice(&s.ip().octets());
            block.extend_from_slice(&d.ip().octets());
            block.extend_from_slice(&s.port().to_be_bytes());
            block.extend_from_slice(&d.port().to_be_bytes());
            (0x21, 0x21)
        }
        Some(_) => return None,
    };
    block.extend_from_slice(tlv);
    if block.len() > MAX_BLOCK_LEN {
        return None;
    }
    out.extend_from_slice(&[vc, ft]);
    out.extend_from_slice(&(block.len() as u16).to_be_bytes());
    out.extend_from_slice(&block);
    Some(out)
}
