//! Unit tests of the codec: every error path of `decode`, schema evolution,
//! encoder limits, and pairings with the model types.

mod docs;
mod schema;

use super::*;
use crate::model::{price_flags, Price};

fn encode_to_vec(f: impl FnOnce(&mut [u8]) -> Result<usize, EncodeError>) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let n = f(&mut buf).expect("encodes");
    buf.truncate(n);
    buf
}

fn sample_price() -> PriceBody {
    PriceBody {
        symbol_id: 3,
        tier: 1,
        flags: price_flags::SINGLE_PROVIDER,
        digits: 5,
        providers: 1,
        seq: 42,
        bid: 108_123,
        ask: 108_126,
        bid_size: 1_000_000,
        ask_size: 2_000_000,
        provider_time_ns: 1_764_410_000_000_000_000,
        engine_time_ns: 1_764_410_000_000_050_000,
    }
}

/// Rewrites the SBE header field at `off` (0 blockLength, 2 templateId,
/// 4 schemaId, 6 version) of an encoded frame.
fn patch_header(frame: &mut [u8], off: usize, value: u16) {
    frame[6 + off..8 + off].copy_from_slice(&value.to_le_bytes());
}

/// Resizes a frame and fixes its SOFH length.
fn with_len(mut frame: Vec<u8>, len: usize) -> Vec<u8> {
    frame.resize(len, 0);
    frame[..4].copy_from_slice(&(len as u32).to_be_bytes());
    frame
}

/// The tests' stream id.
const STREAM: u64 = 0x1234_5678_9abc_def0;

fn snapshot(body: PriceBody) -> PriceSnapshot {
    PriceSnapshot {
        body,
        stream_id: STREAM,
    }
}

#[test]
fn price_update_round_trips_through_the_fast_path() {
    let mut slot = [0u8; PRICE_SLOT_LEN];
    for (kind, len) in [(PriceKind::Snapshot, 84), (PriceKind::Update, 76)] {
        let n = encode_price(&mut slot, kind, &sample_price(), STREAM);
        assert_eq!(n, len);
        assert_eq!(split(&slot[..n]), Ok(Some(len)));
        let expected = match kind {
            PriceKind::Snapshot => Message::PriceSnapshot(snapshot(sample_price())),
            PriceKind::Update => Message::PriceUpdate(sample_price()),
        };
        assert_eq!(decode(&slot[..n]), Ok(expected));
    }
}

#[test]
fn an_update_restated_as_a_snapshot_is_the_snapshot_encoder_s_frame() {
    let mut update = [0u8; PRICE_FRAME_LEN];
    encode_update(&mut update, &sample_price());
    let mut restated = [0u8; SNAPSHOT_FRAME_LEN];
    assert_eq!(update_to_snapshot(&update, STREAM, &mut restated), 84);
    let mut direct = [0u8; SNAPSHOT_FRAME_LEN];
    encode_snapshot(&mut direct, &sample_price(), STREAM);
    assert_eq!(restated, direct);
    assert_eq!(update_to_snapshot(&update[..75], STREAM, &mut restated), 0);
    assert_eq!(update_to_snapshot(&update, STREAM, &mut restated[..83]), 0);
}

