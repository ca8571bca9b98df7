//! The sans-IO protocol core of one subscriber connection on the server
//! (docs/protocol.md §4): bytes and the current time in, control frames
//! and events out.
//!
//! The shard reads socket bytes into [`Session::read_buf`], commits them
//! with [`Session::on_read`] and pulls one frame at a time with
//! [`Session::poll_frame`]: framing errors, the logon gate, the message
//! rate limit, heartbeats, Logout and a second Logon are answered here;
//! what needs the shard's state (the logon's admission and reference data,
//! subscriptions, requests) comes back as an [`Event`]. Timers (logon,
//! incomplete frame, slow consumer, dead peer, heartbeat, closing linger)
//! are judged by [`Session::on_timer`] from the `now_ns` the caller gives.
//!
//! Frames are encoded straight into the caller's [`OutBuf`]: nothing is
//! allocated after [`Session::new`] (the inbound buffer, at accept). The
//! session owns no socket, no poller and no clock; the shard carries out
//! what [`Session::take_effects`] reports after every call (queue a
//! write, drop the session's subscriptions and account slot).

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::Rng;

use super::outbound::{Append, OutBuf};
use super::{GatewayConfig, GatewayStats};
use crate::admission::{RetryWindow, TokenBucket};
use crate::config::Account;
use crate::wire::{
    self, DisconnectReason, LogonAccepted, LogonRejectReason, LogonRejected, Message, RejectReason,
};

/// Room reserved for one control message in an outbound buffer.
pub const CONTROL_FRAME_MAX: usize = 512;
const MS: u64 = 1_000_000;

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Connected; only Logon is accepted.
    AwaitingLogon,
    /// Logged on as account `account` (index in the config's accounts).
    Active {
        /// The account's index.
        account: u32,
    },
    /// A Disconnect (or LogonRejected) was queued; flushing until
    /// `deadline_ns`, then closed. Reads are ignored.
    Closing {
        /// When the socket is closed, flushed or not (monotonic ns).
        deadline_ns: u64,
    },
}

/// The gateway settings a session decides by (see [`GatewayConfig`]).
#[derive(Debug, Clone, Copy)]
pub struct SessionConfig {
    /// Heartbeat interval offered when the client asks for 0, ms.
    pub heartbeat_ms: u32,
    /// Shortest heartbeat interval granted, ms.
    pub heartbeat_min_ms: u32,
    /// Longest heartbeat interval granted, ms.
    pub heartbeat_max_ms: u32,
    /// A peer silent for this many heartbeat intervals is dead.
    pub dead_after_heartbeats: u32,
    /// A connection must log on within this many ms.
    pub logon_timeout_ms: u64,
    /// A started frame must complete within this many ms.
    pub frame_timeout_ms: u64,
    /// Above the high water mark longer than this (ms): slow consumer.
    pub slow_consumer_ms: u64,
    /// Longest a closing session flushes its last bytes, ms.
    pub close_linger_ms: u64,
    /// Largest frame a client may send, bytes (the inbound buffer's size).
    pub max_frame_bytes: usize,
    /// Per-connection message rate limit, messages per second.
    pub msg_rate_per_s: u32,
    /// Messages a connection may send in a burst above the rate.
    pub msg_burst: u32,
    /// Refusals in a row after which it is cut as a flood (see
    /// [`backoff`]).
    pub flood_disconnect_after: u32,
    /// Refused frames within `bad_frame_window_ms` that end the session.
    pub bad_frame_limit: u32,
    /// Window of `bad_frame_limit`, ms.
    pub bad_frame_window_ms: u64,
    /// retryAfterMs window of the Disconnects for errors.
    pub error_retry: RetryWindow,
    /// retryAfterMs window of LogonRejected(busy) for a Logon whose
    /// verification did not come within the logon timeout.
    pub busy_retry: RetryWindow,
}

