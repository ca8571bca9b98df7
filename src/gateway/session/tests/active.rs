//! §4.1 LOGGED ON: requests come out for the shard, the session answers
//! the rest (heartbeat, second logon, server-only messages, bad bodies),
//! the rate limit and the flood disconnect, Logout.

use super::*;

#[test]
fn requests_come_out_for_the_shard() {
    let mut r = Rig::new().logged_on();
    let unsub = SymbolRef {
        symbol_id: 1,
        name: Name16::default(),
    };
    let mut bytes = encode(|b| wire::encode_unsubscribe(b, 2, 0, [unsub]));
    bytes.extend(encode(|b| {
        wire::encode_snapshot_request(b, 3, 500, true, 0, [1u16, 2])
    }));
    let h = wire::HistoryRequest {
        request_id: 4,
        budget_us: 0,
        critical: false,
        symbol_id: 1,
        count: 10,
    };
    bytes.extend(encode(|b| wire::encode_history_request(b, &h)));
    bytes.extend(subscribe(1));
    let got = r.feed(&bytes);
    let want = vec![
        Got::Unsubscribe(2),
        Got::Snapshot(3),
        Got::History(4),
        Got::Subscribe(1),
        Got::Done,
    ];
    assert_eq!(got, want);
    assert!(r.sent().is_empty());
}

#[test]
fn a_heartbeat_is_taken_without_an_answer() {
    let mut r = Rig::new().logged_on();
    assert_eq!(r.feed(&heartbeat()), vec![Got::Handled, Got::Done]);
    assert!(r.sent().is_empty());
    assert!(r.s.is_active());
}

#[test]
fn a_second_logon_is_rejected_and_the_session_stays() {
    let mut r = Rig::new().logged_on();
    assert_eq!(r.feed(&logon(0)), vec![Got::Handled, Got::Done]);
    let sent = r.sent();
    assert_eq!(sent.len(), 1);
    let want = (0, template::LOGON, RejectReason::ALREADY_LOGGED_ON);
    assert_eq!(reject_of(&sent[0]), want);
    assert!(r.s.is_active());
}

#[test]
fn a_server_only_message_is_unexpected() {
    let mut r = Rig::new().logged_on();
    let m = LogonAccepted {
        session_id: 1,
        heartbeat_interval_ms: 1,
        server_time_ns: 1,
        default_tier: 0,
        stream_id: 1,
    };
    r.feed(&encode(|b| wire::encode_logon_accepted(b, &m)));
    let sent = r.sent();
    let want = (
        0,
        template::LOGON_ACCEPTED,
        RejectReason::UNEXPECTED_MESSAGE,
    );
    assert_eq!(reject_of(&sent[0]), want);
    assert_eq!(sent.len(), 1);
    assert!(r.s.is_active());
}

#[test]
fn a_bad_body_after_logon_is_rejected_without_closing() {
    let mut r = Rig::new().logged_on();
    let mut f = heartbeat();
    f[8] = 0xEE; // templateId 0x??EE: not in the schema
    f[9] = 0x7F;
    assert_eq!(r.feed(&f), vec![Got::Handled, Got::Done]);
    let sent = r.sent();
    assert_eq!(sent.len(), 1);
    let (rid, _, reason) = reject_of(&sent[0]);
    assert_eq!((rid, reason), (0, RejectReason::UNKNOWN_TEMPLATE));
    assert!(r.s.is_active());
    assert_eq!(GatewayStats::get(&r.stats.rejects_sent), 1);
}

#[test]
fn logout_answers_disconnect_logout_and_ends_the_session() {
    let mut r = Rig::new().logged_on();
    r.feed(&encode(wire::encode_logout));
    let sent = r.sent();
    assert_eq!(sent.len(), 1);
    assert!(disconnect(DisconnectReason::LOGOUT, "logout")(&sent[0]));
    match &sent[0] {
        Sent::Disconnect { retry_ms, .. } => assert_eq!(*retry_ms, 0),
        other => panic!("{other:?}"),
    }
    assert!(r.s.is_closing());
    assert_eq!(r.s.closing_reason(), Some(DisconnectReason::LOGOUT));
    let fx = r.s.take_effects();
    assert_eq!(fx.ended, Some(Ended { account: Some(3) }));
    assert!(fx.write);
    assert_eq!(r.s.account(), None);
    assert_eq!(GatewayStats::get(&r.stats.disconnects_logout), 1);
}

