//! The gateway's logon checks on `/metrics`: failures by reason,
//! verifications by path, lockouts started and active by scope.

use std::sync::Arc;

use crate::ops::metrics::catalogue as m;
use crate::ops::{OpsError, Registry};

/// Logon failures, verifications and brute-force lockouts.
pub(super) fn register(r: &Registry, auth: &Arc<crate::auth::AuthGuard>) -> Result<(), OpsError> {
    use crate::auth::{FailReason, Scope};
    use std::sync::atomic::Ordering::Relaxed;
    for reason in FailReason::ALL {
        let a = auth.clone();
        r.register_counter_fn(m::LOGON_FAILURES, &[("reason", reason.name())], move || {
            a.stats.failures(reason)
        })?;
    }
    let (a, b) = (auth.clone(), auth.clone());
    r.register_counter_fn(m::LOGON_VERIFICATIONS, &[("path", "verifier")], move || {
        a.stats.verifications.load(Relaxed)
    })?;
    r.register_counter_fn(m::LOGON_VERIFICATIONS, &[("path", "cache")], move || {
        b.stats.cache_hits.load(Relaxed)
    })?;
    for scope in Scope::ALL {
        let (a, b) = (auth.clone(), auth.clone());
        r.register_counter_fn(m::LOCKOUTS, &[("scope", scope.name())], move || {
            a.stats.lockouts(scope)
        })?;
        r.register_gauge_fn(m::LOCKOUTS_ACTIVE, &[("scope", scope.name())], move || {
            b.active_lockouts(scope, crate::clock::monotonic_ns()) as f64
        })?;
    }
    Ok(())
}
