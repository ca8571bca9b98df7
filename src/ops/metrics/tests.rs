use super::*;
use hdrhistogram::Histogram;

fn sample_line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(prefix))
}

#[test]
fn scrape_reads_atomics_at_scrape_time() {
    let r = Registry::new();
    let ticks = Arc::new(AtomicU64::new(0));
    r.register_counter(
        catalogue::TICKS_RECEIVED,
        &[("provider", "lp1")],
        ticks.clone(),
    )
    .unwrap();
    ticks.fetch_add(41, Ordering::Relaxed);
    assert!(r
        .scrape()
        .contains("pricewire_ticks_received_total{provider=\"lp1\"} 41\n"));
    ticks.fetch_add(1, Ordering::Relaxed);
    assert!(r
        .scrape()
        .contains("pricewire_ticks_received_total{provider=\"lp1\"} 42\n"));
}

#[test]
fn one_family_block_for_many_series() {
    let r = Registry::new();
    for p in ["lp1", "lp2", "lp3"] {
        r.register_counter(
            catalogue::TICKS_RECEIVED,
            &[("provider", p)],
            Arc::new(AtomicU64::new(1)),
        )
        .unwrap();
    }
    let text = r.scrape();
    assert_eq!(
        text.matches("# TYPE pricewire_ticks_received_total counter")
            .count(),
        1
    );
    assert_eq!(text.matches("pricewire_ticks_received_total{").count(), 3);
}

#[test]
fn registration_refuses_unknown_family_wrong_kind_labels_and_duplicates() {
    let r = Registry::new();
    let a = || Arc::new(AtomicU64::new(0));
    assert!(r
        .register_counter("pricewire_made_up_total", &[], a())
        .is_err());
    assert!(r
        .register_gauge(catalogue::TICKS_RECEIVED, &[("provider", "x")], a())
        .is_err());
    assert!(r
        .register_counter(catalogue::TICKS_RECEIVED, &[("feed", "x")], a())
        .is_err());
    assert!(r
        .register_counter(catalogue::TICKS_RECEIVED, &[], a())
        .is_err());
    r.register_counter(catalogue::TICKS_RECEIVED, &[("provider", "x")], a())
        .unwrap();
    let err = r
        .register_counter(catalogue::TICKS_RECEIVED, &[("provider", "x")], a())
        .unwrap_err();
    assert!(err.to_string().contains("already registered"), "{err}");
}

#[test]
fn labels_are_put_in_documented_order() {
    let r = Registry::new();
    let labels = [("state", "logged_on"), ("shard", "0")];
    r.register_gauge(catalogue::CONNECTIONS, &labels, Arc::new(AtomicU64::new(7)))
        .unwrap();
    assert!(r
        .scrape()
        .contains("pricewire_connections{shard=\"0\",state=\"logged_on\"} 7\n"));
}

struct BreakerStats {
    open: AtomicU64,
}

impl Collect for BreakerStats {
    fn collect(&self, sink: &mut Sink) {
        let open = self.open.load(Ordering::Relaxed) == 1;
        for (state, on) in [("closed", !open), ("open", open), ("half_open", false)] {
            let labels = [("dependency", "lp1"), ("state", state)];
            sink.gauge(catalogue::BREAKER_STATE, &labels, f64::from(u8::from(on)));
        }
        // A mistake: a counter written as a gauge. Refused and counted.
        sink.gauge(
            catalogue::BREAKER_NOT_PERMITTED,
            &[("dependency", "lp1")],
            1.0,
        );
    }
}

#[test]
fn collect_impl_runs_per_scrape_and_bad_samples_are_counted() {
    let r = Registry::new();
    let stats = Arc::new(BreakerStats {
        open: AtomicU64::new(0),
    });
    r.register_collect(stats.clone());
    let text = r.scrape();
    assert!(text.contains("pricewire_breaker_state{dependency=\"lp1\",state=\"closed\"} 1.0\n"));
    assert!(!text.contains("pricewire_breaker_not_permitted_total"));
    assert_eq!(r.rejected_samples(), 1);
    stats.open.store(1, Ordering::Relaxed);
    let text = r.scrape();
    assert!(text.contains("pricewire_breaker_state{dependency=\"lp1\",state=\"open\"} 1.0\n"));
    assert!(
        text.contains("pricewire_metrics_rejected_samples_total 2"),
        "{text}"
    );
}