#[test]
fn version_2_logon_accepted_and_snapshot_decode_with_no_stream_id() {
    // What a version-2 server sent: the blocks end before streamId.
    let accepted = LogonAccepted {
        session_id: 5,
        heartbeat_interval_ms: 1_000,
        server_time_ns: 7,
        default_tier: 1,
        stream_id: STREAM,
    };
    let v3 = encode_to_vec(|b| encode_logon_accepted(b, &accepted));
    let mut v2 = with_len(v3[..HEADER_LEN + 21].to_vec(), HEADER_LEN + 21);
    patch_header(&mut v2, 0, 21);
    patch_header(&mut v2, 6, 2);
    let want = LogonAccepted {
        stream_id: 0,
        ..accepted
    };
    assert_eq!(decode(&v2), Ok(Message::LogonAccepted(want)));
    let mut slot = [0u8; SNAPSHOT_FRAME_LEN];
    encode_snapshot(&mut slot, &sample_price(), STREAM);
    let mut v2 = with_len(slot[..PRICE_FRAME_LEN].to_vec(), PRICE_FRAME_LEN);
    patch_header(&mut v2, 0, PriceBody::BLOCK_LENGTH);
    patch_header(&mut v2, 6, 2);
    let want = PriceSnapshot {
        body: sample_price(),
        stream_id: 0,
    };
    assert_eq!(decode(&v2), Ok(Message::PriceSnapshot(want)));
    // Shorter than version 1's block: malformed.
    patch_header(&mut v2, 0, PriceBody::BLOCK_LENGTH - 1);
    let mut short = with_len(v2[..PRICE_FRAME_LEN - 1].to_vec(), PRICE_FRAME_LEN - 1);
    patch_header(&mut short, 0, PriceBody::BLOCK_LENGTH - 1);
    assert!(matches!(
        decode(&short),
        Err(DecodeError::ShortBlock { required: 62, .. })
    ));
}

/// A version-2 reader, as a third party wrote it from the version-2
/// document: it knows LogonAccepted's 21 bytes and the 62-byte price body,
/// reads the fields it knows at their offsets and skips to the end of the
/// block by the header's blockLength.
fn v2_reader(frame: &[u8]) -> (u16, u64, u64, usize) {
    let le16 = |at: usize| u16::from_le_bytes([frame[at], frame[at + 1]]);
    let le64 = |at: usize| u64::from_le_bytes(frame[at..at + 8].try_into().unwrap());
    let (block_length, template) = (le16(6), le16(8));
    let first = le64(HEADER_LEN);
    let seq = if template == template::PRICE_SNAPSHOT {
        le64(HEADER_LEN + 6)
    } else {
        0
    };
    (template, first, seq, HEADER_LEN + block_length as usize)
}

#[test]
fn a_version_2_reader_reads_version_3_frames() {
    let accepted = LogonAccepted {
        session_id: 5,
        heartbeat_interval_ms: 1_000,
        server_time_ns: 7,
        default_tier: 1,
        stream_id: STREAM,
    };
    let mut bytes = encode_to_vec(|b| encode_logon_accepted(b, &accepted));
    let mut slot = [0u8; SNAPSHOT_FRAME_LEN];
    encode_snapshot(&mut slot, &sample_price(), STREAM);
    bytes.extend_from_slice(&slot);
    let (t, session_id, _, end) = v2_reader(&bytes);
    assert_eq!((t, session_id, end), (template::LOGON_ACCEPTED, 5, 43));
    // Nothing of the first version moved: the v2 fields at their offsets.
    let Ok(Message::LogonAccepted(a)) = decode(&bytes[..end]) else {
        panic!("not a LogonAccepted")
    };
    assert_eq!((a.heartbeat_interval_ms, a.default_tier), (1_000, 1));
    let (t, _, seq, len) = v2_reader(&bytes[end..]);
    assert_eq!((t, seq, len), (template::PRICE_SNAPSHOT, 42, 84));
    assert_eq!(end + len, bytes.len(), "the reader lands on the next frame");
}

#[test]
fn blocks_list_later_fields_after_the_first_version_s() {
    for m in spec::MESSAGES {
        let base: u16 = m
            .root
            .fields
            .iter()
            .filter(|f| f.since_version == 0)
            .map(|f| f.size as u16)
            .sum();
        let first_later = m.root.fields.iter().position(|f| f.since_version > 0);
        if let Some(i) = first_later {
            assert!(
                m.root.fields[i..].iter().all(|f| f.since_version > 0),
                "{}",
                m.name
            );
        }
        assert!(base <= m.root.block_length, "{}", m.name);
    }
    assert_eq!(LogonAccepted::BLOCK_LENGTH_MIN, 21);
    assert_eq!(LogonAccepted::BLOCK_LENGTH, 29);
    assert_eq!(PriceSnapshot::BLOCK_LENGTH_MIN, 62);
    assert_eq!(PriceSnapshot::BLOCK_LENGTH, 70);
    assert_eq!(PriceBody::BLOCK_LENGTH_MIN, PriceBody::BLOCK_LENGTH);
}

