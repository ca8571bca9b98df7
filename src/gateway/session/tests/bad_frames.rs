//! §6 bad-frame policy after logon: a refused body is answered with a
//! Reject that echoes what was readable; more than `bad_frame_limit` of
//! them within `bad_frame_window_ms` of the first → protocol error.

use super::*;

fn unknown_template() -> Vec<u8> {
    let mut f = heartbeat();
    f[8] = 99; // templateId 99: not in the schema
    f
}

/// A Subscribe whose root block is whole but whose group is cut short.
fn truncated_subscribe(rid: u64) -> Vec<u8> {
    let mut f = subscribe(rid);
    let n = f.len() - 4;
    f.truncate(n);
    f[..4].copy_from_slice(&(n as u32).to_be_bytes());
    f
}

#[test]
fn a_malformed_body_echoes_the_request_id_its_root_block_holds() {
    let mut r = Rig::new().logged_on();
    r.feed(&truncated_subscribe(9));
    let sent = r.sent();
    let want = (9, template::SUBSCRIBE, RejectReason::MALFORMED);
    assert_eq!(reject_of(&sent[0]), want);
    assert!(r.s.is_active());
}

#[test]
fn a_root_block_too_short_for_the_request_id_echoes_the_template_only() {
    let mut r = Rig::new().logged_on();
    let mut f = subscribe(9);
    f[6] = 5; // blockLength 5 < 8: requestId is not readable
    r.feed(&f);
    let sent = r.sent();
    let want = (0, template::SUBSCRIBE, RejectReason::MALFORMED);
    assert_eq!(reject_of(&sent[0]), want);
}

#[test]
fn an_unknown_schema_or_version_echoes_the_template() {
    for (off, value, reason) in [
        (10, 0x1234u16, RejectReason::UNKNOWN_SCHEMA),
        (12, 0, RejectReason::UNSUPPORTED_VERSION),
    ] {
        let mut r = Rig::new().logged_on();
        let mut f = subscribe(9);
        f[off..off + 2].copy_from_slice(&value.to_le_bytes());
        r.feed(&f);
        let sent = r.sent();
        assert_eq!(reject_of(&sent[0]), (0, template::SUBSCRIBE, reason));
    }
}

#[test]
fn bad_frames_up_to_the_limit_are_rejected_one_more_disconnects() {
    let mut r = Rig::new().logged_on();
    // bad_frame_limit 3 within 1 s.
    for ms in [0, 300, 600] {
        assert_eq!(r.at_ms(ms).feed(&unknown_template()).len(), 2);
    }
    let sent = r.sent();
    assert_eq!(sent.len(), 3);
    for s in &sent {
        assert_eq!(reject_of(s), (0, 99, RejectReason::UNKNOWN_TEMPLATE));
    }
    assert!(r.s.is_active());
    r.at_ms(900).feed(&truncated_subscribe(4));
    let sent = r.sent();
    assert_eq!(
        reject_of(&sent[0]),
        (4, template::SUBSCRIBE, RejectReason::MALFORMED)
    );
    let text = "too many bad frames";
    assert!(disconnect(DisconnectReason::PROTOCOL_ERROR, text)(&sent[1]));
    match &sent[1] {
        Sent::Disconnect { retry_ms, .. } => assert!((1_000..=5_000).contains(retry_ms)),
        other => panic!("{other:?}"),
    }
    assert!(r.s.is_closing());
}

#[test]
fn unexpected_messages_count_as_bad_frames() {
    let mut r = Rig::new().logged_on();
    let m = LogonAccepted {
        session_id: 1,
        heartbeat_interval_ms: 1,
        server_time_ns: 1,
        default_tier: 0,
        stream_id: 1,
    };
    let f = encode(|b| wire::encode_logon_accepted(b, &m));
    for _ in 0..4 {
        r.feed(&f);
    }
    let sent = r.sent();
    assert_eq!(sent.len(), 5, "{sent:?}");
    assert!(r.s.is_closing());
}

#[test]
fn the_window_restarts_after_it_ends() {
    let mut r = Rig::new().logged_on();
    for ms in [0, 300, 600] {
        r.at_ms(ms).feed(&unknown_template());
    }
    // 1,001 ms after the first: a new window, the count starts again.
    for ms in [1_001, 1_100, 1_200] {
        r.at_ms(ms).feed(&unknown_template());
    }
    let sent = r.sent();
    assert_eq!(sent.len(), 6);
    assert!(sent.iter().all(|s| matches!(s, Sent::Reject { .. })));
    assert!(r.s.is_active());
    r.at_ms(1_300).feed(&unknown_template());
    assert!(r.s.is_closing());
}
