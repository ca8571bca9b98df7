//! The bus thread's NATS connection, the last-value stream and the lease
//! bucket.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use super::nats::access::Access;
use super::nats::client::{Client, FailKind};
use super::nats::jetstream::{self, JsError, KvKey, StreamConfig};
use super::nats::session::RequestError;
use super::{BusConfig, BusError, BusStats, CONNECT_TIMEOUT};
use crate::clock::MonotonicClock;

/// Reconnect backoff: doubling from this, capped at [`RECONNECT_MAX_MS`],
/// each delay drawn uniformly from its upper half (jitter, so edges that
/// lost the same node do not return in step).
const RECONNECT_BASE_MS: u64 = 50;
const RECONNECT_MAX_MS: u64 = 2_000;
/// The key of the leader lease in its bucket.
pub(crate) const LEASE_KEY: &str = "leader";

/// The delay before reconnect attempt `attempt` (0-based): 50 ms doubling
/// to 2 s, drawn from the upper half of each step.
pub fn reconnect_delay(attempt: usize, rng: &mut impl Rng) -> Duration {
    let shift = attempt.min(16) as u32;
    let cap = RECONNECT_BASE_MS
        .saturating_mul(1 << shift)
        .min(RECONNECT_MAX_MS);
    Duration::from_millis(rng.gen_range(cap / 2..=cap))
}

/// Connects to the first server of `--bus` that answers within
/// [`CONNECT_TIMEOUT`]; credentials or TLS every server refuses end the
/// wait at once, the error naming the method and its source (never the
/// secret).
pub(crate) fn client(cfg: &BusConfig, stats: &Arc<BusStats>) -> Result<Client, BusError> {
    let servers = cfg.servers.join(",");
    let access =
        Access::new(&cfg.auth, cfg.tls.as_ref()).map_err(|source| BusError::ConnectAccess {
            servers: servers.clone(),
            source,
        })?;
    let sent = access.describe();
    let clock = Arc::new(MonotonicClock);
    Client::connect(&cfg.servers, access, CONNECT_TIMEOUT, clock, stats.clone()).map_err(|e| {
        let reason = match e.kind {
            FailKind::Auth => format!("{} (this client sent {sent})", e.reason),
            FailKind::Tls => e.reason,
            FailKind::Io | FailKind::Refused => {
                format!(
                    "no server answered within {CONNECT_TIMEOUT:?} ({})",
                    e.reason
                )
            }
        };
        BusError::Connect { servers, reason }
    })
}

/// The reason of a stream set-up refusal, with what to do about one the
/// permissions refused.
fn stream_reason(e: &JsError) -> String {
    match e {
        JsError::Request(RequestError::Denied) => format!(
            "{e}: a core's credentials create it; an edge's may only read it, so start a core first"
        ),
        _ => e.to_string(),
    }
}

/// Creates the last-value stream if it is missing (cores and edges both
/// may be first): one message per subject, file storage, `replicas` copies.
pub(crate) fn last_value_stream(c: &mut Client, cfg: &BusConfig) -> Result<(), BusError> {
    let (name, wildcard) = (cfg.stream(), cfg.wildcard());
    let config = StreamConfig {
        name: &name,
        subjects: &[&wildcard],
        max_age_ns: 0,
        replicas: cfg.replicas,
        discard_new: false,
        kv: false,
        duplicate_window_ns: 0,
    };
    jetstream::ensure_stream(c, &config, CONNECT_TIMEOUT).map_err(|e| BusError::Stream {
        stream: name.clone(),
        reason: stream_reason(&e),
    })
}

/// The lease bucket's stream by the KV conventions (`KV_<bucket>` over
/// `$KV.<bucket>.>`, history 1, entries expire after the lease period),
/// created if missing; the lease key in it.
pub(crate) fn lease_bucket(c: &mut Client, cfg: &BusConfig) -> Result<KvKey, BusError> {
    let bucket = cfg.lease_bucket();
    let key = KvKey::new(&bucket, LEASE_KEY);
    let subjects = format!("$KV.{bucket}.>");
    let lease_ns = cfg.lease_ms * 1_000_000;
    let config = StreamConfig {
        name: &key.stream,
        subjects: &[&subjects],
        max_age_ns: lease_ns,
        replicas: cfg.replicas,
        discard_new: true,
        kv: true,
        duplicate_window_ns: lease_ns,
    };
    jetstream::ensure_stream(c, &config, CONNECT_TIMEOUT).map_err(|e| BusError::Stream {
        stream: bucket,
        reason: stream_reason(&e),
    })?;
    Ok(key)
}
