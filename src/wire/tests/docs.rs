//! Keeps `docs/protocol.md` honest: its layout tables, enum tables and hex
//! dumps are generated from the code and compared here. After a deliberate
//! change, regenerate them with
//! `PRICEWIRE_BLESS=1 cargo test --lib wire::tests::docs`.

use std::collections::BTreeMap;

use crate::model::price_flags;
use crate::wire::codes::{PRICE_FLAG_NAMES, QUOTE_FLAG_NAMES};
use crate::wire::spec::{camel_case, BlockSpec, MESSAGES};
use crate::wire::*;

const DOC_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/protocol.md");

fn frame(f: impl FnOnce(&mut [u8]) -> Result<usize, EncodeError>) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let n = f(&mut buf).expect("example encodes");
    buf.truncate(n);
    buf
}

fn name(s: &str) -> Name16 {
    Name16::new(s).expect("example name")
}

/// 2026-11-29 10:00:00 UTC in ns, the timestamp used in all examples.
const T0_NS: u64 = 1_764_410_400_000_000_000;
/// The stream id of the examples: any nonzero value a server picked.
const EXAMPLE_STREAM_ID: u64 = 0x7a3f_9c21_5e80_d4b6;

/// The worked examples of the protocol document, from the real encoders.
/// They tell one story on the built-in configuration (`pricewire serve`
/// without `--config`): account `demo`, EURUSD = 0, USDJPY = 2, default
/// tier 1 (`standard`, ±5 points on the raw price). The Python suite
/// checks the story against the running server.
pub(crate) fn examples() -> Vec<(&'static str, Vec<u8>)> {
    let mut v = session_examples();
    v.extend(request_examples());
    v
}

/// EURUSD at tier 1 (standard): raw 1.08123/1.08126 widened by 5 points.
fn eurusd() -> PriceBody {
    PriceBody {
        symbol_id: 0,
        tier: 1,
        flags: price_flags::SINGLE_PROVIDER,
        digits: 5,
        providers: 1,
        seq: 1,
        bid: 108_118,
        ask: 108_131,
        bid_size: 1_000_000,
        ask_size: 500_000,
        provider_time_ns: T0_NS,
        engine_time_ns: T0_NS + 35_000,
    }
}

fn session_examples() -> Vec<(&'static str, Vec<u8>)> {
    let logon = Logon {
        heartbeat_interval_ms: 1000,
        account: b"demo",
        token: b"demo",
    };
    let accepted = LogonAccepted {
        session_id: 77,
        heartbeat_interval_ms: 1000,
        server_time_ns: T0_NS,
        default_tier: 1,
        stream_id: EXAMPLE_STREAM_ID,
    };
    let rejected = LogonRejected {
        reason: LogonRejectReason::BUSY,
        retry_after_ms: 2_350,
    };
    let disconnect =
        |b: &mut [u8]| encode_disconnect_reason(b, DisconnectReason::SHUTDOWN, 4_200, "restart");
    vec![
        ("logon", frame(|b| encode_logon(b, &logon))),
        (
            "logon_accepted",
            frame(|b| encode_logon_accepted(b, &accepted)),
        ),
        (
            "logon_rejected",
            frame(|b| encode_logon_rejected(b, &rejected)),
        ),
        ("heartbeat", frame(encode_heartbeat)),
        ("logout", frame(encode_logout)),
        ("disconnect", frame(disconnect)),
    ]
}

