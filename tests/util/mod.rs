//! Helpers shared by the integration tests: real services on loopback
//! (Redis, NATS, haproxy, QuickFIX), the raw protocol client, PKI,
//! bounded waits. A module of the `it` binary (`tests/it/main.rs`);
//! the zero-allocation binaries include the few they need by `#[path]`.

pub mod bus;
pub mod capture;
pub mod fix_hostile;
pub mod fix_lp;
pub mod fix_rig;
pub mod haproxy;
pub mod nats;
pub mod nats_raw;
pub mod net;
pub mod nkeys;
pub mod pki;
pub mod quickfix;
pub mod redis;
pub mod refdata_bin;
pub mod refdata_world;
pub mod server;
pub mod storm;
pub mod tls_serve;
pub mod wait;
