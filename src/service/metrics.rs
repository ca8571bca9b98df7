//! The service's metrics: every counter and gauge of the pipeline, the
//! gateway, the request path, the bus and the overload controls, registered
//! as read-on-scrape closures over the stages' shared stats.

use std::sync::Arc;

use super::Service;
use crate::feed::ingest;
use crate::gateway::{Gateway, ShardStats};
use crate::ops::metrics::catalogue as m;
use crate::ops::{OpsError, Registry};
use crate::overload::stats::OverloadStats;
use crate::requests::service::RequestStats;

impl Service {
    /// Registers every counter of the service with the metrics registry.
    pub fn register_metrics(&self, r: &Registry) -> Result<(), OpsError> {
        self.register_pipeline(r)?;
        if let Some(g) = &self.gateway {
            register_gateway(r, g)?;
            register_requests(r, g)?;
            if let Some(b) = g.shared.refdata.breaker_stats() {
                register_breaker(r, "redis", b)?;
            }
            crate::refdata::metrics::register(r, &g.shared.refdata)?;
        }
        if let Some(fix) = &self.fix {
            for p in &fix.providers {
                register_breaker(r, &format!("fix_{}", p.name), p.breaker.clone())?;
            }
            let wall = Arc::new(crate::feed::fix::WallClock);
            crate::feed::fix::metrics::register(r, fix, wall)?;
        }
        if let Some(b) = &self.bus {
            register_bus(r, b.stats())?;
        }
        let gateway_tls = self
            .gateway
            .as_ref()
            .and_then(|g| g.shared.cfg.tls.as_ref());
        let ingest_tls = self.ingest.as_ref().and_then(|i| i.tls.as_ref());
        if let Some(tls) = gateway_tls {
            super::tls_metrics::register(r, tls, true)?;
        }
        if let Some(tls) = ingest_tls {
            super::tls_metrics::register(r, tls, false)?;
        }
        let proxy = self
            .gateway
            .as_ref()
            .and_then(|g| g.shared.cfg.proxy.as_ref());
        if let Some(p) = proxy {
            super::tls_metrics::register_proxy(r, p)?;
        }
        register_overload(r, &self.overload)
    }

    fn register_pipeline(&self, r: &Registry) -> Result<(), OpsError> {
        if let Some(i) = &self.ingest {
            super::auth_metrics::register(r, &i.auth)?;
            let s = i.stats.clone();
            let faults = &[("listener", "feed"), ("stage", "ingest")];
            r.register_counter_fn(m::CONNECTION_FAULTS, faults, move || {
                s.faults.load(std::sync::atomic::Ordering::Relaxed)
            })?;
            for why in ingest::quotes::Refusal::ALL {
                let s = i.stats.clone();
                r.register_counter_fn(
                    m::DROPS,
                    &[("reason", &format!("{}_quote_ingest", why.name()))],
                    move || s.refused(why).load(std::sync::atomic::Ordering::Relaxed),
                )?;
            }
        }
        let h = &self.pipeline.handles;
        for (name, f) in &h.feeds {
            let (a, b, c) = (f.clone(), f.clone(), f.clone());
            // The FIX feed carries every FIX LP: its ticks are counted per
            // configured LP name by the FIX families instead.
            if !(name == "fix" && self.fix.is_some()) {
                r.register_counter_fn(m::TICKS_RECEIVED, &[("provider", name)], move || {
                    a.pushed.get()
                })?;
            }
            r.register_counter_fn(
                m::DROPS,
                &[("reason", &format!("feed_ring_full_{name}"))],
                move || b.dropped.get(),
            )?;
            r.register_gauge_fn(
                m::RING_OCCUPANCY,
                &[("ring", &format!("feed_{name}"))],
                move || c.ring_occupancy.get() as f64,
            )?;
        }
        let e = h.engine.clone();
        r.register_counter_fn(m::PRICES_PUBLISHED, &[], move || e.published.get())?;
        let drops = [
            ("invalid_tick", 0usize),
            ("spike_rejected", 1),
            ("stale_republish", 2),
        ];
        for (reason, which) in drops {
            let e = h.engine.clone();
            r.register_counter_fn(m::DROPS, &[("reason", reason)], move || match which {
                0 => e.invalid.get(),
                1 => e.spikes_rejected.get(),
                _ => e.stale.get(),
            })?;
        }
        for (i, f) in h.fanout.iter().enumerate() {
            let (a, b) = (f.clone(), f.clone());
            let ring = format!("shard{i}");
            r.register_gauge_fn(m::RING_OCCUPANCY, &[("ring", &ring)], move || {
                a.ring_occupancy.get() as f64
            })?;
            r.register_counter_fn(
                m::CONFLATIONS,
                &[("reason", &format!("engine_ring_full_{ring}"))],
                move || b.conflated.get(),
            )?;
        }
        Ok(())
    }
}

