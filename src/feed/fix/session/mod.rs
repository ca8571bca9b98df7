//! The sans-IO FIX 4.4 market-data initiator session.
//!
//! Contract: no sockets and no OS clock here. The driver tells the session
//! what happened (`on_connected`, `handle_frame`, `on_disconnected`) and
//! calls [`FixSession::poll`] every turn; each call takes `now_ns`
//! (monotonic, decides every timer) and `wall_ns` (UTC, only for
//! SendingTime and quote latency) and returns an [`Io`] order for the
//! driver. Outgoing bytes accumulate in a bounded outbound buffer the
//! driver drains. Every buffer (outbound, encoder, per-symbol books, the
//! pending-tick queue, the symbol index) is allocated in [`FixSession::new`];
//! handling a quote allocates nothing.
//!
//! States: `Waiting` (until the staggered first connect or the jittered
//! backoff) → `Connecting` (connect timeout) → `LogonSent` (logon timeout)
//! → `Active` (heartbeats, TestRequest on silence, read timeout) →
//! `LoggingOut` (bounded wait for the peer's Logout) → `Waiting`.
//!
//! **Gap policy.** Market data is perishable, so a ResendRequest (35=2)
//! would only replay quotes that are already stale. On a MsgSeqNum gap the
//! session records a breaker failure, accepts the new number, clears every
//! book (incrementals after a gap may apply to a book we never saw) and
//! resubscribes with fresh MarketDataRequests, which bring new snapshots.
//! After `gaps_before_logout` gaps within `gap_window_ms` on one
//! connection it logs out and reconnects instead. A MsgSeqNum below the
//! expected one (without PossDupFlag) means the peer lost its state:
//! failure, Logout, reconnect. In-session resets (Logon 141=Y while logged
//! on) are answered; a SequenceReset-Reset below the expected number is
//! refused with a Reject (FIX 4.4). Every Logout we send carries a Text
//! (58) saying why; the LP's Text is logged escaped.
//!
//! **Garbled input** (bad CheckSum, BodyLength, framing, fields) is
//! ignored and counted, as FIX says; `garbled_max` garbled messages within
//! `garbled_window_ms` tear the session down (see `feed::fix::burst`).
//!
//! **ResendRequest** is answered by one SequenceReset-GapFill: nothing we
//! send is worth resending (session messages never are; a
//! MarketDataRequest's subscription is renewed by reconnect or gap policy).
//!
//! **Breaker mapping.** Failures: connect refused/failed, connect timeout,
//! logon timeout, disconnect by the peer, wrong CompIDs, too many garbled
//! messages, read (heartbeat) timeout, sequence gaps, a Logout we did not
//! ask for.
//! Successes: quotes, whose duration is their provider→receive latency
//! (SendingTime/MDEntryTime to our wall clock), so quotes older than
//! `slow_quote_ms` are slow calls. Business errors (MarketDataRequestReject
//! 35=Y, session Reject 35=3 of our own message) are `Ignored`. While
//! Closed, quote successes are recorded at most once per
//! `quote_sample_ms`: at thousands of quotes per second a per-quote record
//! would drown the handful of failures a dying session produces, and a
//! systematic sample still estimates the share of slow quotes. In HalfOpen
//! every quote is a trial. A quote silence of `quote_silence_ms` while
//! logged on is a failure per interval, and `breaker_consecutive_failures`
//! failures with no quote between open the breaker (a hung LP opens it on
//! defaults; docs/fix.md "Hung provider").
//!
//! **Health.** The provider is healthy in [`ProviderHealth`] only in state
//! `streaming` of [`super::health`] (breaker Closed, logged on, quoting,
//! past the probation after a logon); otherwise the engine aggregates
//! without it. Its quotes still flow so its book is fresh when it returns.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::burst::BurstWindow;
use super::codec::{self, Encoder, Fields, Header};
use super::damping::FlapDamper;
use super::health::{HealthConfig, HealthGauges, ProviderHealthMachine, ProviderState};
use super::stats::FixSessionStats;
use crate::clock::NS_PER_MS;
use crate::config::fix::FixSessionConfig;
use crate::model::ProviderHealth;
use crate::model::Tick;
use crate::resilience::{BreakerState, BreakerStats, CircuitBreaker};

mod admin;
mod close;
mod market;
mod timers;
mod verdict;

