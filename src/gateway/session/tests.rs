//! The server session without sockets: every state and transition of
//! docs/protocol.md §4 (and the framing and reject rules of §2 and §6),
//! driven by scripted bytes and an injected time.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::*;
use crate::gateway::outbound::OutBuf;
use crate::wire::{template, Name16, SymbolRef, TIER_ACCOUNT_DEFAULT};

const MS_NS: u64 = 1_000_000;
const T0: u64 = 1_000 * MS_NS;

fn cfg() -> SessionConfig {
    SessionConfig {
        heartbeat_ms: 1_000,
        heartbeat_min_ms: 100,
        heartbeat_max_ms: 30_000,
        dead_after_heartbeats: 3,
        logon_timeout_ms: 5_000,
        frame_timeout_ms: 2_000,
        slow_consumer_ms: 4_000,
        close_linger_ms: 2_000,
        max_frame_bytes: 1_024,
        msg_rate_per_s: 10,
        msg_burst: 4,
        flood_disconnect_after: 3,
        bad_frame_limit: 3,
        bad_frame_window_ms: 1_000,
        error_retry: RetryWindow::new(1_000, 5_000),
        busy_retry: RetryWindow::new(3_000, 8_000),
    }
}

fn account() -> Arc<Account> {
    Arc::new(Account {
        name: "alice".into(),
        token: "secret".into(),
        symbols: None,
        tiers: vec![2, 0],
        max_sessions: 10,
        critical: false,
        max_update_hz: None,
    })
}

/// What a frame the server sent says, owned.
#[derive(Debug, Clone, PartialEq)]
enum Sent {
    Accepted(LogonAccepted),
    Rejected(LogonRejected),
    Heartbeat,
    Reject {
        request_id: u64,
        template: u16,
        reason: RejectReason,
        retry_ms: u32,
    },
    Disconnect {
        reason: DisconnectReason,
        retry_ms: u32,
        text: String,
    },
    Other(u16),
}

/// What one poll gave, owned.
#[derive(Debug, Clone, PartialEq)]
enum Got {
    Done,
    Handled,
    Logon { hb_ms: u32, account: Vec<u8> },
    Subscribe(u64),
    Unsubscribe(u64),
    SymbolList(u64),
    Snapshot(u64),
    History(u64),
}

struct Rig {
    cfg: SessionConfig,
    s: Session,
    out: OutBuf,
    rng: SmallRng,
    stats: GatewayStats,
    frame: Vec<u8>,
    now: u64,
    /// Since when the input fed has waited unread (None: `now`).
    waited_since: Option<u64>,
}

impl Rig {
    fn new() -> Rig {
        Rig::with_out(OutBuf::new(64 * 1024, 8 * 1024, 16 * 1024))
    }

    fn with_out(out: OutBuf) -> Rig {
        let cfg = cfg();
        Rig {
            s: Session::new(&cfg, T0),
            cfg,
            out,
            rng: SmallRng::seed_from_u64(7),
            stats: GatewayStats::default(),
            frame: vec![0; 1_024],
            now: T0,
            waited_since: None,
        }
    }

    fn at_ms(&mut self, ms: u64) -> &mut Self {
        self.now = T0 + ms * MS_NS;
        self.waited_since = None;
        self
    }

    /// The input fed next has waited unread since `ms` (the shard held it).
    fn waited_since_ms(&mut self, ms: u64) -> &mut Self {
        self.waited_since = Some(T0 + ms * MS_NS);
        self
    }

