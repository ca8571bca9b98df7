//! Tests of the rounds summary: rows, spreads, pooled counts, duels.

use super::*;

fn row(target: &str, label: &str, p50: f64, p999: f64) -> String {
    // The fields results.jsonl rows have (run::RunRow), p99 = 2 × p50,
    // send lag p99.9 = p50 / 10, CPU = 3 s per million.
    let us = |v: f64| (v * 1e3) as u64;
    serde_json::json!({
        "target": "pricewire",
        "name": target,
        "scenario": label,
        "latency": {"p50_ns": us(p50), "p99_ns": us(p50 * 2.0), "p999_ns": us(p999)},
        "send_lag": {"p999_ns": us(p50 / 10.0)},
        "server_cpu_s_per_m_updates": 3.0,
    })
    .to_string()
}

/// A results folder: `rows` in results.jsonl, and pricewire's counts
/// file for each (label, histogram).
fn write_folder(dir: &Path, rows: &[String], counts: &[(&str, &Histogram<u64>)]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("results.jsonl"), lines(rows)).unwrap();
    for (label, h) in counts {
        std::fs::write(counts_path(dir, label, "pricewire"), counts_text(h)).unwrap();
    }
}

fn lines(rows: &[String]) -> String {
    rows.iter().map(|r| format!("{r}\n")).collect()
}

#[test]
fn round_suffixes_split_off() {
    assert_eq!(split_round("steady-10k-x10-r3"), ("steady-10k-x10", 3));
    assert_eq!(split_round("steady-10k-x10-r12"), ("steady-10k-x10", 12));
    assert_eq!(split_round("steady-10k-x10"), ("steady-10k-x10", 1));
    assert_eq!(split_round("herd-r"), ("herd-r", 1));
    assert_eq!(split_round("-r2"), ("-r2", 1));
    assert_eq!(split_round("x-r2b"), ("x-r2b", 1));
}

#[test]
fn spread_takes_the_middle() {
    let s = spread(&[5.0, 1.0, 3.0]);
    assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 5.0));
    let s = spread(&[4.0, 1.0, 3.0, 10.0]);
    assert_eq!((s.median, s.min, s.max), (3.5, 1.0, 10.0));
    assert!(spread(&[]).median.is_nan());
}

#[test]
fn medians_and_duels_over_rounds() {
    let sc = three_rounds_and_a_single_run();
    assert_eq!(sc.len(), 2);
    assert_eq!(sc[0].scenario, "s");
    assert_eq!(sc[1].scenario, "other");
    let pw = sc[0]
        .targets
        .iter()
        .find(|t| t.target == "pricewire")
        .unwrap();
    assert_eq!(pw.rounds, 3);
    assert_eq!((pw.p50.median, pw.p50.min, pw.p50.max), (41.0, 40.0, 45.0));
    assert_eq!(pw.p999.median, 1600.0);
    assert_eq!(pw.p99.median, 82.0);
    assert!((pw.send_lag_p999.median - 4.1).abs() < 1e-9);
    assert_eq!(pw.cpu_s_per_m.median, 3.0);
    assert!(pw.pooled.is_none());
    let floor = sc[0].targets.iter().find(|t| t.target == "floor").unwrap();
    assert_eq!(floor.rounds, 2);
    assert_eq!(floor.p999.median, 2050.0);
    let vs = |other: &str| {
        sc[0]
            .duels
            .iter()
            .find(|d| d.ours == "pricewire" && d.other == other)
            .unwrap()
            .clone()
    };
    // Redis: p50 lower in rounds 1, 2; p99.9 lower in round 2 only.
    assert_eq!(
        vs("redis"),
        Duel {
            ours: "pricewire".into(),
            other: "redis".into(),
            paired_rounds: 3,
            p50_lower: 2,
            p999_lower: 1
        }
    );
    // The floor ran two rounds: only those pair.
    let f = vs("floor");
    assert_eq!((f.paired_rounds, f.p50_lower, f.p999_lower), (2, 2, 2));
}