impl From<&GatewayConfig> for SessionConfig {
    fn from(c: &GatewayConfig) -> Self {
        SessionConfig {
            heartbeat_ms: c.heartbeat_ms,
            heartbeat_min_ms: c.heartbeat_min_ms,
            heartbeat_max_ms: c.heartbeat_max_ms,
            dead_after_heartbeats: c.dead_after_heartbeats,
            logon_timeout_ms: c.logon_timeout_ms,
            frame_timeout_ms: c.frame_timeout_ms,
            slow_consumer_ms: c.slow_consumer_ms,
            close_linger_ms: c.close_linger_ms,
            max_frame_bytes: c.max_frame_bytes,
            msg_rate_per_s: c.msg_rate_per_s,
            msg_burst: c.msg_burst,
            flood_disconnect_after: c.flood_disconnect_after,
            bad_frame_limit: c.bad_frame_limit,
            bad_frame_window_ms: c.bad_frame_window_ms,
            error_retry: c.error_retry,
            busy_retry: c.admission.retry_after,
        }
    }
}

/// What one call may touch besides the session: the time, the
/// connection's outbound buffer, the jitter source and the counters.
pub struct Ctx<'a> {
    /// The time of the call, monotonic ns.
    pub now_ns: u64,
    /// The settings the session decides by.
    pub cfg: &'a SessionConfig,
    /// The connection's outbound buffer; frames are appended here.
    pub out: &'a mut OutBuf,
    /// Jitter source for retry-after values.
    pub rng: &'a mut SmallRng,
    /// Listener-wide counters.
    pub stats: &'a GatewayStats,
    /// Since when the input being handled has waited for the shard (its
    /// unread mark, else `now_ns`): the backoff window judges by this
    /// whether a message came after its grace (see [`backoff`]).
    pub input_since_ns: u64,
}

impl Ctx<'_> {
    fn jitter(&mut self, w: RetryWindow) -> u32 {
        self.rng.gen_range(w.min_ms..=w.max_ms)
    }
}

/// A message the shard must act on (the session has checked the state
/// and spent the message's rate token).
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    /// Decide with admission and reference data, then call
    /// [`Session::logon_accepted`] or [`Session::logon_rejected`].
    Logon(wire::Logon<'a>),
    /// Add subscriptions (the shard checks entitlements and answers).
    Subscribe(wire::Subscribe<'a>),
    /// Remove subscriptions.
    Unsubscribe(wire::Subscribe<'a>),
    /// A request for the symbol list (handed to the request path).
    SymbolList(wire::SymbolListRequest),
    /// A request for the latest prices of symbols (request path).
    Snapshot(wire::SnapshotRequest<'a>),
    /// A request for a symbol's recent ticks (request path).
    History(wire::HistoryRequest),
}

/// The outcome of [`Session::poll_frame`].
#[derive(Debug, Clone, PartialEq)]
pub enum Step<'a> {
    /// No complete frame left (or the session is closing).
    Done,
    /// A frame was answered by the session itself; poll again.
    Handled,
    /// A frame for the shard; poll again afterwards.
    Event(Event<'a>),
}

/// What [`Session::on_timer`] asks of the shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// Nothing, or handled (a Heartbeat or a Disconnect was queued).
    Idle,
    /// The closing linger is over: close the socket now.
    CloseNow,
}

/// The session ended (it started closing): the shard drops its
/// subscriptions and, if it was logged on, gives back its account slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The account index whose session slot is given back, if it was logged on.
    pub account: Option<u32>,
}

/// What the shard must do after a call (see [`Session::take_effects`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Effects {
    /// Bytes were queued (or the session started closing): write.
    pub write: bool,
    /// The session ended with this call.
    pub ended: Option<Ended>,
    /// It ended cut for a message flood, told to come back in this many
    /// ms: its account's logons from its address are held until then.
    pub flood_retry_ms: Option<u32>,
}

/// An accepted logon, as the shard decided it.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// Index of the account for per-account limits.
    pub account: u32,
    /// The account's entitlements and limits.
    pub acct: Arc<Account>,
    /// The session's id, unique in the process.
    pub session_id: u64,
    /// Wall-clock time for LogonAccepted's serverTimeNs.
    pub server_time_ns: u64,
    /// The stream the server's prices are numbered by at logon
    /// (LogonAccepted's streamId; 0 = none yet).
    pub stream_id: u64,
}

