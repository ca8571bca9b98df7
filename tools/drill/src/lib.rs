//! pricewire-drill: the failure matrix of the price bus, on real binaries.
//!
//! Each scenario ([`scenarios::SCENARIOS`]) starts a real 3-node
//! `nats-server` cluster with JetStream ([`nats`]), `pricewire serve`
//! cores each fed by its own provider ([`feeder`]) and edges, and puts a
//! recorder on every edge ([`recorder`]): a terminal built on the client
//! SDK that keeps every (stream, symbol, seq, bid, ask, flags, arrival
//! time) it is shown. It then causes its failures — a core killed or
//! frozen, its feeds cut, NATS nodes killed, the lease bucket deleted, an
//! edge killed, a standalone server restarted — and the checker
//! ([`check`]) judges every tape against the invariants I1–I4 of issue
//! #27, printing each one's verdict per scenario with the delays it
//! measured.
//!
//! Processes run with the shipped defaults (lease, heartbeat, max age),
//! each on free loopback ports, stopped when the lab drops. `cargo test
//! -p pricewire-drill` runs the short form: a few scenarios with halved
//! waits, whose verdicts do not depend on the host's speed (a time bound
//! becomes "by the end of the scenario"; the delays are still reported).
//!
//! Adding a scenario (an overload drill, say) is a function over a
//! [`lab::Lab`] and an entry in [`scenarios::SCENARIOS`].

pub mod access;
pub mod check;
pub mod feeder;
pub mod lab;
pub mod nats;
pub mod recorder;
pub mod report;
pub mod scenarios;
