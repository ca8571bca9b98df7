//! The logon checks of the subscriber and provider listeners on
//! `/metrics`: failures by reason, verifications by path, lockouts started
//! and active by scope, each labelled with its listener.

use std::sync::Arc;

use crate::ops::metrics::catalogue as m;
use crate::ops::{OpsError, Registry};

/// Logon failures, verifications and brute-force lockouts of one
/// listener's guard (its `listener` label from [`crate::auth::Listener`];
/// the lockout families only for the scopes it enforces).
pub(super) fn register(r: &Registry, auth: &Arc<crate::auth::AuthGuard>) -> Result<(), OpsError> {
    use crate::auth::FailReason;
    use std::sync::atomic::Ordering::Relaxed;
    let listener = auth.listener();
    let l = ("listener", listener.name());
    for reason in FailReason::ALL {
        let a = auth.clone();
        r.register_counter_fn(
            m::LOGON_FAILURES,
            &[l, ("reason", reason.name())],
            move || a.stats.failures(reason),
        )?;
    }
    let (a, b) = (auth.clone(), auth.clone());
    r.register_counter_fn(
        m::LOGON_VERIFICATIONS,
        &[l, ("path", "verifier")],
        move || a.stats.verifications.load(Relaxed),
    )?;
    r.register_counter_fn(m::LOGON_VERIFICATIONS, &[l, ("path", "cache")], move || {
        b.stats.cache_hits.load(Relaxed)
    })?;
    if listener == crate::auth::Listener::Subscriber {
        // Process-wide (the window is): registered once, with the
        // subscriber listener's families.
        r.register_counter_fn(
            m::ARGON2_COST_REFUSED,
            &[],
            crate::auth::hash::cost_refusals,
        )?;
    }
    for &scope in listener.scopes() {
        let (a, b) = (auth.clone(), auth.clone());
        let labels = [l, ("scope", scope.name())];
        r.register_counter_fn(m::LOCKOUTS, &labels, move || a.stats.lockouts(scope))?;
        r.register_gauge_fn(m::LOCKOUTS_ACTIVE, &labels, move || {
            b.active_lockouts(scope, crate::clock::monotonic_ns()) as f64
        })?;
    }
    Ok(())
}