fn retry_of(s: &Sent) -> u32 {
    match s {
        Sent::Reject { retry_ms, .. } => *retry_ms,
        other => panic!("not a Reject: {other:?}"),
    }
}

#[test]
fn messages_over_the_rate_are_rejected_then_a_flood_disconnects() {
    let mut r = Rig::new().logged_on();
    // Burst of 4 tokens (the logon spent none): four pass.
    for _ in 0..4 {
        assert_eq!(r.feed(&heartbeat()), vec![Got::Handled, Got::Done]);
    }
    assert!(r.sent().is_empty());
    // The fifth is refused by the rate (strike 1): its retry-after is one
    // to two refills of 10/s, not a fixed floor.
    assert_eq!(r.feed(&subscribe(9)), vec![Got::Handled, Got::Done]);
    let sent = r.sent();
    assert_eq!(
        reject_of(&sent[0]),
        (9, template::SUBSCRIBE, RejectReason::RATE_LIMITED)
    );
    let window = retry_of(&sent[0]);
    assert!((100..=200).contains(&window), "{window}");
    assert_eq!(GatewayStats::get(&r.stats.rejects_rate_limited), 1);
    // Sent at once after it (within the grace): refused by the window with
    // the time left (strike 2).
    r.feed(&subscribe(10));
    let sent = r.sent();
    assert_eq!(reject_of(&sent[0]).2, RejectReason::RATE_LIMITED);
    assert_eq!(retry_of(&sent[0]), window);
    // Sent after the grace, inside the window: ignored (strike 3), the
    // window starts again from then, twice as long.
    r.at_ms(10).feed(&subscribe(11));
    assert_eq!(retry_of(&r.sent()[0]), 2 * window, "doubled from now");
    assert_eq!(GatewayStats::get(&r.stats.rejects_backoff), 2);
    assert!(r.s.is_active());
    // The fourth refusal in a row is a flood: its own reason, a jittered
    // floor from the error window.
    r.at_ms(20).feed(&subscribe(12));
    let sent = r.sent();
    assert!(disconnect(DisconnectReason::MESSAGE_FLOOD, "message flood")(&sent[0]));
    match &sent[0] {
        Sent::Disconnect { retry_ms, .. } => assert!((1_000..=5_000).contains(retry_ms)),
        other => panic!("{other:?}"),
    }
    assert_eq!(GatewayStats::get(&r.stats.disconnects_flood), 1);
    assert!(r.s.is_closing());
}

#[test]
fn a_rate_refusal_asks_for_whole_refills_however_near_the_next_token() {
    let mut r = Rig::new().logged_on();
    for _ in 0..4 {
        r.feed(&heartbeat());
    }
    // 99 ms on, the next token of 10/s is 1 ms away: the refusal still asks
    // for one to two refills, so a client that waits it finds a token
    // rather than the edge of one.
    r.at_ms(99).feed(&subscribe(9));
    let window = retry_of(&r.sent()[0]);
    assert!((100..=200).contains(&window), "{window}");
}

#[test]
fn input_held_unread_is_not_taken_for_an_ignored_refusal() {
    let mut r = Rig::new().logged_on();
    for _ in 0..4 {
        r.feed(&heartbeat());
    }
    r.feed(&subscribe(9));
    let window = retry_of(&r.sent()[0]);
    // Read 10 ms on (past the grace) but waiting unread since 1 ms (the
    // shard held the input): sent before the refusal could be read, so
    // refused with the time left, not a doubled window.
    r.at_ms(10).waited_since_ms(1).feed(&subscribe(10));
    assert_eq!(u64::from(retry_of(&r.sent()[0])), u64::from(window) - 10);
    // The same message read as it came, 10 ms on: ignored, doubled.
    r.at_ms(10).feed(&subscribe(11));
    assert_eq!(retry_of(&r.sent()[0]), 2 * window);
}

#[test]
fn a_client_that_honours_the_window_is_never_struck() {
    let mut r = Rig::new().logged_on();
    for _ in 0..4 {
        r.feed(&heartbeat());
    }
    let mut t = 0;
    for round in 0..20 {
        // A request over the rate, then nothing but heartbeats... none
        // even: it waits out the retry-after it was given, then sends.
        r.at_ms(t).feed(&subscribe(round));
        let sent = r.sent();
        if let Some(s) = sent.first() {
            assert_ne!(reject_of(s).2, RejectReason::UNEXPECTED_MESSAGE);
            t += u64::from(retry_of(s));
        } else {
            t += 1;
        }
        // Only the rate's own refusal: never one in a row after it.
        assert!(r.s.backoff_strikes() <= 1, "round {round}");
    }
    assert!(r.s.is_active(), "an honouring client was cut");
    assert_eq!(GatewayStats::get(&r.stats.rejects_backoff), 0);
}

