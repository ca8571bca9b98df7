//! A measurement, not a verdict (ignored by default): where the time of a
//! Redis call goes on a loaded host. Each call is an account read
//! (`AccountStore::read`, one MULTI/EXEC) against a real redis-server on
//! 127.0.0.1, back to back as the refresher works off a backlog. For each
//! call it reads the scheduler's run-queue delay (`/proc/.../schedstat`,
//! field 2) of the calling thread and of redis-server's main thread before
//! and after, and the caller's major page faults, so a slow call or a
//! timeout is attributed to the caller waiting for a CPU, to Redis waiting
//! for one, to the caller waiting for the disk, or to none of these.
//!
//! ```sh
//! cargo test --test it refdata_latency:: -- --ignored --nocapture
//! ```

use crate::util::redis;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pricewire::model::InstrumentTable;
use pricewire::refdata::{AccountStore, RedisConfig};

use redis::RedisServer;

/// Run-queue delay (ns) of a thread, from its schedstat line.
fn run_delay_ns(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Major page faults of the calling thread (a fault that waits for the
/// disk: invisible to the run-queue delay).
fn major_faults() -> u64 {
    std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1;
            after.split_whitespace().nth(9)?.parse().ok()
        })
        .unwrap_or(0)
}

struct Call {
    took: Duration,
    ok: bool,
    ours_ns: u64,
    redis_ns: u64,
    majflt: u64,
}

fn measure(store: &AccountStore, redis_stat: &str, calls: usize) -> Vec<Call> {
    let ours = "/proc/thread-self/schedstat";
    (0..calls)
        .map(|_| {
            let (o0, r0, f0) = (run_delay_ns(ours), run_delay_ns(redis_stat), major_faults());
            let t = Instant::now();
            let ok = store.read("alice").is_ok();
            let took = t.elapsed();
            let (o1, r1, f1) = (run_delay_ns(ours), run_delay_ns(redis_stat), major_faults());
            Call {
                took,
                ok,
                ours_ns: o1 - o0,
                redis_ns: r1 - r0,
                majflt: f1 - f0,
            }
        })
        .collect()
}

fn report(label: &str, calls: &[Call], slow: Duration) {
    let mut ms: Vec<f64> = calls.iter().map(|c| c.took.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let q = |p: f64| ms[((ms.len() - 1) as f64 * p) as usize];
    let failed = calls.iter().filter(|c| !c.ok).count();
    println!(
        "{label}: {} calls, p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms, failed (timeouts) {failed}",
        calls.len(),
        q(0.5),
        q(0.99),
        ms[ms.len() - 1]
    );
    let slow: Vec<&Call> = calls.iter().filter(|c| c.took > slow).collect();
    let sum = |f: fn(&Call) -> u64| slow.iter().map(|c| f(c)).sum::<u64>() as f64 / 1e6;
    let total: f64 = slow.iter().map(|c| c.took.as_secs_f64() * 1e3).sum();
    println!(
        "  {} calls over {slow_ms} ms: {total:.0} ms in all, of which the caller waited for a CPU \
         {:.0} ms and redis-server {:.0} ms; major page faults in them: {}",
        slow.len(),
        sum(|c| c.ours_ns),
        sum(|c| c.redis_ns),
        slow.iter().map(|c| c.majflt).sum::<u64>(),
        slow_ms = 50,
    );
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn where_the_time_of_a_redis_call_goes_under_load() {
    let server = RedisServer::start();
    server.put_account(
        "alice",
        &[("token", redis::token_t_hash()), ("tiers", "raw")],
    );
    let mut cfg = RedisConfig::new(server.addr());
    cfg.io_timeout_ms = 250;
    let store = AccountStore::new(&cfg, InstrumentTable::default_with_providers(2));
    let redis_stat = format!("/proc/{0}/task/{0}/schedstat", server.pid());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("host load: {load}");
    let calls = 2_000;
    report(
        "as is",
        &measure(&store, &redis_stat, calls),
        Duration::from_millis(50),
    );
    for spinners in [4, 8] {
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..spinners)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || while !stop.load(Relaxed) {})
            })
            .collect();
        let label = format!("{spinners} busy threads added");
        report(
            &label,
            &measure(&store, &redis_stat, calls),
            Duration::from_millis(50),
        );
        stop.store(true, Relaxed);
        threads.into_iter().for_each(|t| t.join().unwrap());
    }
}
