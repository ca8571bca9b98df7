//! The checker: what every terminal was shown, against the invariants of
//! issue #27, whatever the failure was (a history that breaks a rule is a
//! failure). Time is each record's arrival at its terminal.
//!
//! - **I1** within one stream id, a symbol's sequence only rises at a
//!   terminal, and every skip is flagged: CONFLATED on the wire, or a
//!   snapshot the SDK reports as a resync (after a reconnect that missed
//!   prices). A stream starts with a snapshot; a snapshot may repeat the
//!   sequence held (a resume, a stale restatement or its clearing).
//! - **I2** one (stream, symbol, seq) is one (bid, ask) on every terminal
//!   of every edge, ever.
//! - **I3** after a failure that took the source of the prices shown away
//!   (a core killed, frozen, or cut from its feeds; every core dead), every
//!   symbol a live terminal shows is, by the bound (the edge's max age and
//!   a margin), either flagged STALE or replaced by a newer price. The
//!   delay is reported.
//! - **I4** after a single failure, live prices come back: a newer price
//!   without a flag, by the bound; after a takeover it must be the new
//!   leader's (its sequence above the takeover's gap, or a new stream). At
//!   most one new price per symbol is flagged CONFLATED on the way (stale
//!   restatements and the engine's stale prices are I3's signal, not
//!   counted). The delay is reported.
//!
//! A bound of `None` checks "by the end of the scenario": the short form
//! in `cargo test` verdicts nothing on the host's speed, and still reports
//! the delays measured.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use pricewire::bus::follow::TAKEOVER_SEQ_GAP;
use pricewire::model::price_flags::{CONFLATED, STALE};

use crate::recorder::{Record, SessionMark};

/// One terminal's tape.
#[derive(Debug, Clone)]
pub struct Terminal {
    /// Its name in the verdicts.
    pub name: String,
    /// Prices in arrival order.
    pub records: Vec<Record>,
    /// Logons and disconnects.
    pub sessions: Vec<SessionMark>,
    /// When its edge was killed, if it was (nothing after counts).
    pub gone_ns: Option<u64>,
}

/// One failure the scenario caused.
#[derive(Debug, Clone)]
pub struct Failure {
    /// When, ns since the drill's start.
    pub at_ns: u64,
    /// What it was.
    pub what: String,
    /// The source of the prices shown stopped standing behind them (I3).
    pub source_lost: bool,
    /// Live prices must come back (I4).
    pub recovers: bool,
    /// They come back from another leader (I4: above the takeover's gap).
    pub takeover: bool,
}

/// The time bounds the verdicts use (`None`: by the scenario's end).
#[derive(Debug, Clone, Copy, Default)]
pub struct Bounds {
    /// I3: stale or replaced within this long of the failure.
    pub stale_ns: Option<u64>,
    /// I4: live again within this long of the failure.
    pub resume_ns: Option<u64>,
}

/// One invariant's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every record obeys it.
    Held,
    /// The first breach found, and how many there were.
    Broken {
        /// The first breach, in words.
        first: String,
        /// Breaches found in all.
        count: usize,
    },
    /// The scenario has no failure it applies to.
    NotApplicable,
}

impl Verdict {
    fn from_breaches(b: Vec<String>) -> Verdict {
        match b.first() {
            None => Verdict::Held,
            Some(first) => Verdict::Broken {
                first: first.clone(),
                count: b.len(),
            },
        }
    }

    /// True unless broken.
    pub fn ok(&self) -> bool {
        !matches!(self, Verdict::Broken { .. })
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Held => f.write_str("held"),
            Verdict::NotApplicable => f.write_str("n/a"),
            Verdict::Broken { first, count } => write!(f, "BROKEN ({count}): {first}"),
        }
    }
}

/// Everything the checker found in one scenario.
#[derive(Debug, Clone)]
pub struct Findings {
    /// I1..I4.
    pub invariants: [Verdict; 4],
    /// I3: the longest time from a failure to a symbol stale or replaced.
    pub stale_ms_max: Option<f64>,
    /// I4: the longest time from a failure to live prices again.
    pub resume_ms_max: Option<f64>,
    /// I4: the most CONFLATED new prices one symbol had on the way back.
    pub flagged_max: usize,
    /// Prices recorded on all terminals.
    pub records: usize,
}