/// One shard's loop-lag series (`gateway::lag`).
fn register_lag(r: &Registry, shard: &str, s: &Arc<ShardStats>) -> Result<(), OpsError> {
    let labels = [("shard", shard)];
    let (a, b, c, d, e) = (s.clone(), s.clone(), s.clone(), s.clone(), s.clone());
    r.register_histogram_fn(m::SHARD_LOOP_LAG, &labels, move || a.lag.snapshot())?;
    r.register_gauge_fn(m::SHARD_LOOP_LAG_WINDOW, &labels, move || {
        b.lag.windowed_ns.get() as f64 * 1e-9
    })?;
    r.register_gauge_fn(m::SHARD_LAGGING, &labels, move || {
        c.lag.lagging.get() as f64
    })?;
    r.register_counter_fn(m::SHARD_LAG_EPISODES, &labels, move || d.lag.episodes.get())?;
    let (f, g, h, k) = (s.clone(), s.clone(), s.clone(), s.clone());
    r.register_gauge_fn(m::SHARD_LAG_SHEDDING, &labels, move || {
        f.lag.shedding.get() as f64
    })?;
    r.register_gauge_fn(m::SHARD_CPU_RATIO, &labels, move || {
        g.lag.cpu_permille.get() as f64 / 1000.0
    })?;
    r.register_gauge_fn(m::SHARD_RUN_WAIT_RATIO, &labels, move || {
        h.lag.wait_permille.get() as f64 / 1000.0
    })?;
    r.register_counter_fn(m::SHARD_LAG_LOGONS_PACED, &labels, move || {
        k.lag.logons_paced.get()
    })?;
    let reason = format!("loop_lag_shard{shard}");
    r.register_counter_fn(m::CONFLATIONS, &[("reason", &reason)], move || {
        e.lag.conflated.get()
    })
}

/// One shard's maximum-update-frequency counters (`gateway::pacer`) and
/// its stale-while-behind ones (`gateway::behind`).
fn register_paced(r: &Registry, shard: &str, s: &Arc<ShardStats>) -> Result<(), OpsError> {
    type Read = fn(&ShardStats) -> u64;
    let events: [(&str, Read); 3] = [
        ("held", |s| s.paced_held.get()),
        ("released", |s| s.paced_released.get()),
        ("conflated", |s| s.paced_conflated.get()),
    ];
    for (event, read) in events {
        let s = s.clone();
        r.register_counter_fn(
            m::PACED_PRICES,
            &[("shard", shard), ("event", event)],
            move || read(&s),
        )?;
    }
    let behind: [(&str, Read); 2] = [
        ("flagged", |s| s.behind_flagged.get()),
        ("restated", |s| s.behind_restated.get()),
    ];
    for (event, read) in behind {
        let s = s.clone();
        r.register_counter_fn(
            m::TABLE_BEHIND_PRICES,
            &[("shard", shard), ("event", event)],
            move || read(&s),
        )?;
    }
    Ok(())
}

fn register_gateway(r: &Registry, g: &Gateway) -> Result<(), OpsError> {
    for (i, s) in g.shard_stats.iter().enumerate() {
        register_shard(r, i, s)?;
    }
    super::auth_metrics::register(r, &g.shared.auth)?;
    let (a, b) = (g.shared.stats.clone(), g.shared.stats.clone());
    r.register_counter_fn(m::CONNECTIONS_ACCEPTED, &[("shard", "all")], move || {
        crate::gateway::GatewayStats::get(&a.accepted)
    })?;
    r.register_counter_fn(
        m::SLOW_CONSUMER_DISCONNECTS,
        &[("shard", "all")],
        move || crate::gateway::GatewayStats::get(&b.disconnects_slow_consumer),
    )?;
    let f = g.shared.stats.clone();
    r.register_counter_fn(m::ADMISSION_REJECTS, &[("stage", "fd_limit")], move || {
        crate::gateway::GatewayStats::get(&f.refused_fd)
    })?;
    let (a, b) = (g.shared.stats.clone(), g.shared.stats.clone());
    let faults = &[("listener", "subscriber"), ("stage", "acceptor")];
    r.register_counter_fn(m::CONNECTION_FAULTS, faults, move || {
        crate::gateway::GatewayStats::get(&a.faults_acceptor)
    })?;
    let faults = &[("listener", "subscriber"), ("stage", "shard")];
    r.register_counter_fn(m::CONNECTION_FAULTS, faults, move || {
        crate::gateway::GatewayStats::get(&b.faults_shard)
    })?;
    let t = g.shared.table.clone();
    r.register_gauge_fn(m::ENGINE_BEHIND, &[], move || {
        t.progress().lag_ns(crate::clock::monotonic_ns()) as f64 / 1e9
    })?;
    register_session_ends(r, &g.shared.stats)
}

