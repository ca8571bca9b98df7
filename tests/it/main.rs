//! The integration tests: one binary, one module per area, one `util`.
//!
//! One binary links once instead of once per file (a large part of a
//! build on two cores). The binaries left beside `tests/it/` are the
//! ones that install a counting global allocator: each proves zero
//! allocations on every thread of its process over a window, so it
//! must own its process. `layout` checks that no file is left out.

#[path = "../util/mod.rs"]
mod util;

mod auth_drill;
mod auth_entitlements;
mod auth_flags;
mod auth_records;
mod bench_cmd;
mod bus_edge;
mod bus_nats;
mod bus_security;
mod capture_import;
mod capture_inspect;
mod capture_kill;
mod capture_replay;
mod capture_roundtrip;
mod client_examples;
mod client_reconnect;
mod client_requests_complete;
mod client_resync;
mod client_slow_consumer;
mod client_watch;
mod config_reference;
mod connection_faults;
mod deploy_dry_start;
mod deploy_image;
mod engine_behind;
mod fault_proxy;
mod fd_limit;
mod fix_breaker;
mod fix_codec;
mod fix_config;
mod fix_damping;
mod fix_e2e;
mod fix_flap_alert;
mod fix_gray;
mod fix_hung;
mod fix_metrics;
mod fix_quickfix;
mod fix_resolve;
mod fix_session;
mod fix_session_edges;
mod fix_withdraw;
mod flood_hold;
mod gateway_accept_burst;
mod gateway_bad_input;
mod gateway_max_update_hz;
mod gateway_merge;
mod gateway_protocol;
mod gateway_session;
mod gateway_slow_consumer;
mod gateway_stall;
mod herd;
mod herd_cpu_hog;
mod herd_memory;
mod ingest_requests;
mod ingest_session;
mod ingest_streaming;
mod layout;
mod log_json;
mod loop_lag_shed;
mod module_graph;
mod ops_dashboard;
mod ops_deploy;
mod ops_http;
mod ops_metrics;
mod ops_metrics_doc;
mod ops_shutdown;
mod ops_signals;
mod overload_docs;
mod proxy_protocol;
mod refdata_breaker;
mod refdata_cache;
mod refdata_dataset;
mod refdata_drill;
mod refdata_faults;
mod refdata_latency;
mod refdata_lookup;
mod refdata_outage;
mod refdata_recovery;
mod release_metadata;
mod replay_determinism;
mod request_drain;
mod request_pacing;
mod request_storm;
mod rt_priority;
mod serve_startup;
mod stage_supervision;
mod tls;
mod tls_fuzz;
mod tls_handover;
mod tls_refusal;
mod tls_slow_consumer;