/// The protocol state of one subscriber connection.
pub struct Session {
    state: SessionState,
    session_id: u64,
    acct: Option<Arc<Account>>,
    default_tier: u8,
    heartbeat_ns: u64,
    connected_ns: u64,
    last_rx_ns: u64,
    last_tx_ns: u64,
    inbuf: Box<[u8]>,
    in_len: usize,
    /// Bytes of `inbuf` already taken as frames since the last compaction.
    in_off: usize,
    /// When the oldest incomplete frame in `inbuf` started arriving.
    partial_since_ns: Option<u64>,
    msg_bucket: TokenBucket,
    /// The retry-after it was told and what it did with it.
    backoff: Backoff,
    /// The peer's smoothed round trip as the kernel measured it (0:
    /// unknown): the grace of a backoff window.
    rtt_ns: u64,
    /// When its Logon arrived (it is with the verifier): from then on the
    /// logon timeout no longer applies, a verdict does.
    logon_seen_ns: Option<u64>,
    /// When the shard last found input waiting that it has not read
    /// (socket or buffer): the peer is not silent at that time.
    unread_noted_ns: u64,
    /// Bad frames (refused bodies) since `bad_since_ns`.
    bad_frames: u32,
    /// When the current bad-frame window opened.
    bad_since_ns: u64,
    first_subscribe_done: bool,
    /// Why the server is closing it, if it is.
    closing_reason: Option<DisconnectReason>,
    effects: Effects,
}

mod accessors;
pub mod backoff;
mod flood;
mod timers;

use backoff::Backoff;

impl Session {
    /// A new connection at `now_ns`: the inbound buffer (one largest
    /// frame) is allocated here.
    pub fn new(cfg: &SessionConfig, now_ns: u64) -> Session {
        Session {
            state: SessionState::AwaitingLogon,
            session_id: 0,
            acct: None,
            default_tier: 0,
            heartbeat_ns: u64::from(cfg.heartbeat_ms) * MS,
            connected_ns: now_ns,
            last_rx_ns: now_ns,
            last_tx_ns: now_ns,
            inbuf: vec![0u8; cfg.max_frame_bytes].into_boxed_slice(),
            in_len: 0,
            in_off: 0,
            partial_since_ns: None,
            msg_bucket: TokenBucket::new(cfg.msg_rate_per_s, cfg.msg_burst, now_ns),
            backoff: Backoff::default(),
            rtt_ns: 0,
            logon_seen_ns: None,
            unread_noted_ns: 0,
            bad_frames: 0,
            bad_since_ns: now_ns,
            first_subscribe_done: false,
            closing_reason: None,
            effects: Effects::default(),
        }
    }

    // ---- input --------------------------------------------------------

    /// Where the next socket read goes; empty if the buffer is full (which
    /// cannot happen while frames are bounded by the buffer's size).
    pub fn read_buf(&mut self) -> &mut [u8] {
        &mut self.inbuf[self.in_len..]
    }

    /// `n` bytes were read into [`Session::read_buf`] at `now_ns`.
    pub fn on_read(&mut self, n: usize, now_ns: u64) {
        debug_assert!(self.in_len + n <= self.inbuf.len());
        self.in_len += n;
        self.last_rx_ns = now_ns;
    }

    /// The inbound buffer filled without holding a frame: abuse.
    pub fn on_buffer_full(&mut self, ctx: &mut Ctx<'_>) {
        let reason = RejectReason::FRAME_TOO_LARGE;
        self.protocol_error(ctx, reason, 0, 0, "frame does not fit");
    }

    /// Takes the next complete frame, copied into `frame` (one largest
    /// frame long), and handles it or returns it as an [`Event`].
    pub fn poll_frame<'f>(&mut self, frame: &'f mut [u8], ctx: &mut Ctx<'_>) -> Step<'f> {
        if self.is_closing() {
            self.in_len = 0;
            self.in_off = 0;
            return Step::Done;
        }
        let buf = &self.inbuf[self.in_off..self.in_len];
        let len = match wire::split_with_max(buf, ctx.cfg.max_frame_bytes) {
            Ok(None) => {
                self.compact(ctx.now_ns);
                return Step::Done;
            }
            Ok(Some(len)) => len,
            Err(e) => {
                self.protocol_error(ctx, e.reason(), 0, 0, "bad framing");
                return Step::Done;
            }
        };
        frame[..len].copy_from_slice(&buf[..len]);
        self.in_off += len;
        self.on_frame(&frame[..len], ctx)
    }

