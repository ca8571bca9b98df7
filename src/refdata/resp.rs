//! A small RESP2 client over a blocking `std::net::TcpStream`, with a total
//! deadline per command.
//!
//! Contract: [`RespConn::connect`] is bounded by its connect timeout (TCP
//! connect plus the optional `AUTH`/`SELECT` handshake); every
//! [`RespConn::command`] is bounded by its timeout *in total*: before each
//! read and write the socket timeout is set to the time remaining, so a
//! reply that trickles in cannot stretch one call to many timeouts.
//! [`RespConn::transaction`] runs several commands as one `MULTI`/`EXEC`
//! (one round trip, one deadline), each command's error reply its own. Replies
//! are bounded ([`REPLY_BYTES_MAX`], [`ARRAY_LEN_MAX`], [`DEPTH_MAX`]); the
//! read buffer is allocated once per connection. After any error the
//! connection is unusable (a late reply would answer the next command), so
//! callers drop it; [`super::pool::Pool`] does.
//!
//! Why not the `redis` crate: its current release needs a newer compiler
//! than the project's MSRV, brings ~57 crates (an ICU stack through `url`)
//! onto a build machine with two cores, and its read timeout is per read
//! syscall; it also keeps a connection open after a read timeout. The few
//! commands pricewire needs fit in this file, with timeouts we control.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Largest reply accepted (an account hash is a few hundred bytes).
pub const REPLY_BYTES_MAX: usize = 64 * 1024;
/// Most elements in one reply array.
pub const ARRAY_LEN_MAX: usize = 4_096;
/// Deepest nesting of arrays accepted.
pub const DEPTH_MAX: usize = 4;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A nil bulk string or array (`$-1`, `*-1`).
    Nil,
    /// A simple string (`+OK`).
    Simple(String),
    /// An integer (`:1`).
    Int(i64),
    /// A bulk string, as bytes.
    Bulk(Vec<u8>),
    /// An array of replies.
    Array(Vec<Value>),
}

/// How a Redis call failed. The variants are what the client really
/// returns for each fault (asserted in `tests/it/refdata_breaker.rs`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedisError {
    /// TCP connect failed at once (refused, unreachable).
    #[error("connect failed: {kind:?}")]
    Connect {
        /// The OS's error kind.
        kind: io::ErrorKind,
    },
    /// TCP connect or the handshake did not finish within the connect timeout.
    #[error("connect timed out")]
    ConnectTimeout,
    /// The command's total deadline passed (blackholed or stalled peer).
    #[error("command timed out")]
    Timeout,
    /// The peer closed the connection (EOF) before a full reply.
    #[error("connection closed by peer")]
    Closed,
    /// Any other socket error (reset, broken pipe).
    #[error("socket error: {kind:?}")]
    Io {
        /// The OS's error kind.
        kind: io::ErrorKind,
    },
    /// The reply broke the RESP grammar.
    #[error("protocol error: {0}")]
    Protocol(&'static str),
    /// The reply was well formed so far but over a bound
    /// ([`REPLY_BYTES_MAX`], [`ARRAY_LEN_MAX`]): the data is too big, the
    /// server is healthy. The connection is dropped like after any error.
    #[error("reply too large: {0}")]
    TooLarge(&'static str),
    /// Redis answered with an error reply (`-ERR ...`, `-WRONGTYPE ...`).
    #[error("server error: {0}")]
    Server(String),
}

impl RedisError {
    fn from_io(e: &io::Error) -> RedisError {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => RedisError::Timeout,
            io::ErrorKind::UnexpectedEof => RedisError::Closed,
            kind => RedisError::Io { kind },
        }
    }

    /// True for `-WRONGTYPE`: the key holds another type (a data problem,
    /// not an unhealthy server).
    pub fn is_wrong_type(&self) -> bool {
        matches!(self, RedisError::Server(m) if m.starts_with("WRONGTYPE"))
    }
}

/// One connection. Not shared: the pool hands it to one caller at a time.
#[derive(Debug)]
pub struct RespConn {
    stream: TcpStream,
    buf: Vec<u8>,
    filled: usize,
    out: Vec<u8>,
}

