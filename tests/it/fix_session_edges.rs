//! Session edge cases real LPs use, and the close accounting, on the
//! sans-IO session with hand-driven time: the in-session reset (Logon
//! 141=Y while logged on), SequenceReset-Reset below the expected number
//! (refused with a Reject, as FIX 4.4 says), Text (58) on every Logout we
//! send and the LP's Text in our log (escaped), the gap window, and the
//! invariant that every connection that ends is counted exactly once,
//! under one reason, over generated event sequences.

use crate::util::fix_rig;

use std::io::Write;
use std::sync::{Arc, Mutex};

use fix_rig::{config, field, Rig, MS};
use pricewire::feed::fix::codec::{self, Encoder, Header};
use pricewire::feed::fix::session::DisconnectReason;
use pricewire::feed::fix::stats::FixSessionSnapshot;
use pricewire::feed::fix::{Io, SessionState};
use proptest::prelude::*;

fn stats(r: &Rig) -> FixSessionSnapshot {
    r.s.stats().snapshot()
}

/// Sum of the per-reason close counters.
fn closes(r: &Rig) -> u64 {
    let s = r.s.stats();
    DisconnectReason::ALL
        .iter()
        .map(|d| d.counter(&s).get())
        .sum()
}

fn text_of(msgs: &[fix_rig::Sent], msg_type: &[u8]) -> Vec<String> {
    msgs.iter()
        .filter(|(t, _)| t == msg_type)
        .map(|(_, f)| {
            let t = field(f, 58);
            String::from_utf8_lossy(t.first().copied().unwrap_or(b"")).into_owned()
        })
        .collect()
}

#[test]
fn an_in_session_reset_is_answered_and_the_session_goes_on() {
    let mut r = Rig::active();
    for _ in 0..20 {
        r.peer(b"0", |_| {});
    }
    r.snapshot("EUR/USD", "1.08120", "1.08128");
    assert_eq!(r.ticks().len(), 1);
    // The LP's daily reset: Logon 141=Y, MsgSeqNum 1, while logged on.
    r.peer_seq = 1;
    let io = r.peer(b"A", |e| {
        e.uint(98, 0);
        e.uint(108, 1);
        e.bytes(141, b"Y");
    });
    assert_eq!(io, Io::Nothing);
    let sent = r.sent();
    let (t, logon) = &sent[0];
    assert_eq!(t, b"A", "our Logon answers first: {sent:?}");
    assert_eq!(field(logon, 34), vec![&b"1"[..]], "our numbers restart");
    assert_eq!(field(logon, 141), vec![&b"Y"[..]]);
    let unsub = sent
        .iter()
        .filter(|(t, f)| t == b"V" && field(f, 263) == [b"2"]);
    assert_eq!(unsub.count(), 2, "subscriptions renewed: {sent:?}");
    // The LP goes on at 2; nothing is too low, nothing is a gap.
    r.snapshot("EUR/USD", "1.08121", "1.08128");
    assert_eq!(r.ticks().len(), 1);
    r.peer(b"0", |_| {});
    let s = stats(&r);
    assert_eq!(
        (s.seq_resets, s.seq_too_low, s.seq_gaps),
        (1, 0, 0),
        "{s:?}"
    );
    assert_eq!(r.s.state(), SessionState::Active);
    assert_eq!(r.s.breaker_stats().snapshot().failed_calls, 0);
    // Our next message carries 2 + the renewed requests.
    r.advance_ms(1_000);
    let next = r.sent();
    assert!(next.iter().all(|(_, f)| field(f, 34) != [b"1"]), "{next:?}");
    // The peer answering our answer with another Logon 141=Y at its next
    // number: not a reset request, nothing answered.
    assert_eq!(r.peer(b"A", |e| e.bytes(141, b"Y")), Io::Nothing);
    assert!(r.sent().is_empty(), "no Logon ping-pong");
    assert_eq!(stats(&r).seq_resets, 1);
}

