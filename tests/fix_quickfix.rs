//! pricewire's FIX initiator against QuickFIX as the LP
//! (`tools/quickfix-lp`, FIX44.xml validation on, as a strict LP runs it):
//! every message we send must pass its validation, and its fault switches
//! drive the session's conformance paths. The feed runs in process on the
//! monotonic clock (QuickFIX keeps real time); every wait is bounded.

#[path = "util/quickfix.rs"]
mod quickfix;

use std::time::{Duration, Instant};

use pricewire::clock::{monotonic_ns, MonotonicClock};
use pricewire::config::fix::Secret;
use pricewire::feed::fix::session::SessionState;
use pricewire::feed::fix::stats::FixSessionSnapshot;
use pricewire::feed::fix::{FixFeed, FixSessionConfig};
use pricewire::feed::{SourcePoll, TickSource};
use pricewire::model::{InstrumentTable, Tick};
use pricewire::resilience::Backoff;
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
}

impl Drive {
    fn new(cfg: FixSessionConfig) -> Drive {
        Drive {
            feed: FixFeed::new(&[cfg], monotonic_ns(), 7).unwrap(),
            buf: vec![Tick::EMPTY; 64],
            ticks: 0,
        }
    }

    fn poll(&mut self) {
        if let SourcePoll::Ready(n) = self.feed.poll(monotonic_ns(), &mut self.buf) {
            self.ticks += n as u64;
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
    assert!(lp.count(|l| l.contains("logon refused")) >= 1);
}
