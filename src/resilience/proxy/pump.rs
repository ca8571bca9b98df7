//! Per-connection forwarding: for each direction a reader thread applies
//! the read-side toxics (stall, reset, blackhole, garbage, latency stamp) and
//! hands chunks over a bounded channel to a writer thread that holds them
//! until due, paces bandwidth and passes the close on (slowly if asked).
//! Chunks are stamped with their due time when read, so latency does not
//! accumulate across chunks of a stream.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::runtime::sys::set_linger_zero;

use super::{
    spawn_named, Shared, CHUNKS_IN_FLIGHT_MAX, CHUNK_BYTES_MAX, POLL_MS,
    UPSTREAM_CONNECT_TIMEOUT_MS,
};

const POLL: Duration = Duration::from_millis(POLL_MS);

enum Chunk {
    Data { due: Instant, bytes: Vec<u8> },
    Eof,
}

/// The two sockets of one proxied connection.
struct Conn {
    client: TcpStream,
    upstream: TcpStream,
    closing: AtomicBool,
}

impl Conn {
    fn done(&self, shared: &Shared) -> bool {
        self.closing.load(Relaxed) || shared.stopping()
    }

    /// Arms an RST for both sockets: with SO_LINGER 0 the last close of each
    /// socket (when every pump thread has let go) sends RST instead of FIN.
    fn reset(&self, shared: &Shared) {
        if !self.closing.swap(true, Relaxed) {
            let _ = set_linger_zero(&self.client);
            let _ = set_linger_zero(&self.upstream);
            shared.stats.resets.fetch_add(1, Relaxed);
        }
    }
}

#[derive(Clone, Copy)]
enum Direction {
    Up,
    Down,
}

impl Direction {
    fn bytes(self, shared: &Shared) -> &AtomicU64 {
        match self {
            Direction::Up => &shared.stats.bytes_up,
            Direction::Down => &shared.stats.bytes_down,
        }
    }
}

pub(crate) fn serve_connection(shared: &Arc<Shared>, client: TcpStream, seed: u64) {
    if shared.toxics().reset {
        let _ = set_linger_zero(&client);
        shared.stats.resets.fetch_add(1, Relaxed);
        return; // dropping `client` sends the RST
    }
    let timeout = Duration::from_millis(UPSTREAM_CONNECT_TIMEOUT_MS);
    let upstream = match TcpStream::connect_timeout(&shared.cfg.upstream, timeout) {
        Ok(s) => s,
        Err(_) => {
            shared.stats.upstream_connect_failures.fetch_add(1, Relaxed);
            return;
        }
    };
    // A failed socket or thread setup just closes both sockets (on drop);
    // the client sees the close, which is what an overloaded proxy does.
    let _ = start_pumps(shared, client, upstream, seed);
}

fn prepare(stream: &TcpStream) -> io::Result<TcpStream> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(POLL))?;
    stream.set_write_timeout(Some(POLL))?;
    stream.try_clone()
}

fn start_pumps(
    shared: &Arc<Shared>,
    client: TcpStream,
    upstream: TcpStream,
    seed: u64,
) -> io::Result<()> {
    let (client_r, client_w) = (prepare(&client)?, client.try_clone()?);
    let (upstream_r, upstream_w) = (prepare(&upstream)?, upstream.try_clone()?);
    let conn = Arc::new(Conn {
        client,
        upstream,
        closing: AtomicBool::new(false),
    });
    let mut handles = Vec::with_capacity(4);
    let pairs = [
        (client_r, upstream_w, Direction::Up, seed.wrapping_mul(2)),
        (
            upstream_r,
            client_w,
            Direction::Down,
            seed.wrapping_mul(2) + 1,
        ),
    ];
    for (src, dst, dir, dir_seed) in pairs {
        let (tx, rx) = bounded(CHUNKS_IN_FLIGHT_MAX);
        let (s, c) = (Arc::clone(shared), Arc::clone(&conn));
        handles.push(spawn_named("fault-proxy-read", move || {
            read_loop(&s, &c, src, &tx, dir_seed)
        })?);
        let (s, c) = (Arc::clone(shared), Arc::clone(&conn));
        handles.push(spawn_named("fault-proxy-write", move || {
            write_loop(&s, &c, dst, &rx, dir)
        })?);
    }
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}