    /// Moves an incomplete frame to the front and notes since when it is
    /// incomplete (the frame timeout's start).
    fn compact(&mut self, now_ns: u64) {
        let off = self.in_off;
        self.inbuf.copy_within(off..self.in_len, 0);
        self.in_len -= off;
        self.in_off = 0;
        self.partial_since_ns = match (self.in_len, off, self.partial_since_ns) {
            (0, _, _) => None,
            (_, 0, Some(t)) => Some(t),
            _ => Some(now_ns),
        };
    }

    fn on_frame<'f>(&mut self, frame: &'f [u8], ctx: &mut Ctx<'_>) -> Step<'f> {
        let msg = match wire::decode(frame) {
            Ok(m) => m,
            Err(e) => {
                // Echo what could be read (the header's template, the
                // request's id) whatever went wrong after it.
                let seen = wire::readable(frame);
                let (rid, tid) = (seen.request_id.unwrap_or(0), seen.template_id);
                if self.state == SessionState::AwaitingLogon {
                    let text = "bad message before logon";
                    self.protocol_error(ctx, e.reason(), rid, tid, text);
                } else {
                    self.bad_frame(ctx, rid, tid, e.reason(), "bad message");
                }
                return Step::Handled;
            }
        };
        match self.state {
            SessionState::AwaitingLogon => match msg {
                Message::Logon(l) => {
                    self.logon_seen_ns.get_or_insert(ctx.now_ns);
                    Step::Event(Event::Logon(l))
                }
                // A client waiting long for LogonAccepted (a herd) may
                // heartbeat: it only proves the peer alive.
                Message::Heartbeat => Step::Handled,
                other => {
                    let (rid, t) = (other.request_id().unwrap_or(0), other.template_id());
                    // A subscriber's request is early; anything else (a
                    // provider's or a server's message) is on the wrong port.
                    let (reason, text) = if is_subscriber_request(&other) {
                        (RejectReason::NOT_LOGGED_ON, "logon first")
                    } else {
                        (RejectReason::UNEXPECTED_MESSAGE, "not a subscriber message")
                    };
                    self.protocol_error(ctx, reason, rid, t, text);
                    Step::Handled
                }
            },
            SessionState::Active { .. } => self.on_active(msg, ctx),
            SessionState::Closing { .. } => Step::Handled,
        }
    }

    fn on_active<'f>(&mut self, msg: Message<'f>, ctx: &mut Ctx<'_>) -> Step<'f> {
        // Inside a backoff window only Heartbeat and Logout go on.
        if !matches!(msg, Message::Heartbeat | Message::Logout) && !self.gate(&msg, ctx) {
            return Step::Handled;
        }
        // Every message, heartbeats included, spends a token: a heartbeat
        // flood is a flood.
        if !self.take_msg_token(&msg, ctx) {
            return Step::Handled;
        }
        let event = match msg {
            Message::Heartbeat => return Step::Handled,
            Message::Logout => {
                self.disconnect(ctx, DisconnectReason::LOGOUT, 0, "logout");
                return Step::Handled;
            }
            Message::Logon(_) => {
                let (t, r) = (wire::template::LOGON, RejectReason::ALREADY_LOGGED_ON);
                self.reject(ctx, 0, t, r, 0, "");
                return Step::Handled;
            }
            Message::Subscribe(s) => Event::Subscribe(s),
            Message::Unsubscribe(s) => Event::Unsubscribe(s),
            Message::SymbolListRequest(r) => Event::SymbolList(r),
            Message::SnapshotRequest(r) => Event::Snapshot(r),
            Message::HistoryRequest(r) => Event::History(r),
            other => {
                let rid = other.request_id().unwrap_or(0);
                let t = other.template_id();
                self.bad_frame(ctx, rid, t, RejectReason::UNEXPECTED_MESSAGE, "");
                return Step::Handled;
            }
        };
        Step::Event(event)
    }

    /// The peer's smoothed round trip (from the kernel's TCP state), ns.
    pub fn set_rtt_ns(&mut self, rtt_ns: u64) {
        self.rtt_ns = rtt_ns;
    }

