//! kill -9 of the real binary while it records: every tick the recorded
//! metric counted is in the capture, and what the write buffer held (the
//! only loss besides the ring) stays within rate × flush interval plus
//! one batch.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pricewire::capture::recorder::CHUNK_TICKS_MAX;
use pricewire::capture::{CaptureReader, CorruptPolicy, ReaderOptions};

use crate::util::net;

/// Test-sized rate (the full 200k ticks/s drill is in RELIABILITY.md).
const RATE: u64 = 50_000;
const FLUSH_MS: u64 = 5;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn metrics(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    Some(buf)
}

fn value(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

#[test]
fn kill_9_while_recording_loses_no_tick_counted_as_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let ops = net::free_addr();
    let child = Command::new(env!("CARGO_BIN_EXE_pricewire"))
        .args([
            "serve",
            "--no-listen",
            "--synthetic-rate",
            &RATE.to_string(),
        ])
        .args(["--record", dir.path().to_str().unwrap()])
        .args(["--record-flush-ms", &FLUSH_MS.to_string()])
        .args(["--ops-listen", &ops.to_string(), "--duration-s", "60"])
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server(child);
    // Wait (bounded) until a second of ticks has been recorded.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (recorded, buffered) = loop {
        let body = metrics(ops).unwrap_or_default();
        let r = value(&body, "pricewire_recorder_written_ticks_total");
        let b = value(&body, "pricewire_recorder_buffered_ticks");
        if let (Some(r), Some(b)) = (r, b) {
            if r >= RATE as f64 {
                break (r as u64, b as u64);
            }
        }
        assert!(
            Instant::now() < deadline,
            "recording never reached {RATE} ticks"
        );
        std::thread::park_timeout(Duration::from_millis(20));
    };
    server.0.kill().unwrap(); // SIGKILL
    server.0.wait().unwrap();

    let opts = ReaderOptions {
        policy: CorruptPolicy::Skip,
        ..ReaderOptions::default()
    };
    let mut reader = CaptureReader::open(&[dir.path().to_path_buf()], opts).unwrap();
    let mut in_file = 0u64;
    while reader.next_tick().unwrap().is_some() {
        in_file += 1;
    }
    eprintln!("recorded {recorded}, buffered {buffered}, in file {in_file}");
    assert!(
        in_file >= recorded,
        "{} ticks counted as recorded are missing from the file",
        recorded - in_file
    );
    let bound = RATE * FLUSH_MS / 1_000 + CHUNK_TICKS_MAX as u64;
    assert!(buffered <= bound, "buffered {buffered} > bound {bound}");
}
