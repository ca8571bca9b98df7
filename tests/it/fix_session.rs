//! The sans-IO FIX session driven by hand: no sockets, time from the
//! test (`now_ns` monotonic, `wall_ns` UTC).

use pricewire::config::fix::Secret;
use pricewire::engine::ProviderHealth;
use pricewire::feed::fix::codec::{self, Encoder, Header};
use pricewire::feed::fix::health::ProviderState;
use pricewire::feed::fix::{bound_slot, FixSession, Io, SessionState};
use pricewire::model::InstrumentTable;
use pricewire::resilience::BreakerState;
use proptest::prelude::*;

use crate::util::fix_rig;
use fix_rig::{build, config, field, Rig, MS, WALL0};

#[test]
fn logon_asks_for_heartbeat_and_subscribes_each_symbol() {
    let mut r = Rig::new(config());
    assert_eq!(r.poll(), Io::Connect);
    assert_eq!(r.s.state(), SessionState::Connecting);
    r.s.on_connected(r.now, r.wall());
    let sent = r.sent();
    assert_eq!(sent.len(), 1);
    let (t, f) = &sent[0];
    assert_eq!(t, b"A");
    assert_eq!(field(f, 98), vec![b"0"]);
    assert_eq!(field(f, 108), vec![b"1"]);
    assert_eq!(field(f, 34), vec![b"1"]);
    r.peer(b"A", |e| e.uint(108, 1));
    assert_eq!(r.s.state(), SessionState::Active);
    let reqs = r.sent();
    assert_eq!(reqs.len(), 2, "one MarketDataRequest per symbol");
    for ((t, f), sym) in reqs.iter().zip([&b"EUR/USD"[..], b"USD/JPY"]) {
        assert_eq!(t, b"V");
        assert_eq!(field(f, 263), vec![b"1"]);
        assert_eq!(field(f, 264), vec![b"1"]);
        assert_eq!(field(f, 265), vec![b"1"]);
        assert_eq!(field(f, 267), vec![b"2"]);
        assert_eq!(field(f, 269), vec![b"0", b"1"]);
        assert_eq!(field(f, 146), vec![b"1"]);
        assert_eq!(field(f, 55), vec![sym]);
        assert_eq!(field(f, 262).len(), 1);
    }
}

#[test]
fn snapshot_and_incremental_refresh_become_ticks() {
    let mut r = Rig::active();
    r.snapshot("EUR/USD", "1.08120", "1.08128");
    let t = r.ticks();
    assert_eq!(t.len(), 1);
    assert_eq!((t[0].bid, t[0].ask), (108_120, 108_128));
    assert_eq!((t[0].bid_size, t[0].ask_size), (1_000_000, 2_000_000));
    assert_eq!(
        t[0].provider_time_ns,
        r.wall(),
        "SendingTime when no MDEntryTime"
    );
    assert_eq!(t[0].provider, 0);
    let jpy = InstrumentTable::default_with_providers(1)
        .by_name("USDJPY")
        .unwrap()
        .id;
    r.snapshot("USD/JPY", "149.870", "149.880");
    r.ticks();
    // Two symbols in one incremental, with MDEntryTime on MDEntryDate.
    r.peer(b"X", |e| {
        e.uint(268, 2);
        for (sym, px) in [("EUR/USD", "1.08125"), ("USD/JPY", "149.860")] {
            e.uint(279, 1);
            e.uint(269, 0);
            e.bytes(55, sym.as_bytes());
            e.bytes(270, px.as_bytes());
            e.bytes(272, b"20251129");
            e.bytes(273, b"13:59:59.250");
        }
    });
    let t = r.ticks();
    assert_eq!(t.len(), 2);
    assert_eq!((t[0].bid, t[0].ask), (108_125, 108_128));
    assert_eq!((t[1].symbol, t[1].bid, t[1].ask), (jpy, 149_860, 149_880));
    assert_eq!(t[1].provider_time_ns, WALL0 - 750 * MS);
    assert!(t[1].feed_seq > t[0].feed_seq);
    // A delete leaves one side: a withdrawal of the other on this message.
    r.peer(b"X", |e| {
        e.uint(268, 1);
        e.uint(279, 2);
        e.uint(269, 1);
        e.bytes(55, b"EUR/USD");
    });
    let t = r.ticks();
    assert_eq!(t.len(), 1);
    assert_eq!((t[0].bid, t[0].ask), (108_125, pricewire::model::NO_PRICE));
    assert_eq!(t[0].flags, pricewire::model::tick_flags::WITHDRAWN_ASK);
}

