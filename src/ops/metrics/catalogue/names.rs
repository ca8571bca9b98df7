//! The family names as constants, so owners refer to them without typos
//! (re-exported by the catalogue; [`super::FAMILIES`] describes each).

/// Ticks decoded from a provider feed and offered to the engine ring (counter,
/// by `provider`).
pub const TICKS_RECEIVED: &str = "pricewire_ticks_received_total";
/// Provider messages rejected by the decoder, by reason code (counter, by
/// `provider`, `reason`).
pub const FEED_DECODE_ERRORS: &str = "pricewire_feed_decode_errors_total";
/// 1 while the provider is in the best price (provider state streaming), else 0
/// (gauge, by `provider`).
pub const PROVIDER_HEALTHY: &str = "pricewire_provider_healthy";
/// 1 for the provider's health state (down, probation, streaming, silent,
/// breaker_open, damped, gray), 0 for the others (gauge, by `provider`,
/// `state`).
pub const PROVIDER_STATE: &str = "pricewire_provider_state";
/// 1 while the provider is damped for flapping (its sessions end early), else
/// 0 (gauge, by `provider`).
pub const PROVIDER_DAMPED: &str = "pricewire_provider_damped";
/// The provider's flap penalty: 1000 per session that ended early, halving
/// every flap_half_life_ms (gauge, by `provider`).
pub const PROVIDER_DAMPING_PENALTY: &str = "pricewire_provider_damping_penalty";
/// Seconds until the provider's damping ends if it flaps no more; 0 when not
/// damped (gauge, by `provider`).
pub const PROVIDER_DAMPED_SECONDS: &str = "pricewire_provider_damped_seconds";
/// The probation a new session of the provider must stream before it
/// re-enters the price, grown by the flap penalty (gauge, by `provider`).
pub const PROVIDER_PROBATION_SECONDS: &str = "pricewire_provider_probation_seconds";
/// Logged-on sessions of the provider that ended sooner than flap_stable_ms
/// (counter, by `provider`).
pub const PROVIDER_FLAPS: &str = "pricewire_provider_flaps_total";
/// Times a FIX provider's last delivered quote aged past the engine's max
/// quote age while logged on (counter, by `provider`).
pub const FIX_QUOTE_LAPSES: &str = "pricewire_fix_quote_lapses_total";
/// Two-sided quotes a FIX provider delivered to the engine (counter, by
/// `provider`).
pub const FIX_QUOTES: &str = "pricewire_fix_quotes_total";
/// Withdrawal ticks a FIX provider delivered: a side or symbol that left the
/// price (counter, by `provider`).
pub const FIX_WITHDRAWALS: &str = "pricewire_fix_withdrawals_total";
/// Quotes a FIX provider sent that were not delivered, by reason (counter, by
/// `provider`, `reason`).
pub const FIX_QUOTES_DISCARDED: &str = "pricewire_fix_quotes_discarded_total";
/// Quotes older than slow_quote_ms on arrival (provider time to receive)
/// (counter, by `provider`).
pub const FIX_SLOW_QUOTES: &str = "pricewire_fix_slow_quotes_total";
/// FIX connects by result: attempted, failed (refused, unreachable or
/// unresolved), unresolved, logged_on (counter, by `provider`, `result`).
pub const FIX_CONNECTS: &str = "pricewire_fix_connects_total";
/// FIX timeouts by kind: connect, logon, read, quote_silence (counter, by
/// `provider`, `kind`).
pub const FIX_TIMEOUTS: &str = "pricewire_fix_timeouts_total";
/// FIX sessions closed, by reason (peer_closed, peer_logout, read_timeout,
/// garbled, gap_logout, seq_too_low, wrong_comp_id, outbound_full) (counter, by
/// `provider`, `reason`).
pub const FIX_DISCONNECTS: &str = "pricewire_fix_disconnects_total";
/// MsgSeqNum gaps from a FIX provider (counter, by `provider`).
pub const FIX_SEQ_GAPS: &str = "pricewire_fix_seq_gaps_total";
/// Gap recoveries by fresh MarketDataRequests (counter, by `provider`).
pub const FIX_RESUBSCRIBES: &str = "pricewire_fix_resubscribes_total";
/// Rejects from a FIX provider: market_data_request (35=Y), session (35=3)
/// (counter, by `provider`, `kind`).
pub const FIX_REJECTS: &str = "pricewire_fix_rejects_total";
/// Seconds since the provider's last quote was received; -1 before any (gauge,
/// by `provider`).
pub const FIX_LAST_QUOTE_AGE: &str = "pricewire_fix_last_quote_age_seconds";
/// Aggregated prices published by the engine to the price table and shard rings
/// (counter).
pub const PRICES_PUBLISHED: &str = "pricewire_prices_published_total";
/// Time from a tick's receive timestamp to the publish of the price it produced
/// (histogram).
pub const TICK_TO_PUBLISH_LATENCY: &str = "pricewire_tick_to_publish_latency_seconds";
/// Slots in use in a bounded ring at scrape time (gauge, by `ring`).
pub const RING_OCCUPANCY: &str = "pricewire_ring_occupancy";
/// Configured capacity of a bounded ring (gauge, by `ring`).
pub const RING_CAPACITY: &str = "pricewire_ring_capacity";
/// Older updates replaced by a newer one for the same symbol, by reason
/// (counter, by `reason`).
pub const CONFLATIONS: &str = "pricewire_conflations_total";
/// Items dropped on purpose (stale, filtered, expired, malformed), by reason
/// (counter, by `reason`).
pub const DROPS: &str = "pricewire_drops_total";
/// Work refused under overload with a retry-after, by reason (counter, by `reason`).
pub const SHEDS: &str = "pricewire_sheds_total";
/// Price frames put in subscriber connections' outbound buffers (counter,
/// by `shard`; those dropped unwritten as too old count again as
/// `stale_queue` conflations).
pub const PRICE_UPDATES_SENT: &str = "pricewire_price_updates_sent_total";
/// Writes that handed bytes to subscriber connections' sockets (counter,
/// by `shard`).
pub const SOCKET_WRITES: &str = "pricewire_socket_writes_total";
/// Subscriber connections by session state (gauge, by `shard`, `state`).
pub const CONNECTIONS: &str = "pricewire_connections";
/// Times a shard ran its hosted stages (ingest, engine) in the middle of a long
/// loop turn (counter, by `shard`).
pub const HOSTED_INTERLEAVES: &str = "pricewire_hosted_interleaves_total";
/// Share of wall time a shard's loop spent on turns that did work, capped
/// by the CPU time its thread ran, over its last 50-ms window (gauge, by
/// `shard`).
pub const SHARD_BUSY: &str = "pricewire_shard_busy_ratio";
/// Loop stalls a shard measured (a timer sweep 100 ms or more late: process
/// stopped or starved); deadlines were extended by each (counter, by `shard`).
pub const SHARD_STALLS: &str = "pricewire_shard_stalls_total";
/// Longest loop stall a shard measured since start (gauge, by `shard`).
pub const SHARD_MAX_STALL: &str = "pricewire_shard_max_stall_seconds";
/// How late a shard's loop serves what is due: timer-sweep lateness and the
/// age of the oldest unserved price in its ring (histogram, by `shard`).
pub const SHARD_LOOP_LAG: &str = "pricewire_shard_loop_lag_seconds";
/// The largest loop-lag sample of a shard's last closed 100-ms window
/// (gauge, by `shard`).
pub const SHARD_LOOP_LAG_WINDOW: &str = "pricewire_shard_loop_lag_window_seconds";
/// 1 while a shard lags (loop lag above `--loop-lag-target-ms`): it
/// conflates prices (gauge, by `shard`).
pub const SHARD_LAGGING: &str = "pricewire_shard_lagging";
/// 1 while a lagging shard sheds because its own work keeps it late (0 when
/// it lags because the host starves it of CPU) (gauge, by `shard`).
pub const SHARD_LAG_SHEDDING: &str = "pricewire_shard_lag_shedding";
/// Share of wall time a shard's thread ran on a CPU in its last 100-ms
/// cause window (gauge, by `shard`).
pub const SHARD_CPU_RATIO: &str = "pricewire_shard_cpu_ratio";
/// Share of wall time a shard's thread was runnable but waiting for a CPU
/// (run-queue delay, `/proc/thread-self/schedstat`) in its last 100-ms
/// cause window (gauge, by `shard`).
pub const SHARD_RUN_WAIT_RATIO: &str = "pricewire_shard_run_wait_ratio";
/// How long each session move stopped the moving shard's loop (its ring
/// drained, the session handed over): the pause every other session's
/// prices and answers waited (histogram, by `shard`).
pub const SESSION_MOVE_PAUSE: &str = "pricewire_session_move_pause_seconds";
/// Per write that hands prices to a subscriber's socket, at most how long
/// ago this process received the oldest of them (histogram, by `shard`):
/// the fan-out's freshness bound (`--price-age-max-ms`) where the server
/// lets go of a price.
pub const PRICE_HANDOFF_AGE: &str = "pricewire_price_handoff_age_seconds";
/// Logons a shedding shard admitted within its paced budget
/// (`LAG_ADMIT_PER_S`) (counter, by `shard`).
pub const SHARD_LAG_LOGONS_PACED: &str = "pricewire_shard_lag_logons_paced_total";
/// Times a shard started lagging (counter, by `shard`).
pub const SHARD_LAG_EPISODES: &str = "pricewire_shard_lag_episodes_total";
/// Prices through the NATS bus thread, by event (published, received,
/// gap_flagged, ...) (counter, by `event`).
pub const BUS_MESSAGES: &str = "pricewire_bus_messages_total";
/// 1 while the bus client has a NATS server connection (gauge).
pub const BUS_CONNECTED: &str = "pricewire_bus_connected";
/// 1 while this core holds the leader lease and may publish (gauge).
pub const BUS_LEADER: &str = "pricewire_bus_leader";
/// The lease epoch this core leads with, or the newest an edge heard
/// (gauge).
pub const BUS_EPOCH: &str = "pricewire_bus_epoch";
/// Failed bus connect attempts by reason: auth, tls, refused, io (counter,
/// by `reason`).
pub const BUS_CONNECT_FAILURES: &str = "pricewire_bus_connect_failures_total";
/// Publishes or subscriptions NATS refused for the bus client's
/// permissions (counter).
pub const BUS_PERMISSION_DENIED: &str = "pricewire_bus_permission_denied_total";
/// Connections refused at the PROXY protocol v2 header (counter, by
/// `reason`: bad_signature, v1_unsupported, bad_version, bad_command,
/// bad_address, too_long, timeout, peer_closed, untrusted, overflow).
pub const PROXY_HEADER_FAILURES: &str = "pricewire_proxy_header_failures_total";
/// PROXY protocol v2 headers accepted (counter, by `command`: proxy, local).
pub const PROXY_HEADERS: &str = "pricewire_proxy_headers_total";
/// Heartbeats of the lease-holding core on the bus, by event: sent and
/// send_error (core), received, stale_epoch_dropped and refused (edge)
/// (counter, by `event`).
pub const BUS_HEARTBEATS: &str = "pricewire_bus_heartbeats_total";
/// Seconds since the last heartbeat was sent (core) or taken (edge); -1
/// before any (gauge).
pub const BUS_LAST_HEARTBEAT_AGE: &str = "pricewire_bus_last_heartbeat_age_seconds";
/// TLS handshakes completed (counter, by `listener`).
pub const TLS_HANDSHAKES: &str = "pricewire_tls_handshakes_total";
/// TLS handshakes that failed or timed out (counter, by `listener`, `reason`).
pub const TLS_HANDSHAKE_FAILURES: &str = "pricewire_tls_handshake_failures_total";
/// Certificate reloads on SIGHUP (counter, by `listener`, `result`).
pub const TLS_CERT_RELOADS: &str = "pricewire_tls_cert_reloads_total";
/// Subscriber connections refused for capacity on a TLS listener, by
/// `outcome`: busy (Disconnect(busy) sent over TLS), bare (over the
/// refusal handshake budget: closed before any TLS work), unfinished
/// (the handshake did not complete) (counter, by `listener`, `outcome`).
pub const TLS_REFUSALS: &str = "pricewire_tls_refusals_total";
/// Sessions a busy shard 0 moved to another shard (out) or a shard took over
/// (in) (counter, by `shard`, `direction`).
pub const SESSIONS_MOVED: &str = "pricewire_sessions_moved_total";
/// Request-heavy sessions a busy shard 0 held to move them away, by
/// outcome: moved, or aborted (their answers not all in within the wait, or
/// no room) and read again where they were (counter, by `shard`,
/// `outcome`).
pub const SESSION_DRAINS: &str = "pricewire_session_drains_total";
/// Prices of subscriptions with a maximum update frequency
/// (`max_update_hz`, `--max-update-hz`), by event: `held` (a price kept as
/// its key's latest that some paced subscriber did not get at once:
/// counted once per price, whatever its number of members), `released` (a
/// price sent at a cadence's slot: counted per member it reached) and
/// `conflated` (of those, per member, the ones that replaced skipped
/// prices, sent flagged conflated) (counter, by `shard`, `event`).
pub const PACED_PRICES: &str = "pricewire_paced_prices_total";
/// Prices sent flagged stale while the engine was behind, and restated.
pub const TABLE_BEHIND_PRICES: &str = "pricewire_table_behind_prices_total";
/// How far behind its engine's input the price table may be.
pub const ENGINE_BEHIND: &str = "pricewire_engine_behind_seconds";
/// Subscriber connections accepted by a gateway shard (counter, by `shard`).
pub const CONNECTIONS_ACCEPTED: &str = "pricewire_connections_accepted_total";
/// Connections or session steps refused by admission control, by stage
/// (counter, by `stage`).
pub const ADMISSION_REJECTS: &str = "pricewire_admission_rejects_total";
/// Connections closed because they stayed above the outbound high-water mark
/// too long (counter, by `shard`).
pub const SLOW_CONSUMER_DISCONNECTS: &str = "pricewire_slow_consumer_disconnects_total";
/// Subscriber sessions the server ended for what the peer did or did
/// not send, by reason: `idle_timeout` (nothing received for the dead-peer
/// interval, and no input waiting unread), `logon_timeout` (no Logon within
/// the logon timeout, and none waiting unread), `logon_verdict_late` (a
/// Logon that arrived and whose verification did not come within the logon
/// timeout: LogonRejected(busy)), `message_flood` (refusals in a row past
/// `--flood-disconnect-after`) (counter, by `reason`).
pub const SESSION_DISCONNECTS: &str = "pricewire_session_disconnects_total";
/// Connections closed because their processing panicked and the panic
/// was contained at the connection's boundary (counter, by `listener`,
/// `stage`).
pub const CONNECTION_FAULTS: &str = "pricewire_connection_faults_total";
/// Logons refused for their credentials, subscriber or provider (counter,
/// by `listener`, `reason`).
pub const LOGON_FAILURES: &str = "pricewire_logon_failures_total";
/// Tokens checked, by path: verifier or cache (counter, by `listener`,
/// `path`).
pub const LOGON_VERIFICATIONS: &str = "pricewire_logon_verifications_total";
/// Brute-force lockouts started (counter, by `listener`, `scope`).
pub const LOCKOUTS: &str = "pricewire_lockouts_total";
/// Addresses or accounts locked out at scrape time (gauge, by `listener`,
/// `scope`).
pub const LOCKOUTS_ACTIVE: &str = "pricewire_lockouts_active";
/// Stored argon2id hashes refused for asking more than the cost window
/// (counter).
pub const ARGON2_COST_REFUSED: &str = "pricewire_argon2_cost_refused_total";
/// Requests waiting in the bounded request queue (gauge).
pub const REQUEST_QUEUE_DEPTH: &str = "pricewire_request_queue_depth";
/// Configured capacity of the request queue (gauge).
pub const REQUEST_QUEUE_CAPACITY: &str = "pricewire_request_queue_capacity";
/// Time a request waited in the queue before a worker took it (histogram).
pub const REQUEST_QUEUE_SOJOURN: &str = "pricewire_request_queue_sojourn_seconds";
/// 1 while the CoDel detector judges the request queue overloaded (LIFO and
/// shedding on) (gauge).
pub const REQUEST_QUEUE_OVERLOADED: &str = "pricewire_request_queue_overloaded";
/// Smallest queueing delay (CoDel's overload signal) of the last closed
/// interval, seconds (gauge).
pub const REQUEST_SOJOURN_MIN: &str = "pricewire_request_sojourn_min_interval_seconds";
/// p99 queueing delay of requests served in the last interval, seconds (gauge).
pub const REQUEST_SOJOURN_P99: &str = "pricewire_request_sojourn_p99_interval_seconds";
/// Largest queueing delay of requests served in the last interval, seconds (gauge).
pub const REQUEST_SOJOURN_MAX: &str = "pricewire_request_sojourn_max_interval_seconds";
/// Short-term average request RTT the adaptive limit reacts to, seconds (gauge).
pub const ADAPTIVE_RTT_SHORT: &str = "pricewire_adaptive_rtt_short_seconds";
/// Long-term (baseline) average request RTT, seconds (gauge).
pub const ADAPTIVE_RTT_LONG: &str = "pricewire_adaptive_rtt_long_seconds";
/// Requests answered by the workers, by request kind (counter, by `kind`).
pub const REQUESTS_SERVED: &str = "pricewire_requests_served_total";
/// Time a request spent in one hop of the request path: queue_wait, service,
/// answer_ring (histogram, by `hop`).
pub const REQUEST_HOP: &str = "pricewire_request_hop_seconds";
/// Rejects that waited for room on the answer ring to their shard (sent later,
/// never dropped) (counter).
pub const REQUEST_REJECTS_DEFERRED: &str = "pricewire_request_rejects_deferred_total";
/// Times a session's input was held because its outbound buffer had no room
/// for the answers of the requests it has in flight: TCP paces the client
/// (counter).
pub const REQUEST_INPUT_HELD: &str = "pricewire_request_input_held_total";
/// 1 for the circuit breaker's current state (closed, open, half_open), 0 for
/// the others (gauge, by `dependency`, `state`).
pub const BREAKER_STATE: &str = "pricewire_breaker_state";
/// Failure rate over the breaker's time window, 0..1 (gauge, by `dependency`).
pub const BREAKER_FAILURE_RATE: &str = "pricewire_breaker_failure_ratio";
/// Slow-call rate over the breaker's time window, 0..1 (gauge, by `dependency`).
pub const BREAKER_SLOW_CALL_RATE: &str = "pricewire_breaker_slow_call_ratio";
/// Calls refused without trying because the breaker was open or half-open and
/// full (counter, by `dependency`).
pub const BREAKER_NOT_PERMITTED: &str = "pricewire_breaker_not_permitted_total";
/// Account lookups at logon by answer (counter, by `result`).
pub const REFDATA_LOOKUPS: &str = "pricewire_refdata_lookups_total";
/// Reference-data cache events (counter, by `event`).
pub const REFDATA_CACHE_EVENTS: &str = "pricewire_refdata_cache_events_total";
/// Completed account fetches by why they were asked for (counter, by `reason`).
pub const REFDATA_FETCHES: &str = "pricewire_refdata_fetches_total";
/// Redis calls by outcome (counter, by `outcome`).
pub const REFDATA_REDIS_CALLS: &str = "pricewire_refdata_redis_calls_total";
/// Times the refresher backed off after a failed or refused Redis call (counter).
pub const REFDATA_BACKOFFS: &str = "pricewire_refdata_backoffs_total";
/// Health probes (PING) the refresher sent while idle (counter).
pub const REFDATA_PROBES: &str = "pricewire_refdata_probes_total";
/// Accounts and negative entries in the reference-data cache (gauge).
pub const REFDATA_ENTRIES: &str = "pricewire_refdata_cached_entries";
/// Redis pool connections by state (gauge, by `state`).
pub const REFDATA_POOL_CONNECTIONS: &str = "pricewire_refdata_pool_connections";
/// Redis pool events (counter, by `event`).
pub const REFDATA_POOL_EVENTS: &str = "pricewire_refdata_pool_events_total";
/// Live sessions changed by a revocation, by action (counter, by `action`).
pub const REFDATA_REVOCATIONS: &str = "pricewire_refdata_revocations_total";
/// Whether absent records are trusted as deletions: 1, 0 (the data set is
/// lost or stale), -1 before the first read (gauge).
pub const REFDATA_DATASET_TRUSTED: &str = "pricewire_refdata_dataset_trusted";
/// 1 while a data-set fault is observed (gauge, by `fault`).
pub const REFDATA_DATASET_FAULT: &str = "pricewire_refdata_dataset_fault";
/// Data-set faults begun (counter, by `fault`).
pub const REFDATA_DATASET_FAULTS: &str = "pricewire_refdata_dataset_faults_total";
/// The generation marker: last read, highest seen; -1 none (gauge, by `marker`).
pub const REFDATA_GENERATION: &str = "pricewire_refdata_generation";
/// Requests waiting for the refresher (gauge, by `class`).
pub const REFDATA_PENDING: &str = "pricewire_refdata_pending_requests";
/// Names of the index set listed for prefetch or left out over its bound
/// (counter, by `result`).
pub const REFDATA_PREFETCH_NAMES: &str = "pricewire_refdata_prefetch_names_total";
/// Age of the oldest tick accepted but not yet written to the capture file (gauge).
pub const RECORDER_LAG: &str = "pricewire_recorder_lag_seconds";
/// Ticks not recorded because the recorder ring was full (the feed never waits)
/// (counter).
pub const RECORDER_LOST_TICKS: &str = "pricewire_recorder_lost_ticks_total";
/// Ticks handed to the kernel (written to the capture file; a kill of the
/// process no longer loses them) (counter).
pub const RECORDER_WRITTEN_TICKS: &str = "pricewire_recorder_written_ticks_total";
/// Ticks in the recorder's write buffer, not yet handed to the kernel (a kill
/// would lose them) (gauge).
pub const RECORDER_BUFFERED_TICKS: &str = "pricewire_recorder_buffered_ticks";
/// 1 for the process lifecycle state (starting, serving, draining, stopped), 0
/// for the others (gauge, by `state`).
pub const HEALTH_STATE: &str = "pricewire_health_state";
/// 1 for each supervised stage thread running, 0 for one that died (the
/// process exits within `--stage-exit-grace-ms`); gauge, by `stage`.
pub const STAGE_UP: &str = "pricewire_stage_up";
/// Start-up delay this instance chose (slot times step, capped, plus jitter) (gauge).
pub const START_STAGGER: &str = "pricewire_start_stagger_seconds";
/// Requests answered by the ops listener, by path and status code (counter, by
/// `path`, `code`).
pub const OPS_HTTP_REQUESTS: &str = "pricewire_ops_http_requests_total";
/// Ops connections answered 503 at once because every ops worker was busy (counter).
pub const OPS_HTTP_REJECTED: &str = "pricewire_ops_http_rejected_total";
/// Samples a collector offered that did not match their documented family (a
/// bug, not load) (counter).
pub const METRICS_REJECTED_SAMPLES: &str = "pricewire_metrics_rejected_samples_total";
/// Always 1; the version label names the running build (gauge, by `version`).
pub const BUILD_INFO: &str = "pricewire_build_info";
/// Real-time (SCHED_FIFO/SCHED_RR) priority of each pw-* thread as the kernel
/// reports it now; 0 = normal scheduling (gauge, by `thread`).
pub const THREAD_RT_PRIORITY: &str = "pricewire_thread_rt_priority";
/// Every `pw-*` thread name a `serve` process can run, as
/// [`THREAD_RT_PRIORITY`]'s `thread` label shows it with indices written `N`
/// (`pw-feedN-` is followed by the first letters of the feed's name; the
/// kernel keeps 15 bytes of a thread name). Which of them exist depends on
/// the configuration: `pw-engine` only with `--threading dedicated`,
/// `pw-bus` only on a bus core or edge.
pub const THREAD_NAMES: &[&str] = &[
    "pw-acceptor",
    "pw-authN",
    "pw-bus",
    "pw-dispatch",
    "pw-engine",
    "pw-feedN-",
    "pw-ingest",
    "pw-provauthN",
    "pw-requestN",
    "pw-shardN",
    "pw-supervise",
];
/// Every stage thread the supervisor may list in [`STAGE_UP`] (digit runs
/// written `N`, a feed's source name after `pw-feedN-`): which run depends
/// on the configuration (`pw-engine` and `pw-ingest` with `--threading
/// dedicated`, `pw-bus` on a bus core or edge, `recorder` with
/// `--record`, `refdata-refresh` with `--redis`, `ops-reload` with TLS).
pub const STAGE_NAMES: &[&str] = &[
    "ops-accept",
    "ops-http-N",
    "ops-reload",
    "ops-signals",
    "pw-acceptor",
    "pw-authN",
    "pw-bus",
    "pw-dispatch",
    "pw-engine",
    "pw-feedN-",
    "pw-ingest",
    "pw-provauthN",
    "pw-requestN",
    "pw-shardN",
    "recorder",
    "refdata-refresh",
];
/// Times the allocator's free memory was returned to the kernel after
/// connections left (counter).
pub const MEMORY_TRIMS: &str = "pricewire_memory_trims_total";
/// Resident set size of the process at scrape time; -1 where /proc is not
/// available (gauge).
pub const PROCESS_RESIDENT: &str = "pricewire_process_resident_bytes";