#[test]
fn fast_path_equals_generic_encoder() {
    let mut slot = [0u8; PRICE_FRAME_LEN];
    encode_update(&mut slot, &sample_price());
    let generic = encode_to_vec(|b| Message::PriceUpdate(sample_price()).encode(b));
    assert_eq!(&slot[..], &generic[..]);
    let mut snap = [0u8; SNAPSHOT_FRAME_LEN];
    encode_snapshot(&mut snap, &sample_price(), STREAM);
    let generic = encode_to_vec(|b| Message::PriceSnapshot(snapshot(sample_price())).encode(b));
    assert_eq!(&snap[..], &generic[..]);
    let header = decode_header(&slot).unwrap().0;
    assert_eq!(header.block_length, PriceBody::BLOCK_LENGTH);
    assert_eq!(header.template_id, template::PRICE_UPDATE);
    assert_eq!(header.schema_id, SCHEMA_ID);
    assert_eq!(header.version, VERSION);
}

#[test]
fn model_price_converts_monotonic_engine_time_to_utc() {
    let price = Price {
        bid: 108_123,
        ask: 108_126,
        bid_size: 5,
        ask_size: 6,
        seq: 9,
        provider_time_ns: 1_764_410_000_000_000_000,
        engine_time_ns: 2_000,
        receive_time_ns: 1_000,
        stream_id: STREAM,
        symbol: 4,
        tier: 2,
        flags: price_flags::STALE | price_flags::CONFLATED,
        providers: 3,
        _reserved: [0; 3],
    };
    let offset = wall_offset_ns(1_764_410_000_000_000_000, 1_000);
    let mut slot = [0u8; PRICE_SLOT_LEN];
    let n = encode_model_price(&mut slot, PriceKind::Snapshot, &price, 5, offset);
    let Ok(Message::PriceSnapshot(PriceSnapshot { stream_id, .. })) = decode(&slot[..n]) else {
        panic!("not a price snapshot")
    };
    assert_eq!(stream_id, STREAM, "a snapshot carries the price's stream");
    let n = encode_model_price(&mut slot, PriceKind::Update, &price, 5, offset);
    let Ok(Message::PriceUpdate(body)) = decode(&slot[..n]) else {
        panic!("not a price update")
    };
    assert_eq!(body.engine_time_ns, 1_764_410_000_000_001_000);
    assert_eq!(
        (body.symbol_id, body.tier, body.digits, body.providers),
        (4, 2, 5, 3)
    );
    assert_eq!(
        (body.bid, body.ask, body.seq, body.flags),
        (108_123, 108_126, 9, 0b11)
    );
}

#[test]
fn try_encode_price_refuses_a_short_buffer() {
    let mut buf = [0u8; PRICE_FRAME_LEN - 1];
    assert_eq!(
        try_encode_price(&mut buf, PriceKind::Update, &sample_price(), 0),
        Err(EncodeError::BufferTooSmall { capacity: 75 })
    );
    let mut buf = [0u8; SNAPSHOT_FRAME_LEN - 1];
    assert_eq!(
        try_encode_price(&mut buf, PriceKind::Snapshot, &sample_price(), STREAM),
        Err(EncodeError::BufferTooSmall { capacity: 83 })
    );
}

#[test]
fn every_encoder_refuses_every_short_buffer() {
    let frame = encode_to_vec(|b| {
        encode_symbol_directory(
            b,
            1,
            [SymbolInfo {
                symbol_id: 1,
                digits: 5,
                name: Name16::new("EURUSD").unwrap(),
            }],
            [TierInfo::default()],
        )
    });
    let msg = decode(&frame).unwrap();
    for cap in 0..frame.len() {
        let mut buf = vec![0u8; cap];
        assert_eq!(
            msg.encode(&mut buf),
            Err(EncodeError::BufferTooSmall { capacity: cap })
        );
    }
}