#[test]
fn heartbeats_test_requests_and_read_timeout() {
    let mut r = Rig::active();
    // Peer TestRequest is answered with its id.
    r.peer(b"1", |e| e.bytes(112, b"PING7"));
    let sent = r.sent();
    assert_eq!(sent[0].0, b"0");
    assert_eq!(field(&sent[0].1, 112), vec![b"PING7"]);
    // Our own silence for HeartBtInt: a Heartbeat.
    r.advance_ms(1_000);
    let sent = r.sent();
    assert_eq!(
        sent.iter().map(|m| m.0.clone()).collect::<Vec<_>>(),
        vec![b"0".to_vec()]
    );
    // The peer's silence past 120% of HeartBtInt: one TestRequest.
    r.advance_ms(200);
    let sent = r.sent();
    assert_eq!(sent[0].0, b"1");
    r.advance_ms(100);
    assert!(r.sent().iter().all(|m| m.0 != b"1"), "only one TestRequest");
    // Past the read timeout: a failure and a close.
    assert_eq!(r.advance_ms(700), Io::Close);
    assert_eq!(r.s.state(), SessionState::Waiting);
    let st = r.s.stats().snapshot();
    assert_eq!(st.read_timeouts, 1);
    assert_eq!(r.s.breaker_stats().snapshot().failed_calls, 1);
    // Reconnect after backoff (base 500 ms, full jitter).
    assert!(r.s.next_connect_ns() <= r.now + 500 * MS);
}

#[test]
fn a_sequence_gap_resubscribes_and_counts_a_failure() {
    let mut r = Rig::active();
    r.snapshot("EUR/USD", "1.08120", "1.08128");
    r.ticks();
    let seq = r.peer_seq + 5;
    r.peer_seq = seq + 1;
    r.peer_seq_n(seq, b"0", |_| {});
    assert_eq!(r.s.state(), SessionState::Active);
    let sent = r.sent();
    let actions: Vec<&[u8]> = sent.iter().flat_map(|m| field(&m.1, 263)).collect();
    assert_eq!(
        actions,
        vec![&b"2"[..], b"2", b"1", b"1"],
        "unsubscribe old, subscribe new"
    );
    assert_ne!(
        field(&sent[0].1, 262),
        field(&sent[2].1, 262),
        "fresh MDReqID"
    );
    assert!(
        sent.iter().all(|m| m.0 == b"V"),
        "no ResendRequest for market data"
    );
    let b = r.s.breaker_stats().snapshot();
    assert_eq!(b.failed_calls, 1);
    assert_eq!(r.s.stats().snapshot().seq_gaps, 1);
    // An incremental on the cleared book is not a quote; a snapshot is.
    r.peer(b"X", |e| {
        e.uint(268, 1);
        e.uint(279, 1);
        e.uint(269, 0);
        e.bytes(55, b"EUR/USD");
        e.bytes(270, b"1.08121");
    });
    assert!(r.ticks().is_empty());
    r.snapshot("EUR/USD", "1.08121", "1.08129");
    assert_eq!(r.ticks().len(), 1);
}

#[test]
fn repeated_gaps_log_out_and_reconnect() {
    let mut r = Rig::active();
    for _ in 0..3 {
        let seq = r.peer_seq + 2;
        r.peer_seq = seq + 1;
        r.peer_seq_n(seq, b"0", |_| {});
    }
    assert_eq!(r.s.state(), SessionState::LoggingOut);
    assert!(r.sent().iter().any(|m| m.0 == b"5"));
    assert_eq!(r.s.stats().snapshot().logouts_for_gaps, 1);
    assert_eq!(r.peer(b"5", |_| {}), Io::Close);
    assert_eq!(r.s.state(), SessionState::Waiting);
}

