use super::*;
use proptest::prelude::*;

const MAX: usize = 1 << 20;

fn one(bytes: &[u8]) -> Result<Option<(Op<'_>, usize)>, ProtoError> {
    parse(bytes, MAX)
}

#[test]
fn every_server_op_parses_with_what_it_consumed() {
    let (op, n) = one(b"PING\r\nrest").unwrap().unwrap();
    assert_eq!((op, n), (Op::Ping, 6));
    assert_eq!(one(b"pong\r\n").unwrap().unwrap().0, Op::Pong);
    assert_eq!(one(b"+OK\r\n").unwrap().unwrap().0, Op::Ok);
    let err = one(b"-ERR 'Stale Connection'\r\n").unwrap().unwrap().0;
    assert_eq!(err, Op::Err(b"'Stale Connection'"));
    let info = one(b"INFO {\"max_payload\":1024}\r\n").unwrap().unwrap().0;
    assert_eq!(info, Op::Info(b"{\"max_payload\":1024}"));
    let (op, n) = one(b"MSG a.b 7 5\r\nhello\r\n").unwrap().unwrap();
    let Op::Msg(m) = op else { panic!("{op:?}") };
    assert_eq!(
        (m.subject, m.sid, m.reply, m.payload),
        (&b"a.b"[..], 7, None, &b"hello"[..])
    );
    assert_eq!(n, 20);
    let (op, _) = one(b"MSG a 1 _INBOX.x.1 0\r\n\r\n").unwrap().unwrap();
    let Op::Msg(m) = op else { panic!("{op:?}") };
    assert_eq!((m.reply, m.payload), (Some(&b"_INBOX.x.1"[..]), &b""[..]));
}

#[test]
fn hmsg_splits_headers_from_payload_and_reads_status_and_fields() {
    let hdr = b"NATS/1.0\r\nNats-Sequence: 42\r\nKV-Operation: DEL\r\n\r\n";
    let wire = [
        format!("HMSG s 3 r {} {}\r\n", hdr.len(), hdr.len() + 2).as_bytes(),
        hdr,
        b"hi\r\n",
    ]
    .concat();
    let (op, n) = one(&wire).unwrap().unwrap();
    assert_eq!(n, wire.len());
    let Op::Msg(m) = op else { panic!("{op:?}") };
    assert_eq!((m.headers, m.payload), (&hdr[..], &b"hi"[..]));
    assert_eq!(header(m.headers, "nats-sequence"), Some(&b"42"[..]));
    assert_eq!(header(m.headers, "KV-Operation"), Some(&b"DEL"[..]));
    assert_eq!(header(m.headers, "Nope"), None);
    assert_eq!(header_status(m.headers), None);
    assert_eq!(
        header_status(b"NATS/1.0 404 Message Not Found\r\n\r\n"),
        Some(404)
    );
    assert_eq!(header_status(b"NATS/1.0 503\r\n\r\n"), Some(503));
}

#[test]
fn incomplete_ops_wait_and_bad_ones_are_refused_with_a_reason() {
    assert_eq!(one(b"PI").unwrap(), None);
    assert_eq!(one(b"MSG a 1 5\r\nhel").unwrap(), None);
    assert_eq!(one(b"MSG a 1 5\r\nhello\r").unwrap(), None);
    let refused = |b: &[u8]| one(b).unwrap_err();
    assert_eq!(refused(b"NOPE\r\n"), ProtoError::UnknownOp);
    assert_eq!(
        refused(b"MSG a 1\r\n"),
        ProtoError::Malformed("wrong number of arguments")
    );
    assert_eq!(
        refused(b"MSG a x 1\r\nh\r\n"),
        ProtoError::Malformed("sid is not a number")
    );
    assert_eq!(
        refused(b"MSG a 1 -1\r\n"),
        ProtoError::Malformed("length is not a number")
    );
    assert_eq!(
        refused(b"MSG a 1 2\r\nhixx"),
        ProtoError::Malformed("payload not followed by CRLF")
    );
    assert_eq!(
        refused(b"HMSG a 1 3 2\r\n"),
        ProtoError::Malformed("header size over total size")
    );
    assert_eq!(
        refused(b"HMSG a 1 2 2\r\nXX\r\n"),
        ProtoError::Malformed("header block without NATS/1.0")
    );
    assert_eq!(
        parse(b"MSG a 1 11\r\n", 10).unwrap_err(),
        ProtoError::PayloadTooLarge(11)
    );
    let long = vec![b'A'; LINE_MAX];
    assert_eq!(refused(&long), ProtoError::LineTooLong);
    assert!(!ProtoError::LineTooLong.to_string().is_empty());
}