fn subscribe_examples() -> Vec<(&'static str, Vec<u8>)> {
    let by_name = SymbolRef::by_name("EURUSD").expect("name");
    let refs = [by_name, SymbolRef::by_id(2), SymbolRef::by_id(99)];
    let result = |symbol_id, n: &str, status| SubscribeResult {
        symbol_id,
        name: name(n),
        status,
    };
    let results = [
        result(0, "EURUSD", SubscribeStatus::OK),
        result(2, "USDJPY", SubscribeStatus::OK),
        result(99, "", SubscribeStatus::UNKNOWN_SYMBOL),
    ];
    let update = PriceBody {
        seq: 2,
        bid: 108_119,
        provider_time_ns: T0_NS + 250_000_000,
        engine_time_ns: T0_NS + 250_031_000,
        ..eurusd()
    };
    let unsub = [SymbolRef::by_id(2)];
    vec![
        (
            "subscribe",
            frame(|b| encode_subscribe(b, 2, TIER_ACCOUNT_DEFAULT, refs)),
        ),
        (
            "subscribe_response",
            frame(|b| encode_subscribe_response(b, 2, results)),
        ),
        (
            "price_snapshot",
            frame(|b| try_encode_price(b, PriceKind::Snapshot, &eurusd(), EXAMPLE_STREAM_ID)),
        ),
        (
            "price_update",
            frame(|b| try_encode_price(b, PriceKind::Update, &update, 0)),
        ),
        (
            "unsubscribe",
            frame(|b| encode_unsubscribe(b, 4, TIER_ACCOUNT_DEFAULT, unsub)),
        ),
        (
            "unsubscribe_response",
            frame(|b| encode_subscribe_response(b, 4, [result(2, "USDJPY", SubscribeStatus::OK)])),
        ),
    ]
}

fn request_examples() -> Vec<(&'static str, Vec<u8>)> {
    let list = SymbolListRequest {
        request_id: 1,
        budget_us: 0,
        critical: false,
    };
    let info = |symbol_id, digits, n: &str| SymbolInfo {
        symbol_id,
        digits,
        name: name(n),
    };
    let tier = |tier_id, n: &str| TierInfo {
        tier_id,
        name: name(n),
    };
    let symbols = [
        info(0, 5, "EURUSD"),
        info(2, 3, "USDJPY"),
        info(14, 2, "XAUUSD"),
    ];
    let tiers = [tier(0, "raw"), tier(1, "standard"), tier(2, "retail")];
    let shed = Reject {
        request_id: 3,
        ref_template_id: template::SNAPSHOT_REQUEST,
        reason: RejectReason::OVERLOADED,
        retry_after_ms: 180,
        text: b"shed",
    };
    let mut v = subscribe_examples();
    v.extend([
        (
            "symbol_list_request",
            frame(|b| encode_symbol_list_request(b, &list)),
        ),
        (
            "symbol_directory",
            frame(|b| encode_symbol_directory(b, 1, symbols, tiers)),
        ),
        (
            "snapshot_request",
            frame(|b| {
                encode_snapshot_request(b, 3, 20_000, false, TIER_ACCOUNT_DEFAULT, [0u16, 99])
            }),
        ),
        (
            "snapshot_response",
            frame(|b| encode_snapshot_response(b, 3, [eurusd()])),
        ),
        ("reject", frame(|b| encode_reject(b, &shed))),
    ]);
    v.extend(history_examples());
    v
}

fn history_examples() -> Vec<(&'static str, Vec<u8>)> {
    let req = HistoryRequest {
        request_id: 5,
        budget_us: 50_000,
        critical: false,
        symbol_id: 0,
        count: 2,
    };
    let tick = |bid, ask, ns| HistoryTick {
        provider: 1,
        bid,
        ask,
        bid_size: 1_000_000,
        ask_size: 1_000_000,
        provider_time_ns: ns,
    };
    let ticks = [
        tick(108_123, 108_126, T0_NS),
        tick(108_124, 108_126, T0_NS + 250_000_000),
    ];
    let quote = QuoteEntry {
        symbol_id: 0,
        flags: 0,
        bid: 108_121,
        ask: 108_127,
        bid_size: 2_000_000,
        ask_size: 1_000_000,
        provider_time_ns: T0_NS,
    };
    vec![
        (
            "history_request",
            frame(|b| encode_history_request(b, &req)),
        ),
        (
            "history_response",
            frame(|b| encode_history_response(b, 5, 0, 5, ticks)),
        ),
        (
            "provider_logon",
            frame(|b| {
                encode_provider_logon(
                    b,
                    &ProviderLogon {
                        provider_id: 2,
                        token: b"demo-feed",
                    },
                )
            }),
        ),
        (
            "provider_quote",
            frame(|b| encode_provider_quote(b, [quote])),
        ),
    ]
}

