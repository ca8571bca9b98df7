//! One benchmark run: connect the subscribers, wait until every
//! subscription is acknowledged, run the open-loop sender for warm-up +
//! measurement, drain for a bounded grace period, and summarise. Also the
//! saturation sweep, which repeats runs at rising rates until p99 crosses
//! a threshold.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Context};
use hdrhistogram::Histogram;

use super::hist::{summarize, Schedule, Summary};
use super::recv::{self, RecvPlan, RecvResult, RecvShared};
use super::send::{self, Publisher, SendPlan, SendResult, Window};
use super::{process_cpu_s, symbols_of, BenchClock, Target};
use pricewire::clock::monotonic_ns;

/// Longest wait for every subscriber to be ready, in ms.
pub const READY_TIMEOUT_MS: u64 = 20_000;
/// Longest wait after the last tick for deliveries still in flight, in ms.
pub const DRAIN_GRACE_MS: u64 = 2_000;

/// One run's parameters.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub target: Target,
    /// The target's name in result rows and file names (e.g. a pricewire
    /// configuration: `pricewire_shared`).
    pub name: String,
    /// Where the subscribers connect.
    pub addr: SocketAddr,
    /// Where the publisher connects (pricewire: the ingest listener).
    pub feed_addr: SocketAddr,
    pub rate_per_s: u64,
    pub subscribers: usize,
    pub symbols_per_subscriber: usize,
    pub symbols_total: u16,
    pub warmup_s: u64,
    pub duration_s: u64,
    pub batch_max: usize,
    pub server_pid: Option<u32>,
    /// `SCHED_FIFO` priority of the sender and receiver threads.
    pub rt_priority: Option<pricewire::runtime::RtPriority>,
    pub scenario: String,
    pub progress: bool,
    pub provider: u16,
    pub token: String,
    /// Receiver threads the subscribers are split over (at least 1).
    pub recv_threads: usize,
    /// Inbound buffer per subscriber connection, bytes
    /// ([`recv::IN_BYTES`] unless the run's frames are known to be small).
    pub recv_in_bytes: usize,
    /// The receivers read the kernel's arrival stamps
    /// ([`RecvPlan::rx_stamps`]).
    pub rx_stamps: bool,
    /// Longest wait for every subscriber to be subscribed, in ms
    /// ([`READY_TIMEOUT_MS`] unless the run has thousands).
    pub ready_timeout_ms: u64,
    /// Longest wait after the last tick for deliveries still in flight,
    /// in ms ([`DRAIN_GRACE_MS`] unless the run expects queues of seconds).
    pub drain_grace_ms: u64,
}

/// One result row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunRow {
    pub target: Target,
    /// See [`RunSpec::name`].
    pub name: String,
    pub scenario: String,
    pub rate_target_per_s: u64,
    pub rate_achieved_per_s: f64,
    pub subscribers: usize,
    pub symbols_per_subscriber: usize,
    pub symbols_total: u16,
    pub duration_s: u64,
    pub payload_bytes: usize,
    pub latency: Summary,
    pub deliveries_expected: u64,
    pub deliveries_received: u64,
    /// Expected minus received measured deliveries.
    pub missing: u64,
    /// Sequence gaps seen by subscribers (drops or conflation).
    pub gaps: u64,
    pub updates_per_s: f64,
    /// Server CPU seconds during the measured window.
    pub server_cpu_s: Option<f64>,
    pub server_cpu_s_per_m_updates: Option<f64>,
    /// The generator's own lag: scheduled → actual send time.
    pub send_lag: Summary,
    pub sender_writes: u64,
    pub subscriber_errors: u64,
}

/// A finished run: the row and the measured latency histogram.
pub struct RunOutcome {
    pub row: RunRow,
    pub hist: Histogram<u64>,
    pub recv: RecvResult,
    /// From the first subscriber's connect until every subscriber's
    /// subscription was acknowledged, in ms: connect, logon and subscribe
    /// of the whole population.
    pub ready_ms: f64,
}

