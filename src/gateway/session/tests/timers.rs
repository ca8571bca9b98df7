//! §4.1 timers of a logged-on session: heartbeats when idle, a silent
//! peer, a slow consumer, and the closing linger.

use super::*;

fn timer(r: &mut Rig, ms: u64) -> Timer {
    r.at_ms(ms).call(|s, ctx| s.on_timer(ctx))
}

#[test]
fn a_heartbeat_goes_out_after_an_idle_interval() {
    let mut r = Rig::new().logged_on();
    // LogonAccepted went out at T0; the interval is 1 s.
    r.at_ms(900).feed(&heartbeat());
    assert_eq!(timer(&mut r, 999), Timer::Idle);
    assert!(r.sent().is_empty());
    timer(&mut r, 1_000);
    assert_eq!(r.sent(), vec![Sent::Heartbeat]);
    // Sent at 1 s: the next one is due at 2 s.
    r.at_ms(1_500).feed(&heartbeat());
    timer(&mut r, 1_999);
    assert!(r.sent().is_empty());
}

#[test]
fn other_traffic_postpones_the_heartbeat() {
    let mut r = Rig::new().logged_on();
    r.s.note_sent(T0 + 800 * MS_NS);
    r.at_ms(900).feed(&heartbeat());
    timer(&mut r, 1_500);
    assert!(r.sent().is_empty());
    timer(&mut r, 1_800);
    assert_eq!(r.sent(), vec![Sent::Heartbeat]);
}

#[test]
fn a_silent_peer_is_disconnected_after_the_dead_interval() {
    let mut r = Rig::new().logged_on();
    r.at_ms(500).feed(&heartbeat());
    // 3 x 1 s after the last frame received.
    r.s.note_sent(T0 + 3_400 * MS_NS);
    timer(&mut r, 3_500);
    assert!(r.sent().is_empty());
    timer(&mut r, 3_501);
    let want = Sent::Disconnect {
        reason: DisconnectReason::IDLE_TIMEOUT,
        retry_ms: 0,
        text: "peer silent".into(),
    };
    assert_eq!(r.sent(), vec![want]);
    assert_eq!(r.s.take_effects().ended, Some(Ended { account: Some(3) }));
}

#[test]
fn any_frame_proves_the_peer_alive() {
    let mut r = Rig::new().logged_on();
    r.at_ms(2_000).feed(&subscribe(1));
    r.s.note_sent(T0 + 4_900 * MS_NS);
    timer(&mut r, 4_999);
    assert!(r.sent().is_empty());
    assert!(r.s.is_active());
}

#[test]
fn a_connection_above_the_high_mark_too_long_is_a_slow_consumer() {
    let mut r = Rig::with_out(OutBuf::new(64 * 1_024, 1_024, 2_048));
    r = r.logged_on();
    r.out.append(&[0u8; 4_000]);
    r.out.update_flow(T0 + 100 * MS_NS);
    assert!(r.out.is_conflating());
    r.s.note_sent(T0 + 4_000 * MS_NS);
    r.at_ms(4_000).feed(&heartbeat());
    // 4 s above the mark is allowed; a nanosecond more is not.
    timer(&mut r, 4_100);
    assert!(r.s.is_active());
    r.at_ms(4_100);
    r.now += 1;
    r.call(|s, ctx| s.on_timer(ctx));
    assert!(r.s.is_closing());
    assert_eq!(r.s.closing_reason(), Some(DisconnectReason::SLOW_CONSUMER));
    let mut bytes = Vec::new();
    r.out.write_to(&mut bytes).expect("vec write");
    let tail = &bytes[4_000..];
    let m = wire::decode(tail).expect("the Disconnect after the filler");
    let m = sent(m);
    assert!(disconnect(DisconnectReason::SLOW_CONSUMER, "slow consumer")(&m));
    // §4.2: a jittered floor from the error window.
    match m {
        Sent::Disconnect { retry_ms, .. } => assert!((1_000..=5_000).contains(&retry_ms)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_closing_session_lingers_then_closes() {
    let mut r = Rig::new().logged_on();
    r.at_ms(100)
        .call(|s, ctx| s.disconnect(ctx, DisconnectReason::SHUTDOWN, 0, ""));
    r.sent();
    // Closing: no heartbeat, no idle check, only the linger (2 s).
    assert_eq!(timer(&mut r, 2_099), Timer::Idle);
    assert!(r.sent().is_empty());
    assert_eq!(timer(&mut r, 2_100), Timer::CloseNow);
}

#[test]
fn a_closing_session_reads_nothing() {
    let mut r = Rig::new().logged_on();
    r.call(|s, ctx| s.disconnect(ctx, DisconnectReason::SHUTDOWN, 0, ""));
    r.sent();
    assert_eq!(r.feed(&subscribe(1)), vec![Got::Done]);
    assert_eq!(r.feed(&logon(0)), vec![Got::Done]);
    assert!(r.sent().is_empty());
}
