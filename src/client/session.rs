//! The sans-IO protocol core of a client connection: bytes in, typed
//! events out, sequence numbers checked.
//!
//! The caller reads socket bytes into [`Session::read_buf`] and commits
//! them, then pulls events with [`Session::next_event`]. The receive buffer
//! is allocated once ([`SERVER_FRAME_LEN_MAX`] bytes, the largest frame a
//! server may send) and compacted in place; a price is decoded straight
//! from it into a `Copy` event without allocating. Gaps that need a
//! resync are queued (bounded) for the driver to request with
//! [`Session::take_resync`]. No socket, no clock: tests feed scripted bytes.

use std::sync::Arc;

use super::event::{DisconnectCause, Event, LogonInfo, PriceEvent, SeqStatus};
use super::seq::{SeqTracker, UpdateVerdict};
use super::stats::ClientStats;
use crate::wire::{self, FrameError, Message, PriceBody, PriceKind, SERVER_FRAME_LEN_MAX};

/// The server's byte stream can no longer be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("server framing lost: {0}")]
    /// A frame's SOFH is unusable (see [`FrameError`]).
    Framing(#[from] FrameError),
}

/// Receive side of one connection.
pub struct Session {
    rx: Box<[u8]>,
    start: usize,
    end: usize,
    seq: SeqTracker,
    /// (symbol, tier) keys with a gap that need a snapshot request.
    resyncs: Vec<(u16, u8)>,
    resyncs_max: usize,
    stats: Arc<ClientStats>,
}

impl Session {
    /// `keys_max` bounds the sequence table and the resync queue.
    pub fn new(keys_max: usize, stats: Arc<ClientStats>) -> Self {
        Session {
            rx: vec![0u8; SERVER_FRAME_LEN_MAX].into_boxed_slice(),
            start: 0,
            end: 0,
            seq: SeqTracker::new(keys_max),
            resyncs: Vec::with_capacity(keys_max),
            resyncs_max: keys_max,
            stats,
        }
    }

    /// Forgets buffered bytes, expectations and queued resyncs (a new
    /// connection starts from snapshots).
    pub fn reset(&mut self) {
        self.start = 0;
        self.end = 0;
        self.seq.clear();
        self.resyncs.clear();
    }

    /// Forgets buffered bytes and queued resyncs but keeps every key's
    /// expectation: a new connection (to the same server or another edge
    /// with the same sequences) resumes by sequence, and only a snapshot
    /// that does not continue it is a resync ([`SeqTracker::resume`]).
    pub fn resume(&mut self) {
        self.start = 0;
        self.end = 0;
        self.seq.resume();
        self.resyncs.clear();
    }

    /// Bytes received but not yet consumed as frames.
    pub fn buffered(&self) -> usize {
        debug_assert!(self.start <= self.end && self.end <= self.rx.len());
        self.end - self.start
    }

    /// The sequence table.
    pub fn seq(&self) -> &SeqTracker {
        &self.seq
    }