#[test]
fn var_data_over_255_bytes_is_refused() {
    let long = [b'x'; 256];
    let mut buf = [0u8; 1024];
    let logon = Logon {
        heartbeat_interval_ms: 1000,
        account: &long,
        token: b"t",
    };
    assert_eq!(
        encode_logon(&mut buf, &logon),
        Err(EncodeError::VarDataTooLong { len: 256 })
    );
    let ok = Logon {
        account: &long[..255],
        ..logon
    };
    let n = encode_logon(&mut buf, &ok).unwrap();
    assert_eq!(decode(&buf[..n]), Ok(Message::Logon(ok)));
}

#[test]
fn names_longer_than_16_bytes_or_with_nul_are_refused() {
    assert!(Name16::new("ABCDEFGHIJKLMNOP").is_ok());
    assert_eq!(
        Name16::new("ABCDEFGHIJKLMNOPQ"),
        Err(EncodeError::InvalidName { len: 17 })
    );
    assert!(Name16::new("A\0B").is_err());
    let mut buf = [0u8; 256];
    assert_eq!(
        encode_subscribe_names(&mut buf, 1, 0, ["EURUSD", "A_NAME_FAR_TOO_LONG"]),
        Err(EncodeError::InvalidName { len: 19 })
    );
    assert_eq!(Name16::new("EURUSD").unwrap().as_str(), Some("EURUSD"));
}

#[test]
fn subscribe_by_names_and_ids() {
    let frame =
        encode_to_vec(|b| encode_subscribe_names(b, 7, TIER_ACCOUNT_DEFAULT, ["EURUSD", "XAUUSD"]));
    let Ok(Message::Subscribe(sub)) = decode(&frame) else {
        panic!("not a subscribe")
    };
    assert_eq!((sub.request_id, sub.tier), (7, 0xFF));
    let names: Vec<_> = sub
        .entries
        .clone()
        .map(|e| (e.symbol_id, e.name.to_string()))
        .collect();
    assert_eq!(
        names,
        [
            (0xFFFF, "EURUSD".to_string()),
            (0xFFFF, "XAUUSD".to_string())
        ]
    );
    assert_eq!(sub.entries.len(), 2);

    let by_id = encode_to_vec(|b| encode_subscribe(b, 8, 0, [SymbolRef::by_id(3)]));
    let Ok(Message::Subscribe(sub)) = decode(&by_id) else {
        panic!("not a subscribe")
    };
    assert_eq!(sub.entries.collect::<Vec<_>>(), [SymbolRef::by_id(3)]);
}

#[test]
fn snapshot_response_from_an_iterator() {
    let prices: Vec<PriceBody> = (1..=3u16)
        .map(|s| PriceBody {
            symbol_id: s,
            seq: u64::from(s) * 10,
            ..sample_price()
        })
        .collect();
    let frame = encode_to_vec(|b| encode_snapshot_response(b, 5, prices.iter()));
    assert_eq!(frame.len(), 14 + 8 + 4 + 3 * 62);
    let Ok(Message::SnapshotResponse(r)) = decode(&frame) else {
        panic!("not a snapshot response")
    };
    assert_eq!(r.request_id, 5);
    assert_eq!(r.prices.collect::<Vec<_>>(), prices);
}

#[test]
fn group_over_65535_entries_is_refused() {
    let mut buf = vec![0u8; 20 + 2 * 70_000];
    let ids = std::iter::repeat_n(1u16, 65_536);
    assert_eq!(
        encode_snapshot_request(&mut buf, 1, 0, false, 0, ids),
        Err(EncodeError::GroupTooLarge)
    );
}

// ---- decode errors --------------------------------------------------------

#[test]
fn frame_shorter_than_headers_is_too_small() {
    let frame = encode_to_vec(encode_heartbeat);
    for cut in 0..frame.len() {
        let err = decode(&frame[..cut]).unwrap_err();
        assert_eq!(err.reason(), RejectReason::FRAME_TOO_SMALL, "cut at {cut}");
    }
}

