//! §2 framing: frames split across reads, several in one read, a broken
//! SOFH, a full buffer, an incomplete frame that never completes.

use super::*;

#[test]
fn a_frame_split_across_reads_is_taken_when_complete() {
    let mut r = Rig::new();
    let f = logon(0);
    assert_eq!(r.feed(&f[..5]), vec![Got::Done]);
    assert_eq!(r.feed(&f[5..]), vec![logon_event(0), Got::Done]);
    assert!(r.sent().is_empty());
}

#[test]
fn several_frames_in_one_read_come_out_in_order() {
    let mut r = Rig::new().logged_on();
    let mut bytes = subscribe(7);
    bytes.extend(heartbeat());
    bytes.extend(encode(|b| {
        wire::encode_symbol_list_request(
            b,
            &wire::SymbolListRequest {
                request_id: 8,
                budget_us: 0,
                critical: false,
            },
        )
    }));
    let got = r.feed(&bytes);
    let want = vec![
        Got::Subscribe(7),
        Got::Handled,
        Got::SymbolList(8),
        Got::Done,
    ];
    assert_eq!(got, want);
}

fn assert_framing_error(bytes: &[u8], reason: RejectReason) {
    let mut r = Rig::new();
    assert_eq!(r.feed(bytes), vec![Got::Done]);
    let sent = r.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(reject_of(&sent[0]), (0, 0, reason));
    assert!(disconnect(DisconnectReason::PROTOCOL_ERROR, "bad framing")(
        &sent[1]
    ));
    assert!(r.s.is_closing());
    assert_eq!(GatewayStats::get(&r.stats.disconnects_protocol_error), 1);
}

#[test]
fn a_frame_below_the_minimum_loses_the_framing() {
    assert_framing_error(&[0, 0, 0, 10, 0xEB, 0x50], RejectReason::FRAME_TOO_SMALL);
}

#[test]
fn a_frame_above_the_listener_limit_is_refused_before_its_body() {
    // 2,000 > max_frame_bytes (1,024): refused on the first 4 bytes.
    assert_framing_error(&[0, 0, 0x07, 0xD0], RejectReason::FRAME_TOO_LARGE);
}

#[test]
fn a_wrong_encoding_type_loses_the_framing() {
    assert_framing_error(&[0, 0, 0, 20, 0x12, 0x34], RejectReason::BAD_ENCODING_TYPE);
}

#[test]
fn a_full_buffer_without_a_frame_is_a_protocol_error() {
    let mut r = Rig::new();
    r.call(|s, ctx| s.on_buffer_full(ctx));
    let sent = r.sent();
    assert_eq!(reject_of(&sent[0]), (0, 0, RejectReason::FRAME_TOO_LARGE));
    assert!(disconnect(
        DisconnectReason::PROTOCOL_ERROR,
        "frame does not fit"
    )(&sent[1]));
    assert!(r.s.is_closing());
}

#[test]
fn an_incomplete_frame_times_out() {
    let mut r = Rig::new();
    let f = logon(0);
    r.at_ms(100).feed(&f[..7]);
    // Not yet: the frame timeout (2 s) counts from the partial frame.
    r.at_ms(2_100);
    assert_eq!(r.call(|s, ctx| s.on_timer(ctx)), Timer::Idle);
    assert!(r.sent().is_empty());
    r.at_ms(2_101);
    assert_eq!(r.call(|s, ctx| s.on_timer(ctx)), Timer::Idle);
    let sent = r.sent();
    assert_eq!(reject_of(&sent[0]), (0, 0, RejectReason::MALFORMED));
    let text = "incomplete frame timed out";
    assert!(disconnect(DisconnectReason::PROTOCOL_ERROR, text)(&sent[1]));
}

#[test]
fn a_completed_frame_stops_the_frame_timer() {
    let mut r = Rig::new();
    let f = logon(0);
    r.at_ms(100).feed(&f[..7]);
    r.at_ms(200).feed(&f[7..]);
    let a = admitted();
    r.call(|s, ctx| s.logon_accepted(a, 0, ctx));
    r.sent();
    r.at_ms(2_500).feed(&heartbeat());
    r.call(|s, ctx| s.on_timer(ctx));
    assert!(r
        .sent()
        .iter()
        .all(|s| !matches!(s, Sent::Disconnect { .. })));
    assert!(r.s.is_active());
}

#[test]
fn a_frame_trickled_in_times_out_from_its_first_byte() {
    // A slowloris sending a byte now and then gains nothing.
    let mut r = Rig::new();
    let f = logon(0);
    r.at_ms(100).feed(&f[..3]);
    r.at_ms(1_500).feed(&f[3..9]);
    r.at_ms(2_000).feed(&f[9..12]);
    timer(&mut r, 2_101);
    let sent = r.sent();
    assert_eq!(reject_of(&sent[0]), (0, 0, RejectReason::MALFORMED));
}

#[test]
fn the_frame_timer_restarts_with_the_next_incomplete_frame() {
    let mut r = Rig::new().logged_on();
    let mut bytes = heartbeat();
    let f = subscribe(1);
    r.at_ms(100).feed(&f[..4]);
    // The subscribe completes and the next frame starts at 1.9 s.
    bytes.splice(0..0, f[4..].iter().copied());
    bytes.truncate(f.len() - 4 + 5);
    r.at_ms(1_900).feed(&bytes);
    r.s.note_sent(T0 + 2_200 * MS_NS);
    timer(&mut r, 2_200);
    assert!(r.sent().is_empty(), "timed from 1.9 s, not 0.1 s");
    assert!(r.s.is_active());
}

fn timer(r: &mut Rig, ms: u64) -> Timer {
    r.at_ms(ms).call(|s, ctx| s.on_timer(ctx))
}