pub use close::DisconnectReason;
use market::{Book, EMPTY_BOOK};

/// Where a session publishes its provider's health: filled once the
/// engine's [`ProviderHealth`] exists (the pipeline creates it after the
/// sources), and read by the session on every poll. Until it is bound the
/// session keeps its verdict and publishes it at the first poll after.
pub type HealthSlot = Arc<std::sync::OnceLock<Arc<ProviderHealth>>>;

/// A slot already bound to `health` (tests, or a caller that has it).
pub fn bound_slot(health: Arc<ProviderHealth>) -> HealthSlot {
    let slot = HealthSlot::default();
    let _ = slot.set(health);
    slot
}

/// Bytes of not-yet-written outgoing messages a session may hold; a peer
/// that does not read this much is treated as dead.
pub(crate) const OUTBOUND_BYTES_MAX: usize = 256 * 1024;
/// Largest outgoing message body.
pub(crate) const ENCODE_BYTES_MAX: usize = 1_024;
/// Silence, as a share of HeartBtInt in percent, after which we send a
/// TestRequest (FIX recommends "HeartBtInt plus a reasonable margin").
pub(crate) const TEST_REQUEST_AFTER_PCT: u64 = 120;

/// What the driver must do after a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    /// Nothing to do.
    Nothing,
    /// Open a TCP connection to the session's host and port.
    Connect,
    /// Close the connection (the session has already scheduled a reconnect).
    Close,
}

/// Session states (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Waiting for the reconnect (or first connect) time.
    Waiting,
    /// The driver is opening the TCP connection.
    Connecting,
    /// Logon sent; waiting for the provider's Logon.
    LogonSent,
    /// Logged on: quotes flow.
    Active,
    /// Logout sent; waiting for the provider's Logout or the timeout.
    LoggingOut,
}

/// Why a session counted a breaker failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The TCP connect failed.
    ConnectFailed,
    /// The TCP connect took longer than `connect_ms`.
    ConnectTimeout,
    /// No Logon answer within `logon_ms`.
    LogonTimeout,
    /// The provider answered our Logon with a Logout.
    LogonRejected,
    /// The peer closed or reset the connection.
    Disconnected,
    /// A message whose 49/56 named another session (a misrouted
    /// connection).
    WrongCompId,
    /// A message without MsgSeqNum (34).
    MissingSeqNum,
    /// Nothing received within the read timeout.
    ReadTimeout,
    /// A MsgSeqNum gap (recovered by resubscribing, or by logout after
    /// `gaps_before_logout` of them).
    SeqGap,
    /// MsgSeqNum below the expected one without PossDupFlag.
    SeqTooLow,
    /// The provider logged out unasked.
    UnexpectedLogout,
    /// Our outbound buffer overflowed (the provider does not read).
    OutboundFull,
    /// `garbled_max` garbled messages within `garbled_window_ms`.
    Garbled,
    /// Logged on, but no quote for `quote_silence_ms` (the session stays).
    QuoteSilence,
    /// A bad price or size in an entry (the entry is skipped).
    BadPrice,
}

/// Header fields of the message being handled.
#[derive(Debug, Clone, Copy, Default)]
struct MsgHeader<'a> {
    seq: Option<u64>,
    poss_dup: bool,
    sending_time_ns: Option<u64>,
    symbol: Option<&'a [u8]>,
    req_id: Option<&'a [u8]>,
    test_req_id: Option<&'a [u8]>,
    new_seq_no: Option<u64>,
    /// GapFillFlag (123) of a SequenceReset.
    gap_fill: bool,
    sender_comp_id: Option<&'a [u8]>,
    target_comp_id: Option<&'a [u8]>,
    /// BeginSeqNo (7) / EndSeqNo (16) of a ResendRequest.
    begin_seq_no: Option<u64>,
    end_seq_no: Option<u64>,
    /// ResetSeqNumFlag (141) of a Logon.
    reset_seq_num: bool,
    /// Text (58), for the log.
    text: Option<&'a [u8]>,
    /// RefSeqNum (45) and SessionRejectReason (373) of a Reject, or
    /// MDReqRejReason (281) of a MarketDataRequestReject, for the log.
    ref_seq_num: Option<u64>,
    reject_reason: Option<&'a [u8]>,
}

