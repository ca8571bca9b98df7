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

/// Polls `cond` until it holds; fails the test, at the caller's line and
/// naming `what`, when `timeout` passes first.
// The zero-allocation binaries include this file for wait_until alone.
#[allow(dead_code)]
#[track_caller]
pub fn expect(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    assert!(
        wait_until(timeout, &mut cond),
        "timed out after {timeout:?} waiting: {what}"
    );
}
