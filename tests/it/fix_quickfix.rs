//! pricewire's FIX initiator against QuickFIX as the LP
//! (`tools/quickfix-lp`, FIX44.xml validation on, as a strict LP runs it):
//! every message we send must pass its validation, and its fault switches
//! drive the session's conformance paths. The feed runs in process on the
//! monotonic clock (QuickFIX keeps real time); every wait is bounded.

use crate::util::quickfix;

use std::time::{Duration, Instant};

use pricewire::clock::{monotonic_ns, MonotonicClock};
use pricewire::config::fix::Secret;
use pricewire::feed::fix::health::ProviderState;
use pricewire::feed::fix::session::SessionState;
use pricewire::feed::fix::stats::FixSessionSnapshot;
use pricewire::feed::fix::{FixFeed, FixSessionConfig};
use pricewire::feed::{SourcePoll, TickSource};
use pricewire::model::{InstrumentTable, Tick};
use pricewire::resilience::{Backoff, BreakerState};
use quickfix::QuickFixLp;

/// Bound of every wait.
const LIMIT: Duration = Duration::from_secs(20);

fn lp(extra: &[&str]) -> QuickFixLp {
    let mut args = vec![
        "--symbol",
        "EURUSD=1.08120:5",
        "--symbol",
        "USDJPY=149.870:3",
    ];
    args.extend_from_slice(extra);
    QuickFixLp::start(&args)
}

fn config(lp: &QuickFixLp) -> FixSessionConfig {
    let t = InstrumentTable::default_with_providers(2);
    let mut c = FixSessionConfig::new(0, "lp1", "127.0.0.1", lp.addr().port())
        .map_symbol("EURUSD", t.by_name("EURUSD").unwrap())
        .map_symbol("USDJPY", t.by_name("USDJPY").unwrap());
    c.target_comp_id = quickfix::LP_COMP_ID.into();
    c.sender_comp_id = quickfix::OUR_COMP_ID.into();
    c.heartbeat_s = 1;
    c.stagger_ms = 0;
    c.reconnect = Backoff::new(10, 100);
    c.with_read_timeout_ms(3_000)
}

struct Drive {
    feed: FixFeed,
    buf: Vec<Tick>,
    ticks: u64,
    /// Flags of every tick, in order (withdrawals are flagged).
    flags: Vec<u32>,
}

impl Drive {
    fn new(cfg: FixSessionConfig) -> Drive {
        Drive {
            feed: FixFeed::new(&[cfg], monotonic_ns(), 7).unwrap(),
            buf: vec![Tick::EMPTY; 64],
            ticks: 0,
            flags: Vec::new(),
        }
    }

    fn poll(&mut self) {
        if let SourcePoll::Ready(n) = self.feed.poll(monotonic_ns(), &mut self.buf) {
            self.ticks += n as u64;
            self.flags.extend(self.buf[..n].iter().map(|t| t.flags));
        }
    }