/// One FIX market-data session (see the module docs).
pub struct FixSession {
    cfg: FixSessionConfig,
    state: SessionState,
    enc: Encoder,
    outbound: Vec<u8>,
    out_seq: u64,
    in_seq: u64,
    deadline_ns: u64,
    last_recv_ns: u64,
    last_sent_ns: u64,
    test_req_pending: bool,
    test_req_id: u64,
    next_connect_ns: u64,
    attempt: u32,
    gaps_this_connection: u32,
    /// Generation of our MDReqIDs: bumped per (re)subscription, so a reply
    /// to an old request is recognised.
    req_gen: u64,
    /// Provider symbol bytes -> mapping index, sorted for binary search.
    index: Box<[(Box<[u8]>, u16)]>,
    books: Box<[Book]>,
    pending: Vec<Tick>,
    pending_pos: usize,
    feed_seq: u64,
    last_sample_ns: Option<u64>,
    /// A close is asked for (the driver is told at the end of the call).
    close: bool,
    /// Why the current connection ends: the first cause wins.
    ending: Option<DisconnectReason>,
    /// A TCP connection is established (counted once when it ends).
    connected: bool,
    breaker: CircuitBreaker,
    /// Provider health (see [`super::health`]) and its gauges.
    machine: ProviderHealthMachine,
    gauges: Arc<HealthGauges>,
    /// Failures since the last quote; `breaker_consecutive_failures` of
    /// them open the breaker.
    consecutive_failures: u32,
    /// Start of the current quote-silence interval.
    silence_mark_ns: u64,
    /// Rate limit of the failure log line: last line, lines held back.
    fail_logged_ns: Option<u64>,
    fail_log_held: u32,
    /// What was last written to the provider's health flag.
    published: Option<bool>,
    health: HealthSlot,
    stats: Arc<FixSessionStats>,
    rng: SmallRng,
    garbled: BurstWindow,
    /// Sequence gaps of this connection: `gaps_before_logout` within
    /// `gap_window_ms` log out.
    gaps: BurstWindow,
    /// We answered an in-session reset and have heard nothing since.
    reset_answered: bool,
    /// Flap damping of the provider (see [`super::damping`]).
    damper: FlapDamper,
    /// The probation a session must stream now (grown by the damping).
    probation_ms_now: u64,
}

impl FixSession {
    /// A session whose first connect is due at `start_ns + ordinal *
    /// stagger_ms + uniform(0..=stagger_ms)`. Panics on an invalid config
    /// (callers validate first: a bad value here is a bug).
    pub fn new(
        cfg: FixSessionConfig,
        ordinal: usize,
        start_ns: u64,
        seed: u64,
        health: HealthSlot,
    ) -> Self {
        if let Err(e) = cfg.validate() {
            panic!("invalid FIX session config {}: {e}", cfg.name);
        }
        let breaker = CircuitBreaker::new(cfg.breaker).expect("breaker config validated");
        let mut rng = SmallRng::seed_from_u64(seed);
        let jitter_ms = rng.gen_range(0..=cfg.stagger_ms);
        let stagger_ms = cfg.stagger_ms.saturating_mul(ordinal as u64) + jitter_ms;
        let mut index: Vec<(Box<[u8]>, u16)> = cfg
            .symbols
            .iter()
            .enumerate()
            .map(|(i, m)| (m.provider_symbol.as_bytes().into(), i as u16))
            .collect();
        index.sort();
        let n = cfg.symbols.len();
        FixSession {
            state: SessionState::Waiting,
            enc: Encoder::new(ENCODE_BYTES_MAX),
            outbound: Vec::with_capacity(OUTBOUND_BYTES_MAX),
            out_seq: 1,
            in_seq: 1,
            deadline_ns: 0,
            last_recv_ns: 0,
            last_sent_ns: 0,
            test_req_pending: false,
            test_req_id: 0,
            next_connect_ns: start_ns.saturating_add(stagger_ms * NS_PER_MS),
            attempt: 0,
            gaps_this_connection: 0,
            req_gen: 0,
            index: index.into_boxed_slice(),
            books: vec![EMPTY_BOOK; n].into_boxed_slice(),
            pending: Vec::with_capacity(n),
            pending_pos: 0,
            feed_seq: 0,
            last_sample_ns: None,
            close: false,
            ending: None,
            connected: false,
            breaker,
            machine: ProviderHealthMachine::new(HealthConfig {
                quote_silence_ms: cfg.quote_silence_ms,
                probation_quotes: cfg.probation_quotes,
                gray: cfg.gray,
            }),
            gauges: Arc::new(HealthGauges::default()),
            consecutive_failures: 0,
            silence_mark_ns: 0,
            fail_logged_ns: None,
            fail_log_held: 0,
            published: None,
            health,
            stats: Arc::new(FixSessionStats::default()),
            rng,
            garbled: BurstWindow::new(cfg.garbled_max, cfg.garbled_window_ms * NS_PER_MS),
            gaps: BurstWindow::new(cfg.gaps_before_logout, cfg.gap_window_ms * NS_PER_MS),
            reset_answered: false,
            damper: FlapDamper::new(cfg.flap),
            probation_ms_now: cfg.probation_ms,
            cfg,
        }
    }