#[test]
fn a_logout_deadline_closes_without_the_peer() {
    let mut r = Rig::active();
    r.s.request_logout(r.now, r.wall());
    assert_eq!(r.s.state(), SessionState::LoggingOut);
    assert!(r.sent().iter().any(|m| m.0 == b"5"));
    let mut io = Io::Nothing;
    for _ in 0..5 {
        r.peer(b"0", |_| {}); // keep the read timeout away
        io = r.advance_ms(1_000);
        if io == Io::Close {
            break;
        }
    }
    assert_eq!(io, Io::Close);
    assert_eq!(
        r.s.breaker_stats().snapshot().failed_calls,
        0,
        "our own logout is no failure"
    );
}

#[test]
fn a_logout_from_the_provider_is_answered_and_counted() {
    let mut r = Rig::active();
    assert_eq!(r.peer(b"5", |e| e.bytes(58, b"maintenance")), Io::Close);
    assert_eq!(r.s.state(), SessionState::Waiting);
    assert!(
        r.s.outbound().starts_with(b"8=FIX.4.4"),
        "parting Logout kept for the driver"
    );
    assert_eq!(r.s.breaker_stats().snapshot().failed_calls, 1);
}

#[test]
fn a_market_data_reject_is_a_business_error() {
    let mut r = Rig::active();
    r.snapshot("EUR/USD", "1.08120", "1.08128");
    r.ticks();
    r.peer(b"Y", |e| {
        e.bytes(262, b"1-1");
        e.uint(281, 0);
        e.bytes(58, b"unknown symbol");
    });
    let t = r.ticks();
    assert_eq!(t.len(), 1, "USD/JPY withdrawn on the reject");
    assert_eq!(t[0].flags, pricewire::model::tick_flags::WITHDRAWN);
    let b = r.s.breaker_stats().snapshot();
    assert_eq!((b.failed_calls, b.ignored_calls), (0, 1));
    assert_eq!(r.s.breaker_state(r.now), BreakerState::Closed);
    assert_eq!(r.s.state(), SessionState::Active);
    assert_eq!(r.s.stats().snapshot().md_rejects, 1);
    r.snapshot("EUR/USD", "1.08122", "1.08128");
    assert_eq!(r.ticks().len(), 1, "other symbols keep streaming");
}

#[test]
fn garbled_messages_are_ignored_until_too_many_in_the_window() {
    let mut cfg = config();
    cfg.garbled_max = 3;
    cfg.garbled_window_ms = 10_000;
    cfg.quote_silence_ms = 0; // no quotes in this test: no silence failures
    let mut r = Rig::active_with(cfg);
    let mut frame = build(r.peer_seq, r.wall(), b"0", |_| {});
    let i = frame.len() - 2;
    frame[i] = if frame[i] == b'0' { b'1' } else { b'0' };
    let err = codec::frame_len(&frame).unwrap_err();
    assert!(matches!(err, codec::DecodeError::BadChecksum { .. }));
    assert_eq!(r.s.on_garbled(err, r.now), Io::Nothing, "FIX: ignore it");
    assert_eq!(r.s.breaker_stats().snapshot().failed_calls, 0);
    let quiet_ms = |r: &mut Rig, ms: u64| {
        for _ in 0..ms / 1_000 {
            assert_eq!(r.advance_ms(1_000), Io::Nothing);
            r.peer(b"0", |_| {}); // heartbeats keep the read timeout away
        }
    };
    quiet_ms(&mut r, 6_000);
    assert_eq!(r.s.on_garbled(err, r.now), Io::Nothing);
    quiet_ms(&mut r, 5_000);
    assert_eq!(
        r.s.on_garbled(err, r.now),
        Io::Nothing,
        "the first fell out of the 10-s window"
    );
    quiet_ms(&mut r, 1_000);
    assert_eq!(r.s.on_garbled(err, r.now), Io::Close, "3 within 10 s");
    let st = r.s.stats().snapshot();
    assert_eq!(
        (st.checksum_errors, st.garbled_ignored, st.garbled_teardowns),
        (4, 4, 1)
    );
    assert_eq!(r.s.breaker_stats().snapshot().failed_calls, 1);
}