impl RespConn {
    /// Connects within `connect_timeout` and runs `AUTH` / `SELECT` when
    /// given, inside the same budget.
    pub fn connect(
        addr: SocketAddr,
        connect_timeout: Duration,
        password: Option<&str>,
        db: u32,
    ) -> Result<RespConn, RedisError> {
        let started = Instant::now();
        let stream =
            TcpStream::connect_timeout(&addr, connect_timeout).map_err(|e| match e.kind() {
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => RedisError::ConnectTimeout,
                kind => RedisError::Connect { kind },
            })?;
        let _ = stream.set_nodelay(true);
        let mut conn = RespConn {
            stream,
            buf: vec![0; REPLY_BYTES_MAX],
            filled: 0,
            out: Vec::with_capacity(512),
        };
        let handshake = |conn: &mut RespConn, args: &[&[u8]]| {
            let left = connect_timeout.saturating_sub(started.elapsed());
            match conn.command(args, left) {
                Err(RedisError::Timeout) => Err(RedisError::ConnectTimeout),
                other => other.map(|_| ()),
            }
        };
        if let Some(pw) = password {
            handshake(&mut conn, &[b"AUTH", pw.as_bytes()])?;
        }
        if db != 0 {
            handshake(&mut conn, &[b"SELECT", db.to_string().as_bytes()])?;
        }
        Ok(conn)
    }

    /// Sends one command and reads its reply, all within `timeout`.
    /// An error reply comes back as `Err(RedisError::Server)`.
    pub fn command(&mut self, args: &[&[u8]], timeout: Duration) -> Result<Value, RedisError> {
        let deadline = Instant::now() + timeout;
        self.encode(args);
        self.write_out(deadline)?;
        self.filled = 0;
        loop {
            if let Some((value, used)) = parse(&self.buf[..self.filled], 0)? {
                // Bytes beyond this reply belong to no command we sent: the
                // connection is out of step and must not be reused.
                if used != self.filled {
                    return Err(RedisError::Protocol("bytes after the reply"));
                }
                return match value {
                    Reply::Value(v) => Ok(v),
                    Reply::Error(m) => Err(RedisError::Server(m)),
                };
            }
            if self.filled == self.buf.len() {
                return Err(RedisError::TooLarge("reply larger than REPLY_BYTES_MAX"));
            }
            self.read_more(deadline)?;
        }
    }

    /// Runs `cmds` as one `MULTI`/`EXEC` transaction (Redis runs them with
    /// no other client's command between them), all within `timeout`, and
    /// returns each command's reply: `Err(text)` for a command's own error
    /// reply (`-WRONGTYPE ...`), which fails only that command. An error
    /// for the whole transaction (`-EXECABORT`, a refused `MULTI`) is
    /// `Err(RedisError::Server)`.
    pub fn transaction(
        &mut self,
        cmds: &[&[&[u8]]],
        timeout: Duration,
    ) -> Result<Vec<Result<Value, String>>, RedisError> {
        let deadline = Instant::now() + timeout;
        self.out.clear();
        self.encode_one(&[b"MULTI"]);
        for c in cmds {
            self.encode_one(c);
        }
        self.encode_one(&[b"EXEC"]);
        self.write_out(deadline)?;
        self.filled = 0;
        // `+OK`, one `+QUEUED` per command, then EXEC's array.
        let mut at = 0;
        for _ in 0..=cmds.len() {
            let (reply, used) = self.reply_at(at, deadline)?;
            if let Reply::Error(m) = reply {
                return Err(RedisError::Server(m));
            }
            at += used;
        }
        loop {
            if let Some((items, used)) = parse_exec(&self.buf[at..self.filled])? {
                if at + used != self.filled {
                    return Err(RedisError::Protocol("bytes after the reply"));
                }
                return items;
            }
            if self.filled == self.buf.len() {
                return Err(RedisError::TooLarge("reply larger than REPLY_BYTES_MAX"));
            }
            self.read_more(deadline)?;
        }
    }

    /// The next whole reply at `at` in the read buffer, reading more
    /// within the deadline.
    fn reply_at(&mut self, at: usize, deadline: Instant) -> Result<(Reply, usize), RedisError> {
        loop {
            if at < self.filled {
                if let Some(r) = parse(&self.buf[at..self.filled], 0)? {
                    return Ok(r);
                }
            }
            if self.filled == self.buf.len() {
                return Err(RedisError::TooLarge("reply larger than REPLY_BYTES_MAX"));
            }
            self.read_more(deadline)?;
        }
    }

    fn encode(&mut self, args: &[&[u8]]) {
        self.out.clear();
        self.encode_one(args);
    }

