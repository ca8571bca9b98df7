//! The signal glue with real signals: the first SIGTERM begins the shutdown
//! (readiness off at once), the second asks for an immediate exit. One test
//! in this binary, so no other test shares the process's signal handlers.

use pricewire::clock::ManualClock;
use pricewire::ops::{Health, SignalCallbacks, SignalWatcher};
use signal_hook::consts::SIGTERM;
use std::time::Duration;

#[test]
fn first_sigterm_drains_second_exits() {
    let health = Health::new(ManualClock::new(0), 1_000);
    health.set_serving();
    let (first_tx, first_rx) = crossbeam_channel::bounded(1);
    let (second_tx, second_rx) = crossbeam_channel::bounded(1);
    let h = health.clone();
    let watcher = SignalWatcher::spawn(
        SignalCallbacks {
            on_first: Box::new(move |signo| {
                h.begin_draining();
                let _ = first_tx.try_send(signo);
            }),
            // The service exits the process here; the test only records it.
            on_second: Box::new(move |signo| {
                let _ = second_tx.try_send(signo);
            }),
        },
        health.supervisor(),
    )
    .unwrap();

    signal_hook::low_level::raise(SIGTERM).unwrap();
    let first = first_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("first signal seen");
    assert_eq!(first, SIGTERM);
    assert!(!health.is_ready(), "readiness off after the first signal");
    assert!(second_rx.try_recv().is_err(), "one signal is not an exit");

    signal_hook::low_level::raise(SIGTERM).unwrap();
    let second = second_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("second signal seen");
    assert_eq!(second, SIGTERM);
    watcher.close();
}
