//! The bus thread's runtime, the NATS connection and the last-value stream.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use async_nats::{ConnectOptions, Event, ServerAddr};
use rand::Rng;

use super::{BusConfig, BusError, BusStats, CONNECT_TIMEOUT};

/// Reconnect backoff: doubling from this, capped at [`RECONNECT_MAX_MS`],
/// each delay drawn uniformly from its upper half (jitter, so edges that
/// lost the same node do not return in step).
const RECONNECT_BASE_MS: u64 = 50;
const RECONNECT_MAX_MS: u64 = 2_000;
/// Messages the client buffers for one subscription before it drops (an
/// edge that falls this far behind sees the gap flagged).
pub(crate) const SUBSCRIPTION_CAPACITY: usize = 65_536;

/// The bus thread's current-thread runtime (timer and sockets, no pool).
pub fn runtime() -> Result<tokio::runtime::Runtime, BusError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| BusError::Thread(format!("runtime: {e}")))
}

/// The delay before reconnect attempt `attempt` (0-based).
pub fn reconnect_delay(attempt: usize, rng: &mut impl Rng) -> Duration {
    let shift = attempt.min(16) as u32;
    let cap = RECONNECT_BASE_MS
        .saturating_mul(1 << shift)
        .min(RECONNECT_MAX_MS);
    Duration::from_millis(rng.gen_range(cap / 2..=cap))
}

async fn client(cfg: &BusConfig, stats: &Arc<BusStats>) -> Result<async_nats::Client, BusError> {
    let servers = cfg.servers.join(",");
    let err = |reason: String| BusError::Connect {
        servers: servers.clone(),
        reason,
    };
    let addrs: Vec<ServerAddr> = cfg
        .servers
        .iter()
        .map(|s| s.parse::<ServerAddr>().map_err(|e| err(e.to_string())))
        .collect::<Result<_, _>>()?;
    let st = stats.clone();
    let opts = ConnectOptions::new()
        .name("pricewire")
        .max_reconnects(None)
        // The first listed server first (the operator lists the local node
        // first); the others in order after it.
        .retain_servers_order()
        .subscription_capacity(SUBSCRIPTION_CAPACITY)
        .connection_timeout(CONNECT_TIMEOUT)
        .reconnect_delay_callback(|attempt| reconnect_delay(attempt, &mut rand::thread_rng()))
        .event_callback(move |event| {
            let st = st.clone();
            async move {
                match event {
                    Event::Connected => {
                        st.connected.set(1);
                        st.mark_reconnected();
                    }
                    Event::Disconnected => {
                        st.connected.set(0);
                        st.disconnects.inc();
                    }
                    _ => {}
                }
            }
        });
    let connecting = opts.connect(addrs);
    let client = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| err(format!("no server answered within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| err(e.to_string()))?;
    stats.connected.set(1);
    Ok(client)
}

/// Creates the last-value stream if it is missing (cores and edges both
/// may be first): one message per subject, file storage, `replicas` copies.
pub(crate) async fn last_value_stream(
    client: &async_nats::Client,
    cfg: &BusConfig,
) -> Result<stream::Stream, BusError> {
    let js = jetstream::new(client.clone());
    let config = stream::Config {
        name: cfg.stream(),
        subjects: vec![cfg.wildcard()],
        max_messages_per_subject: 1,
        storage: stream::StorageType::File,
        num_replicas: cfg.replicas,
        discard: stream::DiscardPolicy::Old,
        allow_direct: true,
        ..Default::default()
    };
    let err = |reason: String| BusError::Stream {
        stream: cfg.stream(),
        reason,
    };
    tokio::time::timeout(CONNECT_TIMEOUT, js.get_or_create_stream(config))
        .await
        .map_err(|_| err(format!("no answer within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| err(e.to_string()))
}

/// The lease bucket: one key, history 1, entries expire after the lease.
pub(crate) async fn lease_bucket(
    client: &async_nats::Client,
    cfg: &BusConfig,
) -> Result<kv::Store, BusError> {
    let js = jetstream::new(client.clone());
    let err = |reason: String| BusError::Stream {
        stream: cfg.lease_bucket(),
        reason,
    };
    if let Ok(store) = js.get_key_value(cfg.lease_bucket()).await {
        return Ok(store);
    }
    // The bucket's stream by the KV conventions, created directly: the
    // client's create_key_value misreads nats-server 2.9's answer.
    let bucket = cfg.lease_bucket();
    let config = stream::Config {
        name: format!("KV_{bucket}"),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        max_age: Duration::from_millis(cfg.lease_ms),
        storage: stream::StorageType::File,
        num_replicas: cfg.replicas,
        discard: stream::DiscardPolicy::New,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        duplicate_window: Duration::from_millis(cfg.lease_ms),
        ..Default::default()
    };
    tokio::time::timeout(CONNECT_TIMEOUT, js.get_or_create_stream(config))
        .await
        .map_err(|_| err(format!("no answer within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| err(e.to_string()))?;
    js.get_key_value(bucket)
        .await
        .map_err(|e| err(e.to_string()))
}

/// A core's connection, the last-value stream and the lease bucket.
pub(crate) async fn core(
    cfg: &BusConfig,
    stats: &Arc<BusStats>,
) -> Result<(async_nats::Client, stream::Stream, kv::Store), BusError> {
    let c = client(cfg, stats).await?;
    let s = last_value_stream(&c, cfg).await?;
    let k = lease_bucket(&c, cfg).await?;
    Ok((c, s, k))
}

/// An edge's connection and the last-value stream.
pub(crate) async fn edge(
    cfg: &BusConfig,
    stats: &Arc<BusStats>,
) -> Result<(async_nats::Client, stream::Stream), BusError> {
    let c = client(cfg, stats).await?;
    let s = last_value_stream(&c, cfg).await?;
    Ok((c, s))
}
