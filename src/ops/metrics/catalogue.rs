//! The documented metric families: every name pricewire exposes on
//! `/metrics`, with type, labels, unit and meaning.
//!
//! This table is the single source of truth for metric names. The registry
//! refuses samples for families it does not know, `docs/operations.md`'s
//! metrics section is generated from a scrape of the binary plus this table
//! (`tests/it/ops_metrics_doc.rs`), and `deploy/alerts.yaml` may only use names
//! from here (another test checks), so dashboards and alerts cannot drift
//! from the code. Names follow Prometheus conventions: `pricewire_` prefix,
//! base units (`_seconds`, `_bytes`), counters end in `_total`, ratios end
//! in `_ratio` and lie in 0..=1. A renamed family keeps its old name for one
//! release, exposed with the same value and listed in [`DEPRECATED`].

use super::renamed::*;
pub use super::renamed::{Renamed, DEPRECATED};

mod naming;
pub use naming::{check_conventions, NamingError, NamingRule};

/// The Prometheus type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Monotonic count since process start; the name ends in `_total`.
    Counter,
    /// A value that goes up and down, read at scrape time.
    Gauge,
    /// Cumulative buckets (`_bucket{le}`), `_sum` and `_count`.
    Histogram,
}

impl MetricKind {
    /// The word used in `# TYPE` lines.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// One metric family: the name as it appears in PromQL, its type, the label
/// names every sample must carry (in this order), the unit and the meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilyDesc {
    /// Exposition name. Counters include `_total`; histograms are the base
    /// name of `_bucket`/`_sum`/`_count`.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Label names every sample must carry, in this order.
    pub labels: &'static [&'static str],
    /// Unit of the value (`seconds`, `ticks`, `ratio`, ...), for the docs.
    pub unit: &'static str,
    /// Subsystem that wires the value in.
    pub owner: &'static str,
    /// One-line meaning; becomes the `# HELP` text.
    pub help: &'static str,
}

const fn counter(
    name: &'static str,
    labels: &'static [&'static str],
    unit: &'static str,
    owner: &'static str,
    help: &'static str,
) -> FamilyDesc {
    FamilyDesc {
        name,
        kind: MetricKind::Counter,
        labels,
        unit,
        owner,
        help,
    }
}

const fn gauge(
    name: &'static str,
    labels: &'static [&'static str],
    unit: &'static str,
    owner: &'static str,
    help: &'static str,
) -> FamilyDesc {
    FamilyDesc {
        name,
        kind: MetricKind::Gauge,
        labels,
        unit,
        owner,
        help,
    }
}

const fn histogram(
    name: &'static str,
    labels: &'static [&'static str],
    owner: &'static str,
    help: &'static str,
) -> FamilyDesc {
    FamilyDesc {
        name,
        kind: MetricKind::Histogram,
        labels,
        unit: "seconds",
        owner,
        help,
    }
}

// Family names as constants so owners refer to them without typos.
mod names;
pub use names::*;

