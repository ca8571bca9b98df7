//! What an edge-capacity window measures besides the terminals' own
//! stamps: the server's age of the prices it handed to the kernel
//! (`pricewire_price_handoff_age_seconds`, summed over shards), and this
//! host's loopback packets dropped at the receive backlog and TCP
//! segments retransmitted — the two can make a terminal's price older
//! than the server let go of it (a dropped loopback segment waits for a
//! retransmission), and on a 2-vCPU host they do.

/// The histogram's family name.
pub const HANDOFF_AGE: &str = "pricewire_price_handoff_age_seconds";
/// The engine's tick-to-publish histogram: how long a received tick
/// waited for the engine to price it (a standalone server's engine
/// shares shard 0's thread).
pub const TICK_TO_PUBLISH: &str = "pricewire_tick_to_publish_latency_seconds";

/// The hand-off histogram as scraped: (bucket's upper bound in seconds,
/// cumulative count) summed over every shard, `+Inf` last; empty when
/// the server has no such family.
pub fn handoff_buckets(metrics: &str) -> Vec<(f64, u64)> {
    buckets(metrics, HANDOFF_AGE)
}

/// A histogram family's buckets as scraped, summed over its series:
/// (upper bound in seconds, cumulative count), `+Inf` last; empty when
/// the server has no such family.
pub fn buckets(metrics: &str, family: &str) -> Vec<(f64, u64)> {
    let prefix = format!("{family}_bucket{{");
    let mut out: Vec<(f64, u64)> = Vec::new();
    for line in metrics.lines().filter(|l| l.starts_with(&prefix)) {
        let Some(le) = line.split("le=\"").nth(1).and_then(|r| r.split('"').next()) else {
            continue;
        };
        let bound = if le == "+Inf" {
            f64::INFINITY
        } else {
            match le.parse::<f64>() {
                Ok(b) => b,
                Err(_) => continue,
            }
        };
        let Some(n) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        match out.iter_mut().find(|(b, _)| *b == bound) {
            Some(e) => e.1 += n as u64,
            None => out.push((bound, n as u64)),
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The window's hand-offs: bucket counts at its end less those at its
/// start (cumulative, per bound).
pub fn window(start: &[(f64, u64)], end: &[(f64, u64)]) -> Vec<(f64, u64)> {
    end.iter()
        .map(|&(b, n)| {
            let before = start.iter().find(|(s, _)| *s == b).map_or(0, |e| e.1);
            (b, n.saturating_sub(before))
        })
        .collect()
}

/// The upper bound (seconds) of the bucket holding quantile `q` of a
/// window's cumulative buckets; `None` with no hand-off.
pub fn quantile_le(w: &[(f64, u64)], q: f64) -> Option<f64> {
    let total = w.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = (q * total as f64).ceil() as u64;
    w.iter().find(|(_, n)| *n >= rank.max(1)).map(|(b, _)| *b)
}

/// The share of a window's hand-offs above `bound_s` (a bucket bound).
pub fn share_over(w: &[(f64, u64)], bound_s: f64) -> Option<f64> {
    let total = w.last()?.1;
    let at = w.iter().find(|(b, _)| *b >= bound_s)?.1;
    (total > 0).then(|| (total - at) as f64 / total as f64)
}

/// The sum of every series of the counter family `name` (all labels).
pub fn family_sum(metrics: &str, name: &str) -> u64 {
    let prefix = format!("{name}{{");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// This host's loopback receive-backlog drops (every CPU's second
/// column of `/proc/net/softnet_stat`, hex) and TCP segments
/// retransmitted (`/proc/net/snmp`, `Tcp: RetransSegs`), so far.
pub fn host_net() -> (u64, u64) {
    let drops = std::fs::read_to_string("/proc/net/softnet_stat")
        .map(|s| softnet_drops(&s))
        .unwrap_or(0);
    let retrans = std::fs::read_to_string("/proc/net/snmp")
        .ok()
        .and_then(|s| snmp_field(&s, "Tcp:", "RetransSegs"))
        .unwrap_or(0);
    (drops, retrans)
}

fn softnet_drops(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|h| u64::from_str_radix(h, 16).ok())
        .sum()
}

/// `field` of the `table` lines of `/proc/net/snmp` (a header line of
/// names, then a line of values).
fn snmp_field(text: &str, table: &str, field: &str) -> Option<u64> {
    let mut rows = text.lines().filter(|l| l.starts_with(table));
    let names = rows.next()?;
    let values = rows.next()?;
    let i = names.split_whitespace().position(|n| n == field)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = "\
# TYPE pricewire_price_handoff_age_seconds histogram
pricewire_price_handoff_age_seconds_bucket{shard=\"0\",le=\"0.01\"} 80
pricewire_price_handoff_age_seconds_bucket{shard=\"0\",le=\"0.05\"} 99
pricewire_price_handoff_age_seconds_bucket{shard=\"0\",le=\"+Inf\"} 100
pricewire_price_handoff_age_seconds_bucket{shard=\"1\",le=\"0.01\"} 10
pricewire_price_handoff_age_seconds_bucket{shard=\"1\",le=\"0.05\"} 100
pricewire_price_handoff_age_seconds_bucket{shard=\"1\",le=\"+Inf\"} 100
pricewire_price_handoff_age_seconds_count{shard=\"1\"} 100
";

    #[test]
    fn the_shards_buckets_add_up_and_give_the_windows_quantiles() {
        let end = handoff_buckets(SCRAPE);
        assert_eq!(end, vec![(0.01, 90), (0.05, 199), (f64::INFINITY, 200)]);
        let start = vec![(0.01, 40), (0.05, 49), (f64::INFINITY, 50)];
        let w = window(&start, &end);
        assert_eq!(w, vec![(0.01, 50), (0.05, 150), (f64::INFINITY, 150)]);
        assert_eq!(quantile_le(&w, 0.3), Some(0.01));
        assert_eq!(quantile_le(&w, 0.99), Some(0.05));
        assert_eq!(share_over(&w, 0.05), Some(0.0));
        assert_eq!(share_over(&end, 0.05), Some(0.005));
        assert_eq!(quantile_le(&[], 0.5), None);
        let c = "w_total{shard=\"0\"} 3\nw_total{shard=\"1\"} 4\nw_totalx 9\n";
        assert_eq!(family_sum(c, "w_total"), 7);
    }

    #[test]
    fn the_hosts_counters_are_read_from_procs_formats() {
        let softnet = "01432d85 000000ce 00000001\n013dc91a 00000a7d 00000002\n";
        assert_eq!(softnet_drops(softnet), 0xce + 0xa7d);
        let snmp = "Tcp: RtoAlgorithm RtoMin RetransSegs InErrs\nTcp: 1 200 3318 0\n";
        assert_eq!(snmp_field(snmp, "Tcp:", "RetransSegs"), Some(3318));
        assert_eq!(snmp_field(snmp, "Udp:", "InErrors"), None);
    }
}