#[test]
fn rendered_rounds_rank_pricewire_before_the_floor() {
    let sc = three_rounds_and_a_single_run();
    let text = render(&sc);
    assert!(text.contains("### s — 3 round(s)"), "{text}");
    assert!(
        text.contains("| pricewire | 3 | 41.0 (40.0–45.0) |"),
        "{text}"
    );
    assert!(
        text.contains("pricewire vs redis: p50 2/3, p99.9 1/3"),
        "{text}"
    );
    assert!(text.contains("| 1,600 (1,500–3,000) |"), "{text}");
    assert!(text.contains("| 4.1 | 3.00 |"), "{text}");
    // The floor against the peers, never against pricewire or itself.
    let floor_duels: Vec<&Duel> = sc[0].duels.iter().filter(|d| d.ours == "floor").collect();
    assert_eq!(floor_duels.len(), 1, "{floor_duels:?}");
    assert_eq!(
        (floor_duels[0].other.as_str(), floor_duels[0].paired_rounds),
        ("redis", 2)
    );
    assert_eq!(
        (floor_duels[0].p50_lower, floor_duels[0].p999_lower),
        (2, 0)
    );
    let (pw_at, floor_at) = (
        text.find("pricewire vs redis").unwrap(),
        text.find("cannot rank servers").unwrap(),
    );
    assert!(pw_at < floor_at, "pricewire's lines first: {text}");
    assert!(
        text[floor_at..].contains("- floor vs redis: p50 2/2, p99.9 0/2"),
        "{text}"
    );
    // A scenario without the floor has no floor section.
    assert!(!render(&sc[1..]).contains("cannot rank"));
}

/// Scenario `s`: three rounds of pricewire and redis, two of the floor,
/// and a sweep row; scenario `other`: one run.
fn three_rounds_and_a_single_run() -> Vec<ScenarioRounds> {
    let rows = read_rows(&lines(&[
        row("floor", "s-r1", 50.0, 2000.0),
        row("pricewire", "s-r1", 40.0, 1500.0),
        row("redis", "s-r1", 60.0, 1000.0),
        row("floor", "s-r2", 52.0, 2100.0),
        row("pricewire", "s-r2", 41.0, 1600.0),
        row("redis", "s-r2", 61.0, 1700.0),
        row("pricewire", "s-r3", 45.0, 3000.0),
        row("redis", "s-r3", 30.0, 2500.0),
        // Sweeps are not rounds.
        row("redis", "sweep-10000", 1.0, 1.0),
        // Another scenario, a single run.
        row("pricewire", "other", 7.0, 70.0),
    ]))
    .unwrap();
    assert_eq!(rows.len(), 9);
    summarize_rows(None, &rows).unwrap()
}

/// Round 1: 999 values spread over 1..999 µs; round 2: 999 at 100 µs and
/// one stall of 50 ms.
fn two_rounds() -> (Histogram<u64>, Histogram<u64>) {
    let mut a = latency_histogram();
    let mut b = latency_histogram();
    for v in 1..=999u64 {
        a.record(v * 1_000).unwrap(); // 1 µs .. 999 µs
    }
    // One stall of 50 ms in the second round only.
    for _ in 0..999 {
        b.record(100_000).unwrap();
    }
    b.record(50_000_000).unwrap();
    (a, b)
}

/// A fresh `name`d results folder with pricewire's two rounds and their
/// counts files.
fn first_folder(name: &str, a: &Histogram<u64>, b: &Histogram<u64>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pw-rounds-{name}-{}", std::process::id()));
    write_folder(
        &dir,
        &[
            row("pricewire", "s-r1", 500.0, 998.0),
            row("pricewire", "s-r2", 100.0, 50_000.0),
        ],
        &[("s-r1", a), ("s-r2", b)],
    );
    dir
}

