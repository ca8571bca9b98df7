//! §4.1 CONNECTED: Logon in, LogonAccepted or LogonRejected out; nothing
//! else is accepted before logon; the logon timeout.

use super::*;

#[test]
fn logon_comes_out_for_the_shard_to_decide() {
    let mut r = Rig::new();
    assert_eq!(r.feed(&logon(250)), vec![logon_event(250), Got::Done]);
    assert_eq!(r.s.state(), SessionState::AwaitingLogon);
    assert!(r.sent().is_empty());
}

#[test]
fn an_accepted_logon_activates_the_session() {
    let mut r = Rig::new();
    r.feed(&logon(0));
    let a = admitted();
    r.call(|s, ctx| s.logon_accepted(a, 0, ctx));
    assert_eq!(r.s.state(), SessionState::Active { account: 3 });
    assert_eq!(r.s.session_id(), 42);
    // The account's first tier is its default.
    assert_eq!(r.s.default_tier(), 2);
    assert_eq!(r.s.tier(TIER_ACCOUNT_DEFAULT), 2);
    assert_eq!(r.s.tier(0), 0);
    let want = LogonAccepted {
        session_id: 42,
        heartbeat_interval_ms: 1_000,
        server_time_ns: 99,
        default_tier: 2,
        stream_id: 7,
    };
    assert_eq!(r.sent(), vec![Sent::Accepted(want)]);
    assert_eq!(GatewayStats::get(&r.stats.logons_accepted), 1);
    assert_eq!(GatewayStats::get(&r.stats.logged_on), 1);
    let fx = r.s.take_effects();
    assert!(fx.write && fx.ended.is_none());
}

