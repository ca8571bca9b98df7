//! Gray providers: logged on, quoting, but too seldom for the engine.
//!
//! The engine leaves a provider's quote out once it is older than
//! `[engine] max_quote_age_ms` (2 s by default). A provider quoting every
//! 4 s is then in the price for 2 s, out for 2 s, in again: healthy by
//! every other rule, and the best price flickers with it. Each time the
//! provider's last delivered quote ages past the max quote age while the
//! session is logged on is a **lapse**; `gray_lapses` lapses within
//! `gray_window_ms` make it **gray** (out of the price, logged), and it
//! stays gray until its quotes have stayed fresh — no lapse — for
//! `gray_clear_ms` (hysteresis: it does not flicker in and out of gray
//! either). A new session starts with no lapses.
//!
//! Allocation: the lapse ring is allocated in [`GrayDetector::new`]. Time
//! is the caller's monotonic `now_ns`.

use super::burst::BurstWindow;
use crate::clock::NS_PER_MS;
use crate::config::fix::GrayRule;

/// The gray rule's state for one provider.
#[derive(Debug, Clone)]
pub(crate) struct GrayDetector {
    rule: GrayRule,
    lapses: BurstWindow,
    /// The current last quote has already lapsed (one lapse per quote).
    lapsed: bool,
    gray: bool,
    last_lapse_ns: u64,
}

/// What one evaluation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct GrayChange {
    /// A lapse was counted now.
    pub lapse: bool,
    /// Gray began (`Some(true)`) or ended (`Some(false)`) now.
    pub gray: Option<bool>,
}

impl GrayDetector {
    pub(crate) fn new(rule: GrayRule) -> GrayDetector {
        GrayDetector {
            lapses: BurstWindow::new(rule.lapses.max(1), rule.window_ms * NS_PER_MS),
            rule,
            lapsed: false,
            gray: false,
            last_lapse_ns: 0,
        }
    }

    /// A new session: no lapses, not gray.
    pub(crate) fn on_session_up(&mut self) {
        self.lapses.clear();
        (self.lapsed, self.gray) = (false, false);
    }

    /// A quote was delivered.
    pub(crate) fn on_quote(&mut self) {
        self.lapsed = false;
    }

    pub(crate) fn gray(&self) -> bool {
        self.gray
    }

    /// Judges the last delivered quote of this session (`None`: none yet)
    /// at `now_ns`.
    pub(crate) fn evaluate(&mut self, now_ns: u64, last_quote_ns: Option<u64>) -> GrayChange {
        let mut change = GrayChange::default();
        let Some(q) = last_quote_ns else {
            return change;
        };
        if self.rule.lapses == 0 {
            return change;
        }
        let age_ns = now_ns.saturating_sub(q);
        if age_ns > self.rule.max_quote_age_ms * NS_PER_MS {
            if !self.lapsed {
                self.lapsed = true;
                self.last_lapse_ns = now_ns;
                change.lapse = true;
                if self.lapses.record(now_ns) && !self.gray {
                    self.gray = true;
                    change.gray = Some(true);
                }
            }
        } else if self.gray && now_ns.saturating_sub(self.last_lapse_ns) >= self.clear_ns() {
            self.gray = false;
            self.lapses.clear();
            change.gray = Some(false);
        }
        change
    }

    fn clear_ns(&self) -> u64 {
        self.rule.clear_ms * NS_PER_MS
    }

    /// The rule, for log lines.
    pub(crate) fn rule(&self) -> &GrayRule {
        &self.rule
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = NS_PER_MS;

    /// Quotes every `every_ms` from 0 to `until_ms`, evaluated each 10 ms;
    /// returns the times gray began and ended.
    fn run(g: &mut GrayDetector, every_ms: u64, from_ms: u64, until_ms: u64) -> Vec<(u64, bool)> {
        let mut out = Vec::new();
        let mut last = None;
        for t in (from_ms..until_ms).step_by(10) {
            if (t - from_ms).is_multiple_of(every_ms) {
                g.on_quote();
                last = Some(t * MS);
            }
            if let Some(on) = g.evaluate(t * MS, last).gray {
                out.push((t, on));
            }
        }
        out
    }

    #[test]
    fn a_quote_every_4_s_is_gray_after_three_lapses_and_clears_when_fresh() {
        let mut g = GrayDetector::new(GrayRule::default());
        // Lapses at 2.01, 6.01, 10.01 s (2 s max age): gray at the third.
        let changes = run(&mut g, 4_000, 0, 20_000);
        assert_eq!(changes, vec![(10_010, true)]);
        // 10 quotes a second from 20 s on: fresh for 10 s after the last
        // lapse (18.01 s): no longer gray at 28.01 s.
        let changes = run(&mut g, 100, 20_000, 40_000);
        assert_eq!(changes, vec![(28_010, false)]);
    }

    #[test]
    fn a_healthy_stream_never_lapses_and_lapses_far_apart_never_gray() {
        let mut g = GrayDetector::new(GrayRule::default());
        assert!(run(&mut g, 100, 0, 60_000).is_empty());
        // One 3-s pause every 20 s: 2 lapses per 30 s window at most.
        let mut g = GrayDetector::new(GrayRule::default());
        let mut last = Some(0);
        for t in (0..120_000u64).step_by(10) {
            if t % 20_000 >= 3_000 && t % 100 == 0 {
                g.on_quote();
                last = Some(t * MS);
            }
            assert_eq!(g.evaluate(t * MS, last).gray, None, "t = {t}");
        }
    }

    proptest::proptest! {
        /// Over any stream of quote gaps on the shipped rule: gray begins
        /// only at a lapse that makes `lapses` within `window_ms`, ends
        /// only `clear_ms` after the last lapse, and a lapse is counted
        /// only once the last quote is older than the max quote age.
        #[test]
        fn gray_begins_and_ends_only_by_the_rule(
            gaps in proptest::collection::vec(10u64..6_000, 1..80)
        ) {
            let rule = GrayRule::default();
            let mut g = GrayDetector::new(rule);
            let mut lapses: Vec<u64> = Vec::new();
            let (mut t, mut last) = (0u64, 0u64);
            g.on_quote();
            for gap in gaps {
                let next = last + gap;
                while t < next {
                    t += 10;
                    let c = g.evaluate(t * MS, Some(last * MS));
                    if c.lapse {
                        proptest::prop_assert!(t - last > rule.max_quote_age_ms);
                        lapses.push(t);
                    }
                    match c.gray {
                        Some(true) => {
                            proptest::prop_assert!(c.lapse);
                            let n = rule.lapses as usize;
                            proptest::prop_assert!(lapses.len() >= n);
                            let first = lapses[lapses.len() - n];
                            proptest::prop_assert!(t - first <= rule.window_ms);
                        }
                        Some(false) => {
                            let l = *lapses.last().unwrap();
                            proptest::prop_assert!(t - l >= rule.clear_ms);
                        }
                        None => {}
                    }
                }
                g.on_quote();
                last = next;
            }
        }
    }

    #[test]
    fn zero_lapses_turn_the_rule_off() {
        let rule = GrayRule {
            lapses: 0,
            ..GrayRule::default()
        };
        let mut g = GrayDetector::new(rule);
        assert!(run(&mut g, 4_000, 0, 60_000).is_empty());
    }
}