#[test]
fn an_account_rate_refusal_from_the_request_path_opens_a_window() {
    let mut r = Rig::new().logged_on();
    let now = r.now;
    r.s.note_refusal(RejectReason::RATE_LIMITED, 15, now);
    // An overload refusal is advice: no window.
    r.s.note_refusal(RejectReason::OVERLOADED, 3_000, now);
    r.at_ms(1).feed(&subscribe(1));
    assert_eq!(retry_of(&r.sent()[0]), 14);
    assert_eq!(
        r.at_ms(16).feed(&subscribe(2)),
        vec![Got::Subscribe(2), Got::Done]
    );
}

#[test]
fn a_token_in_time_resets_the_strikes() {
    let mut r = Rig::new().logged_on();
    for _ in 0..4 {
        r.feed(&heartbeat());
    }
    for _ in 0..3 {
        r.feed(&heartbeat());
    }
    // 10 per second: a token is back after 100 ms.
    r.at_ms(150).feed(&heartbeat());
    r.feed(&heartbeat());
    let sent = r.sent();
    assert_eq!(sent.len(), 4, "three rejects, one more strike: {sent:?}");
    assert!(r.s.is_active());
}

#[test]
fn a_control_message_that_does_not_fit_closes_as_slow_consumer() {
    let mut r = Rig::with_out(OutBuf::new(4_096, 1_024, 2_048));
    r = r.logged_on();
    let filler = [0u8; 3_900];
    assert_eq!(
        r.out.append(&filler),
        crate::gateway::outbound::Append::Appended
    );
    r.call(|s, ctx| s.reject(ctx, 1, template::SUBSCRIBE, RejectReason::INTERNAL, 0, ""));
    assert!(r.s.is_closing());
    assert_eq!(r.s.closing_reason(), Some(DisconnectReason::SLOW_CONSUMER));
    assert_eq!(GatewayStats::get(&r.stats.disconnects_slow_consumer), 1);
    let fx = r.s.take_effects();
    assert_eq!(fx.ended, Some(Ended { account: Some(3) }));
    // A closing session does not close twice.
    r.call(|s, ctx| s.reject(ctx, 1, template::SUBSCRIBE, RejectReason::INTERNAL, 0, ""));
    assert_eq!(GatewayStats::get(&r.stats.disconnects_slow_consumer), 1);
    assert_eq!(r.s.take_effects().ended, None);
}