#[test]
fn duplicate_series_from_collectors_keep_the_first() {
    struct Twice;
    impl Collect for Twice {
        fn collect(&self, sink: &mut Sink) {
            sink.counter(catalogue::PRICES_PUBLISHED, &[], 1);
            sink.counter(catalogue::PRICES_PUBLISHED, &[], 2);
            assert_eq!(sink.rejected(), 1);
        }
    }
    let r = Registry::new();
    r.register_collect(Arc::new(Twice));
    let text = r.scrape();
    assert!(sample_line(&text, "pricewire_prices_published_total ")
        .unwrap()
        .ends_with(" 1"));
}

#[test]
fn label_values_are_escaped() {
    let r = Registry::new();
    let labels = [("provider", "a\"b\\c\nd")];
    r.register_counter(
        catalogue::TICKS_RECEIVED,
        &labels,
        Arc::new(AtomicU64::new(1)),
    )
    .unwrap();
    assert!(r.scrape().contains(r#"{provider="a\"b\\c\nd"} 1"#));
}

#[test]
fn hdr_snapshot_becomes_cumulative_prometheus_buckets() {
    let mut h = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
    h.record_n(800, 10).unwrap(); // 0.8 µs
    h.record_n(3_000, 5).unwrap(); // 3 µs
    h.record_n(2_000_000, 1).unwrap(); // 2 ms
    h.record_n(5_000_000_000, 1).unwrap(); // 5 s: above every bound
    let s = HistogramSnapshot::from_hdr(&h, LATENCY_BUCKETS_S, 1e-9);
    let at = |le: f64| s.buckets.iter().find(|b| b.0 == le).unwrap().1;
    assert_eq!(at(1e-6), 10);
    assert_eq!(at(2.5e-6), 10);
    assert_eq!(at(5e-6), 15);
    assert_eq!(at(1e-3), 15);
    assert_eq!(at(2.5e-3), 16);
    assert_eq!(at(1e-1), 16);
    assert_eq!(s.count, 17);
    let exact_sum = (10.0 * 800.0 + 5.0 * 3000.0 + 2e6 + 5e9) * 1e-9;
    assert!(
        (s.sum - exact_sum).abs() / exact_sum < 1e-3,
        "{} vs {exact_sum}",
        s.sum
    );

    let r = Registry::new();
    r.register_histogram_fn(catalogue::TICK_TO_PUBLISH_LATENCY, &[], move || s.clone())
        .unwrap();
    let text = r.scrape();
    assert!(text.contains("# TYPE pricewire_tick_to_publish_latency_seconds histogram"));
    assert!(text.contains("pricewire_tick_to_publish_latency_seconds_bucket{le=\"5e-06\"} 15"));
    assert!(text.contains("pricewire_tick_to_publish_latency_seconds_bucket{le=\"+Inf\"} 17"));
    assert!(text.contains("pricewire_tick_to_publish_latency_seconds_count 17"));
}

#[test]
fn shared_histogram_merges_and_resets_the_local_one() {
    let shared = Arc::new(SharedHistogram::new(1, 1_000_000_000, 3).unwrap());
    let mut local = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
    local.record_n(1_500, 4).unwrap();
    assert!(shared.try_merge_from(&mut local));
    assert_eq!(local.len(), 0);
    let r = Registry::new();
    r.register_hdr_ns(
        catalogue::REQUEST_QUEUE_SOJOURN,
        &[],
        shared.clone(),
        LATENCY_BUCKETS_S,
    )
    .unwrap();
    assert!(r
        .scrape()
        .contains("pricewire_request_queue_sojourn_seconds_bucket{le=\"2.5e-06\"} 4"));
}

#[test]
fn define_adds_a_conventional_family_and_refuses_a_bad_one() {
    let r = Registry::new();
    let good = FamilyDesc {
        name: "pricewire_extra_events_total",
        kind: MetricKind::Counter,
        labels: &[],
        unit: "events",
        owner: "test",
        help: "Extra events",
    };
    r.define(good).unwrap();
    assert!(r.define(good).is_err());
    r.register_counter_fn(good.name, &[], || 3).unwrap();
    assert!(r.scrape().contains("pricewire_extra_events_total 3"));
    let bad = FamilyDesc {
        name: "extra_latency_ms",
        kind: MetricKind::Gauge,
        ..good
    };
    assert!(r.define(bad).is_err());
}

#[test]
fn empty_families_are_left_out_and_builtins_are_present() {
    let text = Registry::new().scrape();
    assert!(!text.contains("pricewire_ticks_received_total"));
    assert!(text.contains("pricewire_build_info{version=\""));
    assert!(text.contains("pricewire_metrics_rejected_samples_total 0"));
}

#[test]
fn thread_priorities_are_what_the_kernel_reports() {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::Builder::new()
        .name("pw-metric-rt".into())
        .spawn(move || {
            let placed = crate::runtime::affinity::set_current_fifo(7).is_ok();
            ready_tx.send(placed).unwrap();
            let _ = done_rx.recv();
        })
        .unwrap();
    let placed = ready_rx.recv().unwrap();
    let text = Registry::new().scrape();
    done_tx.send(()).unwrap();
    t.join().unwrap();
    let want = if placed { 7 } else { 0 };
    let line = format!("pricewire_thread_rt_priority{{thread=\"pw-metric-rt\"}} {want}\n");
    assert!(text.contains(&line), "{line} missing from:\n{text}");
    // Only the pipeline's threads are listed (the test harness's are not).
    let listed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("pricewire_thread_rt_priority{thread=\""))
        .collect();
    assert!(!listed.is_empty());
    assert!(listed.iter().all(|l| l.starts_with("pw-")), "{listed:?}");
}

/// Registers every renamed family's new name (two series where it has a
/// label) with seeded values and returns them.
fn register_renamed(r: &Registry, seed: u64) -> Vec<(&'static str, f64)> {
    let mut rng = seed;
    let mut next = move || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) as f64 / (1u64 << 31) as f64
    };
    let mut out = Vec::new();
    for d in catalogue::DEPRECATED {
        let labels = catalogue::family(d.new).unwrap().labels;
        let values: &[&str] = if labels.is_empty() {
            &[""]
        } else {
            &["a", "b"]
        };
        for value in values {
            // Seconds as the readers give them: whole nanoseconds / 1e9.
            let v = if d.scale == 1e9 {
                (next() * 1e9).round() / 1e9
            } else {
                next()
            };
            let l: Vec<(&str, &str)> = labels.iter().map(|k| (*k, *value)).collect();
            r.register_gauge_fn(d.new, &l, move || v).unwrap();
            out.push((d.new, v));
        }
    }
    out
}

#[test]
fn a_deprecated_name_shows_its_replacement_in_the_old_unit() {
    for seed in 0..16 {
        let r = Registry::new();
        register_renamed(&r, seed);
        let series = r.series();
        for d in catalogue::DEPRECATED {
            let of = |name: &str| -> Vec<_> {
                let s = series.iter().filter(|s| s.family == name);
                s.map(|s| (s.labels.clone(), s.value)).collect()
            };
            let (old, new) = (of(d.old), of(d.new));
            assert!(!new.is_empty() && old.len() == new.len(), "{}", d.old);
            for ((lo, vo), (ln, vn)) in old.iter().zip(&new) {
                assert_eq!(lo, ln, "{}", d.old);
                let want = if d.scale == 1.0 {
                    *vn
                } else {
                    (vn * d.scale).round()
                };
                assert_eq!(*vo, want, "{}", d.old);
                assert_eq!(vo.fract(), 0.0_f64.max(want.fract()), "{}", d.old);
            }
            let text = r.scrape();
            assert!(
                text.contains(&format!("# TYPE {} gauge", d.old)),
                "{}",
                d.old
            );
        }
    }
}