#[test]
fn counts_round_trip_exactly_and_pool() {
    let (a, b) = two_rounds();
    let mut back = latency_histogram();
    add_counts(&mut back, &counts_text(&a)).unwrap();
    assert_eq!(summarize(&back), summarize(&a));

    let dir = first_folder("pool", &a, &b);
    let text = summarize_dir(&dir).unwrap();
    let mut rows = read_rows(&std::fs::read_to_string(dir.join("results.jsonl")).unwrap()).unwrap();
    rows.iter_mut().for_each(|r| r.dir = dir.clone());
    let sc = summarize_rows(Some(&dir), &rows).unwrap();
    let pooled = sc[0].targets[0].pooled.unwrap();
    assert_eq!(pooled.count, 1999);
    // 999 values spread over 1..999 µs plus 999 at 100 µs: the median
    // of the pool sits at 100 µs; the stall is the pool's maximum.
    assert!((99_000..=101_000).contains(&pooled.p50_ns), "{pooled:?}");
    assert!(pooled.max_ns >= 49_900_000, "{pooled:?}");
    assert!(text.contains("pooled p99.9"), "{text}");
    assert!(dir.join("rounds.md").exists());
    assert!(dir.join("pooled/hdr-s-pricewire.txt").exists());

    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_second_folder_continues_the_rounds_and_the_pool() {
    let (a, b) = two_rounds();
    let dir = first_folder("second", &a, &b);
    // A second run of the same build: its rounds follow the first's
    // and its counts join the pool.
    // Redis ran only in the second folder's round 1 — round 3 of the
    // set — where pricewire was slower: one paired round, lost.
    let dir2 = dir.join("second");
    write_folder(
        &dir2,
        &[
            row("pricewire", "s-r1", 100.0, 50_000.0),
            row("redis", "s-r1", 90.0, 40_000.0),
        ],
        &[("s-r1", &b)],
    );
    let out = dir.join("both");
    let text = summarize_dirs(&[dir.clone(), dir2.clone()], &out).unwrap();
    assert!(text.contains("### s — 3 round(s)"), "{text}");
    assert!(
        text.contains("pricewire vs redis: p50 0/1, p99.9 0/1"),
        "{text}"
    );
    // Redis has no counts file: its row has medians but no pool.
    assert!(text.contains("| redis | 1 |"), "{text}");
    assert!(out.join("rounds.md").exists());
    let pooled = std::fs::read_to_string(out.join("pooled/hdr-s-pricewire.txt")).unwrap();
    assert!(pooled.contains("Total count = 2999"), "{pooled}");
    // Without renumbering, the second folder's round 1 would pair
    // with the first folder's round 1 (where redis did not run).
    let rows = {
        let mut r =
            read_rows(&std::fs::read_to_string(dir2.join("results.jsonl")).unwrap()).unwrap();
        r.iter_mut().for_each(|x| x.dir = dir2.clone());
        r
    };
    assert!(rows.iter().all(|r| r.round == 1));
    // A folder given twice, or one run written twice into a folder,
    // is refused instead of double-counted.
    assert!(summarize_dirs(&[dir2.clone(), dir2.clone()], &out).is_err());
    let again = std::fs::read_to_string(dir2.join("results.jsonl")).unwrap();
    std::fs::write(dir2.join("results.jsonl"), again.repeat(2)).unwrap();
    assert!(summarize_dirs(&[dir2], &out).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_results_are_errors() {
    assert!(read_rows("").unwrap().is_empty());
    assert!(read_rows("target,scenario\nx,y\n").is_err());
    assert!(read_rows(r#"{"name":"x","scenario":"s"}"#).is_err());
    let bad = r#"{"name":"x","scenario":"s","latency":{"p50_ns":"fast","p99_ns":1,"p999_ns":1}}"#;
    assert!(read_rows(bad).is_err());
    // Optional fields may be missing.
    let lean =
        r#"{"name":"x","scenario":"s","latency":{"p50_ns":1000,"p99_ns":2000,"p999_ns":3000}}"#;
    let r = read_rows(lean).unwrap();
    assert_eq!(r[0].p999_us, 3.0);
    assert!(r[0].send_lag_p999_us.is_nan() && r[0].cpu_s_per_m.is_nan());
}
