//! The floor: a minimal relay that only copies each inbound frame to the
//! subscribers of its symbol. It measures what the kernel path (loopback
//! TCP, epoll, one copy per subscriber) costs on this machine, with no
//! aggregation, no sessions and no protocol beyond this:
//!
//! - the first byte of a connection names its role: `P` (publisher) or
//!   `S` (subscriber);
//! - a subscriber then sends `count: u16 LE` and `count` symbol ids
//!   (`u16 LE`); the relay sends it only frames of those symbols (it does
//!   not broadcast everything and let subscribers filter, so the floor
//!   writes exactly the deliveries the other targets write);
//! - a publisher sends SOFH frames whose SBE body starts with the symbol
//!   id (a PriceUpdate); each is copied verbatim.
//!
//! One thread, one mio loop. Buffers are allocated at accept (inbound
//! [`IN_BYTES`], outbound up to `out_bytes_max`); a frame that does not
//! fit a subscriber's outbound buffer is dropped and counted. Fan-out
//! appends to outbound buffers and flushes each dirty subscriber once per
//! loop turn, so one inbound read costs one write per subscriber.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use pricewire::wire;

/// Inbound buffer per connection.
pub const IN_BYTES: usize = 64 * 1024;
/// Symbol ids the relay routes (0..SYMBOLS_MAX).
pub const SYMBOLS_MAX: usize = 4096;

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);

/// Settings of the relay.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    pub listen: SocketAddr,
    pub conns_max: usize,
    pub out_bytes_max: usize,
}

impl RelayConfig {
    pub fn new(listen: SocketAddr) -> RelayConfig {
        RelayConfig {
            listen,
            conns_max: 8192,
            out_bytes_max: 1 << 20,
        }
    }
}

/// Counters of the relay.
#[derive(Debug, Default)]
pub struct RelayStats {
    pub connections: AtomicU64,
    pub frames_in: AtomicU64,
    pub frames_out: AtomicU64,
    pub frames_dropped: AtomicU64,
    pub conns_refused: AtomicU64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Unknown,
    Publisher,
    Subscriber,
}

struct Conn {
    stream: TcpStream,
    role: Role,
    inbuf: Vec<u8>,
    /// Bytes of a partial frame (or hello) kept from the last read.
    have: usize,
    out: Vec<u8>,
    dirty: bool,
    symbols: Vec<u16>,
}

/// A running relay; dropping it without [`RelayHandle::stop`] leaves the
/// thread running until the process ends.
pub struct RelayHandle {
    pub local_addr: SocketAddr,
    pub stats: Arc<RelayStats>,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl RelayHandle {
    /// Stops the loop and closes every connection.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Binds and starts the relay thread.
pub fn spawn(config: RelayConfig) -> io::Result<RelayHandle> {
    let mut listener = TcpListener::bind(config.listen)?;
    let local_addr = listener.local_addr()?;
    let poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let stats = Arc::new(RelayStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut relay = Relay {
        poll,
        listener,
        conns: Vec::new(),
        subs: vec![Vec::new(); SYMBOLS_MAX],
        dirty: Vec::new(),
        config,
        stats: stats.clone(),
    };
    let stop2 = stop.clone();
    let thread = std::thread::Builder::new()
        .name("relay".into())
        .spawn(move || relay.run(&stop2))?;
    Ok(RelayHandle {
        local_addr,
        stats,
        stop,
        waker,
        thread: Some(thread),
    })
}

struct Relay {
    poll: Poll,
    listener: TcpListener,
    conns: Vec<Option<Conn>>,
    /// Subscriber connection indices per symbol.
    subs: Vec<Vec<usize>>,
    dirty: Vec<usize>,
    config: RelayConfig,
    stats: Arc<RelayStats>,
}

impl Relay {
    fn run(&mut self, stop: &AtomicBool) {
        let mut events = Events::with_capacity(1024);
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = self
                .poll
                .poll(&mut events, Some(Duration::from_millis(100)))
            {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("relay: poll failed: {e}");
                return;
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(i) => {
                        if ev.is_readable() || ev.is_read_closed() {
                            self.read(i);
                        }
                        if ev.is_writable() {
                            self.flush(i);
                        }
                    }
                }
            }
            self.flush_dirty();
        }
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.add(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return,
            }
        }
    }

