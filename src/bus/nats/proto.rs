//! The NATS client protocol without sockets: a parser for what a server
//! sends and encoders for what a client sends.
//!
//! Contract: [`parse`] reads one server op from the front of a byte buffer
//! and borrows from it (no allocation); it returns `Ok(None)` while the op
//! is incomplete, so an op split across reads parses the same once the rest
//! arrives, and it never panics on bad input — every refusal is a
//! [`ProtoError`] with its reason. A control line is at most [`LINE_MAX`]
//! bytes and a message payload at most the `max_payload` the server
//! announced in INFO. The encoders append to a caller's reusable buffer and
//! allocate nothing once that buffer has grown to its working size.

use std::fmt;

/// Longest control line accepted from a server, terminator included.
pub(crate) const LINE_MAX: usize = 4_096;
/// Largest `max_payload` this client accepts from INFO (it sizes the read
/// buffer, so it is bounded); larger announcements are clamped to it.
pub(crate) const PAYLOAD_MAX: usize = 8 << 20;

/// One op from a server, borrowing the read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op<'a> {
    /// `INFO {json}`: the JSON text.
    Info(&'a [u8]),
    /// `MSG` or `HMSG` (then `headers` holds the `NATS/1.0` block).
    Msg(Msg<'a>),
    Ping,
    Pong,
    Ok,
    /// `-ERR 'reason'`: the reason as sent.
    Err(&'a [u8]),
}

/// A delivered message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Msg<'a> {
    pub(crate) subject: &'a [u8],
    pub(crate) sid: u64,
    pub(crate) reply: Option<&'a [u8]>,
    /// The header block (`NATS/1.0…\r\n\r\n`); empty for a plain MSG.
    pub(crate) headers: &'a [u8],
    pub(crate) payload: &'a [u8],
}

/// Why the bytes from a server are not the NATS protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProtoError {
    /// No line terminator within [`LINE_MAX`] bytes.
    LineTooLong,
    /// A message larger than the server's own `max_payload`.
    PayloadTooLarge(usize),
    /// An op this client does not know.
    UnknownOp,
    /// A known op with bad arguments or framing.
    Malformed(&'static str),
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::LineTooLong => write!(f, "control line over {LINE_MAX} bytes"),
            ProtoError::PayloadTooLarge(n) => write!(f, "{n}-byte message over max_payload"),
            ProtoError::UnknownOp => write!(f, "unknown op"),
            ProtoError::Malformed(why) => write!(f, "malformed: {why}"),
        }
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Splits `line` into at most `N` whitespace-separated arguments; the
/// count, or `None` if there are more.
fn split_args<'a, const N: usize>(line: &'a [u8], out: &mut [&'a [u8]; N]) -> Option<usize> {
    let mut n = 0;
    for arg in line.split(|&b| is_space(b)).filter(|a| !a.is_empty()) {
        *out.get_mut(n)? = arg;
        n += 1;
    }
    Some(n)
}

/// A decimal number of at most 19 digits.
pub(crate) fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')),
    )
}

fn parse_len(digits: &[u8]) -> Result<usize, ProtoError> {
    parse_u64(digits)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or(ProtoError::Malformed("length is not a number"))
}