    /// A logged-on session's frame with a bad body (unknown template,
    /// malformed, unexpected): Reject; more than `bad_frame_limit` of them
    /// within `bad_frame_window_ms` of the first → protocol error.
    fn bad_frame(
        &mut self,
        ctx: &mut Ctx<'_>,
        request_id: u64,
        template: u16,
        reason: RejectReason,
        text: &str,
    ) {
        let window = ctx.cfg.bad_frame_window_ms * MS;
        if self.bad_frames == 0 || ctx.now_ns.saturating_sub(self.bad_since_ns) > window {
            self.bad_frames = 0;
            self.bad_since_ns = ctx.now_ns;
        }
        self.bad_frames += 1;
        if self.bad_frames > ctx.cfg.bad_frame_limit {
            self.protocol_error(ctx, reason, request_id, template, "too many bad frames");
        } else {
            self.reject(ctx, request_id, template, reason, 0, text);
        }
    }

    // ---- logon --------------------------------------------------------

    /// The shard admitted the logon that came as [`Event::Logon`] asking
    /// for `heartbeat_ms` (0: the server's default): the session is
    /// active and LogonAccepted is queued.
    pub fn logon_accepted(&mut self, a: Admitted, heartbeat_ms: u32, ctx: &mut Ctx<'_>) {
        if self.state != SessionState::AwaitingLogon {
            return;
        }
        let cfg = ctx.cfg;
        let hb = match heartbeat_ms {
            0 => cfg.heartbeat_ms,
            ms => ms.clamp(cfg.heartbeat_min_ms, cfg.heartbeat_max_ms),
        };
        let default_tier = a.acct.tiers.first().copied().unwrap_or(0);
        self.state = SessionState::Active { account: a.account };
        self.acct = Some(a.acct);
        self.session_id = a.session_id;
        self.default_tier = default_tier;
        self.heartbeat_ns = u64::from(hb) * MS;
        GatewayStats::add(&ctx.stats.logons_accepted, 1);
        GatewayStats::add(&ctx.stats.logged_on, 1);
        let m = LogonAccepted {
            session_id: a.session_id,
            heartbeat_interval_ms: hb,
            server_time_ns: a.server_time_ns,
            default_tier,
            stream_id: a.stream_id,
        };
        self.send(ctx, |b| wire::encode_logon_accepted(b, &m));
    }

    /// The shard refused the logon: LogonRejected is queued and the
    /// connection closes.
    pub fn logon_rejected(
        &mut self,
        reason: LogonRejectReason,
        retry_after_ms: u32,
        ctx: &mut Ctx<'_>,
    ) {
        GatewayStats::add(&ctx.stats.logons_rejected, 1);
        let m = LogonRejected {
            reason,
            retry_after_ms,
        };
        self.send(ctx, |b| wire::encode_logon_rejected(b, &m));
        self.begin_close(ctx, None);
    }

    // ---- output -------------------------------------------------------

    /// Appends a control message built by `encode`; closes the session as
    /// a slow consumer if even that does not fit.
    pub fn send(
        &mut self,
        ctx: &mut Ctx<'_>,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, wire::EncodeError>,
    ) {
        let r = ctx
            .out
            .append_with(CONTROL_FRAME_MAX, |b| encode(b).unwrap_or(0));
        self.last_tx_ns = ctx.now_ns;
        self.effects.write = true;
        if r == Append::Overflow && !self.is_closing() {
            // Not even a control message fits: the client is not reading.
            // The Disconnect that says so goes into the buffer's reserve.
            let retry = ctx.jitter(ctx.cfg.error_retry);
            let reason = DisconnectReason::SLOW_CONSUMER;
            self.disconnect(ctx, reason, retry, "slow consumer");
        }
    }

    /// Queues Reject. A `rate_limited` one with a retry-after opens a
    /// backoff window (see [`backoff`]).
    pub fn reject(
        &mut self,
        ctx: &mut Ctx<'_>,
        request_id: u64,
        ref_template_id: u16,
        reason: RejectReason,
        retry_after_ms: u32,
        text: &str,
    ) {
        self.note_refusal(reason, retry_after_ms, ctx.now_ns);
        self.reject_frame(
            ctx,
            request_id,
            ref_template_id,
            reason,
            retry_after_ms,
            text,
        );
    }

