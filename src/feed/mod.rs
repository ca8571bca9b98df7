//! Feeds: where ticks come from.
//!
//! A feed thread polls one or more [`TickSource`]s, stamps each tick's
//! receive time and pushes it into the engine ring. Sources fill a caller-
//! owned batch buffer, so polling allocates nothing.

pub mod bridge;
pub mod fix;
pub mod ingest;
pub mod synthetic;

pub use crate::runtime::source::{SourcePoll, TickSource};