    fn add(&mut self, mut stream: TcpStream) {
        let slot = self.conns.iter().position(Option::is_none);
        let i = slot.unwrap_or(self.conns.len());
        if i >= self.config.conns_max {
            self.stats.conns_refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let _ = stream.set_nodelay(true);
        let interest = Interest::READABLE | Interest::WRITABLE;
        if self
            .poll
            .registry()
            .register(&mut stream, Token(i), interest)
            .is_err()
        {
            return;
        }
        let conn = Conn {
            stream,
            role: Role::Unknown,
            inbuf: vec![0; IN_BYTES],
            have: 0,
            out: Vec::with_capacity(self.config.out_bytes_max),
            dirty: false,
            symbols: Vec::new(),
        };
        if i == self.conns.len() {
            self.conns.push(Some(conn));
        } else {
            self.conns[i] = Some(conn);
        }
        self.stats.connections.fetch_add(1, Ordering::Relaxed);
    }

    fn read(&mut self, i: usize) {
        let Some(mut conn) = self.conns.get_mut(i).and_then(Option::take) else {
            return;
        };
        let alive = self.read_conn(&mut conn, i);
        if alive {
            self.conns[i] = Some(conn);
        } else {
            self.close(i, conn);
        }
    }

    /// Reads until `WouldBlock`, handling whole frames as they arrive; a
    /// partial frame stays in the buffer for the next readiness. Returns
    /// false when the connection is finished or malformed.
    fn read_conn(&mut self, conn: &mut Conn, i: usize) -> bool {
        loop {
            let have = conn.have;
            if have == conn.inbuf.len() {
                return false; // a frame larger than the buffer: protocol error
            }
            match conn.stream.read(&mut conn.inbuf[have..]) {
                Ok(0) => return false,
                Ok(n) => {
                    let have = have + n;
                    let Some(used) = self.consume(conn, i, have) else {
                        return false;
                    };
                    conn.inbuf.copy_within(used..have, 0);
                    conn.have = have - used;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }

    /// Handles the bytes `inbuf[..have]`; returns how many were used, or
    /// `None` when the stream is malformed.
    fn consume(&mut self, conn: &mut Conn, i: usize, have: usize) -> Option<usize> {
        let mut used = 0;
        if conn.role == Role::Unknown {
            match conn.inbuf[0] {
                b'P' => conn.role = Role::Publisher,
                b'S' => {
                    let n = self.subscribe(conn, i, have)?;
                    if n == 0 {
                        return Some(0);
                    }
                    return Some(n);
                }
                _ => return None,
            }
            used = 1;
        }
        if conn.role != Role::Publisher {
            return if used < have { None } else { Some(used) };
        }
        while let Ok(Some(len)) = wire::split(&conn.inbuf[used..have]) {
            self.fan_out(&conn.inbuf[used..used + len]);
            used += len;
        }
        wire::split(&conn.inbuf[used..have]).ok()?;
        Some(used)
    }

    /// Parses a subscriber hello; 0 = incomplete.
    fn subscribe(&mut self, conn: &mut Conn, i: usize, have: usize) -> Option<usize> {
        if have < 3 {
            return Some(0);
        }
        let count = u16::from_le_bytes([conn.inbuf[1], conn.inbuf[2]]) as usize;
        let need = 3 + 2 * count;
        if have < need {
            return Some(0);
        }
        for k in 0..count {
            let o = 3 + 2 * k;
            let s = u16::from_le_bytes([conn.inbuf[o], conn.inbuf[o + 1]]);
            let list = self.subs.get_mut(s as usize)?;
            list.push(i);
            conn.symbols.push(s);
        }
        conn.role = Role::Subscriber;
        Some(need)
    }

    fn fan_out(&mut self, frame: &[u8]) {
        self.stats.frames_in.fetch_add(1, Ordering::Relaxed);
        let Some(sym) = frame.get(14..16) else {
            return;
        };
        let sym = u16::from_le_bytes([sym[0], sym[1]]) as usize;
        let Some(list) = self.subs.get(sym) else {
            return;
        };
        let (mut out, mut dropped) = (0u64, 0u64);
        for &s in list {
            let Some(c) = self.conns.get_mut(s).and_then(Option::as_mut) else {
                continue;
            };
            if c.out.len() + frame.len() > self.config.out_bytes_max {
                dropped += 1;
                continue;
            }
            c.out.extend_from_slice(frame);
            out += 1;
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(s);
            }
        }
        self.stats.frames_out.fetch_add(out, Ordering::Relaxed);
        self.stats
            .frames_dropped
            .fetch_add(dropped, Ordering::Relaxed);
    }

    fn flush_dirty(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        for &i in &dirty {
            if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
                c.dirty = false;
            }
            self.flush(i);
        }
        self.dirty = dirty;
        self.dirty.clear();
    }

    fn flush(&mut self, i: usize) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let mut done = 0;
        while done < c.out.len() {
            match c.stream.write(&c.out[done..]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break, // WouldBlock: the writable event resumes
            }
        }
        c.out.drain(..done);
    }

    fn close(&mut self, i: usize, mut conn: Conn) {
        for &s in &conn.symbols {
            if let Some(list) = self.subs.get_mut(s as usize) {
                list.retain(|&x| x != i);
            }
        }
        let _ = self.poll.registry().deregister(&mut conn.stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn relay_copies_frames_only_to_subscribers_of_the_symbol() {
        let relay = spawn(RelayConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
        let t = Duration::from_secs(5);
        let connect = || {
            let s = std::net::TcpStream::connect_timeout(&relay.local_addr, t).unwrap();
            s.set_read_timeout(Some(t)).unwrap();
            s
        };
        let mut sub7 = connect();
        sub7.write_all(&[b'S', 1, 0, 7, 0]).unwrap();
        let mut sub8 = connect();
        sub8.write_all(&[b'S', 1, 0, 8, 0]).unwrap();
        // Wait until both subscriptions are in: a publisher frame sent
        // before would reach nobody. Poll the relay's own counter.
        let deadline = std::time::Instant::now() + t;
        while relay.stats.connections.load(Ordering::Relaxed) < 2 {
            assert!(std::time::Instant::now() < deadline, "relay never accepted");
            std::thread::yield_now();
        }
        let mut publisher = connect();
        publisher.write_all(b"P").unwrap();
        let tick = |symbol, seq| crate::target::BenchTick {
            symbol,
            seq,
            bid: 1,
            ask: 2,
            scheduled_ns: 5,
        };
        // Retry the first frame until the subscriber sees it, so the test
        // does not depend on the relay having read the hellos yet.
        let mut buf = [0u8; 76];
        sub7.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let mut seen = false;
        for seq in 1..=100 {
            publisher
                .write_all(&crate::target::payload(&tick(7, seq)))
                .unwrap();
            if sub7.read_exact(&mut buf).is_ok() {
                seen = true;
                break;
            }
        }
        assert!(seen, "subscriber of symbol 7 got nothing");
        assert_eq!(u16::from_le_bytes([buf[14], buf[15]]), 7);
        sub8.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        assert!(
            sub8.read(&mut buf).is_err(),
            "symbol 8 got a symbol 7 frame"
        );
        relay.stop();
    }
}