#[test]
fn a_full_buffer_still_carries_the_slow_consumer_disconnect() {
    // Issue #18 item 7: the reserve at the buffer's end takes the frame
    // that says why, after the backlog the client has not read.
    let out = OutBuf::new(4_096, 1_024, 2_048).with_final_reserve(CONTROL_FRAME_MAX);
    let mut r = Rig::with_out(out).logged_on();
    let filler = [0u8; 3_500];
    let full = |r: &mut Rig| r.out.append(&filler[..100]);
    assert_eq!(
        r.out.append(&filler),
        crate::gateway::outbound::Append::Appended
    );
    assert_eq!(full(&mut r), crate::gateway::outbound::Append::Overflow);
    r.call(|s, ctx| s.reject(ctx, 1, template::SUBSCRIBE, RejectReason::INTERNAL, 0, ""));
    assert_eq!(r.s.closing_reason(), Some(DisconnectReason::SLOW_CONSUMER));
    assert_eq!(GatewayStats::get(&r.stats.disconnects_slow_consumer), 1);
    let mut bytes = Vec::new();
    r.out.write_to(&mut bytes).expect("vec write");
    let m = sent(wire::decode(&bytes[3_500..]).expect("the Disconnect after the filler"));
    assert!(disconnect(DisconnectReason::SLOW_CONSUMER, "slow consumer")(&m));
    match m {
        Sent::Disconnect { retry_ms, .. } => assert!(retry_ms > 0, "jittered retry"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_shard_disconnect_ends_the_session_with_its_reason() {
    let mut r = Rig::new().logged_on();
    r.call(|s, ctx| s.disconnect(ctx, DisconnectReason::SHUTDOWN, 1_234, "bye"));
    let want = Sent::Disconnect {
        reason: DisconnectReason::SHUTDOWN,
        retry_ms: 1_234,
        text: "bye".into(),
    };
    assert_eq!(r.sent(), vec![want]);
    assert_eq!(GatewayStats::get(&r.stats.disconnects_shutdown), 1);
    assert_eq!(r.s.take_effects().ended, Some(Ended { account: Some(3) }));
    // Ending again (the shard closing the socket) finds no account.
    assert_eq!(r.s.end(), None);
}

type Counter = fn(&GatewayStats) -> &std::sync::atomic::AtomicU64;

#[test]
fn every_disconnect_reason_closes_and_counts_where_it_has_a_counter() {
    let reasons: [(DisconnectReason, Option<Counter>); 7] = [
        (
            DisconnectReason::SLOW_CONSUMER,
            Some(|s| &s.disconnects_slow_consumer),
        ),
        (
            DisconnectReason::SHUTDOWN,
            Some(|s| &s.disconnects_shutdown),
        ),
        (
            DisconnectReason::PROTOCOL_ERROR,
            Some(|s| &s.disconnects_protocol_error),
        ),
        (
            DisconnectReason::IDLE_TIMEOUT,
            Some(|s| &s.disconnects_idle),
        ),
        (DisconnectReason::AUTH, None),
        (DisconnectReason::BUSY, None),
        (DisconnectReason::LOGOUT, Some(|s| &s.disconnects_logout)),
    ];
    let total = |st: &GatewayStats| {
        [
            &st.disconnects_slow_consumer,
            &st.disconnects_shutdown,
            &st.disconnects_protocol_error,
            &st.disconnects_idle,
            &st.disconnects_logout,
        ]
        .iter()
        .map(|c| GatewayStats::get(c))
        .sum::<u64>()
    };
    for (reason, counter) in reasons {
        let mut r = Rig::new().logged_on();
        r.at_ms(1).call(|s, ctx| s.disconnect(ctx, reason, 7, "x"));
        let want = Sent::Disconnect {
            reason,
            retry_ms: 7,
            text: "x".into(),
        };
        assert_eq!(r.sent(), vec![want]);
        assert_eq!(r.s.closing_reason(), Some(reason));
        assert_eq!(r.s.take_effects().ended, Some(Ended { account: Some(3) }));
        // The counter of this reason and no other.
        assert_eq!(total(&r.stats), u64::from(counter.is_some()), "{reason:?}");
        if let Some(c) = counter {
            assert_eq!(GatewayStats::get(c(&r.stats)), 1, "{reason:?}");
        }
    }
}

#[test]
fn a_logon_decision_after_the_session_closed_does_not_revive_it() {
    let mut r = Rig::new();
    r.feed(&logon(0));
    r.call(|s, ctx| s.disconnect(ctx, DisconnectReason::SHUTDOWN, 0, ""));
    r.sent();
    let a = admitted();
    r.call(|s, ctx| s.logon_accepted(a, 0, ctx));
    assert!(r.s.is_closing());
    assert!(r.sent().is_empty());
    assert_eq!(GatewayStats::get(&r.stats.logged_on), 0);
}

#[test]
fn a_slow_consumer_cut_drops_unwritten_prices_and_keeps_control_frames() {
    // Issue #31 item 7: the Disconnect waits behind the kernel's bounded
    // queue only, not behind prices the client has not been given yet.
    let mut r = Rig::new().logged_on();
    let price = |r: &mut Rig, seq: u64| {
        let body = wire::PriceBody {
            symbol_id: 1,
            seq,
            ..Default::default()
        };
        r.out.append_price_with(wire::PRICE_SLOT_LEN, r.now, |b| {
            let slot = b.first_chunk_mut().expect("room");
            wire::encode_price(slot, wire::PriceKind::Update, &body, 0)
        })
    };
    for seq in 1..=20 {
        assert_eq!(
            price(&mut r, seq),
            crate::gateway::outbound::Append::Appended
        );
    }
    r.call(|s, ctx| s.send(ctx, wire::encode_heartbeat));
    price(&mut r, 21);
    let slow = DisconnectReason::SLOW_CONSUMER;
    r.call(|s, ctx| s.disconnect(ctx, slow, 500, "slow consumer"));
    let want = vec![
        Sent::Heartbeat,
        Sent::Disconnect {
            reason: slow,
            retry_ms: 500,
            text: "slow consumer".into(),
        },
    ];
    assert_eq!(r.sent(), want, "no price ahead of the Disconnect");
}
