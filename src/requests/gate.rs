//! A gate the request workers pass before each job: closed, they take no
//! job (the queue then builds as under a worker that cannot keep up).
//! Drills and tests use it to form a standing queue by holding the
//! worker, instead of by outrunning it, so what they check does not
//! depend on how fast the host is. Off in the service (`None`): the
//! worker never looks at it.

use std::sync::{Condvar, Mutex};

/// Open or closed; workers wait while closed.
#[derive(Debug, Default)]
pub struct WorkerGate {
    closed: Mutex<bool>,
    opened: Condvar,
}

impl WorkerGate {
    /// A gate, closed if `closed`.
    pub fn new(closed: bool) -> WorkerGate {
        WorkerGate {
            closed: Mutex::new(closed),
            opened: Condvar::new(),
        }
    }

    /// Closes it: workers finish the job they hold and wait before the next.
    pub fn close(&self) {
        *self.closed.lock().unwrap_or_else(|e| e.into_inner()) = true;
    }

    /// Opens it and wakes the waiting workers.
    pub fn open(&self) {
        *self.closed.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.opened.notify_all();
    }

    /// Returns once the gate is open.
    pub fn pass(&self) {
        let mut closed = self.closed.lock().unwrap_or_else(|e| e.into_inner());
        while *closed {
            closed = self.opened.wait(closed).unwrap_or_else(|e| e.into_inner());
        }
    }
}