/// Parses the op at the front of `buf`: `Ok(Some((op, consumed)))`,
/// `Ok(None)` if more bytes are needed, or why the bytes are refused.
pub(crate) fn parse(buf: &[u8], max_payload: usize) -> Result<Option<(Op<'_>, usize)>, ProtoError> {
    let Some(eol) = find_crlf(&buf[..buf.len().min(LINE_MAX)]) else {
        return if buf.len() >= LINE_MAX {
            Err(ProtoError::LineTooLong)
        } else {
            Ok(None)
        };
    };
    let line = &buf[..eol];
    let name_end = line.iter().position(|&b| is_space(b)).unwrap_or(line.len());
    let (name, rest) = line.split_at(name_end);
    let after = eol + 2;
    let simple = |op| Ok(Some((op, after)));
    if name.eq_ignore_ascii_case(b"MSG") {
        parse_msg(buf, rest, after, false, max_payload)
    } else if name.eq_ignore_ascii_case(b"HMSG") {
        parse_msg(buf, rest, after, true, max_payload)
    } else if name.eq_ignore_ascii_case(b"PING") && rest.iter().all(|&b| is_space(b)) {
        simple(Op::Ping)
    } else if name.eq_ignore_ascii_case(b"PONG") && rest.iter().all(|&b| is_space(b)) {
        simple(Op::Pong)
    } else if name.eq_ignore_ascii_case(b"+OK") {
        simple(Op::Ok)
    } else if name.eq_ignore_ascii_case(b"-ERR") {
        simple(Op::Err(rest.trim_ascii()))
    } else if name.eq_ignore_ascii_case(b"INFO") {
        simple(Op::Info(rest.trim_ascii()))
    } else {
        Err(ProtoError::UnknownOp)
    }
}

/// `MSG subject sid [reply] size` or `HMSG subject sid [reply] hsize size`.
fn parse_msg<'a>(
    buf: &'a [u8],
    args_line: &'a [u8],
    body_at: usize,
    with_headers: bool,
    max_payload: usize,
) -> Result<Option<(Op<'a>, usize)>, ProtoError> {
    let mut args = [&[][..]; 5];
    let n = split_args(args_line, &mut args).ok_or(ProtoError::Malformed("too many arguments"))?;
    let sizes = usize::from(with_headers) + 1;
    if n != 2 + sizes && n != 3 + sizes {
        return Err(ProtoError::Malformed("wrong number of arguments"));
    }
    let sid = parse_u64(args[1]).ok_or(ProtoError::Malformed("sid is not a number"))?;
    let reply = (n == 3 + sizes).then_some(args[2]);
    let total = parse_len(args[n - 1])?;
    let header_len = if with_headers {
        parse_len(args[n - 2])?
    } else {
        0
    };
    if header_len > total {
        return Err(ProtoError::Malformed("header size over total size"));
    }
    if total > max_payload {
        return Err(ProtoError::PayloadTooLarge(total));
    }
    let end = body_at + total;
    if buf.len() < end + 2 {
        return Ok(None);
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Err(ProtoError::Malformed("payload not followed by CRLF"));
    }
    let headers = &buf[body_at..body_at + header_len];
    if with_headers && !headers.starts_with(b"NATS/1.0") {
        return Err(ProtoError::Malformed("header block without NATS/1.0"));
    }
    let msg = Msg {
        subject: args[0],
        sid,
        reply,
        headers,
        payload: &buf[body_at + header_len..end],
    };
    Ok(Some((Op::Msg(msg), end + 2)))
}

/// The status code on a header block's first line (`NATS/1.0 404 …`).
pub(crate) fn header_status(headers: &[u8]) -> Option<u16> {
    let first = &headers[..find_crlf(headers).unwrap_or(headers.len())];
    let code = first.strip_prefix(b"NATS/1.0")?.trim_ascii_start();
    let digits = code.split(|&b| is_space(b)).next()?;
    parse_u64(digits).and_then(|n| u16::try_from(n).ok())
}

/// The value of header `name` (first occurrence, name case-insensitive).
pub(crate) fn header<'a>(headers: &'a [u8], name: &str) -> Option<&'a [u8]> {
    headers.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        let (k, v) = line.split_at(colon);
        k.trim_ascii()
            .eq_ignore_ascii_case(name.as_bytes())
            .then(|| v[1..].trim_ascii())
    })
}

/// `n` in decimal, written into `digits` (no allocation).
pub(crate) fn u64_digits(n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[i..]
}

/// Appends `n` in decimal (no allocation).
pub(crate) fn put_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(u64_digits(n, &mut [0; 20]));
}