/// `pricewire_session_disconnects_total{reason}` (liveness and floods).
fn register_session_ends(
    r: &Registry,
    st: &Arc<crate::gateway::GatewayStats>,
) -> Result<(), OpsError> {
    use crate::gateway::GatewayStats as G;
    type Read = fn(&G) -> u64;
    let reasons: [(&str, Read); 4] = [
        ("idle_timeout", |s| {
            G::get(&s.disconnects_idle).saturating_sub(G::get(&s.disconnects_logon_timeout))
        }),
        ("logon_timeout", |s| G::get(&s.disconnects_logon_timeout)),
        ("logon_verdict_late", |s| G::get(&s.logons_verdict_late)),
        ("message_flood", |s| G::get(&s.disconnects_flood)),
    ];
    for (reason, read) in reasons {
        let s = st.clone();
        r.register_counter_fn(m::SESSION_DISCONNECTS, &[("reason", reason)], move || {
            read(&s)
        })?;
    }
    Ok(())
}

/// One shard's counters and gauges.
fn register_shard(r: &Registry, i: usize, s: &Arc<ShardStats>) -> Result<(), OpsError> {
    let shard = i.to_string();
    let (a, b, c) = (s.clone(), s.clone(), s.clone());
    r.register_counter_fn(m::PRICE_UPDATES_SENT, &[("shard", &shard)], move || {
        a.prices_out.get()
    })?;
    let w = s.clone();
    r.register_counter_fn(m::SOCKET_WRITES, &[("shard", &shard)], move || {
        w.socket_writes.get()
    })?;
    r.register_gauge_fn(
        m::CONNECTIONS,
        &[("shard", &shard), ("state", "open")],
        move || b.connections.get() as f64,
    )?;
    r.register_gauge_fn(
        m::CONNECTIONS,
        &[("shard", &shard), ("state", "conflating")],
        move || c.conflating_now.get() as f64,
    )?;
    let e = s.clone();
    r.register_counter_fn(m::HOSTED_INTERLEAVES, &[("shard", &shard)], move || {
        e.interleaves.get()
    })?;
    let f = s.clone();
    r.register_gauge_fn(m::SHARD_BUSY, &[("shard", &shard)], move || {
        f.busy_permille.get() as f64 / 1000.0
    })?;
    let h = s.clone();
    r.register_counter_fn(m::SHARD_STALLS, &[("shard", &shard)], move || {
        h.stalls.get()
    })?;
    let k = s.clone();
    r.register_gauge_fn(m::SHARD_MAX_STALL, &[("shard", &shard)], move || {
        k.max_stall_ms.get() as f64 / 1000.0
    })?;
    register_lag(r, &shard, s)?;
    register_paced(r, &shard, s)?;
    register_moves(r, &shard, s)?;
    let d = s.clone();
    r.register_counter_fn(
        m::CONFLATIONS,
        &[("reason", &format!("slow_subscriber_shard{i}"))],
        move || d.conflated.get(),
    )?;
    let e = s.clone();
    r.register_counter_fn(
        m::CONFLATIONS,
        &[("reason", &format!("stale_ring_shard{i}"))],
        move || e.stale.get(),
    )?;
    let q = s.clone();
    r.register_counter_fn(
        m::CONFLATIONS,
        &[("reason", &format!("stale_queue_shard{i}"))],
        move || q.stale_dropped.get(),
    )?;
    let g = s.clone();
    r.register_counter_fn(
        m::CONFLATIONS,
        &[("reason", &format!("merged_shard{i}"))],
        move || g.merged.get(),
    )?;
    Ok(())
}