    /// Runs `f` with a context at the rig's time.
    fn call<T>(&mut self, f: impl FnOnce(&mut Session, &mut Ctx<'_>) -> T) -> T {
        let mut ctx = Ctx {
            now_ns: self.now,
            input_since_ns: self.waited_since.unwrap_or(self.now),
            cfg: &self.cfg,
            out: &mut self.out,
            rng: &mut self.rng,
            stats: &self.stats,
        };
        f(&mut self.s, &mut ctx)
    }

    /// Reads `bytes` and polls every frame they complete.
    fn feed(&mut self, bytes: &[u8]) -> Vec<Got> {
        let buf = self.s.read_buf();
        buf[..bytes.len()].copy_from_slice(bytes);
        self.s.on_read(bytes.len(), self.now);
        let mut got = Vec::new();
        loop {
            let mut ctx = Ctx {
                now_ns: self.now,
                input_since_ns: self.waited_since.unwrap_or(self.now),
                cfg: &self.cfg,
                out: &mut self.out,
                rng: &mut self.rng,
                stats: &self.stats,
            };
            let g = match self.s.poll_frame(&mut self.frame, &mut ctx) {
                Step::Done => Got::Done,
                Step::Handled => Got::Handled,
                Step::Event(e) => owned(e),
            };
            let done = g == Got::Done;
            got.push(g);
            if done {
                return got;
            }
        }
    }

    fn logged_on(mut self) -> Rig {
        assert_eq!(self.feed(&logon(0))[0], logon_event(0));
        let a = admitted();
        self.call(|s, ctx| s.logon_accepted(a, 0, ctx));
        self.sent();
        self.s.take_effects();
        self
    }

    /// Frames queued since the last call, decoded.
    fn sent(&mut self) -> Vec<Sent> {
        let mut bytes = Vec::new();
        self.out.write_to(&mut bytes).expect("vec write");
        let mut frames = Vec::new();
        let mut rest = &bytes[..];
        while let Some(n) = wire::frame::split(rest).expect("server framing") {
            frames.push(sent(wire::decode(&rest[..n]).expect("server frame")));
            rest = &rest[n..];
        }
        assert!(rest.is_empty(), "a partial frame was queued");
        frames
    }
}

fn owned(e: Event<'_>) -> Got {
    match e {
        Event::Logon(l) => Got::Logon {
            hb_ms: l.heartbeat_interval_ms,
            account: l.account.to_vec(),
        },
        Event::Subscribe(s) => Got::Subscribe(s.request_id),
        Event::Unsubscribe(s) => Got::Unsubscribe(s.request_id),
        Event::SymbolList(r) => Got::SymbolList(r.request_id),
        Event::Snapshot(r) => Got::Snapshot(r.request_id),
        Event::History(r) => Got::History(r.request_id),
    }
}

fn sent(m: Message<'_>) -> Sent {
    match m {
        Message::LogonAccepted(a) => Sent::Accepted(a),
        Message::LogonRejected(r) => Sent::Rejected(r),
        Message::Heartbeat => Sent::Heartbeat,
        Message::Reject(r) => Sent::Reject {
            request_id: r.request_id,
            template: r.ref_template_id,
            reason: r.reason,
            retry_ms: r.retry_after_ms,
        },
        Message::Disconnect(d) => Sent::Disconnect {
            reason: d.reason,
            retry_ms: d.retry_after_ms,
            text: String::from_utf8_lossy(d.text).into_owned(),
        },
        other => Sent::Other(other.template_id()),
    }
}

fn encode(f: impl FnOnce(&mut [u8]) -> Result<usize, wire::EncodeError>) -> Vec<u8> {
    let mut b = vec![0u8; 1_024];
    let n = f(&mut b).expect("encode");
    b.truncate(n);
    b
}

fn logon(hb_ms: u32) -> Vec<u8> {
    let m = wire::Logon {
        heartbeat_interval_ms: hb_ms,
        account: b"alice",
        token: b"secret",
    };
    encode(|b| wire::encode_logon(b, &m))
}

fn logon_event(hb_ms: u32) -> Got {
    Got::Logon {
        hb_ms,
        account: b"alice".to_vec(),
    }
}

fn admitted() -> Admitted {
    Admitted {
        account: 3,
        acct: account(),
        session_id: 42,
        server_time_ns: 99,
        stream_id: 7,
    }
}

fn heartbeat() -> Vec<u8> {
    encode(wire::encode_heartbeat)
}

fn subscribe(rid: u64) -> Vec<u8> {
    let e = SymbolRef {
        symbol_id: 1,
        name: Name16::default(),
    };
    encode(|b| wire::encode_subscribe(b, rid, TIER_ACCOUNT_DEFAULT, [e]))
}

fn disconnect(reason: DisconnectReason, text: &str) -> impl Fn(&Sent) -> bool + '_ {
    move |s| matches!(s, Sent::Disconnect { reason: r, text: t, .. } if *r == reason && t == text)
}

fn reject_of(s: &Sent) -> (u64, u16, RejectReason) {
    match s {
        Sent::Reject {
            request_id,
            template,
            reason,
            ..
        } => (*request_id, *template, *reason),
        other => panic!("not a Reject: {other:?}"),
    }
}

mod active;
mod bad_frames;
mod doc_limits;
mod framing;
mod liveness;
mod logon;
mod stall;
mod timers;
