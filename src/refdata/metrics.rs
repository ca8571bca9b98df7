//! The reference-data families on `/metrics` (documented in
//! `docs/operations.md` and `src/ops/metrics/catalogue.rs`): lookups,
//! cache events, fetches, Redis calls by outcome, backoffs, probes, the
//! pool, prefetch, the data set's trust and faults, and revocations acted
//! on by the gateway. The breaker is exported
//! by the service as `dependency="redis"`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::dataset::DataSetFault;
use super::{RefData, RefDataStats};
use crate::ops::metrics::catalogue as m;
use crate::ops::{OpsError, Registry};

type Read = fn(&RefDataStats) -> &AtomicU64;
/// A family, its one label, and the counter behind each label value.
type Family = (&'static str, &'static str, &'static [(&'static str, Read)]);

/// The labelled counter families of [`RefDataStats`].
const FAMILIES: [Family; 6] = [
    (
        m::REFDATA_LOOKUPS,
        "result",
        &[
            ("found", |s| &s.lookups_found),
            ("not_found", |s| &s.lookups_not_found),
            ("unavailable", |s| &s.lookups_unavailable),
        ],
    ),
    (
        m::REFDATA_CACHE_EVENTS,
        "event",
        &[
            ("hit", |s| &s.cache_hits),
            ("stale_served", |s| &s.stale_served),
            ("miss", |s| &s.cache_misses),
            ("eviction", |s| &s.evictions),
            ("request_coalesced", |s| &s.requests_coalesced),
            ("request_dropped", |s| &s.requests_dropped),
            ("request_displaced", |s| &s.requests_displaced),
            ("request_source_limited", |s| &s.requests_source_limited),
        ],
    ),
    (
        m::REFDATA_FETCHES,
        "reason",
        &[
            ("fill", |s| &s.fills),
            ("early", |s| &s.refreshes_early),
            ("expired", |s| &s.refreshes_expired),
        ],
    ),
    (
        m::REFDATA_REDIS_CALLS,
        "outcome",
        &[
            ("ok", |s| &s.redis_ok),
            ("not_found", |s| &s.redis_not_found),
            ("invalid_record", |s| &s.redis_invalid_record),
            ("absent_untrusted", |s| &s.redis_absent_untrusted),
            ("timeout", |s| &s.redis_timeouts),
            ("connection_error", |s| &s.redis_connection_errors),
            ("other_error", |s| &s.redis_other_errors),
            ("checkout_timeout", |s| &s.redis_checkout_timeouts),
            ("not_permitted", |s| &s.redis_not_permitted),
        ],
    ),
    (
        m::REFDATA_PREFETCH_NAMES,
        "result",
        &[
            ("listed", |s| &s.prefetch_listed),
            ("left_out", |s| &s.prefetch_left_out),
        ],
    ),
    (
        m::REFDATA_REVOCATIONS,
        "action",
        &[
            ("unsubscribed", |s| &s.revoked_unsubscribed),
            ("disconnected", |s| &s.revoked_disconnected),
        ],
    ),
];

/// Registers every reference-data family of `rd` (nothing without Redis:
/// the config file's accounts need no counters).
pub fn register(r: &Registry, rd: &Arc<RefData>) -> Result<(), OpsError> {
    if !rd.is_redis() {
        return Ok(());
    }
    let stats = rd.stats();
    for (family, label, values) in FAMILIES {
        for &(value, read) in values {
            let s = stats.clone();
            r.register_counter_fn(family, &[(label, value)], move || read(&s).load(Relaxed))?;
        }
    }
    let s = stats.clone();
    r.register_counter_fn(m::REFDATA_BACKOFFS, &[], move || {
        s.refresher_backoffs.load(Relaxed)
    })?;
    r.register_counter_fn(m::REFDATA_PROBES, &[], move || stats.probes.load(Relaxed))?;
    let cache = Arc::clone(rd);
    r.register_gauge_fn(m::REFDATA_ENTRIES, &[], move || {
        cache.cached_entries() as f64
    })?;
    let (a, b) = (Arc::clone(rd), Arc::clone(rd));
    r.register_gauge_fn(m::REFDATA_PENDING, &[("class", "miss")], move || {
        a.pending().0 as f64
    })?;
    r.register_gauge_fn(m::REFDATA_PENDING, &[("class", "refresh")], move || {
        b.pending().1 as f64
    })?;
    register_pool(r, rd)?;
    register_data_set(r, rd)
}

fn register_data_set(r: &Registry, rd: &RefData) -> Result<(), OpsError> {
    let Some(ds) = rd.data_set_stats() else {
        return Ok(());
    };
    let d = ds.clone();
    r.register_gauge_fn(m::REFDATA_DATASET_TRUSTED, &[], move || {
        d.trusted.load(Relaxed) as f64
    })?;
    for (i, fault) in DataSetFault::ALL.into_iter().enumerate() {
        let (a, b) = (ds.clone(), ds.clone());
        let labels = [("fault", fault.name())];
        r.register_gauge_fn(m::REFDATA_DATASET_FAULT, &labels, move || {
            f64::from(a.fault[i].load(Relaxed))
        })?;
        r.register_counter_fn(m::REFDATA_DATASET_FAULTS, &labels, move || {
            b.faults_total[i].load(Relaxed)
        })?;
    }
    let (a, b) = (ds.clone(), ds);
    r.register_gauge_fn(m::REFDATA_GENERATION, &[("marker", "read")], move || {
        a.generation.load(Relaxed) as f64
    })?;
    r.register_gauge_fn(
        m::REFDATA_GENERATION,
        &[("marker", "high_water")],
        move || b.generation_high_water.load(Relaxed) as f64,
    )?;
    Ok(())
}

fn register_pool(r: &Registry, rd: &RefData) -> Result<(), OpsError> {
    let Some(pool) = rd.pool_stats() else {
        return Ok(());
    };
    let (a, b) = (pool.clone(), pool.clone());
    r.register_gauge_fn(
        m::REFDATA_POOL_CONNECTIONS,
        &[("state", "idle")],
        move || a.idle.load(Relaxed) as f64,
    )?;
    r.register_gauge_fn(
        m::REFDATA_POOL_CONNECTIONS,
        &[("state", "in_use")],
        move || b.in_use.load(Relaxed) as f64,
    )?;
    type PoolRead = fn(&super::PoolStats) -> &AtomicU64;
    let events: [(&str, PoolRead); 5] = [
        ("checkout", |p| &p.checkouts),
        ("checkout_timeout", |p| &p.checkout_timeouts),
        ("connect", |p| &p.connects),
        ("connect_failure", |p| &p.connect_failures),
        ("discarded", |p| &p.discarded),
    ];
    for (event, read) in events {
        let p = pool.clone();
        r.register_counter_fn(m::REFDATA_POOL_EVENTS, &[("event", event)], move || {
            read(&p).load(Relaxed)
        })?;
    }
    Ok(())
}
