//! Property tests of the wire codec through its public API: every message
//! round-trips encode → split → decode → encode byte-exactly, and no input
//! makes `split` or `decode` panic.

use pricewire::wire::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::collection::vec;
use proptest::prelude::*;

fn name16() -> impl Strategy<Value = Name16> {
    "[A-Z0-9._]{0,16}".prop_map(|s| Name16::new(&s).expect("generated names fit"))
}

fn bytes255() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=255)
}

fn price_body() -> impl Strategy<Value = PriceBody> {
    (
        (
            any::<u16>(),
            any::<u8>(),
            any::<u8>(),
            0u8..=9,
            any::<u8>(),
            any::<u64>(),
        ),
        (
            any::<i64>(),
            any::<i64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (symbol_id, tier, flags, digits, providers, seq),
                (bid, ask, bid_size, ask_size, pt, et),
            )| PriceBody {
                symbol_id,
                tier,
                flags,
                digits,
                providers,
                seq,
                bid,
                ask,
                bid_size,
                ask_size,
                provider_time_ns: pt,
                engine_time_ns: et,
            },
        )
}

fn symbol_ref() -> impl Strategy<Value = SymbolRef> {
    (any::<u16>(), name16()).prop_map(|(symbol_id, name)| SymbolRef { symbol_id, name })
}