/// One shard's sessions moved and drained.
fn register_moves(r: &Registry, shard: &str, s: &Arc<ShardStats>) -> Result<(), OpsError> {
    let p = s.clone();
    let h = s.clone();
    r.register_histogram_fn(m::PRICE_HANDOFF_AGE, &[("shard", shard)], move || {
        h.handoff_age.snapshot()
    })?;
    r.register_histogram_fn(m::SESSION_MOVE_PAUSE, &[("shard", shard)], move || {
        p.move_pause.snapshot()
    })?;
    for (direction, out) in [("out", true), ("in", false)] {
        let g = s.clone();
        r.register_counter_fn(
            m::SESSIONS_MOVED,
            &[("shard", shard), ("direction", direction)],
            move || {
                if out {
                    g.sessions_moved_out.get()
                } else {
                    g.sessions_moved_in.get()
                }
            },
        )?;
    }
    for (outcome, moved) in [("moved", true), ("aborted", false)] {
        let g = s.clone();
        r.register_counter_fn(
            m::SESSION_DRAINS,
            &[("shard", shard), ("outcome", outcome)],
            move || {
                if moved {
                    g.drains_moved.get()
                } else {
                    g.drains_aborted.get()
                }
            },
        )?;
    }
    Ok(())
}

/// The bus thread's counters (`--role core|edge`).
fn register_bus(r: &Registry, stats: &Arc<crate::bus::BusStats>) -> Result<(), OpsError> {
    use crate::bus::BusStats;
    type Read = fn(&BusStats) -> u64;
    let events: [(&str, Read); 22] = [
        ("published", |s| s.published.get()),
        ("publish_error", |s| s.publish_errors.get()),
        ("received", |s| s.received.get()),
        ("last_value_loaded", |s| s.last_values_loaded.get()),
        ("duplicate_dropped", |s| s.duplicates_dropped.get()),
        ("gap_flagged", |s| s.gaps_flagged.get()),
        ("decode_error", |s| s.decode_errors.get()),
        ("disconnect", |s| s.disconnects.get()),
        ("reload", |s| s.reloads.get()),
        ("standby_discarded", |s| s.standby_discarded.get()),
        ("lease_taken", |s| s.leases_taken.get()),
        ("lease_lost", |s| s.leases_lost.get()),
        ("stale_epoch_dropped", |s| s.stale_epoch_dropped.get()),
        ("stale_flagged", |s| s.stale_flagged.get()),
        ("stale_cleared", |s| s.stale_cleared.get()),
        ("lease_resigned", |s| s.leases_resigned.get()),
        ("lease_bucket_recreated", |s| {
            s.lease_buckets_recreated.get()
        }),
        ("stream_started", |s| s.streams_started.get()),
        ("stream_adopted", |s| s.streams_adopted.get()),
        ("superseded", |s| s.superseded.get()),
        ("held_unknown", |s| s.held_unknown.get()),
        ("unbacked_flagged", |s| s.unbacked_flagged.get()),
    ];
    for (event, read) in events {
        let s = stats.clone();
        r.register_counter_fn(m::BUS_MESSAGES, &[("event", event)], move || read(&s))?;
    }
    let beats: [(&str, Read); 5] = [
        ("sent", |s| s.heartbeats_sent.get()),
        ("send_error", |s| s.heartbeat_errors.get()),
        ("received", |s| s.heartbeats_received.get()),
        ("stale_epoch_dropped", |s| s.heartbeat_stale_epoch.get()),
        ("refused", |s| s.heartbeat_refused.get()),
    ];
    for (event, read) in beats {
        let s = stats.clone();
        r.register_counter_fn(m::BUS_HEARTBEATS, &[("event", event)], move || read(&s))?;
    }
    let s = stats.clone();
    r.register_gauge_fn(m::BUS_LAST_HEARTBEAT_AGE, &[], move || {
        s.last_heartbeat_age_s(crate::clock::monotonic_ns())
    })?;
    for reason in crate::bus::security::ConnectFailures::REASONS {
        let s = stats.clone();
        r.register_counter_fn(m::BUS_CONNECT_FAILURES, &[("reason", reason)], move || {
            s.connect_failures.get(reason)
        })?;
    }
    let s = stats.clone();
    r.register_counter_fn(m::BUS_PERMISSION_DENIED, &[], move || {
        s.permission_denied.get()
    })?;
    let s = stats.clone();
    r.register_gauge_fn(m::BUS_LEADER, &[], move || s.leader.get() as f64)?;
    let s = stats.clone();
    r.register_gauge_fn(m::BUS_EPOCH, &[], move || s.epoch.get() as f64)?;
    let s = stats.clone();
    r.register_gauge_fn(m::BUS_CONNECTED, &[], move || s.connected.get() as f64)
}

