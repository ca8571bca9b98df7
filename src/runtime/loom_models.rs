//! loom model of the doorbell handshake on the production [`Doorbell`]
//! and [`Waiter`] (through `runtime::sync`; build with `--cfg pricewire_loom`): a
//! consumer that parks on an empty input is never left asleep after the
//! producer publishes and rings. A lost wake-up leaves the consumer parked
//! for good (under loom `park_timeout` has no timeout), which loom reports
//! as a deadlock.

use std::sync::Arc;

use loom::thread;

use super::sync::{AtomicU64, Ordering};
use super::wait::{Doorbell, WaitStrategy, Waiter};

/// loom's preemption bound (see `engine::loom_models`).
const PREEMPTIONS: usize = 2;

fn check(f: impl Fn() + Sync + Send + 'static) {
    // `Builder::new` reads LOOM_MAX_PREEMPTIONS: a deeper run by hand.
    let mut model = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        model.preemption_bound = Some(PREEMPTIONS);
    }
    model.check(f);
}

#[test]
fn loom_doorbell_never_loses_a_wake_up() {
    check(|| {
        let bell = Doorbell::new();
        // The consumer's input: the count of items published.
        let published = Arc::new(AtomicU64::new(0));
        let consumer = {
            let (bell, published) = (bell.clone(), published.clone());
            thread::spawn(move || {
                bell.bind_current_thread();
                // Park parks from the first idle turn: the handshake alone.
                let mut waiter = Waiter::new(WaitStrategy::Park, bell);
                let mut seen = 0;
                while seen < 2 {
                    let n = published.load(Ordering::Acquire);
                    if n > seen {
                        seen = n;
                        waiter.reset();
                    } else {
                        waiter.idle(|| published.load(Ordering::Acquire) > seen);
                    }
                }
            })
        };
        for n in 1..=2 {
            published.store(n, Ordering::Release);
            bell.ring();
        }
        consumer.join().unwrap();
    });
}
