//! A FIX counterparty that answers with hostile Text (58): the tests that
//! check outside strings stay escaped in pricewire's logs
//! (tests/it/log_json.rs, tests/it/auth_records.rs).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use pricewire::feed::fix::codec::{self, Encoder, Header};

/// The value of `tag` in one FIX message (`tag=value` fields).
pub fn field<'a>(msg: &'a [u8], tag: &str) -> Option<&'a [u8]> {
    let want = format!("{tag}=");
    msg.split(|&b| b == 1)
        .find(|f| f.starts_with(want.as_bytes()))
        .map(|f| &f[want.len()..])
}

/// Accepts one session on `listener`: answers the Logon, answers the
/// first MarketDataRequest with a MarketDataRequestReject whose Text is
/// `reject_text`, then, with `logout_text`, logs out with that Text.
/// Returns when done; panics if pricewire closes before its request.
pub fn counterparty(
    listener: TcpListener,
    read_timeout: Duration,
    reject_text: &str,
    logout_text: Option<&str>,
) {
    let (mut s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(read_timeout)).unwrap();
    let (mut enc, mut seq) = (Encoder::new(4096), 1);
    let mut send = |s: &mut TcpStream, kind: &[u8], body: &dyn Fn(&mut Encoder)| {
        let h = Header {
            sender_comp_id: b"LPSIM",
            target_comp_id: b"PRICEWIRE",
            seq,
            sending_time_utc_ns: pricewire::clock::wall_ns(),
        };
        seq += 1;
        enc.begin(kind, &h);
        body(&mut enc);
        s.write_all(enc.finish().unwrap()).unwrap();
    };
    let (mut buf, mut len) = (vec![0u8; 65_536], 0);
    loop {
        while let Ok(Some(n)) = codec::frame_len(&buf[..len]) {
            let msg = buf[..n].to_vec();
            buf.copy_within(n..len, 0);
            len -= n;
            match field(&msg, "35") {
                Some(b"A") => send(&mut s, b"A", &|e| {
                    e.uint(98, 0);
                    e.uint(108, 30);
                }),
                Some(b"V") => {
                    let id = field(&msg, "262").unwrap().to_vec();
                    send(&mut s, b"Y", &|e| {
                        e.bytes(262, &id);
                        e.uint(281, 0);
                        e.bytes(58, reject_text.as_bytes());
                    });
                    if let Some(text) = logout_text {
                        send(&mut s, b"5", &|e| e.bytes(58, text.as_bytes()));
                    }
                    return;
                }
                _ => {}
            }
        }
        match s.read(&mut buf[len..]) {
            Ok(0) | Err(_) => panic!("the binary closed before its MarketDataRequest"),
            Ok(k) => len += k,
        }
    }
}