/// Exports one breaker as `dependency` (state one-hot, rates, refusals).
pub(crate) fn register_breaker(
    r: &Registry,
    dependency: &str,
    stats: Arc<crate::resilience::breaker::BreakerStats>,
) -> Result<(), OpsError> {
    use crate::resilience::breaker::BreakerState;
    for state in BreakerState::ALL {
        let s = stats.clone();
        let label = state.name();
        r.register_gauge_fn(
            m::BREAKER_STATE,
            &[("dependency", dependency), ("state", label)],
            move || f64::from(u8::from(s.snapshot().state == state)),
        )?;
    }
    let (a, b, c) = (stats.clone(), stats.clone(), stats);
    // -1 (not enough calls to decide) passes through as -1, not 0: a rate
    // that "falls" to 0 mid-outage would read as recovery.
    let ratio = |pct: f64| if pct < 0.0 { -1.0 } else { pct / 100.0 };
    r.register_gauge_fn(
        m::BREAKER_FAILURE_RATE,
        &[("dependency", dependency)],
        move || ratio(a.snapshot().failure_rate_pct),
    )?;
    r.register_gauge_fn(
        m::BREAKER_SLOW_CALL_RATE,
        &[("dependency", dependency)],
        move || ratio(b.snapshot().slow_call_rate_pct),
    )?;
    r.register_counter_fn(
        m::BREAKER_NOT_PERMITTED,
        &[("dependency", dependency)],
        move || c.snapshot().not_permitted_calls,
    )
}

fn register_requests(r: &Registry, g: &Gateway) -> Result<(), OpsError> {
    let Some(st) = g.request_stats() else {
        return Ok(());
    };
    let kinds: [(&str, usize); 3] = [("snapshot", 0), ("symbol_list", 1), ("history", 2)];
    for (kind, k) in kinds {
        let s = st.clone();
        r.register_counter_fn(m::REQUESTS_SERVED, &[("kind", kind)], move || match k {
            0 => s.snapshot_served.get(),
            1 => s.symbol_list_served.get(),
            _ => s.history_served.get(),
        })?;
    }
    let (a, b, e, st2) = (st.clone(), st.clone(), st.clone(), st);
    r.register_counter_fn(
        m::DROPS,
        &[("reason", "request_answer_ring_full")],
        move || a.answers_dropped.get(),
    )?;
    r.register_counter_fn(m::SHEDS, &[("reason", "expired_at_worker")], move || {
        b.expired_at_worker.get()
    })?;
    r.register_counter_fn(m::SHEDS, &[("reason", "expired_at_gateway")], move || {
        e.expired_at_gateway.get()
    })?;
    register_request_path(r, st2, g.shared.stats.clone())
}

/// The request path's own refusals, hop latencies and queue size.
fn register_request_path(
    r: &Registry,
    st: Arc<RequestStats>,
    gw: Arc<crate::gateway::GatewayStats>,
) -> Result<(), OpsError> {
    use crate::ops::metrics::LATENCY_BUCKETS_S;
    use crate::requests::hops::Hop;
    let (a, c, d) = (st.clone(), st.clone(), st.clone());
    r.register_counter_fn(m::SHEDS, &[("reason", "request_path_full")], move || {
        a.refused_path_full.get()
    })?;
    // The per-connection message limit lives in the sans-IO session, which
    // counts its refusals with the gateway's counters.
    let (gw2, gw3) = (gw.clone(), gw.clone());
    r.register_counter_fn(m::SHEDS, &[("reason", "conn_rate_limited")], move || {
        crate::gateway::GatewayStats::get(&gw.rejects_rate_limited)
    })?;
    // Messages a session refused inside a Reject(rate_limited)'s window.
    r.register_counter_fn(m::SHEDS, &[("reason", "conn_backoff")], move || {
        crate::gateway::GatewayStats::get(&gw2.rejects_backoff)
    })?;
    r.register_counter_fn(m::REQUEST_REJECTS_DEFERRED, &[], move || {
        c.rejects_deferred.get()
    })?;
    r.register_counter_fn(m::REQUEST_INPUT_HELD, &[], move || {
        crate::gateway::GatewayStats::get(&gw3.input_held_for_answers)
    })?;
    r.register_gauge_fn(m::REQUEST_QUEUE_CAPACITY, &[], move || {
        d.queue_capacity.get() as f64
    })?;
    for hop in Hop::ALL {
        let shared = st.hops.shared(hop);
        r.register_hdr_ns(
            m::REQUEST_HOP,
            &[("hop", hop.name())],
            shared,
            LATENCY_BUCKETS_S,
        )?;
    }
    let queue_wait = st.hops.shared(Hop::QueueWait);
    r.register_hdr_ns(m::REQUEST_QUEUE_SOJOURN, &[], queue_wait, LATENCY_BUCKETS_S)
}

