//! Waiting on a condition with a bounded timeout (never a bare sleep).

use std::time::{Duration, Instant};

/// Polls `cond` until it holds or `timeout` passes; yields between polls
/// for the first millisecond, then every millisecond; it
/// allocates nothing (usable inside allocation-counting windows).
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return false;
        }
        // Yield for the first millisecond (a condition about to hold is
        // seen at once), then look every millisecond: dozens of waiting
        // test threads spinning on 2 cores took the CPU from the servers
        // they waited for (a fresh-clone CI beside two CPU hogs).
        if waited < POLL {
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(POLL);
        }
    }
}

/// The polling interval of [`wait_until`] once its first interval passed.
const POLL: Duration = Duration::from_millis(1);

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
