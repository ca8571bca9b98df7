//! The metrics of a listener's transport: TLS (`runtime::tls`:
//! handshakes, handshake failures by reason, certificate reloads by
//! result, each by listener; on the subscriber listener also capacity
//! refusals by outcome) and the PROXY v2 header of the subscriber
//! listener (`runtime::proxy`: headers by command, failures by reason).

use crate::ops::metrics::catalogue as m;
use crate::ops::{OpsError, Registry};

/// The counters of one TLS listener.
pub(super) fn register(
    r: &Registry,
    tls: &crate::runtime::tls::TlsAcceptor,
    refusals: bool,
) -> Result<(), OpsError> {
    use crate::runtime::tls::HandshakeFailure;
    use std::sync::atomic::Ordering::Relaxed;
    let listener = tls.listener();
    let s = tls.stats().clone();
    r.register_counter_fn(m::TLS_HANDSHAKES, &[("listener", listener)], move || {
        s.handshakes.load(Relaxed)
    })?;
    for why in HandshakeFailure::ALL {
        let s = tls.stats().clone();
        let labels = [("listener", listener), ("reason", why.label())];
        r.register_counter_fn(m::TLS_HANDSHAKE_FAILURES, &labels, move || s.failures(why))?;
    }
    for (result, ok) in [("ok", true), ("failed", false)] {
        let s = tls.stats().clone();
        let labels = [("listener", listener), ("result", result)];
        r.register_counter_fn(m::TLS_CERT_RELOADS, &labels, move || match ok {
            true => s.reloads_ok.load(Relaxed),
            false => s.reloads_failed.load(Relaxed),
        })?;
    }
    if refusals {
        for outcome in crate::runtime::tls::RefusalOutcome::ALL {
            let s = tls.stats().clone();
            let labels = [("listener", listener), ("outcome", outcome.label())];
            r.register_counter_fn(m::TLS_REFUSALS, &labels, move || s.refusals(outcome))?;
        }
    }
    Ok(())
}

/// The counters of the subscriber listener's PROXY protocol stage.
pub(super) fn register_proxy(
    r: &Registry,
    proxy: &std::sync::Arc<crate::runtime::proxy::ProxyProtocol>,
) -> Result<(), OpsError> {
    use crate::runtime::proxy::{Command, ProxyFailure};
    for command in [Command::Proxy, Command::Local] {
        let p = proxy.clone();
        r.register_counter_fn(
            m::PROXY_HEADERS,
            &[("command", command.label())],
            move || p.stats.headers(command),
        )?;
    }
    for why in ProxyFailure::ALL {
        let p = proxy.clone();
        r.register_counter_fn(
            m::PROXY_HEADER_FAILURES,
            &[("reason", why.label())],
            move || p.stats.failures(why),
        )?;
    }
    Ok(())
}