    fn encode_one(&mut self, args: &[&[u8]]) {
        self.out
            .extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            self.out
                .extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            self.out.extend_from_slice(a);
            self.out.extend_from_slice(b"\r\n");
        }
    }

    fn remaining(deadline: Instant) -> Result<Duration, RedisError> {
        let left = deadline.saturating_duration_since(Instant::now());
        // A zero socket timeout means "block forever" to the OS; refuse it.
        if left < Duration::from_micros(100) {
            return Err(RedisError::Timeout);
        }
        Ok(left)
    }

    fn write_out(&mut self, deadline: Instant) -> Result<(), RedisError> {
        let mut at = 0;
        while at < self.out.len() {
            let left = Self::remaining(deadline)?;
            self.stream
                .set_write_timeout(Some(left))
                .map_err(|e| RedisError::from_io(&e))?;
            match self.stream.write(&self.out[at..]) {
                Ok(0) => return Err(RedisError::Closed),
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(RedisError::from_io(&e)),
            }
        }
        Ok(())
    }

    fn read_more(&mut self, deadline: Instant) -> Result<(), RedisError> {
        loop {
            let left = Self::remaining(deadline)?;
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| RedisError::from_io(&e))?;
            match self.stream.read(&mut self.buf[self.filled..]) {
                Ok(0) => return Err(RedisError::Closed),
                Ok(n) => {
                    self.filled += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(RedisError::from_io(&e)),
            }
        }
    }
}

enum Reply {
    Value(Value),
    Error(String),
}

/// Position of the next CRLF at or after `from`.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

fn int_of(bytes: &[u8]) -> Result<i64, RedisError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(RedisError::Protocol("bad integer"))
}

/// Parses one reply from the start of `buf`: `Ok(None)` when incomplete,
/// otherwise the reply and the bytes it used.
fn parse(buf: &[u8], depth: usize) -> Result<Option<(Reply, usize)>, RedisError> {
    if depth > DEPTH_MAX {
        return Err(RedisError::Protocol("nesting deeper than DEPTH_MAX"));
    }
    let Some(end) = line_end(buf, 1) else {
        return Ok(None);
    };
    let line = &buf[1..end];
    let after = end + 2;
    let text = || String::from_utf8_lossy(line).into_owned();
    let reply = match buf[0] {
        b'+' => (Reply::Value(Value::Simple(text())), after),
        b'-' => (Reply::Error(text()), after),
        b':' => (Reply::Value(Value::Int(int_of(line)?)), after),
        b'$' => return parse_bulk(buf, int_of(line)?, after),
        b'*' => return parse_array(buf, int_of(line)?, after, depth),
        _ => return Err(RedisError::Protocol("unknown reply type")),
    };
    Ok(Some(reply))
}

/// EXEC's reply: an array whose elements may be error replies (one per
/// failed command); `Ok(None)` while incomplete. A nil array (a
/// transaction aborted by `WATCH`, which pricewire never sets) or an
/// error reply fails the whole transaction.
type ExecReply = Result<Vec<Result<Value, String>>, RedisError>;

fn parse_exec(buf: &[u8]) -> Result<Option<(ExecReply, usize)>, RedisError> {
    let Some(end) = line_end(buf, 1) else {
        return Ok(None);
    };
    let after = end + 2;
    let len = match buf[0] {
        b'*' => int_of(&buf[1..end])?,
        b'-' => {
            let m = String::from_utf8_lossy(&buf[1..end]).into_owned();
            return Ok(Some((Err(RedisError::Server(m)), after)));
        }
        _ => return Err(RedisError::Protocol("EXEC did not answer an array")),
    };
    if len < 0 {
        return Err(RedisError::Protocol("EXEC answered nil"));
    }
    if len as usize > ARRAY_LEN_MAX {
        return Err(RedisError::TooLarge("array longer than ARRAY_LEN_MAX"));
    }
    let mut at = after;
    let mut items = Vec::with_capacity(len as usize);
    for _ in 0..len {
        if at >= buf.len() {
            return Ok(None);
        }
        let Some((reply, used)) = parse(&buf[at..], 1)? else {
            return Ok(None);
        };
        items.push(match reply {
            Reply::Value(v) => Ok(v),
            Reply::Error(m) => Err(m),
        });
        at += used;
    }
    Ok(Some((Ok(items), at)))
}

fn parse_bulk(buf: &[u8], len: i64, at: usize) -> Result<Option<(Reply, usize)>, RedisError> {
    if len < 0 {
        return Ok(Some((Reply::Value(Value::Nil), at)));
    }
    let len = len as usize;
    if len > REPLY_BYTES_MAX {
        return Err(RedisError::TooLarge("bulk longer than REPLY_BYTES_MAX"));
    }
    if buf.len() < at + len + 2 {
        return Ok(None);
    }
    if &buf[at + len..at + len + 2] != b"\r\n" {
        return Err(RedisError::Protocol("bulk not terminated by CRLF"));
    }
    let v = Value::Bulk(buf[at..at + len].to_vec());
    Ok(Some((Reply::Value(v), at + len + 2)))
}

