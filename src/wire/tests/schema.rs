//! Checks `schema/pricewire-sbe.xml` against the codec: schema id and
//! version, every message's template id, root blockLength, fields (name,
//! type, offset), groups and var data, and every enum and set value.

use roxmltree::{Document, Node};

use crate::wire::codes::{PRICE_FLAG_NAMES, QUOTE_FLAG_NAMES};
use crate::wire::spec::{camel_case, BlockSpec, MESSAGES};
use crate::wire::*;

const SCHEMA_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/pricewire-sbe.xml");

fn attr<'a>(n: Node<'a, '_>, name: &str) -> &'a str {
    n.attribute(name)
        .unwrap_or_else(|| panic!("<{}> lacks {name}", n.tag_name().name()))
}

fn num(n: Node<'_, '_>, name: &str) -> u64 {
    attr(n, name)
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number"))
}

fn children<'a, 'i>(n: Node<'a, 'i>, tag: &'static str) -> impl Iterator<Item = Node<'a, 'i>> {
    n.children()
        .filter(move |c| c.is_element() && c.tag_name().name() == tag)
}

fn check_fields(context: &str, node: Node<'_, '_>, spec: &BlockSpec) {
    let xml: Vec<_> = children(node, "field").collect();
    assert_eq!(xml.len(), spec.fields.len(), "{context}: field count");
    let mut off = 0u64;
    for (x, f) in xml.iter().zip(spec.fields) {
        let what = format!("{context}.{}", f.name);
        assert_eq!(attr(*x, "name"), camel_case(f.name), "{what}: name");
        assert_eq!(attr(*x, "type"), f.sbe_type, "{what}: type");
        assert_eq!(num(*x, "offset"), off, "{what}: offset");
        let since = x
            .attribute("sinceVersion")
            .map_or(0, |v| v.parse().expect("number"));
        assert_eq!(since, f.since_version, "{what}: sinceVersion");
        off += f.size as u64;
    }
    // Fields a later version added come after every first-version field.
    let base = spec.fields.iter().take_while(|f| f.since_version == 0);
    let later = &spec.fields[base.clone().count()..];
    assert!(
        later.iter().all(|f| f.since_version > 0),
        "{context}: a later field before a first-version one"
    );
    assert_eq!(
        off,
        u64::from(spec.block_length),
        "{context}: fields fill the block"
    );
}

#[test]
fn schema_header_matches_the_code() {
    let text = std::fs::read_to_string(SCHEMA_PATH).expect("schema file");
    let doc = Document::parse(&text).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "messageSchema");
    assert_eq!(num(root, "id"), u64::from(SCHEMA_ID));
    assert_eq!(num(root, "version"), u64::from(VERSION));
    assert_eq!(attr(root, "byteOrder"), "littleEndian");
}

#[test]
fn schema_messages_match_the_code() {
    let text = std::fs::read_to_string(SCHEMA_PATH).expect("schema file");
    let doc = Document::parse(&text).expect("well-formed XML");
    let messages: Vec<_> = children(doc.root_element(), "message").collect();
    assert_eq!(messages.len(), MESSAGES.len(), "message count");
    for spec in MESSAGES {
        let x = messages
            .iter()
            .find(|m| attr(**m, "name") == spec.name)
            .unwrap_or_else(|| panic!("{} missing from the schema", spec.name));
        assert_eq!(
            num(*x, "id"),
            u64::from(spec.template_id),
            "{}: template id",
            spec.name
        );
        assert_eq!(
            num(*x, "blockLength"),
            u64::from(spec.root.block_length),
            "{}: blockLength",
            spec.name
        );
        check_fields(spec.name, *x, &spec.root);
        let groups: Vec<_> = children(*x, "group").collect();
        assert_eq!(groups.len(), spec.groups.len(), "{}: groups", spec.name);
        for (g, gs) in groups.iter().zip(spec.groups) {
            let context = format!("{}.{}", spec.name, gs.name);
            assert_eq!(attr(*g, "name"), gs.name, "{context}: name");
            assert_eq!(attr(*g, "dimensionType"), "groupSizeEncoding");
            assert_eq!(
                num(*g, "blockLength"),
                u64::from(gs.entry.block_length),
                "{context}: blockLength"
            );
            check_fields(&context, *g, &gs.entry);
        }
        let data: Vec<_> = children(*x, "data").map(|d| attr(d, "name")).collect();
        assert_eq!(data, spec.data, "{}: var data", spec.name);
    }
}

fn xml_values(doc: &Document<'_>, kind: &str, name: &str) -> Vec<(u64, String)> {
    let types = children(doc.root_element(), "types")
        .next()
        .expect("<types>");
    let node = children(types, if kind == "set" { "set" } else { "enum" })
        .find(|n| attr(*n, "name") == name)
        .unwrap_or_else(|| panic!("{kind} {name} missing"));
    let tag = if kind == "set" {
        "choice"
    } else {
        "validValue"
    };
    children(node, tag)
        .map(|v| {
            let value: u64 = v
                .text()
                .unwrap_or("")
                .trim()
                .parse()
                .expect("numeric value");
            (value, attr(v, "name").to_string())
        })
        .collect()
}

macro_rules! code_values {
    ($ty:ty) => {
        <$ty>::ALL
            .iter()
            .map(|(v, n)| (u64::from(v.0), n.to_string()))
            .collect::<Vec<_>>()
    };
}

#[test]
fn schema_enums_and_sets_match_the_code() {
    let text = std::fs::read_to_string(SCHEMA_PATH).expect("schema file");
    let doc = Document::parse(&text).expect("well-formed XML");
    assert_eq!(
        xml_values(&doc, "enum", "RejectReason"),
        code_values!(RejectReason)
    );
    assert_eq!(
        xml_values(&doc, "enum", "LogonRejectReason"),
        code_values!(LogonRejectReason)
    );
    assert_eq!(
        xml_values(&doc, "enum", "DisconnectReason"),
        code_values!(DisconnectReason)
    );
    assert_eq!(
        xml_values(&doc, "enum", "SubscribeStatus"),
        code_values!(SubscribeStatus)
    );
    // Set choices are bit positions.
    let bits = |names: &[(u8, &str)]| -> Vec<(u64, String)> {
        names
            .iter()
            .map(|(b, n)| (u64::from(b.trailing_zeros()), n.to_string()))
            .collect()
    };
    assert_eq!(
        xml_values(&doc, "set", "PriceFlags"),
        bits(PRICE_FLAG_NAMES)
    );
    assert_eq!(
        xml_values(&doc, "set", "QuoteFlags"),
        bits(QUOTE_FLAG_NAMES)
    );
}
