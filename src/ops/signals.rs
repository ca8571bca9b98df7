//! SIGTERM / SIGINT handling: the first signal begins the graceful
//! shutdown, a second one exits at once.
//!
//! Sans-IO core: [`SignalCounter::observe`] turns the n-th signal into an
//! action. Thin glue: [`SignalWatcher::spawn`] runs a `signal-hook`
//! iterator on its own thread (the handler itself only writes to a pipe,
//! which is async-signal-safe) and calls the service's callbacks from that
//! ordinary thread. The first callback should flip readiness and wake the
//! shutdown driver; the second should set the forced flag and exit with
//! [`EXIT_FORCED`](crate::ops::shutdown::EXIT_FORCED).

use crate::ops::OpsError;
use crate::runtime::{Policy, Supervised, Supervisor};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::{Handle, Signals};
use std::sync::atomic::{AtomicU32, Ordering};

/// What the n-th termination signal asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalAction {
    /// First signal: run the shutdown plan.
    BeginShutdown,
    /// Any later signal: stop now.
    ExitNow,
}

/// Counts termination signals.
#[derive(Debug, Default)]
pub struct SignalCounter {
    seen: AtomicU32,
}

impl SignalCounter {
    /// Counts one signal and says what to do about it.
    pub fn observe(&self) -> SignalAction {
        if self.seen.fetch_add(1, Ordering::AcqRel) == 0 {
            SignalAction::BeginShutdown
        } else {
            SignalAction::ExitNow
        }
    }

    /// Signals counted so far.
    pub fn seen(&self) -> u32 {
        self.seen.load(Ordering::Acquire)
    }
}

/// Callbacks invoked on the watcher thread with the signal number.
pub struct SignalCallbacks {
    /// Called on the first signal.
    pub on_first: Box<dyn FnMut(i32) + Send>,
    /// Called on every later signal.
    pub on_second: Box<dyn FnMut(i32) + Send>,
}

/// The signal thread. `close` stops watching (the handlers stay installed,
/// so later signals are ignored rather than killing the process mid-way).
#[derive(Debug)]
pub struct SignalWatcher {
    handle: Handle,
    thread: Option<Supervised<()>>,
}

impl SignalWatcher {
    /// Watches SIGTERM and SIGINT on a thread `supervisor` watches.
    pub fn spawn(callbacks: SignalCallbacks, supervisor: &Supervisor) -> Result<Self, OpsError> {
        Self::spawn_for(&[SIGTERM, SIGINT], callbacks, supervisor)
    }

    /// Watches the given signals.
    pub(crate) fn spawn_for(
        signals: &[i32],
        mut callbacks: SignalCallbacks,
        supervisor: &Supervisor,
    ) -> Result<Self, OpsError> {
        let mut signals = Signals::new(signals).map_err(OpsError::Signals)?;
        let handle = signals.handle();
        let thread = supervisor
            .spawn("ops-signals", Policy::Permanent, move || {
                let counter = SignalCounter::default();
                for signo in signals.forever() {
                    crate::runtime::drill::point("signals", 0);
                    tracing::warn!(signo, "termination signal");
                    match counter.observe() {
                        SignalAction::BeginShutdown => (callbacks.on_first)(signo),
                        SignalAction::ExitNow => (callbacks.on_second)(signo),
                    }
                }
            })
            .map_err(OpsError::Signals)?;
        Ok(SignalWatcher {
            handle,
            thread: Some(thread),
        })
    }

    /// Stops the watcher thread and joins it.
    pub fn close(mut self) {
        self.close_inner();
    }

    fn close_inner(&mut self) {
        if let Some(t) = &self.thread {
            t.request_stop();
        }
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SignalWatcher {
    fn drop(&mut self) {
        self.close_inner();
    }
}

/// The SIGHUP thread: every SIGHUP runs the reload callback (reading the
/// TLS certificate files again) on an ordinary thread. Dropping it stops
/// watching; the handler stays installed, so a later SIGHUP is ignored
/// rather than ending the process.
#[derive(Debug)]
pub struct ReloadWatcher {
    inner: SignalWatcher,
}

impl ReloadWatcher {
    /// Watches SIGHUP on a thread `supervisor` watches.
    pub fn spawn(
        reload: Box<dyn FnMut() + Send>,
        supervisor: &Supervisor,
    ) -> Result<Self, OpsError> {
        Self::spawn_for(signal_hook::consts::SIGHUP, reload, supervisor)
    }

    /// Watches `signo` (tests use SIGUSR1).
    pub fn spawn_for(
        signo: i32,
        mut reload: Box<dyn FnMut() + Send>,
        supervisor: &Supervisor,
    ) -> Result<Self, OpsError> {
        let mut signals = Signals::new([signo]).map_err(OpsError::Signals)?;
        let handle = signals.handle();
        let thread = supervisor
            .spawn("ops-reload", Policy::Permanent, move || {
                for _ in signals.forever() {
                    crate::runtime::drill::point("reload", 0);
                    reload();
                }
            })
            .map_err(OpsError::Signals)?;
        Ok(ReloadWatcher {
            inner: SignalWatcher {
                handle,
                thread: Some(thread),
            },
        })
    }

    /// Stops watching and joins the thread.
    pub fn close(self) {
        self.inner.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_signal_begins_later_ones_exit() {
        let c = SignalCounter::default();
        assert_eq!(c.observe(), SignalAction::BeginShutdown);
        assert_eq!(c.observe(), SignalAction::ExitNow);
        assert_eq!(c.observe(), SignalAction::ExitNow);
        assert_eq!(c.seen(), 3);
    }
}
