use super::*;
use proptest::prelude::*;

#[test]
fn named_fields_numbers_strings_and_the_nested_error_are_read() {
    let doc = br#" {"type":"io.nats.jetstream.api.v1.pub_ack",
        "error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},
        "seq": 42, "list":["a","b\u00e9\n"], "neg": -3, "f": 1.5e3, "ok": true, "n": null} "#;
    let v = parse(doc).unwrap();
    assert_eq!(v.kind, Kind::Object);
    let e = v.get("error").unwrap();
    assert_eq!(e.get("code").unwrap().as_u64(), Some(400));
    assert_eq!(e.get("err_code").unwrap().as_u64(), Some(10071));
    assert_eq!(
        e.get("description").unwrap().as_str().unwrap(),
        "wrong last sequence: 5"
    );
    assert_eq!(v.get("seq").unwrap().as_u64(), Some(42));
    assert_eq!(v.get("neg").unwrap().as_u64(), None);
    assert_eq!(v.get("f").unwrap().kind, Kind::Number);
    assert_eq!(v.get("ok").unwrap().kind, Kind::Bool);
    assert_eq!(v.get("n").unwrap().kind, Kind::Null);
    assert_eq!(v.get("missing"), None);
    let list: Vec<String> = v
        .get("list")
        .unwrap()
        .items()
        .map(|i| i.as_str().unwrap().into_owned())
        .collect();
    assert_eq!(list, ["a", "bé\n"]);
    assert_eq!(
        v.get("seq").unwrap().items().count(),
        0,
        "a number has no items"
    );
    assert_eq!(
        parse(br#""\ud83d\ude00 \ud800x""#)
            .unwrap()
            .as_str()
            .unwrap(),
        "😀 \u{FFFD}x"
    );
}

#[test]
fn anything_but_strict_json_is_refused_with_where_and_why() {
    for bad in [
        &b""[..],
        b"{",
        b"{\"a\":1,}",
        b"[1,]",
        b"01",
        b"1.",
        b"1e",
        b"-",
        b"tru",
        b"\"a",
        b"\"\\x\"",
        b"\"\\u12\"",
        b"\"\x01\"",
        b"{\"a\" 1}",
        b"{1:2}",
        b"1 2",
        b"\xff",
        b"// c\n1",
    ] {
        assert!(
            parse(bad).is_err(),
            "{:?} accepted",
            String::from_utf8_lossy(bad)
        );
    }
    let deep = [vec![b'['; DEPTH_MAX + 2], vec![b']'; DEPTH_MAX + 2]].concat();
    assert_eq!(parse(&deep).unwrap_err().reason, "nested too deep");
    let ok = [vec![b'['; DEPTH_MAX], vec![b']'; DEPTH_MAX]].concat();
    assert!(parse(&ok).is_ok());
    assert!(parse(b"{\"a\":1}x")
        .unwrap_err()
        .to_string()
        .contains("byte 7"));
}

#[test]
fn the_writer_escapes_strings_and_reads_back() {
    let doc = Writer::object()
        .str("name", "a\"b\\c\n\u{1}")
        .int("max_msgs", -1)
        .bool("allow_direct", true)
        .strs("subjects", &["p.price.>", "x"])
        .end();
    let v = parse(doc.as_bytes()).unwrap();
    assert_eq!(v.get("name").unwrap().as_str().unwrap(), "a\"b\\c\n\u{1}");
    assert_eq!(v.get("allow_direct").unwrap().kind, Kind::Bool);
    assert_eq!(v.get("subjects").unwrap().items().count(), 2);
    assert_eq!(Writer::object().end(), "{}");
}

fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        "[a-z\\\\\"\n]{0,6}".prop_map(|s| Writer::object().str("s", &s).end()),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(","))),
            proptest::collection::vec(("[a-r]{1,3}", inner), 0..4).prop_map(|v| {
                let m: Vec<String> = v.iter().map(|(k, x)| format!("\"{k}\" : {x}")).collect();
                format!("{{ {} }}", m.join(","))
            }),
        ]
    })
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(v) = parse(&bytes) {
            let _ = v.get("a").map(|x| x.as_str());
            for i in v.items() {
                let _ = i.as_u64();
            }
        }
    }

    #[test]
    fn generated_json_is_accepted_and_its_parts_read(text in json_text()) {
        let v = parse(text.as_bytes()).unwrap();
        if let Some(s) = v.get("s") {
            prop_assert!(s.as_str().is_some(), "{}", text);
        }
        for item in v.items() {
            prop_assert!(parse(item.raw).is_ok());
        }
    }

    #[test]
    fn mutated_json_never_panics(text in json_text(), at in 0usize..64, byte in any::<u8>()) {
        let mut b = text.into_bytes();
        if !b.is_empty() {
            let i = at % b.len();
            b[i] = byte;
        }
        if let Ok(v) = parse(&b) {
            let _ = v.get("s").and_then(|s| s.as_str());
            let _ = v.items().count();
        }
    }
}
