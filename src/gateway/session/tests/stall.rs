//! Issue #18 item 1: a stall of the server's loop is the server's
//! silence, not the peer's; liveness is judged on what arrived.

use super::*;

fn timer(r: &mut Rig, ms: u64) -> Timer {
    r.at_ms(ms).call(|s, ctx| s.on_timer(ctx))
}

fn idle_cut(s: &Sent) -> bool {
    disconnect(DisconnectReason::IDLE_TIMEOUT, "peer silent")(s)
}

#[test]
fn without_a_stall_the_same_silence_is_cut() {
    // The control for the tests below: 6 s of silence cuts the peer.
    let mut r = Rig::new().logged_on();
    r.at_ms(500).feed(&heartbeat());
    timer(&mut r, 6_600);
    assert!(r.sent().iter().any(idle_cut));
    assert!(r.s.is_closing());
}

#[test]
fn a_stall_longer_than_the_dead_interval_cuts_no_one() {
    let mut r = Rig::new().logged_on();
    r.at_ms(500).feed(&heartbeat());
    // The loop stopped at 600 ms and ran again at 6.6 s (3 s dead
    // interval): the shard measured a 6-s stall.
    r.s.on_stall(6_000 * MS_NS);
    assert_eq!(timer(&mut r, 6_600), Timer::Idle);
    assert!(!r.sent().iter().any(idle_cut));
    assert!(r.s.is_active());
    // The heartbeats the peer sent meanwhile are read late: alive.
    r.at_ms(6_610).feed(&heartbeat());
    timer(&mut r, 9_000);
    assert!(r.s.is_active());
    // Silence after the stall still counts: 3 s after the last frame.
    timer(&mut r, 9_611);
    assert!(r.sent().iter().any(idle_cut));
}

#[test]
fn silence_is_judged_only_after_reading_what_waits() {
    let mut r = Rig::new().logged_on();
    r.at_ms(500).feed(&heartbeat());
    let cfg = cfg();
    assert!(!r.s.silence_due(&cfg, T0 + 3_500 * MS_NS));
    // Due: the shard reads the socket before the timer; the heartbeat
    // waiting there proves the peer alive.
    assert!(r.s.silence_due(&cfg, T0 + 3_501 * MS_NS));
    r.at_ms(3_501).feed(&heartbeat());
    assert!(!r.s.silence_due(&cfg, T0 + 3_501 * MS_NS));
    timer(&mut r, 3_501);
    assert!(r.s.is_active());
}

#[test]
fn a_stall_postpones_the_logon_and_frame_deadlines() {
    let mut r = Rig::new();
    // Half a frame at 100 ms, then a 10-s stall.
    let hb = heartbeat();
    r.at_ms(100).feed(&hb[..hb.len() / 2]);
    r.s.on_stall(10_000 * MS_NS);
    let cfg = cfg();
    assert!(!r.s.silence_due(&cfg, T0 + 10_200 * MS_NS));
    assert_eq!(timer(&mut r, 10_200), Timer::Idle);
    assert!(r.sent().is_empty());
    assert!(!r.s.is_closing());
    // The unfinished frame's 2 s run from where the stall moved it.
    assert!(!r.s.silence_due(&cfg, T0 + 12_100 * MS_NS));
    assert!(r.s.silence_due(&cfg, T0 + 12_101 * MS_NS));
}