    /// Free space to read socket bytes into; commit with [`Session::commit`].
    pub fn read_buf(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.rx.len() || self.start > self.rx.len() / 2 {
            self.rx.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.rx[self.end..]
    }

    /// `n` bytes were written into [`Session::read_buf`].
    pub fn commit(&mut self, n: usize) {
        debug_assert!(self.end + n <= self.rx.len(), "commit past the buffer");
        self.end = (self.end + n).min(self.rx.len());
    }

    /// Copies scripted bytes in (tests, replays); returns how many fitted.
    pub fn feed(&mut self, bytes: &[u8]) -> usize {
        let buf = self.read_buf();
        let n = bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        self.commit(n);
        n
    }

    /// A gap key that needs a snapshot request, oldest first.
    pub fn take_resync(&mut self) -> Option<(u16, u8)> {
        if self.resyncs.is_empty() {
            None
        } else {
            Some(self.resyncs.remove(0))
        }
    }

    /// The next event from buffered frames; `Ok(None)` when no whole frame
    /// that yields an event is buffered. Heartbeats and old updates are
    /// consumed silently.
    pub fn next_event(&mut self) -> Result<Option<Event>, SessionError> {
        loop {
            let buf = &self.rx[self.start..self.end];
            let Some(len) = wire::split_with_max(buf, SERVER_FRAME_LEN_MAX)? else {
                return Ok(None);
            };
            debug_assert!(len > 0 && len <= buf.len(), "split past the buffered bytes");
            let frame_start = self.start;
            self.start += len;
            let frame = &self.rx[frame_start..frame_start + len];
            let msg = match wire::decode(frame) {
                Ok(m) => m,
                Err(_) => {
                    // The framing is intact: skip the one bad message.
                    ClientStats::inc(&self.stats.bad_frames);
                    continue;
                }
            };
            let (seq, resyncs, stats) = (&mut self.seq, &mut self.resyncs, &*self.stats);
            let resync_room = self.resyncs_max;
            if let Some(ev) = to_event(msg, seq, stats, |key| {
                if resyncs.len() < resync_room && !resyncs.contains(&key) {
                    resyncs.push(key);
                }
            }) {
                return Ok(Some(ev));
            }
        }
    }
}

fn lossy(text: &[u8]) -> String {
    String::from_utf8_lossy(text).into_owned()
}

/// Turns one decoded message into an event (or nothing).
fn to_event(
    msg: Message<'_>,
    seq: &mut SeqTracker,
    stats: &ClientStats,
    mut want_resync: impl FnMut((u16, u8)),
) -> Option<Event> {
    Some(match msg {
        Message::PriceUpdate(b) => return on_update(b, seq, stats, &mut want_resync),
        Message::PriceSnapshot(s) => on_snapshot(s.body, s.stream_id, seq, stats),
        Message::Heartbeat => return None,
        Message::LogonAccepted(a) => {
            seq.on_logon(a.stream_id);
            Event::LoggedOn(LogonInfo {
                session_id: a.session_id,
                heartbeat_interval_ms: a.heartbeat_interval_ms,
                default_tier: a.default_tier,
                server_time_ns: a.server_time_ns,
                reconnects: 0,
                stream_id: a.stream_id,
            })
        }
        Message::LogonRejected(r) => Event::LogonRejected {
            reason: r.reason,
            retry_after_ms: r.retry_after_ms,
        },
        Message::Disconnect(d) => Event::Disconnected {
            cause: DisconnectCause::Server {
                reason: d.reason,
                text: lossy(d.text),
            },
            retry_after_ms: d.retry_after_ms,
            reconnect_in_ms: None,
        },
        Message::SubscribeResponse(r) => Event::SubscribeResponse {
            request_id: r.request_id,
            results: r.results.collect(),
        },
        Message::SnapshotResponse(r) => snapshot_response(r.request_id, r.prices.collect(), seq),
        Message::HistoryResponse(h) => Event::HistoryResponse {
            request_id: h.request_id,
            symbol_id: h.symbol_id,
            digits: h.digits,
            ticks: h.ticks.collect(),
        },
        Message::SymbolDirectory(d) => Event::SymbolDirectory {
            request_id: d.request_id,
            symbols: d.symbols.collect(),
            tiers: d.tiers.collect(),
        },
        Message::Reject(r) => Event::Reject {
            request_id: r.request_id,
            ref_template_id: r.ref_template_id,
            reason: r.reason,
            retry_after_ms: r.retry_after_ms,
            text: lossy(r.text),
        },
        _ => {
            ClientStats::inc(&stats.unexpected_frames);
            return None;
        }
    })
}

/// An answer moves no expectation (it can overtake updates on their way);
/// it only ends its keys' resync episodes.
fn snapshot_response(request_id: u64, prices: Vec<PriceBody>, seq: &mut SeqTracker) -> Event {
    for p in &prices {
        seq.on_response_price(p.symbol_id, p.tier);
    }
    Event::SnapshotResponse { request_id, prices }
}

#[inline]
fn on_snapshot(b: PriceBody, stream_id: u64, seq: &mut SeqTracker, stats: &ClientStats) -> Event {
    ClientStats::inc(&stats.prices);
    let resuming = seq.is_resuming(b.symbol_id, b.tier);
    let (status, reset) = seq.on_snapshot_explained(b.symbol_id, b.tier, b.seq, stream_id);
    match status {
        SeqStatus::Untracked => ClientStats::inc(&stats.untracked),
        SeqStatus::Resumed => ClientStats::inc(&stats.resumed),
        SeqStatus::Reset if resuming => ClientStats::inc(&stats.resume_resyncs),
        _ => {}
    }
    Event::Price(PriceEvent {
        kind: PriceKind::Snapshot,
        body: b,
        seq: status,
        stream_id,
        reset,
    })
}

#[inline]
fn on_update(
    b: PriceBody,
    seq: &mut SeqTracker,
    stats: &ClientStats,
    want_resync: &mut impl FnMut((u16, u8)),
) -> Option<Event> {
    ClientStats::inc(&stats.prices);
    let status = match seq.on_update(b.symbol_id, b.tier, b.seq) {
        UpdateVerdict::Old => {
            ClientStats::inc(&stats.old_dropped);
            return None;
        }
        UpdateVerdict::Accept(s) => s,
    };
    match status {
        SeqStatus::Gap { resync, .. } => {
            ClientStats::inc(&stats.gaps);
            if resync {
                want_resync((b.symbol_id, b.tier));
            }
        }
        SeqStatus::Untracked => ClientStats::inc(&stats.untracked),
        _ => {}
    }
    Some(Event::Price(PriceEvent {
        kind: PriceKind::Update,
        body: b,
        seq: status,
        stream_id: seq.stream_of(b.symbol_id, b.tier),
        reset: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{DisconnectReason, PRICE_SLOT_LEN};

    fn body(symbol_id: u16, tier: u8, seq: u64) -> PriceBody {
        PriceBody {
            symbol_id,
            tier,
            digits: 5,
            seq,
            bid: 108_000 + seq as i64,
            ask: 108_010 + seq as i64,
            ..Default::default()
        }
    }

    /// The tests' server stream.
    const STREAM: u64 = 9;

    fn frame(kind: PriceKind, b: PriceBody) -> Vec<u8> {
        let mut f = [0u8; PRICE_SLOT_LEN];
        let n = wire::encode_price(&mut f, kind, &b, STREAM);
        f[..n].to_vec()
    }

    fn script(prices: &[(PriceKind, u16, u64)]) -> Vec<u8> {
        prices
            .iter()
            .flat_map(|&(k, sym, seq)| frame(k, body(sym, 1, seq)))
            .collect()
    }

    fn drain(s: &mut Session) -> Vec<Event> {
        std::iter::from_fn(|| s.next_event().unwrap()).collect()
    }

    fn session() -> Session {
        Session::new(16, Arc::new(ClientStats::default()))
    }

    use PriceKind::{Snapshot as S, Update as U};

    #[test]
    fn gap_is_flagged_and_queues_one_resync_then_snapshot_resets() {
        let mut s = session();
        s.feed(&script(&[
            (S, 3, 10),
            (U, 3, 11),
            (U, 3, 14),
            (U, 3, 15),
            (U, 3, 17),
        ]));
        let ev = drain(&mut s);
        let status: Vec<SeqStatus> = ev.iter().map(|e| e.price().unwrap().seq).collect();
        assert_eq!(
            status,
            vec![
                SeqStatus::Reset,
                SeqStatus::InOrder,
                SeqStatus::Gap {
                    expected: 12,
                    resync: true
                },
                SeqStatus::InOrder,
                SeqStatus::Gap {
                    expected: 16,
                    resync: false
                },
            ]
        );
        assert_eq!(s.take_resync(), Some((3, 1)), "one request for the episode");
        assert_eq!(s.take_resync(), None);
        // The resync answer arrives as a snapshot: the expectation resets.
        s.feed(&script(&[(S, 3, 30), (U, 3, 31)]));
        let status: Vec<SeqStatus> = drain(&mut s)
            .iter()
            .map(|e| e.price().unwrap().seq)
            .collect();
        assert_eq!(status, vec![SeqStatus::Reset, SeqStatus::InOrder]);
        assert_eq!(s.stats.gaps.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    fn response(request_id: u64, prices: &[PriceBody]) -> Vec<u8> {
        let mut buf = [0u8; 4096];
        let n = wire::encode_snapshot_response(&mut buf, request_id, prices.iter()).unwrap();
        buf[..n].to_vec()
    }

    #[test]
    fn an_answer_that_overtakes_updates_loses_none_of_them() {
        let mut s = session();
        s.feed(&script(&[(S, 2, 5), (U, 2, 6)]));
        // The server read its table (seq 9) before updates 7..9 were
        // written to this connection: the answer overtakes them.
        s.feed(&response(77, &[body(2, 1, 9), body(4, 1, 3)]));
        s.feed(&script(&[
            (U, 2, 7),
            (U, 2, 8),
            (U, 2, 9),
            (U, 2, 8),
            (U, 2, 10),
        ]));
        let ev = drain(&mut s);
        assert!(
            matches!(&ev[2], Event::SnapshotResponse { request_id: 77, prices } if prices.len() == 2)
        );
        let seqs: Vec<(u64, SeqStatus)> = ev
            .iter()
            .filter_map(Event::price)
            .map(|p| (p.body.seq, p.seq))
            .collect();
        let in_order = |n| (n, SeqStatus::InOrder);
        let want = [(5, SeqStatus::Reset), in_order(6), in_order(7)];
        assert_eq!(seqs[..3], want);
        assert_eq!(seqs[3..], [in_order(8), in_order(9), in_order(10)]);
        assert_eq!(
            s.stats
                .old_dropped
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        assert_eq!(s.seq().len(), 1, "an answer's other symbol is not tracked");
    }

    #[test]
    fn a_history_answer_is_an_event_with_its_ticks() {
        let mut s = session();
        let tick = |bid| wire::HistoryTick {
            provider: 1,
            bid,
            ask: bid + 3,
            bid_size: 1,
            ask_size: 1,
            provider_time_ns: 5,
        };
        let mut buf = [0u8; 512];
        let n = wire::encode_history_response(&mut buf, 9, 4, 5, [tick(10), tick(11)]).unwrap();
        s.feed(&buf[..n]);
        let ev = drain(&mut s);
        let Event::HistoryResponse {
            request_id: 9,
            symbol_id: 4,
            digits: 5,
            ticks,
        } = &ev[0]
        else {
            panic!("{ev:?}")
        };
        assert_eq!(ticks.iter().map(|t| t.bid).collect::<Vec<_>>(), [10, 11]);
        assert_eq!(ev[0].request_id(), Some(9));
        assert_eq!(
            s.stats
                .unexpected_frames
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
    }

    #[test]
    fn frames_split_across_reads_are_reassembled() {
        let mut s = session();
        let bytes = script(&[(S, 1, 1), (U, 1, 2), (U, 1, 3)]);
        let mut got = Vec::new();
        for chunk in bytes.chunks(7) {
            s.feed(chunk);
            got.extend(drain(&mut s));
        }
        let seqs: Vec<u64> = got.iter().map(|e| e.price().unwrap().body.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        assert_eq!(s.buffered(), 0);
    }

    #[test]
    fn heartbeats_are_silent_and_disconnect_carries_reason() {
        let mut s = session();
        let mut buf = [0u8; 128];
        let n = wire::encode_heartbeat(&mut buf).unwrap();
        s.feed(&buf[..n]);
        let n =
            wire::encode_disconnect_reason(&mut buf, DisconnectReason::SLOW_CONSUMER, 1500, "slow")
                .unwrap();
        s.feed(&buf[..n]);
        let ev = drain(&mut s);
        assert_eq!(
            ev,
            vec![Event::Disconnected {
                cause: DisconnectCause::Server {
                    reason: DisconnectReason::SLOW_CONSUMER,
                    text: "slow".into()
                },
                retry_after_ms: 1500,
                reconnect_in_ms: None,
            }]
        );
    }

    #[test]
    fn bad_body_is_skipped_but_bad_framing_is_fatal() {
        let mut s = session();
        // Valid SOFH, unknown template: skipped, the next frame still reads.
        let mut bad = frame(S, body(1, 1, 1));
        bad[8] = 99;
        s.feed(&bad);
        s.feed(&script(&[(S, 1, 5)]));
        assert_eq!(drain(&mut s).len(), 1);
        assert_eq!(
            s.stats
                .bad_frames
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        s.feed(&[0, 0, 0, 3, 0xEB, 0x50]);
        assert!(matches!(
            s.next_event(),
            Err(SessionError::Framing(FrameError::TooSmall { .. }))
        ));
    }

    #[test]
    fn prices_carry_their_stream_and_a_new_stream_resyncs_a_resume() {
        let mut s = session();
        let mut buf = [0u8; 128];
        let accepted = |stream_id| wire::LogonAccepted {
            session_id: 1,
            heartbeat_interval_ms: 1_000,
            server_time_ns: 0,
            default_tier: 1,
            stream_id,
        };
        let n = wire::encode_logon_accepted(&mut buf, &accepted(STREAM)).unwrap();
        s.feed(&buf[..n]);
        s.feed(&script(&[(S, 1, 5), (U, 1, 6)]));
        let ev = drain(&mut s);
        assert!(matches!(&ev[0], Event::LoggedOn(i) if i.stream_id == STREAM));
        let streams: Vec<u64> = ev[1..]
            .iter()
            .map(|e| e.price().unwrap().stream_id)
            .collect();
        assert_eq!(streams, [STREAM, STREAM]);
        // A restarted server: a new stream whose numbers happen to continue.
        s.resume();
        let n = wire::encode_logon_accepted(&mut buf, &accepted(STREAM + 1)).unwrap();
        s.feed(&buf[..n]);
        let mut f = [0u8; PRICE_SLOT_LEN];
        let n = wire::encode_price(&mut f, S, &body(1, 1, 7), STREAM + 1);
        s.feed(&f[..n]);
        let ev = drain(&mut s);
        let p = ev[1].price().unwrap();
        assert_eq!((p.seq, p.stream_id), (SeqStatus::Reset, STREAM + 1));
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            (get(&s.stats.resumed), get(&s.stats.resume_resyncs)),
            (0, 1)
        );
    }
}

#[cfg(test)]
#[path = "session_props.rs"]
mod props;
