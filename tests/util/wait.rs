//! Waiting on a condition with a bounded timeout (never a bare sleep).

use std::time::{Duration, Instant};

/// Polls `cond` until it holds or `timeout` passes; yields between polls
/// and allocates nothing (usable inside allocation-counting windows).
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::yield_now();
    }
}