#[test]
fn encoders_write_the_documented_wire_form() {
    let mut out = Vec::new();
    connect(&mut out, "{}");
    publish(&mut out, "a.b", None, b"xy");
    publish(&mut out, "a", Some(b"r.1"), b"");
    hpublish(
        &mut out,
        "k",
        Some(b"r"),
        &[("Nats-Expected-Last-Subject-Sequence", b"0")],
        b"v",
    );
    subscribe(&mut out, "a.>", 12);
    unsubscribe(&mut out, 12);
    ping(&mut out);
    pong(&mut out);
    let hdr = "NATS/1.0\r\nNats-Expected-Last-Subject-Sequence: 0\r\n\r\n";
    let want = format!(
        "CONNECT {{}}\r\nPUB a.b 2\r\nxy\r\nPUB a r.1 0\r\n\r\nHPUB k r {} {}\r\n{hdr}v\r\n\
         SUB a.> 12\r\nUNSUB 12\r\nPING\r\nPONG\r\n",
        hdr.len(),
        hdr.len() + 1
    );
    assert_eq!(String::from_utf8(out).unwrap(), want);
}

#[test]
fn encoding_into_a_grown_buffer_does_not_reallocate() {
    let mut out = Vec::with_capacity(4_096);
    let before = out.as_ptr();
    for _ in 0..20 {
        out.clear();
        publish(&mut out, "pricewire.price.EURUSD", None, &[7; 84]);
        hpublish(
            &mut out,
            "$KV.B.leader",
            Some(b"_INBOX.abc.99"),
            &[("K", b"18446744073709551615")],
            b"core",
        );
    }
    assert_eq!(out.as_ptr(), before);
    let mut n = Vec::new();
    put_u64(&mut n, u64::MAX);
    put_u64(&mut n, 0);
    assert_eq!(n, b"184467440737095516150");
}

#[test]
fn a_read_buffer_keeps_a_split_op_and_compacts_when_full() {
    let mut rb = ReadBuf::new(16);
    let cap = rb.spare().len();
    assert_eq!(cap, 16 + LINE_MAX + 4);
    let wire = b"MSG a 1 3\r\nabc\r\nPI";
    rb.spare()[..wire.len()].copy_from_slice(wire);
    rb.filled(wire.len());
    let (_, n) = parse(rb.data(), 16).unwrap().unwrap();
    rb.consume(n);
    assert_eq!(rb.data(), b"PI");
    rb.spare()[..4].copy_from_slice(b"NG\r\n");
    rb.filled(4);
    assert_eq!(parse(rb.data(), 16).unwrap().unwrap().0, Op::Ping);
}

/// Every op in `bytes`, as text, up to the first error (which is included).
fn ops_whole(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        match parse(&bytes[at..], 64) {
            Ok(Some((op, n))) => {
                assert!(n > 0 && at + n <= bytes.len());
                out.push(format!("{op:?}"));
                at += n;
            }
            Ok(None) => return out,
            Err(e) => {
                out.push(format!("{e:?}"));
                return out;
            }
        }
    }
}

/// The same, arriving through a small [`ReadBuf`] in chunks.
fn ops_split(bytes: &[u8], cuts: &[usize]) -> Vec<String> {
    let mut rb = ReadBuf::new(64);
    let mut out = Vec::new();
    let mut fed = 0;
    let mut cuts = cuts
        .iter()
        .copied()
        .filter(|&c| c < bytes.len())
        .collect::<Vec<_>>();
    cuts.sort_unstable();
    cuts.push(bytes.len());
    for cut in cuts {
        if cut <= fed {
            continue;
        }
        let chunk = &bytes[fed..cut];
        let room = rb.spare();
        let n = chunk.len().min(room.len());
        room[..n].copy_from_slice(&chunk[..n]);
        rb.filled(n);
        fed += n;
        loop {
            match parse(rb.data(), 64) {
                Ok(Some((op, n))) => {
                    out.push(format!("{op:?}"));
                    rb.consume(n);
                }
                Ok(None) => break,
                Err(e) => {
                    out.push(format!("{e:?}"));
                    return out;
                }
            }
        }
    }
    out
}

fn op_text() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"PING\r\n".to_vec()),
        Just(b"PONG\r\n".to_vec()),
        Just(b"+OK\r\n".to_vec()),
        Just(b"-ERR 'x'\r\n".to_vec()),
        Just(b"INFO {}\r\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(|p| {
            [format!("MSG s.t 9 {}\r\n", p.len()).as_bytes(), &p, b"\r\n"].concat()
        }),
        proptest::collection::vec(any::<u8>(), 0..20).prop_map(|p| {
            let h = b"NATS/1.0 404\r\nA: b\r\n\r\n";
            let line = format!("HMSG s 2 r {} {}\r\n", h.len(), h.len() + p.len());
            [line.as_bytes(), h, &p, b"\r\n"].concat()
        }),
        proptest::collection::vec(any::<u8>(), 0..12),
    ]
}

proptest! {
    #[test]
    fn random_bytes_never_panic_and_splitting_changes_nothing(
        ops in proptest::collection::vec(op_text(), 0..12),
        cuts in proptest::collection::vec(0usize..600, 0..10),
    ) {
        let bytes = ops.concat();
        prop_assert_eq!(ops_split(&bytes, &cuts), ops_whole(&bytes));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = ops_whole(&bytes);
        let _ = header_status(&bytes);
        let _ = header(&bytes, "Nats-Sequence");
    }
}
