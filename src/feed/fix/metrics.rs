//! The FIX feed's metrics on `/metrics`, labelled with each provider's
//! configured name: provider health and state, quotes, connects, timeouts
//! by kind, disconnects by reason, gaps, resubscribes, rejects, decode
//! errors by reason and the last quote's age. The feed breaker's own
//! families are registered by the service as dependency `fix_<name>`.
//!
//! Every value is read at scrape time from the sessions' atomics; nothing
//! here runs on the feed thread. [`FAMILIES`] is the list docs/fix.md must
//! show (`tests/fix_metrics.rs` holds them equal).

use std::sync::Arc;

use super::health::{HealthGauges, ProviderState};
use super::stats::{FixFeedStats, FixSessionSnapshot, FixSessionStats};
use crate::clock::Clock;
use crate::ops::metrics::catalogue as m;
use crate::ops::{OpsError, Registry};

/// Every family [`register`] fills.
pub const FAMILIES: &[&str] = &[
    m::PROVIDER_HEALTHY,
    m::PROVIDER_STATE,
    m::FIX_QUOTES,
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
    (m::FIX_DISCONNECTS, "reason", "peer_closed", |s| {
        s.disconnects
    }),
    (m::FIX_DISCONNECTS, "reason", "peer_logout", |s| {
        s.logouts_received
    }),
    (m::FIX_DISCONNECTS, "reason", "read_timeout", |s| {
        s.read_timeouts
    }),
    (m::FIX_DISCONNECTS, "reason", "garbled", |s| {
        s.garbled_teardowns
    }),
    (m::FIX_DISCONNECTS, "reason", "gap_logout", |s| {
        s.logouts_for_gaps
    }),
    (m::FIX_DISCONNECTS, "reason", "seq_too_low", |s| {
        s.seq_too_low
    }),
    (m::FIX_DISCONNECTS, "reason", "wrong_comp_id", |s| {
        s.comp_id_mismatches
    }),
    (m::FIX_DISCONNECTS, "reason", "outbound_full", |s| {
        s.outbound_full
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
    (m::FEED_DECODE_ERRORS, "reason", "bad_price", |s| {
        s.bad_prices
    }),
];

/// (family, counter) for the counters labelled by provider only.
const PLAIN: &[(&str, Field)] = &[
    (m::FIX_QUOTES, |s| s.quotes),
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
    Ok(())
}

/// Registers every FIX provider's families; `wall` (UTC) dates the last
/// quote's age.
pub fn register(r: &Registry, stats: &FixFeedStats, wall: Arc<dyn Clock>) -> Result<(), OpsError> {
    for p in &stats.providers {
        let name = p.name.as_str();
        health(r, name, &p.health)?;
        // Every quote of this LP is one tick offered to the engine ring.
        counter(
            r,
            m::TICKS_RECEIVED,
            &[("provider", name)],
            &p.session,
            |s| s.quotes,
        )?;
        for &(family, f) in PLAIN {
            counter(r, family, &[("provider", name)], &p.session, f)?;
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