    /// The settings this session runs with.
    pub fn config(&self) -> &FixSessionConfig {
        &self.cfg
    }
    /// The session's state.
    pub fn state(&self) -> SessionState {
        self.state
    }
    /// Shared session counters.
    pub fn stats(&self) -> Arc<FixSessionStats> {
        Arc::clone(&self.stats)
    }
    /// Shared counters of the feed breaker.
    pub fn breaker_stats(&self) -> Arc<BreakerStats> {
        self.breaker.stats()
    }
    /// The provider-health state and last quote time, for metrics.
    pub fn health_gauges(&self) -> Arc<HealthGauges> {
        Arc::clone(&self.gauges)
    }
    /// The provider-health state as of the last poll.
    pub fn provider_state(&self) -> ProviderState {
        self.machine.state()
    }
    /// The breaker's state at `now_ns` (applies its timers).
    pub fn breaker_state(&mut self, now_ns: u64) -> BreakerState {
        self.breaker.state(now_ns)
    }
    /// Monotonic time of the next connect attempt while `Waiting`.
    pub fn next_connect_ns(&self) -> u64 {
        self.next_connect_ns
    }
    /// Bytes waiting to be written.
    pub fn outbound(&self) -> &[u8] {
        &self.outbound
    }
    /// The driver wrote `n` bytes of [`FixSession::outbound`].
    pub fn consume_outbound(&mut self, n: usize) {
        self.outbound.drain(..n.min(self.outbound.len()));
    }

    /// The TCP connection is up: send Logon.
    pub fn on_connected(&mut self, now_ns: u64, wall_ns: u64) -> Io {
        debug_assert_eq!(self.state, SessionState::Connecting);
        self.state = SessionState::LogonSent;
        self.connected = true;
        self.stats.connections.inc();
        self.deadline_ns = now_ns + self.cfg.logon_timeout_ms * NS_PER_MS;
        self.last_recv_ns = now_ns;
        self.out_seq = 1;
        self.in_seq = 1;
        self.gaps_this_connection = 0;
        self.gaps.clear();
        self.reset_answered = false;
        self.test_req_pending = false;
        self.garbled.clear();
        self.outbound.clear();
        let hb = u64::from(self.cfg.heartbeat_s);
        // Taken out for the call and put back: `send` borrows self.
        let user = self.cfg.username.take();
        let pass = self.cfg.password.take();
        self.send(b"A", now_ns, wall_ns, |e| {
            e.uint(98, 0);
            e.uint(108, hb);
            e.bytes(141, b"Y");
            if let Some(u) = &user {
                e.bytes(553, u.as_bytes());
            }
            if let Some(p) = &pass {
                e.bytes(554, p.expose().as_bytes());
            }
        });
        (self.cfg.username, self.cfg.password) = (user, pass);
        self.take_io(now_ns)
    }

    /// The connect attempt failed (refused, unreachable).
    pub fn on_connect_failed(&mut self, now_ns: u64) -> Io {
        self.stats.connects_failed.inc();
        self.fail(Failure::ConnectFailed, now_ns);
        self.finish_close(now_ns);
        Io::Nothing
    }

    /// The peer closed or reset the connection (the driver has dropped it).
    pub fn on_disconnected(&mut self, now_ns: u64) -> Io {
        if self.state == SessionState::LoggingOut {
            self.end_quietly();
        } else {
            self.stats.disconnects.inc();
            self.fail(Failure::Disconnected, now_ns);
        }
        self.finish_close(now_ns);
        Io::Nothing
    }