fn history_tick() -> impl Strategy<Value = HistoryTick> {
    (
        any::<u16>(),
        any::<i64>(),
        any::<i64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(
            |(provider, bid, ask, bid_size, ask_size, provider_time_ns)| HistoryTick {
                provider,
                bid,
                ask,
                bid_size,
                ask_size,
                provider_time_ns,
            },
        )
}

fn quote() -> impl Strategy<Value = QuoteEntry> {
    (
        any::<u16>(),
        any::<u8>(),
        any::<i64>(),
        any::<i64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(
            |(symbol_id, flags, bid, ask, bid_size, ask_size, provider_time_ns)| QuoteEntry {
                symbol_id,
                flags,
                bid,
                ask,
                bid_size,
                ask_size,
                provider_time_ns,
            },
        )
}

fn session_message() -> impl Strategy<Value = OwnedMessage> {
    prop_oneof![
        (any::<u32>(), bytes255(), bytes255()).prop_map(
            |(heartbeat_interval_ms, account, token)| {
                OwnedMessage::Logon {
                    heartbeat_interval_ms,
                    account,
                    token,
                }
            }
        ),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<u8>(),
            any::<u64>()
        )
            .prop_map(|(session_id, hb, t, default_tier, stream_id)| {
                OwnedMessage::LogonAccepted(LogonAccepted {
                    session_id,
                    heartbeat_interval_ms: hb,
                    server_time_ns: t,
                    default_tier,
                    stream_id,
                })
            }),
        (any::<u8>(), any::<u32>()).prop_map(|(r, retry_after_ms)| OwnedMessage::LogonRejected(
            LogonRejected {
                reason: LogonRejectReason(r),
                retry_after_ms,
            }
        )),
        Just(OwnedMessage::Heartbeat),
        Just(OwnedMessage::Logout),
        (any::<u8>(), any::<u32>(), bytes255()).prop_map(|(r, retry_after_ms, text)| {
            OwnedMessage::Disconnect {
                reason: DisconnectReason(r),
                retry_after_ms,
                text,
            }
        }),
        (
            any::<u64>(),
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            bytes255()
        )
            .prop_map(|(request_id, ref_template_id, r, retry_after_ms, text)| {
                OwnedMessage::Reject {
                    request_id,
                    ref_template_id,
                    reason: RejectReason(r),
                    retry_after_ms,
                    text,
                }
            }),
        (any::<u16>(), bytes255())
            .prop_map(|(provider_id, token)| OwnedMessage::ProviderLogon { provider_id, token }),
        vec(quote(), 0..20).prop_map(|quotes| OwnedMessage::ProviderQuote { quotes }),
    ]
}

/// The symbol directory request and answer.
fn directory_message() -> impl Strategy<Value = OwnedMessage> {
    prop_oneof![
        (any::<u64>(), any::<u32>(), any::<bool>()).prop_map(
            |(request_id, budget_us, critical)| {
                OwnedMessage::SymbolListRequest(SymbolListRequest {
                    request_id,
                    budget_us,
                    critical,
                })
            }
        ),
        (
            any::<u64>(),
            vec((any::<u16>(), any::<u8>(), name16()), 0..20),
            vec((any::<u8>(), name16()), 0..5)
        )
            .prop_map(|(request_id, s, t)| OwnedMessage::SymbolDirectory {
                request_id,
                symbols: s
                    .into_iter()
                    .map(|(symbol_id, digits, name)| SymbolInfo {
                        symbol_id,
                        digits,
                        name
                    })
                    .collect(),
                tiers: t
                    .into_iter()
                    .map(|(tier_id, name)| TierInfo { tier_id, name })
                    .collect(),
            }),
    ]
}

/// Subscriptions, their answers and the streamed prices.
fn stream_message() -> impl Strategy<Value = OwnedMessage> {
    prop_oneof![
        (
            any::<u64>(),
            any::<u8>(),
            vec(symbol_ref(), 0..20),
            any::<bool>()
        )
            .prop_map(|(request_id, tier, entries, unsubscribe)| if unsubscribe {
                OwnedMessage::Unsubscribe {
                    request_id,
                    tier,
                    entries,
                }
            } else {
                OwnedMessage::Subscribe {
                    request_id,
                    tier,
                    entries,
                }
            }),
        (
            any::<u64>(),
            vec((any::<u16>(), name16(), any::<u8>()), 0..20)
        )
            .prop_map(|(request_id, r)| {
                OwnedMessage::SubscribeResponse {
                    request_id,
                    results: r
                        .into_iter()
                        .map(|(symbol_id, name, s)| SubscribeResult {
                            symbol_id,
                            name,
                            status: SubscribeStatus(s),
                        })
                        .collect(),
                }
            }),
        (price_body(), any::<u64>()).prop_map(|(body, stream_id)| OwnedMessage::PriceSnapshot(
            PriceSnapshot { body, stream_id }
        )),
        price_body().prop_map(OwnedMessage::PriceUpdate),
    ]
}

/// Snapshot and history requests and their answers.
fn request_message() -> impl Strategy<Value = OwnedMessage> {
    prop_oneof![
        (
            any::<u64>(),
            any::<u32>(),
            any::<bool>(),
            any::<u8>(),
            vec(any::<u16>(), 0..50)
        )
            .prop_map(|(request_id, budget_us, critical, tier, symbols)| {
                OwnedMessage::SnapshotRequest {
                    request_id,
                    budget_us,
                    critical,
                    tier,
                    symbols,
                }
            }),
        (any::<u64>(), vec(price_body(), 0..20))
            .prop_map(|(request_id, prices)| OwnedMessage::SnapshotResponse { request_id, prices }),
        (
            any::<u64>(),
            any::<u32>(),
            any::<bool>(),
            any::<u16>(),
            any::<u16>()
        )
            .prop_map(|(request_id, budget_us, critical, symbol_id, count)| {
                OwnedMessage::HistoryRequest(HistoryRequest {
                    request_id,
                    budget_us,
                    critical,
                    symbol_id,
                    count,
                })
            }),
        (
            any::<u64>(),
            any::<u16>(),
            any::<u8>(),
            vec(history_tick(), 0..20)
        )
            .prop_map(|(request_id, symbol_id, digits, ticks)| {
                OwnedMessage::HistoryResponse {
                    request_id,
                    symbol_id,
                    digits,
                    ticks,
                }
            }),
    ]
}

/// Weighted by arm count (2, 4 and 4), so every message is as likely as
/// when the ten arms were one union.
fn data_message() -> impl Strategy<Value = OwnedMessage> {
    prop_oneof![
        2 => directory_message(),
        4 => stream_message(),
        4 => request_message()
    ]
}

fn message() -> impl Strategy<Value = OwnedMessage> {
    prop_oneof![session_message(), data_message()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_message_round_trips(msg in message()) {
        let mut buf = vec![0u8; SERVER_FRAME_LEN_MAX];
        let n = msg.encode(&mut buf).expect("encodes");
        prop_assert_eq!(split_with_max(&buf[..n], SERVER_FRAME_LEN_MAX), Ok(Some(n)));
        let decoded = decode(&buf[..n]).expect("decodes");
        prop_assert_eq!(&decoded.to_owned_message(), &msg);
        // The borrowed view re-encodes to the same bytes.
        let mut again = vec![0u8; n];
        prop_assert_eq!(decoded.encode(&mut again), Ok(n));
        prop_assert_eq!(&again[..], &buf[..n]);
        // The schema table (which drives the docs and the XML check) walks
        // exactly the bytes the encoder wrote.
        let dump = annotate(&buf[..n]).expect("annotates");
        let shown: usize = dump.lines().map(|l| l.get(6..l.len().min(53)).unwrap_or("").split_whitespace().count()).sum();
        prop_assert_eq!(shown, n);
        prop_assert!(!dump.contains("skipped"));
        // One byte less of buffer is refused, never a partial frame.
        let short = msg.encode(&mut again[..n - 1]);
        prop_assert!(matches!(short, Err(EncodeError::BufferTooSmall { .. })), "short buffer gave {:?}", short);
    }

    #[test]
    fn decode_and_split_never_panic_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..300)) {
        let _ = split(&bytes);
        let _ = split_with_max(&bytes, 20);
        if let Ok(msg) = decode(&bytes) {
            // A successful decode yields a view that is safe to walk.
            let mut buf = vec![0u8; bytes.len() + 64];
            let _ = msg.encode(&mut buf);
            let _ = msg.to_owned_message();
        }
    }

    #[test]
    fn decode_never_panics_on_mutated_valid_frames(
        msg in message(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut buf = vec![0u8; SERVER_FRAME_LEN_MAX];
        let n = msg.encode(&mut buf).expect("encodes");
        let mut frame = buf[..n].to_vec();
        for (at, value) in flips {
            let i = at.index(frame.len());
            frame[i] = value;
        }
        frame.truncate(cut.index(frame.len() + 1).max(1));
        let _ = split(&frame);
        if let Ok(m) = decode(&frame) {
            // Whatever decodes re-encodes to a frame that decodes the same.
            let mut again = vec![0u8; SERVER_FRAME_LEN_MAX];
            let n = m.encode(&mut again).expect("a decoded message re-encodes");
            prop_assert_eq!(decode(&again[..n]).map(|d| d.to_owned_message()), Ok(m.to_owned_message()));
            prop_assert!(annotate(&frame).is_ok());
        }
    }
}

/// Counts allocations per thread, so tests running in parallel do not
/// disturb each other's counts.
struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call unchanged to the system allocator; the
// thread-local counter is const-initialised and has no destructor, so
// touching it cannot allocate or recurse.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn split_decode_and_encode_do_not_allocate() {
    let prices: Vec<PriceBody> = (0..10u16)
        .map(|s| PriceBody {
            symbol_id: s,
            seq: 1,
            ..PriceBody::default()
        })
        .collect();
    let mut buf = vec![0u8; 4096];
    let mut slot = [0u8; PRICE_FRAME_LEN];
    let before = allocations();
    let mut total = 0i64;
    for round in 0..100u64 {
        let n = encode_snapshot_response(&mut buf, round, &prices).expect("fits");
        let m = encode_subscribe_names(
            &mut buf[n..],
            round,
            TIER_ACCOUNT_DEFAULT,
            ["EURUSD", "XAUUSD"],
        )
        .expect("fits");
        let p = encode_update(&mut slot, &prices[0]);
        let mut rest = &buf[..n + m];
        while let Ok(Some(len)) = split(rest) {
            match decode(&rest[..len]) {
                Ok(Message::SnapshotResponse(r)) => total += r.prices.map(|p| p.bid).sum::<i64>(),
                Ok(Message::Subscribe(s)) => total += s.entries.count() as i64,
                _ => panic!("unexpected message"),
            }
            rest = &rest[len..];
        }
        if let Ok(Message::PriceUpdate(b)) = decode(&slot[..p]) {
            total += i64::from(b.symbol_id);
        }
    }
    assert_eq!(allocations() - before, 0, "the codec allocated");
    assert_eq!(total, 100 * 2);
}