fn block_table(spec: &BlockSpec, offset_label: &str) -> String {
    let mut out =
        format!("| {offset_label} | Field | Type | Size | Meaning |\n|---:|---|---|---:|---|\n");
    let mut off = 0;
    for f in spec.fields {
        let mut doc = f.doc.split_whitespace().collect::<Vec<_>>().join(" ");
        if f.since_version > 0 {
            doc = format!("*Since version {}.* {doc}", f.since_version);
        }
        let ty = match f.sbe_type {
            "Name16" | "BooleanType" => format!("[{}](#1-conventions)", f.sbe_type),
            t if t.starts_with(char::is_uppercase) => format!("[{t}](#{})", t.to_lowercase()),
            t => t.to_string(),
        };
        out += &format!(
            "| {off} | `{}` | {ty} | {} | {doc} |\n",
            camel_case(f.name),
            f.size
        );
        off += f.size;
    }
    out
}

fn layout(msg: &crate::wire::spec::MessageSpec) -> String {
    let mut out = format!(
        "templateId **{}**, sent by {:?}. ",
        msg.template_id, msg.sent_by
    );
    if msg.root.fields.is_empty() {
        out += "Root block: empty (blockLength 0).\n";
    } else {
        out += &format!(
            "Root block (blockLength {}), offsets from the end of the SBE header (frame offset 14):\n\n",
            msg.root.block_length
        );
        let first = msg.root.block_length_min();
        if first < msg.root.block_length {
            out += &format!(
                "A sender of an earlier version sends the block up to offset {first} (blockLength {first}); the later fields are then absent and read as 0.\n\n"
            );
        }
        out += &block_table(&msg.root, "Offset");
    }
    for g in msg.groups {
        out += &format!(
            "\nGroup `{}`: group header (blockLength = {}, numInGroup), then numInGroup entries of blockLength bytes:\n\n",
            g.name, g.entry.block_length
        );
        out += &block_table(&g.entry, "Entry offset");
    }
    for d in msg.data {
        out += &format!("\nVar data `{d}`: uint8 length, then that many bytes.\n");
    }
    out
}

fn enum_table(all: &[(u64, &str)], docs: &[&str]) -> String {
    let mut out = "| Value | Name | Meaning |\n|---:|---|---|\n".to_string();
    for ((v, n), d) in all.iter().zip(docs) {
        out += &format!("| {v} | `{n}` | {} |\n", d.trim());
    }
    out
}

fn bits_table(names: &[(u8, &str)]) -> String {
    let mut out = "| Bit value | Name |\n|---:|---|\n".to_string();
    for (b, n) in names {
        out += &format!("| {b:#04x} | `{n}` |\n");
    }
    out
}

macro_rules! enum_rows {
    ($ty:ty) => {
        enum_table(
            &<$ty>::ALL
                .iter()
                .map(|(v, n)| (u64::from(v.0), *n))
                .collect::<Vec<_>>(),
            <$ty>::DOCS,
        )
    };
}

/// Every generated section of the document, by key.
fn sections() -> BTreeMap<String, String> {
    let mut s = BTreeMap::new();
    for (key, bytes) in examples() {
        s.insert(
            format!("example:{key}"),
            format!("```text\n{}```\n", annotate(&bytes).unwrap()),
        );
    }
    for m in MESSAGES {
        s.insert(format!("layout:{}", m.name), layout(m));
    }
    let mut templates = "| templateId | Message | Sent by |\n|---:|---|---|\n".to_string();
    for m in MESSAGES {
        templates += &format!(
            "| {} | [{}](#{}) | {:?} |\n",
            m.template_id,
            m.name,
            m.name.to_lowercase(),
            m.sent_by
        );
    }
    s.insert("templates".into(), templates);
    s.insert("enum:RejectReason".into(), enum_rows!(RejectReason));
    s.insert(
        "enum:LogonRejectReason".into(),
        enum_rows!(LogonRejectReason),
    );
    s.insert("enum:DisconnectReason".into(), enum_rows!(DisconnectReason));
    s.insert("enum:SubscribeStatus".into(), enum_rows!(SubscribeStatus));
    s.insert("set:PriceFlags".into(), bits_table(PRICE_FLAG_NAMES));
    s.insert("set:QuoteFlags".into(), bits_table(QUOTE_FLAG_NAMES));
    s
}