/// The subscribers split over the run's receiver threads: subscriber `j`
/// goes to thread `j % threads`; only the first thread prints progress.
fn recv_plans(spec: &RunSpec) -> Vec<RecvPlan> {
    let threads = spec.recv_threads.clamp(1, spec.subscribers.max(1));
    (0..threads)
        .map(|t| {
            let subscriptions = (t..spec.subscribers)
                .step_by(threads)
                .map(|j| symbols_of(j, spec.symbols_per_subscriber, spec.symbols_total))
                .collect();
            let label = (spec.progress && t == 0)
                .then(|| format!("{:>9} {:<12}", spec.name, spec.scenario));
            RecvPlan {
                target: spec.target,
                addr: spec.addr,
                subscriptions,
                symbols_total: spec.symbols_total,
                label,
                run_s: spec.warmup_s + spec.duration_s,
                in_bytes: spec.recv_in_bytes,
                rx_stamps: spec.rx_stamps,
                next_tick_ns: u64::from(spec.symbols_total.max(1)) * 1_000_000_000
                    / spec.rate_per_s.max(1),
            }
        })
        .collect()
}

fn send_plan(spec: &RunSpec) -> SendPlan {
    SendPlan {
        target: spec.target,
        addr: spec.feed_addr,
        rate_per_s: spec.rate_per_s,
        symbols_total: spec.symbols_total,
        batch_max: spec.batch_max,
        provider: spec.provider,
        token: spec.token.clone(),
    }
}