    /// A garbled message (bad CheckSum, BodyLength or framing; the driver
    /// has skipped to the next BeginString): ignored and counted, as FIX
    /// says; only `garbled_max` of them within `garbled_window_ms` tear
    /// the session down (a breaker failure then).
    pub fn on_garbled(&mut self, err: codec::DecodeError, now_ns: u64) -> Io {
        self.note_garbled(err, now_ns);
        self.take_io(now_ns)
    }

    fn note_garbled(&mut self, err: codec::DecodeError, now_ns: u64) {
        self.stats.garbled_ignored.inc();
        if matches!(err, codec::DecodeError::BadChecksum { .. }) {
            self.stats.checksum_errors.inc();
        } else {
            self.stats.decode_errors.inc();
        }
        if self.garbled.record(now_ns) {
            tracing::warn!(provider = %self.cfg.name, %err, max = self.cfg.garbled_max,
                window_ms = self.cfg.garbled_window_ms, "FIX garbled input: session torn down");
            self.stats.garbled_teardowns.inc();
            self.fail(Failure::Garbled, now_ns);
        } else {
            tracing::debug!(provider = %self.cfg.name, %err, "FIX garbled message ignored");
        }
    }

    /// A message for another session: a misrouted connection, closed.
    fn on_wrong_comp_id(&mut self, hdr: &MsgHeader<'_>, now_ns: u64) -> Io {
        let (sender, target) = (hdr.sender_comp_id.unwrap_or(b""), hdr.target_comp_id);
        tracing::warn!(provider = %self.cfg.name, sender = %crate::runtime::esc_bytes(sender),
            target = %crate::runtime::esc_bytes(target.unwrap_or(b"")), "FIX message for another session");
        self.stats.comp_id_mismatches.inc();
        self.fail(Failure::WrongCompId, now_ns);
        self.take_io(now_ns)
    }

    /// True while decoded ticks wait for [`FixSession::drain_ticks`]; the
    /// driver handles no further frame until they are drained.
    pub(crate) fn has_pending_ticks(&self) -> bool {
        self.pending_pos < self.pending.len()
    }

    /// Moves decoded ticks into `out`; returns how many.
    pub fn drain_ticks(&mut self, out: &mut [Tick]) -> usize {
        let avail = &self.pending[self.pending_pos..];
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        self.pending_pos += n;
        if self.pending_pos == self.pending.len() {
            self.pending.clear();
            self.pending_pos = 0;
        }
        n
    }

    /// Handles one verified frame (from [`codec::frame_len`]).
    pub fn handle_frame(&mut self, frame: &[u8], now_ns: u64, wall_ns: u64) -> Io {
        debug_assert!(
            !self.has_pending_ticks(),
            "drain ticks before the next frame"
        );
        self.last_recv_ns = now_ns;
        self.test_req_pending = false;
        self.stats.messages_received.inc();
        let mut fields = Fields::of_frame(frame);
        // A frame whose CheckSum holds but whose fields do not parse is
        // garbled too (FIX: 35 must be the third field): ignored, counted.
        let msg_type = match fields.next() {
            Some(Ok((35, t))) => t,
            _ => return self.on_garbled(codec::DecodeError::MissingMsgType, now_ns),
        };
        let (hdr, body) = match read_header(fields.clone()) {
            Ok(h) => (h, fields),
            Err(e) => return self.on_garbled(e, now_ns),
        };
        if !self.addressed_to_us(&hdr) {
            return self.on_wrong_comp_id(&hdr, now_ns);
        }
        if !self.check_seq(msg_type, &hdr, now_ns, wall_ns) {
            return self.take_io(now_ns);
        }
        self.dispatch(msg_type, &hdr, body, now_ns, wall_ns);
        self.take_io(now_ns)
    }