const OPEN: &str = "<!-- generated:";
const CLOSE: &str = "<!-- /generated -->";

/// Replaces the body of every generated section; returns the new text and
/// the keys found.
fn regenerate(doc: &str, sections: &BTreeMap<String, String>) -> (String, Vec<String>) {
    let mut out = String::with_capacity(doc.len());
    let mut keys = Vec::new();
    let mut rest = doc;
    while let Some(start) = rest.find(OPEN) {
        let head_end = start + rest[start..].find("-->").expect("unclosed marker") + 3;
        let key = rest[start + OPEN.len()..head_end - 3].trim().to_string();
        let body_end = head_end
            + rest[head_end..]
                .find(CLOSE)
                .unwrap_or_else(|| panic!("no end for {key}"));
        out += &rest[..head_end];
        out += "\n";
        out += sections
            .get(&key)
            .unwrap_or_else(|| panic!("unknown generated section {key}"));
        keys.push(key);
        rest = &rest[body_end..];
    }
    out += rest;
    (out, keys)
}

#[test]
fn protocol_doc_matches_the_code() {
    let doc = std::fs::read_to_string(DOC_PATH).expect("docs/protocol.md");
    let sections = sections();
    let (fresh, keys) = regenerate(&doc, &sections);
    if std::env::var_os("PRICEWIRE_BLESS").is_some() {
        std::fs::write(DOC_PATH, &fresh).expect("write docs/protocol.md");
        return;
    }
    let missing: Vec<_> = sections.keys().filter(|k| !keys.contains(k)).collect();
    assert!(
        missing.is_empty(),
        "docs/protocol.md lacks generated sections {missing:?}"
    );
    if fresh != doc {
        let line = doc
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "docs/protocol.md drifted from the code near line {}; run PRICEWIRE_BLESS=1 cargo test --lib wire::tests::docs",
            line + 1
        );
    }
}

#[test]
fn every_example_decodes_and_every_message_has_a_layout() {
    for (key, bytes) in examples() {
        assert_eq!(
            split_with_max(&bytes, SERVER_FRAME_LEN_MAX),
            Ok(Some(bytes.len())),
            "{key}"
        );
        let msg = decode(&bytes).unwrap_or_else(|e| panic!("{key}: {e}"));
        let mut again = vec![0u8; bytes.len()];
        assert_eq!(msg.encode(&mut again), Ok(bytes.len()), "{key}");
        assert_eq!(again, bytes, "{key}");
    }
    assert_eq!(
        sections()
            .keys()
            .filter(|k| k.starts_with("layout:"))
            .count(),
        MESSAGES.len()
    );
}

const SEEDS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/seeds/frame_decoder");

/// The examples whose layout this version changed, as fuzz seeds.
const SEEDS_OF_THIS_VERSION: [&str; 2] = ["logon_accepted", "price_snapshot"];

#[test]
fn fuzz_seeds_decode_and_include_this_version_s_layouts() {
    let examples = examples();
    for name in SEEDS_OF_THIS_VERSION {
        let path = format!("{SEEDS_DIR}/{name}_v{VERSION}.bin");
        let (_, frame) = examples.iter().find(|(n, _)| *n == name).expect("example");
        if std::env::var_os("PRICEWIRE_BLESS").is_some() {
            std::fs::write(&path, frame).expect("write a fuzz seed");
        }
        let seed =
            std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}; bless to write it"));
        assert_eq!(&seed, frame, "{path} is not this version's {name}");
    }
    for entry in std::fs::read_dir(SEEDS_DIR).expect("seeds") {
        let path = entry.expect("seed").path();
        let bytes = std::fs::read(&path).expect("seed bytes");
        let decoded = decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // The fuzz target re-encodes what decodes into frame + 256 bytes.
        let mut out = vec![0u8; bytes.len() + 256];
        let n = decoded.encode(&mut out).expect("re-encodes");
        assert_eq!(
            decode(&out[..n]).map(|m| m.to_owned_message()),
            Ok(decoded.to_owned_message())
        );
    }
}
