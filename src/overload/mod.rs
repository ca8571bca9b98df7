//! The counters of the overload controls — connection and session
//! admission, the request queue and the adaptive concurrency limit — in
//! one struct of relaxed atomics ([`OverloadStats`]) that admission and
//! the request path both write and the metrics endpoint reads, with the
//! label enums they are counted by.
//!
//! It sits below both writers so neither imports the other for its
//! counters: admission and requests each depend on this module only.

pub mod reasons;
pub mod stats;

pub use reasons::{ShedReason, Stage};
pub use stats::{OverloadSnapshot, OverloadStats};