#[test]
fn the_heartbeat_asked_for_is_clamped_to_the_server_range() {
    for (asked, given) in [(0, 1_000), (5, 100), (2_500, 2_500), (99_999, 30_000)] {
        let mut r = Rig::new();
        r.feed(&logon(asked));
        let a = admitted();
        r.call(|s, ctx| s.logon_accepted(a, asked, ctx));
        match &r.sent()[0] {
            Sent::Accepted(m) => assert_eq!(m.heartbeat_interval_ms, given, "asked {asked}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(r.s.heartbeat_ns(), u64::from(given) * MS_NS);
    }
}

#[test]
fn a_rejected_logon_answers_and_closes() {
    let mut r = Rig::new();
    r.feed(&logon(0));
    let reason = LogonRejectReason::SESSION_LIMIT;
    r.at_ms(10)
        .call(|s, ctx| s.logon_rejected(reason, 1_500, ctx));
    let want = LogonRejected {
        reason,
        retry_after_ms: 1_500,
    };
    assert_eq!(r.sent(), vec![Sent::Rejected(want)]);
    assert_eq!(
        r.s.state(),
        SessionState::Closing {
            deadline_ns: T0 + 2_010 * MS_NS
        }
    );
    assert_eq!(r.s.closing_reason(), None);
    let fx = r.s.take_effects();
    assert_eq!(fx.ended, Some(Ended { account: None }));
    assert_eq!(GatewayStats::get(&r.stats.logons_rejected), 1);
    // Whatever comes after is not read.
    assert_eq!(r.feed(&logon(0)), vec![Got::Done]);
}

#[test]
fn a_request_before_logon_is_refused_and_disconnects() {
    let mut r = Rig::new();
    assert_eq!(r.feed(&subscribe(5)), vec![Got::Handled, Got::Done]);
    let sent = r.sent();
    // The request's id is echoed (§6 "Echo").
    assert_eq!(
        reject_of(&sent[0]),
        (5, template::SUBSCRIBE, RejectReason::NOT_LOGGED_ON)
    );
    assert!(disconnect(DisconnectReason::PROTOCOL_ERROR, "logon first")(
        &sent[1]
    ));
    assert!(r.s.is_closing());
}

#[test]
fn a_heartbeat_before_logon_is_accepted_silently_and_proves_the_peer_alive() {
    // §4.1: Heartbeat is allowed beside Logon while waiting to log on.
    let mut r = Rig::new();
    r.at_ms(4_000);
    assert_eq!(r.feed(&heartbeat()), vec![Got::Handled, Got::Done]);
    assert!(r.sent().is_empty());
    assert!(!r.s.is_closing());
    assert_eq!(r.feed(&logon(0)), vec![logon_event(0), Got::Done]);
}

#[test]
fn a_provider_logon_on_the_subscriber_port_is_unexpected() {
    let mut r = Rig::new();
    let m = wire::ProviderLogon {
        provider_id: 1,
        token: b"t",
    };
    r.feed(&encode(|b| wire::encode_provider_logon(b, &m)));
    let sent = r.sent();
    let want = (
        0,
        template::PROVIDER_LOGON,
        RejectReason::UNEXPECTED_MESSAGE,
    );
    assert_eq!(reject_of(&sent[0]), want);
    let text = "not a subscriber message";
    assert!(disconnect(DisconnectReason::PROTOCOL_ERROR, text)(&sent[1]));
}

#[test]
fn a_bad_body_before_logon_echoes_what_was_readable() {
    let mut r = Rig::new();
    let mut f = subscribe(12);
    let n = f.len();
    f.truncate(n - 4); // the group is cut short; the root block is whole
    let len = (f.len() as u32).to_be_bytes();
    f[..4].copy_from_slice(&len);
    r.feed(&f);
    let sent = r.sent();
    let want = (12, template::SUBSCRIBE, RejectReason::MALFORMED);
    assert_eq!(reject_of(&sent[0]), want);
    let text = "bad message before logon";
    assert!(disconnect(DisconnectReason::PROTOCOL_ERROR, text)(&sent[1]));
}

#[test]
fn a_bad_body_before_logon_disconnects() {
    let mut r = Rig::new();
    let mut f = logon(0);
    f[12] = 0; // version 0
    f[13] = 0;
    r.feed(&f);
    let sent = r.sent();
    // The header named the template: it is echoed.
    let want = (0, template::LOGON, RejectReason::UNSUPPORTED_VERSION);
    assert_eq!(reject_of(&sent[0]), want);
    let text = "bad message before logon";
    assert!(disconnect(DisconnectReason::PROTOCOL_ERROR, text)(&sent[1]));
}

#[test]
fn no_logon_in_time_is_a_logon_timeout_with_a_jittered_floor() {
    let mut r = Rig::new();
    r.at_ms(5_000);
    assert_eq!(r.call(|s, ctx| s.on_timer(ctx)), Timer::Idle);
    assert!(r.sent().is_empty());
    r.at_ms(5_001);
    r.call(|s, ctx| s.on_timer(ctx));
    let sent = r.sent();
    assert_eq!(sent.len(), 1);
    match &sent[0] {
        Sent::Disconnect {
            reason, retry_ms, ..
        } => {
            assert_eq!(*reason, DisconnectReason::LOGON_TIMEOUT);
            assert!((1_000..=5_000).contains(retry_ms), "jittered: {retry_ms}");
        }
        other => panic!("{other:?}"),
    }
    assert!(disconnect(DisconnectReason::LOGON_TIMEOUT, "no logon")(
        &sent[0]
    ));
    assert_eq!(GatewayStats::get(&r.stats.disconnects_idle), 1);
}

#[test]
fn a_session_that_has_not_logged_on_gets_no_heartbeats() {
    let mut r = Rig::new();
    r.at_ms(4_000).call(|s, ctx| s.on_timer(ctx));
    assert!(r.sent().is_empty());
}

#[test]
fn every_logon_refusal_carries_its_reason_and_retry_after() {
    let reasons = [
        LogonRejectReason::AUTH,
        LogonRejectReason::BUSY,
        LogonRejectReason::RATE_LIMITED,
        LogonRejectReason::SHUTTING_DOWN,
        LogonRejectReason::SESSION_LIMIT,
        LogonRejectReason::NOT_ENTITLED,
    ];
    for (k, reason) in reasons.into_iter().enumerate() {
        let mut r = Rig::new();
        r.feed(&logon(0));
        let retry = k as u32 * 100;
        r.call(|s, ctx| s.logon_rejected(reason, retry, ctx));
        let want = LogonRejected {
            reason,
            retry_after_ms: retry,
        };
        assert_eq!(r.sent(), vec![Sent::Rejected(want)], "{reason:?}");
        assert!(r.s.is_closing());
        assert_eq!(r.s.account(), None);
    }
}