/// `CONNECT {json}\r\n`.
pub(crate) fn connect(out: &mut Vec<u8>, json: &str) {
    out.extend_from_slice(b"CONNECT ");
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn subject_and_reply(out: &mut Vec<u8>, subject: &str, reply: Option<&[u8]>) {
    out.extend_from_slice(subject.as_bytes());
    out.push(b' ');
    if let Some(r) = reply {
        out.extend_from_slice(r);
        out.push(b' ');
    }
}

/// `PUB subject [reply] size\r\npayload\r\n`.
pub(crate) fn publish(out: &mut Vec<u8>, subject: &str, reply: Option<&[u8]>, payload: &[u8]) {
    out.extend_from_slice(b"PUB ");
    subject_and_reply(out, subject, reply);
    put_u64(out, payload.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
}

/// The length of the header block [`hpublish`] writes for `headers`.
fn header_block_len(headers: &[(&str, &[u8])]) -> usize {
    let fields: usize = headers.iter().map(|(k, v)| k.len() + 2 + v.len() + 2).sum();
    b"NATS/1.0\r\n".len() + fields + 2
}

/// `HPUB subject [reply] hsize size\r\nNATS/1.0\r\nK: V\r\n…\r\npayload\r\n`.
pub(crate) fn hpublish(
    out: &mut Vec<u8>,
    subject: &str,
    reply: Option<&[u8]>,
    headers: &[(&str, &[u8])],
    payload: &[u8],
) {
    let header_len = header_block_len(headers);
    out.extend_from_slice(b"HPUB ");
    subject_and_reply(out, subject, reply);
    put_u64(out, header_len as u64);
    out.push(b' ');
    put_u64(out, (header_len + payload.len()) as u64);
    out.extend_from_slice(b"\r\nNATS/1.0\r\n");
    for (k, v) in headers {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
}

/// `SUB subject sid\r\n`.
pub(crate) fn subscribe(out: &mut Vec<u8>, subject: &str, sid: u64) {
    out.extend_from_slice(b"SUB ");
    out.extend_from_slice(subject.as_bytes());
    out.push(b' ');
    put_u64(out, sid);
    out.extend_from_slice(b"\r\n");
}

/// `UNSUB sid\r\n`. The bus keeps its subscriptions for the life of the
/// thread, so only the tests use it today.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn unsubscribe(out: &mut Vec<u8>, sid: u64) {
    out.extend_from_slice(b"UNSUB ");
    put_u64(out, sid);
    out.extend_from_slice(b"\r\n");
}

/// `PING\r\n`.
pub(crate) fn ping(out: &mut Vec<u8>) {
    out.extend_from_slice(b"PING\r\n");
}

/// `PONG\r\n`.
pub(crate) fn pong(out: &mut Vec<u8>) {
    out.extend_from_slice(b"PONG\r\n");
}

/// A read buffer sized once for the largest op: bytes arrive at the back,
/// parsed ops leave from the front, and the rest moves to the start only
/// when the back is full.
#[derive(Debug)]
pub(crate) struct ReadBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuf {
    /// A buffer that holds any op of up to `max_payload` bytes.
    pub(crate) fn new(max_payload: usize) -> ReadBuf {
        ReadBuf {
            buf: vec![0; Self::capacity_for(max_payload)],
            start: 0,
            end: 0,
        }
    }

    fn capacity_for(max_payload: usize) -> usize {
        max_payload.min(PAYLOAD_MAX) + LINE_MAX + 4
    }

    /// Grows to hold ops of `max_payload` bytes (at connect, never while
    /// prices flow).
    pub(crate) fn reserve(&mut self, max_payload: usize) {
        let want = Self::capacity_for(max_payload);
        if want > self.buf.len() {
            self.buf.resize(want, 0);
        }
    }

    /// Forgets everything (a new connection).
    pub(crate) fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// The bytes not parsed yet.
    pub(crate) fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// `n` bytes at the front were parsed.
    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.start);
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.clear();
        }
    }

    /// Room to read into (empty only if one op fills the whole buffer,
    /// which the parser refuses before it can happen).
    pub(crate) fn spare(&mut self) -> &mut [u8] {
        if self.end == self.buf.len() && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes were read into [`ReadBuf::spare`].
    pub(crate) fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }
}

#[cfg(test)]
#[path = "proto_tests.rs"]
mod tests;