fn register_overload(r: &Registry, o: &Arc<OverloadStats>) -> Result<(), OpsError> {
    use crate::admission::Stage as AStage;
    use crate::requests::ShedReason;
    for reason in ShedReason::ALL {
        let o = o.clone();
        r.register_counter_fn(m::SHEDS, &[("reason", reason.name())], move || {
            o.snapshot().shed_of(reason)
        })?;
    }
    for stage in AStage::ALL {
        let o = o.clone();
        r.register_counter_fn(
            m::ADMISSION_REJECTS,
            &[("stage", stage.name())],
            move || o.snapshot().rejects_at(stage),
        )?;
    }
    let (a, b) = (o.clone(), o.clone());
    r.register_gauge_fn(m::REQUEST_QUEUE_DEPTH, &[], move || {
        a.snapshot().queue_depth as f64
    })?;
    r.register_gauge_fn(m::REQUEST_QUEUE_OVERLOADED, &[], move || {
        f64::from(u8::from(b.snapshot().overloaded))
    })?;
    register_overload_seconds(r, o)?;
    register_overload_extras(r, o)
}

/// The overload delays in seconds (the snapshot keeps nanoseconds).
fn register_overload_seconds(r: &Registry, o: &Arc<OverloadStats>) -> Result<(), OpsError> {
    type Ns = fn(&crate::overload::stats::OverloadSnapshot) -> u64;
    let delays: [(&str, Ns); 5] = [
        (m::REQUEST_SOJOURN_MIN, |s| s.sojourn_min_last_interval_ns),
        (m::REQUEST_SOJOURN_P99, |s| s.sojourn_p99_last_interval_ns),
        (m::REQUEST_SOJOURN_MAX, |s| s.sojourn_max_last_interval_ns),
        (m::ADAPTIVE_RTT_SHORT, |s| s.rtt_short_ns),
        (m::ADAPTIVE_RTT_LONG, |s| s.rtt_long_ns),
    ];
    for (name, ns) in delays {
        let o = o.clone();
        r.register_gauge_fn(name, &[], move || ns(&o.snapshot()) as f64 / 1e9)?;
    }
    Ok(())
}

/// Every other overload value (LIFO mode, sojourn min/p99, adaptive limit
/// and the RTTs it reacts to, ...) under the stable names the overload
/// stats give them, as unlabelled families of their own.
fn register_overload_extras(r: &Registry, o: &Arc<OverloadStats>) -> Result<(), OpsError> {
    use crate::ops::metrics::catalogue::{FamilyDesc, MetricKind};
    let mut names: Vec<(&'static str, bool)> = Vec::new();
    o.snapshot().for_each_metric(|name, label, _| {
        let known = crate::ops::metrics::catalogue::family(name).is_some();
        if label.is_none() && !known && !names.iter().any(|(n, _)| *n == name) {
            names.push((name, name.ends_with("_total")));
        }
    });
    for (name, counter) in names {
        // Times have families of their own in seconds (above); a new `_ns`
        // value here would break the catalogue's base-unit rule.
        let unit = "count";
        r.define(FamilyDesc {
            name,
            kind: if counter {
                MetricKind::Counter
            } else {
                MetricKind::Gauge
            },
            labels: &[],
            unit,
            owner: "requests",
            help: "Overload control value; see docs/overload.md.",
        })?;
        let o = o.clone();
        let read = move || {
            let mut v = 0;
            o.snapshot().for_each_metric(|n, l, x| {
                if n == name && l.is_none() {
                    v = x;
                }
            });
            v
        };
        if counter {
            r.register_counter_fn(name, &[], read)?;
        } else {
            r.register_gauge_fn(name, &[], move || read() as f64)?;
        }
    }
    Ok(())
}
