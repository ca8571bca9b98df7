//! Liveness judged on what the peer sent, not on what the server read:
//! frames left in the inbound buffer and bytes waiting in the socket
//! count as received, and a Logon that arrived is never a logon timeout.

use super::*;

fn timer(r: &mut Rig, ms: u64) -> Timer {
    r.at_ms(ms).call(|s, ctx| s.on_timer(ctx))
}

/// Puts `bytes` into the session's buffer at `ms` without handling them
/// (a spent request budget).
fn read_only(r: &mut Rig, ms: u64, bytes: &[u8]) {
    let buf = r.s.read_buf();
    buf[..bytes.len()].copy_from_slice(bytes);
    r.s.on_read(bytes.len(), T0 + ms * MS_NS);
}

#[test]
fn frames_left_in_the_buffer_are_not_silence() {
    let mut r = Rig::new().logged_on();
    let mut bytes = subscribe(1);
    bytes.extend(subscribe(2));
    read_only(&mut r, 100, &bytes);
    r.s.note_sent(T0 + 3_200 * MS_NS);
    // 3 s after the last read: it would be idle, but two frames wait.
    assert!(!r.s.silence_due(&r.cfg, T0 + 3_200 * MS_NS));
    timer(&mut r, 3_200);
    assert!(r.sent().is_empty());
    assert!(r.s.is_active());
    // Handled now; nothing more comes: idle after the dead interval.
    let got = r.at_ms(3_300).feed(&[]);
    assert_eq!(got, vec![Got::Subscribe(1), Got::Subscribe(2), Got::Done]);
    assert!(!r.s.silence_due(&r.cfg, T0 + 6_300 * MS_NS));
    assert!(r.s.silence_due(&r.cfg, T0 + 6_301 * MS_NS));
}

#[test]
fn bytes_waiting_in_the_socket_are_not_silence() {
    let mut r = Rig::new().logged_on();
    r.at_ms(100).feed(&heartbeat());
    let now = T0 + 3_200 * MS_NS;
    r.s.note_sent(now);
    assert!(r.s.silence_due(&r.cfg, now));
    // The shard asked the socket (FIONREAD): bytes wait there.
    r.s.note_input_waiting(now);
    assert!(!r.s.silence_due(&r.cfg, now));
    timer(&mut r, 3_200);
    assert!(r.sent().is_empty(), "cut with its bytes unread");
    assert_eq!(GatewayStats::get(&r.stats.disconnects_idle), 0);
    // It counts as received then: the dead interval runs from there.
    r.s.note_sent(T0 + 6_100 * MS_NS);
    timer(&mut r, 6_100);
    assert!(r.sent().is_empty());
    r.s.note_sent(T0 + 6_201 * MS_NS);
    timer(&mut r, 6_201);
    assert_eq!(GatewayStats::get(&r.stats.disconnects_idle), 1);
}

#[test]
fn a_logon_waiting_unread_is_not_a_logon_timeout() {
    let mut r = Rig::new();
    let now = T0 + 5_001 * MS_NS;
    assert!(r.s.silence_due(&r.cfg, now));
    r.s.note_input_waiting(now);
    timer(&mut r, 5_001);
    assert!(r.sent().is_empty());
    // Not read again, nothing waits at the next sweep: the timeout.
    timer(&mut r, 5_051);
    let sent = r.sent();
    assert!(disconnect(DisconnectReason::LOGON_TIMEOUT, "no logon")(
        &sent[0]
    ));
}

#[test]
fn a_logon_that_arrived_gets_busy_when_its_verdict_is_late_never_a_timeout() {
    let mut r = Rig::new();
    // Sent right after connecting; with the verifier from then on.
    assert_eq!(r.at_ms(100).feed(&logon(0))[0], logon_event(0));
    assert!(!r.s.silence_due(&r.cfg, T0 + 5_050 * MS_NS));
    timer(&mut r, 5_050);
    assert!(
        r.sent().is_empty(),
        "5 s after connect, 4.95 s after its Logon"
    );
    timer(&mut r, 5_101);
    let sent = r.sent();
    match &sent[0] {
        Sent::Rejected(m) => {
            assert_eq!(m.reason, LogonRejectReason::BUSY);
            assert!((3_000..=8_000).contains(&m.retry_after_ms), "{m:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(r.s.is_closing());
    assert_eq!(GatewayStats::get(&r.stats.logons_verdict_late), 1);
    assert_eq!(GatewayStats::get(&r.stats.disconnects_idle), 0);
    // A verdict that comes after that changes nothing.
    let a = admitted();
    r.call(|s, ctx| s.logon_accepted(a, 0, ctx));
    assert!(r.sent().is_empty());
}
