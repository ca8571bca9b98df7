//! pricewire's own NATS client, for the bus thread only.
//!
//! [`proto`] is the protocol without sockets (server ops parsed from a
//! byte buffer, client ops encoded into one), [`json`] the little JSON the
//! JetStream API needs, [`session`] the per-client state that survives a
//! reconnect, [`liveness`] the PING/PONG keepalive over injected time,
//! [`client`] the readiness loop over one socket that ties them together,
//! and [`jetstream`] the stream, direct-get and KV calls made through it.
//! [`tls`] and [`link`] carry the connection over TLS, [`auth`] and
//! [`nkey`] put the credentials into CONNECT, and [`access`] reads both
//! again before every connect attempt. Publishing a price and receiving
//! one allocate nothing, over TLS as over plain TCP.

pub(crate) mod access;
pub(crate) mod auth;
pub(crate) mod client;
pub(crate) mod jetstream;
pub(crate) mod json;
pub(crate) mod link;
pub(crate) mod liveness;
pub(crate) mod nkey;
pub(crate) mod proto;
pub(crate) mod session;
pub(crate) mod tls;

/// `max_payload` assumed until a server announces its own (the server's
/// own default, 1 MiB).
pub(crate) const MAX_PAYLOAD_DEFAULT: usize = 1 << 20;