#[test]
fn a_peer_that_acknowledges_our_reset_answer_with_its_own_is_not_answered() {
    let mut r = Rig::active();
    for _ in 0..5 {
        r.peer(b"0", |_| {});
    }
    let reset = |r: &mut Rig| {
        r.peer_seq = 1;
        r.peer(b"A", |e| e.bytes(141, b"Y"))
    };
    reset(&mut r);
    assert_eq!(r.sent().iter().filter(|(t, _)| t == b"A").count(), 1);
    // QuickFIX 1.15 as the acceptor takes our answer for a new request and
    // answers it with a Logon 141=Y at 1: the acknowledgement, followed,
    // not answered (or both sides reset each other for ever).
    assert_eq!(reset(&mut r), Io::Nothing);
    assert!(r.sent().is_empty(), "no ping-pong");
    r.peer(b"0", |_| {});
    let s = stats(&r);
    assert_eq!(
        (s.seq_resets, s.seq_too_low, s.seq_gaps),
        (1, 0, 0),
        "{s:?}"
    );
    // A reset tomorrow, after other traffic, is a new request again.
    reset(&mut r);
    assert_eq!(r.sent().iter().filter(|(t, _)| t == b"A").count(), 1);
    assert_eq!(stats(&r).seq_resets, 2);
}

#[test]
fn a_sequence_reset_below_the_expected_number_is_rejected_not_followed() {
    let mut r = Rig::active();
    for _ in 0..5 {
        r.peer(b"0", |_| {});
    }
    let expected = r.peer_seq;
    // Reset mode to 2: refused with a Reject naming NewSeqNo; the expected
    // number stays (FIX 4.4: a SequenceReset may only increase it).
    r.peer(b"4", |e| e.uint(36, 2));
    r.peer_seq -= 1; // a Reset is not sequenced itself
    let sent = r.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let (t, rej) = &sent[0];
    assert_eq!(t, b"3");
    assert_eq!(field(rej, 45), vec![expected.to_string().as_bytes()]);
    assert_eq!(
        (field(rej, 371), field(rej, 372), field(rej, 373)),
        (vec![&b"36"[..]], vec![&b"4"[..]], vec![&b"5"[..]])
    );
    assert!(text_of(&sent, b"3")[0].contains("NewSeqNo 2 below"));
    assert_eq!(r.peer(b"0", |_| {}), Io::Nothing, "the session goes on");
    assert_eq!(r.s.state(), SessionState::Active);
    // An LP that now numbers from 3: too low, a Logout that says why,
    // one failure and one close however many low messages follow.
    r.peer_seq = 3;
    r.peer(b"0", |_| {});
    let sent = r.sent();
    let expect = format!(
        "MsgSeqNum too low, expecting {} but received 3",
        expected + 1
    );
    assert_eq!(text_of(&sent, b"5"), vec![expect]);
    for _ in 0..5 {
        r.peer(b"0", |_| {});
    }
    assert_eq!(r.peer(b"5", |_| {}), Io::Close, "its Logout ends it");
    let s = stats(&r);
    assert_eq!((s.seq_reset_rejects, s.seq_too_low), (1, 1), "{s:?}");
    assert_eq!((s.close_seq_too_low, closes(&r)), (1, 1));
    assert_eq!(r.s.breaker_stats().snapshot().failed_calls, 1);
}

#[test]
fn a_sequence_reset_above_is_followed_and_equal_is_nothing() {
    let mut r = Rig::active();
    let here = r.peer_seq;
    r.peer_seq_n(here, b"4", |e| e.uint(36, here));
    assert_eq!(stats(&r).messages_ignored, 1);
    r.peer_seq_n(here, b"4", |e| e.uint(36, here + 10));
    r.peer_seq = here + 10;
    r.peer(b"0", |_| {});
    let s = stats(&r);
    assert_eq!((s.seq_gaps, s.seq_reset_rejects, s.rejects_sent), (0, 0, 0));
    assert!(r.sent().is_empty());
}

#[test]
fn every_logout_we_send_says_why() {
    // Shutdown.
    let mut r = Rig::active();
    r.s.request_logout(r.now, r.wall());
    assert_eq!(text_of(&r.sent(), b"5"), vec!["pricewire shutting down"]);
    // The answer to the LP's Logout.
    let mut r = Rig::active();
    r.peer(b"5", |e| e.bytes(58, b"end of day"));
    assert_eq!(text_of(&r.sent(), b"5"), vec!["Logout acknowledged"]);
    assert_eq!(stats(&r).close_peer_logout, 1);
    // The gap policy.
    let mut r = Rig::active();
    for _ in 0..3 {
        r.peer_seq += 1;
        r.peer(b"0", |_| {});
    }
    let texts = text_of(&r.sent(), b"5");
    assert_eq!(texts, vec!["3 MsgSeqNum gaps within 10000 ms"]);
}