#[test]
fn connect_and_logon_timeouts_are_separate() {
    let mut r = Rig::new(config());
    assert_eq!(r.poll(), Io::Connect);
    assert_eq!(r.advance_ms(1_999), Io::Nothing);
    assert_eq!(r.advance_ms(1), Io::Close, "connect_ms default 2000");
    assert_eq!(r.s.stats().snapshot().connect_timeouts, 1);
    r.now = r.s.next_connect_ns();
    assert_eq!(r.poll(), Io::Connect);
    r.s.on_connected(r.now, r.wall());
    // Keep the read timeout away with nothing but heartbeats before logon.
    let mut io = Io::Nothing;
    for _ in 0..5 {
        r.peer(b"0", |_| {});
        io = r.advance_ms(1_000);
        if io != Io::Nothing {
            break;
        }
    }
    assert_eq!(io, Io::Close, "logon_ms default 5000");
    assert_eq!(r.s.stats().snapshot().logon_timeouts, 1);
}

#[test]
fn first_connects_are_staggered_by_ordinal() {
    let mut cfg = config();
    cfg.stagger_ms = 100;
    let health = ProviderHealth::new(4);
    let due: Vec<u64> = (0..4)
        .map(|i| {
            FixSession::new(cfg.clone(), i, 0, 9, bound_slot(health.clone())).next_connect_ns()
        })
        .collect();
    for (i, d) in due.iter().enumerate() {
        let lo = i as u64 * 100 * MS;
        assert!((lo..=lo + 100 * MS).contains(d), "session {i} due at {d}");
    }
}