    fn reject_frame(
        &mut self,
        ctx: &mut Ctx<'_>,
        request_id: u64,
        ref_template_id: u16,
        reason: RejectReason,
        retry_after_ms: u32,
        text: &str,
    ) {
        GatewayStats::add(&ctx.stats.rejects_sent, 1);
        let m = wire::Reject {
            request_id,
            ref_template_id,
            reason,
            retry_after_ms,
            text: text.as_bytes(),
        };
        self.send(ctx, |b| wire::encode_reject(b, &m));
    }

    /// Reject, then Disconnect(protocol_error) with a jittered retry-after.
    pub fn protocol_error(
        &mut self,
        ctx: &mut Ctx<'_>,
        reason: RejectReason,
        request_id: u64,
        template: u16,
        text: &str,
    ) {
        self.reject(ctx, request_id, template, reason, 0, text);
        let retry = ctx.jitter(ctx.cfg.error_retry);
        self.disconnect(ctx, DisconnectReason::PROTOCOL_ERROR, retry, text);
    }

    /// Queues Disconnect(reason) and starts closing.
    pub fn disconnect(
        &mut self,
        ctx: &mut Ctx<'_>,
        reason: DisconnectReason,
        retry_after_ms: u32,
        text: &str,
    ) {
        let s = ctx.stats;
        let counter = match reason {
            DisconnectReason::SLOW_CONSUMER => Some(&s.disconnects_slow_consumer),
            DisconnectReason::PROTOCOL_ERROR => Some(&s.disconnects_protocol_error),
            DisconnectReason::IDLE_TIMEOUT => Some(&s.disconnects_idle),
            DisconnectReason::LOGON_TIMEOUT => {
                GatewayStats::add(&s.disconnects_logon_timeout, 1);
                Some(&s.disconnects_idle)
            }
            DisconnectReason::SHUTDOWN => Some(&s.disconnects_shutdown),
            DisconnectReason::LOGOUT => Some(&s.disconnects_logout),
            _ => None,
        };
        if let Some(c) = counter {
            GatewayStats::add(c, 1);
        }
        // The last frame may use the buffer's reserve, so a full buffer
        // (a slow consumer) still carries the reason; the closing linger
        // is its bounded time to drain. A slow consumer's unwritten prices
        // go first: the Disconnect then waits only behind the kernel's
        // bounded queue (`--sndbuf-bytes`), not seconds of old prices.
        if reason == DisconnectReason::SLOW_CONSUMER {
            ctx.out
                .drop_prices(|run, written| super::fresh::compact_run(run, written, |_| {}));
        }
        let _ = ctx.out.append_final(CONTROL_FRAME_MAX, |b| {
            wire::encode_disconnect_reason(b, reason, retry_after_ms, text).unwrap_or(0)
        });
        self.last_tx_ns = ctx.now_ns;
        self.effects.write = true;
        self.begin_close(ctx, Some(reason));
    }

    /// Starts closing: reads are ignored, the outbound buffer is flushed
    /// until the linger ends.
    fn begin_close(&mut self, ctx: &mut Ctx<'_>, reason: Option<DisconnectReason>) {
        let account = self.end();
        let linger = ctx.cfg.close_linger_ms * MS;
        self.state = SessionState::Closing {
            deadline_ns: ctx.now_ns + linger,
        };
        self.closing_reason = reason;
        self.in_len = 0;
        self.in_off = 0;
        self.effects.write = true;
        self.effects.ended = Some(Ended { account });
    }

    /// Ends a logged-on session (back to awaiting logon, so it is not
    /// ended twice); returns its account.
    pub fn end(&mut self) -> Option<u32> {
        let account = self.account()?;
        self.state = SessionState::AwaitingLogon;
        Some(account)
    }

    /// What the shard must do after the last calls; cleared.
    pub fn take_effects(&mut self) -> Effects {
        std::mem::take(&mut self.effects)
    }
}

/// Messages a logged-on subscriber may send (besides Logon and Heartbeat).
fn is_subscriber_request(m: &Message<'_>) -> bool {
    matches!(
        m,
        Message::Logout
            | Message::SymbolListRequest(_)
            | Message::Subscribe(_)
            | Message::Unsubscribe(_)
            | Message::SnapshotRequest(_)
            | Message::HistoryRequest(_)
    )
}

#[cfg(test)]
mod tests;
