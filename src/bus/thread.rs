//! The `pw-bus` thread's handle, the same for a core's publisher and an
//! edge's subscriber: a stop flag the thread polls, and the join, on an
//! explicit halt or on drop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::BusError;
use crate::runtime::{Policy, Supervised, Supervisor};

/// A running `pw-bus` thread; halted (stop flag, then join) on drop.
pub(crate) struct BusThread {
    stop: Arc<AtomicBool>,
    thread: Option<Supervised<()>>,
}

impl BusThread {
    /// Starts `run` on a supervised thread named `pw-bus`, handing it the
    /// stop flag. A start-up failure the thread reports on its ready
    /// channel is not a death (`supervise::end_expected`).
    pub(crate) fn spawn(
        supervisor: &Supervisor,
        policy: Policy,
        run: impl FnOnce(Arc<AtomicBool>) + Send + 'static,
    ) -> Result<BusThread, BusError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = supervisor
            .spawn("pw-bus", policy, move || run(flag))
            .map_err(|e| BusError::Thread(e.to_string()))?;
        Ok(BusThread {
            stop,
            thread: Some(thread),
        })
    }

    /// Sets the stop flag and waits for the thread to finish; idempotent.
    pub(crate) fn halt(&mut self) {
        if let Some(t) = &self.thread {
            t.request_stop();
        }
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for BusThread {
    fn drop(&mut self) {
        self.halt();
    }
}
