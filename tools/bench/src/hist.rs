//! Latency histograms, percentile summaries and the open-loop schedule.
//!
//! Every histogram has the project's explicit bounds (1 ns .. 60 s, 3
//! significant figures, [`latency_histogram`]) and is written with
//! `saturating_record`, so recording never resizes or fails on the hot
//! path: a latency above the bound lands in the top bucket instead of
//! vanishing. Latency is measured from the *scheduled* send time, not the
//! actual one, so a sender that falls behind (a stall, a full socket)
//! shows up in the tail instead of hiding (coordinated omission).

use hdrhistogram::Histogram;

pub use pricewire::runtime::latency::latency_histogram;

/// The percentiles every result row reports.
pub const REPORTED_PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 99.99];

/// Percentiles of one histogram, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub count: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub p9999_ns: u64,
    pub max_ns: u64,
}

/// Reads the reported percentiles of `h` (all zero when empty).
pub fn summarize(h: &Histogram<u64>) -> Summary {
    if h.is_empty() {
        return Summary::default();
    }
    let q = |p: f64| h.value_at_percentile(p);
    Summary {
        count: h.len(),
        p50_ns: q(50.0),
        p90_ns: q(90.0),
        p99_ns: q(99.0),
        p999_ns: q(99.9),
        p9999_ns: q(99.99),
        max_ns: h.max(),
    }
}

/// The percentile distribution in the HdrHistogram text format
/// (`Value Percentile TotalCount 1/(1-Percentile)`, values in µs), five
/// steps per halving of the remaining tail.
pub fn percentile_distribution(h: &Histogram<u64>) -> String {
    use std::fmt::Write;
    let mut s = String::from("       Value     Percentile TotalCount 1/(1-Percentile)\n\n");
    for v in h.iter_quantiles(5) {
        let p = v.quantile_iterated_to();
        let inv = if p < 1.0 {
            1.0 / (1.0 - p)
        } else {
            f64::INFINITY
        };
        let _ = writeln!(
            s,
            "{:12.3} {:14.12} {:10} {:14.2}",
            v.value_iterated_to() as f64 / 1000.0,
            p,
            v.count_since_last_iteration(),
            inv
        );
    }
    let _ = writeln!(
        s,
        "#[Mean = {:.3}, StdDeviation = {:.3}]\n#[Max = {:.3}, Total count = {}]",
        h.mean() / 1000.0,
        h.stdev() / 1000.0,
        h.max() as f64 / 1000.0,
        h.len()
    );
    s
}

/// Parses [`percentile_distribution`] output back into (µs, percentile)
/// points; used by the plot.
pub fn parse_distribution(text: &str) -> Vec<(f64, f64)> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let v: f64 = f.next()?.parse().ok()?;
            let p: f64 = f.next()?.parse().ok()?;
            Some((v, p))
        })
        .collect()
}

/// An open-loop send schedule: tick `i` is due at
/// `start_ns + i * 1e9 / rate_per_s`, whatever happened to tick `i - 1`.
/// The schedule never waits for responses; a sender that is late sends
/// the overdue ticks at once, each stamped with its scheduled time.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub start_ns: u64,
    pub rate_per_s: u64,
}

impl Schedule {
    pub fn new(start_ns: u64, rate_per_s: u64) -> Schedule {
        assert!(rate_per_s > 0, "a schedule needs a positive rate");
        Schedule {
            start_ns,
            rate_per_s,
        }
    }

    /// When tick `i` is due (computed from the start, so no drift).
    #[inline]
    pub fn scheduled_ns(&self, i: u64) -> u64 {
        self.start_ns + (u128::from(i) * 1_000_000_000 / u128::from(self.rate_per_s)) as u64
    }

    /// How many ticks are due at `now_ns` (ticks `0..n`).
    #[inline]
    pub fn due_count(&self, now_ns: u64) -> u64 {
        if now_ns < self.start_ns {
            return 0;
        }
        let elapsed = u128::from(now_ns - self.start_ns);
        (elapsed * u128::from(self.rate_per_s) / 1_000_000_000) as u64 + 1
    }
}

/// Records one delivery measured from the scheduled send time.
#[inline]
pub fn record_latency(h: &mut Histogram<u64>, scheduled_ns: u64, received_ns: u64) {
    h.saturating_record(received_ns.saturating_sub(scheduled_ns).max(1));
}

