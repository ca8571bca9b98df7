//! `serve --record`: the recorder's start, metrics and close.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::args::ServeArgs;
use crate::capture::{Recorder, RecorderConfig, RecorderHandle, RecorderTap};
use crate::cli::ArgsError;
use crate::config::Config;
use crate::ops::metrics::catalogue;
use crate::ops::{Registry, StepResult};
use crate::service::Service;

pub(super) fn start_recorder(
    args: &ServeArgs,
    config: &Config,
    supervisor: &crate::runtime::Supervisor,
) -> Result<(Option<RecorderHandle>, Option<RecorderTap>), ArgsError> {
    let Some(dir) = &args.record else {
        return Ok((None, None));
    };
    if args.record_segment_mib == 0 {
        return Err(ArgsError::flag("--record-segment-mib", "at least 1"));
    }
    let max = crate::capture::recorder::FLUSH_INTERVAL_MS_MAX;
    if args.record_flush_ms == 0 || args.record_flush_ms > max {
        return Err(ArgsError::value(
            "--record-flush-ms",
            args.record_flush_ms,
            format!("must be 1..={max}"),
        ));
    }
    let cfg = RecorderConfig {
        ring_capacity: args.record_ring,
        segment_bytes_max: args.record_segment_mib << 20,
        flush_interval_ms: args.record_flush_ms,
        fsync: args.record_fsync,
        source: format!("pricewire serve (seed {})", args.seed),
        supervisor: supervisor.clone(),
        ..RecorderConfig::default()
    };
    let (handle, tap) = Recorder::spawn(dir, &config.table, cfg)
        .map_err(|e| ArgsError::refused(format!("--record {}", dir.display()), e))?;
    tracing::info!(dir = %dir.display(), "recording every inbound tick");
    Ok((Some(handle), Some(tap)))
}

pub(super) fn register_recorder(
    r: &Registry,
    rec: Option<&RecorderHandle>,
) -> Result<(), crate::ops::OpsError> {
    let Some(rec) = rec else { return Ok(()) };
    let (a, b, c) = (
        rec.stats().clone(),
        rec.stats().clone(),
        rec.stats().clone(),
    );
    r.register_counter_fn(catalogue::RECORDER_WRITTEN_TICKS, &[], move || {
        a.recorded.load(Ordering::Relaxed)
    })?;
    let d = rec.stats().clone();
    r.register_gauge_fn(catalogue::RECORDER_BUFFERED_TICKS, &[], move || {
        d.buffered.load(Ordering::Relaxed) as f64
    })?;
    r.register_counter_fn(catalogue::RECORDER_LOST_TICKS, &[], move || {
        b.lost.load(Ordering::Relaxed) + b.dropped_io.load(Ordering::Relaxed)
    })?;
    // Lag in seconds: ticks waiting in the recorder ring divided by the
    // recording rate measured between two scrapes.
    let last = Mutex::new((crate::clock::monotonic_ns(), 0u64));
    r.register_gauge_fn(catalogue::RECORDER_LAG, &[], move || {
        let now = crate::clock::monotonic_ns();
        let recorded = c.recorded.load(Ordering::Relaxed);
        let mut l = last.lock().expect("lag lock");
        let rate = (recorded - l.1) as f64 / ((now - l.0) as f64 / 1e9).max(1e-3);
        *l = (now, recorded);
        c.lag.load(Ordering::Relaxed) as f64 / rate.max(1.0)
    })
}

/// Stops the feeds and the engine (so nothing more reaches the recorder
/// ring), then drains, flushes and fsyncs the capture.
pub(super) fn close_recorder(
    service: Arc<Mutex<Option<Service>>>,
    recorder: Arc<Mutex<Option<RecorderHandle>>>,
) -> crate::ops::shutdown::StepFn {
    Box::new(move |_d: u64, _n: u64| {
        let Some(rec) = recorder.lock().expect("recorder lock").take() else {
            return StepResult::Done;
        };
        if let Some(svc) = service.lock().expect("service lock").as_mut() {
            svc.stop_feeds();
        }
        let totals = rec.stop();
        tracing::info!(
            recorded = totals.stats.recorded,
            lost = totals.stats.lost,
            segments = totals.paths.len(),
            error = ?totals.error,
            "capture closed"
        );
        StepResult::Done
    })
}
