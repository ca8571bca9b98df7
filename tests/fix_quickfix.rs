//! pricewire's FIX initiator against QuickFIX as the LP
//! (`tools/quickfix-lp`, FIX44.xml validation on, as a strict LP runs it):
//! every message we send must pass its validation, and its fault switches
//! drive the session's conformance paths. The feed runs in process on the
//! monotonic clock (QuickFIX keeps real time); every wait is bounded.

#[path = "util/quickfix.rs"]
mod quickfix;

use std::time::{Duration, Instant};

use pricewire::clock::monotonic_ns;
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
