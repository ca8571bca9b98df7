//! Stage supervision: no stage dies unseen.
//!
//! Contract: every long-lived thread of the service is spawned through
//! [`Supervisor::spawn`], which keeps its [`JoinHandle`] (inside the
//! [`Supervised`] the owner holds) and judges how the thread ended, by
//! Erlang/OTP's rule — a stage that ends when it was not asked to stop is
//! fatal:
//!
//! - a **panic** that unwinds out of a stage's body is always fatal (the
//!   panics of one connection's bytes are caught at that connection's
//!   boundary first and never get here; see docs/design.md, "Fault
//!   isolation");
//! - a **return** is fatal for a [`Policy::Permanent`] stage unless its
//!   owner called [`Supervised::request_stop`] before it ended; a
//!   [`Policy::Transient`] stage may return, because its input can end by
//!   design (a replay's last tick, the engine once every feed ended, the
//!   recorder once the engine let go of its ring).
//!
//! A fatal end is logged at error level with the stage's name and cause
//! (the panic message), recorded as the supervisor's first death (which
//! `/livez` reports, `ops::Health`) and handed to the watcher
//! ([`Supervisor::watch`]), which exits the process with
//! [`EXIT_STAGE_DIED`] once its grace has passed. Nothing here is on a
//! stage's loop: the supervisor is touched at spawn, at a thread's end, by
//! a stop request and by a scrape; the list of stages is a `Mutex` taken
//! on those cold paths only.

use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::clock::monotonic_ns;

/// Exit code of a process whose stage died (BSD `EX_SOFTWARE`, "internal
/// software error"): distinct from a cut shutdown (1) and a forced one
/// (130).
pub const EXIT_STAGE_DIED: i32 = 70;

/// Default of `--stage-exit-grace-ms`: how long a process whose stage died
/// keeps failing `/livez` (and flushing its recorder) before it exits.
pub const STAGE_EXIT_GRACE_MS_DEFAULT: u64 = 1_000;

/// Largest `--stage-exit-grace-ms`.
pub const STAGE_EXIT_GRACE_MS_MAX: u64 = 30_000;

/// Longest cause kept for a log line and the `/livez` body, in bytes.
pub const CAUSE_BYTES_MAX: usize = 256;

/// Deaths queued for the watcher; later ones are logged but not queued
/// (the first is the one that decides).
const NOTICES_MAX: usize = 64;

/// What a stage's end means (Erlang/OTP's restart types, with "restart"
/// replaced by "take the process down").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Runs until asked to stop: any other end is fatal.
    Permanent,
    /// May return when its input ends; only a panic is fatal.
    Transient,
}

/// How a stage's thread ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// The body panicked; the panic message (at most
    /// [`CAUSE_BYTES_MAX`] bytes).
    Panicked(String),
    /// The body returned.
    Returned,
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Escaped: a panic message may quote bytes from outside.
            Cause::Panicked(m) => write!(f, "panicked: {}", m.escape_debug()),
            Cause::Returned => f.write_str("returned without being asked to stop"),
        }
    }
}

/// A stage that ended fatally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Death {
    /// The stage (its thread's name).
    pub stage: String,
    /// How it ended.
    pub cause: Cause,
    /// When (monotonic ns).
    pub at_ns: u64,
}

impl std::fmt::Display for Death {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stage {} died: {}", self.stage, self.cause)
    }
}

/// Whether an end with `cause` of a stage under `policy`, asked to stop
/// or not, is fatal (the rule in the module header).
pub fn is_fatal(policy: Policy, stop_requested: bool, cause: &Cause) -> bool {
    match cause {
        Cause::Panicked(_) => true,
        Cause::Returned => policy == Policy::Permanent && !stop_requested,
    }
}

struct Cell {
    name: String,
    policy: Policy,
    stop_requested: AtomicBool,
    /// Set once the thread ended (whatever the verdict).
    ended: AtomicBool,
}

struct Inner {
    /// Running stages and the dead ones (kept, to show them as down).
    stages: Mutex<Vec<Arc<Cell>>>,
    first: OnceLock<Death>,
    tx: Sender<Death>,
    rx: Receiver<Death>,
}

/// The one supervisor of a process's stages; cheap to clone (shared).
#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

impl Default for Supervisor {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("first_death", &self.first_death())
            .finish_non_exhaustive()
    }
}

/// A supervised thread: its handle and its stop request.
pub struct Supervised<T> {
    cell: Arc<Cell>,
    handle: JoinHandle<T>,
}

impl<T> std::fmt::Debug for Supervised<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervised")
            .field("stage", &self.cell.name)
            .finish_non_exhaustive()
    }
}

impl<T> Supervised<T> {
    /// The owner is about to stop the stage: its end from now on is
    /// expected. Call it before the stop signal, not after (the thread
    /// may end before a later call).
    pub fn request_stop(&self) {
        self.cell.stop_requested.store(true, Ordering::Release);
    }

    /// Waits for the thread to end, after [`Supervised::request_stop`]
    /// (a join is a stop). `Err` carries a panic's payload.
    pub fn join(self) -> std::thread::Result<T> {
        self.request_stop();
        self.handle.join()
    }

    /// The thread (to unpark it).
    pub fn thread(&self) -> &std::thread::Thread {
        self.handle.thread()
    }

    /// The thread has ended.
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// The stage's name.
    pub fn name(&self) -> &str {
        &self.cell.name
    }
}

impl Supervisor {
    /// A supervisor with no stage yet and no watcher.
    pub fn new() -> Supervisor {
        let (tx, rx) = crossbeam_channel::bounded(NOTICES_MAX);
        Supervisor {
            inner: Arc::new(Inner {
                stages: Mutex::new(Vec::new()),
                first: OnceLock::new(),
                tx,
                rx,
            }),
        }
    }

