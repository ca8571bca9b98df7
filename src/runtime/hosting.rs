//! Stages run by another stage's thread: `--threading shared`.
//!
//! With `--threading dedicated` every stage has a thread of its own, and
//! every hand-off between stages is a ring push plus, when the consumer
//! sleeps, a wake-up: a futex or eventfd write, a context switch and the
//! scheduler's say on when the next stage runs. On a machine with fewer
//! cores than stages those wake-ups are most of a tick's latency (the peer
//! benchmark in BENCHMARKS.md measured them).
//!
//! With `--threading shared` (the `serve` default) the engine, and with a
//! subscriber gateway the provider ingest listener, run as tasks inside
//! shard 0's loop: the same rings, the same code and the same bounds, one
//! thread. A provider quote then goes from the bridge's socket to the
//! subscribers' sockets in one loop turn of one thread, with one kernel
//! wake-up (the socket's). This is the composite-agent idea of Aeron's
//! media driver in its SHARED threading mode: stages stay separate objects
//! joined by queues; only the thread that turns them is shared.
//!
//! A host registers each task's sockets in its own poller (one
//! `epoll_wait` serves every stage of the thread), routes their events to
//! the task, turns each task once per loop turn, asks
//! [`HostedTask::has_work`] before it sleeps, and drops a task once it
//! reports [`HostedTask::finished`].

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

/// Smallest feed ring with `--threading shared`: a hosted ingest listener
/// reads only while the ring can take a whole inbound buffer of quotes
/// (about 1,500), so the ring must hold more than that.
pub const SHARED_FEED_RING_MIN: usize = 4096;

/// How stages are mapped onto threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Threading {
    /// One thread per stage (feeds, ingest, engine, each shard).
    #[default]
    Dedicated,
    /// Engine and provider ingest run inside shard 0's thread.
    Shared,
}

/// What the host's poller said about one of a task's sockets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Data (or the end) is ready to read without blocking.
    pub readable: bool,
    /// The socket can take more bytes without blocking.
    pub writable: bool,
    /// The peer closed or the socket has an error: read to the end.
    pub closed: bool,
}

/// Tokens each task may use in its host's poller.
pub const TASK_TOKENS: usize = 1 << 24;

/// A stage turned by a host thread.
pub trait HostedTask: Send {
    /// The stage's name, for logs.
    fn name(&self) -> &'static str;
    /// Registers the task's sockets with the host's poller, with tokens
    /// `token_base + t` for `t < TASK_TOKENS`. Called once, before the
    /// first turn.
    fn register(&mut self, _registry: &mio::Registry, _token_base: usize) -> std::io::Result<()> {
        Ok(())
    }
    /// One of the task's sockets is ready (`token` relative to its base).
    fn on_event(&mut self, _token: usize, _ready: Readiness) {}
    /// One turn of work at `now_ns`. Returns how much was done (0 = idle).
    fn turn(&mut self, now_ns: u64) -> usize;
    /// Called by the host between chunks of a long loop turn (writes to
    /// thousands of connections at a market-open herd): do what must not
    /// wait for the whole turn, such as taking new quotes and pricing them
    /// for the other shards. Default: a normal turn.
    fn between(&mut self, now_ns: u64) -> usize {
        self.turn(now_ns)
    }
    /// Work is waiting: the host must not sleep.
    fn has_work(&self) -> bool;
    /// The task holds something it must offer again on a timer, because
    /// nothing will wake the host when it can go (the engine's prices
    /// parked for another shard's full ring): the host parks briefly.
    /// Otherwise every input of the task wakes the host and it may park
    /// until its own next timer. Default: nothing to retry.
    fn retry_pending(&self) -> bool {
        false
    }
    /// When the task's own timer is next due (monotonic ns), if it has
    /// one: a host that parks wakes by then, so the timer runs on time
    /// while no input arrives. Default: none.
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }
    /// The task has ended; the host drops it (which releases its rings).
    fn finished(&self) -> bool;
}

/// How long a stop waits for a host to drop a finished task.
pub const HOSTED_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Held by a hosted task; dropping the task drops it, which ends
/// [`Dropped::wait`] on the other side.
pub struct DropSignal(#[allow(dead_code)] Sender<()>);

/// The owner's side of a hosted task (the pipeline for the engine, the
/// ingest handle for the listener): waits until the host dropped it.
pub struct Dropped(Receiver<()>);

/// A linked pair: give the signal to the task, keep the waiter.
pub fn drop_signal() -> (DropSignal, Dropped) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    (DropSignal(tx), Dropped(rx))
}

impl Dropped {
    /// Waits (bounded) until the host dropped the task. True if it did.
    pub fn wait(&self, timeout: Duration) -> bool {
        matches!(
            self.0.recv_timeout(timeout),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) | Ok(())
        )
    }
}

/// The tasks one host turns. A task keeps its index for life (finished
/// ones leave an empty slot), so its poller tokens stay its own.
#[derive(Default)]
pub struct HostedTasks {
    tasks: Vec<Option<Box<dyn HostedTask>>>,
}

impl HostedTasks {
    /// Adds a task, turned after the ones already there.
    pub fn push(&mut self, task: Box<dyn HostedTask>) {
        self.tasks.push(Some(task));
    }

    /// Adds a task turned before the others (a producer, such as the
    /// ingest listener ahead of the engine it feeds). Only before
    /// [`HostedTasks::register`].
    pub fn push_first(&mut self, task: Box<dyn HostedTask>) {
        self.tasks.insert(0, Some(task));
    }