    /// Polls until `cond` holds or [`LIMIT`] passes.
    fn until(&mut self, mut cond: impl FnMut(&mut Drive) -> bool) -> bool {
        let deadline = Instant::now() + LIMIT;
        loop {
            self.poll();
            if cond(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::yield_now();
        }
    }

    fn session(&self) -> FixSessionSnapshot {
        self.feed.stats().providers[0].session.snapshot()
    }
    fn state(&self) -> SessionState {
        self.feed.session(0).state()
    }
    fn streaming(&mut self, quotes: u64) -> bool {
        let start = self.ticks;
        self.until(|d| d.ticks >= start + quotes)
    }
}

fn no_complaints(lp: &QuickFixLp) {
    let c = lp.complaints();
    assert!(c.is_empty(), "QuickFIX complained: {c:#?}");
}

#[test]
fn subscribes_and_streams_without_a_reject() {
    let lp = lp(&["--rate", "50"]);
    let mut d = Drive::new(config(&lp));
    assert!(d.streaming(40), "quotes flow: {:?}", d.session());
    assert_eq!(d.state(), SessionState::Active);
    assert!(lp.count(|l| l.starts_with("IN ") && l.contains("|35=V|")) >= 2);
    no_complaints(&lp);
}

fn tail(lp: &QuickFixLp) -> Vec<String> {
    let l = lp.lines();
    l[l.len().saturating_sub(30)..].to_vec()
}

fn lp_got(lp: &QuickFixLp, msg_type: &str, field: &str) -> usize {
    let t = format!("|35={msg_type}|");
    lp.count(|l| l.starts_with("IN ") && l.contains(&t) && l.contains(field))
}

#[test]
fn a_full_session_passes_quickfix_validation() {
    let mut lp = lp(&["--rate", "50", "--auth", "pw-user:s3cret"]);
    let mut cfg = config(&lp);
    cfg.username = Some("pw-user".into());
    cfg.password = Some(Secret::new("s3cret"));
    let mut d = Drive::new(cfg);
    assert!(
        d.streaming(20),
        "Username/Password logon: {:?}",
        d.session()
    );
    assert_eq!(lp.count(|l| l.contains("credentials accepted")), 1);
    // A gap: unsubscribe (263=2) and resubscribe, on the same session.
    lp.cmd("gap 3");
    assert!(d.until(|d| d.session().resubscribes == 1));
    assert!(
        d.until(|_| lp_got(&lp, "V", "|263=2|") == 2),
        "two unsubscribes"
    );
    assert!(d.streaming(20), "fresh snapshots");
    // The LP asks for our last messages again: one GapFill answers.
    lp.cmd("resend 3");
    assert!(d.until(|_| lp_got(&lp, "4", "|123=Y|") == 1), "GapFill");
    assert!(d.streaming(20));
    // The LP logs out: we answer, reconnect, log on again.
    let logons = d.session().logons;
    lp.cmd("logout");
    let ok = d.until(|d| d.session().logons == logons + 1);
    assert!(ok, "{:?}\n{:#?}", d.session(), tail(&lp));
    assert!(d.streaming(20));
    // Shutdown: our Logout, answered by the LP's.
    d.feed.shutdown(&MonotonicClock);
    assert_eq!(lp_got(&lp, "5", ""), 2, "our reply, then our own Logout");
    let s = d.session();
    assert_eq!(
        (s.logouts_sent, s.gap_fills_sent, s.seq_gaps),
        (2, 1, 1),
        "{s:?}"
    );
    assert!(
        lp.wait_count(2, LIMIT, |l| l.starts_with("LOGOUT-SENT")),
        "the LP answered our Logout"
    );
    assert!(!lp.lines().iter().any(|l| l.contains("s3cret")));
    no_complaints(&lp);
}

#[test]
fn garbled_messages_leave_the_session_up() {
    let mut lp = lp(&["--rate", "50"]);
    let mut d = Drive::new(config(&lp));
    assert!(d.streaming(20));
    let logons = d.session().logons;
    lp.cmd("garble 3");
    assert!(d.until(|d| d.session().garbled_ignored == 3));
    assert!(d.streaming(20), "still streaming");
    let s = d.session();
    assert_eq!(
        (s.logons, s.checksum_errors, s.seq_gaps),
        (logons, 3, 0),
        "{s:?}"
    );
    assert_eq!(d.state(), SessionState::Active);
    no_complaints(&lp);
}

#[test]
fn a_wrong_password_is_refused_by_the_lp() {
    let lp = lp(&["--auth", "pw-user:right"]);
    let mut cfg = config(&lp);
    cfg.username = Some("pw-user".into());
    cfg.password = Some(Secret::new("wrong"));
    let mut d = Drive::new(cfg);
    assert!(d.until(|d| d.session().logouts_received >= 1 || d.session().disconnects >= 1));
    assert_eq!(d.session().logons, 0);
    // The LP's own log line is read by a reader thread: wait for it.
    assert!(lp.wait_count(1, Duration::from_secs(10), |l| l.contains("logon refused")));
}

/// The defaults with every time divided by 5 (heartbeat 5 s -> 1 s, read
/// timeout 10 -> 2 s, logon 5 -> 1 s, connect 2 -> 0.4 s, quote silence
/// 5 -> 1 s, backoff 0.5..30 -> 0.1..6 s, open wait 10 -> 2 s, probation
/// 1 -> 0.2 s): the same rule, so the same shape, and the 30-s promise
/// becomes 6 s.
fn scaled(lp: &QuickFixLp) -> FixSessionConfig {
    let mut c = config(lp);
    c.connect_timeout_ms = 400;
    c.logon_timeout_ms = 1_000;
    c.logout_timeout_ms = 400;
    c.quote_silence_ms = 1_000;
    c.probation_ms = 200;
    c.reconnect = Backoff::new(100, 6_000);
    c.breaker.window = pricewire::resilience::breaker::WindowKind::Time { window_s: 2 };
    c.breaker.open_wait_ms = 2_000;
    let c = c.with_read_timeout_ms(2_000);
    assert_eq!(c.hung_open_bound_ms(), Some(4_100), "20.5 s / 5");
    c
}

const SCALED_OPEN_WITHIN: Duration = Duration::from_secs(6);

/// Streams, hangs the LP with `hang`, measures the time to Open, then
/// undoes it with `recover` and waits for Closed and healthy again.
fn hung_lp_opens_and_recovers(hang: &[&str], recover: &[&str]) {
    let mut lp = lp(&["--rate", "50"]);
    let mut d = Drive::new(scaled(&lp));
    let now = monotonic_ns;
    assert!(d.until(|d| d.feed.session(0).provider_state() == ProviderState::Streaming));
    for c in hang {
        lp.cmd(c);
    }
    let onset = Instant::now();
    assert!(d.until(|d| d.feed.breaker_state(0, now()) == BreakerState::Open));
    let took = onset.elapsed();
    eprintln!("{hang:?}: breaker open after {} ms", took.as_millis());
    assert!(
        took <= SCALED_OPEN_WITHIN,
        "{hang:?}: {took:?} {:?}",
        d.session()
    );
    assert_eq!(
        d.feed.session(0).provider_state(),
        ProviderState::BreakerOpen
    );
    for c in recover {
        lp.cmd(c);
    }
    let back = d.until(|d| {
        d.feed.breaker_state(0, now()) == BreakerState::Closed
            && d.feed.session(0).provider_state() == ProviderState::Streaming
    });
    let b = d.feed.stats().providers[0].breaker.snapshot();
    assert!(back, "{hang:?}: no recovery: {b:?} {:?}", d.session());
    assert!(
        b.transitions[BreakerState::HalfOpen as usize] >= 1,
        "through half-open"
    );
    no_complaints(&lp);
}

#[test]
fn hung_blackhole_after_logon_opens_and_recovers() {
    hung_lp_opens_and_recovers(&["silent on"], &["silent off"]);
}

#[test]
fn hung_logon_never_answered_opens_and_recovers() {
    hung_lp_opens_and_recovers(&["logon-reply off", "disconnect"], &["logon-reply on"]);
}

#[test]
fn hung_logon_answered_then_silence_opens_and_recovers() {
    hung_lp_opens_and_recovers(
        &["silent-after-logon on", "disconnect"],
        &["silent-after-logon off"],
    );
}

#[test]
fn hung_test_request_never_answered_opens_and_recovers() {
    hung_lp_opens_and_recovers(
        &["data off", "heartbeats off", "test-reply off"],
        &["data on", "heartbeats on", "test-reply on"],
    );
}

#[test]
fn a_heartbeating_lp_without_quotes_is_silent_within_the_threshold() {
    let mut lp = lp(&["--rate", "50"]);
    let mut d = Drive::new(scaled(&lp));
    assert!(d.until(|d| d.feed.session(0).provider_state() == ProviderState::Streaming));
    lp.cmd("data off");
    let onset = Instant::now();
    assert!(d.until(|d| d.feed.session(0).provider_state() == ProviderState::Silent));
    let took = onset.elapsed();
    // quote_silence_ms 1000, plus the quotes already in flight.
    assert!(took <= Duration::from_millis(1_500), "{took:?}");
    assert_eq!(d.state(), SessionState::Active, "heartbeats keep it up");
    no_complaints(&lp);
}

// ---- QuickFIX fault switches of issue 29: flapping, in-session reset,
// SequenceReset-Reset, deletes, 35=Y mid-stream ----

fn withdrawals(d: &Drive, flag: u32) -> usize {
    d.flags.iter().filter(|&&f| f & flag == flag).count()
}

#[test]
fn a_flapping_lp_is_damped_out_of_the_price_and_its_reconnects_spaced() {
    let lp = lp(&["--rate", "50", "--flap", "1500"]);
    let mut cfg = config(&lp);
    cfg.reconnect = Backoff::new(500, 30_000); // the default backoff
    let mut d = Drive::new(cfg);
    let damped = d.until(|d| d.feed.session(0).health_gauges().damping().damped);
    assert!(damped, "damped: {:?}", d.session());
    // From now on: never back in the price, reconnects spaced.
    let logons = d.session().logons;
    let start = Instant::now();
    let mut streaming = false;
    while start.elapsed() < Duration::from_secs(8) {
        d.poll();
        streaming |= d.feed.session(0).provider_state() == ProviderState::Streaming;
        std::thread::yield_now();
    }
    let s = d.session();
    assert!(!streaming, "a damped provider never streams: {s:?}");
    assert!(
        s.logons - logons <= 4,
        "8 s of 1.5-s sessions, spaced: {s:?}"
    );
    assert!(s.flaps >= 2 && s.close_peer_logout >= 2, "{s:?}");
    assert!(lp.count(|l| l.contains("flap logout")) >= 2);
    // Every Logout we sent to QuickFIX says why.
    assert_eq!(
        lp_got(&lp, "5", "|58=Logout acknowledged|"),
        lp_got(&lp, "5", "")
    );
    no_complaints(&lp);
}

#[test]
fn an_in_session_reset_from_quickfix_is_answered_and_quotes_go_on() {
    let mut lp = lp(&["--rate", "50"]);
    let mut d = Drive::new(config(&lp));
    assert!(d.streaming(40));
    lp.cmd("reset-logon");
    assert!(
        d.until(|d| d.session().seq_resets == 1),
        "{:?}",
        d.session()
    );
    assert!(d.streaming(40), "quotes after the reset");
    let s = d.session();
    assert_eq!(
        (s.seq_too_low, s.logons, s.logouts_sent),
        (0, 1, 0),
        "{s:?}"
    );
    assert_eq!(d.state(), SessionState::Active);
    // Our answer: Logon 141=Y at 1; exactly two Logons from us in all
    // (the first and the answer): no ping-pong with QuickFIX's own reply.
    assert!(lp.wait_count(1, LIMIT, |l| {
        l.starts_with("IN ") && l.contains("|35=A|34=1|") && l.contains("|141=Y|")
    }));
    assert_eq!(lp_got(&lp, "A", ""), 2, "{:#?}", tail(&lp));
    no_complaints(&lp);
}

#[test]
fn a_sequence_reset_below_is_rejected_then_the_low_numbers_log_out_with_a_reason() {
    let mut lp = lp(&["--rate", "50"]);
    let mut d = Drive::new(config(&lp));
    assert!(d.streaming(40));
    // Higher: followed, nothing else.
    lp.cmd("seqreset 5000");
    assert!(d.streaming(40));
    assert_eq!(d.session().seq_reset_rejects, 0);
    // Lower: our Reject (373=5), then QuickFIX numbers from 2, too low:
    // our Logout says so, we reconnect and stream again.
    let logons = d.session().logons;
    lp.cmd("seqreset 2");
    assert!(
        d.until(|d| d.session().logons == logons + 1),
        "{:?}",
        d.session()
    );
    assert!(d.streaming(20));
    assert_eq!(lp_got(&lp, "3", "|373=5|"), 1, "{:#?}", tail(&lp));
    assert_eq!(lp_got(&lp, "5", "|58=MsgSeqNum too low, expecting "), 1);
    let s = d.session();
    assert_eq!((s.seq_reset_rejects, s.close_seq_too_low), (1, 1), "{s:?}");
    no_complaints(&lp);
}

#[test]
fn a_deleted_side_and_a_mid_stream_reject_become_withdrawals() {
    use pricewire::model::tick_flags::{WITHDRAWN, WITHDRAWN_BID};
    let mut lp = lp(&["--rate", "50"]);
    let mut d = Drive::new(config(&lp));
    assert!(d.streaming(20));
    lp.cmd("delete bid");
    assert!(
        d.until(|d| withdrawals(d, WITHDRAWN_BID) >= 2),
        "both symbols"
    );
    let before = d.ticks;
    assert!(d.until(|d| d.ticks >= before + 20));
    let tail_flags = &d.flags[d.flags.len() - 10..];
    assert!(
        tail_flags.iter().all(|&f| f == WITHDRAWN_BID),
        "ask-only updates"
    );
    lp.cmd("restore");
    assert!(d.until(|d| d.flags.last() == Some(&0)), "two-sided again");
    lp.cmd("mdreject");
    assert!(d.until(|d| d.session().md_rejects == 2));
    assert_eq!(withdrawals(&d, WITHDRAWN), 2, "each symbol withdrawn once");
    assert_eq!(d.state(), SessionState::Active, "a business error");
    assert_eq!(
        d.feed.breaker_state(0, monotonic_ns()),
        BreakerState::Closed
    );
    no_complaints(&lp);
}