    fn dispatch(
        &mut self,
        msg_type: &[u8],
        hdr: &MsgHeader<'_>,
        body: Fields<'_>,
        now_ns: u64,
        wall_ns: u64,
    ) {
        match msg_type {
            b"A" => self.on_logon(hdr, now_ns, wall_ns),
            b"0" => {}
            b"1" => {
                self.stats.test_requests_answered.inc();
                let id = hdr.test_req_id.unwrap_or(b"");
                self.send(b"0", now_ns, wall_ns, |e| e.bytes(112, id));
            }
            b"5" => self.on_logout(hdr, now_ns, wall_ns),
            b"2" => self.on_resend_request(hdr, now_ns, wall_ns),
            b"3" => self.on_session_reject(hdr, now_ns),
            b"4" => self.on_sequence_reset(hdr, now_ns, wall_ns),
            b"Y" => self.on_md_reject(hdr, now_ns),
            b"W" | b"X" if self.state == SessionState::Active => {
                self.on_market_data(msg_type == b"W", hdr, body, now_ns, wall_ns)
            }
            b"W" | b"X" => self.stats.discarded_not_logged_on.inc(),
            _ => self.stats.messages_ignored.inc(),
        }
    }

    /// SenderCompID (49) must be the provider's and TargetCompID (56)
    /// ours: a message for another session means a misrouted connection.
    fn addressed_to_us(&self, hdr: &MsgHeader<'_>) -> bool {
        hdr.sender_comp_id == Some(self.cfg.target_comp_id.as_bytes())
            && hdr.target_comp_id == Some(self.cfg.sender_comp_id.as_bytes())
    }

    /// Queues one outgoing message; a full outbound buffer is a failure.
    fn send(
        &mut self,
        msg_type: &[u8],
        now_ns: u64,
        wall_ns: u64,
        body: impl FnOnce(&mut Encoder),
    ) {
        let header = Header {
            sender_comp_id: self.cfg.sender_comp_id.as_bytes(),
            target_comp_id: self.cfg.target_comp_id.as_bytes(),
            seq: self.out_seq,
            sending_time_utc_ns: wall_ns,
        };
        self.enc.begin(msg_type, &header);
        body(&mut self.enc);
        let Ok(bytes) = self.enc.finish() else {
            debug_assert!(false, "our own messages fit the encoder");
            return;
        };
        if self.outbound.len() + bytes.len() > OUTBOUND_BYTES_MAX {
            self.stats.outbound_full.inc();
            self.fail(Failure::OutboundFull, now_ns);
            return;
        }
        self.outbound.extend_from_slice(bytes);
        self.out_seq += 1;
        self.last_sent_ns = now_ns;
    }
}

fn read_header(fields: Fields<'_>) -> Result<MsgHeader<'_>, codec::DecodeError> {
    let mut h = MsgHeader::default();
    for field in fields {
        let (tag, v) = field?;
        match tag {
            // Sequence numbers above u32::MAX are refused as malformed:
            // no real session gets there, and `+ 1` must never overflow.
            34 => h.seq = codec::parse_u64(v).filter(|&n| n <= SEQ_MAX),
            43 => h.poss_dup = v == b"Y",
            52 => h.sending_time_ns = codec::parse_utc_timestamp(v),
            55 if h.symbol.is_none() => h.symbol = Some(v),
            262 => h.req_id = Some(v),
            // Echoed back in our Heartbeat: bounded so the reply always
            // fits the encoder's preallocated body.
            112 if v.len() <= TEST_REQ_ID_MAX => h.test_req_id = Some(v),
            112 => return Err(codec::DecodeError::MalformedField),
            36 => h.new_seq_no = codec::parse_u64(v).filter(|&n| n <= SEQ_MAX),
            123 => h.gap_fill = v == b"Y",
            7 => h.begin_seq_no = codec::parse_u64(v).filter(|&n| n <= SEQ_MAX),
            16 => h.end_seq_no = codec::parse_u64(v).filter(|&n| n <= SEQ_MAX),
            49 => h.sender_comp_id = Some(v),
            56 => h.target_comp_id = Some(v),
            141 => h.reset_seq_num = v == b"Y",
            58 => h.text = Some(v),
            45 => h.ref_seq_num = codec::parse_u64(v),
            373 | 281 => h.reject_reason = Some(v),
            268 => break, // the repeating group: entries are read later
            _ => {}
        }
    }
    Ok(h)
}

/// At most one failure log line a second per session.
const FAIL_LOG_EVERY_NS: u64 = 1_000 * NS_PER_MS;
/// Largest MsgSeqNum / NewSeqNo accepted.
const SEQ_MAX: u64 = u32::MAX as u64;
/// Longest TestReqID (112) echoed back.
const TEST_REQ_ID_MAX: usize = 64;