#[test]
fn sofh_length_must_match_the_frame() {
    let mut frame = encode_to_vec(encode_heartbeat);
    frame.push(0);
    assert_eq!(
        decode(&frame),
        Err(DecodeError::LengthMismatch {
            declared: 14,
            actual: 15
        })
    );
    assert_eq!(
        decode(&frame).unwrap_err().reason(),
        RejectReason::MALFORMED
    );
}

#[test]
fn bad_encoding_type_is_refused() {
    let mut frame = encode_to_vec(encode_heartbeat);
    frame[4] = 0x50;
    frame[5] = 0xEB;
    let err = decode(&frame).unwrap_err();
    assert_eq!(err, DecodeError::Frame(FrameError::BadEncodingType(0x50EB)));
    assert_eq!(err.reason(), RejectReason::BAD_ENCODING_TYPE);
}

#[test]
fn unknown_template_is_refused_with_its_id() {
    for id in [0u16, 7, 9, 22, 29, 32, 999, u16::MAX] {
        let mut frame = encode_to_vec(encode_heartbeat);
        patch_header(&mut frame, 2, id);
        let err = decode(&frame).unwrap_err();
        assert_eq!(err, DecodeError::UnknownTemplate(id));
        assert_eq!(err.reason(), RejectReason::UNKNOWN_TEMPLATE);
        assert_eq!(err.template_id(), id);
    }
}

#[test]
fn unknown_schema_id_is_refused() {
    let mut frame = encode_to_vec(encode_heartbeat);
    patch_header(&mut frame, 4, 0x1234);
    let err = decode(&frame).unwrap_err();
    assert_eq!(err, DecodeError::UnknownSchema(0x1234));
    assert_eq!(err.reason(), RejectReason::UNKNOWN_SCHEMA);
}

#[test]
fn version_below_minimum_is_unsupported() {
    let mut frame = encode_to_vec(encode_heartbeat);
    patch_header(&mut frame, 6, 0);
    let err = decode(&frame).unwrap_err();
    assert_eq!(err, DecodeError::UnsupportedVersion(0));
    assert_eq!(err.reason(), RejectReason::UNSUPPORTED_VERSION);
}

#[test]
fn newer_version_with_a_longer_root_block_is_accepted() {
    let mut slot = [0u8; PRICE_FRAME_LEN];
    encode_update(&mut slot, &sample_price());
    // A newer sender appends 6 bytes of new fields to the root block.
    let mut frame = with_len(slot.to_vec(), PRICE_FRAME_LEN + 6);
    frame[PRICE_FRAME_LEN..].copy_from_slice(&[0xAB; 6]);
    patch_header(&mut frame, 0, PriceBody::BLOCK_LENGTH + 6);
    patch_header(&mut frame, 6, VERSION + 1);
    assert_eq!(decode(&frame), Ok(Message::PriceUpdate(sample_price())));
}

#[test]
fn longer_root_block_before_var_data_is_skipped() {
    let frame = encode_to_vec(|b| {
        encode_reject(
            b,
            &Reject {
                request_id: 9,
                ref_template_id: template::SNAPSHOT_REQUEST,
                reason: RejectReason::OVERLOADED,
                retry_after_ms: 250,
                text: b"busy",
            },
        )
    });
    // Insert 3 unknown bytes at the end of the root block.
    let root_end = HEADER_LEN + 16;
    let mut longer = frame[..root_end].to_vec();
    longer.extend_from_slice(&[1, 2, 3]);
    longer.extend_from_slice(&frame[root_end..]);
    let mut longer = with_len(longer.clone(), longer.len());
    patch_header(&mut longer, 0, 19);
    let Ok(Message::Reject(r)) = decode(&longer) else {
        panic!("not a reject")
    };
    assert_eq!(
        (r.request_id, r.reason, r.retry_after_ms, r.text),
        (9, RejectReason::OVERLOADED, 250, &b"busy"[..])
    );
}

