//! The floor every stage stands on: how a stage waits, where its thread
//! runs, how it counts, how a feed hands ticks in, how one thread hosts
//! another stage, who watches every stage's thread (`supervise`), where
//! one connection's fault stops (`contain`), and every call across the
//! operating-system boundary.
//!
//! Contract: nothing here knows what a price, a provider or a subscriber
//! is beyond the plain [`crate::model`] values it carries; stages import
//! this module, never the other way round, and the pipeline
//! (`pipeline/`) only assembles them. Everything on the hot path
//! here (ring pushes, counters, doorbells, `swap` of a histogram) neither
//! allocates nor takes a lock; the `libc` calls in [`sys`] run at start-up
//! or on a stage's own thread at placement, never per tick.

pub mod affinity;
pub mod contain;
pub mod counter;
pub mod drill;
pub mod escape;
pub mod feed_port;
pub mod hosting;
pub mod latency;
pub mod listen;
#[cfg(all(test, pricewire_loom))]
mod loom_models;
pub mod progress;
pub mod proxy;
pub mod source;
pub mod supervise;
pub(crate) mod sync;
pub mod sys;
pub mod tls;
pub mod wait;

pub use affinity::{CpuMap, RtPriority, Stage};
pub use escape::{esc, esc_bytes};
pub use feed_port::{FeedPort, FeedStats};
pub use hosting::{HostedTask, HostedTasks, Threading};
pub use progress::Progress;
pub use source::{SourcePoll, TickSource};
pub use supervise::{Policy, Supervised, Supervisor};
pub use wait::{Doorbell, WaitStrategy, Waiter};