impl Findings {
    /// True when no invariant broke.
    pub fn ok(&self) -> bool {
        self.invariants.iter().all(Verdict::ok)
    }
}

/// Checks every invariant over `terminals` for `failures`, the scenario
/// having ended at `end_ns`.
pub fn check(
    terminals: &[Terminal],
    failures: &[Failure],
    bounds: Bounds,
    end_ns: u64,
) -> Findings {
    let (i3, stale) = i3(terminals, failures, bounds, end_ns);
    let (i4, resume, flagged) = i4(terminals, failures, bounds, end_ns);
    Findings {
        invariants: [i1(terminals), i2(terminals), i3, i4],
        stale_ms_max: stale,
        resume_ms_max: resume,
        flagged_max: flagged,
        records: terminals.iter().map(|t| t.records.len()).sum(),
    }
}

fn i1(terminals: &[Terminal]) -> Verdict {
    let mut breaches = Vec::new();
    for t in terminals {
        let mut last: HashMap<u16, (u64, u64)> = HashMap::new();
        for r in &t.records {
            let at = |why: &str| {
                format!(
                    "{}: {} at {} ms: {why}",
                    t.name,
                    r.symbol,
                    r.at_ns / 1_000_000
                )
            };
            match last.get(&r.symbol).copied() {
                Some((stream, seq)) if stream == r.stream => {
                    if r.seq < seq {
                        breaches.push(at(&format!("seq {} after {seq}", r.seq)));
                    } else if r.seq == seq && !r.snapshot {
                        breaches.push(at(&format!("update seq {} repeated", r.seq)));
                    } else if r.seq > seq + 1 && r.flags & CONFLATED == 0 && !resync(r) {
                        breaches.push(at(&format!("unflagged skip {seq} -> {}", r.seq)));
                    }
                }
                _ if !r.snapshot => breaches.push(at("a stream begun by an update")),
                _ => {}
            }
            let held = last.entry(r.symbol).or_insert((r.stream, 0));
            if held.0 != r.stream {
                *held = (r.stream, 0);
            }
            held.1 = held.1.max(r.seq);
        }
    }
    Verdict::from_breaches(breaches)
}

/// A snapshot the SDK reported as a resync (after a reconnect that could
/// not resume): the skip is flagged to the terminal by the SDK.
fn resync(r: &Record) -> bool {
    r.snapshot && r.status == pricewire::client::SeqStatus::Reset
}

fn i2(terminals: &[Terminal]) -> Verdict {
    let mut seen: HashMap<(u64, u16, u64), (i64, i64, &str)> = HashMap::new();
    let mut breaches = Vec::new();
    for t in terminals {
        for r in &t.records {
            let key = (r.stream, r.symbol, r.seq);
            match seen.get(&key) {
                Some(&(bid, ask, who)) if (bid, ask) != (r.bid, r.ask) => breaches.push(format!(
                    "stream {:x} symbol {} seq {}: {bid}/{ask} on {who}, {}/{} on {}",
                    r.stream, r.symbol, r.seq, r.bid, r.ask, t.name
                )),
                Some(_) => {}
                None => {
                    seen.insert(key, (r.bid, r.ask, &t.name));
                }
            }
        }
    }
    Verdict::from_breaches(breaches)
}

/// The terminal's records of one symbol, with the last one before `at`.
fn split_at(t: &Terminal, symbol: u16, at: u64) -> (Option<&Record>, Vec<&Record>) {
    let of: Vec<&Record> = t.records.iter().filter(|r| r.symbol == symbol).collect();
    let cut = of.partition_point(|r| r.at_ns < at);
    (cut.checked_sub(1).map(|i| of[i]), of[cut..].to_vec())
}

fn symbols(t: &Terminal) -> Vec<u16> {
    let mut s: Vec<u16> = t.records.iter().map(|r| r.symbol).collect();
    s.sort_unstable();
    s.dedup();
    s
}

