//! Shared pieces of the request-storm tests (`tests/it/request_storm.rs`):
//! the server process, /metrics scraping and the answer tally.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::time::Duration;

use pricewire::wire::{self, OwnedMessage, RejectReason, SERVER_FRAME_LEN_MAX};

pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    Some(buf)
}

/// What one connection's requests got.
#[derive(Default, Debug)]
pub struct Tally {
    pub sent: u64,
    /// Times each request id was answered (answer or Reject).
    pub answers: Vec<u8>,
    pub answered: u64,
    pub rejects: BTreeMap<String, u64>,
    /// Rejects(deadline_expired) among them.
    pub expired: u64,
    /// Consecutive answers (not rejects) where the later one has the
    /// higher request id of the two earlier: newest first.
    pub inversions: u64,
    pub answer_pairs: u64,
}

impl Tally {
    pub fn record(&mut self, id: u64, reject: Option<RejectReason>, last_answer: &mut Option<u64>) {
        let i = id as usize;
        if self.answers.len() <= i {
            self.answers.resize(i + 1, 0);
        }
        self.answers[i] = self.answers[i].saturating_add(1);
        self.answered += 1;
        match reject {
            Some(r) => {
                self.expired += u64::from(r == RejectReason::DEADLINE_EXPIRED);
                *self.rejects.entry(format!("{r:?}")).or_default() += 1;
            }
            None => {
                if let Some(prev) = last_answer.replace(id) {
                    self.answer_pairs += 1;
                    self.inversions += u64::from(id < prev);
                }
            }
        }
    }

    pub fn unanswered(&self) -> u64 {
        (0..self.sent as usize)
            .filter(|&i| self.answers.get(i).copied().unwrap_or(0) != 1)
            .count() as u64
    }
}

pub fn answer_of(m: &OwnedMessage) -> Option<(u64, Option<RejectReason>)> {
    match m {
        OwnedMessage::SnapshotResponse { request_id, .. } => Some((*request_id, None)),
        OwnedMessage::Reject {
            request_id, reason, ..
        } => Some((*request_id, Some(*reason))),
        _ => None,
    }
}

/// Reads server frames without copying per frame or allocating: every
/// complete frame in the buffer is handed over, then the rest compacted once.
pub struct FrameReader {
    pub stream: TcpStream,
    pub buf: Vec<u8>,
    pub end: usize,
}

impl FrameReader {
    /// One read (up to `timeout`); `f` gets each answer or Reject.
    /// Returns false once the server closed the connection.
    pub fn poll(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(u64, Option<RejectReason>),
    ) -> bool {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
        match self.stream.read(&mut self.buf[self.end..]) {
            Ok(0) => return false,
            Ok(n) => self.end += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
        let mut start = 0;
        while let Ok(Some(n)) =
            wire::split_with_max(&self.buf[start..self.end], SERVER_FRAME_LEN_MAX)
        {
            match wire::decode(&self.buf[start..start + n]) {
                Ok(wire::Message::SnapshotResponse(m)) => f(m.request_id, None),
                Ok(wire::Message::Reject(m)) => f(m.request_id, Some(m.reason)),
                _ => {}
            }
            start += n;
        }
        self.buf.copy_within(start..self.end, 0);
        self.end -= start;
        true
    }
}
