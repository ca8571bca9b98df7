//! Why [`RequestService::start`](super::RequestService::start) started
//! nothing: a setting out of range, or a thread the OS would not spawn.

use std::io;

use crate::requests::{AdaptiveError, RequestsError};

/// The request service did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `--request-workers` outside 1..=64.
    #[error("--request-workers: 1..=64")]
    Workers {
        /// The count asked for.
        workers: usize,
    },
    /// The request queue's settings refused.
    #[error("{0}")]
    Queue(#[from] RequestsError),
    /// The adaptive limit's settings refused.
    #[error("{0}")]
    Adaptive(#[from] AdaptiveError),
    /// A dispatcher or worker thread could not be spawned.
    #[error("{0}")]
    Spawn(#[from] io::Error),
}
