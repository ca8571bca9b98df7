//! `serve` after start-up: the status report loop and the graceful shutdown.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::args::ServeArgs;
use super::record::close_recorder;
use super::Plan;
use crate::capture::RecorderHandle;
use crate::clock::{Clock, MonotonicClock};
use crate::ops::memory::MemoryReturn;
use crate::ops::metrics::SharedHistogram;
use crate::ops::shutdown::sleep_until;
use crate::ops::{standard_plan, Health, Registry, Shutdown, ShutdownHooks, StepResult};
use crate::runtime::latency::latency_histogram;
use crate::runtime::sys;
use crate::service::report::{line, Totals};
use crate::service::Service;

pub(super) fn report_loop(
    args: &ServeArgs,
    service: &Mutex<Option<Service>>,
    registry: &Registry,
    health: &Health,
    latency: &SharedHistogram,
    begin: &Receiver<()>,
    memory: &mut MemoryReturn,
) {
    let start = Instant::now();
    let interval = Duration::from_millis(args.report_interval_ms);
    let mut guard = service.lock().expect("service lock");
    let Some(svc) = guard.as_mut() else { return };
    let mut prev = Totals::read(&registry.series());
    let mut last = Instant::now();
    let mut hist = latency_histogram();
    svc.latency.request();
    drop(guard);
    loop {
        health.beat();
        if args.duration_s > 0 && start.elapsed() >= Duration::from_secs(args.duration_s) {
            break;
        }
        if begin.recv_timeout(Duration::from_millis(100)).is_ok() {
            break;
        }
        let mut guard = service.lock().expect("service lock");
        let Some(svc) = guard.as_mut() else { return };
        if svc.pipeline.feeds_finished() && !args.no_synthetic {
            break;
        }
        let connections = svc.gateway.as_ref().map_or(0, |g| g.connections());
        if memory.observe(connections as usize, MonotonicClock.now_ns()) {
            let released = sys::return_free_memory();
            tracing::debug!(
                connections,
                released,
                "returned free memory after departures"
            );
        }
        if last.elapsed() < interval {
            continue;
        }
        svc.latency.collect(&mut hist, Duration::from_millis(100));
        let now = Totals::read(&registry.series());
        println!("{}", line(&prev, &now, &hist, last.elapsed().as_secs_f64()));
        let _ = latency.try_merge_from(&mut hist);
        hist.reset();
        svc.latency.request();
        prev = now;
        last = Instant::now();
    }
}

/// The graceful shutdown, in order (see docs/operations.md).
pub(super) fn shutdown(
    plan: &Plan,
    health: &Arc<Health>,
    service: &Arc<Mutex<Option<Service>>>,
    recorder: &Arc<Mutex<Option<RecorderHandle>>>,
    clock: &dyn Clock,
    forced: &AtomicBool,
) -> i32 {
    let with = |f: fn(&mut Service) -> bool| -> crate::ops::shutdown::StepFn {
        let s = service.clone();
        Box::new(move |_deadline: u64, _now: u64| {
            let mut g = s.lock().expect("service lock");
            match g.as_mut().map(f) {
                Some(false) => StepResult::NotYet,
                _ => StepResult::Done,
            }
        })
    };
    let mut disconnect_sent = false;
    let s = service.clone();
    let disconnect: crate::ops::shutdown::StepFn = Box::new(move |_d: u64, _n: u64| {
        let g = s.lock().expect("service lock");
        let Some(svc) = g.as_ref() else {
            return StepResult::Done;
        };
        if !disconnect_sent {
            svc.disconnect_all();
            disconnect_sent = true;
        }
        if svc.open_connections() == 0 {
            StepResult::Done
        } else {
            StepResult::NotYet
        }
    });
    let hooks = ShutdownHooks {
        stop_accepting: with(|svc| {
            svc.stop_accepting();
            true
        }),
        finish_in_flight: with(|svc| svc.requests_in_flight() == 0),
        flush_outbound: with(|svc| svc.outbound_bytes() == 0),
        disconnect_subscribers: disconnect,
        close_recorder: close_recorder(service.clone(), recorder.clone()),
    };
    let plan = standard_plan(health.clone(), plan.ops.budgets, hooks);
    let report = Shutdown::run(plan, clock, &mut sleep_until(MonotonicClock), forced);
    for cut in report.cut() {
        tracing::warn!(step = cut, "shutdown step cut: budget exhausted");
    }
    report.exit_code
}