/// Waits (bounded) until `cond` holds, polling every millisecond.
pub fn wait_for(timeout_ms: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = monotonic_ns() + timeout_ms * 1_000_000;
    while !cond() {
        if monotonic_ns() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

fn sleep_until_mono(t_ns: u64) {
    let now = monotonic_ns();
    if t_ns > now {
        std::thread::sleep(Duration::from_nanos(t_ns - now));
    }
}

/// Hooks a scenario may run while the sender runs (the herd uses them).
pub trait DuringRun {
    /// Called once the measured window has started; may block. Returns
    /// when the sender should stop early (or let it run to the end).
    fn during(&mut self, shared: &RecvShared, window: Window, clock: BenchClock);
}

/// No hook: a steady run.
pub struct Steady;

impl DuringRun for Steady {
    fn during(&mut self, _: &RecvShared, window: Window, _: BenchClock) {
        sleep_until_mono(window.end_ns);
    }
}

/// Runs one steady measurement.
pub fn run(spec: &RunSpec) -> anyhow::Result<RunOutcome> {
    run_with(spec, &mut Steady)
}

/// Runs one measurement with a hook during the measured window.
pub fn run_with(spec: &RunSpec, hook: &mut dyn DuringRun) -> anyhow::Result<RunOutcome> {
    if spec.rate_per_s == 0 || spec.duration_s == 0 {
        bail!("rate and duration must be positive");
    }
    let clock = BenchClock::new();
    let shared = RecvShared::default();
    shared.measure_to_ns.store(u64::MAX, Ordering::Relaxed);
    shared.measure_from_ns.store(u64::MAX, Ordering::Relaxed);
    let rplans = recv_plans(spec);
    let splan = send_plan(spec);
    std::thread::scope(|scope| {
        let t0 = monotonic_ns();
        let receivers = rplans
            .iter()
            .map(|rplan| {
                std::thread::Builder::new()
                    .name("bench-recv".into())
                    .spawn_scoped(scope, || {
                        generator_priority(spec)?;
                        recv::run(rplan, &shared, clock)
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let any_done = || receivers.iter().any(|r| r.is_finished());
        let all_ready = wait_for(spec.ready_timeout_ms, || {
            any_done() || shared.ready.load(Ordering::Relaxed) >= spec.subscribers
        });
        let ready_ms = (monotonic_ns() - t0) as f64 / 1e6;
        if !all_ready || any_done() {
            shared.stop.store(true, Ordering::Relaxed);
            recv::join(receivers).context("subscribers")?;
            bail!(
                "only {} of {} subscribers ready after {} ms",
                shared.ready.load(Ordering::Relaxed),
                spec.subscribers,
                spec.ready_timeout_ms
            );
        }
        let result = drive(spec, &splan, &shared, clock, hook);
        shared.stop.store(true, Ordering::Relaxed);
        let recv = recv::join(receivers).context("subscribers")?;
        let (send, cpu_s) = result?;
        let mut o = outcome(spec, send, recv, cpu_s);
        o.ready_ms = ready_ms;
        Ok(o)
    })
}

/// Puts the calling generator thread at the run's real-time priority.
fn generator_priority(spec: &RunSpec) -> std::io::Result<()> {
    match spec.rt_priority {
        Some(p) => {
            pricewire::runtime::affinity::set_current_fifo(p.get()).map_err(std::io::Error::other)
        }
        None => Ok(()),
    }
}

/// Runs the sender and the hook; returns the sender's result and the
/// server CPU seconds over the measured window.
fn drive(
    spec: &RunSpec,
    splan: &SendPlan,
    shared: &RecvShared,
    clock: BenchClock,
    hook: &mut dyn DuringRun,
) -> anyhow::Result<(SendResult, Option<f64>)> {
    let mut publisher = Publisher::connect(splan).context("publisher connect")?;
    let start = monotonic_ns() + 50_000_000;
    let window = Window {
        start_ns: start + spec.warmup_s * 1_000_000_000,
        end_ns: start + (spec.warmup_s + spec.duration_s) * 1_000_000_000,
    };
    shared
        .measure_from_ns
        .store(clock.to_wall(window.start_ns), Ordering::Relaxed);
    shared
        .measure_to_ns
        .store(clock.to_wall(window.end_ns), Ordering::Relaxed);
    let schedule = Schedule::new(start, spec.rate_per_s);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (send, cpu) = std::thread::scope(|scope| {
        let sender = std::thread::Builder::new()
            .name("bench-send".into())
            .spawn_scoped(scope, || {
                generator_priority(spec)?;
                send::run(
                    &mut publisher,
                    splan,
                    clock,
                    schedule,
                    window,
                    &stop,
                    &shared.sent,
                )
            })?;
        sleep_until_mono(window.start_ns);
        let cpu0 = spec.server_pid.and_then(process_cpu_s);
        hook.during(shared, window, clock);
        let cpu1 = spec.server_pid.and_then(process_cpu_s);
        stop.store(true, Ordering::Relaxed);
        let send = sender
            .join()
            .map_err(|_| anyhow::anyhow!("sender panicked"))?
            .context("sender")?;
        anyhow::Ok((send, cpu0.zip(cpu1).map(|(a, b)| b - a)))
    })?;
    let expected: u64 = expected_deliveries(spec, &send);
    wait_for(spec.drain_grace_ms, || {
        shared.received.load(Ordering::Relaxed) >= expected
    });
    publisher.close();
    Ok((send, cpu))
}

fn expected_deliveries(spec: &RunSpec, send: &SendResult) -> u64 {
    (0..spec.subscribers)
        .flat_map(|j| symbols_of(j, spec.symbols_per_subscriber, spec.symbols_total))
        .map(|s| {
            send.measured_per_symbol
                .get(s as usize)
                .copied()
                .unwrap_or(0)
        })
        .sum()
}

fn outcome(
    spec: &RunSpec,
    send: SendResult,
    mut recv: RecvResult,
    cpu_s: Option<f64>,
) -> RunOutcome {
    let hist = std::mem::replace(&mut recv.phases[0], super::hist::latency_histogram());
    let expected = expected_deliveries(spec, &send);
    let secs = spec.duration_s as f64;
    let updates = recv.received_measured as f64;
    let row = RunRow {
        target: spec.target,
        name: spec.name.clone(),
        scenario: spec.scenario.clone(),
        rate_target_per_s: spec.rate_per_s,
        rate_achieved_per_s: send.sent_measured as f64 / secs,
        subscribers: spec.subscribers,
        symbols_per_subscriber: spec.symbols_per_subscriber,
        symbols_total: spec.symbols_total,
        duration_s: spec.duration_s,
        payload_bytes: super::target::PAYLOAD_LEN,
        latency: summarize(&hist),
        deliveries_expected: expected,
        deliveries_received: recv.received_measured,
        missing: expected.saturating_sub(recv.received_measured),
        gaps: recv.gaps,
        updates_per_s: updates / secs,
        server_cpu_s: cpu_s,
        server_cpu_s_per_m_updates: cpu_s.filter(|_| updates > 0.0).map(|c| c / (updates / 1e6)),
        send_lag: summarize(&send.lag),
        sender_writes: send.writes,
        subscriber_errors: recv.errors,
    };
    // Put the measured histogram back for callers that read phases.
    recv.phases[0] = hist.clone();
    RunOutcome {
        row,
        hist,
        recv,
        ready_ms: 0.0,
    }
}

/// Result of a saturation sweep for one target.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SweepResult {
    pub target: Target,
    pub name: String,
    /// The sweep's label (`sweep`, or `sweep-r<k>` for round k of a
    /// repeated sweep); its steps are labelled `<label>-<rate>`.
    pub scenario: String,
    pub p99_threshold_us: u64,
    /// Highest rate whose step passed (p99 under the threshold, under 1 %
    /// missing, at least 95 % of the rate achieved); 0 if none passed.
    pub max_sustainable_rate_per_s: u64,
    /// The lowest failing step's rate and why it failed: with the
    /// maximum, the bracket the true maximum lies in.
    pub failed_at_rate_per_s: Option<u64>,
    pub failed_because: Option<String>,
    /// Every step's rate, in the order tried (the ladder, then the
    /// bisection steps).
    pub rates_tried: Vec<u64>,
}

/// Why a sweep step fails, if it does. A step whose own send lag (the
/// generator's, not the target's) is over half the threshold says so:
/// the generator, not the target, was the limit.
pub fn step_failure(row: &RunRow, p99_threshold_us: u64) -> Option<String> {
    if row.latency.p99_ns > p99_threshold_us * 1_000 {
        let lag = row.send_lag.p99_ns / 1_000;
        let bound = if lag * 2 > p99_threshold_us {
            format!(" (generator send lag p99 {lag} us: generator-bound)")
        } else {
            String::new()
        };
        return Some(format!("p99 {} us{bound}", row.latency.p99_ns / 1_000));
    }
    if row.missing * 100 > row.deliveries_expected {
        return Some(format!(
            "{} of {} missing",
            row.missing, row.deliveries_expected
        ));
    }
    if row.rate_achieved_per_s < row.rate_target_per_s as f64 * 0.95 {
        return Some(format!("achieved {:.0}/s", row.rate_achieved_per_s));
    }
    None
}

/// Whether a run's label is a sweep's or a sweep step's: such runs are
/// never pooled, paired or plotted with the steady runs (a sweep has its
/// own report).
pub fn is_sweep_step(label: &str) -> bool {
    label.starts_with("sweep")
}

/// A sweep's label: the run's own label if it starts with `sweep`
/// (`sweep`, `sweep-r2`), else `sweep-<label>`, so summaries of steady
/// runs can leave every sweep step out by its prefix.
pub fn sweep_label(label: &str) -> String {
    if is_sweep_step(label) {
        label.to_string()
    } else {
        format!("sweep-{label}")
    }
}

/// How a sweep climbs: from `start_per_s` by `factor` per step until a
/// step fails or `max_per_s` (the last step) passes, then `refine`
/// bisection steps (geometric midpoints) between the highest passing and
/// the lowest failing rate, so the maximum is known to within
/// `factor^(1/2^refine)` (1.5 and 3 steps: 5 %) rather than to within one
/// step of the ladder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ladder {
    pub start_per_s: u64,
    pub factor: f64,
    pub max_per_s: u64,
    pub refine: u32,
}

/// Where a sweep's search ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bracket {
    /// Highest rate that passed; 0 if none did.
    pub max_pass_per_s: u64,
    /// Lowest rate that failed, and why; `None` if none did.
    pub min_fail_per_s: Option<u64>,
    pub failed_because: Option<String>,
    /// Rates tried, in order.
    pub tried: Vec<u64>,
}

impl Bracket {
    /// `rate` failed because of `why`: the lowest failure so far.
    fn failed(&mut self, rate: u64, why: String) {
        self.min_fail_per_s = Some(rate);
        self.failed_because = Some(why);
    }
}

/// The sweep's search: `step(rate)` runs one step and says why it failed,
/// if it did. Below the first failure the ladder climbs; after it the
/// bracket is halved (geometrically) `refine` times. A sweep whose first
/// step fails is not refined: there is no passing rate to bracket.
pub fn search(
    ladder: Ladder,
    mut step: impl FnMut(u64) -> anyhow::Result<Option<String>>,
) -> anyhow::Result<Bracket> {
    let mut b = Bracket::default();
    let mut rate = ladder.start_per_s.max(1);
    while rate <= ladder.max_per_s {
        b.tried.push(rate);
        if let Some(why) = step(rate)? {
            b.failed(rate, why);
            break;
        }
        b.max_pass_per_s = rate;
        // At least one more tick per second, so a factor of 1.05 still
        // climbs from a start of 1; the last step is the ceiling itself.
        let next = (((rate as f64) * ladder.factor.max(1.05)) as u64).max(rate + 1);
        rate = if next > ladder.max_per_s && rate < ladder.max_per_s {
            ladder.max_per_s
        } else {
            next
        };
    }
    for _ in 0..ladder.refine {
        let (Some(hi), lo) = (b.min_fail_per_s, b.max_pass_per_s) else {
            break;
        };
        if lo == 0 {
            break;
        }
        let mid = ((lo as f64) * (hi as f64)).sqrt().round() as u64;
        if mid <= lo || mid >= hi {
            break; // the bracket is down to adjacent rates
        }
        b.tried.push(mid);
        match step(mid)? {
            None => b.max_pass_per_s = mid,
            Some(why) => b.failed(mid, why),
        }
    }
    Ok(b)
}

/// Runs the sweep's [`search`] against a target: each step is a run at
/// that rate, `each` sees every run. A failing step is run again up to
/// `retries` times and fails only if every try fails, so one stall of a
/// shared machine does not end the sweep. Steps are labelled
/// `<label>-<rate>`, the label always starting with `sweep`
/// ([`sweep_label`]).
pub fn sweep(
    spec: &RunSpec,
    p99_threshold_us: u64,
    ladder: Ladder,
    retries: u32,
    mut each: impl FnMut(&RunOutcome),
) -> anyhow::Result<SweepResult> {
    let label = sweep_label(&spec.scenario);
    let b = search(ladder, |rate| {
        let mut step = spec.clone();
        step.rate_per_s = rate;
        step.scenario = format!("{label}-{rate}");
        let mut failure = None;
        for _ in 0..=retries {
            let outcome = run(&step)?;
            each(&outcome);
            failure = step_failure(&outcome.row, p99_threshold_us);
            if failure.is_none() {
                break;
            }
        }
        Ok(failure)
    })?;
    Ok(SweepResult {
        target: spec.target,
        name: spec.name.clone(),
        scenario: label,
        p99_threshold_us,
        max_sustainable_rate_per_s: b.max_pass_per_s,
        failed_at_rate_per_s: b.min_fail_per_s,
        failed_because: b.failed_because,
        rates_tried: b.tried,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(p99_us: u64, lag_p99_us: u64, missing: u64, achieved: f64) -> RunRow {
        RunRow {
            target: Target::Floor,
            name: "floor".into(),
            scenario: "sweep-1000".into(),
            rate_target_per_s: 1000,
            rate_achieved_per_s: achieved,
            subscribers: 1,
            symbols_per_subscriber: 1,
            symbols_total: 1,
            duration_s: 1,
            payload_bytes: 76,
            latency: Summary {
                p99_ns: p99_us * 1_000,
                ..Summary::default()
            },
            deliveries_expected: 1000,
            deliveries_received: 1000 - missing,
            missing,
            gaps: 0,
            updates_per_s: 1000.0,
            server_cpu_s: None,
            server_cpu_s_per_m_updates: None,
            send_lag: Summary {
                p99_ns: lag_p99_us * 1_000,
                ..Summary::default()
            },
            sender_writes: 1000,
            subscriber_errors: 0,
        }
    }

    fn ladder(refine: u32) -> Ladder {
        Ladder {
            start_per_s: 10_000,
            factor: 1.5,
            max_per_s: 2_000_000,
            refine,
        }
    }

    /// A target that holds every rate up to `limit` and fails above it.
    fn up_to(limit: u64) -> impl FnMut(u64) -> anyhow::Result<Option<String>> {
        move |rate| Ok((rate > limit).then(|| format!("p99 over at {rate}")))
    }

    #[test]
    fn the_ladder_alone_brackets_to_one_step() {
        let b = search(ladder(0), up_to(1_000_000)).unwrap();
        assert_eq!(b.max_pass_per_s, 864_960);
        assert_eq!(b.min_fail_per_s, Some(1_297_440));
        assert_eq!(b.failed_because.as_deref(), Some("p99 over at 1297440"));
        assert_eq!(
            b.tried,
            [
                10_000, 15_000, 22_500, 33_750, 50_625, 75_937, 113_905, 170_857, 256_285, 384_427,
                576_640, 864_960, 1_297_440
            ]
        );
    }

    #[test]
    fn refinement_halves_the_bracket_each_step() {
        let b = search(ladder(3), up_to(1_000_000)).unwrap();
        // √(864,960 · 1,297,440) = 1,059,355 fails; √(864,960 · 1,059,355)
        // = 957,235 passes; √(957,235 · 1,059,355) = 1,007,001 fails.
        assert_eq!(&b.tried[13..], [1_059_355, 957_235, 1_007_001]);
        assert_eq!(b.max_pass_per_s, 957_235);
        assert_eq!(b.min_fail_per_s, Some(1_007_001));
        assert_eq!(b.failed_because.as_deref(), Some("p99 over at 1007001"));
        let bracket = 1_007_001.0 / 957_235.0;
        assert!(bracket < 1.5f64.powf(1.0 / 8.0) + 1e-9, "{bracket}");
        // The true limit is always inside the bracket, for any limit.
        for limit in [10_000, 12_345, 99_999, 500_000, 1_900_000] {
            let b = search(ladder(4), up_to(limit)).unwrap();
            let hi = b.min_fail_per_s.unwrap();
            assert!(b.max_pass_per_s <= limit && limit < hi, "{limit}: {b:?}");
            // Rates are whole ticks per second: allow one in 10,000.
            let widest = 1.5f64.powf(1.0 / 16.0) * 1.0001;
            assert!(
                hi as f64 / b.max_pass_per_s as f64 <= widest,
                "{limit}: {b:?}"
            );
        }
    }

    #[test]
    fn sweeps_without_a_bracket_are_not_refined() {
        // Every rate fails: nothing to bisect.
        let b = search(ladder(3), up_to(0)).unwrap();
        assert_eq!((b.max_pass_per_s, b.min_fail_per_s), (0, Some(10_000)));
        assert_eq!(b.tried, [10_000]);
        // Every rate passes up to the ceiling, which is tried itself: no
        // failure to bisect.
        let b = search(ladder(3), up_to(u64::MAX)).unwrap();
        assert_eq!((b.max_pass_per_s, b.min_fail_per_s), (2_000_000, None));
        assert_eq!(b.tried.len(), 15);
        assert_eq!(&b.tried[12..], [1_297_440, 1_946_160, 2_000_000]);
        // A limit between the last ladder step and the ceiling is bracketed.
        let b = search(ladder(2), up_to(1_990_000)).unwrap();
        assert_eq!(
            (b.max_pass_per_s, b.min_fail_per_s),
            (1_986_402, Some(2_000_000))
        );
        // A bracket of adjacent rates stops early.
        let tight = Ladder {
            start_per_s: 1,
            factor: 1.05,
            max_per_s: 100,
            refine: 5,
        };
        let b = search(tight, up_to(3)).unwrap();
        assert_eq!(b.tried, [1, 2, 3, 4]);
        assert_eq!((b.max_pass_per_s, b.min_fail_per_s), (3, Some(4)));
        // A step that cannot run ends the sweep with its error.
        let err = search(ladder(3), |rate| {
            if rate > 20_000 {
                anyhow::bail!("connect refused")
            }
            Ok(None)
        })
        .unwrap_err();
        assert!(err.to_string().contains("connect refused"));
    }

    #[test]
    fn sweep_step_passes_only_under_every_limit() {
        assert_eq!(step_failure(&row(900, 10, 0, 1000.0), 1000), None);
        let slow = step_failure(&row(1100, 10, 0, 1000.0), 1000).unwrap();
        assert!(slow.starts_with("p99 1100 us") && !slow.contains("generator"));
        let gen = step_failure(&row(1100, 600, 0, 1000.0), 1000).unwrap();
        assert!(gen.contains("generator-bound"), "{gen}");
        assert!(step_failure(&row(100, 10, 11, 1000.0), 1000)
            .unwrap()
            .contains("missing"));
        assert!(step_failure(&row(100, 10, 0, 900.0), 1000)
            .unwrap()
            .contains("achieved"));
    }
}