#[test]
fn longer_group_entries_and_trailing_parts_are_skipped() {
    let quote = QuoteEntry {
        symbol_id: 2,
        flags: quote_flags::INDICATIVE,
        bid: 1,
        ask: 2,
        bid_size: 3,
        ask_size: 4,
        provider_time_ns: 5,
    };
    // A newer provider sends 45-byte entries (2 new bytes each) and a new
    // trailing var data field.
    let mut frame = encode_to_vec(|b| encode_provider_quote(b, [quote]))[..HEADER_LEN].to_vec();
    frame.extend_from_slice(&45u16.to_le_bytes());
    frame.extend_from_slice(&2u16.to_le_bytes());
    for _ in 0..2 {
        let mut entry = [0u8; 45];
        quote.write(&mut entry);
        entry[43..].copy_from_slice(&[0xEE, 0xEE]);
        frame.extend_from_slice(&entry);
    }
    frame.extend_from_slice(&[3, b'n', b'e', b'w']);
    let frame = with_len(frame.clone(), frame.len());
    let Ok(Message::ProviderQuote(q)) = decode(&frame) else {
        panic!("not a provider quote")
    };
    assert_eq!(q.quotes.collect::<Vec<_>>(), [quote, quote]);
}

#[test]
fn short_root_block_is_malformed() {
    let mut slot = [0u8; PRICE_FRAME_LEN];
    encode_update(&mut slot, &sample_price());
    let mut frame = with_len(slot.to_vec(), PRICE_FRAME_LEN - 1);
    patch_header(&mut frame, 0, PriceBody::BLOCK_LENGTH - 1);
    let err = decode(&frame).unwrap_err();
    assert_eq!(
        err,
        DecodeError::ShortBlock {
            template_id: template::PRICE_UPDATE,
            block_length: 61,
            required: 62
        }
    );
    assert_eq!(err.reason(), RejectReason::MALFORMED);
}

#[test]
fn root_block_longer_than_the_frame_is_truncated() {
    let mut frame = encode_to_vec(|b| {
        encode_logon_rejected(
            b,
            &LogonRejected {
                reason: LogonRejectReason::BUSY,
                retry_after_ms: 1,
            },
        )
    });
    patch_header(&mut frame, 0, 200);
    assert!(matches!(
        decode(&frame),
        Err(DecodeError::Truncated {
            part: "root block",
            ..
        })
    ));
}

#[test]
fn short_group_entries_are_malformed() {
    let mut frame = encode_to_vec(|b| encode_subscribe(b, 1, 0, [SymbolRef::by_id(1)]));
    let group_at = HEADER_LEN + 9;
    frame[group_at..group_at + 2].copy_from_slice(&17u16.to_le_bytes());
    let err = decode(&frame).unwrap_err();
    assert_eq!(
        err,
        DecodeError::ShortGroupBlock {
            template_id: template::SUBSCRIBE,
            block_length: 17,
            required: 18
        }
    );
    assert_eq!(err.reason(), RejectReason::MALFORMED);
}

#[test]
fn truncated_group_is_malformed() {
    let frame =
        encode_to_vec(|b| encode_subscribe(b, 1, 0, [SymbolRef::by_id(1), SymbolRef::by_id(2)]));
    // Cut inside the group header and inside the second entry.
    for cut in [HEADER_LEN + 9 + 2, frame.len() - 1] {
        let short = with_len(frame[..cut].to_vec(), cut);
        let err = decode(&short).unwrap_err();
        assert_eq!(
            err,
            DecodeError::Truncated {
                template_id: template::SUBSCRIBE,
                part: "entries"
            },
            "cut at {cut}"
        );
        assert_eq!(err.reason(), RejectReason::MALFORMED);
    }
    // A count larger than the bytes present.
    let mut lying = frame.clone();
    let count_at = HEADER_LEN + 9 + 2;
    lying[count_at..count_at + 2].copy_from_slice(&3u16.to_le_bytes());
    assert!(matches!(decode(&lying), Err(DecodeError::Truncated { .. })));
}