    /// Spawns `body` on a thread named `name` (the stage's name in logs,
    /// `/livez` and `pricewire_stage_up`) and watches how it ends.
    ///
    /// # Errors
    /// The thread could not be spawned (nothing is registered then).
    pub fn spawn<T, F>(
        &self,
        name: impl Into<String>,
        policy: Policy,
        body: F,
    ) -> io::Result<Supervised<T>>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let name = name.into();
        let cell = Arc::new(Cell {
            name: name.clone(),
            policy,
            stop_requested: AtomicBool::new(false),
            ended: AtomicBool::new(false),
        });
        self.lock().push(cell.clone());
        let (inner, watched) = (self.inner.clone(), cell.clone());
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            CURRENT.with(|c| *c.borrow_mut() = Some(watched.clone()));
            // Every log line of the stage carries its name as a span field
            // (`span.stage` in JSON logs); entered once, before any hot loop.
            let _span = tracing::info_span!("stage", stage = %watched.name).entered();
            // AssertUnwindSafe: after a panic nothing of the body's state
            // is looked at again; it is dropped here, on its own thread.
            match panic::catch_unwind(AssertUnwindSafe(body)) {
                Ok(v) => {
                    inner.ended(&watched, Cause::Returned);
                    v
                }
                Err(payload) => {
                    inner.ended(&watched, Cause::Panicked(panic_message(&*payload)));
                    // The owner's join still sees the panic.
                    panic::resume_unwind(payload)
                }
            }
        });
        match spawned {
            Ok(handle) => Ok(Supervised { cell, handle }),
            Err(e) => {
                self.lock().retain(|c| !Arc::ptr_eq(c, &cell));
                Err(e)
            }
        }
    }

    /// The first fatal end, if a stage died.
    pub fn first_death(&self) -> Option<&Death> {
        self.inner.first.get()
    }

    /// Every stage known now, running (`true`) or dead (`false`), in spawn
    /// order. Stages that ended as expected are no longer listed.
    pub fn stages(&self) -> Vec<(String, bool)> {
        self.lock()
            .iter()
            .map(|c| (c.name.clone(), !c.ended.load(Ordering::Acquire)))
            .collect()
    }

    /// Starts the watcher (`pw-supervise`): on the first fatal end it runs
    /// `on_fatal` on a thread of its own (the recorder's best-effort
    /// flush), waits until `grace` has passed since the death — `/livez`
    /// fails and `/metrics` shows the stage down all that while — and
    /// exits the process with [`EXIT_STAGE_DIED`], finished or not.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn watch(&self, grace: Duration, on_fatal: Box<dyn FnOnce() + Send>) -> io::Result<()> {
        let rx = self.inner.rx.clone();
        std::thread::Builder::new()
            .name("pw-supervise".into())
            .spawn(move || {
                let Ok(death) = rx.recv() else { return };
                let grace_ms = grace.as_millis() as u64;
                tracing::error!(stage = %death.stage, cause = %death.cause, grace_ms,
                    exit_code = EXIT_STAGE_DIED, "stage died: the process exits after the grace");
                let _ = std::thread::Builder::new()
                    .name("pw-fatal-flush".into())
                    .spawn(on_fatal);
                let due_ns = death.at_ns.saturating_add(grace.as_nanos() as u64);
                std::thread::sleep(Duration::from_nanos(due_ns.saturating_sub(monotonic_ns())));
                let after_ms = monotonic_ns().saturating_sub(death.at_ns) / 1_000_000;
                tracing::error!(stage = %death.stage, after_ms, exit_code = EXIT_STAGE_DIED,
                    "exiting: a stage died");
                std::process::exit(EXIT_STAGE_DIED);
            })
            .map(|_| ())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Cell>>> {
        // A panic while the list is held (a push or a retain) leaves it
        // whole: the guard is only ever held for one Vec operation.
        self.inner.stages.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    fn ended(&self, cell: &Arc<Cell>, cause: Cause) {
        cell.ended.store(true, Ordering::Release);
        let stopped = cell.stop_requested.load(Ordering::Acquire);
        if !is_fatal(cell.policy, stopped, &cause) {
            tracing::debug!(stage = %cell.name, "stage ended");
            let mut stages = self.stages.lock().unwrap_or_else(|p| p.into_inner());
            stages.retain(|c| !Arc::ptr_eq(c, cell));
            return;
        }
        let death = Death {
            stage: cell.name.clone(),
            cause,
            at_ns: monotonic_ns(),
        };
        tracing::error!(stage = %death.stage, cause = %death.cause, "stage died");
        let _ = self.first.set(death.clone());
        let _ = self.tx.try_send(death);
    }
}

thread_local! {
    /// The stage running on this thread, if it is supervised.
    static CURRENT: std::cell::RefCell<Option<Arc<Cell>>> = const { std::cell::RefCell::new(None) };
}

/// Called by a supervised stage about to end on purpose outside its
/// owner's stop (a start-up it refuses with a reason the owner reports):
/// its end is then not a death. Does nothing off a supervised thread.
pub fn end_expected() {
    CURRENT.with(|c| {
        if let Some(cell) = c.borrow().as_ref() {
            cell.stop_requested.store(true, Ordering::Release);
        }
    });
}

/// The message of a panic payload (`&str` or `String`, as `panic!`
/// makes), cut to [`CAUSE_BYTES_MAX`] at a character boundary.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)");
    let mut end = text.len().min(CAUSE_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
#[path = "supervise_tests.rs"]
mod tests;