#[test]
fn gaps_far_apart_are_each_recovered_and_three_close_together_log_out() {
    let mut r = Rig::active();
    for _ in 0..6 {
        r.now += 11_000 * MS;
        r.peer(b"0", |_| {}); // keeps the read timeout away
        r.peer_seq += 1;
        assert_eq!(r.peer(b"0", |_| {}), Io::Nothing);
        assert_eq!(r.s.state(), SessionState::Active);
    }
    let s = stats(&r);
    assert_eq!((s.seq_gaps, s.resubscribes, s.logouts_for_gaps), (6, 6, 0));
    for _ in 0..3 {
        r.now += 4_000 * MS;
        r.peer_seq += 1;
        r.peer(b"0", |_| {});
    }
    assert_eq!(r.s.state(), SessionState::LoggingOut, "3 within 10 s");
    assert_eq!(stats(&r).logouts_for_gaps, 1);
}

#[test]
fn a_logout_answering_our_logon_is_a_rejected_logon_with_its_text_logged() {
    let logs = capture(|| {
        let mut r = Rig::new(config());
        assert_eq!(r.poll(), Io::Connect);
        r.s.on_connected(r.now, r.wall());
        r.sent();
        let io = r.peer(b"5", |e| {
            e.bytes(58, b"Invalid username or password\nFORGED line")
        });
        assert_eq!(io, Io::Close);
        assert!(r.sent().is_empty(), "no Logout back: never logged on");
        let s = stats(&r);
        assert_eq!((s.logons_rejected, s.close_logon_rejected), (1, 1));
        assert_eq!(closes(&r), 1);
    });
    let line = logs
        .lines()
        .find(|l| l.contains("logon rejected"))
        .unwrap_or_else(|| panic!("no log line: {logs}"));
    assert!(
        line.contains(r#"Invalid username or password\nFORGED line"#),
        "{line}"
    );
    assert!(!logs.contains("\nFORGED"), "the text cannot start a line");
}

#[test]
fn a_message_without_msg_seq_num_has_its_own_reason() {
    let mut r = Rig::active();
    let mut e = Encoder::new(256);
    e.begin(
        b"0",
        &Header {
            sender_comp_id: b"LP1",
            target_comp_id: b"PRICEWIRE",
            seq: 0,
            sending_time_utc_ns: r.wall(),
        },
    );
    // The encoder always writes 34: take it out and re-frame.
    let body: Vec<u8> = e.finish().unwrap().to_vec();
    let frame = strip_seq_num(&body);
    assert_eq!(r.s.handle_frame(&frame, r.now, r.wall()), Io::Close);
    let s = stats(&r);
    assert_eq!(
        (s.missing_seq_nums, s.decode_errors, s.close_missing_seq_num),
        (1, 0, 1)
    );
}

/// The same message without its MsgSeqNum, BodyLength and CheckSum redone.
fn strip_seq_num(frame: &[u8]) -> Vec<u8> {
    let fields: Vec<(u32, Vec<u8>)> = codec::Fields::of_frame(frame)
        .map(|f| f.unwrap())
        .map(|(t, v)| (t, v.to_vec()))
        .collect();
    let mut body = Vec::new();
    for (t, v) in fields.iter().filter(|(t, _)| *t != 34) {
        write!(body, "{t}=").unwrap();
        body.extend_from_slice(v);
        body.push(1);
    }
    let mut out = format!("8=FIX.4.4\x019={}\x01", body.len()).into_bytes();
    out.extend_from_slice(&body);
    let sum = codec::checksum(&out);
    write!(out, "10={sum:03}\x01").unwrap();
    out
}

/// Runs `f` with a subscriber writing every log line into a string.
fn capture(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let w = sink.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || w.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(sub, f);
    let bytes = sink.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

/// What the LP (or the line) does next, for the accounting invariant.
#[derive(Debug, Clone)]
enum Ev {
    Heartbeat,
    Gap,
    Low,
    LowPossDup,
    Logout,
    Garbled,
    WrongCompId,
    NoSeqNum,
    Eof,
    Advance(u64),
    Shutdown,
    ResetLogon,
    ResetLower,
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        4 => Just(Ev::Heartbeat),
        1 => Just(Ev::Gap),
        1 => Just(Ev::Low),
        1 => Just(Ev::LowPossDup),
        1 => Just(Ev::Logout),
        2 => Just(Ev::Garbled),
        1 => Just(Ev::WrongCompId),
        1 => Just(Ev::NoSeqNum),
        1 => Just(Ev::Eof),
        2 => (1u64..4_000).prop_map(Ev::Advance),
        1 => Just(Ev::Shutdown),
        1 => Just(Ev::ResetLogon),
        1 => Just(Ev::ResetLower),
    ]
}

/// Drives `r` through `evs`; the peer answers Logons as it goes. Returns
/// the decode errors injected (each must be counted once).
fn play(r: &mut Rig, evs: &[Ev]) -> u64 {
    let mut injected = 0;
    for e in evs {
        let connected = matches!(
            r.s.state(),
            SessionState::LogonSent | SessionState::Active | SessionState::LoggingOut
        );
        if r.poll() == Io::Connect {
            r.s.on_connected(r.now, r.wall());
            r.peer_seq = 1;
            r.peer(b"A", |e| e.uint(108, 1));
        }
        if !connected {
            r.now += 600 * MS;
            continue;
        }
        r.sent();
        match e {
            Ev::Heartbeat => drop(r.peer(b"0", |_| {})),
            Ev::Gap => {
                r.peer_seq += 1;
                r.peer(b"0", |_| {});
            }
            Ev::Low => drop(r.peer_seq_n(1, b"0", |_| {})),
            Ev::LowPossDup => drop(r.peer_seq_n(1, b"0", |e| e.bytes(43, b"Y"))),
            Ev::Logout => drop(r.peer(b"5", |_| {})),
            Ev::Garbled => {
                injected += 1;
                r.s.on_garbled(codec::DecodeError::BadBodyLength, r.now);
            }
            Ev::WrongCompId => {
                injected += 1;
                let mut e = Encoder::new(256);
                e.begin(
                    b"0",
                    &Header {
                        sender_comp_id: b"OTHER",
                        target_comp_id: b"PRICEWIRE",
                        seq: r.peer_seq,
                        sending_time_utc_ns: r.wall(),
                    },
                );
                let frame = e.finish().unwrap().to_vec();
                r.s.handle_frame(&frame, r.now, r.wall());
            }
            Ev::NoSeqNum => {
                injected += 1;
                let frame = fix_rig::build(9, r.wall(), b"0", |_| {});
                r.s.handle_frame(&strip_seq_num(&frame), r.now, r.wall());
            }
            Ev::Eof => drop(r.s.on_disconnected(r.now)),
            Ev::Advance(ms) => drop(r.advance_ms(*ms)),
            Ev::Shutdown => drop(r.s.request_logout(r.now, r.wall())),
            Ev::ResetLogon => {
                r.peer_seq = 1;
                r.peer(b"A", |e| e.bytes(141, b"Y"));
            }
            Ev::ResetLower => {
                let s = r.peer_seq;
                r.peer_seq_n(s, b"4", |e| e.uint(36, 1));
            }
        }
        let mut buf = [pricewire::model::Tick::EMPTY; 8];
        while r.s.drain_ticks(&mut buf) > 0 {}
    }
    injected
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every connection that ended is counted once, under one reason; no
    /// reason counts a connection that did not end; each decode error is
    /// counted under exactly one reason.
    #[test]
    fn every_ended_connection_is_counted_once(evs in proptest::collection::vec(ev(), 1..80)) {
        let mut cfg = config();
        cfg.garbled_max = 4;
        let mut r = Rig::new(cfg);
        let injected = play(&mut r, &evs);
        let s = stats(&r);
        let open = u64::from(matches!(
            r.s.state(),
            SessionState::LogonSent | SessionState::Active | SessionState::LoggingOut
        ));
        prop_assert!(s.connections >= 1, "the first poll connects");
        prop_assert_eq!(closes(&r) + open, s.connections, "{:?}", s);
        let decode = s.checksum_errors + s.decode_errors + s.comp_id_mismatches
            + s.missing_seq_nums;
        prop_assert_eq!(decode, injected, "{:?}", s);
        prop_assert!(s.seq_too_low >= s.close_seq_too_low);
    }
}