#[test]
fn breaker_opens_marks_unhealthy_goes_half_open_and_closes_on_quotes() {
    let mut r = Rig::active();
    r.s.on_disconnected(r.now);
    for _ in 0..2 {
        r.now = r.s.next_connect_ns().max(r.now);
        assert_eq!(r.poll(), Io::Connect);
        r.s.on_connect_failed(r.now);
    }
    assert_eq!(r.s.breaker_state(r.now), BreakerState::Open);
    assert!(!r.health.is_healthy(0));
    // The breaker's timer alone moves it to HalfOpen; health stays off.
    r.now += 1_000 * MS;
    r.poll();
    assert_eq!(r.s.breaker_state(r.now), BreakerState::HalfOpen);
    assert!(!r.health.is_healthy(0));
    // Reconnect and quote: two trial quotes close it.
    if r.s.state() != SessionState::Connecting {
        r.now = r.s.next_connect_ns().max(r.now);
        assert_eq!(r.poll(), Io::Connect);
    }
    r.s.on_connected(r.now, r.wall());
    r.peer_seq = 1;
    r.peer(b"A", |e| e.uint(108, 1));
    r.snapshot("EUR/USD", "1.08120", "1.08128");
    r.ticks();
    assert_eq!(r.s.breaker_state(r.now), BreakerState::HalfOpen);
    r.snapshot("USD/JPY", "149.870", "149.880");
    r.ticks();
    assert_eq!(r.s.breaker_state(r.now), BreakerState::Closed);
    // Flap damping: healthy again only after the probation (10 quotes
    // and 1 s since the logon by default).
    r.poll();
    assert!(!r.health.is_healthy(0), "probation");
    assert_eq!(r.s.provider_state(), ProviderState::Probation);
    for i in 0..8 {
        r.now += 150 * MS;
        r.snapshot(
            "EUR/USD",
            "1.08120",
            if i % 2 == 0 { "1.08129" } else { "1.08128" },
        );
        r.ticks();
    }
    r.poll();
    assert_eq!(r.s.provider_state(), ProviderState::Streaming);
    assert!(r.health.is_healthy(0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Well-framed messages with arbitrary bodies (broken fields, odd
    /// groups, bad prices) never panic the session.
    #[test]
    fn arbitrary_bodies_never_panic_the_session(
        msgs in proptest::collection::vec(
            (prop::sample::select(vec![&b"W"[..], b"X", b"Y", b"0", b"1", b"4", b"A", b"3"]),
             proptest::collection::vec(
                 prop::sample::select(vec![
                     &b"268=2\x01"[..], b"269=0\x01", b"269=1\x01", b"279=2\x01", b"55=EUR/USD\x01",
                     b"55=USD/JPY\x01", b"270=1.08120\x01", b"270=1.0812345\x01", b"270=-1\x01",
                     b"271=5\x01", b"273=25:00:00\x01", b"272=20251129\x01", b"262=1-1\x01",
                     b"36=1\x01", b"270\x01", b"=\x01", b"99999999999=1\x01",
                 ]),
                 0..24)),
            1..12),
    ) {
        let mut r = Rig::active();
        for (t, parts) in msgs {
            let body: Vec<u8> = parts.concat();
            r.peer(t, |e| e.raw(&body));
            r.ticks();
            if r.s.state() == SessionState::Waiting {
                break;
            }
        }
    }
}

#[test]
fn a_message_for_another_session_is_a_decode_failure() {
    let mut r = Rig::active();
    let mut e = Encoder::new(256);
    e.begin(
        b"0",
        &Header {
            sender_comp_id: b"SOMEONE",
            target_comp_id: b"PRICEWIRE",
            seq: r.peer_seq,
            sending_time_utc_ns: r.wall(),
        },
    );
    let frame = e.finish().unwrap().to_vec();
    assert_eq!(r.s.handle_frame(&frame, r.now, r.wall()), Io::Close);
    let st = r.s.stats().snapshot();
    assert_eq!(
        (st.comp_id_mismatches, st.decode_errors),
        (1, 0),
        "one reason each"
    );
    assert_eq!((st.connections, st.close_wrong_comp_id), (1, 1));
}

#[test]
fn a_bad_price_skips_the_entry_and_counts_a_failure() {
    let mut r = Rig::active();
    r.snapshot("EUR/USD", "1.081234", "1.08128"); // six decimals at five digits
    let t = r.ticks();
    // The full refresh replaced the bid with one we cannot read: gone.
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].flags, pricewire::model::tick_flags::WITHDRAWN_BID);
    assert_eq!(
        r.s.state(),
        SessionState::Active,
        "the stream itself is intact"
    );
    assert_eq!(r.s.stats().snapshot().bad_prices, 1);
    assert_eq!(r.s.breaker_stats().snapshot().failed_calls, 1);
    r.snapshot("EUR/USD", "1.08123", "1.08128");
    assert_eq!(r.ticks().len(), 1);
}

#[test]
fn a_sequence_reset_never_rewinds_and_a_gap_fill_is_sequenced() {
    let mut r = Rig::active();
    for _ in 0..5 {
        r.peer(b"0", |_| {});
    }
    // SequenceReset-Reset to a number below the expected one: ignored (a
    // Reset's own MsgSeqNum is not sequenced, so the next message reuses it).
    r.peer(b"4", |e| e.uint(36, 2));
    r.peer_seq -= 1;
    assert_eq!(r.peer(b"0", |_| {}), Io::Nothing);
    assert_eq!(
        r.s.stats().snapshot().seq_gaps,
        0,
        "no rewind, no gap storm"
    );
    // A GapFill carries its own MsgSeqNum: one sent with a gap is a gap.
    let seq = r.peer_seq + 3;
    r.peer_seq = seq + 1;
    r.peer_seq_n(seq, b"4", |e| {
        e.bytes(123, b"Y");
        e.uint(36, seq + 1);
    });
    assert_eq!(r.s.stats().snapshot().seq_gaps, 1);
    assert_eq!(r.s.state(), SessionState::Active);
}

#[test]
fn hostile_numbers_and_oversize_test_request_ids_do_not_panic() {
    let mut r = Rig::active();
    // An MDEntryDate far in the future: the provider time falls back to
    // SendingTime instead of overflowing.
    r.peer(b"W", |e| {
        e.bytes(55, b"EUR/USD");
        e.uint(268, 2);
        e.uint(269, 0);
        e.bytes(270, b"1.08120");
        e.uint(271, 1_000_000);
        e.bytes(272, b"99991231");
        e.bytes(273, b"00:00:00");
        e.uint(269, 1);
        e.bytes(270, b"1.08128");
        e.uint(271, 1_000_000);
    });
    let ticks = r.ticks();
    assert_eq!(ticks.len(), 1);
    assert!(ticks[0].provider_time_ns > 0);
    // A TestReqID longer than we echo makes the message garbled (ignored,
    // counted), not a panic.
    let long = vec![b'A'; 600];
    assert_eq!(r.peer(b"1", |e| e.bytes(112, &long)), Io::Nothing);
    assert_eq!(r.s.stats().snapshot().garbled_ignored, 1);
}

#[test]
fn a_resend_request_is_answered_by_one_gap_fill() {
    let mut r = Rig::active();
    // Logon (1) and two MarketDataRequests (2, 3) went out: next is 4.
    assert_eq!(
        r.peer(b"2", |e| {
            e.uint(7, 2);
            e.uint(16, 0);
        }),
        Io::Nothing
    );
    let sent = r.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let (t, f) = &sent[0];
    assert_eq!(t, b"4");
    assert_eq!(field(f, 34), vec![b"2"], "MsgSeqNum = BeginSeqNo");
    assert_eq!(field(f, 43), vec![b"Y"]);
    assert_eq!(field(f, 122).len(), 1, "OrigSendingTime");
    assert_eq!(field(f, 123), vec![b"Y"], "GapFill");
    assert_eq!(field(f, 36), vec![b"4"], "NewSeqNo = our next number");
    // The GapFill used no number: the next message is 4.
    r.advance_ms(1_000);
    let hb = r.sent();
    assert_eq!(field(&hb[0].1, 34), vec![b"4"]);
    // A bounded range ends at EndSeqNo + 1; a range we never sent is ignored.
    r.peer(b"2", |e| {
        e.uint(7, 1);
        e.uint(16, 2);
    });
    assert_eq!(field(&r.sent()[0].1, 36), vec![b"3"]);
    r.peer(b"2", |e| {
        e.uint(7, 99);
        e.uint(16, 0);
    });
    assert!(r.sent().is_empty());
    let st = r.s.stats().snapshot();
    assert_eq!((st.resend_requests, st.gap_fills_sent), (3, 2));
}

#[test]
fn the_unsubscribe_request_names_the_entry_types() {
    let mut r = Rig::active();
    let seq = r.peer_seq + 2;
    r.peer_seq = seq + 1;
    r.peer_seq_n(seq, b"0", |_| {});
    let unsub: Vec<_> = r
        .sent()
        .into_iter()
        .filter(|(t, f)| t == b"V" && field(f, 263) == vec![b"2"])
        .collect();
    assert_eq!(unsub.len(), 2, "one per symbol");
    for (_, f) in &unsub {
        assert_eq!(
            field(f, 267),
            vec![b"2"],
            "FIX44.xml: NoMDEntryTypes required"
        );
        assert_eq!(field(f, 269), vec![b"0", b"1"]);
    }
}

#[test]
fn logon_carries_username_and_password_that_never_print() {
    let mut cfg = config();
    cfg.username = Some("pw-user".into());
    cfg.password = Some(Secret::new("s3cret"));
    assert!(!format!("{cfg:?}").contains("s3cret"), "Debug masks it");
    let mut r = Rig::new(cfg);
    assert_eq!(r.poll(), Io::Connect);
    r.s.on_connected(r.now, r.wall());
    let sent = r.sent();
    let (t, f) = &sent[0];
    assert_eq!(t, b"A");
    assert_eq!(field(f, 553), vec![b"pw-user"]);
    assert_eq!(field(f, 554), vec![b"s3cret"]);
    assert_eq!(field(f, 141), vec![b"Y"], "ResetSeqNumFlag on every Logon");
}

#[test]
fn a_requested_logout_waits_logout_ms_for_the_peer() {
    let mut cfg = config();
    cfg.logout_timeout_ms = 500;
    let mut r = Rig::active_with(cfg);
    assert_eq!(r.s.request_logout(r.now, r.wall()), Io::Nothing);
    assert_eq!(r.sent()[0].0, b"5");
    assert_eq!(r.s.state(), SessionState::LoggingOut);
    assert_eq!(r.advance_ms(499), Io::Nothing);
    assert_eq!(r.advance_ms(1), Io::Close, "no answer in logout_ms: close");
    assert_eq!(r.s.breaker_stats().snapshot().failed_calls, 0);
    let mut r = Rig::active();
    r.s.request_logout(r.now, r.wall());
    assert_eq!(r.peer(b"5", |_| {}), Io::Close, "the peer's Logout ends it");
    assert_eq!(r.s.stats().snapshot().logouts_sent, 1);
}

#[test]
fn half_open_probes_at_once_instead_of_waiting_out_the_backoff() {
    let mut cfg = config();
    cfg.reconnect = pricewire::resilience::Backoff::new(20_000, 30_000);
    let mut r = Rig::active_with(cfg);
    // Three failures in a row open the breaker (consecutive rule).
    r.s.on_disconnected(r.now);
    for _ in 0..2 {
        r.now = r.s.next_connect_ns().max(r.now);
        assert_eq!(r.poll(), Io::Connect);
        r.s.on_connect_failed(r.now);
    }
    assert_eq!(r.s.breaker_state(r.now), BreakerState::Open);
    r.now += 1_000 * MS; // open_wait_ms
    let due = r.s.next_connect_ns();
    assert!(
        due > r.now + 1_000 * MS,
        "the backoff would wait: due {due}, now {}",
        r.now
    );
    assert_eq!(r.poll(), Io::Connect, "half-open: the probe connects now");
    assert_eq!(r.s.breaker_state(r.now), BreakerState::HalfOpen);
}

#[test]
fn half_open_is_one_probe_and_its_failure_reopens_at_once() {
    // The shipped trial count (5): by the rate rule alone three refused
    // probes (50 % of 5) came in a row, within milliseconds, before the
    // breaker re-opened. An LP stays down for a minute, all refused.
    let mut cfg = config();
    cfg.breaker.half_open_permitted_calls = 5;
    let mut r = Rig::active_with(cfg);
    r.s.on_disconnected(r.now);
    let mut probes: Vec<u32> = Vec::new(); // connects per half-open period
    let mut was_half_open = false;
    let end = r.now + 60_000 * MS;
    while r.now < end {
        let half_open = r.s.breaker_state(r.now) == BreakerState::HalfOpen;
        if half_open && !was_half_open {
            probes.push(0);
        }
        was_half_open = half_open;
        if r.poll() == Io::Connect {
            r.s.on_connect_failed(r.now);
            if half_open {
                *probes.last_mut().unwrap() += 1;
                let after = r.s.breaker_state(r.now);
                assert_eq!(after, BreakerState::Open, "the probe's failure decides");
            }
        }
        r.now += MS;
    }
    assert!(
        probes.len() >= 10,
        "a half-open period per open wait: {probes:?}"
    );
    assert!(probes.iter().all(|&n| n == 1), "one probe each: {probes:?}");
}

/// A W whose entries carry MDEntryDate/MDEntryTime `age_ms` before now.
fn aged_snapshot(r: &mut Rig, age_ms: u64) -> usize {
    let mut ts = Vec::new();
    codec::write_utc_timestamp(&mut ts, r.wall() - age_ms * MS).unwrap();
    let (date, time) = (ts[..8].to_vec(), ts[9..].to_vec());
    r.peer(b"W", |e| {
        e.bytes(55, b"EUR/USD");
        e.uint(268, 2);
        for (side, px) in [(0, &b"1.08120"[..]), (1, &b"1.08128"[..])] {
            e.uint(269, side);
            e.bytes(270, px);
            e.bytes(272, &date);
            e.bytes(273, &time);
        }
    });
    r.ticks().len()
}

#[test]
fn a_quote_old_by_its_provider_time_never_enters_the_price() {
    let mut r = Rig::active();
    // provider_age_max_ms 2000 + clock_skew_ms 500 by default.
    assert_eq!(aged_snapshot(&mut r, 2_400), 1, "within limit + skew");
    assert_eq!(aged_snapshot(&mut r, 3_000), 0, "stamped 3 s ago: dropped");
    let s = r.s.stats().snapshot();
    assert_eq!((s.stale_quotes, s.quotes), (1, 1), "delivered quotes only");
    let b = r.s.breaker_stats().snapshot();
    assert_eq!(
        b.slow_calls, 2,
        "both slow calls for the breaker (2.4 s, 3 s)"
    );
    let mut cfg = config();
    cfg.provider_age_max_ms = 0;
    let mut r = Rig::active_with(cfg);
    assert_eq!(aged_snapshot(&mut r, 3_000), 1, "rule off");
}
