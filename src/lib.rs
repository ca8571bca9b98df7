//! pricewire: a broker's price service.
//!
//! Liquidity-provider feeds come in, a pinned-thread pipeline over bounded
//! SPSC rings aggregates them into tradable prices, and a binary-protocol
//! listener streams them to subscriber terminals. Modules follow the data
//! flow: [`model`] → [`feed`] → [`engine`] → [`gateway`], standing on
//! [`runtime`] (waits, pinning, counters, feed ports, hosting, every libc
//! call), and [`pipeline`] and [`service`] assemble them. The layers and
//! the data path are in `docs/design.md`; `tests/it/module_graph.rs` holds the
//! graph free of cycles.
//!
//! The hot path (feed decode → engine → fan-out) allocates nothing, takes
//! no lock and makes no blocking call once warmed up; `tests/zero_alloc_*`
//! prove it with a counting allocator.
#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs, unreachable_pub)]

pub mod admission;
pub mod auth;
pub mod bus;
pub mod capture;
pub mod cli;
pub mod client;
pub mod clock;
pub mod config;
pub mod engine;
pub mod feed;
pub mod gateway;
pub mod model;
pub mod ops;
pub mod overload;
pub mod pipeline;
pub mod refdata;
pub mod requests;
pub mod resilience;
pub mod runtime;
pub mod service;
pub mod wire;
