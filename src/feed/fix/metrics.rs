//! The FIX feed's metrics on `/metrics`, labelled with each provider's
//! configured name: provider health and state, quotes, connects, timeouts
//! by kind, disconnects by reason, gaps, resubscribes, rejects, decode
//! errors by reason and the last quote's age. The feed breaker's own
//! families are registered by the service as dependency `fix_<name>`.
//!
//! Every value is read at scrape time from the sessions' atomics; nothing
//! here runs on the feed thread. [`FAMILIES`] is the list docs/fix.md must
//! show (`tests/it/fix_metrics.rs` holds them equal).

use std::sync::Arc;

use super::health::{DampingGauges, HealthGauges, ProviderState};
use super::session::DisconnectReason;
use super::stats::{FixFeedStats, FixSessionSnapshot, FixSessionStats};
use crate::clock::Clock;
use crate::ops::metrics::catalogue as m;
use crate::ops::{OpsError, Registry};

/// Every family [`register`] fills.
pub const FAMILIES: &[&str] = &[
    m::PROVIDER_HEALTHY,
    m::PROVIDER_STATE,
    m::PROVIDER_DAMPED,
    m::PROVIDER_DAMPING_PENALTY,
    m::PROVIDER_DAMPED_SECONDS,
    m::PROVIDER_PROBATION_SECONDS,
    m::PROVIDER_FLAPS,
    m::FIX_QUOTE_LAPSES,
    m::FIX_QUOTES,
    m::FIX_WITHDRAWALS,
    m::FIX_QUOTES_DISCARDED,
    m::TICKS_RECEIVED,
    m::FIX_SLOW_QUOTES,
    m::FIX_CONNECTS,
    m::FIX_TIMEOUTS,
    m::FIX_DISCONNECTS,
    m::FIX_SEQ_GAPS,
    m::FIX_RESUBSCRIBES,
    m::FIX_REJECTS,
    m::FIX_LAST_QUOTE_AGE,
    m::FEED_DECODE_ERRORS,
];

type Field = fn(&FixSessionSnapshot) -> u64;

/// (family, label name, label value, counter) for the labelled counters.
const LABELLED: &[(&str, &str, &str, Field)] = &[
    (m::FIX_CONNECTS, "result", "attempted", |s| {
        s.connects_attempted
    }),
    (m::FIX_CONNECTS, "result", "failed", |s| s.connects_failed),
    (m::FIX_CONNECTS, "result", "unresolved", |s| {
        s.resolve_failures
    }),
    (m::FIX_CONNECTS, "result", "logged_on", |s| s.logons),
    (m::FIX_TIMEOUTS, "kind", "connect", |s| s.connect_timeouts),
    (m::FIX_TIMEOUTS, "kind", "logon", |s| s.logon_timeouts),
    (m::FIX_TIMEOUTS, "kind", "read", |s| s.read_timeouts),
    (m::FIX_TIMEOUTS, "kind", "quote_silence", |s| {
        s.quote_silences
    }),
    (m::FIX_REJECTS, "kind", "market_data_request", |s| {
        s.md_rejects
    }),
    (m::FIX_REJECTS, "kind", "session", |s| s.session_rejects),
    (m::FEED_DECODE_ERRORS, "reason", "checksum", |s| {
        s.checksum_errors
    }),
    (m::FEED_DECODE_ERRORS, "reason", "framing", |s| {
        s.decode_errors
    }),
    (m::FEED_DECODE_ERRORS, "reason", "wrong_comp_id", |s| {
        s.comp_id_mismatches
    }),
    (m::FEED_DECODE_ERRORS, "reason", "missing_seq_num", |s| {
        s.missing_seq_nums
    }),
    (m::FEED_DECODE_ERRORS, "reason", "bad_price", |s| {
        s.bad_prices
    }),
    (
        m::FIX_QUOTES_DISCARDED,
        "reason",
        "stale_provider_time",
        |s| s.stale_quotes,
    ),
    (m::FIX_QUOTES_DISCARDED, "reason", "unknown_symbol", |s| {
        s.unknown_symbols
    }),
    (m::FIX_QUOTES_DISCARDED, "reason", "rejected_symbol", |s| {
        s.discarded_rejected_symbol
    }),
    (m::FIX_QUOTES_DISCARDED, "reason", "not_logged_on", |s| {
        s.discarded_not_logged_on
    }),
    (m::FIX_QUOTES_DISCARDED, "reason", "bad_price", |s| {
        s.bad_prices
    }),
];