/// A simulated open-loop run: a sender at `rate_per_s` for `duration_ns`
/// that is blocked from `stall_at_ns` for `stall_ns` (it then sends the
/// overdue ticks at once); each delivery takes `transit_ns`. Returns the
/// latency histogram measured from the scheduled time and the one measured
/// from the actual send time. Only the first shows the stall.
pub fn simulate_stall(
    rate_per_s: u64,
    duration_ns: u64,
    stall_at_ns: u64,
    stall_ns: u64,
    transit_ns: u64,
) -> (Histogram<u64>, Histogram<u64>) {
    let schedule = Schedule::new(0, rate_per_s);
    let mut from_scheduled = latency_histogram();
    let mut from_actual = latency_histogram();
    let mut next = 0u64;
    let mut now = 0u64;
    while now < duration_ns {
        if now >= stall_at_ns && now < stall_at_ns + stall_ns {
            now = stall_at_ns + stall_ns; // blocked: time passes, nothing is sent
        }
        let due = schedule.due_count(now);
        while next < due && schedule.scheduled_ns(next) < duration_ns {
            let scheduled = schedule.scheduled_ns(next);
            record_latency(&mut from_scheduled, scheduled, now + transit_ns);
            record_latency(&mut from_actual, now, now + transit_ns);
            next += 1;
        }
        now = schedule.scheduled_ns(next).max(now + 1);
    }
    (from_scheduled, from_actual)
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;

    fn within(actual: u64, expected: u64, rel: f64) -> bool {
        (actual as f64 - expected as f64).abs() <= expected as f64 * rel
    }

    #[test]
    fn uniform_latencies_give_known_percentiles() {
        let mut h = latency_histogram();
        for us in 1..=10_000u64 {
            record_latency(&mut h, 0, us * US);
        }
        let s = summarize(&h);
        assert_eq!(s.count, 10_000);
        assert!(within(s.p50_ns, 5_000 * US, 0.002), "{s:?}");
        assert!(within(s.p90_ns, 9_000 * US, 0.002), "{s:?}");
        assert!(within(s.p99_ns, 9_900 * US, 0.002), "{s:?}");
        assert!(within(s.p999_ns, 9_990 * US, 0.002), "{s:?}");
        assert!(within(s.max_ns, 10_000 * US, 0.002), "{s:?}");
    }

    #[test]
    fn two_point_distribution_splits_at_its_weight() {
        let mut h = latency_histogram();
        for i in 0..1000u64 {
            let lat = if i < 990 { 20 * US } else { 5 * MS };
            record_latency(&mut h, 1_000, 1_000 + lat);
        }
        let s = summarize(&h);
        assert!(within(s.p50_ns, 20 * US, 0.001));
        assert!(within(s.p99_ns, 20 * US, 0.001), "p99 is the 990th value");
        assert!(within(s.p999_ns, 5 * MS, 0.001));
    }

    #[test]
    fn latencies_beyond_the_bound_saturate_instead_of_failing() {
        let mut h = latency_histogram();
        record_latency(&mut h, 0, 120_000 * MS);
        record_latency(&mut h, 10, 5); // clock went backwards: recorded as 1 ns
        assert_eq!(h.len(), 2);
        assert!(h.max() >= 59_000 * MS);
    }

    #[test]
    fn schedule_is_drift_free_and_counts_due_ticks() {
        let s = Schedule::new(1_000, 3);
        assert_eq!(s.scheduled_ns(0), 1_000);
        assert_eq!(s.scheduled_ns(3), 1_000 + 1_000_000_000);
        assert_eq!(s.due_count(999), 0);
        assert_eq!(s.due_count(1_000), 1);
        assert_eq!(s.due_count(1_000 + 333_333_333), 1);
        assert_eq!(s.due_count(1_000 + 333_333_334), 2);
    }

    #[test]
    fn stall_shows_in_the_tail_only_when_measured_from_the_schedule() {
        // 10k ticks/s for 10 s; the sender is blocked for 100 ms at t = 5 s.
        let (scheduled, actual) =
            simulate_stall(10_000, 10_000 * MS, 5_000 * MS, 100 * MS, 20 * US);
        let s = summarize(&scheduled);
        let a = summarize(&actual);
        assert_eq!(s.count, 100_000);
        assert_eq!(a.count, 100_000);
        // 1000 of 100k ticks (1 %) were due during the stall; their waits
        // spread evenly over 0..100 ms.
        assert!(within(s.p50_ns, 20 * US, 0.01), "{s:?}");
        assert!(s.p999_ns > 85 * MS && s.p999_ns < 95 * MS, "{s:?}");
        assert!(s.max_ns >= 99 * MS, "{s:?}");
        assert!(s.p9999_ns > 95 * MS, "{s:?}");
        // From the actual send time the stall is invisible.
        assert!(a.max_ns < 21 * US, "{a:?}");
        assert!(within(a.p9999_ns, 20 * US, 0.01), "{a:?}");
    }

    #[test]
    fn distribution_text_round_trips_through_the_parser() {
        let mut h = latency_histogram();
        for us in 1..=1000u64 {
            record_latency(&mut h, 0, us * US);
        }
        let pts = parse_distribution(&percentile_distribution(&h));
        assert!(pts.len() > 20);
        let last = pts.last().copied().unwrap_or_default();
        assert!(within(last.0 as u64, 1000, 0.002));
        assert!(pts.windows(2).all(|w| w[0].1 <= w[1].1));
    }
}