fn alive_at(t: &Terminal, at: u64) -> bool {
    t.gone_ns.is_none_or(|g| g > at)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn i3(terminals: &[Terminal], failures: &[Failure], b: Bounds, end: u64) -> (Verdict, Option<f64>) {
    let mut breaches = Vec::new();
    let mut worst: Option<u64> = None;
    let mut applies = false;
    for f in failures.iter().filter(|f| f.source_lost) {
        let deadline = b.stale_ns.map_or(end, |s| (f.at_ns + s).min(end));
        for t in terminals.iter().filter(|t| alive_at(t, deadline)) {
            for sym in symbols(t) {
                let (Some(shown), after) = split_at(t, sym, f.at_ns) else {
                    continue;
                };
                applies = true;
                let covered = after.iter().find(|r| {
                    r.flags & STALE != 0 || r.stream != shown.stream || r.seq > shown.seq
                });
                match covered {
                    Some(r) if r.at_ns <= deadline => {
                        worst = worst.max(Some(r.at_ns - f.at_ns));
                    }
                    _ if shown.flags & STALE != 0 => {}
                    _ => breaches.push(format!(
                        "{}: {} shown unflagged {} ms after {} (seq {})",
                        t.name,
                        sym,
                        ms(deadline - f.at_ns),
                        f.what,
                        shown.seq
                    )),
                }
            }
        }
    }
    let v = match applies {
        true => Verdict::from_breaches(breaches),
        false => Verdict::NotApplicable,
    };
    (v, worst.map(ms))
}

fn i4(
    terminals: &[Terminal],
    failures: &[Failure],
    b: Bounds,
    end: u64,
) -> (Verdict, Option<f64>, usize) {
    let mut breaches = Vec::new();
    let (mut worst, mut flagged_max, mut applies) = (None::<u64>, 0usize, false);
    for f in failures.iter().filter(|f| f.recovers) {
        let deadline = b.resume_ns.map_or(end, |s| (f.at_ns + s).min(end));
        for t in terminals.iter().filter(|t| alive_at(t, deadline)) {
            for sym in symbols(t) {
                let (Some(before), after) = split_at(t, sym, f.at_ns) else {
                    continue;
                };
                applies = true;
                let pre = max_before(t, sym, f.at_ns, before.stream);
                let new = |r: &Record| r.stream != before.stream || r.seq > pre;
                let resumed = |r: &Record| {
                    let fresh = r.flags & (STALE | CONFLATED) == 0 && new(r);
                    let leader = !f.takeover
                        || r.stream != before.stream
                        || r.seq > pre + TAKEOVER_SEQ_GAP / 2;
                    fresh && leader
                };
                let Some(at) = after.iter().position(|r| resumed(r)) else {
                    breaches.push(format!(
                        "{}: {} not live again after {}",
                        t.name, sym, f.what
                    ));
                    continue;
                };
                let r = after[at];
                let flagged = after[..at]
                    .iter()
                    .filter(|r| new(r) && r.flags & CONFLATED != 0 && r.flags & STALE == 0)
                    .count();
                flagged_max = flagged_max.max(flagged);
                if flagged > 1 {
                    let why = format!("{flagged} flagged new prices before live ones");
                    breaches.push(format!("{}: {} after {}: {why}", t.name, sym, f.what));
                }
                if r.at_ns > deadline {
                    let late = ms(r.at_ns - f.at_ns);
                    breaches.push(format!(
                        "{}: {} live {late} ms after {}",
                        t.name, sym, f.what
                    ));
                }
                worst = worst.max(Some(r.at_ns - f.at_ns));
            }
        }
    }
    let v = match applies {
        true => Verdict::from_breaches(breaches),
        false => Verdict::NotApplicable,
    };
    (v, worst.map(ms), flagged_max)
}

/// The highest sequence of `symbol` in `stream` a terminal had before `at`.
fn max_before(t: &Terminal, symbol: u16, at: u64, stream: u64) -> u64 {
    t.records
        .iter()
        .filter(|r| r.symbol == symbol && r.stream == stream && r.at_ns < at)
        .map(|r| r.seq)
        .max()
        .unwrap_or(0)
}

/// Per terminal: (stream, symbol) → the sequences it saw, for reports.
pub fn streams_seen(t: &Terminal) -> BTreeMap<u64, usize> {
    let mut m = BTreeMap::new();
    for r in &t.records {
        *m.entry(r.stream).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
