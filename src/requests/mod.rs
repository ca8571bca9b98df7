//! Request overload control: what stands between the gateways and the
//! request workers (snapshot, symbol list, history requests).
//!
//! - [`queue`]: the bounded [`RequestQueue`] — deadlines, CoDel overload
//!   detection, adaptive LIFO, shedding with jittered retry-after, a
//!   critical lane and per-account fairness.
//! - [`adaptive`]: the Gradient2-style [`AdaptiveLimit`] on in-flight work.
//! - counters: [`OverloadStats`] (in `overload/`, shared with admission),
//!   every counter of the overload controls in one struct of atomics.
//!
//! Everything here is sans-IO: no clock reads (time is `now_ns`), no
//! sockets, no threads, no allocation after construction. The gateway and
//! worker threads own the instances and turn a [`Shed`] or a
//! admission `Reject` into a reject frame.
//!
//! # How the threads use it
//!
//! ```text
//! gateway (on a request frame)           worker loop
//! ----------------------------           -----------
//! let arrival = Arrival { account,       if !limit.try_acquire() { wait for a release }
//!     budget_us, critical,               match queue.pop(now_ns, |shed| reject(shed)) {
//!     critical_entitled };                   Some(req) => { serve(req); limit.release();
//! match queue.push(req, arrival, now) {                     limit.on_sample(rtt, inflight, now) }
//!     Ok(None) => {}                         None => { limit.release(); idle wait }
//!     Ok(Some(evicted)) => reject(evicted), }
//!     Err(refused) => reject(refused),
//! }
//! ```
//!
//! A reject for [`ShedReason::Overloaded`], [`ShedReason::QueueFull`] and
//! [`ShedReason::RateLimited`] carries `retry_after_ms`; an expired request
//! may be answered with Reject(deadline expired) or dropped silently.

pub mod adaptive;
pub mod answers;
mod codel;
pub mod gate;
mod heaviest;
pub mod hops;
pub mod inflight;
pub mod port;
pub mod queue;
mod rotation;
pub mod service;

pub use crate::overload::{OverloadSnapshot, OverloadStats};
pub use adaptive::{AdaptiveConfig, AdaptiveError, AdaptiveLimit};
pub use queue::{
    Arrival, Dequeued, QueueConfig, RequestQueue, RequestsError, Shed, ShedReason,
    NO_DEADLINE_BUDGET_US,
};