#[test]
fn truncated_var_data_is_malformed() {
    let logon = Logon {
        heartbeat_interval_ms: 1000,
        account: b"demo",
        token: b"secret",
    };
    let frame = encode_to_vec(|b| encode_logon(b, &logon));
    let token_len_at = HEADER_LEN + 4 + 1 + 4;
    for cut in [HEADER_LEN + 4, token_len_at, frame.len() - 1] {
        let short = with_len(frame[..cut].to_vec(), cut);
        let err = decode(&short).unwrap_err();
        assert!(
            matches!(err, DecodeError::Truncated { template_id: 1, .. }),
            "cut at {cut}: {err}"
        );
        assert_eq!(err.reason(), RejectReason::MALFORMED);
    }
}

#[test]
fn reject_reasons_are_distinct_and_named() {
    let mut codes: Vec<u16> = RejectReason::ALL.iter().map(|(r, _)| r.0).collect();
    codes.sort_unstable();
    codes.dedup();
    assert_eq!(codes.len(), RejectReason::ALL.len());
    assert_eq!(RejectReason::RATE_LIMITED.to_string(), "rate_limited");
    assert_eq!(RejectReason(999).to_string(), "unknown(999)");
    assert!(!RejectReason(999).is_known());
}

#[test]
fn unknown_enum_values_decode_and_re_encode_unchanged() {
    let frame = encode_to_vec(|b| {
        encode_disconnect(
            b,
            &Disconnect {
                reason: DisconnectReason(200),
                retry_after_ms: 5,
                text: b"",
            },
        )
    });
    let msg = decode(&frame).unwrap();
    let Message::Disconnect(d) = msg else {
        panic!("not a disconnect")
    };
    assert_eq!(d.reason, DisconnectReason(200));
    assert_eq!(encode_to_vec(|b| msg.encode(b)), frame);
}

#[test]
fn provider_quote_maps_onto_a_tick() {
    let q = QuoteEntry {
        symbol_id: 7,
        flags: quote_flags::INDICATIVE,
        bid: 10,
        ask: 12,
        bid_size: 1,
        ask_size: 2,
        provider_time_ns: 99,
    };
    let t = q.to_tick(3, 1_000, 17);
    assert_eq!(
        (
            t.symbol,
            t.provider,
            t.bid,
            t.ask,
            t.receive_time_ns,
            t.feed_seq
        ),
        (7, 3, 10, 12, 1_000, 17)
    );
    assert_eq!(t.flags, crate::model::tick_flags::INDICATIVE);
}

#[test]
fn annotate_walks_every_byte_of_a_group_message() {
    let frame = encode_to_vec(|b| encode_history_response(b, 1, 2, 5, [HistoryTick::default(); 2]));
    let dump = annotate(&frame).unwrap();
    let bytes_shown: usize = dump
        .lines()
        .map(|l| {
            l.get(6..l.len().min(53))
                .unwrap_or("")
                .split_whitespace()
                .count()
        })
        .sum();
    assert_eq!(bytes_shown, frame.len());
    assert!(dump.contains("ticks[1].providerTimeNs = 0"));
}

#[test]
fn every_template_in_the_schema_table_decodes_to_its_own_variant() {
    for spec in spec::MESSAGES {
        // Minimal frame: zeroed root, empty groups, empty var data.
        let mut frame = frame_header_bytes(spec.template_id, spec.root.block_length);
        frame.resize(frame.len() + spec.root.block_length as usize, 0);
        for g in spec.groups {
            frame.extend_from_slice(&g.entry.block_length.to_le_bytes());
            frame.extend_from_slice(&0u16.to_le_bytes());
        }
        frame.resize(frame.len() + spec.data.len(), 0);
        let frame = with_len(frame.clone(), frame.len());
        let msg = decode(&frame).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        assert_eq!(msg.template_id(), spec.template_id, "{}", spec.name);
        assert_eq!(msg.sent_by(), spec.sent_by, "{}", spec.name);
        assert_eq!(encode_to_vec(|b| msg.encode(b)), frame, "{}", spec.name);
    }
}

fn frame_header_bytes(template_id: u16, block_length: u16) -> Vec<u8> {
    let mut v = vec![0, 0, 0, 0, 0xEB, 0x50];
    for x in [block_length, template_id, SCHEMA_ID, VERSION] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    v
}