fn parse_array(
    buf: &[u8],
    len: i64,
    mut at: usize,
    depth: usize,
) -> Result<Option<(Reply, usize)>, RedisError> {
    if len < 0 {
        return Ok(Some((Reply::Value(Value::Nil), at)));
    }
    if len as usize > ARRAY_LEN_MAX {
        return Err(RedisError::TooLarge("array longer than ARRAY_LEN_MAX"));
    }
    let mut items = Vec::with_capacity(len as usize);
    for _ in 0..len {
        if at >= buf.len() {
            return Ok(None);
        }
        match parse(&buf[at..], depth + 1)? {
            None => return Ok(None),
            Some((Reply::Value(v), used)) => {
                items.push(v);
                at += used;
            }
            Some((Reply::Error(_), _)) => {
                return Err(RedisError::Protocol("error reply inside an array"))
            }
        }
    }
    Ok(Some((Reply::Value(Value::Array(items)), at)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(bytes: &[u8]) -> Option<Value> {
        match parse(bytes, 0).unwrap() {
            Some((Reply::Value(v), used)) => {
                assert_eq!(used, bytes.len());
                Some(v)
            }
            Some((Reply::Error(m), _)) => panic!("error {m}"),
            None => None,
        }
    }

    #[test]
    fn parses_each_reply_type() {
        assert_eq!(value(b"+PONG\r\n"), Some(Value::Simple("PONG".into())));
        assert_eq!(value(b":-7\r\n"), Some(Value::Int(-7)));
        assert_eq!(value(b"$3\r\nabc\r\n"), Some(Value::Bulk(b"abc".to_vec())));
        assert_eq!(value(b"$-1\r\n"), Some(Value::Nil));
        assert_eq!(
            value(b"*2\r\n$1\r\na\r\n:1\r\n"),
            Some(Value::Array(vec![
                Value::Bulk(b"a".to_vec()),
                Value::Int(1)
            ]))
        );
        assert_eq!(value(b"*0\r\n"), Some(Value::Array(vec![])));
        assert!(matches!(
            parse(b"-ERR no\r\n", 0),
            Ok(Some((Reply::Error(m), _))) if m == "ERR no"
        ));
    }

    #[test]
    fn exec_replies_keep_each_commands_error_to_itself() {
        let reply = b"*3\r\n$-1\r\n-WRONGTYPE Operation against a key\r\n*0\r\n";
        let (items, used) = parse_exec(reply).unwrap().unwrap();
        assert_eq!(used, reply.len());
        assert_eq!(
            items.unwrap(),
            vec![
                Ok(Value::Nil),
                Err("WRONGTYPE Operation against a key".to_string()),
                Ok(Value::Array(vec![])),
            ]
        );
        for partial in [&b"*2\r\n"[..], b"*2\r\n:1\r\n", b"*1"] {
            assert!(parse_exec(partial).unwrap().is_none(), "{partial:?}");
        }
        let aborted = b"-EXECABORT Transaction discarded\r\n";
        let (items, _) = parse_exec(aborted).unwrap().unwrap();
        assert!(matches!(items, Err(RedisError::Server(m)) if m.starts_with("EXECABORT")));
        assert!(parse_exec(b"*-1\r\n").is_err());
        assert!(matches!(
            parse_exec(b"*99999\r\n"),
            Err(RedisError::TooLarge(_))
        ));
    }

    #[test]
    fn incomplete_replies_wait_for_more() {
        for partial in [&b"+PON"[..], b"$3\r\nab", b"*2\r\n$1\r\na\r\n", b"*1\r\n"] {
            assert_eq!(value(partial), None, "{partial:?}");
        }
    }

    #[test]
    fn bad_and_oversize_replies_are_refused() {
        assert!(parse(b"?x\r\n", 0).is_err());
        assert!(parse(b":x\r\n", 0).is_err());
        assert!(parse(b"$3\r\nabcd\r\n", 0).is_err());
        assert!(matches!(
            parse(b"*99999\r\n", 0),
            Err(RedisError::TooLarge(_))
        ));
        assert!(matches!(
            parse(b"$999999\r\n", 0),
            Err(RedisError::TooLarge(_))
        ));
        assert!(parse(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", 0).is_err());
    }
}
