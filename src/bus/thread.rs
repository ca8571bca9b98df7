//! The `pw-bus` thread's handle, the same for a core's publisher and an
//! edge's subscriber: a stop flag the thread polls, and the join, on an
//! explicit halt or on drop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::BusError;

/// A running `pw-bus` thread; halted (stop flag, then join) on drop.
pub(crate) struct BusThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BusThread {
    /// Starts `run` on a thread named `pw-bus`, handing it the stop flag.
    pub(crate) fn spawn(
        run: impl FnOnce(Arc<AtomicBool>) + Send + 'static,
    ) -> Result<BusThread, BusError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("pw-bus".into())
            .spawn(move || run(flag))
            .map_err(|e| BusError::Thread(e.to_string()))?;
        Ok(BusThread {
            stop,
            thread: Some(thread),
        })
    }

    /// Sets the stop flag and waits for the thread to finish; idempotent.
    pub(crate) fn halt(&mut self) {
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