    /// True when no task is left (none given, or all finished).
    pub fn is_empty(&self) -> bool {
        self.tasks.iter().all(Option::is_none)
    }

    /// Registers every task's sockets with the host's poller: task `k`
    /// gets tokens `token_base + k * TASK_TOKENS ..`.
    pub fn register(&mut self, registry: &mio::Registry, token_base: usize) -> std::io::Result<()> {
        for (k, t) in self.tasks.iter_mut().enumerate() {
            if let Some(t) = t {
                t.register(registry, token_base + k * TASK_TOKENS)?;
            }
        }
        Ok(())
    }

    /// Routes a poller event (token relative to the host's base) to its
    /// task.
    #[inline]
    pub fn on_event(&mut self, token: usize, ready: Readiness) {
        if let Some(Some(t)) = self.tasks.get_mut(token / TASK_TOKENS) {
            t.on_event(token % TASK_TOKENS, ready);
        }
    }

    /// Any task has work waiting (the host must not sleep).
    pub fn has_work(&self) -> bool {
        self.tasks.iter().flatten().any(|t| t.has_work())
    }

    /// Any task must retry something on a timer (the host parks briefly).
    pub fn retry_pending(&self) -> bool {
        self.tasks.iter().flatten().any(|t| t.retry_pending())
    }

    /// The earliest timer of any task ([`HostedTask::next_timer_ns`]).
    pub fn next_timer_ns(&self) -> Option<u64> {
        self.tasks
            .iter()
            .flatten()
            .filter_map(|t| t.next_timer_ns())
            .min()
    }

    /// Runs every task's [`HostedTask::between`]. Returns the work done.
    #[inline]
    pub fn between(&mut self, now_ns: u64) -> usize {
        self.tasks
            .iter_mut()
            .flatten()
            .map(|t| t.between(now_ns))
            .sum()
    }

    /// Turns every task once and drops the finished ones. Returns the work
    /// done.
    #[inline]
    pub fn turn(&mut self, now_ns: u64) -> usize {
        let mut work = 0;
        let mut finished = false;
        for t in self.tasks.iter_mut().flatten() {
            work += t.turn(now_ns);
            finished |= t.finished();
        }
        if finished {
            for slot in &mut self.tasks {
                if slot.as_ref().is_some_and(|t| t.finished()) {
                    let t = slot.take().expect("checked");
                    tracing::info!(task = t.name(), "hosted stage finished");
                }
            }
        }
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Counter {
        left: usize,
        events: Arc<AtomicUsize>,
        timer: Option<u64>,
    }

    impl HostedTask for Counter {
        fn name(&self) -> &'static str {
            "counter"
        }
        fn on_event(&mut self, token: usize, _r: Readiness) {
            self.events.fetch_add(token + 1, Ordering::Relaxed);
        }
        fn turn(&mut self, _now: u64) -> usize {
            if self.left == 0 {
                return 0;
            }
            self.left -= 1;
            1
        }
        fn has_work(&self) -> bool {
            self.left > 0
        }
        fn finished(&self) -> bool {
            self.left == 0
        }
        fn next_timer_ns(&self) -> Option<u64> {
            self.timer
        }
    }

    #[test]
    fn the_host_wakes_for_the_earliest_task_timer() {
        let mut tasks = HostedTasks::default();
        assert_eq!(tasks.next_timer_ns(), None, "no tasks");
        for (left, timer) in [(1, None), (2, Some(900)), (3, Some(400))] {
            tasks.push(Box::new(Counter {
                left,
                events: Arc::default(),
                timer,
            }));
        }
        assert_eq!(tasks.next_timer_ns(), Some(400));
        tasks.turn(0);
        tasks.turn(0); // the 2-turn task (timer 900) finishes
        assert_eq!(tasks.next_timer_ns(), Some(400));
        tasks.turn(0); // the last one finishes: no timer left
        assert_eq!(tasks.next_timer_ns(), None);
    }

    #[test]
    fn events_reach_their_task_and_finished_tasks_are_dropped() {
        let mut tasks = HostedTasks::default();
        let events = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
        for (left, e) in [1, 3].into_iter().zip(&events) {
            tasks.push(Box::new(Counter {
                left,
                events: e.clone(),
                timer: None,
            }));
        }
        tasks.on_event(TASK_TOKENS + 4, Readiness::default());
        assert_eq!(events[0].load(Ordering::Relaxed), 0);
        assert_eq!(events[1].load(Ordering::Relaxed), 5, "task 1, token 4");
        assert_eq!(tasks.turn(0), 2);
        assert!(
            tasks.tasks[0].is_none(),
            "the first task finished and was dropped"
        );
        tasks.on_event(3, Readiness::default()); // the dropped task's token: ignored
        assert_eq!(events[0].load(Ordering::Relaxed), 0);
        assert!(tasks.has_work());
        assert_eq!(tasks.turn(0), 1);
        assert!(!tasks.is_empty());
        assert_eq!(tasks.turn(0), 1);
        assert!(tasks.is_empty());
        assert!(!tasks.has_work());
        assert_eq!(tasks.turn(0), 0);
    }

    #[test]
    fn engine_done_reports_a_dropped_engine() {
        let (signal, done) = drop_signal();
        assert!(!done.wait(Duration::from_millis(1)), "still running");
        drop(signal);
        assert!(done.wait(Duration::from_millis(1)));
    }
}