/// Every family pricewire exposes. Order here is the order on `/metrics`.
pub const FAMILIES: &[FamilyDesc] = &[
    // feed
    counter(TICKS_RECEIVED, &["provider"], "ticks", "feed",
        "Ticks decoded from a provider feed and offered to the engine ring"),
    counter(FEED_DECODE_ERRORS, &["provider", "reason"], "messages", "feed",
        "Provider messages rejected by the decoder, by reason code"),
    // FIX providers (src/feed/fix/metrics.rs; provider = the configured name)
    gauge(PROVIDER_HEALTHY, &["provider"], "boolean", "fix",
        "1 while the provider is in the best price (provider state streaming), else 0"),
    gauge(PROVIDER_STATE, &["provider", "state"], "boolean", "fix",
        "1 for the provider's health state (down, probation, streaming, silent, breaker_open, damped, gray), 0 for the others"),
    gauge(PROVIDER_DAMPED, &["provider"], "boolean", "fix",
        "1 while the provider is damped for flapping (its sessions end early), else 0"),
    gauge(PROVIDER_DAMPING_PENALTY, &["provider"], "penalty", "fix",
        "The provider's flap penalty: 1000 per session that ended early, halving every flap_half_life_ms"),
    gauge(PROVIDER_DAMPED_SECONDS, &["provider"], "seconds", "fix",
        "Seconds until the provider's damping ends if it flaps no more; 0 when not damped"),
    gauge(PROVIDER_PROBATION_SECONDS, &["provider"], "seconds", "fix",
        "The probation a new session must stream before it re-enters the price, grown by the flap penalty"),
    counter(PROVIDER_FLAPS, &["provider"], "sessions", "fix",
        "Logged-on sessions of the provider that ended sooner than flap_stable_ms"),
    counter(FIX_QUOTE_LAPSES, &["provider"], "events", "fix",
        "Times the provider's last delivered quote aged past the engine's max quote age while logged on (gray input)"),
    counter(FIX_QUOTES, &["provider"], "ticks", "fix",
        "Two-sided quotes a FIX provider delivered to the engine"),
    counter(FIX_WITHDRAWALS, &["provider"], "ticks", "fix",
        "Withdrawal ticks a FIX provider delivered (a deleted side, a full refresh without it, a 35=Y): the side leaves the price on that message"),
    counter(FIX_QUOTES_DISCARDED, &["provider", "reason"], "quotes", "fix",
        "Quotes a FIX provider sent that were not delivered, by reason (stale_provider_time, unknown_symbol, rejected_symbol, not_logged_on, bad_price)"),
    counter(FIX_SLOW_QUOTES, &["provider"], "ticks", "fix",
        "Quotes older than slow_quote_ms on arrival (provider time to receive)"),
    counter(FIX_CONNECTS, &["provider", "result"], "connections", "fix",
        "FIX connects by result: attempted, failed (refused, unreachable or unresolved), unresolved (the host name gave no address), logged_on"),
    counter(FIX_TIMEOUTS, &["provider", "kind"], "events", "fix",
        "FIX timeouts by kind: connect, logon, read, quote_silence"),
    counter(FIX_DISCONNECTS, &["provider", "reason"], "connections", "fix",
        "FIX connections that ended, each once under its first cause (peer_closed, peer_logout, logon_rejected, logon_timeout, read_timeout, garbled, gap_logout, seq_too_low, wrong_comp_id, missing_seq_num, outbound_full, shutdown)"),
    counter(FIX_SEQ_GAPS, &["provider"], "events", "fix",
        "MsgSeqNum gaps from a FIX provider"),
    counter(FIX_RESUBSCRIBES, &["provider"], "events", "fix",
        "Gap recoveries by fresh MarketDataRequests"),
    counter(FIX_REJECTS, &["provider", "kind"], "messages", "fix",
        "Rejects from a FIX provider: market_data_request (35=Y), session (35=3)"),
    gauge(FIX_LAST_QUOTE_AGE, &["provider"], "seconds", "fix",
        "Seconds since the provider's last quote was received; -1 before any"),
    // engine
    counter(PRICES_PUBLISHED, &[], "prices", "engine",
        "Aggregated prices published by the engine to the price table and shard rings"),
    histogram(TICK_TO_PUBLISH_LATENCY, &[], "engine",
        "Time from a tick's receive timestamp to the publish of the price it produced"),
    // pipeline
    gauge(RING_OCCUPANCY, &["ring"], "slots", "pipeline",
        "Slots in use in a bounded ring at scrape time"),
    gauge(RING_CAPACITY, &["ring"], "slots", "pipeline",
        "Configured capacity of a bounded ring"),
    counter(CONFLATIONS, &["reason"], "updates", "pipeline",
        "Older updates replaced by a newer one for the same symbol, by reason"),
    counter(DROPS, &["reason"], "items", "pipeline",
        "Items dropped on purpose (stale, filtered, expired, malformed), by reason"),
    counter(SHEDS, &["reason"], "requests", "requests",
        "Work refused under overload with a retry-after, by reason"),
    // gateway
    counter(PRICE_UPDATES_SENT, &["shard"], "updates", "gateway",
        "Price frames put in subscriber connections' outbound buffers (those later dropped unwritten as too old are counted again as conflations_total{reason=stale_queue_shardN})"),
    counter(SOCKET_WRITES, &["shard"], "writes", "gateway",
        "Writes that handed bytes to subscriber connections' sockets"),
    gauge(CONNECTIONS, &["shard", "state"], "connections", "gateway",
        "Subscriber connections by session state"),
    counter(HOSTED_INTERLEAVES, &["shard"], "events", "gateway",
        "Times a shard ran its hosted stages (ingest, engine) in the middle of a long loop turn"),
    gauge(SHARD_BUSY, &["shard"], "ratio", "gateway",
        "Share of wall time a shard's loop spent on turns that did work (capped by the CPU time its thread ran), over its last 50-ms window"),
    gauge(SHARD_BUSY_OLD, &["shard"], "ratio", "gateway",
        "Deprecated, removed in 0.4.0: the same value as pricewire_shard_busy_ratio"),
    counter(SHARD_STALLS, &["shard"], "events", "gateway",
        "Loop stalls a shard measured (a timer sweep 100 ms or more late: process stopped or starved); deadlines were extended by each"),
    gauge(SHARD_MAX_STALL, &["shard"], "seconds", "gateway",
        "Longest loop stall a shard measured since start"),
    histogram(SHARD_LOOP_LAG, &["shard"], "gateway",
        "How late a shard's loop serves what is due: timer-sweep lateness and the age of the oldest unserved price in its ring"),
    gauge(SHARD_LOOP_LAG_WINDOW, &["shard"], "seconds", "gateway",
        "The largest loop-lag sample of a shard's last closed 100-ms window"),
    gauge(SHARD_LAGGING, &["shard"], "boolean", "gateway",
        "1 while a shard lags (loop lag above --loop-lag-target-ms): it conflates prices"),
    gauge(SHARD_LAG_SHEDDING, &["shard"], "boolean", "gateway",
        "1 while a lagging shard sheds because its own work keeps it late: paced logons, no new connections, the heaviest accounts' requests refused (0 when the host starves it: it only conflates)"),
    gauge(SHARD_CPU_RATIO, &["shard"], "ratio", "gateway",
        "Share of wall time the shard's thread ran on a CPU in its last 100-ms cause window"),
    gauge(SHARD_RUN_WAIT_RATIO, &["shard"], "ratio", "gateway",
        "Share of wall time the shard's thread was runnable but waiting for a CPU (run-queue delay) in its last 100-ms cause window"),
    histogram(PRICE_HANDOFF_AGE, &["shard"], "gateway",
        "Per write that hands prices to a subscriber's socket, at most how long ago this process received the oldest of them: the fan-out's freshness where the server lets go of a price (--price-age-max-ms)"),
    histogram(SESSION_MOVE_PAUSE, &["shard"], "gateway",
        "How long each session move stopped the moving shard's loop (ring drained, session handed over): what every other session's prices and answers waited"),
    counter(SHARD_LAG_LOGONS_PACED, &["shard"], "logons", "gateway",
        "Logons a shedding shard admitted within its paced budget"),
    counter(SHARD_LAG_EPISODES, &["shard"], "events", "gateway",
        "Times a shard started lagging"),
    counter(SESSIONS_MOVED, &["shard", "direction"], "sessions", "gateway",
        "Sessions a busy shard 0 moved to another shard (out) or a shard took over (in)"),
    counter(SESSION_DRAINS, &["shard", "outcome"], "sessions", "gateway",
        "Request-heavy sessions a busy shard 0 held to move them away: moved, or aborted (answers not all in within the wait, or no room) and read again"),
    counter(PACED_PRICES, &["shard", "event"], "prices", "gateway",
        "Prices of rate-limited subscriptions (max_update_hz): held as the key's latest for a later slot (per price), released at a connection's slot (per member), and released flagged conflated (per member, prices skipped)"),
    gauge(ENGINE_BEHIND, &[], "seconds", "gateway",
        "How far behind the ticks its engine was given the price table may be: time since the engine's last turn that left every feed ring empty (0 while it is idle or keeps up); shards flag prices stale past twice --price-age-max-ms"),
    counter(TABLE_BEHIND_PRICES, &["shard", "event"], "prices", "gateway",
        "Prices a shard sent flagged stale because the engine's progress mark was older than twice --price-age-max-ms (flagged), and symbols restated unflagged once it caught up (restated)"),
    counter(CONNECTIONS_ACCEPTED, &["shard"], "connections", "gateway",
        "Subscriber connections accepted by a gateway shard"),
    counter(ADMISSION_REJECTS, &["stage"], "events", "gateway",
        "Connections or session steps refused by admission control, by stage"),
    counter(SLOW_CONSUMER_DISCONNECTS, &["shard"], "connections", "gateway",
        "Connections closed because they stayed above the outbound high-water mark too long"),
    counter(SESSION_DISCONNECTS, &["reason"], "sessions", "gateway",
        "Subscriber sessions ended for what the peer sent or did not: idle_timeout, logon_timeout, logon_verdict_late (LogonRejected(busy): the Logon arrived, its verdict did not come in time), message_flood"),
    // PROXY protocol v2 (serve --proxy-protocol)
    counter(PROXY_HEADERS, &["command"], "connections", "gateway",
        "PROXY v2 headers accepted on the subscriber listener, by command (proxy: the header's source is the client; local: a balancer health check keeps the balancer's address)"),
    counter(CONNECTION_FAULTS, &["listener", "stage"], "connections", "runtime::contain",
        "Connections closed because their processing panicked, contained at the connection's boundary (the stage and every other connection go on), by listener (subscriber, feed, ops) and stage (acceptor, shard, ingest, ops-http); each is logged at error level, thinned"),
    counter(PROXY_HEADER_FAILURES, &["reason"], "connections", "gateway",
        "Subscriber connections closed at the PROXY v2 header, by reason (bad_signature, v1_unsupported, bad_version, bad_command, bad_address, too_long, timeout, peer_closed, untrusted, overflow)"),
    // TLS (serve --tls-cert)
    counter(TLS_HANDSHAKES, &["listener"], "handshakes", "runtime::tls",
        "TLS handshakes completed, by listener (subscriber, feed)"),
    counter(TLS_HANDSHAKE_FAILURES, &["listener", "reason"], "handshakes", "runtime::tls",
        "TLS handshakes that failed or timed out, by listener and reason"),
    counter(TLS_CERT_RELOADS, &["listener", "result"], "reloads", "runtime::tls",
        "Certificate reloads on SIGHUP, by listener and result (ok, failed: the old chain stays)"),
    counter(TLS_REFUSALS, &["listener", "outcome"], "connections", "gateway",
        "Subscriber connections refused for capacity on a TLS listener, by outcome (busy: Disconnect(busy) sent over TLS; bare: over the refusal handshake budget, closed before any TLS work; unfinished: the handshake did not complete)"),
    // Logon credentials and brute force (src/auth)
    counter(LOGON_FAILURES, &["listener", "reason"], "logons", "auth",
        "Logons refused for their credentials, by listener (subscriber: Logon; feed: ProviderLogon) and reason (bad_token, unknown_account, locked, verifier_busy, flood_hold: an account's logon from an address cut for a message flood, inside the cut's retry-after)"),
    counter(LOGON_VERIFICATIONS, &["listener", "path"], "logons", "auth",
        "Tokens checked, by listener and path (verifier: argon2id run on a verifier thread; cache: a recent verification of the same token reused, at the shard or on the verifier thread for a logon queued behind it)"),
    counter(LOCKOUTS, &["listener", "scope"], "lockouts", "auth",
        "Brute-force lockouts started, by listener and scope (address, account; the feed listener locks addresses only)"),
    gauge(LOCKOUTS_ACTIVE, &["listener", "scope"], "keys", "auth",
        "Addresses or accounts locked out at scrape time, by listener and scope"),
    counter(ARGON2_COST_REFUSED, &[], "hashes", "auth",
        "Stored argon2id hashes (Redis account records, config tokens) refused for asking more memory, passes or lanes than --argon2-max-*: the record is invalid, never run through argon2; counted per check (each fetch of a record)"),
    // bus (serve --role core|edge)
    counter(BUS_MESSAGES, &["event"], "messages", "bus",
        "Prices through the NATS bus thread, by event (published, received, gap_flagged, ...)"),
    gauge(BUS_CONNECTED, &[], "boolean", "bus",
        "1 while the bus client has a NATS server connection"),
    gauge(BUS_LEADER, &[], "boolean", "bus",
        "1 while this core holds the leader lease and may publish (0 on a standby, a fenced leader and an edge)"),
    gauge(BUS_EPOCH, &[], "epoch", "bus",
        "The lease epoch this core leads with, or the newest one this edge heard; 0 before any"),
    counter(BUS_CONNECT_FAILURES, &["reason"], "connections", "bus",
        "Bus connect attempts that failed, by reason: auth (credentials refused or unreadable), tls (handshake failed, or TLS required by one side only), refused (another server refusal), io (TCP)"),
    counter(BUS_PERMISSION_DENIED, &[], "operations", "bus",
        "Publishes or subscriptions NATS refused for the bus client's permissions (a forged price from an edge's credentials, a misconfigured core)"),
    counter(BUS_HEARTBEATS, &["event"], "messages", "bus",
        "Heartbeats of the lease-holding core, by event: sent, send_error (core); received, stale_epoch_dropped, refused (edge)"),
    gauge(BUS_LAST_HEARTBEAT_AGE, &[], "seconds", "bus",
        "Seconds since the last heartbeat was sent (core) or taken of the current lease epoch (edge); -1 before any"),
    // request workers
    gauge(REQUEST_QUEUE_DEPTH, &[], "requests", "requests",
        "Requests waiting in the bounded request queue"),
    gauge(REQUEST_QUEUE_CAPACITY, &[], "requests", "requests",
        "Configured capacity of the request queue"),
    histogram(REQUEST_QUEUE_SOJOURN, &[], "requests",
        "Time a request waited in the queue before a worker took it"),
    gauge(REQUEST_QUEUE_OVERLOADED, &[], "boolean", "requests",
        "1 while the CoDel detector judges the request queue overloaded (LIFO and shedding on)"),
    gauge(REQUEST_SOJOURN_MIN, &[], "seconds", "requests",
        "Smallest queueing delay of the last closed CoDel interval (the overload signal)"),
    gauge(REQUEST_SOJOURN_P99, &[], "seconds", "requests",
        "p99 queueing delay of requests served in the last interval"),
    gauge(REQUEST_SOJOURN_MAX, &[], "seconds", "requests",
        "Largest queueing delay of requests served in the last interval"),
    gauge(ADAPTIVE_RTT_SHORT, &[], "seconds", "requests",
        "Short-term average request RTT (what the adaptive limit reacts to)"),
    gauge(ADAPTIVE_RTT_LONG, &[], "seconds", "requests",
        "Long-term average request RTT (the adaptive limit's baseline)"),
    gauge(REQUEST_SOJOURN_MIN_NS, &[], "nanoseconds", "requests",
        "Deprecated, removed in 0.4.0: pricewire_request_sojourn_min_interval_seconds in ns"),
    gauge(REQUEST_SOJOURN_P99_NS, &[], "nanoseconds", "requests",
        "Deprecated, removed in 0.4.0: pricewire_request_sojourn_p99_interval_seconds in ns"),
    gauge(REQUEST_SOJOURN_MAX_NS, &[], "nanoseconds", "requests",
        "Deprecated, removed in 0.4.0: pricewire_request_sojourn_max_interval_seconds in ns"),
    gauge(ADAPTIVE_RTT_SHORT_NS, &[], "nanoseconds", "requests",
        "Deprecated, removed in 0.4.0: pricewire_adaptive_rtt_short_seconds in ns"),
    gauge(ADAPTIVE_RTT_LONG_NS, &[], "nanoseconds", "requests",
        "Deprecated, removed in 0.4.0: pricewire_adaptive_rtt_long_seconds in ns"),
    counter(REQUESTS_SERVED, &["kind"], "requests", "requests",
        "Requests answered by the workers, by request kind"),
    histogram(REQUEST_HOP, &["hop"], "requests",
        "Time a request spent in one hop of the request path: queue_wait, service, answer_ring, gateway_write"),
    counter(REQUEST_REJECTS_DEFERRED, &[], "rejects", "requests",
        "Rejects that waited for room on the answer ring to their shard (sent later, never dropped)"),
    counter(REQUEST_INPUT_HELD, &[], "events", "requests",
        "Times a session's input was held because its outbound buffer had no room for the answers of its requests in flight (TCP paces the client)"),
    // resilience
    gauge(BREAKER_STATE, &["dependency", "state"], "boolean", "resilience",
        "1 for the circuit breaker's current state (closed, open, half_open), 0 for the others"),
    gauge(BREAKER_FAILURE_RATE, &["dependency"], "ratio", "resilience",
        "Failure rate over the breaker's window, 0..1; -1 while it holds fewer than the minimum calls (no decision possible)"),
    gauge(BREAKER_SLOW_CALL_RATE, &["dependency"], "ratio", "resilience",
        "Slow-call rate over the breaker's window, 0..1; -1 while it holds fewer than the minimum calls"),
    gauge(BREAKER_FAILURE_RATE_OLD, &["dependency"], "ratio", "resilience",
        "Deprecated, removed in 0.4.0: the same value as pricewire_breaker_failure_ratio"),
    gauge(BREAKER_SLOW_CALL_RATE_OLD, &["dependency"], "ratio", "resilience",
        "Deprecated, removed in 0.4.0: the same value as pricewire_breaker_slow_call_ratio"),
    counter(BREAKER_NOT_PERMITTED, &["dependency"], "calls", "resilience",
        "Calls refused without trying because the breaker was open or half-open and full"),
    // reference data (src/refdata/metrics.rs; only with --redis)
    counter(REFDATA_LOOKUPS, &["result"], "lookups", "refdata",
        "Account lookups at logon by answer: found, not_found, unavailable"),
    counter(REFDATA_CACHE_EVENTS, &["event"], "events", "refdata",
        "Cache events: hit (fresh), stale_served (expired, within max_stale_ms), miss, eviction, request_coalesced, request_dropped (queue full), request_displaced (took the place of the oldest unknown-name miss), request_source_limited (took the place of its own address's oldest)"),
    counter(REFDATA_FETCHES, &["reason"], "fetches", "refdata",
        "Completed account fetches by why they were asked for: fill (miss or prefetch), early (XFetch), expired"),
    counter(REFDATA_REDIS_CALLS, &["outcome"], "calls", "refdata",
        "Redis calls by outcome: ok, not_found, invalid_record (incl. over the reply limits), absent_untrusted (absent while the data set is not trusted: no verdict), timeout, connection_error, other_error, checkout_timeout, not_permitted (breaker)"),
    counter(REFDATA_BACKOFFS, &[], "events", "refdata",
        "Times the refresher backed off after a failed or refused Redis call"),
    counter(REFDATA_PROBES, &[], "calls", "refdata",
        "Health probes (a read of the data-set marker) the refresher sent while it had nothing else to ask"),
    gauge(REFDATA_ENTRIES, &[], "entries", "refdata",
        "Accounts (and negative entries) in the reference-data cache"),
    gauge(REFDATA_POOL_CONNECTIONS, &["state"], "connections", "refdata",
        "Redis pool connections: idle, in_use"),
    counter(REFDATA_POOL_EVENTS, &["event"], "events", "refdata",
        "Redis pool events: checkout, checkout_timeout, connect, connect_failure, discarded (after an error)"),
    counter(REFDATA_REVOCATIONS, &["action"], "sessions", "refdata",
        "Live sessions acted on after their account changed in Redis: unsubscribed (an entitlement withdrawn), disconnected (account deleted or revoked while the data set is trusted: Disconnect(auth))"),
    gauge(REFDATA_PENDING, &["class"], "requests", "refdata",
        "Requests waiting for the refresher: miss (a logon waits; at most request_queue_max, misses_per_source_max per address for unknown names), refresh (a cached entry serves meanwhile; at most request_queue_max)"),
    gauge(REFDATA_DATASET_TRUSTED, &[], "state", "refdata",
        "1 while absent records are trusted as deletions; 0 while the data set is lost or stale (cached accounts keep serving, nothing is revoked); -1 before the first read"),
    gauge(REFDATA_DATASET_FAULT, &["fault"], "state", "refdata",
        "1 while the fault is observed: generation_missing, generation_behind, generation_unreadable, no_index, index_unreadable"),
    counter(REFDATA_DATASET_FAULTS, &["fault"], "events", "refdata",
        "Data-set faults begun, by fault"),
    gauge(REFDATA_GENERATION, &["marker"], "generation", "refdata",
        "The generation marker: read (the last value read), high_water (the highest trusted); -1 none"),
    counter(REFDATA_PREFETCH_NAMES, &["result"], "names", "refdata",
        "Names of the index set: listed (prefetched), left_out (over refdata.prefetch_max; fetched at first logon)"),
    // capture
    gauge(RECORDER_LAG, &[], "seconds", "capture",
        "Age of the oldest tick accepted but not yet written to the capture file"),
    counter(RECORDER_LOST_TICKS, &[], "ticks", "capture",
        "Ticks not recorded because the recorder ring was full (the feed never waits)"),
    counter(RECORDER_WRITTEN_TICKS, &[], "ticks", "capture",
        "Ticks handed to the kernel (written to the capture file; a kill of the process no longer loses them)"),
    gauge(RECORDER_BUFFERED_TICKS, &[], "ticks", "capture",
        "Ticks in the recorder's write buffer, not yet handed to the kernel (a kill would lose them)"),
    // ops
    gauge(HEALTH_STATE, &["state"], "boolean", "ops",
        "1 for the process lifecycle state (starting, serving, draining, stopped), 0 for the others"),
    gauge(STAGE_UP, &["stage"], "boolean", "runtime::supervise",
        "1 for each supervised stage thread that runs, 0 for one that died (then /livez fails and the process exits 70 after --stage-exit-grace-ms)"),
    gauge(START_STAGGER, &[], "seconds", "ops",
        "Start-up delay this instance chose (slot times step, capped, plus jitter)"),
    counter(OPS_HTTP_REQUESTS, &["path", "code"], "requests", "ops",
        "Requests answered by the ops listener, by path and status code"),
    counter(OPS_HTTP_REJECTED, &[], "connections", "ops",
        "Ops connections answered 503 at once because every ops worker was busy"),
    counter(METRICS_REJECTED_SAMPLES, &[], "samples", "ops",
        "Samples a collector offered that did not match their documented family (a bug, not load)"),
    gauge(BUILD_INFO, &["version"], "boolean", "ops",
        "Always 1; the version label names the running build"),
    gauge(THREAD_RT_PRIORITY, &["thread"], "priority", "ops",
        "Real-time (SCHED_FIFO/SCHED_RR) priority of each pw-* thread as the kernel reports it now; 0 = normal scheduling"),
    counter(MEMORY_TRIMS, &[], "trims", "ops",
        "Times the allocator's free memory was returned to the kernel after connections left (docs/operations.md, Memory)"),
    gauge(PROCESS_RESIDENT, &[], "bytes", "ops",
        "Resident set size of the process, read at scrape time; -1 where /proc is not available"),
];

/// The family called `name`, if documented.
pub fn family(name: &str) -> Option<&'static FamilyDesc> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// Whether `sample_name` (as used in PromQL) belongs to a documented
/// family: the family name itself or a histogram's `_bucket`/`_sum`/`_count`.
pub fn is_documented_sample(sample_name: &str) -> bool {
    FAMILIES.iter().any(|f| {
        sample_name == f.name
            || (f.kind == MetricKind::Histogram
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| sample_name.strip_suffix(s) == Some(f.name)))
    })
}

#[cfg(test)]
#[path = "catalogue_tests.rs"]
mod tests;