/// (family, counter) for the counters labelled by provider only.
const PLAIN: &[(&str, Field)] = &[
    (m::FIX_QUOTES, |s| s.quotes),
    (m::FIX_WITHDRAWALS, |s| s.withdrawals),
    (m::PROVIDER_FLAPS, |s| s.flaps),
    (m::FIX_QUOTE_LAPSES, |s| s.quote_lapses),
    (m::FIX_SLOW_QUOTES, |s| s.slow_quotes),
    (m::FIX_SEQ_GAPS, |s| s.seq_gaps),
    (m::FIX_RESUBSCRIBES, |s| s.resubscribes),
];

fn counter(
    r: &Registry,
    family: &str,
    labels: &[(&str, &str)],
    s: &Arc<FixSessionStats>,
    f: Field,
) -> Result<(), OpsError> {
    let s = Arc::clone(s);
    r.register_counter_fn(family, labels, move || f(&s.snapshot()))
}

fn health(r: &Registry, name: &str, g: &Arc<HealthGauges>) -> Result<(), OpsError> {
    let h = Arc::clone(g);
    r.register_gauge_fn(m::PROVIDER_HEALTHY, &[("provider", name)], move || {
        f64::from(u8::from(h.state().healthy()))
    })?;
    for state in ProviderState::ALL {
        let h = Arc::clone(g);
        r.register_gauge_fn(
            m::PROVIDER_STATE,
            &[("provider", name), ("state", state.name())],
            move || f64::from(u8::from(h.state() == state)),
        )?;
    }
    damping(r, name, g)
}

fn damping(r: &Registry, name: &str, g: &Arc<HealthGauges>) -> Result<(), OpsError> {
    type Read = fn(&DampingGauges) -> f64;
    let gauges: [(&str, Read); 4] = [
        (m::PROVIDER_DAMPED, |d| f64::from(u8::from(d.damped))),
        (m::PROVIDER_DAMPING_PENALTY, |d| d.penalty as f64),
        (m::PROVIDER_DAMPED_SECONDS, |d| {
            d.damped_left_ms as f64 / 1e3
        }),
        (m::PROVIDER_PROBATION_SECONDS, |d| {
            d.probation_ms as f64 / 1e3
        }),
    ];
    for (family, read) in gauges {
        let h = Arc::clone(g);
        r.register_gauge_fn(family, &[("provider", name)], move || read(&h.damping()))?;
    }
    Ok(())
}

/// Registers every FIX provider's families; `wall` (UTC) dates the last
/// quote's age.
pub fn register(r: &Registry, stats: &FixFeedStats, wall: Arc<dyn Clock>) -> Result<(), OpsError> {
    for p in &stats.providers {
        let name = p.name.as_str();
        health(r, name, &p.health)?;
        // Every tick of this LP offered to the engine ring: its delivered
        // quotes and withdrawals (not what the socket read).
        counter(
            r,
            m::TICKS_RECEIVED,
            &[("provider", name)],
            &p.session,
            |s| s.quotes + s.withdrawals,
        )?;
        for &(family, f) in PLAIN {
            counter(r, family, &[("provider", name)], &p.session, f)?;
        }
        // One count per connection that ended, under its first cause.
        for reason in DisconnectReason::ALL {
            let s = Arc::clone(&p.session);
            let labels = [("provider", name), ("reason", reason.name())];
            r.register_counter_fn(m::FIX_DISCONNECTS, &labels, move || {
                reason.counter(&s).get()
            })?;
        }
        for &(family, key, value, f) in LABELLED {
            counter(
                r,
                family,
                &[("provider", name), (key, value)],
                &p.session,
                f,
            )?;
        }
        let (g, wall) = (Arc::clone(&p.health), Arc::clone(&wall));
        r.register_gauge_fn(m::FIX_LAST_QUOTE_AGE, &[("provider", name)], move || {
            g.last_quote_age_s(wall.now_ns())
        })?;
    }
    Ok(())
}