/// Sleeps until `due` in [`POLL`] slices; false if the connection closed.
fn wait_until(due: Instant, shared: &Shared, conn: &Conn) -> bool {
    loop {
        if conn.done(shared) {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        thread::sleep((due - now).min(POLL));
    }
}

fn insert_garbage(bytes: &mut Vec<u8>, max_bytes: u32, rng: &mut SmallRng) -> usize {
    let n = rng.gen_range(1..=max_bytes as usize);
    let at = rng.gen_range(0..=bytes.len());
    let garbage: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
    bytes.splice(at..at, garbage);
    n
}

fn read_loop(shared: &Shared, conn: &Conn, mut src: TcpStream, tx: &Sender<Chunk>, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut buf = vec![0u8; CHUNK_BYTES_MAX];
    while !conn.done(shared) {
        let toxics = shared.toxics();
        if toxics.reset {
            conn.reset(shared);
            break;
        }
        if toxics.stall {
            thread::sleep(POLL); // not reading keeps TCP back-pressure on the sender
            continue;
        }
        let n = match src.read(&mut buf) {
            Ok(0) => {
                let _ = tx.send(Chunk::Eof);
                break;
            }
            Ok(n) => n,
            Err(e) if is_timeout(&e) => continue,
            Err(_) => {
                conn.closing.store(true, Relaxed);
                break;
            }
        };
        // A fresh look: the read may have blocked across a toxic change,
        // and the chunk must get the toxics in force when it arrived.
        let toxics = shared.toxics();
        if toxics.reset {
            conn.reset(shared);
            break;
        }
        if toxics.blackhole {
            shared.stats.bytes_discarded.fetch_add(n as u64, Relaxed);
            continue;
        }
        let mut bytes = buf[..n].to_vec();
        if let Some((pct, max_bytes)) = toxics.garbage {
            if rng.gen_range(0..100) < pct {
                let added = insert_garbage(&mut bytes, max_bytes, &mut rng);
                shared.stats.garbage_bytes.fetch_add(added as u64, Relaxed);
            }
        }
        let delay_ms = toxics.latency.map_or(0, |(l, j)| l + rng.gen_range(0..=j));
        let due = Instant::now() + Duration::from_millis(delay_ms);
        if tx.send(Chunk::Data { due, bytes }).is_err() {
            break;
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

fn write_loop(
    shared: &Shared,
    conn: &Conn,
    mut dst: TcpStream,
    rx: &Receiver<Chunk>,
    dir: Direction,
) {
    loop {
        match rx.recv_timeout(POLL) {
            Ok(Chunk::Data { due, bytes }) => {
                if !deliver(shared, conn, &mut dst, &bytes, due) {
                    break;
                }
                dir.bytes(shared).fetch_add(bytes.len() as u64, Relaxed);
            }
            Ok(Chunk::Eof) => {
                let delay = Duration::from_millis(shared.toxics().slow_close_ms.unwrap_or(0));
                if wait_until(Instant::now() + delay, shared, conn) {
                    let _ = dst.shutdown(Shutdown::Write);
                }
                break;
            }
            Err(RecvTimeoutError::Timeout) if !conn.done(shared) => {}
            Err(_) => break,
        }
    }
}

/// Holds the chunk until due, waits out a stall, paces to the bandwidth
/// limit and writes it all; false if the connection closed meanwhile.
fn deliver(shared: &Shared, conn: &Conn, dst: &mut TcpStream, bytes: &[u8], due: Instant) -> bool {
    if !wait_until(due, shared, conn) {
        return false;
    }
    while shared.toxics().stall {
        if !wait_until(Instant::now() + POLL, shared, conn) {
            return false;
        }
    }
    if let Some(rate) = shared.toxics().bandwidth_bytes_per_s {
        let pace_ns = (bytes.len() as u128 * 1_000_000_000 / u128::from(rate.max(1))) as u64;
        if !wait_until(Instant::now() + Duration::from_nanos(pace_ns), shared, conn) {
            return false;
        }
    }
    write_all_polling(shared, conn, dst, bytes)
}

fn write_all_polling(shared: &Shared, conn: &Conn, dst: &mut TcpStream, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        if conn.done(shared) {
            return false;
        }
        match dst.write(bytes) {
            Ok(0) => return false,
            Ok(n) => bytes = &bytes[n..],
            Err(e) if is_timeout(&e) => {}
            Err(_) => {
                conn.closing.store(true, Relaxed);
                return false;
            }
        }
    }
    true
}
